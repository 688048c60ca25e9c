"""Address checks inside txs: an invalid address is a tx error naming the field."""

from __future__ import annotations

from dilochain.chain.errors import TxError, codes
from dilochain.protocol.address import decode_address


def require_address(address: str, field: str) -> str:
    """Check that ``address`` is a valid account address, raising a tx error naming ``field``."""
    try:
        decode_address(address)
    except ValueError as err:
        raise TxError(codes.INVALID_ADDRESS, f"{field}: {err}") from None
    return address

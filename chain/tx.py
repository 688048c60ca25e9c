"""Decoding and stateless validation of Cosmos SDK txs (``cosmos.tx.v1beta1.TxRaw``)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import AuthInfo, TxBody, TxRaw
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from dilochain.chain.context import MsgSpec
from dilochain.chain.errors import TxError, codes
from dilochain.protocol.address import decode_address
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import AuthParams


@dataclass(frozen=True)
class DecodedTx:
    """A tx whose bytes parsed and whose messages are all known to the chain."""

    raw: bytes
    hash: bytes
    body_bytes: bytes
    auth_info_bytes: bytes
    body: TxBody
    auth_info: AuthInfo
    signatures: list[bytes]
    msgs: list[tuple[MsgSpec, Message]]
    signers: list[str]

    @property
    def gas_limit(self) -> int:
        """Gas the tx pays for."""
        return self.auth_info.fee.gas_limit


def _parse(message: type[Message], data: bytes, what: str) -> Message:
    try:
        return message.FromString(data)
    except Exception as err:  # protobuf raises DecodeError and, for bad UTF-8, others
        raise TxError(codes.TX_DECODE, f"{what}: {err}: tx parse error") from None


def _canonical_tx_raw(raw: bytes) -> TxRaw:
    """``raw`` as a ``TxRaw`` that encodes back to exactly ``raw``. The signatures cover the
    body and auth info bytes, not the envelope: a field appended, repeated or reordered would
    make another valid tx of the same signed content under another hash, which a relay could
    get included first (the signer's own tx then fails its sequence)."""
    tx_raw = _parse(TxRaw, raw, "tx")
    unknown = sorted({field.field_number for field in UnknownFieldSet(tx_raw)})
    if unknown:
        problem = f"unknown field(s) {unknown[:8]} in TxRaw"
    elif tx_raw.SerializeToString() != raw:
        problem = (
            "TxRaw is not canonically encoded (a field repeated, out of order, empty or padded)"
        )
    else:
        return tx_raw
    raise TxError(codes.TX_DECODE, f"tx: {problem}: tx parse error")


def _refuse_unknown(message: Message, what: str) -> None:
    """Refuse a field the chain does not know anywhere in ``message``. The Cosmos SDK's decoder
    refuses them too, but for a body's "non-critical" ones, for extensions this chain does not
    have; signed padding of unknown fields otherwise rode in every tx, paid for only as bytes.
    Found in C, by size (walking them in Python cost 400 ms for a 660 KB tx of them)."""
    bare = type(message)()
    bare.CopyFrom(message)
    bare.DiscardUnknownFields()
    if bare.ByteSize() != message.ByteSize():
        raise TxError(codes.TX_DECODE, f"{what}: fields the chain does not know: tx parse error")


MAX_GAS_WANTED = (1 << 63) - 1  # as the Cosmos SDK's ante handler: gas is an int64 downstream


def decode_tx(raw: bytes, registry: dict[str, MsgSpec], params: AuthParams) -> DecodedTx:
    """Parse ``raw`` and run the SDK's stateless checks; raises :class:`TxError` with a code."""
    if len(raw) > params.max_tx_bytes:
        raise TxError(codes.TX_TOO_LARGE, f"tx too large: {len(raw)} > {params.max_tx_bytes}")
    tx_raw = _canonical_tx_raw(raw)
    body = _parse(TxBody, tx_raw.body_bytes, "body")
    auth_info = _parse(AuthInfo, tx_raw.auth_info_bytes, "auth_info")
    _refuse_unknown(body, "body")
    _refuse_unknown(auth_info, "auth_info")
    if auth_info.fee.gas_limit > MAX_GAS_WANTED:
        raise TxError(codes.INVALID_GAS_LIMIT, f"gas limit {auth_info.fee.gas_limit} is above "
                                               f"the maximum {MAX_GAS_WANTED}")  # fmt: skip
    if not body.messages:
        raise TxError(codes.INVALID_REQUEST, "must contain at least one message")
    if len(body.messages) > params.max_msgs_per_tx:
        raise TxError(codes.INVALID_REQUEST, f"{len(body.messages)} messages; at most "
                                             f"{params.max_msgs_per_tx} per tx")  # fmt: skip
    if len(body.memo) > params.max_memo_characters:
        raise TxError(codes.MEMO_TOO_LARGE, f"memo longer than {params.max_memo_characters}")
    if body.extension_options or body.non_critical_extension_options:
        raise TxError(codes.UNKNOWN_REQUEST, "tx extension options are not supported")
    msgs: list[tuple[MsgSpec, Message]] = []
    signers: list[str] = []
    for index, packed in enumerate(body.messages):
        spec = registry.get(packed.type_url)
        if spec is None:
            raise TxError(
                codes.TX_DECODE, f"unable to resolve type URL {packed.type_url}: tx parse error"
            )
        msg = _parse(spec.message, packed.value, f"message {index}")
        _refuse_unknown(msg, f"message {index}")
        signer = getattr(msg, spec.signer_field)
        try:
            decode_address(signer)
        except ValueError as err:
            raise TxError(codes.INVALID_ADDRESS, f"message {index} signer: {err}") from None
        if signer not in signers:
            signers.append(signer)
        msgs.append((spec, msg))
    if not tx_raw.signatures:
        raise TxError(codes.NO_SIGNATURES, "no signatures supplied")
    if len(tx_raw.signatures) != len(signers) or len(auth_info.signer_infos) != len(signers):
        raise TxError(
            codes.UNAUTHORIZED,
            f"wrong number of signers; expected {len(signers)}, got "
            f"{len(tx_raw.signatures)} signatures and {len(auth_info.signer_infos)} signer infos",
        )
    if auth_info.fee.payer or auth_info.fee.granter:
        raise TxError(codes.INVALID_REQUEST, "fee payer and fee granter are not supported")
    return DecodedTx(
        raw=raw,
        hash=tx_hash(raw),
        body_bytes=tx_raw.body_bytes,
        auth_info_bytes=tx_raw.auth_info_bytes,
        body=body,
        auth_info=auth_info,
        signatures=list(tx_raw.signatures),
        msgs=msgs,
        signers=signers,
    )


class DecodedTxCache:
    """Txs that CheckTx admitted, decoded once and reused by the mempool's rechecks,
    PrepareProposal and FinalizeBlock (a tx's decoding depends on its bytes and the fixed
    genesis params alone).

    Only admitted txs are kept (:meth:`keep`), so what fills it costs a fee-paying mempool
    slot; it holds at most ``size`` txs and ``max_bytes`` of tx bytes, least recently used
    first out, and a committed block's txs are dropped.
    """

    def __init__(
        self, registry: dict[str, MsgSpec], params: AuthParams, size: int = 50_000,
        max_bytes: int = 64 << 20,
    ):  # fmt: skip
        self._registry = registry
        self._params = params
        self._size = size
        self._max_bytes = max_bytes
        self._bytes = 0
        self._decoded: OrderedDict[bytes, DecodedTx] = OrderedDict()

    def __len__(self) -> int:
        return len(self._decoded)

    def decode(self, raw: bytes) -> DecodedTx:
        """:func:`decode_tx` of ``raw``, from the cache when it holds it (nothing is kept)."""
        tx = self._decoded.get(raw)
        if tx is not None:
            self._decoded.move_to_end(raw)
            return tx
        return decode_tx(raw, self._registry, self._params)

    def keep(self, tx: DecodedTx) -> None:
        """Remember ``tx`` (admitted to the mempool)."""
        if tx.raw in self._decoded:
            return
        self._decoded[tx.raw] = tx
        self._bytes += len(tx.raw)
        while len(self._decoded) > self._size or self._bytes > self._max_bytes:
            self._bytes -= len(self._decoded.popitem(last=False)[0])

    def discard(self, raws: list[bytes]) -> None:
        """Forget ``raws`` (the txs of a committed block)."""
        for raw in raws:
            if self._decoded.pop(raw, None) is not None:
                self._bytes -= len(raw)

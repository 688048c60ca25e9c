"""secp256k1 signature checks on the chain side, with coincurve (bitcoin-core's libsecp256k1).

libsecp256k1 verifies about ten times faster than OpenSSL's generic curve code, which is what
lets CheckTx keep up with thousands of txs per second.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from coincurve import PublicKey
from coincurve.ecdsa import cdata_to_der, deserialize_compact

SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def _sha256(message: bytes) -> bytes:
    return hashlib.sha256(message).digest()


@lru_cache(maxsize=65536)
def _public_key(encoded: bytes) -> PublicKey | None:
    try:
        return PublicKey(encoded)
    except ValueError:
        return None


def valid_public_key(encoded: bytes) -> bool:
    """Whether ``encoded`` is a valid compressed secp256k1 point."""
    return len(encoded) == 33 and _public_key(encoded) is not None


def verify_secp256k1(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Check a Cosmos secp256k1 signature: 64 bytes ``r || s`` over sha256(message), low-S only."""
    if len(signature) != 64 or not valid_public_key(public_key):
        return False
    r = int.from_bytes(signature[:32], "big")
    s = int.from_bytes(signature[32:], "big")
    if not (0 < r < SECP256K1_ORDER and 0 < s <= SECP256K1_ORDER // 2):
        return False
    der = cdata_to_der(deserialize_compact(signature))
    return _public_key(public_key).verify(der, message, hasher=_sha256)

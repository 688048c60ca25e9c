"""secp256k1 signature checks on the chain side, with the ``cryptography`` package (OpenSSL)."""

from __future__ import annotations

from functools import lru_cache

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_ECDSA_SHA256 = ec.ECDSA(hashes.SHA256())


@lru_cache(maxsize=65536)
def _public_key(encoded: bytes) -> ec.EllipticCurvePublicKey | None:
    try:
        return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), encoded)
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
    try:
        _public_key(public_key).verify(encode_dss_signature(r, s), message, _ECDSA_SHA256)
    except InvalidSignature:
        return False
    return True

"""The challenge beacon's encoding, shared by the chain (which checks and mixes) and verifiers
(which commit and open): a RANDAO-style commit-reveal mixed with a block hash no one could know
the secrets of."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

SECRET_BYTES = 32
_SEED_TAG = b"dilochain-beacon/v1"


def commitment(secret: bytes, verifier: str) -> bytes:
    """What a verifier commits to: sha256(secret || its address). The address binds the
    commitment to its owner, so copying another verifier's commitment cannot be opened."""
    return hashlib.sha256(secret + verifier.encode()).digest()


def mix(anchor: bytes, opened: Iterable[tuple[str, bytes]]) -> bytes:
    """The round's seed: the anchor block hash and every opened (verifier, secret), in address
    order (hashed, not XORed, so equal secrets do not cancel out)."""
    digest = hashlib.sha256(_SEED_TAG + anchor)
    for verifier, secret in sorted(opened):
        digest.update(verifier.encode() + b"\x00" + secret)
    return digest.digest()

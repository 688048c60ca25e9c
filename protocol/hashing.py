"""Content hashes: what the artifact store addresses bytes by and the chain commits to."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

Buffer = bytes | memoryview  # bytes, or a view of some (a tensor's memory, say)
HASH_BYTES = 32  # a content hash's length


def content_hash(data: Buffer) -> bytes:
    """sha256 of ``data``: the address of an artifact (checkpoint, pseudo-gradient, global
    state) and the leaf a checkpoint contributes to a round's Merkle root."""
    return hashlib.sha256(data).digest()


def content_hash_parts(parts: Iterable[Buffer]) -> bytes:
    """:func:`content_hash` of the concatenation of ``parts``, without concatenating them."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.digest()


def tx_hash(raw: bytes) -> bytes:
    """The tx hash CometBFT and the SDK use: sha256 of the raw tx bytes."""
    return hashlib.sha256(raw).digest()

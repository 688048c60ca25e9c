"""Content hashes: what the artifact store addresses bytes by and the chain commits to."""

from __future__ import annotations

import hashlib


def content_hash(data: bytes) -> bytes:
    """sha256 of ``data``: the address of an artifact (checkpoint, pseudo-gradient, global
    state) and the leaf a checkpoint contributes to a round's Merkle root."""
    return hashlib.sha256(data).digest()


def tx_hash(raw: bytes) -> bytes:
    """The tx hash CometBFT and the SDK use: sha256 of the raw tx bytes."""
    return hashlib.sha256(raw).digest()

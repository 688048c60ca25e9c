"""RFC 6962 Merkle trees over 32-byte hashes, with inclusion proofs (as CometBFT's ``merkle``).

Leaves are domain-separated from inner nodes (``0x00`` / ``0x01`` prefixes), and a tree of n
leaves splits at the largest power of two below n. Shared by the node (which commits a root
over its checkpoint hashes) and the chain (which checks revealed checkpoints against it).
"""

from __future__ import annotations

import hashlib


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _inner(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def merkle_root(leaves: list[bytes]) -> bytes:
    """Root over ``leaves`` (sha256 of nothing for an empty list)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return _leaf(leaves[0])
    k = _split(len(leaves))
    return _inner(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def merkle_proof(leaves: list[bytes], index: int) -> list[bytes]:
    """The sibling hashes ("aunts") from leaf ``index`` up to the root."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf {index} of {len(leaves)}")
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return [*merkle_proof(leaves[:k], index), merkle_root(leaves[k:])]
    return [*merkle_proof(leaves[k:], index - k), merkle_root(leaves[:k])]


def _root_from_proof(leaf_hash: bytes, index: int, total: int, aunts: list[bytes]) -> bytes | None:
    if total == 1:
        return leaf_hash if not aunts else None
    if not aunts:
        return None
    k = _split(total)
    if index < k:
        left = _root_from_proof(leaf_hash, index, k, aunts[:-1])
        return None if left is None else _inner(left, aunts[-1])
    right = _root_from_proof(leaf_hash, index - k, total - k, aunts[:-1])
    return None if right is None else _inner(aunts[-1], right)


def verify_merkle_proof(
    root: bytes, leaf: bytes, index: int, total: int, aunts: list[bytes]
) -> bool:
    """Whether ``leaf`` is leaf ``index`` of ``total`` under ``root``.

    As in RFC 6962, a proof does not bind ``total``: callers take it from what they know (the
    chain from the run's config: one leaf per checkpoint of a round).
    """
    if not 0 <= index < total:
        return False
    return _root_from_proof(_leaf(leaf), index, total, list(aunts)) == root

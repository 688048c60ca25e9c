"""The app hash: the root of a sparse Merkle tree over the whole state, and ICS-23 proofs in it.

Every state key sits at the path ``sha256(key)`` (256 bits, most significant first, 0 = left);
a leaf is ``sha256(0x00 ‖ sha256(key) ‖ sha256(value))``, an inner node
``sha256(0x01 ‖ left ‖ right)``, an empty subtree 32 zero bytes, and a subtree holding one leaf
is that leaf (the tree is compact: a leaf sits where its path first leaves every other). This is
the tree ICS-23's ``SmtSpec`` describes (:mod:`dilochain.protocol.state_proof` verifies its
proofs), so any Cosmos light client library can check a query against a header's app hash.

The tree lives in memory and is rebuilt from the store when the node starts, which is also the
integrity check: the root of what is on disk must be the app hash the node committed. Its
inner hashes are cached by position; a block's writes drop the cached hashes on their paths
and the root is recomputed through the rest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from cosmpy.protos.cosmos.ics23.v1 import proofs_pb2 as ics23
from sortedcontainers import SortedList

EMPTY = bytes(32)
BITS = 256


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def leaf_hash(key: bytes, value: bytes) -> bytes:
    """The leaf of ``key`` holding ``value``."""
    return _sha(b"\x00" + _sha(key) + _sha(value))


def _path(key: bytes) -> int:
    return int.from_bytes(_sha(key), "big")


LEAF_OP = ics23.LeafOp(
    hash=ics23.SHA256, prehash_key=ics23.SHA256, prehash_value=ics23.SHA256,
    length=ics23.NO_PREFIX, prefix=b"\x00",
)  # fmt: skip


class StateTree:
    """A compact sparse Merkle tree over (key, value) pairs, with proofs."""

    def __init__(self, items: Iterable[tuple[bytes, bytes]] = ()):
        self._leaves: dict[int, tuple[bytes, bytes]] = {}  # path -> (leaf hash, key)
        self._inner: dict[int, bytes] = {}  # position -> hash, for subtrees of 2+ leaves
        for key, value in items:
            path = _path(key)
            self._leaves[path] = (leaf_hash(key, value), key)
        # Every key's path, as an int, sorted: a new key is O(log n) (a list's insert moved
        # every later path: 290 µs a new key at 1M keys).
        self._paths = SortedList(self._leaves)
        self._root: bytes | None = None

    def __len__(self) -> int:
        return len(self._paths)

    @property
    def root(self) -> bytes:
        """The root hash (32 zero bytes for an empty tree)."""
        if self._root is None:
            self._root = self._hash(1, 0, 0, len(self._paths))
        return self._root

    def update(self, writes: dict[bytes, bytes | None]) -> bytes:
        """Apply writes (None deletes) and return the new root."""
        dropped: set[int] = set()
        for key, value in writes.items():
            path = _path(key)
            old = self._leaves.get(path)
            if value is None:
                if old is None:
                    continue
                del self._leaves[path]
                self._paths.remove(path)
            else:
                new = leaf_hash(key, value)
                if old is not None and old[0] == new:
                    continue
                if old is None:
                    self._paths.add(path)
                self._leaves[path] = (new, key)
            self._drop_path(path, dropped)
            self._root = None
        return self.root

    def _drop_path(self, path: int, dropped: set[int]) -> None:
        """Forget the cached hashes of every inner node above ``path`` (they are contiguous
        from the root; positions another write of the batch dropped are passed through)."""
        for depth in range(BITS):
            position = (1 << depth) | (path >> (BITS - depth))
            if position in dropped:
                continue
            if self._inner.pop(position, None) is None:
                return
            dropped.add(position)

    def _split(self, position: int, depth: int) -> int:
        """The first path of the right child of ``position`` (at ``depth``)."""
        return (2 * (position ^ (1 << depth)) + 1) << (BITS - 1 - depth)

    def _hash(self, position: int, depth: int, lo: int, hi: int) -> bytes:
        """The hash of the subtree at ``position``, whose paths are ``_paths[lo:hi]`` (so the
        paths below a split are ``_paths[lo:bisect(split)]``)."""
        if hi - lo < 2:
            return self._leaves[self._paths[lo]][0] if hi > lo else EMPTY
        cached = self._inner.get(position)
        if cached is not None:
            return cached
        split = (2 * (position ^ (1 << depth)) + 1) << (BITS - 1 - depth)  # _split, inlined
        mid = self._paths.bisect_left(split)
        left = self._hash(2 * position, depth + 1, lo, mid)
        right = self._hash(2 * position + 1, depth + 1, mid, hi)
        value = _sha(b"\x01" + left + right)
        self._inner[position] = value
        return value

    # ---- proofs ------------------------------------------------------------------------------
    def existence(self, key: bytes, value: bytes) -> ics23.ExistenceProof:
        """The proof that ``key`` holds ``value`` (which must be its value in the tree)."""
        path = _path(key)
        if self._leaves.get(path, (None,))[0] != leaf_hash(key, value):
            raise KeyError(f"{key!r} does not hold that value in the tree")
        self.root  # noqa: B018 - every inner hash cached from the root down, before any sibling
        steps = []
        position, depth, lo, hi = 1, 0, 0, len(self._paths)
        while hi - lo > 1:
            split = self._split(position, depth)
            mid = self._paths.bisect_left(split)
            if path < split:
                sibling = self._hash(2 * position + 1, depth + 1, mid, hi)
                steps.append(ics23.InnerOp(hash=ics23.SHA256, prefix=b"\x01", suffix=sibling))
                position, hi = 2 * position, mid
            else:
                sibling = self._hash(2 * position, depth + 1, lo, mid)
                steps.append(ics23.InnerOp(hash=ics23.SHA256, prefix=b"\x01" + sibling))
                position, lo = 2 * position + 1, mid
            depth += 1
        return ics23.ExistenceProof(key=key, value=value, leaf=LEAF_OP, path=steps[::-1])

    def neighbours(self, key: bytes) -> tuple[bytes | None, bytes | None]:
        """The keys next to where ``key`` (absent) would sit, in path order (None at an end)."""
        index = self._paths.bisect_left(_path(key))
        left = self._leaves[self._paths[index - 1]][1] if index > 0 else None
        right = self._leaves[self._paths[index]][1] if index < len(self._paths) else None
        return left, right

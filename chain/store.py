"""The chain's embedded store: SQLite in WAL mode, one transaction per committed block.

Tables: ``state`` (the key-value state of all modules), ``blocks`` (hash, time and proposer
of each block) and ``meta`` (last height and app hash). Txs and their results are CometBFT's
(its block store and tx index), as in the Cosmos SDK. A block's state writes and its block row
land in a single SQLite transaction, so a ``kill -9`` at any moment leaves either all of a
block or none of it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blocks (
    height INTEGER PRIMARY KEY, hash BLOB NOT NULL, time_ns INTEGER NOT NULL,
    proposer BLOB NOT NULL
);
"""


@dataclass(frozen=True)
class StoredBlock:
    """What the application keeps of a block CometBFT decided (the block itself is CometBFT's)."""

    height: int
    hash: bytes
    time_ns: int
    proposer: bytes


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key that starts with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _cached_size(key: bytes, value: bytes | None) -> int:
    """What one cache entry is counted as: its bytes and the objects around them."""
    return len(key) + len(value or b"") + ChainStore.CACHE_ENTRY_OVERHEAD


class StoreError(Exception):
    """The database file is not a usable chain store."""


class ChainStore:
    """SQLite-backed store; safe to use from several threads (one connection behind a lock)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._db.execute("SELECT count(*) FROM meta").fetchone()
        except sqlite3.DatabaseError as err:
            self._db.close()
            raise StoreError(
                f"{path} is not a usable chain database ({err}); restore it from a backup, or "
                "move it away together with CometBFT's data/ to resync from peers"
            ) from None
        # Committed values (None: absent) by key, oldest first; counted by _cached_size.
        self._cache: OrderedDict[bytes, bytes | None] = OrderedDict()
        self.cached_bytes = 0
        self._meta: dict[str, bytes | None] = {}

    # The read cache's bound: keys and values, each entry counted with what its dict slot and
    # two bytes objects cost; past it the oldest entries go first.
    CACHE_LIMIT_BYTES = 128 << 20
    CACHE_ENTRY_OVERHEAD = 200

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # ---- state -------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, kept in the read cache for the next read (the reads
        of blocks and of the mempool's checks)."""
        try:
            return self._cache[key]
        except KeyError:
            pass
        with self._lock:  # read and cache under the lock a commit updates the cache under
            value = self._select(key)
            self._remember(key, value)
        return value

    def peek(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, from the read cache if it is there but never added
        to it: what queries read, so a stranger's keys pin no memory."""
        try:
            return self._cache[key]
        except KeyError:
            pass
        with self._lock:
            return self._select(key)

    def query_view(self) -> QueryReads:
        """The committed state as queries read it (:meth:`peek`, :meth:`iterate`)."""
        return QueryReads(self)

    def _select(self, key: bytes) -> bytes | None:
        row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _remember(self, key: bytes, value: bytes | None) -> None:
        """Cache ``key``'s committed value, dropping the oldest entries past the bound."""
        if key in self._cache:
            self.cached_bytes -= _cached_size(key, self._cache.pop(key))
        self._cache[key] = value
        self.cached_bytes += _cached_size(key, value)
        while self.cached_bytes > self.CACHE_LIMIT_BYTES:
            self.cached_bytes -= _cached_size(*self._cache.popitem(last=False))

    # Rows per SQLite read of an iteration: a few first (a page of one item, the head of a
    # queue), then doubling, so what an iteration reads is about what its caller takes.
    _FIRST_CHUNK, _MAX_CHUNK = 16, 1024

    def iterate(
        self, prefix: bytes, start: bytes = b"", values: bool = True
    ) -> Iterator[tuple[bytes, bytes]]:
        """Committed (key, value) pairs whose key starts with ``prefix``, in key order, from
        ``start`` on (a page of a list query), read lazily in key-ordered chunks: a commit
        between two chunks shows in the later ones, so take them within one application
        call. Without ``values`` each value is b"" and none is read (a large value lies in
        pages of its own, which walking past it then never touches)."""
        return self._chunks(max(prefix, start), _prefix_end(prefix), values)

    def _chunks(self, low: bytes, end: bytes | None, values: bool) -> Iterator[tuple[bytes, bytes]]:
        size = self._FIRST_CHUNK
        while rows := self._read_chunk(low, end, size, values):
            yield from rows
            if len(rows) < size:
                return
            low = rows[-1][0] + b"\x00"  # the smallest key after the last one read
            size = min(2 * size, self._MAX_CHUNK)

    def _read_chunk(
        self, low: bytes, end: bytes | None, size: int, values: bool
    ) -> list[tuple[bytes, bytes]]:
        """At most ``size`` rows from ``low`` (inclusive) to ``end`` (exclusive; None: none)."""
        taken = "value" if values else "x''"
        with self._lock:
            if end is None:
                return self._db.execute(
                    f"SELECT key, {taken} FROM state WHERE key >= ? ORDER BY key LIMIT ?",
                    (low, size),
                ).fetchall()
            return self._db.execute(
                f"SELECT key, {taken} FROM state WHERE key >= ? AND key < ? ORDER BY key LIMIT ?",
                (low, end, size),
            ).fetchall()

    # ---- meta --------------------------------------------------------------------------------
    def meta(self, key: str) -> bytes | None:
        """A metadata value (``height``, ``app_hash``, ``genesis_hash``…), cached after a read."""
        if key in self._meta:
            return self._meta[key]
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            self._meta[key] = row[0] if row else None
        return self._meta[key]

    @property
    def height(self) -> int:
        """Height of the last committed block (0 before the first block)."""
        raw = self.meta("height")
        return int(raw) if raw is not None else 0

    # ---- commits -----------------------------------------------------------------------------
    def commit(
        self,
        writes: dict[bytes, bytes | None],
        meta: dict[str, bytes],
        block: StoredBlock | None = None,
    ) -> None:
        """Atomically apply state ``writes``, ``meta`` updates and a block."""
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.executemany(
                    "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)",
                    [(k, v) for k, v in writes.items() if v is not None],
                )
                cur.executemany(
                    "DELETE FROM state WHERE key = ?",
                    [(k,) for k, v in writes.items() if v is None],
                )
                cur.executemany(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(meta.items())
                )
                if block is not None:
                    cur.execute(
                        "INSERT INTO blocks (height, hash, time_ns, proposer) VALUES (?, ?, ?, ?)",
                        (block.height, block.hash, block.time_ns, block.proposer),
                    )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            for key, value in writes.items():
                if key in self._cache:
                    self._remember(key, value)
            self._meta.update(meta)

    # ---- state sync --------------------------------------------------------------------------
    def snapshot_rows(self) -> Iterator[tuple[bytes, bytes]]:
        """Every state row as committed now, in key order, read on a connection of its own
        (WAL: commits go on meanwhile, and the read keeps seeing this moment's state)."""
        reader = sqlite3.connect(self.path, check_same_thread=False)
        cursor = reader.execute("SELECT key, value FROM state ORDER BY key")  # the read begins

        def rows() -> Iterator[tuple[bytes, bytes]]:
            try:
                while batch := cursor.fetchmany(1024):
                    yield from batch
            finally:
                reader.close()

        return rows()

    def clear_state(self) -> None:
        """Delete every state row (a restore that did not verify)."""
        with self._lock:
            self._db.execute("DELETE FROM state")
            self._cache.clear()
            self.cached_bytes = 0

    # ---- blocks and txs ----------------------------------------------------------------------
    def block(self, height: int) -> StoredBlock | None:
        """The committed block at ``height``."""
        with self._lock:
            row = self._db.execute(
                "SELECT height, hash, time_ns, proposer FROM blocks WHERE height = ?", (height,)
            ).fetchone()
        return StoredBlock(*row) if row else None


class QueryReads:
    """A :class:`ChainStore`'s committed state read without filling its cache (queries)."""

    def __init__(self, store: ChainStore):
        self._store = store

    def get(self, key: bytes) -> bytes | None:
        """:meth:`ChainStore.peek`."""
        return self._store.peek(key)

    def iterate(
        self, prefix: bytes, start: bytes = b"", values: bool = True
    ) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`ChainStore.iterate`."""
        return self._store.iterate(prefix, start, values)

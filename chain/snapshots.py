"""State-sync snapshots: the application's whole state at a height, cut into chunks, which a new
node restores instead of replaying every block (ABCI's ListSnapshots, LoadSnapshotChunk,
OfferSnapshot and ApplySnapshotChunk, answered by ``chain.abci``).

A snapshot of height H holds every (key, value) of the state committed at H, in key order, in
chunks of about :data:`CHUNK_BYTES`; a chunk is a run of records (key length and value length
as 4-byte big-endian integers, each followed by its bytes). The snapshot's metadata is its
chunks' SHA-256 digests and its hash the SHA-256 of the metadata, so a restoring node checks
each chunk as it arrives and asks another peer for one that does not match. The restored state
is accepted only when its Merkle root is the app hash CometBFT's light client verified for H;
the state commits to the block's own height, time and hash (``app.BLOCK_KEY``), so nothing a
peer sends is trusted beyond what that hash proves.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FORMAT = 1
CHUNK_BYTES = 1 << 20
_LENGTHS = struct.Struct(">II")
# The longest key a module writes is a balance's, bal/<address>/<denom>: 4 + 63 (a 32-byte
# address) + 1 + 128 (the longest denom) = 196 bytes; a longer key is a hostile snapshot's.
MAX_KEY_BYTES = 1 << 10
MAX_VALUE_BYTES = 4 << 20  # far above any record a module writes
# A chunk ends with the row that passes CHUNK_BYTES: no honest one is larger than this.
MAX_CHUNK_BYTES = CHUNK_BYTES + _LENGTHS.size + MAX_KEY_BYTES + MAX_VALUE_BYTES
MAX_CHUNKS = 1 << 12  # 4 GiB of state in CHUNK_BYTES chunks: more is a hostile offer
MAX_STATE_BYTES = MAX_CHUNKS * CHUNK_BYTES  # what a restore writes at most, in chunk bytes


@dataclass(frozen=True)
class SnapshotInfo:
    """What ListSnapshots says of one snapshot."""

    height: int
    chunks: int
    hash: bytes  # sha256(metadata)
    metadata: bytes  # the chunks' sha256 digests, in order


def encode_chunks(rows: Iterable[tuple[bytes, bytes]]) -> Iterator[bytes]:
    """``rows`` (in key order) as chunks of about :data:`CHUNK_BYTES` each (at least one)."""
    parts: list[bytes] = []
    size, chunks = 0, 0
    for key, value in rows:
        parts += [_LENGTHS.pack(len(key), len(value)), key, value]
        size += _LENGTHS.size + len(key) + len(value)
        if size >= CHUNK_BYTES:
            yield b"".join(parts)
            parts, size, chunks = [], 0, chunks + 1
    if parts or not chunks:  # never a trailing empty chunk: CometBFT cannot carry one
        yield b"".join(parts)


def decode_chunk(data: bytes) -> list[tuple[bytes, bytes]]:
    """The records of a chunk; raises ``ValueError`` on a truncated or overlong one."""
    rows, pos = [], 0
    while pos < len(data):
        if pos + _LENGTHS.size > len(data):
            raise ValueError("a record's lengths are cut off")
        key_len, value_len = _LENGTHS.unpack_from(data, pos)
        pos += _LENGTHS.size
        end = pos + key_len + value_len
        if key_len == 0 or end > len(data):
            raise ValueError("a record runs past the chunk's end (or has an empty key)")
        if key_len > MAX_KEY_BYTES or value_len > MAX_VALUE_BYTES:
            raise ValueError(f"a record of a {key_len}-byte key and a {value_len}-byte value "
                             f"(at most {MAX_KEY_BYTES} and {MAX_VALUE_BYTES})")  # fmt: skip
        rows.append((data[pos : pos + key_len], data[pos + key_len : end]))
        pos = end
    return rows


def restore_rows(data: bytes, restored: int) -> list[tuple[bytes, bytes]]:
    """The rows of a restore's next chunk, ``restored`` bytes of chunks into it; raises
    ``ValueError`` on a chunk no honest snapshot has (too large, past :data:`MAX_STATE_BYTES`
    in all, or not decoding)."""
    if len(data) > MAX_CHUNK_BYTES:
        raise ValueError(f"{len(data)} bytes, more than any honest chunk")
    if restored + len(data) > MAX_STATE_BYTES:
        raise ValueError(f"more than {MAX_STATE_BYTES} bytes of state in all")
    return decode_chunk(data)


def offer_problem(snapshot: SnapshotInfo, fmt: int) -> str | None:
    """Why an offered snapshot cannot be restored from, before any chunk is fetched."""
    if fmt != FORMAT:
        return f"format {fmt}, not {FORMAT}"
    if not 0 < snapshot.chunks <= MAX_CHUNKS:
        return f"{snapshot.chunks} chunks (1 to {MAX_CHUNKS})"
    if len(snapshot.metadata) != 32 * snapshot.chunks:
        return "metadata is not one digest per chunk"
    if hashlib.sha256(snapshot.metadata).digest() != snapshot.hash:
        return "hash is not that of its metadata"
    return None


class SnapshotStore:
    """Snapshots on disk (``DIR/HEIGHT/`` holding ``chunk-N`` files and ``snapshot.json``),
    taken every ``interval`` blocks (0: never) in a background thread, the newest ``keep``
    kept, and besides them up to ``keep`` older ones offered to a peer or fetched from in the
    last ``HOLD_SECONDS``: CometBFT's state sync asks for a vanished snapshot's chunks forever,
    so one pruned under a node about to restore it would stall that node."""

    HOLD_SECONDS = 120.0

    def __init__(self, directory: Path, interval: int, keep: int = 2):
        self.directory = directory
        self.interval = interval
        self.keep = max(1, keep)
        self._served: dict[int, float] = {}  # height: when last offered or served
        self._served_lock = threading.Lock()  # ABCI's thread marks, the snapshot thread prunes
        self._busy = threading.Lock()
        self.thread: threading.Thread | None = None
        for stale in directory.glob(".partial-*"):  # a node killed while writing one
            shutil.rmtree(stale, ignore_errors=True)

    def due(self, height: int) -> bool:
        """Whether a snapshot is to be taken of ``height``."""
        return self.interval > 0 and height > 0 and height % self.interval == 0

    def take_in_background(
        self, height: int, open_rows: Callable[[], Iterator[tuple[bytes, bytes]]]
    ) -> None:
        """Write the snapshot of ``height`` in a thread from ``open_rows()`` (called now, so
        that its consistent read begins at this height's state); skipped, with a log line,
        while the last one is still being written."""
        if not self._busy.acquire(blocking=False):
            log.warning("snapshot of height %d skipped: the last one is still being written",
                        height)  # fmt: skip
            return
        try:
            rows = open_rows()
        except Exception:  # a snapshot never stops the node: it is skipped
            log.exception("snapshot of height %d skipped: the state could not be read", height)
            self._busy.release()
            return

        def work() -> None:
            try:
                self.take(height, rows)
            except Exception:
                log.exception("snapshot of height %d failed", height)
            finally:
                self._busy.release()

        self.thread = threading.Thread(target=work, name=f"snapshot-{height}", daemon=True)
        self.thread.start()

    def take(self, height: int, rows: Iterable[tuple[bytes, bytes]]) -> SnapshotInfo:
        """Write the snapshot of ``height`` (atomically: a folder renamed into place), then
        delete all but the newest ``keep``."""
        partial = self.directory / f".partial-{height}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        digests = []
        for index, chunk in enumerate(encode_chunks(rows)):
            (partial / f"chunk-{index}").write_bytes(chunk)
            digests.append(hashlib.sha256(chunk).digest())
        metadata = b"".join(digests)
        info = SnapshotInfo(height, len(digests), hashlib.sha256(metadata).digest(), metadata)
        (partial / "snapshot.json").write_text(json.dumps(
            {"format": FORMAT, "height": height, "chunks": info.chunks,
             "hash": info.hash.hex(), "metadata": metadata.hex()}))  # fmt: skip
        final = self.directory / str(height)
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        for old in self._prunable(self.list()[self.keep :]):
            shutil.rmtree(self.directory / str(old.height), ignore_errors=True)
        log.info("snapshot of height %d: %d chunks", height, info.chunks)
        return info

    def _prunable(self, old: list[SnapshotInfo]) -> list[SnapshotInfo]:
        """Of the snapshots past the newest ``keep`` (newest first), those not held for a
        peer restoring them (the newest ``keep`` served within ``HOLD_SECONDS`` are)."""
        now = time.monotonic()
        with self._served_lock:
            self._served = {h: t for h, t in self._served.items() if now - t < self.HOLD_SECONDS}
            held = [s for s in old if s.height in self._served][: self.keep]
        return [s for s in old if s not in held]

    def _mark_served(self, *heights: int) -> None:
        now = time.monotonic()
        with self._served_lock:
            self._served.update(dict.fromkeys(heights, now))

    def offer(self) -> list[SnapshotInfo]:
        """The snapshots to list to a peer (:meth:`list`), held a while for it to restore."""
        found = self.list()
        self._mark_served(*(snapshot.height for snapshot in found))
        return found

    def list(self) -> list[SnapshotInfo]:
        """The snapshots on disk, newest first (unreadable ones left out)."""
        found = []
        for folder in self.directory.glob("[0-9]*"):
            try:
                data = json.loads((folder / "snapshot.json").read_text())
                found.append(SnapshotInfo(int(data["height"]), int(data["chunks"]),
                                          bytes.fromhex(data["hash"]),
                                          bytes.fromhex(data["metadata"])))  # fmt: skip
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return sorted(found, key=lambda s: -s.height)

    def chunk(self, height: int, fmt: int, index: int) -> bytes:
        """One chunk's bytes (empty when there is no such chunk)."""
        if fmt != FORMAT or index < 0:
            return b""
        try:
            data = (self.directory / str(int(height)) / f"chunk-{int(index)}").read_bytes()
        except OSError:
            return b""
        self._mark_served(int(height))
        return data

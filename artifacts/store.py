"""Content-addressed artifact stores: checkpoints, pseudo-gradients and global states by SHA-256.

``ArtifactStore`` is the interface (an S3-compatible object store implements the same three
calls with the hex hash as object key); ``LocalArtifactStore`` is the default, a directory with
atomic writes and a hash check on every read.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from dilochain.protocol.hashing import HASH_BYTES, Buffer, content_hash

log = logging.getLogger(__name__)
LEFTOVER_SECONDS = 3600.0  # a temporary file no write touched for this long is a dead writer's


class ArtifactError(Exception):
    """An artifact that is missing or whose bytes do not match their hash."""


class ArtifactTooLarge(ArtifactError):
    """An artifact larger than the kind it was asked for can be. Its name fixes its bytes, so it
    is that size on every disk and peer: neither damage nor a peer's fault (a commit may name
    a large artifact where a small one belongs), and no other source is asked for it again."""


class PeerUnavailable(ArtifactError):
    """A peer or object store did not serve an artifact (down, unreachable, slow, or without
    it yet): worth asking again. Any other :class:`ArtifactError` of a peer (corrupt bytes,
    too many) is not."""


class PeerUnreachable(PeerUnavailable):
    """No connection to a peer, or no answer in time (a host restarting, a network outage);
    not a peer that answered that it lacks the artifact."""


class PeerSlow(PeerUnreachable):
    """A peer that served an artifact slower than a fetch allowed while others were left to
    ask: asked again after them."""


def write_atomically(path: Path, fill: Callable[[BinaryIO], object], sync: bool = False) -> None:
    """Write ``path`` through a temporary file of its own beside it, renamed into place once
    ``fill`` has written it whole (with ``sync``, fsynced first): a reader never sees it half
    written, two writers never write into each other's file, and a write that fails (a full
    disk, a fetch that gave up) leaves no temporary file behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            if sync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_leftovers(folder: Path, patterns: Sequence[str] = (".*.part",)) -> int:
    """Remove the temporary files (``patterns`` under ``folder``) of writes that died with
    their process (``kill -9``, a power loss: no ``except`` ran to remove them) and that
    nothing has written to for ``LEFTOVER_SECONDS``, so a write in progress in another
    process is left alone; a fetch of gigabytes would otherwise leave gigabytes behind at
    every crash. Returns the bytes freed."""
    freed, removed = 0, 0
    cutoff = time.time() - LEFTOVER_SECONDS
    for pattern in patterns:
        for path in folder.glob(pattern):
            try:
                info = path.lstat()
                if info.st_mtime >= cutoff:
                    continue
                path.unlink()
            except FileNotFoundError:  # renamed or removed by its writer meanwhile
                continue
            freed, removed = freed + info.st_size, removed + 1
    if removed:
        log.info("removed %d temporary files left by interrupted writes in %s (%.1f MB)",
                 removed, folder, freed / 1e6)  # fmt: skip
    return freed


class ArtifactStore(Protocol):
    """Where artifacts live, addressed by the sha256 of their bytes."""

    def put(self, data: bytes, digest: bytes | None = None) -> bytes:
        """Store ``data`` (``digest``: its sha256, if the caller has just computed it); return
        its hash."""
        ...

    def get(self, digest: bytes, limit: int | None = None) -> bytes:
        """The bytes with this hash (checked), of at most ``limit`` bytes (what the kind of
        artifact asked for can take: a fetch stops past it); raises :class:`ArtifactError`."""
        ...

    def has(self, digest: bytes) -> bool:
        """Whether the store holds ``digest``."""
        ...

    def warm(self, digest: bytes, limit: int | None = None) -> None:
        """Have ``digest`` (of at most ``limit`` bytes) on this machine's disk, fetching it if
        it is elsewhere, without holding its bytes in memory; raises :class:`ArtifactError`."""
        ...

    def delete(self, digest: bytes) -> None:
        """Remove ``digest`` (nothing if absent)."""
        ...


def over_limit(digest: bytes, size: int, limit: int | None, where: str) -> ArtifactTooLarge | None:
    """The error for artifact ``digest`` of ``size`` bytes where at most ``limit`` may be."""
    if limit is None or size <= limit:
        return None
    return ArtifactTooLarge(f"artifact {digest.hex()[:16]}… {where} is {size} bytes, more than "
                            f"the {limit} it can be")  # fmt: skip


def check_digest(digest: bytes, data: bytes, where: str) -> bytes:
    """Return ``data`` if it hashes to ``digest``; else raise a corrupt-artifact error."""
    if content_hash(data) != digest:
        raise ArtifactError(
            f"artifact {digest.hex()[:16]}… from {where} is corrupt (hash mismatch)"
        )
    return data


class LocalArtifactStore:
    """Artifacts as files ``ab/abcdef…`` under a directory."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        remove_leftovers(root, ("??/.*.part", "??/.tmp-*"))  # .tmp-*: links, and older puts
        self._writers: dict[bytes, tuple[threading.Lock, int]] = {}  # digest: lock, holders
        self._writers_lock = threading.Lock()

    @contextmanager
    def writing(self, digest: bytes, wait: float | None = None) -> Iterator[None]:
        """Hold ``digest`` for one writer of this process at a time: screens fetching a
        round's commits at once all name its global state, fetched once, not once each. With
        ``wait``, a writer waits that long at most, then goes on beside the holder (a holder
        fetching from a host that serves at a drip must not hold every other screen of the
        round; two writers of one file each write it atomically)."""
        with self._writers_lock:
            lock, holders = self._writers.get(digest, (threading.Lock(), 0))
            self._writers[digest] = (lock, holders + 1)
        held = lock.acquire(timeout=-1 if wait is None else wait)
        try:
            yield
        finally:
            if held:
                lock.release()
            with self._writers_lock:
                lock, holders = self._writers.pop(digest)
                if holders > 1:
                    self._writers[digest] = (lock, holders - 1)

    def _path(self, digest: bytes) -> Path:
        if len(digest) != HASH_BYTES:  # else b"" would name the store's own folder
            raise ArtifactError(f"an artifact hash is {HASH_BYTES} bytes, not {len(digest)}")
        name = digest.hex()
        return self.root / name[:2] / name

    def put(self, data: bytes, digest: bytes | None = None, sync: bool = True) -> bytes:
        """Write atomically (temp file + rename); idempotent. ``digest`` saves hashing ``data``
        again where the caller just did (reads check it anyway). ``sync``: fsync before the
        rename; without it the file survives the process (``kill -9``) at once and a power
        loss only after :meth:`sync`."""
        return self.put_parts([data], digest or content_hash(data), sync)

    def put_parts(self, parts: Sequence[Buffer], digest: bytes, sync: bool = True) -> bytes:
        """:meth:`put` of the concatenation of ``parts`` (whose sha256 is ``digest``), written
        part by part: the bytes of a state's encoding are never joined in memory. A file
        already there of another size (cut short by a power loss after an unsynced write) is
        written again; a write that fails (a full disk) leaves no temporary file behind."""
        path = self._path(digest)
        if path.exists() and self.size(digest) == sum(memoryview(p).nbytes for p in parts):
            return digest

        def fill(out: BinaryIO) -> None:
            for part in parts:
                out.write(part)

        return self.put_stream(digest, fill, sync)

    def put_stream(
        self, digest: bytes, fill: Callable[[BinaryIO], object], sync: bool = True
    ) -> bytes:
        """Store what ``fill`` writes to the file it is given (a peer fetch streaming into it,
        hash-checked as it goes) as artifact ``digest``, atomically (:func:`write_atomically`)."""
        path = self._path(digest)
        path.parent.mkdir(exist_ok=True)
        write_atomically(path, fill, sync)
        return digest

    def sync(self, digests: list[bytes]) -> None:
        """fsync artifacts written with ``sync=False`` (and their folders): durable from here."""
        folders = set()
        for digest in digests:
            path = self._path(digest)
            if path.is_symlink() or not path.exists():
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            folders.add(path.parent)
        for folder in folders:
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def link_file(self, path: Path, digest: bytes) -> None:
        """Serve an existing file as artifact ``digest`` without copying it (a symbolic link).
        Its hash is checked whenever it is read, as for any artifact, so a file that is not
        what ``digest`` says is never served."""
        target = self._path(digest)
        if target.exists():
            return
        target.parent.mkdir(exist_ok=True)
        tmp = target.with_name(f".tmp-link-{os.getpid()}-{target.name}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(path.resolve())
        os.replace(tmp, target)

    def get(self, digest: bytes, limit: int | None = None) -> bytes:
        """Read and hash-check (a file of more than ``limit`` bytes is not read)."""
        path = self._path(digest)
        too_large = over_limit(digest, self.size(digest), limit, f"in {self.root}")
        if too_large is not None:
            raise too_large
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"artifact {digest.hex()[:16]}… not found in {self.root}") from None
        return check_digest(digest, data, str(self.root))

    def has(self, digest: bytes) -> bool:
        """Whether the file exists."""
        return self._path(digest).exists()

    def warm(self, digest: bytes, limit: int | None = None) -> None:
        """Everything this store holds is on disk: nothing to do (a read says what is
        missing, or too large)."""

    def file(self, digest: bytes) -> Path | None:
        """The file holding artifact ``digest`` (None if absent), for streaming it elsewhere."""
        path = self._path(digest)
        return path if path.exists() else None

    def size(self, digest: bytes) -> int:
        """Bytes the artifact takes on disk (0 if absent)."""
        try:
            return self._path(digest).stat().st_size
        except FileNotFoundError:
            return 0

    def delete(self, digest: bytes) -> None:
        """Remove the artifact (nothing if absent)."""
        self._path(digest).unlink(missing_ok=True)

    def linked(self, digest: bytes) -> bool:
        """Whether the artifact is a link to a file served from elsewhere (a dataset's)."""
        return self._path(digest).is_symlink()

    def total_bytes(self) -> int:
        """Bytes of every artifact file (links to served files count as nothing)."""
        return sum(p.stat().st_size for p in self.root.glob("??/*") if not p.is_symlink())

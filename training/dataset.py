"""A run's training data: token shards on disk, named by a manifest, read by memory map.

A prepared dataset is a folder (``dilochain data prepare`` writes it) holding ``tokenizer.json``,
``manifest.json`` and raw little-endian ``uint16``/``uint32`` token files, nanoGPT-style: the
held-out shard and fixed-size training shards. A run pins the sha256 of the manifest and of the
tokenizer; the manifest pins every shard's sha256 and token count. Each shard is checked (size,
hash, token ids below the vocabulary) the first time it is used, then read by memory map, so a
corpus never has to fit in memory.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from dilochain.artifacts.store import remove_leftovers, write_atomically
from dilochain.protocol.schedule import shard_assignment
from dilochain.training.errors import DataError, DataUnavailable
from dilochain.training.manifest import (
    DTYPES,
    MANIFEST,
    TOKENIZER,
    ShardEntry,
    file_sha256,
    read_manifest,
)

_CHUNK = 1 << 22  # tokens per chunk while checking a shard
MAX_MANIFEST_BYTES = 16 << 20  # MAX_SHARDS entries of ~130 bytes, with room to spare
MAX_TOKENIZER_BYTES = 64 << 20  # the largest Hugging Face tokenizer.json files are ~20 MB

# Fetches a file by its sha256 (hex), at most the given bytes, into the given open file;
# raises DataUnavailable.
Fetch = Callable[[str, int, BinaryIO], None]


def _seeded(*parts: object) -> torch.Generator:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)


class Dataset:
    """A prepared dataset checked against the hashes a run pins. With ``fetch``, files missing
    from ``root`` are fetched by their sha256 (from peers) and kept there."""

    def __init__(
        self, root: Path, manifest_hash: str, tokenizer_hash: str, fetch: Fetch | None = None
    ):
        self.root = root
        self.fetch = fetch
        self._tokens: dict[str, np.ndarray] = {}
        self._broken: dict[str, DataError] = {}
        self._lock = threading.Lock()  # the dicts above; a file's fetch holds its own
        self._file_locks: dict[str, threading.Lock] = {}
        remove_leftovers(root)
        manifest_path = root / MANIFEST
        self._ensure(manifest_path, manifest_hash, MAX_MANIFEST_BYTES)
        _expect(manifest_path, manifest_hash, "data manifest")
        self.manifest = read_manifest(manifest_path)
        self._ensure(root / TOKENIZER, tokenizer_hash, MAX_TOKENIZER_BYTES)
        _expect(root / TOKENIZER, tokenizer_hash, "tokenizer")
        if self.manifest.tokenizer_sha256 != tokenizer_hash:
            raise DataError(f"{manifest_path}: made with another tokenizer than the run's")

    def _ensure(self, path: Path, digest: str, size: int) -> None:
        """Fetch a missing file (when this dataset fetches), atomically: into a temporary file
        of its own (two fetches of one file never write into each other's), renamed into place
        once whole and checked."""
        if self.fetch is None or path.is_file():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        # streamed into the file: a shard need not fit in memory
        write_atomically(path, lambda out: self.fetch(digest, size, out))

    def _listed(self) -> list[tuple[Path, str]]:
        listed = [(self.root / MANIFEST, file_sha256(self.root / MANIFEST)),
                  (self.root / TOKENIZER, self.manifest.tokenizer_sha256)]  # fmt: skip
        return listed + [(self.root / e.file, e.sha256)
                         for e in [self.manifest.heldout, *self.manifest.shards]]  # fmt: skip

    def files(self) -> list[tuple[Path, str]]:
        """The dataset's files on disk with the sha256 the run or the manifest gives each."""
        return [(path, digest) for path, digest in self._listed() if path.is_file()]

    def hashes(self) -> set[str]:
        """The sha256 (hex) of every file of the dataset, on disk or not."""
        return {digest for _, digest in self._listed()}

    @property
    def num_shards(self) -> int:
        """Number of training shards."""
        return len(self.manifest.shards)

    def check_vocab(self, model_vocab: int) -> None:
        """Refuse a model whose vocabulary is smaller than the tokenizer's."""
        if model_vocab < self.manifest.vocab_size:
            raise DataError(
                f"{self.root / MANIFEST}: tokenizer vocabulary {self.manifest.vocab_size} is "
                f"larger than the model's vocab_size {model_vocab}"
            )

    def _open(self, entry: ShardEntry) -> np.ndarray:
        """The shard's tokens by memory map, checked in full the first time (a shard found
        bad stays refused; one no peer served yet is tried again)."""
        with self._lock:
            file_lock = self._file_locks.setdefault(entry.file, threading.Lock())
        with file_lock:  # one fetch a file; the others' (and checked files) never wait on it
            if (known := self._known(entry)) is not None:
                return known
            try:
                tokens = self._checked(entry)
            except DataUnavailable:
                raise
            except DataError as err:
                with self._lock:
                    self._broken[entry.file] = err
                raise
            with self._lock:
                self._tokens[entry.file] = tokens
            return tokens

    def _known(self, entry: ShardEntry) -> np.ndarray | None:
        """The shard's tokens if checked already (raises what it was refused for)."""
        with self._lock:
            if entry.file in self._broken:
                raise self._broken[entry.file]
            return self._tokens.get(entry.file)

    def _checked(self, entry: ShardEntry) -> np.ndarray:
        path = self.root / entry.file
        dtype = DTYPES[self.manifest.dtype]
        self._ensure(path, entry.sha256, entry.tokens * dtype.itemsize)
        if not path.is_file():
            raise DataError(f"{path}: shard missing")
        size = path.stat().st_size
        if size != entry.tokens * dtype.itemsize:
            raise DataError(f"{path}: {size} bytes; the manifest says {entry.tokens} tokens "
                            f"({entry.tokens * dtype.itemsize} bytes)")  # fmt: skip
        _expect(path, entry.sha256, "shard")
        tokens = np.memmap(path, dtype=dtype, mode="r")
        for lo in range(0, len(tokens), _CHUNK):
            top = int(tokens[lo : lo + _CHUNK].max())
            if top >= self.manifest.vocab_size:
                raise DataError(f"{path}: token id {top} is not below the vocabulary size "
                                f"{self.manifest.vocab_size}")  # fmt: skip
        return tokens

    def prefetch(self, shards: Sequence[int]) -> None:
        """Make sure training shards and the held-out shard are here and checked."""
        for shard in shards:
            self._open(self.manifest.shards[shard])
        self._open(self.manifest.heldout)

    def shards_of(self, seed: int, host: str, roster: Sequence[str] = ()) -> tuple[int, ...]:
        """The training shards ``host`` trains on in a round with ``roster`` (empty: the host
        alone), as :func:`~dilochain.protocol.schedule.shard_assignment` assigns them."""
        return shard_assignment(seed, self.num_shards, roster or (host,), host)

    @staticmethod
    def _windows(tokens: np.ndarray, starts: torch.Tensor, context: int) -> torch.Tensor:
        rows = np.stack([tokens[s : s + context + 1] for s in starts.tolist()])
        return torch.from_numpy(rows.astype(np.int64))

    def _span(self, entry: ShardEntry, context: int) -> tuple[np.ndarray, int]:
        tokens = self._open(entry)
        if len(tokens) <= context + 1:
            raise DataError(f"{self.root / entry.file}: {len(tokens)} tokens is too few for "
                            f"sequences of {context}")  # fmt: skip
        return tokens, len(tokens) - context - 1

    def batch(
        self, shards: Sequence[int], data_seed: int, step: int, batch: int, context: int
    ) -> torch.Tensor:
        """The (batch, context + 1) windows of inner step ``step``, a function of its inputs:
        each window starts at a position drawn uniformly over all of ``shards``' windows."""
        spans = [self._span(self.manifest.shards[s], context) for s in shards]
        ends = np.cumsum([top for _, top in spans]).tolist()
        flat = torch.randint(0, ends[-1], (batch,), generator=_seeded(data_seed, step)).tolist()
        rows = []
        for position in flat:
            i = bisect.bisect_right(ends, position)
            tokens, top = spans[i]
            start = position - (ends[i] - top)
            rows.append(tokens[start : start + context + 1])
        return torch.from_numpy(np.stack(rows).astype(np.int64))

    def heldout_sample(self, seed: int, batch: int, context: int) -> torch.Tensor:
        """(batch, context + 1) held-out windows drawn by ``seed`` (a screen's loss test)."""
        tokens, top = self._span(self.manifest.heldout, context)
        starts = torch.randint(0, top, (batch,), generator=_seeded("screen", seed))
        return self._windows(tokens, starts, context)

    def heldout_batches(self, count: int, batch: int, context: int) -> list[torch.Tensor]:
        """Fixed evaluation windows from the held-out shard."""
        tokens, top = self._span(self.manifest.heldout, context)
        starts = torch.randint(0, top, (count, batch),
                               generator=_seeded("heldout", count, batch, context))  # fmt: skip
        return [self._windows(tokens, row, context) for row in starts]


def _expect(path: Path, digest: str, what: str) -> None:
    if not path.is_file():
        raise DataError(f"{path}: {what} missing")
    actual = file_sha256(path)
    if actual != digest:
        raise DataError(f"{path}: sha256 {actual[:12]}… is not the run's {what} {digest[:12]}…")


def _dataset_folders(path: Path) -> list[Path]:
    if (path / MANIFEST).is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.iterdir() if (p / MANIFEST).is_file())
    raise DataError(f"{path}: not a dataset folder (write one with `dilochain data prepare`)")


def find_dataset(folders: list[Path], manifest_hash: str, tokenizer_hash: str) -> Dataset:
    """The run's dataset among ``folders`` (each a dataset folder or a folder of them), picked
    by its manifest's sha256; :class:`DataError` says what is missing or does not match."""
    found = [f for folder in folders for f in _dataset_folders(folder)]
    for folder in found:
        if file_sha256(folder / MANIFEST) == manifest_hash:
            return Dataset(folder, manifest_hash, tokenizer_hash)
    if len(found) == 1:
        return Dataset(found[0], manifest_hash, tokenizer_hash)  # says what does not match
    where = ", ".join(map(str, folders))
    raise DataError(f"no dataset in {where} has the run's manifest {manifest_hash[:12]}…; "
                    "pass the run's prepared dataset folder with --data")  # fmt: skip

"""Training text, its shards and held-out split, and deterministic batches (byte-level tokens).

The default corpus is the Python documentation's topic texts (``pydoc_data.topics``), real
English prose shipped with every CPython, so a fresh machine has it offline; ``--data PATH``
takes the user's own text files instead. Tokens are bytes (vocabulary 256), so no tokenizer
download is needed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch


class DataError(ValueError):
    """Text that cannot be used for training."""


HELDOUT_FRACTION = 0.1


def default_text() -> bytes:
    """The default corpus: every topic of the Python documentation, in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics)).encode()


def load_text(path: Path | None) -> bytes:
    """The default corpus, or the UTF-8 text of a file (or of a directory's files, sorted)."""
    if path is None:
        return default_text()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
    elif path.is_file():
        files = [path]
    else:
        raise DataError(f"{path}: no such file or directory")
    text = b"\n\n".join(p.read_bytes() for p in files)
    if len(text) < 10_000:
        raise DataError(f"{path}: {len(text)} bytes of text; need at least 10000")
    return text


def corpus_hash(text: bytes) -> str:
    """Hex sha256 of a corpus, as a run's config records it."""
    return hashlib.sha256(text).hexdigest()


def _seeded(*parts: object) -> torch.Generator:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)


@dataclass(frozen=True)
class Corpus:
    """Tokens split into ``num_shards`` training shards and a held-out tail."""

    tokens: torch.Tensor
    num_shards: int

    @classmethod
    def from_text(cls, text: bytes, num_shards: int) -> Corpus:
        """Byte-level tokens of ``text``."""
        return cls(torch.frombuffer(bytearray(text), dtype=torch.uint8).long(), num_shards)

    @property
    def train_end(self) -> int:
        """First held-out token."""
        return int(len(self.tokens) * (1 - HELDOUT_FRACTION))

    def shard_of(self, seed: int, host: str) -> int:
        """The shard a host trains on: fixed by the run seed and the host address."""
        digest = hashlib.sha256(f"dilochain-shard/{seed}/{host}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.num_shards

    def shard_bounds(self, shard: int) -> tuple[int, int]:
        """Token range [lo, hi) of a training shard."""
        size = self.train_end // self.num_shards
        return shard * size, (shard + 1) * size

    def batch(
        self, shard: int, data_seed: int, step: int, batch: int, context: int
    ) -> torch.Tensor:
        """The (batch, context + 1) windows of inner step ``step``, a function of its inputs."""
        lo, hi = self.shard_bounds(shard)
        if hi - lo <= context + 1:
            raise DataError(f"shard of {hi - lo} tokens is too small for context {context}")
        starts = torch.randint(lo, hi - context - 1, (batch,), generator=_seeded(data_seed, step))
        return torch.stack([self.tokens[s : s + context + 1] for s in starts.tolist()])

    def heldout_sample(self, seed: int, batch: int, context: int) -> torch.Tensor:
        """(batch, context + 1) held-out windows drawn by ``seed`` (a screen's loss test)."""
        lo, hi = self.train_end, len(self.tokens)
        starts = torch.randint(lo, hi - context - 1, (batch,), generator=_seeded("screen", seed))
        return torch.stack([self.tokens[s : s + context + 1] for s in starts.tolist()])

    def heldout_batches(self, count: int, batch: int, context: int) -> list[torch.Tensor]:
        """Fixed evaluation windows from the held-out split."""
        lo, hi = self.train_end, len(self.tokens)
        generator = _seeded("heldout", count, batch, context)
        starts = torch.randint(lo, hi - context - 1, (count, batch), generator=generator)
        return [
            torch.stack([self.tokens[s : s + context + 1] for s in row.tolist()]) for row in starts
        ]

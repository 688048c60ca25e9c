"""A dataset's manifest: the file that names its tokenizer and token shards by sha256 (torch-free,
so the CLI and ``data prepare`` load fast)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dilochain.training.errors import DataError

MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
FORMAT = "dilochain-dataset/1"
HEX64 = r"^[0-9a-f]{64}$"
DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
# Bounds no run creator chooses: what a host or verifier fetches, holds and hashes for one
# shard (at most 512 MB), and how many shards a round's assignment ranks.
MAX_SHARD_TOKENS = 1 << 27
MAX_SHARDS = 1 << 16


class ShardEntry(BaseModel):
    """One token file of a dataset."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=128)
    sha256: str = Field(pattern=HEX64)
    tokens: int = Field(ge=1, le=MAX_SHARD_TOKENS)


class Manifest(BaseModel):
    """What a dataset holds: its tokenizer's hash, token dtype and shards."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal["dilochain-dataset/1"] = FORMAT
    tokenizer_sha256: str = Field(pattern=HEX64)
    vocab_size: int = Field(ge=2, le=1 << 32)
    dtype: Literal["uint16", "uint32"]
    eos_id: int | None = Field(default=None, ge=0)
    heldout: ShardEntry
    shards: list[ShardEntry] = Field(min_length=1, max_length=MAX_SHARDS)

    def to_bytes(self) -> bytes:
        """The manifest file's bytes: sorted keys, one entry per line, so equal manifests are
        equal bytes (the run pins their sha256)."""
        return (json.dumps(self.model_dump(), sort_keys=True, indent=1) + "\n").encode()


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: Path) -> Manifest:
    """Parse a manifest file; :class:`DataError` names the file and the first problem."""
    try:
        manifest = Manifest.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise DataError(f"{path}: no such file (is it a prepared dataset folder?)") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"])) or "manifest"
        raise DataError(f"{path}: {where}: {first['msg']}") from None
    names = [s.file for s in [manifest.heldout, *manifest.shards]]
    if len(set(names)) != len(names):
        raise DataError(f"{path}: a shard file is listed twice")
    if manifest.dtype == "uint16" and manifest.vocab_size > 1 << 16:
        raise DataError(f"{path}: vocab_size {manifest.vocab_size} does not fit uint16")
    return manifest

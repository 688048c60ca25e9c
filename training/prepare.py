"""``dilochain data prepare``: text, JSONL or Parquet in; a BPE tokenizer, token shards and the
manifest a run pins out (:mod:`dilochain.training.dataset` reads them).

Documents are read in a fixed order (inputs as given, folders sorted), each followed by the
end-of-text token; the first ``heldout_tokens`` tokens form the held-out shard and the rest
fixed-size training shards (a short remainder joins the last shard). The same inputs and options
give byte-identical files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from dilochain.training.errors import DataError
from dilochain.training.manifest import (
    DTYPES,
    MANIFEST,
    MAX_SHARDS,
    TOKENIZER,
    Manifest,
    ShardEntry,
    file_sha256,
    read_manifest,
)
from dilochain.training.run_config import Pins

EOS = "<|endoftext|>"
DEFAULT_VOCAB = 2048
_ENCODE_BATCH = 256

Advance = Callable[[int], None]


@dataclass(frozen=True)
class PrepareOptions:
    """How a dataset is cut: tokenizer size (when one is trained) and shard sizes in tokens."""

    vocab_size: int = DEFAULT_VOCAB
    text_field: str = "text"
    shard_tokens: int = 1 << 24
    heldout_tokens: int = 1 << 20


def load_tokenizer(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` of the tokenizers library; :class:`DataError` names a file that is
    not one."""
    try:
        return Tokenizer.from_file(str(path))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # bare Exceptions, and pyo3's PanicException (a BaseException)
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise DataError(f"{path}: not a tokenizers tokenizer.json ({first})") from None


def read_pins(tokenizer: Path, manifest_file: Path) -> Pins:
    """What a run pins of this tokenizer and manifest, checked: the tokenizer loads and is the
    one the manifest was made with."""
    manifest = read_manifest(manifest_file)
    load_tokenizer(tokenizer)
    tokenizer_hash = file_sha256(tokenizer)
    if manifest.tokenizer_sha256 != tokenizer_hash:
        raise DataError(f"{manifest_file}: made with another tokenizer than {tokenizer}")
    return Pins(file_sha256(manifest_file), tokenizer_hash, manifest.vocab_size)


def pins_of(root: Path) -> Pins:
    """The pins of a prepared dataset folder."""
    return read_pins(root / TOKENIZER, root / MANIFEST)


def input_files(inputs: Iterable[Path]) -> list[Path]:
    """The files to read: each input file, or every file under an input folder (sorted)."""
    files: list[Path] = []
    for path in inputs:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise DataError(f"{path}: no such file or directory")
    if not files:
        raise DataError("no input files")
    return files


def _text_file(path: Path, advance: Advance) -> Iterator[str]:
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text (byte {err.start})") from None
    advance(path.stat().st_size)
    if text.strip():
        yield text


def _no_text(record: object, field: str) -> str:
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object with a text field {field!r}"
    found = ", ".join(repr(k) for k in list(record)[:8]) or "none"
    what = "is not text" if field in record else "is missing"
    return f"field {field!r} {what} (keys: {found}); choose another with --text-field"


def _jsonl_file(path: Path, field: str, advance: Advance) -> Iterator[str]:
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            advance(len(line))
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise DataError(f"{path}:{number}: not a JSON line") from None
            except RecursionError:
                raise DataError(f"{path}:{number}: JSON nested too deeply") from None
            text = record.get(field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise DataError(f"{path}:{number}: {_no_text(record, field)}")
            if text.strip():
                yield text


def _parquet_file(path: Path, field: str, advance: Advance) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        if field not in parquet.schema_arrow.names:
            raise DataError(f"{path}: no column {field!r}")
        rows, size = max(parquet.metadata.num_rows, 1), path.stat().st_size
        for batch in parquet.iter_batches(columns=[field], batch_size=1024):
            advance(size * batch.num_rows // rows)
            for text in batch.column(0).to_pylist():
                if not isinstance(text, str):
                    raise DataError(f"{path}: column {field!r} holds a non-text value")
                if text.strip():
                    yield text
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable Parquet file ({err})") from None


def documents(files: list[Path], field: str, advance: Advance = lambda n: None) -> Iterator[str]:
    """Every document of the inputs in order: a text file is one document, a ``.jsonl`` line
    or a ``.parquet`` row one each (their ``field``)."""
    for path in files:
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            yield from _jsonl_file(path, field, advance)
        elif suffix == ".parquet":
            yield from _parquet_file(path, field, advance)
        else:
            yield from _text_file(path, advance)


# The pre-tokenizer split of Qwen2 (and GPT-4): transformers' Qwen2Tokenizer rebuilds exactly
# this pipeline (NFC, this split, byte-level without its own regex) whatever tokenizer.json
# says, so a run's tokenizer built this way gives the ids it trained on in every export.
SPLIT_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
               r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")  # fmt: skip


def train_tokenizer(docs: Iterator[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer with ``<|endoftext|>`` as token 0, its text NFC-normalised
    and split as Qwen2's (:data:`SPLIT_REGEX`): what every model type's Hugging Face tokenizer
    class reproduces from the exported files."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tokenizer.train_from_iterator(docs, trainer=trainer)
    return tokenizer


class _ShardWriter:
    """Splits a token stream into the held-out shard and fixed-size training shards."""

    def __init__(self, out: Path, dtype: np.dtype, options: PrepareOptions):
        self.out, self.dtype, self.options = out, dtype, options
        self.files: list[Path] = []
        self.filled = 0
        self.handle = None

    def _next_file(self) -> None:
        if self.handle:
            self.handle.close()
        name = "heldout.bin" if not self.files else f"train-{len(self.files) - 1:05d}.bin"
        self.files.append(self.out / name)
        self.handle = self.files[-1].open("wb")
        self.filled = 0

    def _capacity(self) -> int:
        return self.options.heldout_tokens if len(self.files) == 1 else self.options.shard_tokens

    def write(self, ids: np.ndarray) -> None:
        """Append tokens, opening the next file whenever one is full."""
        while len(ids):
            if self.handle is None or self.filled == self._capacity():
                self._next_file()
            take = ids[: self._capacity() - self.filled]
            self.handle.write(take.astype(self.dtype).tobytes())
            self.filled += len(take)
            ids = ids[len(take) :]

    def close(self) -> list[Path]:
        """Finish the files; a last shard under half the shard size joins the one before."""
        if self.handle:
            self.handle.close()
        if len(self.files) < 2:
            raise DataError(f"the input has too few tokens: need more than the "
                            f"{self.options.heldout_tokens} held-out tokens "
                            "(--heldout-tokens)")  # fmt: skip
        if len(self.files) > 2 and self.filled < self.options.shard_tokens // 2:
            last = self.files.pop()
            with self.files[-1].open("ab") as target, last.open("rb") as tail:
                shutil.copyfileobj(tail, target)
            last.unlink()
        return self.files


def prepare(
    docs: Callable[[], Iterator[str]],
    out: Path,
    options: PrepareOptions,
    tokenizer_file: Path | None = None,
) -> Pins:
    """Write a dataset folder from ``docs`` (called once per pass over the input); trains a
    tokenizer unless ``tokenizer_file`` is given. The folder appears complete or not at all."""
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a folder")
    if out.exists() and any(out.iterdir()):
        raise DataError(f"{out}: exists and is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        if tokenizer_file is None:
            tokenizer = train_tokenizer(docs(), options.vocab_size)
            tokenizer.save(str(work / TOKENIZER))
        else:
            tokenizer = load_tokenizer(tokenizer_file)
            shutil.copyfile(tokenizer_file, work / TOKENIZER)
        manifest = _write_shards(tokenizer, docs(), work, options)
        (work / MANIFEST).write_bytes(manifest.to_bytes())
        if out.exists():
            out.rmdir()
        os.replace(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return pins_of(out)


def _write_shards(
    tokenizer: Tokenizer, docs: Iterator[str], work: Path, options: PrepareOptions
) -> Manifest:
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype_name = "uint16" if vocab <= 1 << 16 else "uint32"
    eos = tokenizer.token_to_id(EOS)
    writer = _ShardWriter(work, DTYPES[dtype_name], options)
    batch: list[str] = []

    def flush() -> None:
        for encoding in tokenizer.encode_batch(batch, add_special_tokens=False):
            ids = np.asarray(encoding.ids + ([eos] if eos is not None else []), dtype=np.int64)
            if len(ids) and ids.max() >= vocab:  # it would wrap around in the shard's dtype
                raise DataError(f"the tokenizer gives token id {ids.max()}, outside its "
                                f"vocabulary of {vocab}")  # fmt: skip
            writer.write(ids)
        batch.clear()

    for doc in docs:
        batch.append(doc)
        if len(batch) == _ENCODE_BATCH:
            flush()
    flush()
    files = writer.close()
    if len(files) - 1 > MAX_SHARDS:
        raise DataError(f"{len(files) - 1} training shards, more than the {MAX_SHARDS} a dataset "
                        "may have: make the shards larger (--shard-tokens)")  # fmt: skip
    entries = [ShardEntry(file=p.name, sha256=file_sha256(p),
                          tokens=p.stat().st_size // DTYPES[dtype_name].itemsize)
               for p in files]  # fmt: skip
    return Manifest(tokenizer_sha256=file_sha256(work / TOKENIZER), vocab_size=vocab,
                    dtype=dtype_name, eos_id=eos, heldout=entries[0],
                    shards=entries[1:])  # fmt: skip


def auto_heldout_tokens(input_bytes: int) -> int:
    """Held-out tokens for inputs of ``input_bytes``: about 5% of their tokens (at ~4 bytes a
    token), at least 1,024 and at most 2^20, so a small corpus still leaves most to train on."""
    return min(1 << 20, max(1024, input_bytes // 80))


DEFAULT_OPTIONS = PrepareOptions(shard_tokens=16_384, heldout_tokens=12_288)


def default_documents() -> Iterator[str]:
    """The shipped corpus: every topic of the Python documentation (``pydoc_data``, in every
    CPython, so a fresh machine has it offline), in name order."""
    from pydoc_data.topics import topics

    return (topics[name] for name in sorted(topics))


def default_dataset(root: Path) -> Path:
    """The default dataset (shipped corpus, 2,048-token BPE, ~7 shards) under ``root``,
    prepared once; every process that prepares it gets the same bytes."""
    out = root / "default-dataset"
    if not (out / MANIFEST).is_file():
        try:
            prepare(default_documents, out, DEFAULT_OPTIONS)
        except DataError:  # another process finished it first
            if not (out / MANIFEST).is_file():
                raise
    return out

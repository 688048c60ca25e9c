"""``dilochain data prepare``: a dataset folder (BPE tokenizer, token shards, manifest) from
text, JSONL or Parquet files, ready for ``dilochain run create --data DIR``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

from dilochain.cli.common import CliError, add_output_flag, output_folder
from dilochain.training.manifest import MANIFEST, MAX_SHARD_TOKENS, read_manifest
from dilochain.training.prepare import (
    DEFAULT_VOCAB,
    PrepareOptions,
    auto_heldout_tokens,
    documents,
    input_files,
    prepare,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``data`` command group."""
    data = sub.add_parser("data", help="training data").add_subparsers(
        dest="data_cmd", required=True, metavar="{prepare}"
    )
    p = data.add_parser("prepare", help="tokenize text/JSONL/Parquet into a run's dataset")
    p.add_argument(
        "--input",
        type=Path,
        nargs="+",
        required=True,
        help="files or folders: *.jsonl, *.parquet, anything else is UTF-8 text",
    )
    p.add_argument("--out", type=output_folder, required=True, help="the dataset folder to write")
    p.add_argument(
        "--vocab-size", type=int, default=DEFAULT_VOCAB, help="size of the BPE tokenizer to train"
    )
    p.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="use this tokenizer.json instead of training one",
    )
    p.add_argument("--text-field", default="text", help="JSONL key / Parquet column of the text")
    p.add_argument(
        "--shard-tokens",
        type=int,
        default=PrepareOptions.shard_tokens,
        help="tokens in each training shard file",
    )
    p.add_argument(
        "--heldout-tokens",
        type=int,
        default=None,
        help="tokens held out for evaluation (default: about 5%% of the input, 1024 to 1048576)",
    )
    add_output_flag(p)
    p.set_defaults(func=_prepare)  # fmt: skip


def _prepare(args: argparse.Namespace) -> int:
    files = input_files(args.input)
    if args.heldout_tokens is None:
        args.heldout_tokens = auto_heldout_tokens(sum(f.stat().st_size for f in files))
    if not 257 <= args.vocab_size <= 1 << 20:
        raise CliError("--vocab-size must be between 257 and 1048576")
    if not (1024 <= args.shard_tokens <= MAX_SHARD_TOKENS
            and 1024 <= args.heldout_tokens <= MAX_SHARD_TOKENS):  # fmt: skip
        raise CliError(f"--shard-tokens and --heldout-tokens must be between 1024 and "
                       f"{MAX_SHARD_TOKENS} (a shard hosts and verifiers fetch)")  # fmt: skip
    options = PrepareOptions(args.vocab_size, args.text_field, args.shard_tokens,
                             args.heldout_tokens)  # fmt: skip
    passes = 1 if args.tokenizer else 2  # training the tokenizer reads the input once more
    total = passes * sum(f.stat().st_size for f in files)
    console = Console()
    columns = (*Progress.get_default_columns()[:1], BarColumn(), DownloadColumn(),
               TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=True,
                  disable=args.output == "json") as progress:  # fmt: skip
        task = progress.add_task("tokenizing", total=total)

        def docs():
            return documents(files, args.text_field, lambda n: progress.advance(task, n))

        pins = prepare(docs, args.out, options, args.tokenizer)
    manifest = read_manifest(args.out / MANIFEST)
    tokens = sum(s.tokens for s in manifest.shards)
    if args.output == "json":
        print(json.dumps({
            "out": str(args.out), "shards": len(manifest.shards), "training_tokens": tokens,
            "heldout_tokens": manifest.heldout.tokens, "data_manifest_hash": pins.manifest_hash,
            "tokenizer_hash": pins.tokenizer_hash, "vocab_size": pins.vocab_size,
        }, indent=2))  # fmt: skip
        return 0
    console.print(f"dataset written to {args.out}: {len(manifest.shards)} training shards, "
                  f"{tokens:,} training tokens, {manifest.heldout.tokens:,} held out\n"
                  f"  data manifest sha256  {pins.manifest_hash}\n"
                  f"  tokenizer sha256      {pins.tokenizer_hash} "
                  f"(vocabulary {pins.vocab_size})")  # fmt: skip
    return 0

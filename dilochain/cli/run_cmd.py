"""``dilochain run create``: register a training run on chain, pinning its model config (inline),
tokenizer and dataset manifest (by sha256). Everything is checked before the tx is sent: a
config transformers cannot build, a tokenizer the manifest was not made with, or a vocabulary
the model cannot embed commits nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dilochain.artifacts.store import LocalArtifactStore
from dilochain.cli.common import (
    CliError,
    add_chain_flag,
    add_output_flag,
    chain_nodes,
    default_home,
    signing_wallet,
)
from dilochain.client import TxRefused, connect, submit
from dilochain.protocol import model_config
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.training.manifest import MANIFEST, TOKENIZER
from dilochain.training.prepare import default_dataset, read_pins
from dilochain.training.run_config import PRESETS, make_run_config

# Flags that override one RunConfig field of the preset each: (flag, type, field, help).
_OVERRIDES = [
    ("rounds", int, "total_rounds", "outer rounds of the run (default 10)"),
    ("round-blocks", int, "round_blocks",
     "blocks of a round's commit window: the slowest host's H inner steps, its checkpoints "
     "and its commit must fit (default 20)"),
    ("seed", int, "seed", "model initialisation, shard assignment and data order (default 1)"),
    ("seq-len", int, "seq_len", "tokens a sequence (default: the preset's)"),
    ("batch-size", int, "batch_size", "sequences an inner step (default: the preset's)"),
    ("inner-steps", int, "inner_steps", "H, inner AdamW steps a round (default: the preset's)"),
    ("checkpoint-interval", int, "checkpoint_interval",
     "k, steps a checkpointed segment, dividing H; a challenge replays one segment "
     "(default: the preset's)"),
    ("start-delay-blocks", int, "start_delay_blocks",
     "blocks from creation to round 0's commit window, for hosts to join (default 0)"),
    ("min-collateral", str, "min_collateral",
     "udlc a host bonds to join, slashed for a failed challenge (default 1000000)"),
    ("compression", str, "compression",
     "pseudo-gradient compressor: int8, int4, dct-topK or dct-signK, K in 1..32 "
     "(default int8)"),
    ("precision", str, "precision", "fp32 or bf16 inner steps (default fp32)"),
    ("inner-lr", float, "inner_lr", "inner AdamW learning rate (default: the preset's, 4e-4 "
     "but 5e-3 for demo)"),
    ("outer-lr", float, "outer_lr", "outer Nesterov learning rate (default 0.7)"),
    ("outer-momentum", float, "outer_momentum", "outer Nesterov momentum (default 0.9)"),
]  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` command group."""
    run = sub.add_parser("run", help="training runs").add_subparsers(
        dest="run_cmd", required=True, metavar="{create}"
    )
    p = run.add_parser("create", help="create a run: model, tokenizer, data and schedule")
    p.add_argument("--run-id", required=True, help="the new run's id: 1 to 64 of a-z, 0-9, _ and -")
    p.add_argument("--key", required=True, help="the creator's key")
    p.add_argument("--home", type=Path, default=default_home(),
                   help="where the keyring is ($DILOCHAIN_HOME or ~/.dilochain)")  # fmt: skip
    add_chain_flag(p)
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="small",
        help="model and batch shape (with --model-config: give --seq-len and --batch-size)",
    )
    p.add_argument(
        "--model-config", type=Path, default=None, help="a Hugging Face config.json of a causal LM"
    )
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="a prepared dataset folder (its tokenizer.json and manifest.json)",
    )
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json")
    p.add_argument("--data-manifest", type=Path, default=None, help="manifest.json")
    for flag, kind, _, text in _OVERRIDES:
        p.add_argument(f"--{flag}", type=kind, default=None, help=text)
    p.add_argument("--overlap", action="store_true",
                   help="overlapped rounds: the next round trains while the last is verified "
                   "(--round-blocks must exceed the blocks verification takes; measured best "
                   "with --outer-lr 0.5 or 0.6)")  # fmt: skip
    p.add_argument("--reset-inner-state", action="store_true",
                   help="each host's round starts AdamW from zero moments instead of the "
                   "moments its last round ended with (carrying them, as in the DiLoCo paper, "
                   "measured worth 12%% of eval loss at --inner-lr 1e-3)")  # fmt: skip
    add_output_flag(p)
    p.set_defaults(func=_create)  # fmt: skip


def _data_files(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.data and (args.tokenizer or args.data_manifest):
        raise CliError("give --data, or --tokenizer with --data-manifest, not both")
    if bool(args.tokenizer) != bool(args.data_manifest):
        raise CliError("--tokenizer and --data-manifest go together")
    if args.tokenizer:
        return args.tokenizer, args.data_manifest
    folder = args.data or default_dataset(args.home)
    return folder / TOKENIZER, folder / MANIFEST


def _model_config(path: Path) -> str:
    try:
        config = json.loads(path.read_text())
    except OSError as err:
        raise CliError(f"{path}: {err.strerror}") from None
    except ValueError as err:
        raise CliError(f"{path}: not JSON ({err})") from None
    if not isinstance(config, dict):
        raise CliError(f"{path}: not a JSON object")
    return model_config.canonical(config)


def _create(args: argparse.Namespace) -> int:
    from dilochain.training.model import check_model_config, parameter_count

    tokenizer, manifest = _data_files(args)
    pins = read_pins(tokenizer, manifest)
    given = {field: getattr(args, flag.replace("-", "_")) for flag, _, field, _ in _OVERRIDES}
    fields = {field: value for field, value in given.items() if value is not None}
    if args.model_config:
        fields["model_config"] = _model_config(args.model_config)
    if args.overlap:
        fields["overlap"] = True
    if args.reset_inner_state:
        fields["carry_inner_state"] = False
    cfg = make_run_config(pins, args.preset, **fields)
    model = check_model_config(cfg.model_config)  # ModelConfigError: one line, nothing sent
    if model.config.vocab_size < pins.vocab_size:
        raise CliError(f"the model's vocab_size {model.config.vocab_size} is smaller than the "
                       f"tokenizer's vocabulary {pins.vocab_size}")  # fmt: skip
    if args.model_config and (args.seq_len is None or args.batch_size is None):
        shape = f"{cfg.seq_len} and {cfg.batch_size}"
        raise CliError(f"--model-config needs --seq-len and --batch-size (the {args.preset!r} "
                       f"preset's {shape} are for its own model)")  # fmt: skip
    positions = getattr(model.config, "max_position_embeddings", None)
    if positions is not None and cfg.seq_len > positions:
        raise CliError(f"--seq-len {cfg.seq_len} is above the model's max_position_embeddings "
                       f"{positions}")  # fmt: skip
    store = LocalArtifactStore(args.home / "artifacts")  # a node on this home serves them
    store.put(tokenizer.read_bytes())
    store.put(manifest.read_bytes())
    wallet = signing_wallet(args.home, args.key)
    creator = str(wallet.address())
    client = connect(chain_nodes(args))
    try:
        done = submit(client, wallet, MsgCreateRun(creator=creator, run_id=args.run_id,
                                                   config=cfg))  # fmt: skip
    except TxRefused as err:
        raise CliError(f"run {args.run_id!r} refused: {err}") from None
    escrowed = done.events.get("create_run", {}).get("deposit", "")
    if args.output == "json":
        print(json.dumps({
            "run_id": args.run_id, "creator": creator, "model_type": model.config.model_type,
            "parameters": parameter_count(model), "total_rounds": cfg.total_rounds,
            "inner_steps": cfg.inner_steps, "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len, "data_manifest_hash": pins.manifest_hash,
            "tokenizer_hash": pins.tokenizer_hash, "deposit": escrowed,
            "txhash": done.hash, "height": done.height,
        }, indent=2))  # fmt: skip
        return 0
    print(f"run {args.run_id} created: {model.config.model_type} model, "
          f"{parameter_count(model):,} parameters, {cfg.total_rounds} rounds of "
          f"{cfg.inner_steps} inner steps on batches of {cfg.batch_size} "
          f"sequences of {cfg.seq_len} tokens, data manifest {pins.manifest_hash[:12]}…, "
          f"tokenizer {pins.tokenizer_hash[:12]}…"
          + (f"; {escrowed} escrowed until it ends" if escrowed else ""))  # fmt: skip
    return 0

"""``dilochain export``: a run's global state and tokenizer as a Hugging Face model folder."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from dilochain.cli.common import CliError, add_chain_flag, chain_nodes, default_home
from dilochain.poc_client import PocClient
from dilochain.protocol.model_config import config_hash


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``export`` command."""
    export = sub.add_parser(
        "export", help="a round's global state and the run's tokenizer as a Hugging Face folder"
    )
    export.add_argument("--run", required=True, dest="run_id")
    export.add_argument("--round", type=int, default=None,
                        help="the global state this round trained from (default: the latest "
                             "recorded)")  # fmt: skip
    export.add_argument("--out", type=Path, required=True, help="the folder to write")
    add_chain_flag(export)
    export.add_argument("--artifacts", type=Path, default=default_home() / "artifacts",
        help="local artifact store (what it lacks comes from the run's hosts)")  # fmt: skip
    export.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from dilochain.artifacts.blob_service import PeerFetchingStore
    from dilochain.artifacts.store import LocalArtifactStore
    from dilochain.training.export import export_pretrained
    from dilochain.training.model import build_model, max_artifact_bytes
    from dilochain.training.tensor_codec import CodecError, decode_state

    with PocClient(chain_nodes(args)) as poc:
        run = poc.run(args.run_id)
        if run is None:
            raise CliError(f"unknown run {args.run_id!r}")
        recorded = {g.round: g for g in poc.global_checkpoints(args.run_id)}
        if not recorded:
            raise CliError(f"run {args.run_id!r} has no global state on chain yet")
        round_ = max(recorded) if args.round is None else args.round
        if round_ not in recorded:
            raise CliError(f"run {args.run_id!r} has no global state for round {round_} "
                           f"(recorded: {min(recorded)}-{max(recorded)})")  # fmt: skip
        endpoints = [h.endpoint for h in poc.hosts(run_id=args.run_id)]
    digest = recorded[round_].hash
    model = build_model(run.config.model_config, run.config.seed)
    limit = max_artifact_bytes(model)
    store = PeerFetchingStore(LocalArtifactStore(args.artifacts), lambda: endpoints, limit)
    try:
        state = decode_state(store.get(digest))
    except CodecError as err:
        raise CliError(f"global state {digest.hex()[:12]}…: {err}") from None
    with tempfile.TemporaryDirectory() as work:  # the run's tokenizer, fetched by its hash
        tokenizer = Path(work) / "tokenizer.json"
        tokenizer.write_bytes(store.get(bytes.fromhex(run.config.tokenizer_hash)))
        export_pretrained(model, state, tokenizer, args.out)
    (args.out / "dilochain.json").write_text(json.dumps({
        "run_id": args.run_id, "round": round_, "global_state_sha256": digest.hex(),
        "model_config_sha256": config_hash(run.config.model_config),
    }, indent=2) + "\n")  # fmt: skip
    print(f"exported run {args.run_id} round {round_} ({digest.hex()[:12]}…) to {args.out}")
    return 0

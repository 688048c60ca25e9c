"""``dilochain export``: a run's global state and tokenizer as a Hugging Face model folder."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
from pathlib import Path

from dilochain.chain_view import eval_curve
from dilochain.cli.common import (
    CliError,
    add_chain_flag,
    add_output_flag,
    chain_nodes,
    default_home,
    output_folder,
    print_result,
)
from dilochain.poc_client import PocClient
from dilochain.protocol import schedule
from dilochain.protocol.model_config import config_hash


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``export`` command."""
    export = sub.add_parser(
        "export", help="a run's global state and its tokenizer as a Hugging Face folder"
    )
    export.add_argument("--run", required=True, dest="run_id")
    export.add_argument("--round", type=int, default=None,
                        help="the global state round R trained from; the run's total rounds "
                             "for the state its last round made (default: that final state "
                             "once the run has finished, else the latest recorded)")  # fmt: skip
    export.add_argument("--out", type=_export_folder, required=True,
                        help="the folder to write: new, empty or an earlier export's")  # fmt: skip
    add_chain_flag(export)
    export.add_argument("--home", type=Path, default=default_home(),
                        help="a node home of the run, whose artifacts are read first")  # fmt: skip
    export.add_argument("--artifacts", type=Path, default=None,
                        help="an artifact store to read instead of HOME/artifacts (what it "
                             "lacks comes from the run's hosts)")  # fmt: skip
    add_output_flag(export)
    export.set_defaults(func=_export)


def _export_folder(text: str) -> Path:
    """``--out`` (an argparse type): a folder to write (``output_folder``) that is new, empty or
    an earlier export's, whose files are replaced; never one holding other files, which the
    export's README.md and config.json would overwrite."""
    path = output_folder(text)
    if path.is_dir() and any(path.iterdir()) and not (path / "dilochain.json").exists():
        raise argparse.ArgumentTypeError(
            f"{text} holds other files (an export writes README.md, config.json, …): give a new "
            "or empty folder, or an earlier export's"
        )
    return path


def _export(args: argparse.Namespace) -> int:
    from dilochain.artifacts.store import ArtifactError
    from dilochain.training.dataset import MAX_TOKENIZER_BYTES
    from dilochain.training.export import ExportNotes, export_pretrained, model_card

    artifacts = args.artifacts or args.home / "artifacts"
    logging.getLogger("dilochain.node.aggregation").setLevel(logging.WARNING)  # one line says it
    with PocClient(chain_nodes(args)) as poc:
        run = poc.run(args.run_id)
        if run is None:
            raise CliError(f"unknown run {args.run_id!r}")
        params, cfg = poc.params(), run.config
        recorded = {g.round: g.hash for g in poc.global_checkpoints(args.run_id)}
        if not recorded:
            raise CliError(f"run {args.run_id!r} has no global state on chain yet")
        height = poc.round_info(args.run_id).height
        total = cfg.total_rounds
        finished = height > schedule.round_window(run, params, total - 1).resolution
        target = args.round if args.round is not None else total if finished else max(recorded)
        if not 0 <= target <= total:
            raise CliError(f"--round: run {args.run_id!r} has rounds 0-{total - 1}, and {total} "
                           "names the state its last round made")  # fmt: skip
        try:
            model, view, store = state_at(poc, run, target, artifacts)
            with tempfile.TemporaryDirectory() as work:  # the run's tokenizer, by its hash
                tokenizer = Path(work) / "tokenizer.json"
                named = bytes.fromhex(cfg.tokenizer_hash)
                tokenizer.write_bytes(store.get(named, MAX_TOKENIZER_BYTES))
                differ = export_pretrained(model, view.state, tokenizer, args.out, cfg.seq_len)
        except ArtifactError as err:
            raise CliError(
                f"{err}. It is not (intact) in {artifacts} and the run's hosts no longer serve "
                "it: give --home (or --artifacts) of another node of the run"
            ) from None
        losses = dict(eval_curve(poc, args.run_id, min(target + 1, total)))
    digest = view.hash.hex()
    notes = ExportNotes(run_id=args.run_id, round=target, total_rounds=total,
                        global_state_sha256=digest,
                        model_config_sha256=config_hash(cfg.model_config),
                        data_manifest_sha256=cfg.data_manifest_hash,
                        tokenizer_sha256=cfg.tokenizer_hash, losses=losses,
                        derived=target not in recorded)  # fmt: skip
    (args.out / "README.md").write_text(model_card(notes, model.config.model_type))
    (args.out / "dilochain.json").write_text(json.dumps(dataclasses.asdict(notes), indent=2) + "\n")
    what = "final state" if target == total else f"round {target}"
    print_result(args, {**dataclasses.asdict(notes), "out": str(args.out)},
                 f"exported run {args.run_id} {what} ({digest[:12]}…) to {args.out}")  # fmt: skip
    if differ:
        print(f"warning: transformers' tokenizer for {model.config.model_type} does not give "
              f"this run's token ids for {differ[0]!r} (the run's tokenizer predates exports "
              "that match); load tokenizer.json with PreTrainedTokenizerFast(tokenizer_file=…)",
              file=sys.stderr)  # fmt: skip
    return 0


def state_at(poc: PocClient, run, target: int, artifacts: Path):
    """(the run's model, θ_target, the store it was read from): θ_target recorded on chain, or
    computed round by round from the last recorded state before it (each round it crosses must
    be decided) from the artifacts under ``artifacts`` and those the run's hosts and verifiers
    serve. Raises :class:`CliError`, or ``ArtifactError`` when an artifact is nowhere found."""
    from dilochain.artifacts.blob_service import PeerFetchingStore
    from dilochain.artifacts.store import LocalArtifactStore
    from dilochain.node.aggregation import Aggregator, GlobalView
    from dilochain.training.model import build_model, max_artifact_bytes

    cfg, params = run.config, poc.params()
    recorded = {g.round: g.hash for g in poc.global_checkpoints(run.run_id)}
    height = poc.round_info(run.run_id).height
    model = build_model(cfg.model_config, cfg.seed)
    reference = {n: p.detach() for n, p in model.named_parameters()}
    endpoints = [h.endpoint for h in poc.hosts(run_id=run.run_id)]  # then verifiers: what they
    endpoints += poc.verifier_endpoints()  # screened of late rounds
    store = PeerFetchingStore(LocalArtifactStore(artifacts), lambda: endpoints,
                              max_artifact_bytes(model))  # fmt: skip
    aggregator = Aggregator(poc, run.run_id, cfg, store, patience=10,
                            min_hosts=params.min_hosts_per_round,
                            fail_closed=params.fail_closed, reference=reference)  # fmt: skip
    start = max((r for r in recorded if r <= target), default=None)
    if start is None:
        raise CliError(f"no global state of run {run.run_id!r} is recorded before round {target}")
    view = GlobalView(start, aggregator.global_state(recorded[start]))
    while view.round < target:
        resolution = schedule.round_window(run, params, view.round).resolution
        if height <= resolution:
            raise CliError(f"round {view.round} of run {run.run_id!r} is decided at block "
                           f"{resolution}; the chain is at {height}")  # fmt: skip
        view = aggregator.advance(view)
    return model, view, store

"""``dilochain node start``: the host operator's node."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import signal
import threading
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from dilochain.artifacts.store import ArtifactError
from dilochain.cli.common import (
    CliError,
    add_output_flag,
    keyring,
    print_result,
    print_tables,
    send_leave,
    signing_wallet,
)
from dilochain.cli.config_file import (
    Setting,
    add_config_command,
    add_identity_flags,
    add_init_and_start,
    add_service_flags,
    config_path,
    resolve,
    service_settings,
)
from dilochain.client import Sender, connect
from dilochain.logs import setup_logging
from dilochain.metrics_http import serve_metrics
from dilochain.node.config import BEHAVIOR_NAMES, OWN_REVEALS
from dilochain.node.reveals import Served, early_revealer, serve_early
from dilochain.poc_client import PocClient
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgLeaveRun

CONFIG_NAME = "node.toml"
SETTINGS = [
    *service_settings("signs", "127.0.0.1:9464"),
    Setting("run_id", "--run", None, "The run this host trains.", "my-run"),
    Setting("device", "--device", "cpu", "Where to train: cpu or cuda."),
    Setting("threads", "--threads", 1, "torch CPU threads per rank."),
    Setting("nproc_per_node", "--nproc-per-node", 1,
            "Local processes training each step data-parallel (one GPU each on cuda);\n"
            "the run's batch size must divide by it."),
    Setting("data", "--data", None, "The run's prepared dataset folder (default: the shipped one;\n"
            "a run whose data is elsewhere is fetched from its hosts).", "/srv/dilochain/data"),
    Setting("artifacts", "--artifacts", None, "Artifact directory (default: HOME/artifacts).",
            "/srv/dilochain/artifacts"),
    Setting("blob_address", "--blob-address", "127.0.0.1:0",
            "Where this host serves its artifacts to verifiers and peers (port 0: any)."),
    Setting("advertise_address", "--advertise-address", None,
            "The address verifiers and peers dial for them, if not the one above (behind NAT:\n"
            "your public address and the port your router forwards).", "203.0.113.7:7000"),
    Setting("object_store", "--object-store", None,
            "Publish artifacts to this S3-compatible bucket instead of serving them (hosts\n"
            "behind NAT): s3://BUCKET/PREFIX, its PREFIX public-read; credentials from the\n"
            "AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or AWS_PROFILE.",
            "s3://my-bucket/dilochain"),
    Setting("object_store_endpoint", "--object-store-endpoint", None,
            "The S3 API's URL when not AWS (R2, MinIO, Ceph, versitygw).",
            "https://ACCOUNT.r2.cloudflarestorage.com"),
    Setting("object_store_public_url", "--object-store-public-url", None,
            "The URL readers GET the prefix at, if not ENDPOINT/BUCKET/PREFIX (a CDN, R2's\n"
            "public bucket URL).", "https://pub-1234.r2.dev/dilochain"),
    Setting("keep_global_states", "--keep-global-states", 4,
            "Global states kept: the newest N rounds'."),
    Setting("archive_every", "--archive-every", 10,
            "Also keep every K-th round's global state, as an archive (0: none)."),
    Setting("keep_decided_rounds", "--keep-decided-rounds", 1,
            "A round's checkpoints and pseudo-gradients (and, a round longer, its residual) are\n"
            "deleted this many rounds after its challenges are decided (more: for audits)."),
]  # fmt: skip


def _add_leave_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``node leave``: the node's key, chain and run."""
    add_identity_flags(parser)
    parser.add_argument("--run", dest="run_id", default=argparse.SUPPRESS, help="the run to leave")


def _add_settings(parser: argparse.ArgumentParser) -> None:
    """The flags of ``node init`` and ``node start``: one per setting, defaulting to the
    config file (then to NodeConfig's defaults)."""
    none = argparse.SUPPRESS
    add_service_flags(parser)
    parser.add_argument("--run", dest="run_id", default=none)
    parser.add_argument(
        "--data",
        type=Path,
        default=none,
        help="the run's prepared dataset folder (default: the shipped one)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default=none)
    parser.add_argument("--artifacts", type=Path, default=none, help="artifact directory")
    parser.add_argument("--blob-address", default=none)
    parser.add_argument("--advertise-address", default=none,
                        help="the address others dial for the blob service (default: the one "
                             "it listens on)")  # fmt: skip
    parser.add_argument("--object-store", default=none, metavar="s3://BUCKET/PREFIX",
                        help="publish artifacts to an S3-compatible bucket (public-read prefix) "
                             "instead of serving them")  # fmt: skip
    parser.add_argument("--object-store-endpoint", default=none, metavar="URL",
                        help="the S3 API's URL when not AWS")  # fmt: skip
    parser.add_argument(
        "--object-store-public-url",
        default=none,
        metavar="URL",
        help="where readers GET the prefix (default: ENDPOINT/BUCKET/PREFIX)",
    )
    parser.add_argument("--threads", type=int, default=none, help="torch CPU threads (per rank)")
    parser.add_argument(
        "--keep-global-states",
        type=int,
        default=none,
        help="global states kept: the newest N rounds' (default 4)",
    )
    parser.add_argument(
        "--archive-every",
        type=int,
        default=none,
        help="also keep every K-th round's global state (default 10; 0: none)",
    )
    parser.add_argument(
        "--keep-decided-rounds",
        type=int,
        default=none,
        help="rounds a decided round's artifacts stay (default 1)",
    )
    parser.add_argument(
        "--nproc-per-node", type=int, default=none,
        help="local processes training each step data-parallel (one GPU each with --device "
        "cuda); the run's batch size must divide by it",
    )  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``node`` command group."""
    node = sub.add_parser("node", help="run a host node").add_subparsers(
        dest="node_cmd", required=True, metavar="{init,start,leave,prune}"
    )
    start = add_init_and_start(node, CONFIG_NAME, "start",
                               "train a run's rounds and commit them on chain", _start, SETTINGS,
                               _add_settings, _model)  # fmt: skip
    start.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model (chains that verify in tolerance mode)",
    )
    start.add_argument(
        "--wait-for-run",
        action="store_true",
        help="start before the run is created and wait for it",
    )
    leave = add_config_command(node, CONFIG_NAME, "leave",
                               "leave the run: deregister now, unbond once the last round "
                               "resolves", _leave, _add_leave_flags)  # fmt: skip
    prune = add_config_command(node, CONFIG_NAME, "prune",
                               "delete artifacts that no longer matter (see --dry-run)", _prune,
                               _add_settings)  # fmt: skip
    prune.add_argument("--dry-run", action="store_true", help="only show what would go")
    for command in (leave, prune):
        add_output_flag(command)
    # The devnet's and the tests' dishonest hosts; not for operators.
    start.add_argument(
        "--behavior", default="honest", choices=BEHAVIOR_NAMES, help=argparse.SUPPRESS
    )


def _model() -> type:
    from dilochain.node.config import NodeConfig

    return NodeConfig


def _wait_for_run(chain: str, run_id: str, stop: threading.Event, poll: float) -> bool:
    """Wait until ``run_id`` exists on chain (False if stopped first)."""
    with PocClient(chain) as poc:
        if poc.run(run_id) is None:
            logging.info("waiting for run %s to be created", run_id)
        while poc.run(run_id) is None:
            if stop.wait(poll):
                return False
    return True


class RoundProgress:
    """A progress bar per round, named by the chain's round number: step, loss, tokens/s."""

    def __init__(self, progress: Progress, steps: int, total_rounds: int):
        self.progress = progress
        self.steps = steps
        self.total_rounds = total_rounds
        self.task = None

    def __call__(self, step: int, loss: float, rate: float, round_: int) -> None:
        if step == 1:
            self.task = self.progress.add_task(
                f"round {round_} of {self.total_rounds}",
                total=self.steps,
                loss=loss,
                rate=rate,
            )
        self.progress.update(self.task, completed=step, loss=loss, rate=rate)


COLUMNS = [
    TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
    TextColumn("loss {task.fields[loss]:.3f}"), TextColumn("{task.fields[rate]:,.0f} tok/s"),
]  # fmt: skip


def _start(args: argparse.Namespace) -> int:
    from dilochain.node.config import NodeConfig

    cfg = resolve(NodeConfig, config_path(args, CONFIG_NAME), SETTINGS, args, home=args.home,
                  behavior=args.behavior, compile=args.compile)  # fmt: skip
    if not cfg.object_store and (problem := cfg.unreachable_blob_service()) is not None:
        raise CliError(problem)
    setup_logging(cfg.log_format)
    wallet = signing_wallet(args.home, cfg.key)
    objects = _object_store(cfg, str(wallet.address()))
    client = connect(cfg.chain)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    from dilochain.node.metrics import REGISTRY

    metrics = serve_metrics(cfg.metrics_address, REGISTRY)
    try:
        served = None if objects is not None else _serve_early(cfg)
        sender = Sender(client, wallet)
        early = None  # what a restart owes is revealed while torch loads and the model builds
        if cfg.behavior not in OWN_REVEALS:  # (those cheats reveal as the node does, later)
            send = functools.partial(sender.submit, poll=cfg.poll_seconds)
            early = early_revealer(cfg.chain, cfg.run_id,
                                   client.network_config.chain_id, cfg.state_dir,
                                   str(wallet.address()), send, cfg.poll_seconds, stop)  # fmt: skip
            if early is not None and served is not None:  # what it reveals is served there
                threading.Thread(
                    target=early.point_to, args=(served.endpoint,), daemon=True, name="endpoint"
                ).start()  # a halted chain holds no start
        from dilochain.node.cheats import behavior  # torch: loaded before a run it waits for
        from dilochain.node.host import HostNode  # begins, as every host would load it at once

        try:
            if args.wait_for_run and not _wait_for_run(cfg.chain, cfg.run_id, stop,
                                                       cfg.poll_seconds):  # fmt: skip
                return 0
            node = HostNode(cfg, client, wallet, behavior(cfg.behavior), objects, sender,
                            early, served)  # fmt: skip
        except BaseException:  # (once the node runs, it stops the server itself)
            if served is not None:
                served.server.stop(grace=None)
            raise
        if cfg.log_format == "json":  # log collectors get no progress bars
            committed = node.serve_and_run(stop)
        else:
            with Progress(*COLUMNS, console=Console(stderr=True), transient=False) as progress:
                committed = node.serve_and_run(
                    stop, RoundProgress(progress, node.rc.inner_steps, node.rc.total_rounds)
                )
    finally:
        if metrics is not None:
            metrics.close()
    print(f"node stopped: {committed} rounds committed this session", flush=True)
    return 0


def _serve_early(cfg) -> Served:
    """The host's blob service, serving before the node is built (:func:`serve_early`)."""
    try:
        return serve_early(cfg.artifact_dir, cfg.blob_address, cfg.advertise_address)
    except ArtifactError as err:
        raise CliError(str(err)) from None


def _object_store(cfg, host: str, check: bool = True):
    """The object store ``host`` publishes to (None without one), checked (unless not
    ``check``): reachable by the chain's other machines, written to and read back from its
    public URL; or one line saying what to fix."""
    if not cfg.object_store:
        return None
    from dilochain.artifacts.object_store import ObjectStore

    try:
        store = ObjectStore(cfg.object_store, cfg.run_id, host, cfg.object_store_endpoint,
                            cfg.object_store_public_url)  # fmt: skip
        if check:
            if (problem := cfg.unreachable_blob_service(store.location)) is not None:
                raise CliError(problem)
            store.check()
    except ArtifactError as err:
        raise CliError(str(err)) from None
    return store


def _leave(args: argparse.Namespace) -> int:
    from dilochain.node.config import NodeConfig

    cfg = resolve(NodeConfig, config_path(args, CONFIG_NAME), SETTINGS, args, home=args.home)
    wallet = signing_wallet(args.home, cfg.key)
    host = str(wallet.address())
    msg = MsgLeaveRun(host=host, run_id=cfg.run_id)
    receipt = send_leave(cfg.chain, wallet, msg, f"run {cfg.run_id!r}", "leave_run")
    print_result(args, {"host": host, "run_id": cfg.run_id, **receipt}, (
        f"{host} left run {cfg.run_id} at block {receipt['height']} (tx {receipt['txhash']}).\n"
        f"Its collateral stays held until block {receipt['release_height']}, when the round it "
        f"left in is resolved (a slash for that round is taken first);\nthen all its free "
        f"collateral unbonds and is paid back {receipt['unbonding_blocks']} blocks and at least "
        f"{receipt['unbonding_period_seconds']} s later. A running `node start` reveals what it "
        "owes for that round, then stops."))  # fmt: skip
    return 0


def _prune(args: argparse.Namespace) -> int:
    from typing import get_args

    from dilochain.artifacts.pruning import Kind, Ledger, Retention
    from dilochain.artifacts.store import LocalArtifactStore
    from dilochain.node.config import NodeConfig

    cfg = resolve(NodeConfig, config_path(args, CONFIG_NAME), SETTINGS, args, home=args.home)
    connect(cfg.chain)  # a clear error if no chain answers
    with PocClient(cfg.chain) as poc:
        if poc.run(cfg.run_id) is None:
            raise CliError(f"unknown run {cfg.run_id!r}")
        info = poc.round_info(cfg.run_id)
    store = LocalArtifactStore(cfg.artifact_dir)
    retention = Retention(cfg.keep_global_states, cfg.archive_every, cfg.keep_decided_rounds)
    resolved = info.round - 1  # rounds follow one another: the one before is decided
    objects = None
    if cfg.object_store and not args.dry_run:  # the bucket too, first
        objects = _object_store(cfg, keyring(args.home).show(cfg.key).address, check=False)
    try:
        gone = Ledger(cfg.state_dir).prune(store, resolved, retention, dry_run=args.dry_run,
                                           published=objects)  # fmt: skip
    except ArtifactError as err:
        raise CliError(f"{err} (nothing deleted here: run node prune again)") from None
    removed = len({e.hash for e, _ in gone}) if objects is not None else 0
    if objects is not None and args.output == "text":
        print(f"deleted {removed} objects from {objects.location}")
    if args.output == "json":
        print(json.dumps({
            "dry_run": args.dry_run, "decided_through": resolved, "objects_deleted": removed,
            "artifacts": [{"kind": e.kind, "round": e.round, "hash": e.hash, "bytes": size}
                          for e, size in gone],
            "freed_bytes": sum(size for _, size in gone), "stored_bytes": store.total_bytes(),
        }, indent=2))  # fmt: skip
        return 0
    table = Table("kind", "rounds", "artifacts", "MB",
                  title=("would delete" if args.dry_run else "deleted")
                  + f" (rounds up to {resolved} are decided)")  # fmt: skip
    for kind in get_args(Kind):
        mine = [(e, size) for e, size in gone if e.kind == kind]
        if mine:
            rounds = sorted({e.round for e, _ in mine})
            table.add_row(kind, f"{rounds[0]}-{rounds[-1]}", str(len(mine)),
                          f"{sum(size for _, size in mine) / 1e6:.1f}")  # fmt: skip
    print_tables(table)
    print(f"{'would free' if args.dry_run else 'freed'} "
          f"{sum(size for _, size in gone) / 1e6:.1f} MB; {store.total_bytes() / 1e6:.1f} MB "
          f"stored in {store.root}")  # fmt: skip
    return 0

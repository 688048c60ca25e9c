"""``dilochain node start``: the host operator's node."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from dilochain.cli.common import CliError, default_home, keyring, keyring_password
from dilochain.client import connect
from dilochain.node.config import BEHAVIOR_NAMES
from dilochain.poc_client import PocClient


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``node`` command group."""
    node = sub.add_parser("node", help="run a host node").add_subparsers(
        dest="node_cmd", required=True, metavar="{start}"
    )
    start = node.add_parser("start", help="train a run's rounds and commit them on chain")
    start.add_argument("--home", type=Path, default=default_home())
    start.add_argument("--run", required=True, dest="run_id")
    start.add_argument("--key", required=True)
    start.add_argument("--chain", default="127.0.0.1:9090", help="chain gRPC address")
    start.add_argument(
        "--data",
        type=Path,
        default=None,
        help="the run's prepared dataset folder (default: the shipped one)",
    )
    start.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    start.add_argument("--artifacts", type=Path, default=None, help="artifact directory")
    start.add_argument("--blob-address", default="127.0.0.1:0")
    start.add_argument("--threads", type=int, default=1, help="torch CPU threads (per rank)")
    start.add_argument(
        "--nproc-per-node", type=int, default=1,
        help="local processes training each step data-parallel (one GPU each with --device "
        "cuda); the run's batch size must divide by it",
    )  # fmt: skip
    start.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model (chains that verify in tolerance mode)",
    )
    start.add_argument("--wait-for-run", action="store_true",
                       help="start before the run is created and wait for it")  # fmt: skip
    # The devnet's and the tests' dishonest hosts; not for operators.
    start.add_argument("--behavior", default="honest", choices=BEHAVIOR_NAMES,
                       help=argparse.SUPPRESS)  # fmt: skip
    start.set_defaults(func=_start)


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
    """A progress bar per round: step, loss, tokens/s."""

    def __init__(self, progress: Progress, steps: int):
        self.progress = progress
        self.steps = steps
        self.task = None
        self.round = 0

    def __call__(self, step: int, loss: float, rate: float) -> None:
        if step == 1:
            self.task = self.progress.add_task(
                f"round {self.round}", total=self.steps, loss=loss, rate=rate
            )
            self.round += 1
        self.progress.update(self.task, completed=step, loss=loss, rate=rate)


def _start(args: argparse.Namespace) -> int:
    from dilochain.node.cheats import behavior
    from dilochain.node.config import NodeConfig
    from dilochain.node.host import HostNode

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = NodeConfig(
            home=args.home, run_id=args.run_id, key=args.key, chain=args.chain, data=args.data,
            device=args.device, artifacts=args.artifacts, blob_address=args.blob_address,
            threads=args.threads, behavior=args.behavior, compile=args.compile,
            nproc_per_node=args.nproc_per_node,
        )  # fmt: skip
    except ValidationError as err:
        raise CliError(
            f"invalid node option: {err.errors()[0]['loc'][0]}: {err.errors()[0]['msg']}"
        ) from None
    ring = keyring(args.home)
    ring.show(args.key)  # unknown key: fail before asking for a password
    wallet = ring.wallet(args.key, keyring_password())
    client = connect(args.chain)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.wait_for_run and not _wait_for_run(args.chain, cfg.run_id, stop, cfg.poll_seconds):
        return 0
    node = HostNode(cfg, client, wallet, behavior(cfg.behavior))
    columns = [
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"), TextColumn("{task.fields[rate]:,.0f} tok/s"),
    ]  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        tracker = RoundProgress(progress, node.rc.inner_steps)
        committed = node.serve_and_run(stop, tracker)
    print(f"node stopped: {committed} rounds committed this session", flush=True)
    return 0

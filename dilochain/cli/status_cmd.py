"""``dilochain status``: the chain, its runs, hosts, slashes and challenges at a glance."""

from __future__ import annotations

import argparse
import statistics

from rich.console import Console
from rich.table import Table

from dilochain.client import connect
from dilochain.poc_client import PocClient
from dilochain.protocol.pb.poc.v1.types_pb2 import ChallengeStatus


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``status`` command."""
    status = sub.add_parser("status", help="chain height, runs, hosts, slashes, challenges")
    status.add_argument("--chain", default="127.0.0.1:9090", help="chain gRPC address")
    status.add_argument("--run", default=None, dest="run_id", help="only this run")
    status.set_defaults(func=_status)


def eval_curve(poc, run_id: str, rounds: int) -> list[tuple[int, float]]:
    """(round, median committed eval loss of the round's base state) for rounds with commits."""
    curve = []
    for r in range(rounds):
        commits = poc.commits(run_id=run_id, round=r)
        losses = [c.eval_loss for c in commits if c.eval_loss]
        if losses:
            curve.append((r, statistics.median(losses)))
    return curve


def tables(address: str, only: str | None = None) -> list[Table]:
    """The status tables for the chain at ``address``."""
    with PocClient(address) as poc:
        return _tables(connect(address), poc, only)


def _tables(client, poc: PocClient, only: str | None) -> list[Table]:
    height = client.query_height()
    epoch = poc.epoch()
    out = [Table("chain", "height", "epoch", title="dilochain")]
    out[0].add_row(client.network_config.chain_id, str(height),
                   f"{epoch.epoch} (blocks {epoch.start_height}-{epoch.end_height})")  # fmt: skip
    slashes = list(poc.slashes())
    for run in poc.runs():
        if only and run.run_id != only:
            continue
        info = poc.round_info(run_id=run.run_id)
        curve = eval_curve(poc, run.run_id, min(info.round + 1, run.config.total_rounds))
        rounds = Table("run", "round", "phase", "eval loss", "pending challenges",
                       title=f"run {run.run_id}")  # fmt: skip
        phase = ("finished" if info.finished else "waiting" if height + 1 < info.window_start
                 else "commit" if height + 1 <= info.window_end else "challenge")  # fmt: skip
        pending = sum(
            c.status == ChallengeStatus.CHALLENGE_STATUS_PENDING
            for c in poc.challenges(run.run_id, info.round)
        )
        rounds.add_row(run.run_id, f"{info.round}/{run.config.total_rounds}", phase,
                       f"{curve[-1][1]:.4f}" if curve else "-", str(pending))  # fmt: skip
        hosts = Table("host", "endpoint", "collateral", "slashed", title=f"hosts of {run.run_id}")
        for host in poc.hosts(run_id=run.run_id):
            bonded = poc.collateral(address=host.address)
            taken = sum(int(s.amount) for s in slashes if s.address == host.address)
            hosts.add_row(host.address, host.endpoint, f"{bonded.bonded}udlc",
                          f"{taken}udlc" if taken else "-")  # fmt: skip
        out += [rounds, hosts]
    return out


def _status(args: argparse.Namespace) -> int:
    console = Console()
    for table in tables(args.chain, args.run_id):
        console.print(table)
    return 0

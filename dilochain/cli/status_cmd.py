"""``dilochain status``: the chain, its runs, hosts, verifiers and claims at a glance
(the same view the dashboard serves, from :mod:`dilochain.chain_view`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rich.table import Table

from dilochain.chain_view import chain_view
from dilochain.cli.common import (
    CliError,
    add_chain_flag,
    add_output_flag,
    chain_nodes,
    dlc,
    print_output,
)
from dilochain.client import connect
from dilochain.poc_client import PocClient


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``status`` command."""
    status = sub.add_parser("status", help="chain height, runs, hosts, slashes, challenges")
    add_chain_flag(status)
    status.add_argument("--run", default=None, dest="run_id", help="only this run")
    add_output_flag(status)
    status.set_defaults(func=_status)


def view(addresses: str | Sequence[str], only: str | None = None) -> dict:
    """The chain view (as the dashboard serves it) of the chain at ``addresses``."""
    with PocClient(addresses) as poc:
        return chain_view(connect(addresses), poc, only)


def tables(addresses: str | Sequence[str], only: str | None = None) -> list[Table]:
    """The status tables for the chain at ``addresses`` (its nodes' gRPC addresses)."""
    return render(view(addresses, only))


def render(view: dict) -> list[Table]:
    """A chain view as tables: chain, then per run its round and hosts, then the verifiers and
    recent epochs."""
    epoch = view["epoch"]
    out = [Table("chain", "height", "epoch", title="dilochain")]
    bounds = f"blocks {epoch['start_height']}-{epoch['end_height']}"
    out[0].add_row(view["chain_id"], str(view["height"]), f"{epoch['epoch']} ({bounds})")
    for run in view["runs"]:
        rounds = Table("run", "round", "phase", "eval loss", "pending challenges",
                       title=f"run {run['run_id']}")  # fmt: skip
        curve = run["loss_curve"]
        pending = sum(c["status"] == "pending" for c in run["challenges"])
        rounds.add_row(run["run_id"], f"{run['round']}/{run['total_rounds']}", run["phase"],
                       f"{curve[-1][1]:.4f}" if curve else "-", str(pending))  # fmt: skip
        hosts = Table(
            "host", "endpoint", "collateral", "slashed", title=f"hosts of {run['run_id']}"
        )
        for h in run["hosts"]:
            name = h["address"] + ("" if h["registered"] else " (no longer registered)")
            hosts.add_row(name, h["endpoint"], dlc(h["collateral"]),
                          dlc(h["slashed"]) if h["slashed"] else "-")  # fmt: skip
        out += [rounds, hosts]
    verifiers = Table("verifier", "status", "collateral", "slashed", "earned", title="verifiers")
    for v in view["verifiers"]:
        verifiers.add_row(v["address"], verifier_status(v), dlc(v["collateral"]),
                          dlc(v["slashed"]) if v["slashed"] else "-", dlc(v["earned"]))  # fmt: skip
    out.append(verifiers)
    claims = Table("epoch", "status", "pool", "earned by", "claimed", title="recent epochs")
    for e in view["epochs"]:
        earned = e["claims"]
        claims.add_row(str(e["epoch"]), "closed" if e["closed"] else "open",
                       dlc(e["reward_pool"]), str(len(earned)),
                       str(sum(c["claimed"] for c in earned)))  # fmt: skip
    return [*out, claims]


def progress_lines(view: dict) -> list[str]:
    """A line per run of a chain view, for output that is not a terminal (no live tables): its
    round, the last held-out loss and the challenges pending; it changes a few times a round."""
    lines = []
    for run in view["runs"]:
        curve, pending = run["loss_curve"], sum(c["status"] == "pending" for c in run["challenges"])
        loss = f", held-out loss {curve[-1][1]:.4f} (round {curve[-1][0]})" if curve else ""
        lines.append(f"run {run['run_id']}: round {run['round']}/{run['total_rounds']}"
                     f"{' (finished)' if run['phase'] == 'finished' else ''}{loss}, "
                     f"{pending} challenge{'' if pending == 1 else 's'} pending")  # fmt: skip
    return lines


def verifier_status(v: dict) -> str:
    """A verifier of the chain view in words, as the dashboard says it."""
    if v["left_height"]:
        return f"leaving (left at block {v['left_height']}, released after block " \
               f"{v['release_height']})"  # fmt: skip
    if v["up"] is None:
        return "idle (no run in progress)"
    return "up" if v["up"] else "not seen in the last two rounds"


def _status(args: argparse.Namespace) -> int:
    found = view(chain_nodes(args), args.run_id)
    if args.run_id is not None and not found["runs"]:
        raise CliError(f"unknown run {args.run_id!r} (dilochain query poc runs lists them)")
    print_output(args, found, *render(found))
    return 0

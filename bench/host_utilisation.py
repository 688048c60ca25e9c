"""Host utilisation — seconds in inner steps over wall-clock seconds — in steady state, with
rounds one after another (train, then wait while the round is verified) and overlapped (the next
round trains while the last is verified). Real node and verifier processes against the real
chain (0.2 s blocks), rounds of H = ``--h`` inner steps of the ``small`` preset. The commit
window is sized so a round's training fills ``--fill`` of it: for the first schedule at the
inner-step time this process measures (plus 15%), for the overlapped one at the step and block
times the node measured in the first run (the closest estimate of the next run on a noisy
machine) plus 12% for the verifiers that work beside an overlapped host's steps. Utilisation is
read from each host's ``dilochain_node_training_seconds`` counter between the start of round 1
and the start of the last round, and, honestly, from ``dilochain_node_committed_training_seconds``
(training of rounds whose commit landed: a round that missed its window was work for nothing).
Everything shares this machine's cores, so the verifiers run at the lowest CPU priority (nice
19): their screens and replays, which in an overlapped run happen while the host trains, would
otherwise slow its steps as verifiers on their own machines do not.

    .venv/bin/python -m bench.host_utilisation [--h 60] [--rounds 6] [--hosts 1]
        [--fill 0.92 | --window BLOCKS] [--overlapped-only] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cosmpy.aerial.client import LedgerClient
from rich.console import Console
from rich.table import Table

from dilochain.client import TxRefused, network_config, submit
from dilochain.keyring import Keyring
from dilochain.localnet import (
    ChainProcess,
    init_localnet,
    metrics_url_in,
    spawn_node,
    spawn_verifier,
    wait_until_ready,
)
from dilochain.metrics_http import scrape
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.protocol.schedule import round_window
from dilochain.testutil import CHAIN_ID, shipped_data, wallet
from dilochain.training.run_config import make_run_config
from dilochain.training.train_step import seconds_per_step

PASSWORD = "pw"
BLOCK_SECONDS = 0.2
COLLATERAL = 10_000_000
# 26 blocks of verification: inside the commit window (an overlapped run needs that). The
# chain's default sampling rate: verifiers screen every commit and replay ~1.5% of segments, as
# in production, where they do it on their own machines rather than on the host's cores.
POC = {"beacon_reveal_blocks": 4, "reveal_window_blocks": 6, "verdict_window_blocks": 12,
       "verdict_open_blocks": 4, "verifiers_per_challenge": 2, "quorum": 2,
       "min_verifier_collateral": COLLATERAL}  # fmt: skip
VERIFIERS = 2
# A node's steps run ~10-15% slower than this process's alone (its service threads, the
# verifiers beside it): the first run's window allows for it.
NODE_SLOWER = 1.15
# An overlapped host's steps share the cores with the verifiers' screens and replays of its
# last round, which one after another run while it waits: 0.177 s a step against 0.159 s
# (2026-12-05). Its window allows for that, or rounds run past their windows.
OVERLAP_SLOWER = 1.12


def training(url: str) -> tuple[float, float, float]:
    """A host's (``dilochain_node_training_seconds_total``, ``…_inner_steps_total``,
    ``…_committed_training_seconds_total``)."""
    found = scrape(url)
    return (found.get("dilochain_node_training_seconds_total", 0.0),
            found.get("dilochain_node_inner_steps_total", 0.0),
            found.get("dilochain_node_committed_training_seconds_total", 0.0))  # fmt: skip


@dataclass
class Measured:
    """One schedule's run: each host's utilisation (all training, and training of rounds that
    landed) and seconds per inner step, the seconds per block, and commits."""

    utilisation: list[float]
    landed: list[float]
    step_seconds: list[float]
    block_seconds: float
    commits: int


def measure(root: Path, overlap: bool, args, window: int, rounds: int) -> Measured:
    """Run one schedule of ``rounds`` rounds with commit windows of ``window`` blocks."""
    creator = wallet(600)
    homes = [root / f"host-{i}" for i in range(args.hosts)]
    checkers = [root / f"verifier-{i}" for i in range(VERIFIERS)]
    address = {h: Keyring(h / "keyring").add("k", PASSWORD)[0].address for h in homes + checkers}
    funded = {a: {DENOM: 10**12} for a in [str(creator.address()), *address.values()]}
    init_localnet(root / "chain", CHAIN_ID, funded, poc=POC)
    _, pins = shipped_data()
    segment = math.gcd(args.h, make_run_config(pins, "small").checkpoint_interval)
    cfg = make_run_config(pins, "small", round_blocks=window, total_rounds=rounds,
                          inner_steps=args.h, checkpoint_interval=segment, start_delay_blocks=30,
                          min_collateral=str(COLLATERAL), overlap=overlap)  # fmt: skip
    with ChainProcess(root / "chain", f"{int(BLOCK_SECONDS * 1000)}ms") as chain:
        client = LedgerClient(network_config(CHAIN_ID, chain.address))
        poc = PocClient(chain.address)
        procs = [spawn_node(h, "u", "k", chain.address, PASSWORD, "--wait-for-run", "--threads",
                            str(args.threads), "--metrics-address", "127.0.0.1:0")
                 for h in homes]  # fmt: skip
        verifiers = [spawn_verifier(h, "k", chain.address, PASSWORD) for h in checkers]
        for proc in verifiers:  # before it starts any thread, which inherits it
            os.setpriority(os.PRIO_PROCESS, proc.pid, 19)
        try:
            wait_until_ready(procs, homes, verifiers, checkers)
            urls = [metrics_url_in(h / "node.log") for h in homes]
            submit(client, creator, MsgCreateRun(creator=str(creator.address()), run_id="u",
                                                 config=cfg))  # fmt: skip
            run, params = poc.run("u"), poc.params()
            first, last = (round_window(run, params, r).start for r in (1, rounds - 1))
            samples = []
            for height in (first, last):
                while poc.round_info("u").height < height:
                    time.sleep(0.02)
                try:
                    samples.append((time.monotonic(), [training(u) for u in urls]))
                except OSError as err:  # a node that is gone: show why
                    logs = "\n".join((h / "node.log").read_text()[-2000:] for h in homes)
                    raise SystemExit(f"metrics unreachable ({err}):\n{logs}") from None
            (t0, a), (t1, b) = samples
            for home, proc in zip(homes, procs, strict=True):
                if proc.wait(600) != 0:
                    raise SystemExit((home / "node.log").read_text()[-3000:])
            commits = sum(len(poc.commits("u", r)) for r in range(rounds))
        finally:
            for proc in procs + verifiers:
                proc.terminate()
            for proc in procs + verifiers:
                proc.wait(30)
    return Measured(
        [(y[0] - x[0]) / (t1 - t0) for x, y in zip(a, b, strict=True)],
        [(y[2] - x[2]) / (t1 - t0) for x, y in zip(a, b, strict=True)],
        [(y[0] - x[0]) / max(1.0, y[1] - x[1]) for x, y in zip(a, b, strict=True)],
        (t1 - t0) / (last - first),
        commits,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--h", type=int, default=60, help="inner steps per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--fill", type=float, default=0.92,
                        help="share of the commit window a round's training takes")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads per host")
    parser.add_argument("--window", type=int, default=0,
                        help="commit window in blocks for every schedule (default: sized by "
                             "--fill)")  # fmt: skip
    parser.add_argument("--overlapped-only", action="store_true")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 130))
    window = args.window
    if not window:
        data, pins = shipped_data()
        step = seconds_per_step(make_run_config(pins, "small"), data, args.threads)
        slower = NODE_SLOWER * (OVERLAP_SLOWER if args.overlapped_only else 1.0)
        window = math.ceil(args.h * step * slower / args.fill / BLOCK_SECONDS)
        console.print(f"small preset: {step:.3f} s per inner step here; H = {args.h}")
    console.print(f"{args.hosts} host(s), {VERIFIERS} verifiers")
    # "training / window": a round's seconds in inner steps over its commit window's seconds,
    # the most an overlapped host can reach (it idles the rest of the window).
    table = Table("schedule", "window (blocks)", "rounds measured", "utilisation per host",
                  "of rounds that landed", "s / inner step", "training / window",
                  "commits")  # fmt: skip
    for overlap in (True,) if args.overlapped_only else (False, True):
        with tempfile.TemporaryDirectory(prefix="dilochain-util-") as tmp:
            try:
                found = measure(Path(tmp), overlap, args, window, args.rounds)
            except TxRefused as err:  # e.g. a window too short for the run's verification
                raise SystemExit(f"the chain refused the run: {err}") from None
        name = "overlapped" if overlap else "one after another"
        shares = ", ".join(f"{s:.1%}" for s in found.utilisation)
        console.print(f"{name} ({window} blocks): {shares}")
        fits = [args.h * s / (window * found.block_seconds) for s in found.step_seconds]
        table.add_row(name, str(window), str(args.rounds - 2), shares,
                      ", ".join(f"{s:.1%}" for s in found.landed),
                      ", ".join(f"{s:.3f}" for s in found.step_seconds),
                      ", ".join(f"{f:.1%}" for f in fits),
                      f"{found.commits} of {args.rounds * args.hosts}")  # fmt: skip
        if not args.window:  # the next run's window, from this run's steps and blocks
            step, block = max(found.step_seconds), found.block_seconds
            window = math.ceil(args.h * step * OVERLAP_SLOWER / args.fill / block)
    console.print(table)


if __name__ == "__main__":
    main()

"""What following the chain costs: ``--clients`` loops that each ask for the run's ``RoundInfo``
whenever they wake, as a host's and a verifier's loops do, on one chain node; first waking
every ``--poll`` seconds (the loops until now), then at each block the node pushes
(``Events.Blocks``, :class:`dilochain.block_watch.BlockWatch`, one stream per client).

Printed per way: queries the node answered per second and per block, the node's CPU (the app
process; CometBFT apart), the mean block interval, and how long after the first client saw a
block the others did (a loop's reaction time to a new block).

    .venv/bin/python -m bench.block_following [--clients 100] [--seconds 20] [--poll 0.2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.wallet import LocalWallet
from rich.console import Console
from rich.table import Table

from bench.chain_tps import _cpu_seconds
from dilochain.client import network_config, submit
from dilochain.localnet import ChainProcess, init_localnet
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.testutil import CHAIN_ID, FAKE_DATA, wallet
from dilochain.training.run_config import make_run_config

RUN_ID = "following"


class Sightings:
    """When each client first saw each height (monotonic seconds)."""

    def __init__(self) -> None:
        self.first: dict[int, list[float]] = defaultdict(list)
        self.queries = 0
        self._counted = threading.Condition()

    def saw(self, height: int, fresh: bool) -> None:
        with self._counted:
            self.queries += 1
            if fresh:
                self.first[height].append(time.monotonic())
            self._counted.notify_all()

    def wait_for(self, queries: int, timeout: float) -> None:
        """Until ``queries`` were answered in all (or ``timeout`` seconds)."""
        with self._counted:
            self._counted.wait_for(lambda: self.queries >= queries, timeout)

    def reaction_ms(self) -> float:
        """Mean delay from the first client to see a block to each other client seeing it."""
        delays = [t - min(ts) for ts in self.first.values() if len(ts) > 1 for t in ts]
        return 1000 * statistics.fmean(delays) if delays else 0.0


def _client(address: str, way: str, poll: float, out: Sightings, stop: threading.Event) -> None:
    with PocClient(address) as poc:
        last = 0
        while not stop.is_set():
            seen = poc.blocks.height if way == "follow" else 0
            height = poc.round_info(RUN_ID).height
            out.saw(height, height > last)
            last = max(last, height)
            if way == "follow":
                poc.blocks.wait_past(seen, stop, poll)
            else:
                stop.wait(poll)


def measure(address: str, pid: int, way: str, args: argparse.Namespace) -> dict:
    """Run ``--clients`` loops one way for ``--seconds``; the figures of the table's row."""
    out, stop = Sightings(), threading.Event()
    threads = [threading.Thread(target=_client, args=(address, way, args.poll, out, stop))
               for _ in range(args.clients)]  # fmt: skip
    for t in threads:
        t.start()
    out.wait_for(3 * args.clients, timeout=5)  # every client connected (and following)
    with PocClient(address) as poc:

        def now() -> tuple[int, int, float, float]:
            return poc.round_info(RUN_ID).height, out.queries, _cpu_seconds(pid), time.monotonic()

        h0, q0, cpu0, t0 = now()
        time.sleep(args.seconds)
        h1, q1, cpu1, t1 = now()
    stop.set()
    for t in threads:
        t.join()
    blocks = max(1, h1 - h0)
    return {"way": way, "qps": (q1 - q0) / (t1 - t0), "per_block": (q1 - q0) / blocks,
            "cpu": (cpu1 - cpu0) / (t1 - t0), "interval": (t1 - t0) / blocks,
            "reaction": out.reaction_ms()}  # fmt: skip


def compare(address: str, pid: int, creator: LocalWallet, args: argparse.Namespace,
            console: Console) -> list[dict]:  # fmt: skip
    """Create the run on the node at ``address`` (its app process ``pid``), measure both ways
    and print the table; its rows."""
    client = LedgerClient(network_config(CHAIN_ID, address))
    cfg = make_run_config(FAKE_DATA, "tiny", total_rounds=1000)
    submit(client, creator, MsgCreateRun(creator=str(creator.address()), run_id=RUN_ID,
                                         config=cfg))  # fmt: skip
    rows = [measure(address, pid, way, args) for way in ("poll", "follow")]
    table = Table(title=f"{args.clients} clients following one chain node "
                        f"({args.block_time} blocks, polling every {args.poll} s)")  # fmt: skip
    for column in ("way", "queries/s", "queries a block", "node CPU (cores)",
                   "block interval (s)", "reaction (ms)"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(r["way"], f"{r['qps']:,.0f}", f"{r['per_block']:,.0f}", f"{r['cpu']:.2f}",
                      f"{r['interval']:.2f}", f"{r['reaction']:.0f}")  # fmt: skip
    console.print(table)
    poll, follow = rows
    console.print(
        f"following: {follow['qps'] / poll['qps']:.2f}x the queries and "
        f"{follow['cpu'] / max(poll['cpu'], 1e-9):.2f}x the node CPU of polling"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--poll", type=float, default=0.2, help="the polling loops' interval")
    parser.add_argument("--block-time", default="1s")
    args = parser.parse_args()
    console = Console()
    creator = wallet(1)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "chain"
        init_localnet(home, CHAIN_ID, {str(creator.address()): {DENOM: 10**15}})
        chain = ChainProcess(home, block_time=args.block_time)
        address = chain.start()
        try:
            assert chain.proc is not None
            compare(address, chain.proc.pid, creator, args, console)
        finally:
            chain.stop()


if __name__ == "__main__":
    main()

"""The chain against CometBFT's own ceiling: the same loader drives CometBFT's built-in kvstore
app and dilochain, one after the other in this run, and the ratio is printed.

Both networks get homes from ``init_testnet`` (same ``timeout_commit``, same mempool) and the same
load: ``--streams`` HTTP streams in ``--loaders`` processes posting ``broadcast_tx_sync`` to the
validators' CometBFT RPC on 127.0.0.1. dilochain gets pre-signed bank sends (a stream per account,
in sequence order); kvstore gets ``key=value`` txs padded to the same size. Printed per app:
txs/s from first broadcast to last inclusion, block intervals (header times) under load, and the
heights that needed more than one consensus round.

    .venv/bin/python -m bench.chain_ceiling [--validators 1] [--txs 20000] [--streams 64]
        [--loaders 2] [--block-time 1s] [--apps kvstore,dilochain]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import multiprocessing as mp
import signal
import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.table import Table

from bench.chain_tps import _child, _cpu_seconds, _sign_batch
from dilochain.chain.cometbft import cometbft_binary
from dilochain.chain.testnet import init_testnet, rpc_address
from dilochain.localnet import LocalNetwork, rpc_status
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, wallet

APPS = ("kvstore", "dilochain")


def _load(rpcs: list[str], streams: list[list[bytes]], start_at: float, out) -> None:
    """One loader process: a sequential ``broadcast_tx_sync`` stream per list of txs, the
    streams spread over ``rpcs``."""

    async def run() -> list[tuple[bytes, float, int]]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def stream(index: int, txs: list[bytes]) -> list[tuple[bytes, float, int]]:
                url, sent = f"http://{rpcs[index % len(rpcs)]}", []
                for n, raw in enumerate(txs):
                    body = {"jsonrpc": "2.0", "id": n, "method": "broadcast_tx_sync",
                            "params": {"tx": base64.b64encode(raw).decode()}}  # fmt: skip
                    t = time.time()
                    async with session.post(url, json=body) as reply:
                        answer = await reply.json()
                    code = answer["result"]["code"] if "result" in answer else -1
                    sent.append((tx_hash(raw), t, code))
                return sent

            await asyncio.sleep(max(0.0, start_at - time.time()))
            results = await asyncio.gather(*(stream(i, s) for i, s in enumerate(streams)))
        return [item for result in results for item in result]

    sent = asyncio.run(run())
    out.put((sent, time.process_time()))


def _kvstore_txs(count: int, size: int) -> list[bytes]:
    """``count`` distinct kvstore txs of ``size`` bytes."""
    return [(f"k{i:09d}=".encode()).ljust(size, b"v") for i in range(count)]


class _KvstoreNetwork:
    """CometBFT nodes over ``homes`` running the built-in kvstore app."""

    def __init__(self, homes: list[Path]):
        self.homes = homes
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> _KvstoreNetwork:
        binary = str(cometbft_binary())
        for home in self.homes:
            log = (home / "kvstore.log").open("ab")
            self.procs.append(subprocess.Popen(
                [binary, "start", "--home", str(home), "--proxy_app", "kvstore"],
                stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        deadline = time.monotonic() + 120
        for home in self.homes:
            while True:
                try:
                    if int(rpc_status(rpc_address(home))["sync_info"]["latest_block_height"]):
                        break
                except (OSError, ValueError, KeyError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"kvstore node {home} made no block")
                time.sleep(0.2)
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


class _Blocks:
    """When each block is announced committed (NewBlockHeader over the websocket, which costs
    CometBFT little), and afterwards each block's txs, header time and the round its
    predecessor was committed in (the ``block`` RPC)."""

    def __init__(self, rpc: str):
        self.rpc = rpc
        self.announced: dict[int, float] = {}  # height: when seen
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())
        await asyncio.wait_for(self._ready.wait(), 30)

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _watch(self) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"ws://{self.rpc}/websocket") as ws,
        ):
            await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "subscribe",
                                "params": {"query": "tm.event='NewBlockHeader'"}})  # fmt: skip
            self._ready.set()
            async for message in ws:
                data = message.json().get("result", {}).get("data")
                if data:
                    self.announced[int(data["value"]["header"]["height"])] = time.time()

    async def height(self) -> int:
        """The network's latest height."""
        return int((await self._call("status"))["sync_info"]["latest_block_height"])

    async def _call(self, method: str, **params) -> dict:
        async with aiohttp.ClientSession() as session:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            async with session.post(f"http://{self.rpc}", json=body) as reply:
                return (await reply.json())["result"]

    async def blocks(self, heights: range) -> tuple[dict[bytes, float], list[tuple]]:
        """When each tx's block was seen, and per block (height, header time, the round its
        predecessor was committed in, txs)."""
        seen, blocks = {}, []
        for height in heights:
            block = (await self._call("block", height=str(height)))["block"]
            txs = block["data"]["txs"] or []
            for tx in txs:
                seen[tx_hash(base64.b64decode(tx))] = self.announced.get(height, 0.0)
            blocks.append((height, _seconds(block["header"]["time"]),
                           int(block["last_commit"]["round"]), len(txs)))  # fmt: skip
        return seen, blocks


def _seconds(rfc3339: str) -> float:
    """Seconds since the epoch of a CometBFT header time (nanosecond RFC 3339)."""
    whole, _, fraction = rfc3339.rstrip("Z").partition(".")
    base = datetime.fromisoformat(whole + "+00:00").timestamp()
    return base + float(f"0.{fraction or '0'}")


def _drive(rpcs: list[str], streams: list[list[bytes]], loaders: int, pids: dict) -> dict:
    """Load the network at ``rpcs`` with ``streams`` from ``loaders`` processes; what it did
    (with the CPU seconds of the processes in ``pids``: {role: [pid]}, and of the loaders)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 2.0
    share = -(-len(streams) // loaders)
    procs = [ctx.Process(target=_load, args=(rpcs, streams[i * share : (i + 1) * share],
                                             start_at, out))
             for i in range(loaders)]  # fmt: skip

    async def run() -> dict:
        blocks = _Blocks(rpcs[0])
        await blocks.start()
        first_height = await blocks.height() + 1
        before = {role: sum(map(_cpu_seconds, group)) for role, group in pids.items()}
        for proc in procs:
            proc.start()
        loop = asyncio.get_running_loop()
        answers = [await loop.run_in_executor(None, out.get) for _ in procs]
        sent = [item for items, _ in answers for item in items]
        for proc in procs:
            proc.join()
        accepted = {digest: t for digest, t, code in sent if code == 0}
        seen, chain, deadline = {}, [], time.monotonic() + 120
        while not accepted.keys() <= seen.keys() and time.monotonic() < deadline:
            await asyncio.sleep(0.5)  # blocks announced (their times known) since the last pass
            announced = max(blocks.announced, default=0)
            more_seen, more = await blocks.blocks(range(first_height + len(chain), announced + 1))
            seen.update(more_seen)
            chain += more
        await blocks.stop()
        cpu = {role: sum(map(_cpu_seconds, group)) - before[role] for role, group in pids.items()}
        cpu["loaders"] = sum(seconds for _, seconds in answers)
        included = {d: seen[d] for d in accepted if d in seen}
        first = min(t for _, t, _ in sent)
        last = max(included.values())
        loaded = [b for b in chain if b[3]]  # blocks that carried load
        times = [b[1] for b in chain if loaded and loaded[0][0] - 1 <= b[0] <= loaded[-1][0]]
        intervals = [b - a for a, b in itertools.pairwise(times)]
        return {
            "sent": len(sent),
            "accepted": len(accepted),
            "included": len(included),
            "tps": len(included) / (last - first),
            "intervals": intervals,
            "extra_rounds": sum(1 for b in chain if b[2] > 0),
            "heights": len(chain),
            "cpu": cpu,
        }

    return asyncio.run(run())


def measure(app: str, tmp: Path, args: argparse.Namespace, signed: list[list[bytes]]) -> dict:
    """One app's figures under the bench's load."""
    accounts = len(signed)
    funded = {str(wallet(1000 + i).address()): {DENOM: 10**12} for i in range(accounts)}
    homes = init_testnet(tmp / app, args.validators, CHAIN_ID, funded,
                         block_time=args.block_time)  # fmt: skip
    rpcs = [rpc_address(home) for home in homes]
    if app == "dilochain":
        with LocalNetwork(homes) as network:
            apps = [node.proc.pid for node in network.nodes]
            pids = {"application": apps, "CometBFT": [_child(pid) for pid in apps]}
            return _drive(rpcs, signed, args.loaders, pids)
    size = round(statistics.mean(len(tx) for batch in signed for tx in batch))
    txs = _kvstore_txs(sum(len(batch) for batch in signed), size)
    streams = [txs[i :: len(signed)] for i in range(len(signed))]
    with _KvstoreNetwork(homes) as network:
        pids = {"CometBFT": [proc.pid for proc in network.procs]}
        return _drive(rpcs, streams, args.loaders, pids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--validators", type=int, default=1)
    parser.add_argument("--txs", type=int, default=20_000, help="txs in all")
    parser.add_argument("--streams", type=int, default=64, help="concurrent broadcast streams")
    parser.add_argument("--loaders", type=int, default=2, help="loader processes")
    parser.add_argument("--block-time", default="1s", help="CometBFT's timeout_commit")
    parser.add_argument("--apps", default=",".join(APPS), help="which apps, in this order")
    args = parser.parse_args()
    apps = args.apps.split(",")
    if unknown := set(apps) - set(APPS):
        parser.error(f"unknown app(s) {sorted(unknown)}: choose from {', '.join(APPS)}")
    console = Console()
    per_stream = args.txs // args.streams
    console.print(f"signing {per_stream * args.streams} bank sends…")
    with mp.get_context("spawn").Pool(2) as pool:
        signed = pool.starmap(_sign_batch, [(1000 + i, i, per_stream)
                                            for i in range(args.streams)])  # fmt: skip
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for app in apps:
            console.print(f"{app}: {args.validators} validator(s), {per_stream * args.streams} "
                          f"txs over {args.streams} streams…")  # fmt: skip
            results[app] = measure(app, Path(tmp), args, signed)
    block_time = float(args.block_time.rstrip("s"))
    title = (f"{args.validators} validator(s), timeout_commit {args.block_time}, "
             f"{args.streams} streams over CometBFT RPC")  # fmt: skip
    table = Table("", *results, title=title)
    rows = {
        "txs accepted / included": lambda r: f"{r['accepted']} / {r['included']}",
        "throughput": lambda r: f"{r['tps']:,.0f} tx/s",
        "block interval p50 / max under load": lambda r: (
            f"{statistics.median(r['intervals']):.2f} / {max(r['intervals']):.2f} s"
            if r["intervals"] else "-"),
        f"intervals over 1.2 x {block_time:g} s": lambda r: (
            f"{sum(1 for i in r['intervals'] if i > 1.2 * block_time)} of {len(r['intervals'])}"),
        "heights needing an extra round": lambda r: f"{r['extra_rounds']} of {r['heights']}",
        **{f"CPU per tx: {role}": lambda r, role=role: (
            f"{r['cpu'][role] / r['included'] * 1e6:,.0f} µs" if role in r["cpu"] else "-")
           for role in ("application", "CometBFT", "loaders")},
    }  # fmt: skip
    for name, cell in rows.items():
        table.add_row(name, *(cell(r) for r in results.values()))
    console.print(table)
    if set(APPS) <= results.keys():
        ratio = results["dilochain"]["tps"] / results["kvstore"]["tps"]
        console.print(f"dilochain / kvstore throughput: [bold]{ratio:.2f}[/bold]")


if __name__ == "__main__":
    main()

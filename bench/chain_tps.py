"""Chain throughput through CometBFT: signed txs broadcast over gRPC by client processes.

Prints end-to-end txs/s (first broadcast to last inclusion), p50/p99 inclusion latency
(broadcast to the moment the block holding the tx is announced committed), the CPU the
application processes and the CometBFT processes spent per tx, and where the time goes per tx,
measured side by side in this same run: signature check, CheckTx, block execution, store
commit, an ABCI round trip and a bare gRPC round trip. With ``--validators N`` the clients
spread their txs over N validators.

    .venv/bin/python -m bench.chain_tps [--validators 1] [--clients 2] [--streams 32]
        [--txs 8000] [--block-time 1s]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import grpc
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2_grpc as tx_grpc
from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import AuthInfo, SignDoc, TxRaw
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from rich.console import Console
from rich.table import Table

from dilochain.chain.abci import AbciHandler, AbciServer, decode_frames, encode_frame
from dilochain.chain.signature import verify_secp256k1
from dilochain.chain.testnet import init_testnet
from dilochain.localnet import LocalNetwork
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, local_chain, signed_tx, wallet


def _send(sender, receiver) -> MsgSend:
    return MsgSend(
        from_address=str(sender.address()),
        to_address=str(receiver.address()),
        amount=[Coin(denom=DENOM, amount="1")],
    )


def _sign_batch(seed: int, account_number: int, count: int) -> list[bytes]:
    sender = wallet(seed)
    msg = _send(sender, wallet(10_000 + seed))
    return [
        signed_tx(sender, [msg], sequence=i, account_number=account_number) for i in range(count)
    ]


def _client(address: str, batches: list[list[bytes]], start_at: float, out) -> None:
    """One client process: an asyncio stream per account, each broadcasting its txs in order."""

    async def run() -> list[tuple[bytes, float, int]]:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = tx_grpc.ServiceStub(channel)

            async def stream(txs: list[bytes]) -> list[tuple[bytes, float, int]]:
                sent = []
                for raw in txs:
                    t = time.time()
                    request = tx_s.BroadcastTxRequest(tx_bytes=raw, mode=tx_s.BROADCAST_MODE_SYNC)
                    code = (await stub.BroadcastTx(request)).tx_response.code
                    sent.append((tx_hash(raw), t, code))
                return sent

            await asyncio.sleep(max(0.0, start_at - time.time()))
            results = await asyncio.gather(*(stream(b) for b in batches))
        return [item for result in results for item in result]

    out.put(asyncio.run(run()))


def _breakdown(tmp: Path, samples: int = 2000, state_keys: int = 0) -> dict[str, float]:
    """Per-tx microseconds of each stage, on an in-process chain over a temp store holding
    ``state_keys`` more keys (a chain that has run a while: the state tree is deeper)."""
    senders = [wallet(50_000 + i) for i in range(10)]
    chain = local_chain(tmp, {str(s.address()): 10**12 for s in senders})
    if state_keys:
        filler = {b"bench/%09d" % i: b"%d" % i for i in range(state_keys)}
        root = chain.app.tree.update(filler)
        chain.app.store.commit(filler, {"app_hash": root})
    per = samples // len(senders)
    txs = [
        signed_tx(s, [_send(s, senders[0])], sequence=q, account_number=n)
        for q in range(per)
        for n, s in enumerate(senders)
    ]
    tx0 = TxRaw.FromString(txs[0])
    key = AuthInfo.FromString(tx0.auth_info_bytes).signer_infos[0].public_key.value[2:]
    doc = SignDoc(body_bytes=tx0.body_bytes, auth_info_bytes=tx0.auth_info_bytes,
                  chain_id=CHAIN_ID, account_number=0).SerializeToString()  # fmt: skip
    t = time.perf_counter()
    for _ in range(samples):
        assert verify_secp256k1(key, doc, tx0.signatures[0])
    verify = time.perf_counter() - t

    t = time.perf_counter()
    for raw in txs:
        assert chain.broadcast(raw).code == 0
    check = time.perf_counter() - t

    app = chain.app
    block_txs = list(chain.mempool.values())
    tree_update, tree_seconds = app.tree.update, []

    def timed_update(writes):
        started = time.perf_counter()
        try:
            return tree_update(writes)
        finally:
            tree_seconds.append(time.perf_counter() - started)

    app.tree.update = timed_update
    t = time.perf_counter()
    app.finalize_block(app.height + 1, app.last_block_time_ns + 1, block_txs, b"\0" * 32)
    finalize = time.perf_counter() - t
    t = time.perf_counter()
    app.commit()
    commit = time.perf_counter() - t
    abci_rtt = asyncio.run(_abci_round_trip(AbciHandler(app, None, "bench")))
    app.store.close()
    n = len(txs)
    return {
        "signature check (libsecp256k1 via coincurve)": verify / samples * 1e6,
        "CheckTx (decode + ante + msg, incl. signature)": check / n * 1e6,
        "FinalizeBlock execution (signature cached)": finalize / n * 1e6,
        "… of which the state tree's new root (app hash)": sum(tree_seconds) / n * 1e6,
        "Commit (SQLite transaction, fsync)": commit / n * 1e6,
        "ABCI round trip over its unix socket (CheckTx-sized, Echo)": abci_rtt,
    }


async def _abci_round_trip(handler: AbciHandler, count: int = 2000) -> float:
    """Microseconds per pipelined ABCI request/response over the node's unix socket."""
    server = AbciServer(handler)
    with tempfile.TemporaryDirectory() as folder:
        socket_path = Path(folder) / "abci.sock"
        await server.start(socket_path)
        reader, writer = await asyncio.open_unix_connection(socket_path)
        frame = encode_frame(
            abci.Request(echo=abci.RequestEcho(message="x" * 250)).SerializeToString()
        )
        t = time.perf_counter()
        writer.write(frame * count)
        buffer, answered = bytearray(), 0
        while answered < count:
            buffer.extend(await reader.read(1 << 16))
            answered += len(decode_frames(buffer))
        elapsed = time.perf_counter() - t
        writer.close()
        await server.stop()
    return elapsed / count * 1e6


def _grpc_round_trip(address: str, count: int = 500) -> float:
    with grpc.insecure_channel(address) as channel:
        stub = tm_grpc.ServiceStub(channel)
        stub.GetNodeInfo(tm_q.GetNodeInfoRequest())
        t = time.perf_counter()
        for _ in range(count):
            stub.GetNodeInfo(tm_q.GetNodeInfoRequest())
        return (time.perf_counter() - t) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument(
        "--streams", type=int, default=32, help="accounts (async streams) per client"
    )
    parser.add_argument("--txs", type=int, default=8000, help="txs in all")
    parser.add_argument("--block-time", default="1s")
    parser.add_argument("--validators", type=int, default=1)
    parser.add_argument("--state-keys", type=int, default=100_000,
                        help="keys added to the in-process breakdown's state")  # fmt: skip
    parser.add_argument("--breakdown-only", action="store_true",
                        help="only the in-process breakdown (no network)")  # fmt: skip
    args = parser.parse_args()
    if args.breakdown_only:
        with tempfile.TemporaryDirectory() as tmp:
            _print_stages(Console(), _breakdown(Path(tmp), state_keys=args.state_keys), None,
                          args.state_keys)  # fmt: skip
        return
    console = Console()
    accounts = args.clients * args.streams
    per_account = args.txs // accounts
    with tempfile.TemporaryDirectory() as tmp:
        funded = {str(wallet(1000 + i).address()): {DENOM: 10**12} for i in range(accounts)}
        homes = init_testnet(Path(tmp) / "net", args.validators, CHAIN_ID, funded,
                             block_time=args.block_time)  # fmt: skip
        console.print(f"signing {per_account * accounts} txs in {args.clients} processes…")
        with mp.get_context("spawn").Pool(args.clients) as pool:
            batches = pool.starmap(
                _sign_batch, [(1000 + i, i, per_account) for i in range(accounts)]
            )
        with LocalNetwork(homes) as network:
            addresses = [node.address for node in network.nodes]
            ctx = mp.get_context("spawn")
            out = ctx.Queue()
            start_at = time.time() + 3.0
            procs = [
                ctx.Process(
                    target=_client,
                    args=(
                        addresses[c % len(addresses)],
                        batches[c * args.streams : (c + 1) * args.streams],
                        start_at,
                        out,
                    ),
                )
                for c in range(args.clients)
            ]
            app_pids = [node.proc.pid for node in network.nodes]
            comet_pids = [_child(pid) for pid in app_pids]
            cpu_before = [_cpu_seconds(p) for p in app_pids + comet_pids]
            with BlockWatcher(network.nodes[0].rpc_address) as watcher:
                for p in procs:
                    p.start()
                sent = [item for _ in procs for item in out.get()]
                for p in procs:
                    p.join()
                accepted = {digest: t for digest, t, code in sent if code == 0}
                included = watcher.wait_for(set(accepted))
            pids = app_pids + comet_pids
            spent = [_cpu_seconds(p) - b for p, b in zip(pids, cpu_before, strict=True)]
            app_cpu, comet_cpu = sum(spent[: len(app_pids)]), sum(spent[len(app_pids) :])
            rtt = _grpc_round_trip(addresses[0])
        stages = _breakdown(Path(tmp) / "breakdown", state_keys=args.state_keys)

    latencies = sorted(included[d] - accepted[d] for d in included)
    first_send = min(t for _, t, _ in sent)
    last_block = max(included.values())  # when the last tx's block was seen committed
    title = f"chain throughput: {args.validators} validator(s) on CometBFT, gRPC, 2 cores"
    table = Table("metric", "value", title=title)
    table.add_row("txs broadcast / accepted by CheckTx", f"{len(sent)} / {len(accepted)}")
    table.add_row("txs included in blocks", str(len(included)))
    table.add_row("end-to-end throughput", f"{len(included) / (last_block - first_send):,.0f} tx/s")
    table.add_row("broadcast rate (clients → mempool)",
                  f"{len(sent) / (max(t for _, t, _ in sent) - first_send):,.0f} tx/s")  # fmt: skip
    table.add_row("inclusion latency p50", f"{statistics.median(latencies) * 1000:,.0f} ms")
    table.add_row("inclusion latency p99",
                  f"{latencies[int(len(latencies) * 0.99) - 1] * 1000:,.0f} ms")  # fmt: skip
    for name, cpu in (("application processes", app_cpu), ("CometBFT processes", comet_cpu)):
        table.add_row(f"{name}' CPU per included tx (all validators)",
                      f"{cpu / len(included) * 1e6:,.0f} µs")  # fmt: skip
    per_validator = (app_cpu + comet_cpu) / args.validators
    table.add_row("→ one validator's capacity with clients elsewhere",
                  f"{len(included) / per_validator:,.0f} tx/s per core")  # fmt: skip
    console.print(table)
    _print_stages(console, stages, rtt, args.state_keys)


def _print_stages(console: Console, stages: dict[str, float], rtt: float | None, keys: int):
    where = Table("stage", "µs per tx",
                  title=f"where the time goes (in-process, {keys:,} more state keys)")  # fmt: skip
    for stage, micros in stages.items():
        where.add_row(stage, f"{micros:,.0f}")
    if rtt is not None:
        where.add_row("gRPC unary round trip (GetNodeInfo, client side)", f"{rtt:,.0f}")
    console.print(where)


def _child(pid: int) -> int:
    """The one child process (CometBFT) of a chain node."""
    (child,) = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(child)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BlockWatcher:
    """Records when each tx's block is seen committed, from CometBFT's NewBlock events.

    (A block's header time is the previous block's commit time, BFT time, so it cannot time
    inclusion; the moment the event arrives can.)
    """

    def __init__(self, rpc_address: str):
        self.url = f"ws://{rpc_address}/websocket"
        self.seen: dict[bytes, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._watch()), daemon=True)

    def __enter__(self) -> BlockWatcher:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for(self, wanted: set[bytes], timeout: float = 60.0) -> dict[bytes, float]:
        """Inclusion times of ``wanted`` (those seen before ``timeout``)."""
        deadline = time.monotonic() + timeout
        while not wanted <= self.seen.keys() and time.monotonic() < deadline:
            time.sleep(0.1)
        return {d: self.seen[d] for d in wanted if d in self.seen}

    async def _watch(self) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(self.url, max_msg_size=0) as ws,
        ):
            await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "subscribe",
                                "params": {"query": "tm.event='NewBlock'"}})  # fmt: skip
            self._ready.set()
            while not self._stop.is_set():
                try:
                    message = await asyncio.wait_for(ws.receive_json(), 0.5)
                except TimeoutError:
                    continue
                now = time.time()
                data = message.get("result", {}).get("data")
                if data:
                    for tx in data["value"]["block"]["data"]["txs"] or []:
                        self.seen[tx_hash(base64.b64decode(tx))] = now


if __name__ == "__main__":
    main()

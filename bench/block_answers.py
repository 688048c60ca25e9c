"""A chain node answering one large block to callers that read it as fast as they can, and to
callers that never read.

Runs one chain process and fills a block with bank sends. Then (1) ``--readers`` threads ask for
that block (``GetBlockByHeight``, taken as bytes) for ``--seconds``, while one caller times a
small query (``GetNodeInfo``) on the node's loop, against the same query's times when quiet;
(2) HTTP/2 connections that grant no window (``testutil.NeverReads``) ask for the block
``--answers`` times, reading nothing; (3) such connections start ``--unfinished`` calls whose
requests never end. Prints the block's size, block answers a second and the small query's
latency under the readers, the app's resident memory before and after the unread answers, how
many the node held and refused (``chain/answer_budget.py``), and whether blocks and a reading
caller's query went on meanwhile; then the same for the unfinished calls
(``chain/call_budget.py``; this machine's callers, as the bench's are, have a budget of 2,048
calls, other machines' 512 and one address 32; memory is read within half the 30 s a request
has to arrive, while the held calls are still held).

    .venv/bin/python -m bench.block_answers [--txs 3000] [--readers 4] [--seconds 5]
        [--answers 2000] [--unfinished 5000] [--per-connection 100] [--block-time 3s]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2_grpc as tx_grpc
from rich.console import Console
from rich.table import Table

from dilochain.chain.call_budget import REQUEST_SECONDS
from dilochain.localnet import ChainProcess, init_localnet
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, NeverReads, signed_tx, wallet

BLOCK = "/cosmos.base.tendermint.v1beta1.Service/GetBlockByHeight"
NODE_INFO = "/cosmos.base.tendermint.v1beta1.Service/GetNodeInfo"


def _resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


SENDERS = [wallet(seed) for seed in range(7, 15)]


def _fill_blocks(chain: ChainProcess, txs: int) -> tuple[int, int]:
    """Broadcast ``txs`` sends, shared by :data:`SENDERS` (genesis accounts 0…7), each on a
    thread of its own;
    (height, bytes) of the largest block they made."""
    receiver = str(wallet(99).address())

    def send_all(number: int, sender, count: int) -> None:
        send = MsgSend(from_address=str(sender.address()), to_address=receiver,
                       amount=[Coin(denom=DENOM, amount="1")])  # fmt: skip
        signed = [signed_tx(sender, [send], sequence=s, account_number=number)
                  for s in range(count)]  # fmt: skip
        with grpc.insecure_channel(chain.address) as channel:
            broadcast = tx_grpc.ServiceStub(channel).BroadcastTx
            for raw in signed:
                broadcast(tx_s.BroadcastTxRequest(tx_bytes=raw, mode=tx_s.BROADCAST_MODE_SYNC))

    start = chain.height()
    with ThreadPoolExecutor(len(SENDERS)) as pool:
        share = -(-txs // len(SENDERS))
        for found in [pool.submit(send_all, n, s, share) for n, s in enumerate(SENDERS)]:
            found.result()
    chain.wait_for_height(chain.height() + 2)
    with grpc.insecure_channel(chain.address) as channel:
        blocks = tm_grpc.ServiceStub(channel).GetBlockByHeight
        sizes = {h: blocks(tm_q.GetBlockByHeightRequest(height=h)).ByteSize()
                 for h in range(start, chain.height() + 1)}  # fmt: skip
    height = max(sizes, key=sizes.__getitem__)
    return height, sizes[height]


def _small_query_ms(address: str, until: float) -> list[float]:
    """Milliseconds each ``GetNodeInfo`` took, asked one after another until ``until``."""
    took = []
    with grpc.insecure_channel(address) as channel:
        ask = channel.unary_unary(NODE_INFO, lambda r: r, None)  # bytes in, bytes out
        request = tm_q.GetNodeInfoRequest().SerializeToString()
        while (now := time.monotonic()) < until:
            ask(request, timeout=30)
            took.append((time.monotonic() - now) * 1e3)
            time.sleep(0.02)
    return took


def _read_hard(address: str, request: bytes, until: float) -> int:
    """Block answers one caller took, asking again as each came, until ``until``."""
    taken = 0
    with grpc.insecure_channel(address) as channel:
        ask = channel.unary_unary(BLOCK, lambda r: r, None)
        while time.monotonic() < until:
            ask(request, timeout=30)
            taken += 1
    return taken


def _latency(took: list[float]) -> str:
    ordered = sorted(took)
    return (f"median {ordered[len(ordered) // 2]:.1f} ms, "
            f"p95 {ordered[int(len(ordered) * 0.95)]:.1f} ms ({len(ordered)} asked)")  # fmt: skip


def _unfinished(
    chain: ChainProcess, request: bytes, calls: int, per_connection: int
) -> tuple[float, float, int, int]:
    """Start ``calls`` calls whose requests never end; (app memory before, after, calls held,
    calls refused)."""
    assert chain.proc is not None
    before = _resident_mb(chain.proc.pid)
    hogs = []
    for first in range(0, calls, per_connection):
        hogs.append(NeverReads(chain.address))
        for _ in range(min(per_connection, calls - first)):
            hogs[-1].ask(BLOCK, request, finished=False)
    # Ended: RESOURCE_EXHAUSTED, or CANCELLED by grpcio under the load; not those the node
    # held until their request's time ran out (DEADLINE_EXCEEDED, after REQUEST_SECONDS).
    timed_out = str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
    settle = time.monotonic() + REQUEST_SECONDS / 2  # measured while the rest are held
    refused = -1
    while time.monotonic() < settle and refused != (
        refused := sum(s != timed_out for hog in hogs for s in hog.status.values())
    ):  # until all are told, or half their time is up
        for hog in hogs:
            hog.read(quiet=0.05)
    after = _resident_mb(chain.proc.pid)
    for hog in hogs:
        hog.close()
    return before, after, calls - refused, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--txs", type=int, default=3000, help="bank sends to fill blocks with")
    parser.add_argument("--readers", type=int, default=4, help="callers reading the block")
    parser.add_argument("--seconds", type=float, default=5.0, help="of reading, and of quiet")
    parser.add_argument("--answers", type=int, default=2000, help="block answers left unread")
    parser.add_argument("--unfinished", type=int, default=5000,
                        help="calls whose request never ends")  # fmt: skip
    parser.add_argument("--per-connection", type=int, default=100)
    parser.add_argument("--block-time", default="3s", help="long enough to fill one block")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "chain"
        init_localnet(home, CHAIN_ID, {str(w.address()): {DENOM: 10**15} for w in SENDERS})
        with ChainProcess(home, args.block_time) as chain:
            assert chain.proc is not None
            height, size = _fill_blocks(chain, args.txs)
            request = tm_q.GetBlockByHeightRequest(height=height).SerializeToString()
            quiet = _small_query_ms(chain.address, time.monotonic() + args.seconds)
            until = time.monotonic() + args.seconds
            with ThreadPoolExecutor(args.readers + 1) as pool:
                readers = [pool.submit(_read_hard, chain.address, request, until)
                           for _ in range(args.readers)]  # fmt: skip
                loaded = _small_query_ms(chain.address, until)
                read = sum(reader.result() for reader in readers)
            before = _resident_mb(chain.proc.pid)
            hogs, asked = [], []
            for first in range(0, args.answers, args.per_connection):
                hogs.append(NeverReads(chain.address))
                asked.append(min(args.per_connection, args.answers - first))
                for _ in range(asked[-1]):
                    hogs[-1].ask(BLOCK, request)
            for hog, count in zip(hogs, asked, strict=True):  # held or refused: said in headers
                hog.answered(count)
            time.sleep(1)  # what it holds is in its memory by now
            after = _resident_mb(chain.proc.pid)
            refused = sum(hog.refused() for hog in hogs)
            held = sum(hog.held() for hog in hogs)
            start, begun = chain.height(), time.monotonic()
            with grpc.insecure_channel(chain.address) as channel:
                latest = tm_grpc.ServiceStub(channel).GetLatestBlock
                try:
                    found = latest(tm_q.GetLatestBlockRequest(), timeout=10).block.header.height
                    answered = f"answered (height {found})"
                except grpc.RpcError as err:  # this machine's callers share the node's budget
                    answered = f"refused: {err.code().name}"
            chain.wait_for_height(start + 2, timeout=30)
            blocks_s = (chain.height() - start) / (time.monotonic() - begun)
            for hog in hogs:
                hog.close()
            time.sleep(1)  # what the unread answers held is given back
            unfinished = _unfinished(chain, request, args.unfinished, args.per_connection)
    table = Table("", "", title="Answers of one large block")
    table.add_row("block", f"height {height}, {size:,} bytes")
    table.add_row(f"block answers read by {args.readers} callers", f"{read / args.seconds:.0f}/s")
    table.add_row("GetNodeInfo, quiet", _latency(quiet))
    table.add_row("GetNodeInfo, while they read", _latency(loaded))
    table.add_row("unread block answers asked", str(args.answers))
    table.add_row("app memory before / after", f"{before:.0f} MB / {after:.0f} MB")
    table.add_row("answers held / refused", f"{held} / {refused}")
    table.add_row("a reading caller's GetLatestBlock (same machine)", answered)
    table.add_row("blocks/s while held", f"{blocks_s:.2f}")
    table.add_row("calls whose request never ends", str(args.unfinished))
    table.add_row("app memory before / after", f"{unfinished[0]:.0f} MB / {unfinished[1]:.0f} MB")
    table.add_row("unfinished calls held / refused", f"{unfinished[2]} / {unfinished[3]}")
    Console().print(table)


if __name__ == "__main__":
    main()

"""Block production under a flood of free ``Simulate`` calls (the largest tx the chain takes).

Runs one chain process (200 ms blocks), counts the blocks it commits in a quiet window, then in
an equal window while client processes send unsigned 64-message Simulate calls as fast as the
node answers them, and prints both block rates, their ratio, and how many simulations were
answered and refused (``RESOURCE_EXHAUSTED`` past the gate's queue).

    .venv/bin/python -m bench.simulate_flood [--seconds 8] [--clients 4] [--streams 16]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import grpc
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2_grpc as tx_grpc
from rich.console import Console
from rich.table import Table

from dilochain.localnet import ChainProcess, init_localnet
from dilochain.protocol.params import DENOM, AuthParams
from dilochain.testutil import CHAIN_ID, signed_tx, wallet

SENDER = wallet(7)


def _largest_tx() -> bytes:
    send = MsgSend(from_address=str(SENDER.address()), to_address=str(wallet(8).address()),
                   amount=[Coin(denom=DENOM, amount="1")])  # fmt: skip
    return signed_tx(SENDER, [send] * AuthParams().max_msgs_per_tx, sequence=0, account_number=0,
                     gas_limit=10_000_000)  # fmt: skip


def _flood(address: str, raw: bytes, streams: int, seconds: float, out) -> None:
    """One client process: ``streams`` concurrent Simulate loops for ``seconds``."""

    async def run() -> tuple[int, int]:
        answered = refused = 0
        deadline = time.monotonic() + seconds
        async with grpc.aio.insecure_channel(address) as channel:
            stub = tx_grpc.ServiceStub(channel)

            async def loop() -> None:
                nonlocal answered, refused
                while time.monotonic() < deadline:
                    try:
                        await stub.Simulate(tx_s.SimulateRequest(tx_bytes=raw), timeout=10)
                        answered += 1
                    except grpc.aio.AioRpcError as err:
                        if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                            raise
                        refused += 1

            await asyncio.gather(*(loop() for _ in range(streams)))
        return answered, refused

    out.put(asyncio.run(run()))


def _blocks_in(chain: ChainProcess, seconds: float) -> float:
    start = chain.height()
    time.sleep(seconds)
    return (chain.height() - start) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--streams", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "chain"
        init_localnet(home, CHAIN_ID, {str(SENDER.address()): {DENOM: 10**15}})
        with ChainProcess(home, "200ms") as chain:
            raw = _largest_tx()
            quiet = _blocks_in(chain, args.seconds)
            out = mp.get_context("spawn").Queue()
            clients = [
                mp.get_context("spawn").Process(
                    target=_flood, args=(chain.address, raw, args.streams, args.seconds, out)
                )
                for _ in range(args.clients)
            ]
            for client in clients:
                client.start()
            time.sleep(1.0)  # clients importing and connecting
            flooded = _blocks_in(chain, args.seconds - 1.5)
            results = [out.get(timeout=120) for _ in clients]
            for client in clients:
                client.join()
    answered = sum(a for a, _ in results)
    refused = sum(r for _, r in results)
    table = Table("window", "blocks/s", title=f"Simulate flood: {len(raw)} B, 64-message txs")
    table.add_row("quiet", f"{quiet:.2f}")
    table.add_row(f"flooded ({args.clients}x{args.streams} streams)", f"{flooded:.2f}")
    table.add_row("ratio flooded/quiet", f"{flooded / quiet:.2f}")
    table.add_row("simulations answered", f"{answered} ({answered / args.seconds:.0f}/s)")
    table.add_row("simulations refused (queue full)", str(refused))
    Console().print(table)


if __name__ == "__main__":
    main()

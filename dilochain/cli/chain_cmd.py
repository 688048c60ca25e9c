"""``dilochain chain``: init a home, add genesis accounts, start a node."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from chain.address import decode_address
from chain.home import genesis_path, init_home
from dilochain.cli.common import CliError, default_home, keyring, parse_duration
from genesis.coins import parse_coins
from genesis.models import load_genesis, save_genesis


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``chain`` command group."""
    chain = sub.add_parser("chain", help="run a chain node").add_subparsers(
        dest="chain_cmd", required=True, metavar="{init,add-genesis-account,start}"
    )
    init = chain.add_parser("init", help="create a chain home with a genesis file")
    init.add_argument("--chain-id", required=True)
    init.add_argument("--overwrite", action="store_true")
    acct = chain.add_parser("add-genesis-account", help="fund an account in genesis")
    acct.add_argument("address", help="bech32 address, or the name of a key in the keyring")
    acct.add_argument("amount", help="coins, e.g. 1000000000udlc")
    start = chain.add_parser("start", help="run the node (devnet consensus + gRPC)")
    start.add_argument("--grpc-address", default="127.0.0.1:9090")
    start.add_argument("--block-time", default="1s")
    for p in (init, acct, start):
        p.add_argument("--home", type=Path, default=default_home())
    init.set_defaults(func=_init)
    acct.set_defaults(func=_add_genesis_account)
    start.set_defaults(func=_start)


def _init(args: argparse.Namespace) -> int:
    doc = init_home(args.home, args.chain_id, overwrite=args.overwrite)
    print(f"initialised chain {doc.chain_id} in {args.home}")
    return 0


def _add_genesis_account(args: argparse.Namespace) -> int:
    path = genesis_path(args.home)
    if not path.exists():
        raise CliError(f"no chain home at {args.home} (run `dilochain chain init` first)")
    address = args.address
    try:
        decode_address(address)
    except ValueError:
        address = keyring(args.home).show(args.address).address
    try:
        coins = parse_coins(args.amount)
    except ValueError as err:
        raise CliError(str(err)) from None
    save_genesis(load_genesis(path).with_account(address, coins), path)
    print(f"added {args.amount} to {address}")
    return 0


def _start(args: argparse.Namespace) -> int:
    from chain.server import ChainNode

    block_time = parse_duration(args.block_time)
    if not 0.1 <= block_time <= 60:
        raise CliError("--block-time must be between 100ms and 60s")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    node = ChainNode(args.home, args.grpc_address, block_time)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await node.serve(stop, lambda addr: print(f"gRPC server listening on {addr}", flush=True))

    asyncio.run(serve())
    print(f"stopped at height {node.stopped_height}", flush=True)
    return 0

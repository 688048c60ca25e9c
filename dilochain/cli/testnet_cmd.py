"""``dilochain testnet``: several validators on this machine, peered over loopback ports."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from dilochain.chain.testnet import init_testnet, node_homes, rpc_address
from dilochain.cli.chain_cmd import block_time_flag, genesis_account
from dilochain.cli.common import CliError, add_output_flag, default_home, print_result
from dilochain.genesis.coins import MAX_AMOUNT, format_coins
from dilochain.localnet import LocalNetwork


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``testnet`` command group."""
    testnet = sub.add_parser("testnet", help="a multi-validator network on this machine")
    cmds = testnet.add_subparsers(dest="testnet_cmd", required=True, metavar="{init,up}")
    init = cmds.add_parser("init", help="write N validator homes sharing one genesis")
    init.add_argument("--validators", type=int, default=4)
    init.add_argument("--dir", type=Path, required=True)
    init.add_argument("--chain-id", default="dilochain-testnet")
    init.add_argument("--block-time", default="500ms", help="CometBFT's timeout_commit")
    init.add_argument("--account", action="append", default=[], metavar="ADDRESS_OR_KEY=COINS",
                      help="fund an account in the shared genesis (repeatable): a bech32 "
                           "address or a key name in --home's keyring and its coins, e.g. "
                           "alice=1000000000udlc")  # fmt: skip
    init.add_argument("--home", type=Path, default=default_home(),
                      help="the keyring's home, for --account given a key name")  # fmt: skip
    add_output_flag(init)
    init.set_defaults(func=_init)
    up = cmds.add_parser("up", help="run every validator of DIR until interrupted, starting "
                         "again any that stops")  # fmt: skip
    up.add_argument("--dir", type=Path, required=True)
    up.add_argument("--no-restart", dest="restart", action="store_false",
                    help="report a validator that stops, but leave it stopped")  # fmt: skip
    up.set_defaults(func=_up)


def _init(args: argparse.Namespace) -> int:
    if not 1 <= args.validators <= 16:
        raise CliError("--validators must be between 1 and 16")
    if node_homes(args.dir):
        raise CliError(f"{args.dir} already holds a testnet")
    accounts: dict[str, dict[str, int]] = {}
    for given in args.account:
        name, equals, amount = given.partition("=")
        if not equals:
            raise CliError(f"--account {given!r}: give ADDRESS_OR_KEY=COINS (an address or a key "
                           "name, e.g. alice=1000000000udlc)")  # fmt: skip
        address, coins = genesis_account(args.home, name, amount)
        funded = accounts.setdefault(address, {})
        for denom, units in coins.items():
            funded[denom] = funded.get(denom, 0) + units
            if funded[denom] > MAX_AMOUNT:
                raise CliError(f"--account: {address} would hold more than 2^256 - 1 {denom}")
    homes = init_testnet(args.dir, args.validators, args.chain_id, accounts,
                         block_time=block_time_flag(args.block_time))  # fmt: skip
    data = {
        "chain_id": args.chain_id,
        "validators": [{"name": h.name, "home": str(h), "rpc": rpc_address(h)} for h in homes],
        "accounts": [{"address": a, "coins": format_coins(c)} for a, c in accounts.items()],
    }
    text = [f"{h.name}: {h} (RPC {rpc_address(h)})" for h in homes]
    text += [f"funded {address}: {format_coins(coins)}" for address, coins in accounts.items()]
    print_result(args, data, "\n".join(text))
    return 0


def _up(args: argparse.Namespace) -> int:
    homes = node_homes(args.dir)
    if not homes:
        raise CliError(f"no testnet in {args.dir} (run `dilochain testnet init --dir DIR`)")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    network = LocalNetwork(homes)
    try:
        network.start()
        for node in network.nodes:
            print(f"{node.home.name}: gRPC {node.address}, CometBFT RPC {node.rpc_address}",
                  flush=True)  # fmt: skip
        print(f"{len(homes)} validators committing blocks; Ctrl-C stops them", flush=True)
        supervisor = network.supervisor(lambda line: print(line, flush=True), args.restart)
        while not stop.wait(1.0):
            supervisor.check()
            if not supervisor.running and not any(c.due for c in supervisor.children.values()):
                raise CliError(f"every validator has stopped; see the chain.log files under "
                               f"{args.dir}")  # fmt: skip
    finally:
        network.stop()
    return 0

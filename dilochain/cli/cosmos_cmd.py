"""The Cosmos-style basics: ``version``, ``query bank balances``, ``query poc …`` (the chain's
own objects) and ``tx bank send``, each with ``--output text|json`` as Cosmos SDK CLIs have
it."""

from __future__ import annotations

import argparse
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

from rich.table import Table

from dilochain.cli import poc_query_cmd, validator_cmd
from dilochain.cli.common import (
    CliError,
    add_output_flag,
    chain_nodes,
    default_home,
    dlc,
    print_output,
    signing_wallet,
)
from dilochain.protocol.address import decode_address


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``version``, ``query`` and ``tx``."""
    shown = sub.add_parser("version", help="this release and the CometBFT it runs")
    add_output_flag(shown)
    shown.set_defaults(func=_version)
    query = sub.add_parser("query", help="read the chain (Cosmos modules)").add_subparsers(
        dest="query_module", required=True, metavar="{bank,validators,poc}"
    )
    bank_query = query.add_parser("bank", help="balances").add_subparsers(
        dest="query_cmd", required=True, metavar="{balances}"
    )
    balances = bank_query.add_parser("balances", help="every balance of an address")
    balances.add_argument("address")
    tx = sub.add_parser("tx", help="sign and send a tx (Cosmos modules)").add_subparsers(
        dest="tx_module", required=True, metavar="{bank,validator}"
    )
    bank_tx = tx.add_parser("bank", help="transfers").add_subparsers(
        dest="tx_cmd", required=True, metavar="{send}"
    )
    send = bank_tx.add_parser("send", help="send coins from a key to an address")
    send.add_argument("key", help="the key in this home's keyring that signs and pays")
    send.add_argument("to", help="the recipient's address")
    send.add_argument("amount", help="coins, e.g. 1000000udlc")
    send.add_argument("--home", type=Path, default=default_home())
    queries = [balances, validator_cmd.add_query(query), *poc_query_cmd.add_query(query)]
    validator_cmd.add_flags([*queries, send, *validator_cmd.add_tx(tx)])
    balances.set_defaults(func=_balances)
    send.set_defaults(func=_send)


def _cometbft_version() -> str:
    from dilochain.chain.cometbft import CometMissing, cometbft_binary

    try:
        found = subprocess.run([str(cometbft_binary()), "version"], capture_output=True,
                               text=True, timeout=20)  # fmt: skip
    except (CometMissing, OSError, subprocess.TimeoutExpired) as err:
        return f"not available ({err})"
    return found.stdout.strip() or "unknown"


def _version(args: argparse.Namespace) -> int:
    from dilochain.chain.cometbft import COMETBFT_VERSION

    data = {
        "dilochain": version("dilochain"),
        "cometbft": _cometbft_version(),
        "cometbft_pinned": COMETBFT_VERSION.removeprefix("v"),
        "python": platform.python_version(),
        "torch": version("torch"),
        "cosmpy": version("cosmpy"),
    }
    table = Table("component", "version")
    for name, value in data.items():
        table.add_row(name, value)
    print_output(args, data, table)
    return 0


def _checked_address(address: str, what: str) -> str:
    try:
        decode_address(address)
    except ValueError as err:
        raise CliError(f"{what}: {err}") from None
    return address


def _balances(args: argparse.Namespace) -> int:
    from dilochain.client import connect

    address = _checked_address(args.address, "address")
    balances = connect(chain_nodes(args)).query_bank_all_balances(address)
    held = [{"denom": c.denom, "amount": str(c.amount)} for c in balances]
    data = {"address": address, "balances": held}
    table = Table("denom", "amount", "shown", title=f"balances of {address}")
    for coin in balances:
        table.add_row(coin.denom, str(coin.amount), dlc(coin.amount) if coin.denom == "udlc"
                      else "")  # fmt: skip
    print_output(args, data, table)
    return 0


def _send(args: argparse.Namespace) -> int:
    from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
    from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin

    from dilochain.client import TxRefused, connect, submit
    from dilochain.genesis.coins import parse_coins

    to = _checked_address(args.to, "to")
    try:
        coins = parse_coins(args.amount)
    except ValueError as err:
        raise CliError(f"amount: {err}") from None
    client = connect(chain_nodes(args))
    wallet = signing_wallet(args.home, args.key)
    amount = [Coin(denom=d, amount=str(n)) for d, n in sorted(coins.items())]
    msg = MsgSend(from_address=str(wallet.address()), to_address=to, amount=amount)
    try:
        included = submit(client, wallet, msg)
    except TxRefused as err:
        raise CliError(f"the send was refused: {err}") from None
    data = {"txhash": included.hash, "height": included.height, "code": included.code,
            "gas_used": included.gas_used}  # fmt: skip
    table = Table("tx", "height", "gas used", title=f"sent {args.amount} to {to}")
    table.add_row(included.hash, str(included.height), str(included.gas_used))
    print_output(args, data, table)
    return 0

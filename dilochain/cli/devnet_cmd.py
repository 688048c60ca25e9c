"""``dilochain devnet up``: a local devnet chain, funded accounts and a few txs, printed."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from cosmpy.aerial.wallet import LocalWallet
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from rich.console import Console
from rich.table import Table

from chain.address import ADDRESS_PREFIX
from dilochain.client import broadcast, connect, poc_query
from dilochain.localnet import ChainProcess, init_localnet
from dilochain.poc.v1 import query_pb2 as poc_q
from dilochain.poc.v1.tx_pb2 import MsgCreateRun, MsgDepositCollateral, MsgRegisterHost
from genesis.models import DENOM
from node.run_config import make_run_config

CHAIN_ID = "dilochain-devnet"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``devnet`` command group."""
    devnet = sub.add_parser("devnet", help="run a whole local network").add_subparsers(
        dest="devnet_cmd", required=True, metavar="{up}"
    )
    up = devnet.add_parser("up", help="start a devnet chain, fund accounts, send txs")
    up.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    up.add_argument("--block-time", default="500ms")
    up.set_defaults(func=_up)


def _up(args: argparse.Namespace) -> int:
    console = Console()
    with tempfile.TemporaryDirectory(prefix="dilochain-devnet-") as tmp:
        home = (args.dir or Path(tmp)) / "chain"
        wallets = {name: LocalWallet.generate(prefix=ADDRESS_PREFIX) for name in ("alice", "bob")}
        init_localnet(home, CHAIN_ID, {str(w.address()): {DENOM: 10**12} for w in wallets.values()})
        with ChainProcess(home, args.block_time) as chain:
            console.print(f"[bold]chain[/] {CHAIN_ID} serving gRPC at {chain.address}")
            _demo(console, chain.address, wallets)
    return 0


def _demo(console: Console, address: str, wallets: dict[str, LocalWallet]) -> None:
    client = connect(address, CHAIN_ID)
    alice, bob = wallets["alice"], wallets["bob"]
    config = make_run_config("00" * 32, "tiny", min_collateral="1000000", max_hosts=8)
    steps = [
        ("alice sends 5 DLC to bob", alice, MsgSend(
            from_address=str(alice.address()), to_address=str(bob.address()),
            amount=[Coin(denom=DENOM, amount="5000000")])),
        ("bob bonds 2 DLC of collateral", bob, MsgDepositCollateral(
            depositor=str(bob.address()), amount="2000000")),
        ("alice creates run demo-run", alice, MsgCreateRun(
            creator=str(alice.address()), run_id="demo-run", config=config)),
        ("bob registers as a host", bob, MsgRegisterHost(
            host=str(bob.address()), run_id="demo-run", endpoint="127.0.0.1:7070")),
    ]  # fmt: skip
    table = Table("tx", "hash", "height", "code", "gas used / wanted")
    for title, wallet, msg in steps:
        response = broadcast(client, wallet, msg).wait_to_complete(poll_period=0.2).response
        table.add_row(
            title, response.hash[:16] + "…", str(response.height), str(response.code),
            f"{response.gas_used} / {response.gas_wanted}",
        )  # fmt: skip
    console.print(table)
    balances = Table("account", "address", "balance", "collateral")
    poc = poc_query(address)
    for name, wallet in wallets.items():
        bonded = poc.Collateral(poc_q.QueryCollateralRequest(address=str(wallet.address())))
        balances.add_row(
            name, str(wallet.address()),
            f"{client.query_bank_balance(wallet.address(), DENOM)}{DENOM}",
            f"{bonded.collateral.bonded}{DENOM}",
        )  # fmt: skip
    console.print(balances)
    hosts = poc.Hosts(poc_q.QueryHostsRequest(run_id="demo-run")).hosts
    console.print(f"run demo-run hosts: {[h.address for h in hosts]}")
    console.print(f"chain height {client.query_height()}")

"""``dilochain rewards``: what an address earned per epoch, and claiming it."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dilochain.cli.common import CliError, default_home, keyring, keyring_password
from dilochain.client import TxRefused, connect, submit
from dilochain.poc_client import PocClient
from dilochain.protocol.address import decode_address
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgClaimReward


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``rewards`` command group."""
    rewards = sub.add_parser("rewards", help="epoch rewards").add_subparsers(
        dest="rewards_cmd", required=True, metavar="{show,claim}"
    )
    show = rewards.add_parser("show", help="work and claimable rewards per epoch")
    show.add_argument("--epoch", type=int, default=None)
    show.add_argument("--address", default=None, help="bech32 address (default: --key's)")
    show.add_argument("--key", default=None)
    claim = rewards.add_parser("claim", help="claim a closed epoch's reward")
    claim.add_argument("--epoch", type=int, required=True)
    claim.add_argument("--key", required=True)
    for p in (show, claim):
        p.add_argument("--home", type=Path, default=default_home())
        p.add_argument("--chain", default="127.0.0.1:9090", help="chain gRPC address")
    show.set_defaults(func=_show)
    claim.set_defaults(func=_claim)


def _address(args: argparse.Namespace) -> str:
    if args.address:
        try:
            decode_address(args.address)
        except ValueError as err:
            raise CliError(str(err)) from None
        return args.address
    if args.key:
        return keyring(args.home).show(args.key).address
    raise CliError("give --address or --key")


def _show(args: argparse.Namespace) -> int:
    address = _address(args)
    connect(args.chain)  # a clear error if no chain answers
    with PocClient(args.chain) as poc:
        table = _rewards_table(poc, address, args.epoch)
    Console().print(table)
    return 0


def _rewards_table(poc: PocClient, address: str, only: int | None) -> Table:
    current = poc.epoch()
    epochs = [only] if only is not None else range(current.epoch + 1)
    table = Table("epoch", "blocks", "status", "pool", "host work", "verdicts", "amount",
                  "claimed", title=f"rewards of {address}")  # fmt: skip
    for epoch in epochs:
        info = poc.epoch(epoch=epoch)
        mine = poc.claimable(address=address, epoch=epoch)
        table.add_row(
            str(epoch), f"{info.start_height}-{info.end_height}",
            "closed" if info.closed else "open", f"{info.reward_pool}udlc", mine.host_work,
            mine.verifier_work, f"{mine.amount}udlc", "yes" if mine.claimed else "no",
        )  # fmt: skip
    return table


def _claim(args: argparse.Namespace) -> int:
    ring = keyring(args.home)
    ring.show(args.key)
    wallet = ring.wallet(args.key, keyring_password())
    client = connect(args.chain)
    msg = MsgClaimReward(claimer=str(wallet.address()), epoch=args.epoch)
    try:
        response = submit(client, wallet, msg)
    except TxRefused as err:
        raise CliError(f"claim refused: {err}") from None
    amount = response.events.get("claim_reward", {}).get("amount", "?")
    table = Table("epoch", "claimer", "amount", "tx hash", "height", title="reward claimed")
    table.add_row(str(args.epoch), str(wallet.address()), amount, response.hash,
                  str(response.height))  # fmt: skip
    Console().print(table)
    return 0

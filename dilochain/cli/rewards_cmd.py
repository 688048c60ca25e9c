"""``dilochain rewards``: what an address earned per epoch and what is vesting; claiming an
epoch (it vests over ``vesting_epochs``) and withdrawing what has vested."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from dilochain.cli.common import (
    CliError,
    add_chain_flag,
    chain_nodes,
    default_home,
    dlc,
    keyring,
    print_tables,
    signing_wallet,
)
from dilochain.client import TxRefused, connect, submit
from dilochain.poc_client import PocClient
from dilochain.protocol.address import decode_address
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgClaimReward, MsgWithdrawVested


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``rewards`` command group."""
    rewards = sub.add_parser("rewards", help="epoch rewards").add_subparsers(
        dest="rewards_cmd", required=True, metavar="{show,claim}"
    )
    show = rewards.add_parser("show", help="work and claimable rewards per epoch")
    show.add_argument("--epoch", type=int, default=None)
    show.add_argument("--address", default=None, help="bech32 address (default: --key's)")
    show.add_argument("--key", default=None)
    claim = rewards.add_parser(
        "claim", help="claim a closed epoch's reward (--epoch), or withdraw what has vested"
    )
    claim.add_argument("--epoch", type=int, default=None,
                       help="claim this epoch (paying what has vested of it); without it: "
                            "withdraw everything that has vested")  # fmt: skip
    claim.add_argument("--key", required=True)
    for p in (show, claim):
        p.add_argument("--home", type=Path, default=default_home())
        add_chain_flag(p)
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
    connect(chain_nodes(args))  # a clear error if no chain answers
    with PocClient(chain_nodes(args)) as poc:
        tables = [_rewards_table(poc, address, args.epoch), _vesting_table(poc, address)]
    print_tables(*tables)
    return 0


def _vesting_table(poc: PocClient, address: str) -> Table:
    table = Table("epoch", "claimed", "vested", "paid", "forfeited", "withdrawable",
                  title=f"claimed rewards of {address} still vesting or unpaid")  # fmt: skip
    for grant in poc.vesting(address):
        total = int(grant.total) + int(grant.forfeited or 0)
        table.add_row(
            str(grant.epoch), dlc(total), dlc(grant.vested), dlc(grant.paid),
            dlc(grant.forfeited or 0), dlc(int(grant.vested) - int(grant.paid)),
        )  # fmt: skip
    return table


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
            "closed" if info.closed else "open", dlc(info.reward_pool), mine.host_work,
            mine.verifier_work, dlc(mine.amount), "yes" if mine.claimed else "no",
        )  # fmt: skip
    return table


def _claim(args: argparse.Namespace) -> int:
    wallet = signing_wallet(args.home, args.key)
    client = connect(chain_nodes(args))
    claimer = str(wallet.address())
    if args.epoch is None:
        msg, event, what = MsgWithdrawVested(claimer=claimer), "withdraw_vested", "withdrawal"
    else:
        msg, event, what = (
            MsgClaimReward(claimer=claimer, epoch=args.epoch),
            "claim_reward",
            "claim",
        )
    try:
        response = submit(client, wallet, msg)
    except TxRefused as err:
        raise CliError(f"{what} refused: {err}") from None
    found = response.events.get(event, {})
    table = Table(
        "epoch",
        "claimer",
        "paid now",
        "vesting",
        "tx hash",
        "height",
        title="reward claimed" if args.epoch is not None else "vested rewards paid",
    )
    table.add_row("-" if args.epoch is None else str(args.epoch), claimer,
                  found.get("amount", "?"), found.get("vesting", "-"), response.hash,
                  str(response.height))  # fmt: skip
    print_tables(table)
    return 0

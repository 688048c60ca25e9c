"""``dilochain rewards``: what an address earned per epoch and what is vesting; claiming an
epoch (it vests over ``vesting_epochs``) and withdrawing what has vested."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from dilochain.cli.common import (
    CliError,
    add_chain_flag,
    add_output_flag,
    chain_nodes,
    default_home,
    dlc,
    epoch_number,
    keyring,
    print_output,
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
    show.add_argument(
        "--epoch", type=epoch_number, default=None, help="one epoch (default: every epoch so far)"
    )
    show.add_argument("--address", default=None, help="bech32 address (default: --key's)")
    show.add_argument("--key", default=None)
    claim = rewards.add_parser(
        "claim", help="claim a closed epoch's reward (--epoch), or withdraw what has vested"
    )
    claim.add_argument("--epoch", type=epoch_number, default=None,
                       help="claim this epoch (paying what has vested of it); without it: "
                            "withdraw everything that has vested")  # fmt: skip
    claim.add_argument("--key", required=True)
    for p in (show, claim):
        p.add_argument("--home", type=Path, default=default_home())
        add_chain_flag(p)
        add_output_flag(p)
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
        found = {"address": address, "epochs": _epochs(poc, address, args.epoch),
                 "vesting": _vesting(poc, address)}  # fmt: skip
    print_output(args, found, _rewards_table(found), _vesting_table(found))
    return 0


def _epochs(poc: PocClient, address: str, only: int | None) -> list[dict]:
    """Each epoch's (or only epoch ``only``'s) pool and what ``address`` earned in it (udlc)."""
    epochs = [only] if only is not None else range(poc.epoch().epoch + 1)
    found = []
    for epoch in epochs:
        info = poc.epoch(epoch=epoch)
        mine = poc.claimable(address=address, epoch=epoch)
        found.append({
            "epoch": epoch, "start_height": info.start_height, "end_height": info.end_height,
            "closed": info.closed, "reward_pool": info.reward_pool,
            "host_work": mine.host_work, "host_work_total": info.host_work,
            "verifier_work": mine.verifier_work,
            "amount": mine.amount, "claimed": mine.claimed,
        })  # fmt: skip
    return found


def _vesting(poc: PocClient, address: str) -> list[dict]:
    """``address``'s claimed rewards still vesting or unpaid (udlc)."""
    found = []
    for grant in poc.vesting(address):
        forfeited = int(grant.forfeited or 0)
        found.append({
            "epoch": grant.epoch, "claimed": str(int(grant.total) + forfeited),
            "vested": grant.vested, "paid": grant.paid, "forfeited": str(forfeited),
            "withdrawable": str(int(grant.vested) - int(grant.paid)),
        })  # fmt: skip
    return found


def _vesting_table(found: dict) -> Table:
    amounts = ("claimed", "vested", "paid", "forfeited", "withdrawable")
    table = Table(
        "epoch", *amounts, title=f"claimed rewards of {found['address']} still vesting or unpaid"
    )
    for g in found["vesting"]:
        table.add_row(str(g["epoch"]), *(dlc(g[k]) for k in amounts))
    return table


def work_share(mine: str, total: str) -> str:
    """Host work as an operator reads it: its share of the epoch's (work units are tokens x
    their model's cost a token, numbers of 10+ digits)."""
    if not int(mine):
        return "0"
    return f"{int(mine) / max(int(total), int(mine)):.1%} of {int(total):.3g}"


def _rewards_table(found: dict) -> Table:
    table = Table("epoch", "blocks", "status", "pool", "host work", "verdicts", "amount",
                  "claimed", title=f"rewards of {found['address']}")  # fmt: skip
    for e in found["epochs"]:
        table.add_row(
            str(e["epoch"]), f"{e['start_height']}-{e['end_height']}",
            "closed" if e["closed"] else "open", dlc(e["reward_pool"]),
            work_share(e["host_work"], e["host_work_total"]),
            e["verifier_work"], dlc(e["amount"]), "yes" if e["claimed"] else "no",
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
    done = {"epoch": args.epoch, "claimer": claimer, "paid_now": found.get("amount", ""),
            "vesting": found.get("vesting", ""), "txhash": response.hash,
            "height": response.height}  # fmt: skip
    title = "reward claimed" if args.epoch is not None else "vested rewards paid"
    table = Table("epoch", "claimer", "paid now", "vesting", "tx hash", "height", title=title)
    table.add_row("-" if args.epoch is None else str(args.epoch), claimer,
                  done["paid_now"] or "?", done["vesting"] or "-", response.hash,
                  str(response.height))  # fmt: skip
    print_output(args, done, table)
    return 0

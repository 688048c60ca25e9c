"""``tx validator create|leave|unjail`` and ``query validators``: joining, leaving and coming
back to the CometBFT validator set, and reading it (chain/modules/validator_set.py)."""

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
    print_output,
    signing_wallet,
)


def add_tx(tx: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """``tx validator …``; the parsers that sign (they take ``--home``, ``--chain``)."""
    commands = tx.add_parser("validator", help="join, leave or unjail").add_subparsers(
        dest="tx_cmd", required=True, metavar="{create,leave,unjail}"
    )
    create = commands.add_parser(
        "create", help="bond collateral and join the validator set with this node's key"
    )
    create.add_argument("key", help="the operator: a key in this home's keyring")
    create.add_argument(
        "--amount",
        required=True,
        type=int,
        help="udlc of collateral to bond as the self-bond (deposited as needed)",
    )
    create.add_argument("--moniker", default="", help="a name shown with the validator")
    create.set_defaults(func=_create)
    leave = commands.add_parser("leave", help="leave the set (the bond is released once "
                                "evidence against it has expired)")  # fmt: skip
    leave.set_defaults(func=_leave)
    unjail = commands.add_parser("unjail", help="come back after a downtime jail")
    unjail.set_defaults(func=_unjail)
    for command in (leave, unjail):
        command.add_argument("key", help="the operator: a key in this home's keyring")
    for command in (create, leave, unjail):
        command.add_argument("--home", type=Path, default=default_home())
    return [create, leave, unjail]


def add_query(query: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``query validators``."""
    shown = query.add_parser("validators", help="the validator set: every member, any status")
    shown.set_defaults(func=_validators)
    return shown


def _consensus_key(home: Path):
    from dilochain.chain.home import HomeError, consensus_private_key

    try:
        return consensus_private_key(home)
    except HomeError as err:
        raise CliError(f"{err}: run this on the node whose key joins, with its --home") from None


def _send(args: argparse.Namespace, what: str, build) -> int:
    """Sign ``build(client, operator)``'s messages with ``args.key`` and print the outcome."""
    from dilochain.client import TxRefused, connect, submit
    from dilochain.poc_client import PocClient

    client = connect(chain_nodes(args))
    wallet = signing_wallet(args.home, args.key)
    with PocClient(chain_nodes(args)) as poc:
        msgs = build(client, poc, wallet)
    try:
        included = submit(client, wallet, *msgs)
    except TxRefused as err:
        raise CliError(f"{what} was refused: {err}") from None
    data = {"txhash": included.hash, "height": included.height, "code": included.code,
            "operator": str(wallet.address())}  # fmt: skip
    table = Table("tx", "height", title=f"{what}: included")
    table.add_row(included.hash, str(included.height))
    print_output(args, data, table)
    return 0


def _create(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from dilochain.chain.modules.validator_set import proof_message
    from dilochain.poc_client import InsufficientFunds, ensure_bonded
    from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateValidator

    key = _consensus_key(args.home)
    if args.amount <= 0:
        raise CliError("--amount: a positive number of udlc")

    def build(client, poc, wallet) -> list:
        operator = str(wallet.address())
        try:
            deposit = ensure_bonded(client, poc, wallet, args.amount)
        except InsufficientFunds as err:
            raise CliError(str(err)) from None
        create = MsgCreateValidator(
            operator=operator, amount=str(args.amount), moniker=args.moniker,
            pub_key=key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw),
            key_proof=key.sign(proof_message(client.network_config.chain_id, operator)),
        )  # fmt: skip
        return [*deposit, create]

    return _send(args, "create-validator", build)


def _leave(args: argparse.Namespace) -> int:
    from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgLeaveValidatorSet

    return _send(args, "leave", lambda _c, _p, w: [MsgLeaveValidatorSet(operator=str(w.address()))])


def _unjail(args: argparse.Namespace) -> int:
    from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgUnjailValidator

    return _send(args, "unjail", lambda _c, _p, w: [MsgUnjailValidator(operator=str(w.address()))])


def _validators(args: argparse.Namespace) -> int:
    from google.protobuf.json_format import MessageToDict

    from dilochain.chain.modules.validator_set import status_name
    from dilochain.poc_client import PocClient

    with PocClient(chain_nodes(args)) as poc:
        members = poc.validators()
    shown = {"preserving_proto_field_name": True, "always_print_fields_with_no_presence": True}
    data = [{**MessageToDict(v, **shown), "status": status_name(v.status)} for v in members]
    table = Table("consensus address", "moniker", "status", "power", "self-bond", "operator",
                  title=f"{len(members)} validators")  # fmt: skip
    for v in sorted(members, key=lambda v: -v.power):
        bond = dlc(v.self_bond) if v.self_bond not in ("", "0") else "genesis"
        table.add_row(v.consensus_address, v.moniker, status_name(v.status), str(v.power), bond,
                      v.operator or "—")  # fmt: skip
    print_output(args, data, table)
    return 0


def add_flags(parsers: list[argparse.ArgumentParser]) -> None:
    """``--chain`` and ``--output`` on each of ``parsers``."""
    for command in parsers:
        add_chain_flag(command)
        add_output_flag(command)

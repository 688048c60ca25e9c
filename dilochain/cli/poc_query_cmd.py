"""``query poc …``: the chain's own objects (runs, hosts, rounds, commits, challenges, screens,
beacons, global states, slashes, verifiers, collateral, epochs, vesting, params), one command
each as a Cosmos SDK module's query CLI has them; ``--output json`` gives the protobuf JSON
mapping (field names as in the .proto, bytes in hex), text a YAML-like listing."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from dilochain.cli.common import CliError, chain_nodes, epoch_number, print_result


@dataclass(frozen=True)
class _Query:
    help: str
    args: tuple[str, ...]  # positional arguments: run_id, round, address, epoch
    ask: Callable  # (PocClient, args) -> a message, a list of them, or None: not found


_ARG_HELP = {"run_id": "the run's id", "round": "a round of the run (0 is the first)",
             "address": "an account's bech32 address", "epoch": "an epoch number"}  # fmt: skip
QUERIES = {
    "params": _Query("the module's parameters", (), lambda p, a: p.params()),
    "runs": _Query("every run (--active: only runs still going)", (),
                   lambda p, a: p.runs(active=a.active)),
    "run": _Query("one run: its config and progress", ("run_id",), lambda p, a: p.run(a.run_id)),
    "round": _Query("a run's current round, its windows and the chain's height", ("run_id",),
                    lambda p, a: p.round_info(a.run_id)),
    "hosts": _Query("the hosts registered in a run", ("run_id",), lambda p, a: p.hosts(a.run_id)),
    "roster": _Query("the hosts that may commit a round (once drawn)", ("run_id", "round"),
                     lambda p, a: p.roster(a.run_id, a.round)),
    "commits": _Query("a round's commits and their outcomes", ("run_id", "round"),
                      lambda p, a: p.commits(a.run_id, a.round)),
    "challenges": _Query("a round's challenges and verdicts", ("run_id", "round"),
                         lambda p, a: p.challenges(a.run_id, a.round)),
    "screens": _Query("a round's screens of commits", ("run_id", "round"),
                      lambda p, a: p.screens(a.run_id, a.round)),
    "beacon": _Query("a round's beacon: commitments, secrets, seed", ("run_id", "round"),
                     lambda p, a: p.beacon(a.run_id, a.round)),
    "global-states": _Query("the recorded global state of every round", ("run_id",),
                            lambda p, a: p.global_checkpoints(a.run_id)),
    "slashes": _Query("slashes (of one address with --address)", (),
                      lambda p, a: p.slashes(a.address or "")),
    "verifiers": _Query("registered verifiers", (), lambda p, a: p.verifiers()),
    "collateral": _Query("an address's bonded and unbonding collateral", ("address",),
                         lambda p, a: p.collateral(a.address)),
    "epoch": _Query("an epoch (the current one without --epoch): bounds, pool, work", (),
                    lambda p, a: p.epoch(a.epoch)),
    "claimable": _Query("what an address earned in an epoch, and whether it was claimed",
                        ("address", "epoch"), lambda p, a: p.claimable(a.address, a.epoch)),
    "vesting": _Query("an address's claimed rewards still vesting", ("address",),
                      lambda p, a: p.vesting(a.address)),
}  # fmt: skip


def add_query(query: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """``query poc …``; the parsers (they take ``--chain``/``--node`` and ``--output``)."""
    commands = query.add_parser("poc", help="the chain's own objects: runs, rounds, "
                                "commits, challenges, slashes …").add_subparsers(
        dest="poc_query", required=True, metavar="{" + ",".join(QUERIES) + "}")  # fmt: skip
    parsers = []
    for name, spec in QUERIES.items():
        command = commands.add_parser(name, help=spec.help)
        for arg in spec.args:
            kind = int if arg in ("round", "epoch") else str
            command.add_argument(arg, type=kind, help=_ARG_HELP[arg])
        if name == "runs":
            command.add_argument("--active", action="store_true")
        if name == "slashes":
            command.add_argument("--address", default="")
        if name == "epoch":
            command.add_argument("--epoch", type=epoch_number, default=None)
        command.set_defaults(func=_ask)
        parsers.append(command)
    return parsers


def _plain(found: object) -> object:
    """A query's answer as JSON-ready data: the protobuf JSON mapping with the .proto's field
    names, but bytes (hashes, roots, secrets) in hex, as logs, ``status`` and the dashboard
    show them, not the mapping's base64."""
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import Message

    if isinstance(found, Message):
        data = MessageToDict(found, preserving_proto_field_name=True,
                             always_print_fields_with_no_presence=True)  # fmt: skip
        return _hex_bytes(found, data)
    if isinstance(found, list):
        return [_plain(item) for item in found]
    return found


def _hex_bytes(message, data: dict) -> dict:
    """``data`` (``message`` in the JSON mapping) with every bytes field, at any depth, in hex."""
    from google.protobuf.descriptor import FieldDescriptor

    for field in message.DESCRIPTOR.fields:
        if field.name not in data:
            continue
        value, shown = getattr(message, field.name), data[field.name]
        repeated = field.label == field.LABEL_REPEATED
        if field.type == FieldDescriptor.TYPE_BYTES:
            data[field.name] = [v.hex() for v in value] if repeated else value.hex()
        elif field.type == FieldDescriptor.TYPE_MESSAGE:  # the module's messages have no maps
            for item, its in zip(value, shown, strict=True) if repeated else [(value, shown)]:
                _hex_bytes(item, its)
    return data


def _text(data: object, indent: str = "") -> str:
    """``data`` as YAML-like lines (as Cosmos SDK CLIs print by default)."""
    if isinstance(data, dict):
        lines = []
        for key, value in data.items():
            if isinstance(value, dict | list) and value:
                lines.append(f"{indent}{key}:\n{_text(value, indent + '  ')}")
            else:
                lines.append(f"{indent}{key}: {value if value not in ({}, []) else '[]'}")
        return "\n".join(lines)
    if isinstance(data, list):
        if not data:
            return f"{indent}[]"
        items = []
        for item in data:
            shown = _text(item, indent + "  ")
            items.append(f"{indent}- {shown.lstrip()}")
        return "\n".join(items)
    return f"{indent}{data}"


def _ask(args: argparse.Namespace) -> int:
    from dilochain.poc_client import PocClient

    spec = QUERIES[args.poc_query]
    if "round" in spec.args and args.round < 0:
        raise CliError("round: 0 or more")
    with PocClient(chain_nodes(args)) as poc:
        if "run_id" in spec.args and poc.run(args.run_id) is None:
            raise CliError(f"unknown run {args.run_id!r}")
        found = spec.ask(poc, args)
    data = _plain(found)
    print_result(args, data, _text(data) if data is not None else "not drawn yet")
    return 0

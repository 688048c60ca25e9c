"""``dilochain keys``: add, list and show account keys in the encrypted keyring."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from dilochain.cli.common import default_home, keyring, keyring_password, print_tables, read_secret
from dilochain.keyring import KeyInfo


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``keys`` command group."""
    keys = sub.add_parser("keys", help="manage account keys").add_subparsers(
        dest="keys_cmd", required=True, metavar="{add,list,show}"
    )
    add = keys.add_parser("add", help="create a key (or recover one from a mnemonic)")
    add.add_argument("name")
    add.add_argument("--recover", action="store_true", help="read a BIP-39 mnemonic")
    show = keys.add_parser("show", help="print a key's address and public key")
    show.add_argument("name")
    show.add_argument("--address", "-a", action="store_true", help="print the address only")
    listing = keys.add_parser("list", help="list keys")
    for p in (add, show, listing):
        p.add_argument("--home", type=Path, default=default_home())
    add.set_defaults(func=_add)
    show.set_defaults(func=_show)
    listing.set_defaults(func=_list)


def _describe(info: KeyInfo) -> None:
    print(f"- name: {info.name}\n  address: {info.address}\n  pubkey: {info.pubkey}")


def _add(args: argparse.Namespace) -> int:
    ring = keyring(args.home)
    password = keyring_password(confirm=not (args.home / "keyring" / ".keyhash").exists())
    mnemonic = read_secret("BIP-39 mnemonic: ") if args.recover else None
    info, words = ring.add(args.name, password, mnemonic)
    _describe(info)
    if not args.recover:
        print("\nWrite this mnemonic down; it is the only way to recover the key:\n")
        print(words)
    return 0


def _show(args: argparse.Namespace) -> int:
    info = keyring(args.home).show(args.name)
    if args.address:
        print(info.address)
    else:
        _describe(info)
    return 0


def _list(args: argparse.Namespace) -> int:
    table = Table("name", "address")
    for info in keyring(args.home).list():
        table.add_row(info.name, info.address)
    print_tables(table)
    return 0

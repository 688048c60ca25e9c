"""``dilochain keys``: add, list, show, delete, export and import account keys in the
encrypted keyring."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rich.table import Table

from dilochain.cli.common import (
    CliError,
    add_output_flag,
    default_home,
    keyring,
    keyring_password,
    print_output,
    read_secret,
)
from dilochain.keyring import KeyInfo


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``keys`` command group."""
    keys = sub.add_parser("keys", help="manage account keys").add_subparsers(
        dest="keys_cmd", required=True, metavar="{add,list,show,delete,export,import-hex}"
    )
    add = keys.add_parser("add", help="create a key (or recover one from a mnemonic)")
    add.add_argument("name")
    add.add_argument("--recover", action="store_true", help="read a BIP-39 mnemonic")
    show = keys.add_parser("show", help="print a key's address and public key")
    show.add_argument("name")
    show.add_argument("--address", "-a", action="store_true", help="print the address only")
    listing = keys.add_parser("list", help="list keys")
    delete = keys.add_parser("delete", help="remove a key from the keyring")
    delete.add_argument("name")
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask to confirm")
    export = keys.add_parser("export", help="print a key's private key (as hex)")
    export.add_argument("name")
    export.add_argument("--unarmored-hex", action="store_true", help="as hex (the only form)")
    export.add_argument("--unsafe", action="store_true",
                        help="acknowledge that anyone who sees it owns the account")  # fmt: skip
    imported = keys.add_parser("import-hex", help="add a key from its private key in hex")
    imported.add_argument("name")
    imported.add_argument("hex", nargs="?", help="(default: asked for, or one line of stdin)")
    for p in (add, show, listing, delete, export, imported):
        p.add_argument("--home", type=Path, default=default_home())
    for p in (show, listing):
        add_output_flag(p)
    add.set_defaults(func=_add)
    show.set_defaults(func=_show)
    listing.set_defaults(func=_list)
    delete.set_defaults(func=_delete)
    export.set_defaults(func=_export)
    imported.set_defaults(func=_import_hex)


def _describe(info: KeyInfo) -> None:
    print(f"- name: {info.name}\n  address: {info.address}\n  pubkey: {info.pubkey}")


def _password_for_a_new_key(home: Path) -> str:
    """The keyring password, entered twice when it is the keyring's first key (it sets it)."""
    return keyring_password(confirm=not (home / "keyring" / ".keyhash").exists())


def _add(args: argparse.Namespace) -> int:
    ring = keyring(args.home)
    password = _password_for_a_new_key(args.home)
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
    elif args.output == "json":
        print_output(args, dataclasses.asdict(info))
    else:
        _describe(info)
    return 0


def _list(args: argparse.Namespace) -> int:
    table = Table("name", "address")
    found = keyring(args.home).list()
    for info in found:
        table.add_row(info.name, info.address)
    print_output(args, [dataclasses.asdict(info) for info in found], table)
    return 0


def _delete(args: argparse.Namespace) -> int:
    ring = keyring(args.home)
    info = ring.show(args.name)
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(f"deleting key {args.name!r} needs --yes when there is no terminal "
                           "to confirm on")  # fmt: skip
        answer = input(f"Delete key {info.name} ({info.address})? It cannot be undone [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("kept")
            return 1
    ring.delete(args.name)
    print(f"deleted key {info.name} ({info.address})")
    return 0


def _export(args: argparse.Namespace) -> int:
    if not (args.unarmored_hex and args.unsafe):
        raise CliError("keys export prints the private key in the clear: give --unarmored-hex "
                       "--unsafe (ASCII-armored export is not supported)")  # fmt: skip
    wallet = keyring(args.home).wallet(args.name, keyring_password())
    print(wallet.signer().private_key_bytes.hex())
    return 0


def _import_hex(args: argparse.Namespace) -> int:
    if args.hex is not None:
        print("warning: a private key given as an argument is in your shell's history and "
              "visible to other users in `ps`; leave it out to be asked for it (or pipe it)",
              file=sys.stderr)  # fmt: skip
    text = args.hex if args.hex is not None else read_secret("Private key (hex): ")
    try:
        raw = bytes.fromhex(text.strip().removeprefix("0x"))
    except ValueError:
        raise CliError("the private key is not hex") from None
    if len(raw) != 32:
        raise CliError(f"a secp256k1 private key is 32 bytes, not {len(raw)}")
    ring = keyring(args.home)
    _describe(ring.import_private(args.name, _password_for_a_new_key(args.home), raw))
    return 0

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
    print_result,
    read_secret,
)
from dilochain.keyring import KeyInfo


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``keys`` command group."""
    keys = sub.add_parser("keys", help="manage account keys").add_subparsers(
        dest="keys_cmd",
        required=True,
        metavar="{add,list,show,delete,export,import,import-hex}",
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
    export = keys.add_parser("export", help="print a key's private key, ASCII-armored and "
                             "encrypted under a passphrase (as the Cosmos SDK's)")  # fmt: skip
    export.add_argument("name")
    export.add_argument("--unarmored-hex", action="store_true",
                        help="instead: in the clear, as hex (with --unsafe)")  # fmt: skip
    export.add_argument("--unsafe", action="store_true",
                        help="acknowledge that anyone who sees it owns the account")  # fmt: skip
    armored = keys.add_parser(
        "import", help="add a key from an ASCII-armored key file (what `keys export` writes, "
        "here or on a Cosmos SDK chain)",
    )  # fmt: skip
    armored.add_argument("name")
    armored.add_argument("file", type=Path, help="the armored key (its passphrase is asked for)")
    imported = keys.add_parser("import-hex", help="add a key from its private key in hex")
    imported.add_argument("name")
    imported.add_argument("hex", nargs="?", help="(default: asked for, or one line of stdin)")
    for p in (add, show, listing, delete, export, armored, imported):
        p.add_argument("--home", type=Path, default=default_home())
    for p in (add, show, listing, delete, armored, imported):
        add_output_flag(p)
    add.set_defaults(func=_add)
    show.set_defaults(func=_show)
    listing.set_defaults(func=_list)
    delete.set_defaults(func=_delete)
    export.set_defaults(func=_export)
    armored.set_defaults(func=_import_armored)
    imported.set_defaults(func=_import_hex)


def _text(info: KeyInfo) -> str:
    return f"- name: {info.name}\n  address: {info.address}\n  pubkey: {info.pubkey}"


def _describe(args: argparse.Namespace, info: KeyInfo) -> None:
    print_result(args, dataclasses.asdict(info), _text(info))


def _password_for_a_new_key(home: Path) -> str:
    """The keyring password, entered twice when it is the keyring's first key (it sets it)."""
    return keyring_password(confirm=not (home / "keyring" / ".keyhash").exists())


def _add(args: argparse.Namespace) -> int:
    ring = keyring(args.home)
    password = _password_for_a_new_key(args.home)
    mnemonic = read_secret("BIP-39 mnemonic: ") if args.recover else None
    info, words = ring.add(args.name, password, mnemonic)
    text = _text(info)
    if not args.recover:
        text += f"\n\nWrite this mnemonic down; it is the only way to recover the key:\n\n{words}"
    shown = dataclasses.asdict(info) | ({} if args.recover else {"mnemonic": words})
    print_result(args, shown, text)
    return 0


def _show(args: argparse.Namespace) -> int:
    info = keyring(args.home).show(args.name)
    if args.address:
        print(info.address)
    else:
        _describe(args, info)
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
    info = ring.show(args.name)  # an unknown key fails before any password is asked for
    if not args.yes and not sys.stdin.isatty():
        raise CliError(f"deleting key {args.name!r} needs --yes when there is no terminal "
                       "to confirm on")  # fmt: skip
    ring.wallet(args.name, keyring_password())  # only the keyring's owner deletes its keys
    if not args.yes:
        answer = input(f"Delete key {info.name} ({info.address})? It cannot be undone [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("kept")
            return 1
    ring.delete(args.name)
    print_result(args, {"deleted": info.name, "address": info.address},
                 f"deleted key {info.name} ({info.address})")  # fmt: skip
    return 0


def _export(args: argparse.Namespace) -> int:
    from dilochain.key_armor import armor_private_key

    if args.unarmored_hex and not args.unsafe:
        raise CliError("--unarmored-hex prints the private key in the clear: add --unsafe")
    ring = keyring(args.home)
    ring.show(args.name)  # an unknown key fails before any password is asked for
    raw = ring.wallet(args.name, keyring_password()).signer().private_key_bytes
    if args.unarmored_hex:
        print(raw.hex())
        return 0
    passphrase = read_secret("Passphrase to encrypt the exported key: ", confirm=True)
    if not passphrase:
        raise CliError("an empty passphrase protects nothing: give one")
    print(armor_private_key(raw, passphrase), end="")
    return 0


def _import_armored(args: argparse.Namespace) -> int:
    from dilochain.key_armor import ArmorError, unarmor_private_key

    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CliError(f"{args.file}: unreadable ({err})") from None
    try:
        raw = unarmor_private_key(text, read_secret("Passphrase of the armored key: "))
    except ArmorError as err:
        raise CliError(f"{args.file}: {err}") from None
    ring = keyring(args.home)
    _describe(args, ring.import_private(args.name, _password_for_a_new_key(args.home), raw))
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
    _describe(args, ring.import_private(args.name, _password_for_a_new_key(args.home), raw))
    return 0

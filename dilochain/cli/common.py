"""What the subcommands share: the user-error type, homes, durations, passwords."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
from pathlib import Path

from dilochain.keyring import Keyring
from dilochain.logs import LOG_FORMATS

PASSWORD_ENV = "DILOCHAIN_KEYRING_PASSWORD"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)\Z")


DEFAULT_CHAIN = "127.0.0.1:9090"
CHAIN_HELP = ("a chain node's gRPC address, host:port; repeat the flag (or separate addresses "
              "by commas) to fail over between nodes")  # fmt: skip


UDLC_PER_DLC = 10**6


def dlc(udlc: int | str) -> str:
    """An amount of udlc as DLC, exact and without trailing zeros: 10000000 -> "10 DLC",
    1234567890 -> "1,234.56789 DLC" (as the dashboard writes amounts)."""
    whole, fraction = divmod(int(udlc), UDLC_PER_DLC)
    digits = f"{fraction:06d}".rstrip("0")
    return f"{whole:,}{'.' + digits if digits else ''} DLC"


# Piped output has no width to fit: wide enough that no amount or address is ever cut.
PIPED_WIDTH = 1000


def wide_console():
    """A rich console for standard output that does not fit piped output to 80 columns."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    """``--output text|json``, as Cosmos SDK CLIs have it (read by :func:`print_output`)."""
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text",
                        help="text for people, json for scripts")  # fmt: skip


def print_output(args: argparse.Namespace, data: object, *tables: object) -> None:
    """``data`` as JSON with ``--output json``, else ``tables`` (:func:`print_tables`)."""
    if args.output == "json":
        print(json.dumps(data, indent=2))
    else:
        print_tables(*tables)


def print_result(args: argparse.Namespace, data: object, text: str) -> None:
    """``data`` as JSON with ``--output json``, else ``text`` as it is."""
    print(json.dumps(data, indent=2) if args.output == "json" else text)


def folded(*renderables: object) -> tuple[object, ...]:
    """``renderables`` with every table's cells folding onto more lines in a narrow terminal
    instead of ending in "…"."""
    from rich.table import Table

    for item in renderables:
        if isinstance(item, Table):
            for column in item.columns:
                column.overflow = "fold"
    return renderables


def print_tables(*renderables: object) -> None:
    """Print to standard output without cutting a value (:func:`folded`, :func:`wide_console`)."""
    wide_console().print(*folded(*renderables))


class CliError(Exception):
    """A mistake the user can fix; printed as one line, exit code 1."""


def add_chain_flag(parser: argparse.ArgumentParser, default: object = None) -> None:
    """``--chain HOST:PORT``, repeatable, or ``--node URL``; read them with
    :func:`chain_nodes` (``default`` None), or leave the chain to a config file
    (``argparse.SUPPRESS``: no ``--node``, a long-running service fails over between nodes)."""
    parser.add_argument("--chain", action="append", default=default, metavar="HOST:PORT",
                        help=f"{CHAIN_HELP} (default: {DEFAULT_CHAIN})")  # fmt: skip
    if default is None:
        parser.add_argument("--node", metavar="URL", help="instead of --chain: one node's "
                            "CometBFT RPC, tcp://host:26657, as Cosmos CLIs take it")  # fmt: skip


def chain_nodes(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--chain`` addresses given (or the default), checked; or ``--node``'s URL."""
    from dilochain.endpoints import AddressError, parse_addresses
    from dilochain.rpc_channel import rpc_address

    node = getattr(args, "node", None)
    if node is not None:
        if args.chain:
            raise CliError("--chain and --node: give one (nodes' gRPC, or one node's RPC)")
        if rpc_address(node) is None:
            raise CliError(f"--node: {node[:80]!r} is not a CometBFT RPC URL; give "
                           "tcp://host:port (26657 by default)")  # fmt: skip
        return (node,)
    try:
        return parse_addresses(args.chain or DEFAULT_CHAIN)
    except AddressError as err:
        raise CliError(f"--chain: {err}") from None


def add_log_format(parser: argparse.ArgumentParser, top_level: bool = False) -> None:
    """``--log-format text|json``, before the command or after it (the later one wins); None
    when not given, so a config file's ``log_format`` can apply."""
    parser.add_argument(
        "--log-format", choices=LOG_FORMATS, default=None if top_level else argparse.SUPPRESS,
        help="log lines for people (text, the default) or one JSON object per line (json)",
    )  # fmt: skip


def default_home() -> Path:
    """``$DILOCHAIN_HOME`` or ``~/.dilochain``."""
    return Path(os.environ.get("DILOCHAIN_HOME", Path.home() / ".dilochain"))


def send_leave(chain: tuple[str, ...], wallet, msg, what: str, event: str) -> dict:
    """Send a leave message ``msg`` (leaving ``what``) and wait for its block; a refusal is one
    clear error. Its receipt: height, txhash, the ``release_height`` its ``event`` names and
    the chain's unbonding params."""
    from dilochain.client import TxRefused, connect, submit
    from dilochain.poc_client import PocClient

    try:
        response = submit(connect(chain), wallet, msg)
    except TxRefused as err:
        raise CliError(f"leaving {what} refused: {err}") from None
    with PocClient(chain) as poc:
        params = poc.params()
    return {"height": response.height, "txhash": response.hash,
            "release_height": response.events.get(event, {}).get("release_height", "?"),
            "unbonding_blocks": params.unbonding_blocks,
            "unbonding_period_seconds": params.unbonding_period_seconds}  # fmt: skip


def output_folder(text: str) -> Path:
    """A folder to write into (an argparse type): not an existing file, and under a folder
    this user can write to; checked before any work is done."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text}: {existing} is not a folder you can write in")
    return path


def epoch_number(text: str) -> int:
    """An ``--epoch`` (an argparse type): a whole number, 0 or more."""
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not an epoch number (0, 1, 2, …)")
    return int(text)


def parse_duration(text: str) -> float:
    """``"1s"``, ``"100ms"``, ``"0.5s"``, ``"2m"`` in seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise CliError(f"invalid duration {text!r} (use e.g. 1s, 500ms)")
    value, unit = float(match.group(1)), match.group(2)
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]


def keyring(home: Path) -> Keyring:
    """The keyring of a home directory."""
    return Keyring(home / "keyring")


def signing_wallet(home: Path, key: str):
    """The wallet of ``key`` in ``home``'s keyring; an unknown key fails before the password
    is asked for."""
    ring = keyring(home)
    ring.show(key)
    return ring.wallet(key, keyring_password())


def read_secret(prompt: str, confirm: bool = False, env: str = "") -> str:
    """A secret from the terminal, or one line of piped standard input (``env``: the variable
    that could have given it, named when neither does)."""
    if not sys.stdin.isatty():
        line = sys.stdin.readline()
        if not line:
            where = f", or set {env}" if env else ""
            raise CliError(f"{prompt.rstrip(': ')} expected: no terminal to ask on; pipe it "
                           f"to standard input{where}")  # fmt: skip
        return line.rstrip("\n")
    value = getpass.getpass(prompt)
    if confirm and getpass.getpass("Repeat " + prompt[0].lower() + prompt[1:]) != value:
        raise CliError("the two entries differ")
    return value


def keyring_password(confirm: bool = False) -> str:
    """The keyring password: ``$DILOCHAIN_KEYRING_PASSWORD`` or asked for."""
    if PASSWORD_ENV in os.environ:
        return os.environ[PASSWORD_ENV]
    return read_secret("Keyring password: ", confirm, PASSWORD_ENV)

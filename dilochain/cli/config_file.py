"""The operator's config files (``node.toml``, ``verifier.toml``): written commented by
``init``, read by ``node start`` / ``verifier run``, overridden by flags, and validated by the
command's pydantic model, with one line naming the key and the file for a mistake."""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from dilochain.cli.common import (
    DEFAULT_CHAIN,
    CliError,
    add_chain_flag,
    add_log_format,
    default_home,
)

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Setting:
    """One key of a config file: its flag, what ``init`` writes (None: commented out, showing
    ``example``, a value that is valid TOML once uncommented) and the comment above it."""

    key: str
    flag: str
    sample: object
    help: str
    example: object = ""


def service_settings(signs: str, metrics_address: str) -> list[Setting]:
    """The settings every long-running participant has: chain, key, metrics, auto-claim, logs."""
    return [
        Setting("chain", "--chain", DEFAULT_CHAIN,
                "The chain's gRPC address (txs, queries), or a list of several nodes' addresses\n"
                'to fail over between, e.g. ["10.0.0.1:9090", "10.0.0.2:9090"].'),
        Setting("key", "--key", None, f"The key in this home's keyring: it {signs} and is paid.",
                "operator"),
        Setting("metrics_address", "--metrics-address", metrics_address,
                "Prometheus metrics at http://ADDRESS/metrics (empty: none)."),
        Setting("auto_claim", "--auto-claim", True,
                "Claim every epoch that becomes claimable, and what has vested, while running."),
        Setting("log_format", "--log-format", "text",
                "Log lines: text, or json for log collectors."),
    ]  # fmt: skip


def add_identity_flags(parser: argparse.ArgumentParser) -> None:
    """``--home``, ``--key`` and ``--chain``, defaulting to the config file: what a command
    that signs one tx for a service (``node leave``, ``verifier leave``) needs of it."""
    none = argparse.SUPPRESS
    parser.add_argument("--home", type=Path, default=default_home(),
                        help="its home: keyring, config file, state")  # fmt: skip
    parser.add_argument("--key", default=none, help="its key in the home's keyring")
    add_chain_flag(parser, none)


def add_service_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of :func:`service_settings` (and ``--home``), defaulting to the config file."""
    none = argparse.SUPPRESS
    add_identity_flags(parser)
    parser.add_argument(
        "--metrics-address", default=none, help="serve Prometheus metrics here (empty: none)"
    )
    parser.add_argument(
        "--auto-claim",
        action=argparse.BooleanOptionalAction,
        default=none,
        help="claim rewards as epochs close (default: on)",
    )
    add_log_format(parser)


def add_init_and_start(
    group: argparse._SubParsersAction, name: str, start: str, start_help: str, run: Callable,
    settings: list[Setting], add_flags: Callable, model: Callable[[], type[BaseModel]],
) -> argparse.ArgumentParser:  # fmt: skip
    """``init`` (writes the config file ``name``, e.g. ``node.toml``, of ``settings``, checked
    by ``model()``) and the command ``start`` that reads it, both with ``add_flags``; returns the
    latter's parser, for its own flags."""
    command = f"dilochain {name.removesuffix('.toml')} {start}"

    def init(args: argparse.Namespace) -> int:
        title = f"{name}: read by `{command} --home HOME`."
        path = init_config(args, name, title, settings, model(), home=args.home)
        print(f"wrote {path}")
        return 0

    writer = group.add_parser("init", help=f"write a commented HOME/{name}")
    add_flags(writer)
    writer.add_argument("--overwrite", action="store_true")
    writer.set_defaults(func=init)
    return add_config_command(group, name, start, start_help, run, add_flags)


def add_config_command(
    group: argparse._SubParsersAction, name: str, command: str, help: str, run: Callable,
    add_flags: Callable,
) -> argparse.ArgumentParser:  # fmt: skip
    """A command that reads the config file ``name`` (or ``--config FILE``) under its flags
    (``add_flags``); returns its parser, for its own flags."""
    parser = group.add_parser(command, help=help)
    add_flags(parser)
    parser.add_argument(
        "--config", type=Path, default=None, help=f"config file (default: HOME/{name} if there)"
    )
    parser.set_defaults(func=run)
    return parser


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string


def write_config(path: Path, title: str, settings: list[Setting], values: dict) -> None:
    """Write a commented TOML file: every setting with its help, set to ``values[key]`` if
    given, else to its sample (commented out when the sample is None)."""
    lines = [f"# {title}", "# Flags given on the command line override these values.", ""]
    for s in settings:
        lines += [f"# {line}" for line in s.help.splitlines()]
        value = values.get(s.key, s.sample)
        if value is None:
            lines.append(f"# {s.key} = {_toml(s.example)}")
        else:
            lines.append(f"{s.key} = {_toml(value)}")
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def read_config(path: Path, settings: list[Setting]) -> dict:
    """The values of a config file, its keys checked against ``settings``."""
    try:
        values = tomllib.loads(path.read_text())
    except OSError as err:
        raise CliError(f"{path}: {err.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise CliError(f"{path}: not valid TOML: {err}") from None
    known = {s.key for s in settings}
    for key in values:
        if key not in known:
            raise CliError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(known))})")
    return values


def given_flags(args: argparse.Namespace, settings: list[Setting]) -> dict:
    """The settings given as flags (their defaults are ``argparse.SUPPRESS``, or None for
    ``--log-format`` before the command)."""
    given = {s.key: getattr(args, s.key, None) for s in settings}
    return {key: value for key, value in given.items() if value is not None}


def resolve(
    model: type[M], path: Path, settings: list[Setting], args: argparse.Namespace, **fixed
) -> M:
    """``model`` from the config file at ``path`` (if there), flags over it, and ``fixed``
    values; a bad or missing value is one line naming the key and where it came from."""
    from_file = read_config(path, settings) if path.exists() else {}
    flags = given_flags(args, settings)
    try:
        return model(**{**from_file, **flags, **fixed})
    except ValidationError as err:
        first = err.errors()[0]
        key = str(first["loc"][0])
        flag = next((s.flag for s in settings if s.key == key), f"--{key}")
        if first["type"] == "missing":
            raise CliError(f"no {key}: give {flag} or set {key} in {path}") from None
        where = flag if key in flags or key not in from_file else f"{path}: {key}"
        raise CliError(f"{where}: {first['msg']}") from None


def config_path(args: argparse.Namespace, name: str) -> Path:
    """``--config FILE``, else ``name`` in the home; a ``--config`` that is not there is an
    error (a home without a file is fine: flags alone)."""
    if args.config is not None:
        if not args.config.is_file():
            raise CliError(f"{args.config}: no such config file")
        return args.config
    return args.home / name


def init_config(
    args: argparse.Namespace, name: str, title: str, settings: list[Setting], model: type,
    **fixed,
) -> Path:  # fmt: skip
    """``init``: write ``name`` in the home with the given flags filled in, after checking
    them with ``model`` (required keys may still be missing)."""
    path = args.home / name
    if path.exists() and not args.overwrite:
        raise CliError(f"{path} exists (use --overwrite to replace it)")
    values = {
        key: value[0] if isinstance(value, list) and len(value) == 1 else value
        for key, value in given_flags(args, settings).items()
    }  # a repeatable flag once
    sample = {s.key: s.sample for s in settings if s.sample is not None}
    try:
        model(**{**sample, **values, **fixed})
    except ValidationError as err:
        bad = [e for e in err.errors() if e["type"] != "missing"]
        if bad:
            key = str(bad[0]["loc"][0])
            flag = next(s.flag for s in settings if s.key == key)
            raise CliError(f"{flag}: {bad[0]['msg']}") from None
    write_config(path, title, settings, values)
    return path

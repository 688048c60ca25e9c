"""Entry point of the ``dilochain`` console script."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

import grpc

from dilochain.artifacts.store import ArtifactError
from dilochain.chain.cometbft import CometMissing
from dilochain.chain.home import HomeError
from dilochain.chain.server import ChainStartError
from dilochain.cli import (
    chain_cmd,
    cosmos_cmd,
    dashboard_cmd,
    data_cmd,
    devnet_cmd,
    export_cmd,
    keys_cmd,
    node_cmd,
    rewards_cmd,
    run_cmd,
    status_cmd,
    testnet_cmd,
    verifier_cmd,
)
from dilochain.cli.common import CliError, add_log_format
from dilochain.client import ChainUnreachable
from dilochain.dashboard.server import DashboardError
from dilochain.genesis.document import GenesisError
from dilochain.keyring import KeyringError
from dilochain.logs import setup_logging
from dilochain.metrics_http import MetricsError
from dilochain.node.errors import NodeError
from dilochain.protocol.endpoint import PRIVATE_SWITCH, private_switch_problem
from dilochain.protocol.model_config import ModelConfigError
from dilochain.training.errors import DataError
from dilochain.verifier.errors import VerifierError


def build_parser() -> argparse.ArgumentParser:
    """The full command tree."""
    parser = _Parser(
        prog="dilochain", description="DiLoCo training proven and paid on a Cosmos chain"
    )
    add_log_format(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chain_cmd.register(sub)
    keys_cmd.register(sub)
    node_cmd.register(sub)
    verifier_cmd.register(sub)
    data_cmd.register(sub)
    run_cmd.register(sub)
    rewards_cmd.register(sub)
    status_cmd.register(sub)
    devnet_cmd.register(sub)
    export_cmd.register(sub)
    dashboard_cmd.register(sub)
    testnet_cmd.register(sub)
    cosmos_cmd.register(sub)
    _show_defaults(parser)
    return parser


class _Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line (a subcommand's usage runs to a screen, and
    hid the error under it), naming ``--help``; a command given without its subcommand shows
    its help, the list of them. Its subcommands' parsers are of its class."""

    commands = False

    def add_subparsers(self, **kwargs):
        self.commands = True
        return super().add_subparsers(**kwargs)

    def error(self, message: str) -> NoReturn:
        if self.commands and "arguments are required" in message:
            self.print_help(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "_command"):  # set by the innermost subcommand's parser
            parsed._command = self
        return parsed, extras

    def parse_args(self, args=None, namespace=None):
        """The parsed arguments; arguments no parser took are the error of the subcommand
        they were given to (argparse names the top-level command)."""
        parsed, extras = self.parse_known_args(args, namespace)
        command = vars(parsed).pop("_command")
        if extras:
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


class _DefaultsHelp(argparse.HelpFormatter):
    """Help that ends each option's line with its default, where it has a telling one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or not action.option_strings or default is argparse.SUPPRESS
                or default in (None, False, "", ())):  # fmt: skip
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every parser of the tree prints defaults in its ``--help``."""
    parser.formatter_class = _DefaultsHelp
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _show_defaults(child)


USER_ERRORS = (
    CliError, HomeError, ChainStartError, CometMissing, ChainUnreachable, KeyringError,
    GenesisError, NodeError, DataError, VerifierError, ArtifactError, ModelConfigError,
    MetricsError, DashboardError,
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run one command; user errors print one line and exit 1."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_format or "text")
    if (problem := private_switch_problem(os.environ.get(PRIVATE_SWITCH, ""))) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except grpc.RpcError as err:  # the chain went away or refused a query mid-command
        print(f"error: chain request failed: {err.details() or err.code()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

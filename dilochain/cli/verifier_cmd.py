"""``dilochain verifier init``, ``run`` and ``leave``: the validators' verification daemon."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from dilochain.cli.common import (
    CliError,
    add_output_flag,
    print_result,
    send_leave,
    signing_wallet,
)
from dilochain.cli.config_file import (
    Setting,
    add_config_command,
    add_identity_flags,
    add_init_and_start,
    add_service_flags,
    config_path,
    resolve,
    service_settings,
)
from dilochain.client import Sender, connect
from dilochain.logs import setup_logging
from dilochain.metrics_http import serve_metrics
from dilochain.poc_client import PocClient
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgLeaveVerifier
from dilochain.verifier.config import VerifierConfig
from dilochain.verifier.round_duties import EarlyDuties

CONFIG_NAME = "verifier.toml"
DEFAULT_BLOB_ADDRESS = "127.0.0.1:0"
SETTINGS = [
    *service_settings("votes", "127.0.0.1:9465"),
    Setting("data", "--data", [], "Prepared dataset folders, or folders of them (the shipped one\n"
            "is always looked at; a run's data no folder has is fetched from its hosts)."),
    Setting("device", "--device", "cpu",
            "Where to replay: cpu or cuda (another device than the hosts': tolerance mode)."),
    Setting("jobs", "--jobs", 2, "Challenges replayed in parallel."),
    Setting("blob_address", "--blob-address", DEFAULT_BLOB_ADDRESS,
            "Where this verifier serves hosts what it screened and replayed (port 0: any;\n"
            "empty: nowhere): an accepted pseudo-gradient its own host will not serve them."),
    Setting("advertise_address", "--advertise-address", None,
            "The address hosts dial for it, if not the one above (behind NAT: your public\n"
            "address and the port your router forwards).", "203.0.113.8:7001"),
]  # fmt: skip


def _add_settings(parser: argparse.ArgumentParser) -> None:
    """The flags of ``verifier init`` and ``verifier run``, defaulting to the config file."""
    none = argparse.SUPPRESS
    add_service_flags(parser)
    parser.add_argument(
        "--data",
        type=Path,
        action="append",
        default=none,
        help="a prepared dataset folder or a folder of them (repeatable)",
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default=none,
        help="where to replay (another device than the hosts': tolerance mode)",
    )
    parser.add_argument("--jobs", type=int, default=none, help="challenges replayed in parallel")
    parser.add_argument("--blob-address", default=none,
                        help="where it serves hosts what it fetched (port 0: any)")  # fmt: skip
    parser.add_argument(
        "--advertise-address",
        default=none,
        help="the address hosts dial for it (default: the one it listens on)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``verifier`` command group."""
    verifier = sub.add_parser("verifier", help="run a verifier").add_subparsers(
        dest="verifier_cmd", required=True, metavar="{init,run,leave}"
    )
    run = add_init_and_start(verifier, CONFIG_NAME, "run",
                             "re-execute challenged segments and vote", _run, SETTINGS,
                             _add_settings, _model)  # fmt: skip
    leave = add_config_command(verifier, CONFIG_NAME, "leave",
                               "leave the verifier set: no new duties now, released (and "
                               "unbonding) once the rounds begun before are resolved", _leave,
                               add_identity_flags)  # fmt: skip
    add_output_flag(leave)
    # Lazy verifiers, for the tests that show them caught (verifier/lazy.py).
    run.add_argument(
        "--behavior",
        default="honest",
        choices=("honest", "always-fail", "always-pass", "copy"),
        help=argparse.SUPPRESS,
    )


def _model() -> type:
    return VerifierConfig


def _run(args: argparse.Namespace) -> int:
    cfg = resolve(
        VerifierConfig,
        config_path(args, CONFIG_NAME),
        SETTINGS,
        args,
        home=args.home,
        behavior=args.behavior,
    )
    # Serving where no host can reach it is refused only where the operator asked to serve
    # (the loopback default on a chain elsewhere serves nothing and says so).
    asked = cfg.advertise_address or cfg.blob_address not in ("", DEFAULT_BLOB_ADDRESS)
    if asked and (problem := cfg.unreachable_blob_service()) is not None:
        raise CliError(problem)
    setup_logging(cfg.log_format)
    wallet = signing_wallet(args.home, cfg.key)
    client = connect(cfg.chain)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    from dilochain.verifier.metrics import REGISTRY

    metrics = serve_metrics(cfg.metrics_address, REGISTRY)
    try:
        sender = Sender(client, wallet)
        early = None  # its beacon and vote openings go on while torch loads (a restart's)
        if cfg.behavior == "honest":  # (a lazy verifier's ballots are its own: the service's)
            early = EarlyDuties.start(PocClient(cfg.chain), wallet, sender.submit, cfg.home,
                                      cfg.duties_poll_seconds)  # fmt: skip
        from dilochain.verifier.service import VerifierService

        verdicts = VerifierService(cfg, client, wallet, sender, early).run(stop)
    finally:
        if metrics is not None:
            metrics.close()
    print(f"verifier stopped: {verdicts} verdicts submitted this session", flush=True)
    return 0


def _leave(args: argparse.Namespace) -> int:
    cfg = resolve(VerifierConfig, config_path(args, CONFIG_NAME), SETTINGS, args, home=args.home)
    wallet = signing_wallet(args.home, cfg.key)
    verifier = str(wallet.address())
    msg = MsgLeaveVerifier(verifier=verifier)
    receipt = send_leave(cfg.chain, wallet, msg, "the verifier set", "leave_verifier")
    print_result(args, {"verifier": verifier, **receipt}, (
        f"{verifier} left the verifier set at block {receipt['height']} "
        f"(tx {receipt['txhash']}).\nIt gets no new duties, but owes what rounds begun before "
        "then ask of it (screens, beacon openings, votes: a running `verifier run` does them) "
        f"until block {receipt['release_height']};\nthen it is released and all its free "
        f"collateral unbonds, paid back {receipt['unbonding_blocks']} blocks and at least "
        f"{receipt['unbonding_period_seconds']} s later. A running `verifier run` stops once "
        "released."))  # fmt: skip
    return 0

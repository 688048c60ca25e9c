"""``dilochain verifier run``: the validators' verification daemon."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from dilochain.cli.common import default_home, keyring, keyring_password
from dilochain.client import connect


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``verifier`` command group."""
    verifier = sub.add_parser("verifier", help="run a verifier").add_subparsers(
        dest="verifier_cmd", required=True, metavar="{run}"
    )
    run = verifier.add_parser("run", help="re-execute challenged segments and vote")
    run.add_argument("--home", type=Path, default=default_home())
    run.add_argument("--key", required=True)
    run.add_argument("--chain", default="127.0.0.1:9090", help="chain gRPC address")
    run.add_argument("--data", type=Path, action="append", default=[],
                     help="a prepared dataset folder or a folder of them (repeatable)")  # fmt: skip
    run.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where to replay (another device than the hosts': tolerance mode)",
    )
    run.add_argument("--jobs", type=int, default=2, help="challenges replayed in parallel")
    # Lazy verifiers, for the tests that show them caught (verifier/lazy.py).
    run.add_argument("--behavior", default="honest",
                     choices=("honest", "always-fail", "always-pass", "copy"),
                     help=argparse.SUPPRESS)  # fmt: skip
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from dilochain.verifier.service import VerifierConfig, VerifierService

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    ring = keyring(args.home)
    ring.show(args.key)
    wallet = ring.wallet(args.key, keyring_password())
    cfg = VerifierConfig(home=args.home, key=args.key, chain=args.chain, data=tuple(args.data),
                         device=args.device, jobs=max(1, args.jobs),
                         behavior=args.behavior)  # fmt: skip
    service = VerifierService(cfg, connect(args.chain), wallet)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    verdicts = service.run(stop)
    print(f"verifier stopped: {verdicts} verdicts submitted this session", flush=True)
    return 0

"""``dilochain dashboard``: serve the live web page of a chain's runs."""

from __future__ import annotations

import argparse
import signal
import threading

from dilochain.cli.common import add_chain_flag, add_log_format, chain_nodes


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``dashboard`` command."""
    dash = sub.add_parser("dashboard", help="serve a live web page of the chain's runs")
    add_chain_flag(dash)
    dash.add_argument("--listen", default="127.0.0.1:8080", help="host:port of the page")
    add_log_format(dash)
    dash.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from dilochain.dashboard.server import Dashboard

    dashboard = Dashboard(chain_nodes(args), args.listen)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    address = dashboard.start()
    print(f"dashboard at http://{address}/ (Ctrl-C to stop)", flush=True)
    try:
        stop.wait()
    finally:
        dashboard.stop()
    return 0

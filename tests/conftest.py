"""Shared fixtures: a real chain process on an ephemeral loopback port."""

from __future__ import annotations

import io
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.wallet import LocalWallet
from hypothesis import settings

from dilochain.client import network_config
from dilochain.localnet import ChainProcess, init_localnet
from dilochain.protocol.endpoint import allow_private_peers
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, wallet

FUNDS = 10**12
# Examples' timings vary on a loaded 2-core machine: no per-example deadline.
settings.register_profile("loaded", deadline=None)
settings.load_profile("loaded")


def _rank(item: pytest.Item) -> int:
    """0: ``wall_clock``, 1: ``heavy``, 2: ``heavy(last=True)``, 3: the rest."""
    heavy = item.get_closest_marker("heavy")
    if heavy is None:
        return 0 if item.get_closest_marker("wall_clock") else 3
    return 2 if heavy.kwargs.get("last") else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that time themselves (marked ``wall_clock``) first, then those that train with
    several processes (``heavy``; ``heavy(last=True)``, the most sensitive to a loaded
    machine, last), then the rest. With ``DILOCHAIN_TEST_HALF`` only a half runs: ``heavy``
    (the first three kinds, at normal priority) or ``rest``. ``scripts/test.sh`` runs the
    two side by side, the rest at the lowest priority (they take a fraction of the heavy
    tests' time), so the ``last`` ones run once the rest is likely done, and no test that
    times itself runs starved beside a burst of training."""
    items.sort(key=_rank)  # stable: collection order within each rank
    half = os.environ.get("DILOCHAIN_TEST_HALF")
    if half in ("heavy", "rest"):
        other = [item for item in items if (_rank(item) < 3) != (half == "heavy")]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [item for item in items if (_rank(item) < 3) == (half == "heavy")]


@pytest.fixture(autouse=True)
def _private_peers_settled_per_test() -> Iterator[None]:
    """Each test settles afresh where artifacts may be fetched from (the rule is per process:
    a test that connected to a public-looking name would otherwise refuse loopback peers to
    every later test)."""
    yield
    allow_private_peers(None)


@pytest.fixture(autouse=True)
def _no_child_outlives_its_test() -> Iterator[None]:
    """Hosts and verifiers never exit on a chain error: those a failed network test left
    running went on retrying beside the rest of the suite. Each test's own are killed."""
    from dilochain.localnet import SPAWNED

    before = len(SPAWNED)
    yield
    for child in SPAWNED[before:]:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    del SPAWNED[before:]


@pytest.fixture(autouse=True)
def _no_suspect_peers_between_tests(monkeypatch) -> None:
    """Peers that sent bad bytes are remembered per process: each test starts with none (a
    port one test's liar had may be another's honest peer)."""
    from dilochain.artifacts import blob_service

    monkeypatch.setattr(blob_service, "_suspects", blob_service._Suspects())


@dataclass
class RunningChain:
    """A chain process, its address, a cosmpy client and funded wallets."""

    home: Path
    process: ChainProcess
    address: str
    client: LedgerClient
    wallets: list[LocalWallet]


@pytest.fixture(scope="module")
def running_chain(tmp_path_factory) -> Iterator[RunningChain]:
    """A chain process with four funded wallets, 200 ms blocks."""
    home = tmp_path_factory.mktemp("chain")
    wallets = [wallet(100 + i) for i in range(4)]
    init_localnet(home, CHAIN_ID, {str(w.address()): {DENOM: FUNDS} for w in wallets})
    process = ChainProcess(home, block_time="200ms")
    address = process.start()
    client = LedgerClient(network_config(CHAIN_ID, address))
    yield RunningChain(home, process, address, client, wallets)
    assert process.stop() == 0


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``dilochain ARGV`` run in this process (no interpreter, torch or transformers to load
    again), with ``env`` added to the environment: its exit code, stdout and stderr, as a
    subprocess would give them."""
    from dilochain.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())

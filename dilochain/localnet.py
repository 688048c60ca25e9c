"""A real chain process on a loopback port, for the devnet command, tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from chain.home import genesis_path, init_home
from chain.server import ChainStartError
from genesis.models import GenesisDoc, load_genesis, save_genesis

LISTENING = "gRPC server listening on "


def init_localnet(
    home: Path, chain_id: str, accounts: dict[str, dict[str, int]], **param_overrides
) -> GenesisDoc:
    """Initialise ``home`` with ``accounts`` funded; ``param_overrides`` patch genesis params."""
    doc = init_home(home, chain_id, overwrite=True)
    for address, coins in accounts.items():
        doc = doc.with_account(address, coins)
    if param_overrides:
        data = doc.model_dump(mode="json")
        for section, values in param_overrides.items():
            data["params"][section].update(values)
        doc = GenesisDoc.model_validate(data)
    save_genesis(doc, genesis_path(home))
    return load_genesis(genesis_path(home))


def spawn_cli(
    args: list[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Run ``dilochain ARGS`` as a child process, stdout and stderr appended to ``log_path``."""
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "dilochain.cli.main", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def spawn_node(
    home: Path, run_id: str, key: str, chain_address: str, password: str, *extra: str
) -> subprocess.Popen:
    """``dilochain node start`` for a host whose keyring is in ``home``."""
    args = ["node", "start", "--home", str(home), "--run", run_id, "--key", key,
            "--chain", chain_address, *extra]  # fmt: skip
    return spawn_cli(args, home / "node.log", {"DILOCHAIN_KEYRING_PASSWORD": password})


def spawn_verifier(
    home: Path, key: str, chain_address: str, password: str, *extra: str
) -> subprocess.Popen:
    """``dilochain verifier run`` for a verifier whose keyring is in ``home``."""
    args = ["verifier", "run", "--home", str(home), "--key", key, "--chain", chain_address, *extra]
    return spawn_cli(args, home / "verifier.log", {"DILOCHAIN_KEYRING_PASSWORD": password})


class ChainProcess:
    """``dilochain chain start`` in a subprocess, bound to an ephemeral 127.0.0.1 port."""

    def __init__(self, home: Path, block_time: str = "200ms", log_path: Path | None = None):
        self.home = home
        self.block_time = block_time
        self.log_path = log_path or home / "chain.log"
        self.proc: subprocess.Popen | None = None
        self.address = ""

    def start(self, timeout: float = 30.0) -> str:
        """Start the process and return its gRPC address once it serves."""
        cmd = [
            sys.executable, "-m", "dilochain.cli.main", "chain", "start",
            "--home", str(self.home), "--grpc-address", "127.0.0.1:0",
            "--block-time", self.block_time,
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        found = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith(LISTENING) and not found.is_set():
                    self.address = line[len(LISTENING) :].strip()
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(timeout):
            self.kill()
            raise ChainStartError(f"the chain did not start; see {self.log_path}")
        return self.address

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ChainProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except subprocess.TimeoutExpired:
                self.kill()

"""Real chain processes on loopback ports, for the devnet command, tests and benchmarks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2 as auth_q
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2_grpc as auth_grpc

from dilochain.chain.home import genesis_path, init_home
from dilochain.chain.server import ChainStartError
from dilochain.chain.testnet import loopback_config, with_funds_and_params
from dilochain.genesis.document import GenesisDoc, load_genesis, save_genesis
from dilochain.metrics_http import METRICS_LISTENING
from dilochain.supervisor import Supervisor

LISTENING = "gRPC server listening on "
RPC_LISTENING = "CometBFT RPC listening on "
REST_LISTENING = "REST server listening on "


def init_localnet(
    home: Path,
    chain_id: str,
    accounts: dict[str, dict[str, int]],
    block_time: str = "1s",
    **param_overrides,
) -> GenesisDoc:
    """Initialise a one-validator ``home`` on free loopback ports with ``accounts`` funded;
    ``param_overrides`` patch genesis params."""
    config = loopback_config(home.name or "dilochain", block_time)
    doc = init_home(home, chain_id, overwrite=True, config=config)
    save_genesis(with_funds_and_params(doc, accounts, param_overrides), genesis_path(home))
    return load_genesis(genesis_path(home))


def rpc_call(rpc_address: str, method: str, timeout: float = 10.0, **params: object) -> dict:
    """The ``result`` of one JSON-RPC call to CometBFT; raises ``ValueError`` with CometBFT's
    error, ``OSError`` if nothing answers."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    request = urllib.request.Request(
        f"http://{rpc_address}", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        answer = json.load(reply)
    if "error" in answer:
        raise ValueError(f"CometBFT {method}: {answer['error']}")
    return answer["result"]


def state_sync_settings(servers: list[str]) -> dict:
    """``NodeConfig``'s state-sync settings for CometBFT RPC ``servers``: the latest block the
    first one knows (height and hash) is the block to trust."""
    latest = rpc_call(servers[0], "block")
    return {"state_sync_rpc": servers, "trust_height": int(latest["block"]["header"]["height"]),
            "trust_hash": latest["block_id"]["hash"]}  # fmt: skip


def rpc_status(rpc_address: str, timeout: float = 5.0) -> dict:
    """CometBFT's ``status`` result (node info, latest height and app hash)."""
    return rpc_call(rpc_address, "status", timeout)


SPAWNED: list[subprocess.Popen] = []  # every child :func:`spawn_cli` started (tests end theirs)


def spawn_cli(
    args: list[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Run ``dilochain ARGS`` as a child process, stdout and stderr appended to ``log_path``."""
    log = log_path.open("ab")
    child = subprocess.Popen(
        [sys.executable, "-m", "dilochain.cli.main", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    SPAWNED.append(child)
    return child


def spawn_node(
    home: Path, run_id: str, key: str, chain_address: str, password: str, *extra: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:  # fmt: skip
    """``dilochain node start`` for a host whose keyring is in ``home`` (``env``: more of the
    environment, e.g. :mod:`dilochain.failpoints`)."""
    args = ["node", "start", "--home", str(home), "--run", run_id, "--key", key,
            "--chain", chain_address, *extra]  # fmt: skip
    return spawn_cli(args, home / "node.log",
                     {"DILOCHAIN_KEYRING_PASSWORD": password, **(env or {})})  # fmt: skip


NODE_WAITING = "waiting for run "  # a node started with --wait-for-run, ready to register
VERIFIER_READY = "registered as a verifier"


def wait_for_logs(ready: list[tuple[subprocess.Popen, Path, str]], timeout: float = 600) -> None:
    """Wait until every (process, log, line): the log holds the line. A process that exits
    first is an error; ``timeout`` only guards against a hang."""
    deadline = time.monotonic() + timeout
    waiting = list(ready)
    while waiting:
        for proc, log, line in list(waiting):
            if log.exists() and line in log.read_text(errors="replace"):
                waiting.remove((proc, log, line))
            elif proc.poll() is not None:
                raise RuntimeError(f"{log} ended before {line!r}: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"not ready after {timeout} s: {[str(w[1]) for w in waiting]}")
        time.sleep(0.2)


def wait_until_ready(
    nodes: list[subprocess.Popen], node_homes: list[Path],
    verifiers: list[subprocess.Popen] = (), verifier_homes: list[Path] = (),
) -> None:  # fmt: skip
    """Wait until every node (started with ``--wait-for-run``) waits for its run and every
    verifier is registered and ready (:func:`wait_for_logs`)."""
    ready = [(p, h / "node.log", NODE_WAITING) for p, h in zip(nodes, node_homes, strict=True)]
    ready += [(p, h / "verifier.log", VERIFIER_READY)
              for p, h in zip(verifiers, verifier_homes, strict=True)]  # fmt: skip
    wait_for_logs(ready)


def spawn_verifier(
    home: Path, key: str, chain_address: str, password: str, *extra: str
) -> subprocess.Popen:
    """``dilochain verifier run`` for a verifier whose keyring is in ``home``."""
    args = ["verifier", "run", "--home", str(home), "--key", key, "--chain", chain_address, *extra]
    return spawn_cli(args, home / "verifier.log", {"DILOCHAIN_KEYRING_PASSWORD": password})


def metrics_url_in(log: Path) -> str:
    """The metrics URL a node or verifier logged (empty if none)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    _, found, rest = text.partition(METRICS_LISTENING)
    return "http://" + rest.split()[0] if found else ""


class ChainProcess:
    """``dilochain chain start`` (the app and its CometBFT) in a subprocess, gRPC on an
    ephemeral 127.0.0.1 port."""

    def __init__(
        self, home: Path, block_time: str | None = "200ms", log_path: Path | None = None,
        metrics_address: str = "", options: tuple[str, ...] = (),
    ):  # fmt: skip
        self.home = home
        self.block_time = block_time
        self.options = options  # more flags for `chain start`
        self.log_path = log_path or home / "chain.log"
        self.metrics_address = metrics_address  # to serve on (port 0: any)
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.rpc_address = ""
        self.rest_address = ""  # host:port of its REST server
        self.metrics_url = ""  # once started with metrics

    def start(self, timeout: float = 180.0, first_block: bool = True, wait: bool = True) -> str:
        """Start the process and return its gRPC address once it serves (and, with
        ``first_block``, once the chain has a block); without ``wait``, return at once (a
        node started again keeps its address). ``timeout`` allows a start at nice 19 beside
        busy processes, which gets a few percent of a core (the suite's second half: a bench's
        chain once took more than 60 s to serve)."""
        # Started again, it listens where it did before: its clients know that address.
        cmd = [
            sys.executable, "-m", "dilochain.cli.main", "chain", "start",
            "--home", str(self.home), "--grpc-address", self.address or "127.0.0.1:0",
            "--rest-address", self.rest_address or "127.0.0.1:0",
        ]  # fmt: skip
        if self.block_time:
            cmd += ["--block-time", self.block_time]
        if self.metrics_address:
            cmd += ["--metrics-address", self.metrics_address]
        cmd += self.options
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
                if line.startswith(RPC_LISTENING):
                    self.rpc_address = line[len(RPC_LISTENING) :].strip()
                if line.startswith(REST_LISTENING):
                    self.rest_address = line[len(REST_LISTENING) :].strip()
                if line.startswith(METRICS_LISTENING):
                    self.metrics_url = "http://" + line[len(METRICS_LISTENING) :].strip()
                if line.startswith(LISTENING) and not found.is_set():
                    self.address = line[len(LISTENING) :].strip()
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not wait:
            return self.address
        deadline = time.monotonic() + timeout
        while not found.wait(0.1):
            if self.proc.poll() is not None:  # it said why in its log: no need to wait on
                raise self._exited()
            if time.monotonic() > deadline:
                self.kill()
                raise ChainStartError(f"the chain did not start; see {self.log_path}")
        if first_block:
            self.wait_for_height(1, timeout)
        return self.address

    def _exited(self) -> ChainStartError:
        """The error for a process that exited while awaited: its last logged line (its
        one-line error) and where its log is."""
        assert self.proc is not None
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        last = lines[-1] if lines else "nothing logged"
        return ChainStartError(f"{self.home.name} exited with code {self.proc.returncode}: "
                               f"{last} (log: {self.log_path})")  # fmt: skip

    def cometbft_pid(self) -> int:
        """The pid of the CometBFT process the app started (its child)."""
        assert self.proc is not None
        pid = self.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        (child,) = [c for c in children if "cometbft" in Path(f"/proc/{c}/cmdline").read_text()]
        return int(child)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No block is made inside (CometBFT is SIGSTOPped; the app still answers queries):
        a test restarts a host without the chain moving on meanwhile."""
        pid = self.cometbft_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def height(self) -> int:
        """CometBFT's latest committed height."""
        return int(rpc_status(self.rpc_address)["sync_info"]["latest_block_height"])

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        """Block until the node has committed ``height``; returns the height reached."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                reached = self.height()
            except OSError:
                reached = 0
            if reached >= height:
                return reached
            if self.proc is not None and self.proc.poll() is not None:
                raise self._exited()
            if time.monotonic() > deadline:
                raise ChainStartError(
                    f"{self.home.name}: height {height} not reached in {timeout:.0f} s "
                    f"(at {reached}, {self._peers()} peers); see {self.log_path}"
                )
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the node's gRPC answers queries: a node serves none while its CometBFT
        says it is catching up, as a validator of a network just started may for a moment
        after its first block."""
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as channel:
            stub = auth_grpc.QueryStub(channel)
            while True:
                try:
                    stub.Params(auth_q.QueryParamsRequest(), timeout=5)
                    return
                except grpc.RpcError as err:
                    if err.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    if self.proc is not None and self.proc.poll() is not None:
                        raise self._exited() from None
                    if time.monotonic() > deadline:
                        raise ChainStartError(f"{self.home.name}: not serving queries after "
                                              f"{timeout:.0f} s ({err.details()}); see "
                                              f"{self.log_path}") from None  # fmt: skip
                    time.sleep(0.1)

    def _peers(self) -> str:
        """How many peers CometBFT has ("?" while its RPC does not answer)."""
        try:
            return str(rpc_call(self.rpc_address, "net_info", 2.0)["n_peers"])
        except (OSError, ValueError, KeyError):
            return "?"

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


def _restarted(node: ChainProcess) -> subprocess.Popen:
    node.start(wait=False)  # replaying or syncing may take long: supervision goes on meanwhile
    assert node.proc is not None
    return node.proc


class LocalNetwork:
    """Every validator home of a testnet directory, each as a :class:`ChainProcess`."""

    def __init__(
        self, homes: list[Path], block_time: str | None = None, metrics_address: str = "",
        options: tuple[str, ...] = (),
    ):  # fmt: skip
        self.nodes = [ChainProcess(home, block_time, metrics_address=metrics_address,
                                   options=options) for home in homes]  # fmt: skip

    def start(self, timeout: float = 120.0) -> list[str]:
        """Start every node, then wait for the network's first block and for every node to
        serve queries; the gRPC addresses."""
        for node in self.nodes:
            node.start(timeout, first_block=False)
        for node in self.nodes:
            node.wait_for_height(1, timeout)
        for node in self.nodes:
            node.wait_ready(timeout)
        return [node.address for node in self.nodes]

    def supervisor(self, say, restart: bool = True) -> Supervisor:
        """A :class:`~dilochain.supervisor.Supervisor` of every node: one that dies is reported
        and (with ``restart``) started again, the others going on."""
        supervisor = Supervisor(say, restart)
        for node in self.nodes:
            supervisor.watch(node.home.name, node.proc, lambda n=node: _restarted(n), node.log_path)
        return supervisor

    def stop(self) -> None:
        """Stop every node still running (SIGTERM, then SIGKILL if it lingers)."""
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(20)
                except subprocess.TimeoutExpired:
                    node.kill()

    def __enter__(self) -> LocalNetwork:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

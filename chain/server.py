"""A running chain node: the application behind its ABCI server, the gRPC server, and CometBFT.

``dilochain chain start`` runs this: it serves ABCI on an ephemeral loopback port, starts the
``cometbft`` process of the home pointed at that port, waits for CometBFT's RPC, and stops both
cleanly on a signal. If CometBFT exits on its own, the node stops with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc

from dilochain.chain import metrics
from dilochain.chain.abci import AbciHandler, AbciServer
from dilochain.chain.answer_budget import BoundedAnswers, quiet_departed_callers
from dilochain.chain.app import Application, FinalizedBlock
from dilochain.chain.call_budget import BoundedCalls
from dilochain.chain.comet_rpc import CometRpc, CometRpcError
from dilochain.chain.cometbft import cometbft_binary, die_with_parent, port_free
from dilochain.chain.grpc_errors import (
    DecodeErrorsAsInvalidArgument,
    Readiness,
    UnavailableUntilReady,
)
from dilochain.chain.grpc_services import APP_VERSION, Services, register_all
from dilochain.chain.home import db_path, listen_addresses, load_home, snapshots_path
from dilochain.chain.query_router import QueryRouter
from dilochain.chain.rest_gateway import RestGateway
from dilochain.chain.snapshots import SnapshotStore
from dilochain.chain.store import ChainStore, StoreError
from dilochain.protocol.server_options import server_options

log = logging.getLogger(__name__)
STOP_GRACE_SECONDS = 15


class ChainStartError(Exception):
    """The node could not start (bad home, address in use, CometBFT missing or failing…)."""


class ChainNode:
    """One validator node: application, ABCI server, gRPC server and a CometBFT child process."""

    def __init__(
        self, home: Path, grpc_address: str, block_time: str | None = None,
        metrics_address: str = "", rest_address: str = "", snapshot_interval: int = 0,
        snapshot_keep: int = 2, retain_blocks: int = 0,
    ):  # fmt: skip
        genesis = load_home(home)
        self.home = home
        self.binary = cometbft_binary()
        self.rpc_address, self.p2p_address = listen_addresses(home)
        try:
            self.store = ChainStore(db_path(home))
            self.app = Application(self.store, genesis)  # checks the state against its hash
        except StoreError as err:
            raise ChainStartError(str(err)) from None
        self.grpc_address = grpc_address
        self.block_time = block_time
        self.metrics_address = metrics_address  # empty: no metrics
        self.rest_address = rest_address  # empty: no REST server
        self.rest_listening = ""  # where the REST server listens, once it does
        self.snapshots = SnapshotStore(snapshots_path(home), snapshot_interval, snapshot_keep)
        self.retain_blocks = retain_blocks
        self.stopped_height = 0
        self.failure = ""

    def _cometbft_args(self, abci_socket: Path) -> list[str]:
        return [
            str(self.binary), "start", "--home", str(self.home),
            "--proxy_app", f"unix://{abci_socket}",
        ]  # fmt: skip

    @property
    def _cometbft_log(self) -> Path:
        return self.home / "cometbft.log"

    async def _watch_divergence(self, tail: _LogTail, every: float = 1.0) -> None:
        """Return (setting the failure) once CometBFT logs that this node's state differs from
        the network's: it would otherwise retry block sync forever while the node kept serving
        its own, wrong, state."""
        while True:
            await asyncio.sleep(every)
            line = tail.divergence()
            if line:
                self.failure = _diverged(line)
                return

    async def _start_cometbft(self, abci_socket: Path) -> asyncio.subprocess.Process:
        env = dict(os.environ)
        if self.block_time:
            env["CMT_CONSENSUS_TIMEOUT_COMMIT"] = self.block_time
        with self._cometbft_log.open("ab") as out:
            return await asyncio.create_subprocess_exec(
                *self._cometbft_args(abci_socket),
                stdout=out,
                stderr=out,
                env=env,
                preexec_fn=die_with_parent,
            )

    def _exited(self, code: int, tail: _LogTail) -> str:
        """Why CometBFT exited: the divergence it logged last, if any."""
        line = tail.divergence()
        return (
            _diverged(line)
            if line
            else f"cometbft exited with code {code}; see " + str(self._cometbft_log)
        )

    async def _wait_rpc(
        self, rpc: CometRpc, cometbft: asyncio.subprocess.Process, tail: _LogTail
    ) -> None:
        for _ in range(600):
            if cometbft.returncode is not None:
                raise ChainStartError(self._exited(cometbft.returncode, tail))
            with contextlib.suppress(CometRpcError):
                await rpc.status()
                return
            await asyncio.sleep(0.1)
        raise ChainStartError(f"CometBFT's RPC at {self.rpc_address} did not answer in 60 s")

    def _start_rest(self, gateway: RestGateway) -> None:
        """Start the REST gateway (when on)."""
        if not self.rest_address:
            return
        try:
            self.rest_listening = gateway.start(self.rest_address)
        except OSError as err:
            raise ChainStartError(f"cannot listen on {self.rest_address} for the REST server "
                                  f"({err.strerror or err})") from None  # fmt: skip

    async def serve(self, stop: asyncio.Event, ready: Callable[[str, str], None]) -> None:
        """Serve until ``stop`` is set or CometBFT exits; ``ready`` gets the gRPC and RPC
        addresses once both serve."""
        for name, address in (("RPC", self.rpc_address), ("P2P", self.p2p_address)):
            if not await _port_freed(address):
                self.store.close()
                raise ChainStartError(f"cannot listen on {address} for CometBFT's {name}: in use")
        rpc = CometRpc(self.rpc_address)
        router = QueryRouter(lambda: self.app.height)
        readiness = Readiness()
        quiet_departed_callers()
        server = grpc.aio.server(
            interceptors=[
                BoundedCalls(),  # outermost: it serves unary calls as request streams
                BoundedAnswers(),
                UnavailableUntilReady(readiness),
                DecodeErrorsAsInvalidArgument(),
            ],
            options=server_options(),
        )
        services = Services(self.app, rpc, readiness=readiness)
        served = register_all(server, services, self.home.name, router)
        try:
            port = server.add_insecure_port(self.grpc_address)
        except RuntimeError:
            port = 0
        if port == 0:
            self.store.close()
            raise ChainStartError(
                f"cannot listen on {self.grpc_address} (address in use or invalid)"
            )
        host = self.grpc_address.rsplit(":", 1)[0]
        gateway = RestGateway(served, f"{'127.0.0.1' if host == '0.0.0.0' else host}:{port}")
        observer = metrics.BlockObserver() if self.metrics_address else None

        def on_commit(block: FinalizedBlock) -> None:
            services.feed.committed(self.app.height)
            if observer is not None:
                observer(block)

        fatal = asyncio.Event()

        def on_fatal(error: str) -> None:
            self.failure = (f"the application cannot go on ({error}); stopping rather than "
                            "commit a state this node cannot vouch for")  # fmt: skip
            fatal.set()

        handler = AbciHandler(self.app, router.query, APP_VERSION, on_commit, on_fatal,
                              self.snapshots, self.retain_blocks)  # fmt: skip
        abci = AbciServer(handler)
        # A private folder (mode 0700) for the socket: a home's path may be longer than a unix
        # socket's name may be. It names this process, so a later node can tell it from a live
        # node's once this one was killed (SIGKILL, OOM) before it could remove it.
        _remove_stale_sockets()
        sockets = Path(tempfile.mkdtemp(prefix=f"{SOCKETS_PREFIX}{os.getpid()}-"))
        abci_socket = sockets / "abci.sock"
        await abci.start(abci_socket)
        await server.start()
        tail = _LogTail(self._cometbft_log, _size(self._cometbft_log))  # this run's lines
        cometbft = await self._start_cometbft(abci_socket)
        try:
            await self._wait_rpc(rpc, cometbft, tail)
            self._start_rest(gateway)
            log.info("chain %s at height %d", self.app.chain_id, self.app.height)
            ready(f"{host}:{port}", self.rpc_address)
            exited = asyncio.ensure_future(cometbft.wait())
            stopped = asyncio.ensure_future(stop.wait())
            failed = asyncio.ensure_future(fatal.wait())
            diverged = asyncio.ensure_future(self._watch_divergence(tail))
            watched = [asyncio.ensure_future(_watch_readiness(rpc, readiness))]
            watched += [asyncio.ensure_future(_watch_mempool(rpc))] if observer else []
            await asyncio.wait({exited, stopped, failed, diverged},
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            for task in [stopped, failed, diverged, *watched]:
                task.cancel()
            if cometbft.returncode is not None and not stop.is_set() and not self.failure:
                self.failure = self._exited(cometbft.returncode, tail)
        finally:
            await _terminate(cometbft)
            gateway.stop()
            await rpc.close()
            services.feed.close()
            await server.stop(grace=1)
            await abci.stop()
            shutil.rmtree(sockets, ignore_errors=True)
            self.stopped_height = self.app.height
            self.store.close()


# What CometBFT logs when this node's own state is not the network's: the handshake finding the
# app's hash is not the one it committed, block sync refusing a block +2/3 of the validators
# signed, or consensus committing a block this node deems invalid. (A lone "wrong
# Block.Header.AppHash" from consensus is another validator's bad proposal, prevoted nil: not
# this node's divergence.)
DIVERGENCE = re.compile(
    r"AppHash does not match|app block height .* is higher than|committed an invalid block"
    r"|CONSENSUS FAILURE|module=blocksync.*wrong Block\.Header\.AppHash"
    r"|wrong Block\.Header\.AppHash.*module=blocksync"
)


SOCKETS_PREFIX = "dilochain-abci-"


def _remove_stale_sockets() -> None:
    """Remove the socket folders of chain nodes that are gone: each names its process, and one
    whose process no longer runs was left by a node killed before it could clean up (one a
    crash otherwise, in the machine's temporary folder)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SOCKETS_PREFIX}*-*"):
        pid = folder.name.removeprefix(SOCKETS_PREFIX).split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # gone (a reused pid only keeps a stale folder a while)
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:  # another user's live process
            continue


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _LogTail:
    """The lines a log gains past an offset, read a little at a time (never from the start
    again, so a long-running node's check costs what its log grew since the last one)."""

    def __init__(self, path: Path, offset: int):
        self.path = path
        self.offset = offset
        self._partial = b""

    def divergence(self) -> str:
        """The first new complete line that says this node diverged ('' if none)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read(1 << 22)
        except OSError:
            return ""
        self.offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        text = (ln.decode("utf-8", "replace") for ln in lines)
        return next((ln.strip() for ln in text if DIVERGENCE.search(ln)), "")


def _diverged(line: str) -> str:
    return (
        f"CometBFT finds this node's state differs from the network's ({line[:300]}); it "
        "stops rather than serve it. Move chain.db away together with CometBFT's data/ "
        "folder and start the node again to sync from its peers, or restore a backup"
    )


async def _watch_readiness(rpc: CometRpc, readiness: Readiness, every: float = 0.5) -> None:
    """Keep ``readiness`` current: ready while CometBFT answers and is not catching up (a node
    started again replays and block-syncs first; its state meanwhile is old)."""
    while True:
        try:
            catching_up = (await rpc.status())["sync_info"]["catching_up"]
        except CometRpcError:
            readiness.ready, readiness.why = False, "this node's CometBFT does not answer"
        else:
            readiness.ready = not catching_up
            readiness.why = "this node is catching up with the chain" if catching_up else ""
        await asyncio.sleep(every)


async def _watch_mempool(rpc: CometRpc, every: float = 1.0) -> None:
    """Keep the mempool-size metric current."""
    while True:
        with contextlib.suppress(CometRpcError):
            metrics.MEMPOOL_TXS.set(await rpc.mempool_size())
        await asyncio.sleep(every)


async def _port_freed(address: str, patience: float = 10.0) -> bool:
    """Whether ``address`` is free, waiting a little for the CometBFT of a crashed node to
    release it."""
    for _ in range(int(patience / 0.25)):
        if port_free(address):
            return True
        await asyncio.sleep(0.25)
    return port_free(address)


async def _terminate(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()

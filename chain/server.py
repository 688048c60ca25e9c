"""A running chain node: store, application, mempool, devnet consensus and the gRPC server."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import grpc

from chain.app import Application
from chain.devnet import SoloValidator
from chain.grpc_services import Services, register_all
from chain.home import db_path, load_home
from chain.mempool import Mempool
from chain.store import ChainStore

log = logging.getLogger(__name__)


class ChainStartError(Exception):
    """The node could not start (bad home, address in use…)."""


class ChainNode:
    """One devnet node: serves gRPC (grpc.aio) and produces blocks in a thread."""

    def __init__(self, home: Path, grpc_address: str, block_time: float):
        genesis, key = load_home(home)
        self.home = home
        self.store = ChainStore(db_path(home))
        self.app = Application(self.store, genesis)
        try:
            self.app.init_chain()
        except ValueError as err:
            self.store.close()
            raise ChainStartError(f"{home}: {err}") from None
        self.lock = threading.RLock()
        self.mempool = Mempool(genesis.params.consensus.max_mempool_txs)
        self.consensus = SoloValidator(self.app, self.mempool, key, block_time, self.lock)
        self.grpc_address = grpc_address
        self.stopped_height = 0

    async def serve(self, stop: asyncio.Event, ready: Callable[[str], None]) -> None:
        """Serve until ``stop`` is set; ``ready`` gets the bound address once serving."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        register_all(server, Services(self.app, self.mempool, self.lock), self.home.name)
        try:
            port = server.add_insecure_port(self.grpc_address)
        except RuntimeError:
            port = 0
        if port == 0:
            self.store.close()
            raise ChainStartError(
                f"cannot listen on {self.grpc_address} (address in use or invalid)"
            )
        if self.app.height == 0:
            self.consensus.produce_block()  # queries always see a latest block
        await server.start()
        self.consensus.start()
        host = self.grpc_address.rsplit(":", 1)[0]
        log.info("chain %s at height %d", self.app.chain_id, self.app.height)
        ready(f"{host}:{port}")
        await stop.wait()
        self.consensus.stop()
        await server.stop(grace=1)
        self.stopped_height = self.app.height
        self.store.close()

"""A running chain node: store, application, mempool, devnet consensus and the gRPC server."""

from __future__ import annotations

import logging
import threading
from concurrent import futures
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
    """One devnet node serving gRPC on ``grpc_address`` and producing blocks."""

    def __init__(self, home: Path, grpc_address: str, block_time: float, workers: int = 16):
        genesis, key = load_home(home)
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
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers),
            options=[("grpc.so_reuseport", 0)],
        )
        register_all(self.server, Services(self.app, self.mempool, self.lock), home.name)
        self.grpc_address = grpc_address
        try:
            port = self.server.add_insecure_port(grpc_address)
        except RuntimeError:
            port = 0
        if port == 0:
            self.store.close()
            raise ChainStartError(f"cannot listen on {grpc_address} (address in use or invalid)")
        host = grpc_address.rsplit(":", 1)[0]
        self.bound_address = f"{host}:{port}"

    def start(self) -> None:
        """Serve gRPC and start producing blocks (the first one at once, so queries see a block)."""
        if self.app.height == 0:
            self.consensus.produce_block()
        self.server.start()
        self.consensus.start()
        log.info("chain %s at height %d", self.app.chain_id, self.app.height)

    def stop(self) -> None:
        """Stop producing blocks, drain gRPC, close the store."""
        self.consensus.stop()
        self.server.stop(grace=1).wait()
        self.store.close()

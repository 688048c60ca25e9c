"""Embedded single-validator consensus: produces a block every ``block_time`` seconds.

It plays CometBFT's part on a one-validator devnet: reaps the mempool in order, calls the
application's FinalizeBlock and Commit, signs and stores the block, then re-checks what is
left in the mempool against the new state. The validator key is ed25519, as in CometBFT.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import TxResponse
from cosmpy.protos.tendermint.types.types_pb2 import BlockID, Header
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from chain.app import Application, tx_failure
from chain.errors import TxError
from chain.mempool import Mempool
from chain.store import StoredBlock
from chain.tx import tx_hash

log = logging.getLogger(__name__)


def validator_address(key: Ed25519PrivateKey) -> bytes:
    """CometBFT's validator address: the first 20 bytes of sha256(public key)."""
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(public).digest()[:20]


def data_hash(txs: list[bytes]) -> bytes:
    """Hash committing to a block's txs in order."""
    h = hashlib.sha256()
    for raw in txs:
        h.update(tx_hash(raw))
    return h.digest()


class SoloValidator:
    """Drives an :class:`Application` with one block every ``block_time`` seconds."""

    def __init__(
        self,
        app: Application,
        mempool: Mempool,
        key: Ed25519PrivateKey,
        block_time: float,
        lock: threading.RLock,
    ):
        self.app = app
        self.mempool = mempool
        self.key = key
        self.block_time = block_time
        self.lock = lock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="consensus", daemon=True)
        self.last_block_seconds = 0.0

    def start(self) -> None:
        """Start producing blocks."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the block in progress, if any."""
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        next_at = time.monotonic() + self.block_time
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.block_time
            try:
                self.produce_block()
            except Exception:  # keep the devnet alive; the block is retried next tick
                log.exception("block production failed")

    def produce_block(self) -> StoredBlock:
        """Build, execute, sign and commit the next block."""
        with self.lock:
            app = self.app
            txs = self.mempool.reap(app.params.consensus.max_block_bytes)
            height = app.height + 1
            time_ns = max(time.time_ns(), app.last_block_time_ns + 1)
            started = time.perf_counter()
            finalized = app.finalize_block(height, time_ns, txs)
            last = app.store.block(height - 1)
            header = Header(
                chain_id=app.chain_id,
                height=height,
                last_block_id=BlockID(hash=last.hash if last else b""),
                data_hash=data_hash(txs),
                app_hash=finalized.app_hash,
                proposer_address=validator_address(self.key),
            )
            header.time.FromNanoseconds(time_ns)
            header_bytes = header.SerializeToString(deterministic=True)
            block_hash = hashlib.sha256(header_bytes).digest()
            block = StoredBlock(height, block_hash, header_bytes, self.key.sign(block_hash))
            app.commit(block, txs)
            self._recheck(len(txs))
            self.last_block_seconds = time.perf_counter() - started
            return block

    def _recheck(self, included: int) -> None:
        """Drop the included txs; re-admit the rest against the new check state."""
        pending = self.mempool.drain()[included:]
        for digest, raw in pending:
            result = self.app.check_tx(raw)
            if result.code == 0:
                self.mempool.add(digest, raw)
            else:
                log.debug("dropped tx %s on recheck: %s", digest.hex(), result.raw_log)


def admit(app: Application, mempool: Mempool, raw: bytes) -> TxResponse:
    """CheckTx + mempool insertion, as BroadcastTx performs them (caller holds the lock)."""
    digest = tx_hash(raw)
    try:
        mempool.check_new(digest)
    except TxError as err:
        result = tx_failure(err.code, err.log)
        result.txhash = digest.hex().upper()
        return result
    result = app.check_tx(raw)
    if result.code == 0:
        mempool.add(digest, raw)
    return result

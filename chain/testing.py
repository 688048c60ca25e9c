"""Driving the application in-process, block by block, as CometBFT would (tests, benchmarks).

:class:`InProcessChain` plays CometBFT's part without the network: an ordered mempool that
refuses duplicates, and for each block PrepareProposal, ProcessProposal, FinalizeBlock with a
deterministic header time and hash, Commit, and the recheck of what is left in the mempool.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import TxResponse

from dilochain.chain.app import Application, FinalizedBlock, tx_failure
from dilochain.chain.errors import codes
from dilochain.chain.modules.validator_set import Evidence, Vote
from dilochain.protocol.hashing import tx_hash

BLOCK_INTERVAL_NS = 1_000_000_000


@dataclass
class InProcessChain:
    """An application, a mempool in front of it, and blocks produced on demand."""

    app: Application
    mempool: OrderedDict[bytes, bytes] = field(default_factory=OrderedDict)
    last: FinalizedBlock | None = None  # the outcome of the last block

    def broadcast(self, raw: bytes) -> TxResponse:
        """CheckTx; the tx joins the mempool if it passes (as ``broadcast_tx_sync``)."""
        digest = tx_hash(raw)
        if digest in self.mempool:
            result = tx_failure(codes.TX_IN_MEMPOOL, "tx already exists in cache")
            result.txhash = digest.hex().upper()
            return result
        result = self.app.check_tx(raw)
        if result.code == 0:
            self.mempool[digest] = raw
        return result

    def block(
        self, block_hash: bytes | None = None, votes: Sequence[Vote] = (),
        evidence: Sequence[Evidence] = (),
    ) -> list[TxResponse]:  # fmt: skip
        """Propose, decide, execute and commit the next block; the results of its txs (the
        whole outcome is kept in ``last``).

        The block's hash is derived from its height and txs unless ``block_hash`` is given (a
        proposer choosing among candidate blocks); ``votes`` and ``evidence`` are what CometBFT
        would report of the last commit and of misbehaviour.
        """
        app = self.app
        limit = app.genesis.consensus_params.block.max_bytes
        txs = app.prepare_proposal(list(self.mempool.values()), limit)
        if not app.process_proposal(txs, limit):
            raise ValueError("the application rejected its own proposal")
        height = app.height + 1
        if block_hash is None:
            block_hash = hashlib.sha256(
                height.to_bytes(8, "big") + b"".join(map(tx_hash, txs))
            ).digest()
        finalized = app.finalize_block(
            height, app.last_block_time_ns + BLOCK_INTERVAL_NS, txs, block_hash,
            votes=votes, evidence=evidence,
        )  # fmt: skip
        app.commit()
        self.last = finalized
        included = {tx_hash(raw) for raw in txs}
        pending = [raw for digest, raw in self.mempool.items() if digest not in included]
        self.mempool.clear()
        for raw in pending:  # CometBFT's recheck
            if app.check_tx(raw, recheck=True).code == 0:
                self.mempool[tx_hash(raw)] = raw
        return finalized.results

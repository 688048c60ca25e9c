"""The chain node's Prometheus metrics (served by ``chain start --metrics-address``): height,
block interval, mempool size, txs by result code and block followers."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from dilochain.chain.app import FinalizedBlock
from dilochain.metrics_http import role_registry

REGISTRY = role_registry("chain")
HEIGHT = Gauge("dilochain_chain_height", "Height of the last committed block", registry=REGISTRY)
BLOCK_INTERVAL = Histogram(
    "dilochain_chain_block_interval_seconds",
    "Block time minus the previous block's time",
    buckets=(0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30),
    registry=REGISTRY,
)
MEMPOOL_TXS = Gauge("dilochain_chain_mempool_txs", "Txs waiting in CometBFT's mempool",
                    registry=REGISTRY)  # fmt: skip
TXS = Counter("dilochain_chain_txs", "Txs executed in blocks, by result code",
              labelnames=("code",), registry=REGISTRY)  # fmt: skip
FOLLOWERS = Gauge("dilochain_chain_block_followers",
                  "Clients following committed blocks (the Events.Blocks stream)",
                  registry=REGISTRY)  # fmt: skip


class BlockObserver:
    """Records each committed block in the metrics."""

    def __init__(self) -> None:
        self.last_time_ns: int | None = None

    def __call__(self, block: FinalizedBlock) -> None:
        HEIGHT.set(block.block.height)
        if self.last_time_ns is not None:
            BLOCK_INTERVAL.observe(max(0, block.block.time_ns - self.last_time_ns) / 1e9)
        self.last_time_ns = block.block.time_ns
        for result in block.results:
            TXS.labels(str(result.code)).inc()

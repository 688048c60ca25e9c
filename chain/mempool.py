"""An ordered mempool: txs leave in the order they were admitted."""

from __future__ import annotations

from collections import OrderedDict

from chain.errors import TxError, codes


class Mempool:
    """Admitted, not yet committed txs keyed by hash."""

    def __init__(self, max_txs: int):
        self.max_txs = max_txs
        self._txs: OrderedDict[bytes, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._txs)

    def check_new(self, tx_hash: bytes) -> None:
        """Raise if ``tx_hash`` may not be added (already present, or the pool is full)."""
        if tx_hash in self._txs:
            raise TxError(codes.TX_IN_MEMPOOL, "tx already exists in cache")
        if len(self._txs) >= self.max_txs:
            raise TxError(codes.MEMPOOL_FULL, f"mempool is full ({self.max_txs} txs)")

    def add(self, tx_hash: bytes, raw: bytes) -> None:
        """Append an admitted tx."""
        self._txs[tx_hash] = raw

    def reap(self, max_bytes: int) -> list[bytes]:
        """The oldest txs whose sizes add up to at most ``max_bytes``."""
        picked, size = [], 0
        for raw in self._txs.values():
            if size + len(raw) > max_bytes:
                break
            picked.append(raw)
            size += len(raw)
        return picked

    def drain(self) -> list[tuple[bytes, bytes]]:
        """Remove and return everything (for re-checking after a block)."""
        items = list(self._txs.items())
        self._txs.clear()
        return items

"""Admission for ``Simulate``: unsigned and free, so it must never crowd out block execution.

Simulations run one at a time on the node's event loop, a bounded number may wait (more are
refused at once), and after each one the gate stays closed for long enough that simulations
use at most ``share`` of the loop's time: a flood of them slows itself, never the blocks. The
pause is taken by the next simulation, not by the caller of the last: a caller that must not
wait (an ``abci_query`` holds CometBFT's query connection) is refused at once while the gate is
busy or closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class SimulateBusy(Exception):
    """Too many simulations are waiting already."""


class SimulateGate:
    """One simulation at a time, at most ``max_waiting`` queued, at most ``share`` of the loop."""

    def __init__(self, max_waiting: int = 16, share: float = 0.25):
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.max_waiting = max_waiting
        self.share = share
        self._lock = asyncio.Lock()
        self._queued = 0
        self._open_at = 0.0  # perf_counter() time from which the next simulation may run

    async def run(self, work: Callable[[], T], wait: bool = True) -> T:
        """Run ``work`` when the gate lets it; :class:`SimulateBusy` if the queue is full, or
        without ``wait`` if it cannot run at once."""
        if not wait and (self._lock.locked() or time.perf_counter() < self._open_at):
            raise SimulateBusy("a simulation is running; try again shortly")
        if self._queued >= self.max_waiting:
            raise SimulateBusy(f"{self._queued} simulations are waiting; try again shortly")
        self._queued += 1
        try:
            async with self._lock:
                # Let whatever is ready (a block to execute, a query) go first, and keep
                # simulations to at most `share` of the loop's time.
                await asyncio.sleep(max(0.0, self._open_at - time.perf_counter()))
                began = time.perf_counter()
                result = work()
                spent = time.perf_counter() - began
                self._open_at = time.perf_counter() + spent * (1 / self.share - 1)
        finally:
            self._queued -= 1
        return result

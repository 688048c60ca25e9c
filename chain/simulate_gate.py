"""Admission for ``Simulate``: unsigned and free, so it must never crowd out block execution.

Simulations run one at a time on the node's event loop, a bounded number may wait (more are
refused at once), a few of them from one caller's address, and after each one the gate stays
closed for long enough that simulations use at most ``share`` of the loop's time: a flood of
them slows itself, never the blocks, and one flooding address takes a few places in the
queue, not all of them (32 strangers' streams used to leave 2 of 24 honest simulations
admitted). The pause is taken by the next simulation, not by the caller of the last: a caller
that must not wait (an ``abci_query`` holds CometBFT's query connection) is refused at once
while the gate is busy or closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from dilochain.protocol.caller_budget import CallerBudget

T = TypeVar("T")


class SimulateBusy(Exception):
    """Too many simulations are waiting already."""


class SimulateGate:
    """One simulation at a time, at most ``max_waiting`` queued (running included) and
    ``per_caller`` of them one caller address's, at most ``share`` of the loop."""

    def __init__(self, max_waiting: int = 16, share: float = 0.25, per_caller: int = 2):
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.share = share
        self._queue = CallerBudget(max_waiting, per_caller)
        self._lock = asyncio.Lock()
        self._open_at = 0.0  # perf_counter() time from which the next simulation may run

    async def run(self, work: Callable[[], T], wait: bool = True, caller: str = "") -> T:
        """Run ``work`` when the gate lets it; :class:`SimulateBusy` if the queue, or its
        places for ``caller`` (``protocol.endpoint.caller_address``), are full, or without
        ``wait`` if it cannot run at once."""
        if not wait and (self._lock.locked() or time.perf_counter() < self._open_at):
            raise SimulateBusy("a simulation is running; try again shortly")
        if not self._queue.take(caller):
            raise SimulateBusy(f"{self._queue.held} simulations are waiting, as many as this "
                               "node or your address may have; try again shortly")  # fmt: skip
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
            self._queue.give(caller)
        return result

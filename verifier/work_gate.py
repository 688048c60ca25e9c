"""A verifier's heavy work (a replay, a screen) shared between its runs: at most ``capacity`` at
once, and while more wait, the one whose window closes first goes first (earliest deadline
first). Each run screens and replays on threads of its own; the gate is what bounds the
models in memory together and keeps a run with many or slow jobs from taking every slot ahead
of another run's earlier deadline."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class WorkGate:
    """Slots for heavy work, given out by deadline (a block height), then by arrival."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("a work gate needs at least one slot")
        self.capacity = capacity
        self._changed = threading.Condition()
        self._running = 0
        self._waiting: list[tuple[int, int]] = []  # a heap of (deadline, arrival)
        self._arrivals = itertools.count()

    @contextmanager
    def slot(self, deadline: int) -> Iterator[None]:
        """Hold a slot for the work inside; wait while every slot is taken or work with an
        earlier deadline (or as early, arrived first) waits for one."""
        entry = (deadline, next(self._arrivals))
        with self._changed:
            heapq.heappush(self._waiting, entry)
            while self._running >= self.capacity or self._waiting[0] != entry:
                self._changed.wait()
            heapq.heappop(self._waiting)
            self._running += 1
            self._changed.notify_all()  # the next in line may find a slot too
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

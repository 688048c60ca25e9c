"""A verifier's heavy work shared between its runs: at most ``capacity`` jobs at once, and while
more wait, the one whose window closes first goes first (earliest deadline first), then the one
that came first. Each run screens and replays on threads of its own; a gate for replays and one
for screens bound the models in memory together and keep a run with many or slow jobs from
taking every slot ahead of another run's earlier deadline. Work whose window has closed by its
turn is not done at all."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class WindowClosed(Exception):
    """The work's deadline passed before it had a slot: its result could not land."""


class WorkGate:
    """Slots for heavy work, given out by deadline (the last block its result can land in),
    then by arrival."""

    def __init__(self, capacity: int, height: Callable[[], int]):
        if capacity < 1:
            raise ValueError("a work gate needs at least one slot")
        self.capacity = capacity
        self.height = height  # the chain's committed height
        self._changed = threading.Condition()
        self._running = 0
        self._waiting: list[tuple[int, int]] = []  # a heap of (deadline, arrival)
        self._arrivals = itertools.count()
        self._closed = False

    def close(self) -> None:
        """Give no slot any more (the verifier is stopping): work waiting for one, and work
        that comes later, raises :class:`WindowClosed`; work in a slot finishes."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @contextmanager
    def slot(self, deadline: int) -> Iterator[None]:
        """Hold a slot for the work inside; wait while every slot is taken or work with an
        earlier deadline (or as early, arrived first) waits for one. Raises
        :class:`WindowClosed`, holding nothing, if the next block is past ``deadline`` once
        it is this work's turn, or the gate is closed."""
        entry = (deadline, next(self._arrivals))
        with self._changed:
            heapq.heappush(self._waiting, entry)
            try:
                while not self._closed and (
                    self._running >= self.capacity or self._waiting[0] != entry
                ):
                    self._changed.wait()
                if self._closed:
                    raise WindowClosed("the verifier is stopping")
            except BaseException:  # never leave an entry at the head for the others to wait on
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
                self._changed.notify_all()
                raise
            heapq.heappop(self._waiting)
            self._running += 1
            self._changed.notify_all()  # the next in line may find a slot too
        try:
            if self.height() + 1 > deadline:
                raise WindowClosed(f"block {deadline} has passed")
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

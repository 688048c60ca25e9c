"""Units (bytes, requests) held at once for callers, in all and per caller address: what a node
gives strangers is bounded, and no one address can take all of it."""

from __future__ import annotations

import threading


class CallerBudget:
    """Units (bytes, requests) held at once, at most ``total`` in all and ``per_caller`` for one
    caller address (``protocol.endpoint.caller_address``; "", this machine's own processes,
    which relay strangers' REST calls, is bounded by ``total`` alone). Thread-safe and never
    waits."""

    def __init__(self, total: int, per_caller: int):
        self.total, self.per_caller = total, per_caller
        self._lock = threading.Lock()
        self.held = 0
        self._by_caller: dict[str, int] = {}

    def room(self, who: str, units: int = 1) -> bool:
        """Whether :meth:`take` of ``units`` for ``who`` would hold them now."""
        with self._lock:
            return self._fits(who, units)

    def take(self, who: str, units: int = 1) -> bool:
        """Hold ``units`` for ``who`` if both bounds allow it; whether it did."""
        with self._lock:
            if not self._fits(who, units):
                return False
            self.held += units
            self._by_caller[who] = self._by_caller.get(who, 0) + units
            return True

    def _fits(self, who: str, units: int) -> bool:
        mine = self._by_caller.get(who, 0)
        return self.held + units <= self.total and not (who and mine + units > self.per_caller)

    def give(self, who: str, units: int = 1) -> None:
        """Release ``units`` that :meth:`take` held for ``who``."""
        with self._lock:
            self.held -= units
            left = self._by_caller[who] - units
            if left:
                self._by_caller[who] = left
            else:
                del self._by_caller[who]

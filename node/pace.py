"""This host's pace against the chain's: how many blocks one of its rounds takes, so that a
host running late skips a round it cannot finish in its window instead of missing it (and,
having started every round late, missing the next ones as well)."""

from __future__ import annotations

import threading
import time
from collections import deque


class Pace:
    """Seconds per block over the last ``keep`` heights observed, and the seconds of this
    host's last round (from its start to its commit handed over)."""

    def __init__(self, keep: int = 64):
        self._heights: deque[tuple[int, float]] = deque(maxlen=keep)
        self._lock = threading.Lock()  # the loop, the committer and the revealer observe
        self.round_seconds: float | None = None

    def observe(self, height: int, now: float | None = None) -> None:
        """Note that the chain was at ``height`` at ``now`` (monotonic seconds)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._heights or height > self._heights[-1][0]:
                self._heights.append((height, now))

    def block_seconds(self) -> float | None:
        """Seconds per block lately (None before two heights were seen)."""
        with self._lock:
            if len(self._heights) < 2:
                return None
            (h0, t0), (h1, t1) = self._heights[0], self._heights[-1]
        return (t1 - t0) / (h1 - h0)

    def fits(self, height: int, window_end: int) -> bool:
        """Whether a round started after block ``height`` is committed by ``window_end`` at
        this pace, with a block to spare for the commit's inclusion (True while unknown)."""
        block = self.block_seconds()
        if block is None or self.round_seconds is None or block <= 0:
            return True
        return height + self.round_seconds / block + 1 <= window_end

    def skip(self, height: int, earliest: int, window_end: int) -> bool:
        """Whether to skip a round whose window ends at ``window_end``: at this pace, started
        after block ``height`` it misses its window, started after ``earliest`` (when its roster
        was drawn) it would not have — so a host that is late, not slow, catches up on the next
        round. A host too slow for any window does not skip (its pace may change), unless the
        window has closed: no pace lands a commit in it."""
        if height + 1 > window_end:
            return True
        return not self.fits(height, window_end) and self.fits(earliest, window_end)

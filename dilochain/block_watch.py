"""Follow the chain's committed height by the node's ``Events.Blocks`` stream, so a client's
loops wait for the next block instead of asking for it every fraction of a second.

One thread per client keeps the stream open (and opens it again, at the node its channel
fails over to, after an outage; after a silence, at a node with newer blocks if one of the
channel's nodes has them); loops call :meth:`BlockWatch.wait_past`. While no stream is
open, a wait lasts the loop's old poll interval, so a chain node without the stream, or one
that is down, is polled as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import grpc

from dilochain.endpoints import FailoverChannel
from dilochain.protocol.pb.poc.v1 import events_pb2 as ev
from dilochain.protocol.pb.poc.v1 import events_pb2_grpc as ev_grpc

log = logging.getLogger(__name__)

LIVE_WAIT_SECONDS = 2.0  # the longest wait with a stream open: a halted chain still wakes loops
RECONNECT_SECONDS = 1.0  # pause before opening a stream again after it ended
STOP_CHECK_SECONDS = 0.25  # how often a wait looks at its stop event
# A stream is stale once no block came for twice its usual interval (and this margin): its
# node fell behind or stopped, or the connection died without a word. Waits then last the poll
# interval again (a 3-block window at 0.2 s blocks is 0.6 s), and a stream stale this long
# (or five intervals) is opened again, at the node the channel fails over to.
STALE_MARGIN_SECONDS = 0.25
REOPEN_STALE_SECONDS = 5.0


class BlockWatch:
    """The last committed height the chain pushed, and waits for a newer one."""

    def __init__(self, channel: grpc.Channel):
        self._channel = channel
        self._changed = threading.Condition()
        self._closed = threading.Event()
        self._call = None
        self.height = 0
        self.live = False  # whether a stream is open now
        self._pushed_at = 0.0  # when the last block came (monotonic)
        self._stale = False  # the stream was cancelled for its silence
        self._interval: float | None = None  # the usual seconds between blocks (a moving mean)
        self._thread = threading.Thread(target=self._follow, name="block-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop following (the stream is cancelled; waits fall back to their poll interval)."""
        self._closed.set()
        call = self._call
        if call is not None:
            call.cancel()
        self._thread.join(timeout=5)

    def _follow(self) -> None:
        while not self._closed.is_set():
            # A new stub each time: the channel's streams go to its current node. The stream
            # starts with that node's height.
            try:
                call = ev_grpc.EventsStub(self._channel).Blocks(ev.BlocksRequest())
            except NotImplementedError:  # a channel without streams (CometBFT's RPC): poll
                log.info("no block stream through this chain connection; polling")
                return
            self._call = call
            if self._closed.is_set():  # closed while it was opened: close() may not see it
                call.cancel()
            try:
                for block in call:
                    self._pushed(block.height)
            except grpc.RpcError as err:
                if not self._closed.is_set() and err.code() != grpc.StatusCode.UNAVAILABLE:
                    log.debug("block stream ended: %s", err.code().name)
            with self._changed:
                self.live = False
                self._changed.notify_all()
            if self._stale and isinstance(self._channel, FailoverChannel):
                self._channel.move_ahead(self.height)  # its node may be frozen, not the chain
            self._stale = False
            self._closed.wait(RECONNECT_SECONDS)

    def _pushed(self, height: int) -> None:
        now = time.monotonic()
        with self._changed:
            if self.live and height > self.height:
                gap = (now - self._pushed_at) / (height - self.height)
                self._interval = gap if self._interval is None else 0.8 * self._interval + 0.2 * gap
            self.height, self.live, self._pushed_at = height, True, now
            self._changed.notify_all()

    def fresh(self) -> bool:
        """Whether a stream is open and its blocks come at their usual pace."""
        quiet = time.monotonic() - self._pushed_at
        usual = LIVE_WAIT_SECONDS if self._interval is None else 2 * self._interval
        return self.live and quiet <= usual + STALE_MARGIN_SECONDS

    def _reopen_if_stale(self) -> None:
        quiet = time.monotonic() - self._pushed_at
        if self.live and quiet > max(REOPEN_STALE_SECONDS, 5 * (self._interval or 0)):
            call = self._call
            if call is not None:
                log.info("block stream silent for %.1f s; opening it again", quiet)
                self._stale = True
                call.cancel()

    def passes(self, stop: threading.Event, poll: float) -> Iterator[None]:
        """A loop's passes until ``stop``: one at once, then one after each block past the
        height this watch knew before the last (a query of the pass may go to another node
        than the stream's, so not the height it read); see :meth:`wait_past`."""
        while not stop.is_set():
            seen = self.height
            yield
            self.wait_past(seen, stop, poll)

    def wait_past(self, height: int, stop: threading.Event, poll: float) -> None:
        """Return once a block past ``height`` is pushed, or ``stop`` is set, or no block came
        for a while: ``LIVE_WAIT_SECONDS`` with a fresh stream, ``poll`` seconds without one."""
        start = time.monotonic()
        with self._changed:
            while self.height <= height and not stop.is_set():
                limit = LIVE_WAIT_SECONDS if self.fresh() else poll
                remaining = start + limit - time.monotonic()
                if remaining <= 0:
                    self._reopen_if_stale()
                    return
                self._changed.wait(min(remaining, STOP_CHECK_SECONDS))

"""``dilochain.poc.v1.Events``: committed heights pushed to followers (hosts, verifiers), so
they wait for the next block instead of polling the chain for it.

Runs on the event loop that serves ABCI, told of each commit by the ABCI handler after the
state is committed: a follower woken by height h reads h's state with its next query.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc

from dilochain.chain import metrics
from dilochain.chain.grpc_errors import Readiness
from dilochain.protocol.endpoint import caller_address
from dilochain.protocol.pb.poc.v1 import events_pb2 as ev
from dilochain.protocol.pb.poc.v1 import events_pb2_grpc as ev_grpc

MAX_FOLLOWERS = 4096  # streams one node serves at once; more are RESOURCE_EXHAUSTED
MAX_FOLLOWERS_PER_PEER = 16  # from one address (this machine's own processes are not counted)


class FeedFull(Exception):
    """Every follower slot of the node, or of the address asking, is taken."""


class BlockFeed:
    """The last committed height and a wake-up for everyone waiting past it."""

    def __init__(self, height: int, limit: int = MAX_FOLLOWERS,
                 per_peer: int = MAX_FOLLOWERS_PER_PEER):  # fmt: skip
        self.height = height
        self.limit = limit
        self.per_peer = per_peer
        self.followers = 0
        self.by_peer: Counter[str] = Counter()
        self.closed = False
        self._changed = asyncio.Event()

    def committed(self, height: int) -> None:
        """Record a commit and wake every follower waiting for a block past the last one."""
        self.height = height
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        """End every stream (the node is stopping: a server's grace period would otherwise
        wait for streams that never end)."""
        self.closed = True
        self._changed.set()

    async def after(self, height: int) -> int | None:
        """The committed height, once it is past ``height`` (the newest, whatever it skips);
        None once the feed is closed."""
        while self.height <= height and not self.closed:
            await self._changed.wait()
        return None if self.closed else self.height

    def join(self, peer: str) -> None:
        """Take a follower slot for ``peer`` (an address; "" for this machine's own processes,
        which only the node-wide limit applies to); :class:`FeedFull` when none is left."""
        if self.followers >= self.limit:
            raise FeedFull(f"this node already serves {self.limit} block streams")
        if peer and self.by_peer[peer] >= self.per_peer:
            raise FeedFull(f"{peer} already has {self.per_peer} block streams")
        self.followers += 1
        self.by_peer[peer] += 1
        metrics.FOLLOWERS.set(self.followers)

    def leave(self, peer: str) -> None:
        """Give ``peer``'s follower slot back."""
        self.followers -= 1
        self.by_peer[peer] -= 1
        if not self.by_peer[peer]:
            del self.by_peer[peer]
        metrics.FOLLOWERS.set(self.followers)


class EventsService(ev_grpc.EventsServicer):
    """The ``Blocks`` stream over a :class:`BlockFeed`. A node catching up refuses streams
    (UNAVAILABLE, as its queries) and ends those it has: blocks it replays by the hundred would
    only wake followers into queries it refuses, and a follower whose stream goes quiet polls."""

    def __init__(self, feed: BlockFeed, readiness: Readiness):
        self.feed = feed
        self.readiness = readiness

    async def Blocks(self, request: ev.BlocksRequest, context: grpc.aio.ServicerContext):
        if not self.readiness.ready:
            await context.abort(grpc.StatusCode.UNAVAILABLE, self.readiness.why)
        peer = caller_address(context.peer() or "")
        try:
            self.feed.join(peer)
        except FeedFull as err:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
        try:
            height: int | None = request.after_height
            while (height := await self.feed.after(height)) is not None:
                if not self.readiness.ready:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, self.readiness.why)
                yield ev.BlocksResponse(height=height)
        finally:
            self.feed.leave(peer)

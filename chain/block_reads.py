"""Blocks read for anyone who asks (``GetBlockByHeight``, ``GetLatestBlock``, the REST gateway's
blocks), bounded: a block is up to the block size limit (tens of MB of CometBFT's JSON to parse
and decode), so at most ``RUNNING`` are read at once and ``WAITING`` more wait; anyone past
that is told the node is busy. A read goes on to its end when its caller hangs up (its slot
held until then, its block kept), callers of one height share one read, and the last
``CACHED`` blocks read are kept (a committed block never changes)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from cosmpy.protos.tendermint.types.block_pb2 import Block
from cosmpy.protos.tendermint.types.types_pb2 import BlockID

RUNNING = 2
WAITING = 8
CACHED = 4

Read = tuple[BlockID, Block]


class Busy(Exception):
    """More block reads are under way or waiting than a node takes at once."""


class BlockReads:
    """Committed blocks by height through ``fetch`` (CometBFT's RPC), bounded and cached."""

    def __init__(self, fetch: Callable[[int], Awaitable[Read]]):
        self._fetch = fetch
        self._slots = asyncio.Semaphore(RUNNING)
        self._reading: dict[int, asyncio.Task[Read]] = {}  # under way or waiting for a slot
        self._cache: OrderedDict[int, Read] = OrderedDict()

    async def get(self, height: int) -> Read:
        """Block ``height``; raises :class:`Busy`, or what ``fetch`` raises."""
        if (found := self._cache.get(height)) is not None:
            self._cache.move_to_end(height)
            return found
        task = self._reading.get(height)
        if task is None:
            if len(self._reading) >= RUNNING + WAITING:
                raise Busy(f"this node is reading {len(self._reading)} blocks already; ask "
                           "again shortly")  # fmt: skip
            task = self._reading[height] = asyncio.ensure_future(self._read(height))
            task.add_done_callback(lambda done: self._done(height, done))
        return await asyncio.shield(task)  # a caller that hangs up leaves the read going

    async def _read(self, height: int) -> Read:
        async with self._slots:
            found = await self._fetch(height)
        self._cache[height] = found
        while len(self._cache) > CACHED:
            self._cache.popitem(last=False)
        return found

    def _done(self, height: int, task: asyncio.Task[Read]) -> None:
        del self._reading[height]
        if not task.cancelled():
            task.exception()  # retrieved: a read nobody waits for any more fails quietly

"""Blocks and txs read for anyone who asks (``GetBlockByHeight``, ``GetLatestBlock``, ``GetTx``,
the REST gateway's), bounded: a block is up to the block size limit (tens of MB of CometBFT's
JSON to parse and decode), a tx up to a MB, so at most ``RUNNING`` reads of a kind run at once
and ``WAITING`` more wait; anyone past that is told the node is busy. A read goes on to its end
when its caller hangs up (its slot held until then, its result kept), callers of one key share
one read, and the last ``CACHED`` results are kept (a committed block or tx never changes)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

RUNNING = 2
WAITING = 8
CACHED = 4

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Busy(Exception):
    """More reads are under way or waiting than a node takes at once."""


class BoundedReads(Generic[K, V]):
    """Committed blocks (by height) or txs (by hash) through ``fetch`` (CometBFT's RPC),
    bounded and cached."""

    def __init__(self, fetch: Callable[[K], Awaitable[V]], what: str = "blocks"):
        self._fetch, self._what = fetch, what
        self._slots = asyncio.Semaphore(RUNNING)
        self._reading: dict[K, asyncio.Task[V]] = {}  # under way or waiting for a slot
        self._cache: OrderedDict[K, V] = OrderedDict()

    async def get(self, key: K) -> V:
        """The result for ``key`` (a height, a tx hash); raises :class:`Busy`, or what
        ``fetch`` raises."""
        if (found := self._cache.get(key)) is not None:
            self._cache.move_to_end(key)
            return found
        task = self._reading.get(key)
        if task is None:
            if len(self._reading) >= RUNNING + WAITING:
                raise Busy(f"this node is reading {len(self._reading)} {self._what} already; "
                           "ask again shortly")  # fmt: skip
            task = self._reading[key] = asyncio.ensure_future(self._read(key))
            task.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(task)  # a caller that hangs up leaves the read going

    async def _read(self, key: K) -> V:
        async with self._slots:
            found = await self._fetch(key)
        self._cache[key] = found
        while len(self._cache) > CACHED:
            self._cache.popitem(last=False)
        return found

    def _done(self, key: K, task: asyncio.Task[V]) -> None:
        del self._reading[key]
        if not task.cancelled():
            task.exception()  # retrieved: a read nobody waits for any more fails quietly

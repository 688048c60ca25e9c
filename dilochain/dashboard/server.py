"""The dashboard's HTTP server: static files (no build step) and one JSON endpoint,
``/api/view``, with the view ``dilochain status`` prints (:func:`dilochain.chain_view.chain_view`).

It runs on an event loop of its own in a background thread, so ``devnet up`` can serve it
beside its network. The chain view is read by one reader at a time, at most every
``refresh_seconds`` whatever the number of open pages; a page waits at most
:data:`WAIT_SECONDS` for it. Whatever the chain client raises (the chain is down, restarting,
answers nonsense) is an answer of its own: 503 with ``{"error": "chain unreachable at …;
retrying"}``, logged once per outage; the page keeps its last view, marked stale, and asks
again."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import grpc
from aiohttp import web

from dilochain.chain_view import chain_view
from dilochain.client import connect
from dilochain.endpoints import shown
from dilochain.poc_client import PocClient

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
WAIT_SECONDS = 5.0  # the longest a page waits for the chain view before hearing "unreachable"
# The dashboard only queries: its client never signs, so it need not ask the chain its id
# (which would fail while the chain is down); the view reads the id from the latest block.
QUERY_ONLY_CHAIN_ID = "query-only"


class DashboardError(Exception):
    """The dashboard cannot listen where asked."""


class ViewReader(Protocol):
    """Where the dashboard reads its view from."""

    addresses: Sequence[str]

    def read(self) -> dict:
        """The chain view now; raises whatever its client raises when it cannot."""

    def close(self) -> None:
        """Release the connection."""


class ChainReader:
    """Reads the view from the chain nodes at ``addresses`` (their gRPC addresses). It asks the
    chain nothing until :meth:`read`, so the dashboard starts while the chain is down."""

    def __init__(self, addresses: str | Sequence[str]):
        self.poc = PocClient(addresses)
        self.addresses = self.poc.addresses
        self.client = connect(self.addresses, chain_id=QUERY_ONLY_CHAIN_ID)

    def read(self) -> dict:
        """The chain view now."""
        return chain_view(self.client, self.poc)

    def close(self) -> None:
        """Close the chain connection."""
        self.poc.close()


def unreachable(addresses: Sequence[str], cause: str) -> str:
    """What the page says when reading the view failed for ``cause``."""
    return f"chain unreachable at {shown(addresses)} ({cause}); retrying"


def cause_of(err: BaseException) -> str:
    """A read's failure in a few words: the gRPC code, else the exception."""
    if isinstance(err, grpc.RpcError):
        return err.code().name
    return f"{type(err).__name__}: {str(err)[:160]}"


class Dashboard:
    """Serves the page for the chain at ``chain_addresses`` (its nodes' gRPC addresses; or
    whatever ``reader`` reads) on ``listen`` (host:port; port 0: any free one) until
    :meth:`stop`. While no node answers, the page says so and keeps asking."""

    def __init__(
        self, chain_addresses: str | Sequence[str], listen: str, refresh_seconds: float = 0.5,
        reader: ViewReader | None = None,
    ):  # fmt: skip
        self.reader = reader or ChainReader(chain_addresses)
        self.listen = listen
        self.refresh_seconds = refresh_seconds
        self.address = ""
        self._cached: tuple[float, dict | str] | None = None  # (when, view or error)
        self._pending: asyncio.Future | None = None  # the read in flight
        self._down = False  # whether the last read failed (an outage was logged)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dashboard",
                                        daemon=True)  # fmt: skip
        self._runner: web.AppRunner | None = None

    def _read(self) -> dict | str:
        """The view, or what the page says instead; logs the first failure of an outage."""
        try:
            view = self.reader.read()
        except Exception as err:  # every failure of the chain client is an outage to show
            error = unreachable(self.reader.addresses, cause_of(err))
            if not self._down:
                log.warning("dashboard: %s", error)
            self._down = True
            return error
        self._down = False
        return view

    def _store(self, read: asyncio.Future) -> None:
        self._cached = (time.monotonic(), read.result())
        self._pending = None

    async def _latest(self) -> dict | str:
        """The cached outcome if fresh, else the next read's, waiting at most
        :data:`WAIT_SECONDS` for it (one read at a time, whatever the number of pages)."""
        if self._cached is not None and time.monotonic() - self._cached[0] < self.refresh_seconds:
            return self._cached[1]
        if self._pending is None:
            self._pending = asyncio.get_running_loop().run_in_executor(None, self._read)
            self._pending.add_done_callback(self._store)
        try:
            return await asyncio.wait_for(asyncio.shield(self._pending), WAIT_SECONDS)
        except TimeoutError:
            return unreachable(self.reader.addresses, f"no answer in {WAIT_SECONDS:g} s")

    async def _api_view(self, _request: web.Request) -> web.Response:
        outcome = await self._latest()
        if isinstance(outcome, str):
            return web.json_response({"error": outcome}, status=503)
        return web.json_response(outcome)

    async def _index(self, _request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def _start(self) -> str:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/api/view", self._api_view)
        app.router.add_static("/static/", STATIC)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, _, port = self.listen.rpartition(":")
        site = web.TCPSite(self._runner, host, int(port))
        await site.start()
        bound = self._runner.addresses[0]
        return f"{host}:{bound[1]}"

    def start(self) -> str:
        """Start serving; returns the page's address (``http://`` + it)."""
        self._thread.start()
        try:
            self.address = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        except (OSError, ValueError) as err:
            self.stop()
            raise DashboardError(f"cannot serve the dashboard on {self.listen}: {err}") from None
        return self.address

    def stop(self) -> None:
        """Stop serving and close the chain connection."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self.reader.close()

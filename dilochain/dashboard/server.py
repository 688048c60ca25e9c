"""The dashboard's HTTP server: static files (no build step) and one JSON endpoint,
``/api/view``, with the view ``dilochain status`` prints (:func:`dilochain.chain_view.chain_view`).

It runs on an event loop of its own in a background thread, so ``devnet up`` can serve it
beside its network; the chain view is read at most every ``refresh_seconds`` whatever the number
of open pages."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from aiohttp import web

from dilochain.chain_view import chain_view
from dilochain.client import connect
from dilochain.endpoints import shown
from dilochain.poc_client import PocClient

STATIC = Path(__file__).parent / "static"


class DashboardError(Exception):
    """The dashboard cannot listen where asked."""


class Dashboard:
    """Serves the page for the chain at ``chain_addresses`` (its nodes' gRPC addresses) on
    ``listen`` (host:port; port 0: any free one) until :meth:`stop`. While no node answers,
    the page says so and keeps asking."""

    def __init__(
        self, chain_addresses: str | Sequence[str], listen: str, refresh_seconds: float = 0.5
    ):
        self.client = connect(chain_addresses)
        self.poc = PocClient(chain_addresses)
        self.listen = listen
        self.refresh_seconds = refresh_seconds
        self.address = ""
        self._cached: tuple[float, dict] | None = None
        self._view_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dashboard",
                                        daemon=True)  # fmt: skip
        self._runner: web.AppRunner | None = None

    def _view(self) -> dict:
        with self._view_lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.refresh_seconds:
                self._cached = (now, chain_view(self.client, self.poc))
            return self._cached[1]

    async def _api_view(self, _request: web.Request) -> web.Response:
        try:
            view = await asyncio.get_running_loop().run_in_executor(None, self._view)
        except grpc.RpcError as err:
            nodes = shown(self.poc.addresses)
            error = f"chain unreachable at {nodes} ({err.code().name}); retrying"
            return web.json_response({"error": error}, status=503)
        return web.json_response(view)

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
        self.poc.close()

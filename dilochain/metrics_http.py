"""Prometheus metrics over HTTP for every long-running process (node, verifier, chain): one
listen-address type for their configs and one way to serve the process's registry."""

from __future__ import annotations

import logging
from typing import Annotated

from prometheus_client import start_http_server
from pydantic import AfterValidator

log = logging.getLogger(__name__)
METRICS_LISTENING = "metrics at http://"  # the line a process logs once it serves metrics


def _listen_address(text: str) -> str:
    if text == "":
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not host:port (or empty for no metrics)")
    return text


class MetricsError(Exception):
    """The metrics address cannot be served (in use, not local…)."""


MetricsAddress = Annotated[str, AfterValidator(_listen_address)]


class MetricsServer:
    """The process's metrics, served at ``http://ADDRESS/metrics`` until :meth:`close`."""

    def __init__(self, address: str):
        host, _, port = address.rpartition(":")
        try:
            self._server, self._thread = start_http_server(int(port), addr=host)
        except OSError as err:
            raise MetricsError(f"cannot serve metrics on {address}: {err.strerror}") from None
        self.address = f"{host}:{self._server.server_port}"
        log.info("%s%s/metrics", METRICS_LISTENING, self.address)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(address: str) -> MetricsServer | None:
    """Serve metrics at ``address`` (None for an empty address: metrics off)."""
    return MetricsServer(address) if address else None

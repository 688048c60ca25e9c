"""Prometheus metrics over HTTP for every long-running process (node, verifier, chain): one
listen-address type for their configs, one registry per role (so a host never exports the
chain's gauges at zero because the CLI imported the chain's module), one way to serve it."""

from __future__ import annotations

import logging
import urllib.request
from typing import TYPE_CHECKING, Annotated

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from pydantic import AfterValidator

if TYPE_CHECKING:
    from dilochain.poc_client import PocClient

log = logging.getLogger(__name__)
METRICS_LISTENING = "metrics at http://"  # the line a process logs once it serves metrics


def _listen_address(text: str) -> str:
    if text == "":
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not host:port (or empty for none)")
    return text


def role_registry(role: str, *shared: Collector) -> CollectorRegistry:
    """The registry a ``role`` (node, verifier, chain) serves: its own metrics register into
    it; ``shared`` collectors (artifact bytes, rewards claimed) are added; and every role
    exports ``dilochain_build_info{version,role}`` and the process's CPU and memory."""
    from dilochain import __version__

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    info = Gauge("dilochain_build_info", "The dilochain release this process runs",
                 ("version", "role"), registry=registry)  # fmt: skip
    info.labels(__version__, role).set(1)
    for collector in shared:
        registry.register(collector)
    return registry


def set_standing(poc: PocClient, address: str, collateral: Gauge, slashed: Gauge) -> None:
    """Set a role's ``collateral`` and ``slashed`` gauges to what the chain says of
    ``address``: its bonded collateral, and all that was ever slashed from it."""
    collateral.set(int(poc.collateral(address=address).bonded))
    slashed.set(sum(int(s.amount) for s in poc.slashes(address)))


class MetricsError(Exception):
    """The metrics address cannot be served (in use, not local…)."""


MetricsAddress = Annotated[str, AfterValidator(_listen_address)]


class MetricsServer:
    """The process's metrics, served at ``http://ADDRESS/metrics`` until :meth:`close`."""

    def __init__(self, address: str, registry: CollectorRegistry):
        host, _, port = address.rpartition(":")
        try:
            self._server, self._thread = start_http_server(int(port), addr=host,
                                                           registry=registry)  # fmt: skip
        except OSError as err:
            raise MetricsError(f"cannot serve metrics on {address}: {err.strerror}") from None
        self.address = f"{host}:{self._server.server_port}"
        log.info("%s%s/metrics", METRICS_LISTENING, self.address)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(address: str, registry: CollectorRegistry) -> MetricsServer | None:
    """Serve ``registry`` at ``address`` (None for an empty address: metrics off)."""
    return MetricsServer(address, registry) if address else None


def scrape(url: str, timeout: float = 5.0) -> dict[str, float]:
    """Every sample of the metrics page at ``url``, summed by sample name (OSError when it
    does not answer)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out

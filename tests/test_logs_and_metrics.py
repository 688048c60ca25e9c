"""One logging setup (text or JSON lines) and the Prometheus metrics every process serves."""

from __future__ import annotations

import json
import logging
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import TypeAdapter, ValidationError

from dilochain.chain import metrics as chain_metrics
from dilochain.chain.app import FinalizedBlock
from dilochain.chain.store import StoredBlock
from dilochain.logs import setup_logging
from dilochain.metrics_http import MetricsAddress, MetricsError, MetricsServer, serve_metrics
from dilochain.node import metrics as node_metrics


def test_json_logs_are_one_object_per_line(capsys):
    root = logging.getLogger()
    before = list(root.handlers)  # pytest's, and ours if an earlier test ran `main`
    try:
        setup_logging("json")
        setup_logging("json")  # a second setup replaces the first, keeps others' handlers
        added = [h for h in root.handlers if h not in before]
        foreign = [h for h in before if not isinstance(h, type(added[0]))]
        assert len(added) == 1 and all(h in root.handlers for h in foreign)
        assert sum(isinstance(h, type(added[0])) for h in root.handlers) == 1
        logging.getLogger("dilochain.x").warning("tx %s: code %d", "AB12", 5)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("dilochain.y").exception("failed")
        lines = capsys.readouterr().err.strip().splitlines()
        first, second = json.loads(lines[0]), json.loads("\n".join(lines[1:]))
        assert first["level"] == "warning" and first["logger"] == "dilochain.x"
        assert first["message"] == "tx AB12: code 5" and first["time"].endswith("+00:00")
        assert second["message"] == "failed" and "ValueError: boom" in second["exception"]
        setup_logging("text")
        logging.getLogger("dilochain.z").info("plain")
        assert capsys.readouterr().err.rstrip().endswith(" INFO plain")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in before:
            root.addHandler(handler)


@pytest.mark.parametrize("good", ["", "127.0.0.1:0", "127.0.0.1:9464", "localhost:65535"])
def test_metrics_addresses(good):
    assert TypeAdapter(MetricsAddress).validate_python(good) == good


@pytest.mark.parametrize("bad", ["9464", ":9464", "127.0.0.1:", "127.0.0.1:http", "h:70000"])
def test_bad_metrics_addresses(bad):
    with pytest.raises(ValidationError, match="not host:port"):
        TypeAdapter(MetricsAddress).validate_python(bad)


def scrape(address: str, labelled: bool = False) -> dict:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        families = text_string_to_metric_families(response.read().decode())
    if labelled:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families
                for s in f.samples}  # fmt: skip
    return {s.name: s.value for f in families for s in f.samples if not s.labels}


def test_the_server_serves_what_the_process_measures():
    assert serve_metrics("", node_metrics.REGISTRY) is None
    server = MetricsServer("127.0.0.1:0", node_metrics.REGISTRY)
    try:
        before = scrape(server.address)["dilochain_node_inner_steps_total"]
        node_metrics.INNER_STEPS.inc(3)
        found = scrape(server.address)
        assert found["dilochain_node_inner_steps_total"] == before + 3
        # Only the node's own metrics and the shared ones: no chain gauge stuck at zero.
        assert "dilochain_artifact_fetched_bytes_total" in found
        assert "process_resident_memory_bytes" in found
        assert not any(name.startswith(("dilochain_chain_", "dilochain_verifier_"))
                       for name in found)  # fmt: skip
        build = [k for k in scrape(server.address, labelled=True) if k[0] == "dilochain_build_info"]
        assert build and ("role", "node") in build[0][1]
        with pytest.raises(MetricsError, match="cannot serve metrics on"):
            MetricsServer(server.address, node_metrics.REGISTRY)  # in use
    finally:
        server.close()


def test_step_meter_counts_steps_and_utilisation():
    calls = []
    meter = node_metrics.StepMeter(tokens_per_step=100, inner=lambda *a: calls.append(a))
    steps = node_metrics.INNER_STEPS._value.get()
    trained = node_metrics.TRAINING_SECONDS._value.get()
    meter.started = time.monotonic() - 10.0  # the node has been up 10 s
    meter(1, 5.0, 100.0)  # 1 step of 100 tokens at 100 tok/s: 1 s in this round
    meter(2, 4.0, 100.0)  # 2 s in this round
    meter(1, 3.0, 50.0, 7)  # a new round (7): 2 s
    assert meter.training_seconds == pytest.approx(4.0)
    assert node_metrics.TRAINING_SECONDS._value.get() - trained == pytest.approx(4.0)
    assert 0.35 < meter.utilisation() < 0.41
    assert node_metrics.INNER_STEPS._value.get() == steps + 3
    assert node_metrics.LOSS._value.get() == 3.0 and len(calls) == 3
    assert calls[-1] == (1, 3.0, 50.0, 7)  # the bar is named by the chain's round


def test_block_observer_counts_heights_intervals_and_tx_codes():
    observe = chain_metrics.BlockObserver()
    ok = chain_metrics.TXS.labels("0")._value.get()
    refused = chain_metrics.TXS.labels("5")._value.get()
    intervals = chain_metrics.BLOCK_INTERVAL._sum.get()
    results = [type("R", (), {"code": c}) for c in (0, 5, 0)]
    for height, seconds in ((7, 100.0), (8, 100.25)):
        block = StoredBlock(height, b"", int(seconds * 1e9), b"")
        observe(FinalizedBlock(block, [], results, b""))
    assert chain_metrics.HEIGHT._value.get() == 8
    assert chain_metrics.TXS.labels("0")._value.get() == ok + 4
    assert chain_metrics.TXS.labels("5")._value.get() == refused + 2
    assert chain_metrics.BLOCK_INTERVAL._sum.get() == pytest.approx(intervals + 0.25)

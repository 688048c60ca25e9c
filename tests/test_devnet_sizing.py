"""Sizing the devnet's rounds to the machine (dilochain/cli/devnet_sizing.py)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from dilochain.cli.devnet_sizing import (
    MIN_INTERVAL,
    SEGMENTS,
    Utilisation,
    shared_step_seconds,
    size_rounds,
    usable_cores,
)
from dilochain.metrics_http import MetricsServer
from dilochain.testutil import shipped_data
from dilochain.training.run_config import make_run_config
from dilochain.training.train_step import seconds_per_step


def test_steps_fill_the_window_at_the_shared_pace():
    # 25 ms a step with everything beside it; 0.8 of a 7 s window: 224 steps.
    sizing = size_rounds(0.010, 0.025, 7.0, fill=0.8)
    assert sizing.inner_steps == 224 and sizing.checkpoint_interval == 56
    assert sizing.inner_steps == SEGMENTS * sizing.checkpoint_interval
    assert sizing.inner_steps * sizing.shared_seconds <= 0.8 * 7.0
    assert size_rounds(0.010, 0.010, 7.0, fill=0.8).inner_steps == 560
    assert "224 inner steps" in sizing.describe(4, 2)


def test_steps_are_as_few_as_a_verifier_can_replay_in_its_window():
    # A verifier has 2 s, and replays 1.6 steps for each a host trains: 0.8 * 125 = 100 steps.
    sizing = size_rounds(0.010, 0.010, 7.0, replay=(2.0, 1.6), fill=0.8)
    assert sizing.inner_steps == 100 and sizing.checkpoint_interval == 25


def test_a_machine_too_slow_for_the_window_still_gets_whole_segments():
    sizing = size_rounds(2.0, 5.0, 3.0)
    assert sizing.checkpoint_interval == MIN_INTERVAL
    assert sizing.inner_steps == SEGMENTS * MIN_INTERVAL


def test_a_step_is_measured_on_the_runs_own_model_and_data():
    data, pins = shipped_data()
    cfg = make_run_config(pins, "tiny")
    seconds = seconds_per_step(cfg, data, steps=3, warmup=1)
    assert 0 < seconds < 5


@pytest.mark.heavy(last=True)  # it times steps: alone on the machine, as far as it can be
def test_steps_of_processes_stepping_at_once_take_longer_than_alone():
    data, pins = shipped_data()
    cfg = make_run_config(pins, "demo")
    alone = seconds_per_step(cfg, data, steps=10)
    crowded = shared_step_seconds(cfg, data.root, 2 * usable_cores(), seconds=0.5, niceness=19)
    # Twice as many steppers as cores: each gets at most half a core.
    assert 0 < alone < 5 and crowded > 1.5 * alone
    with pytest.raises(RuntimeError, match="timing inner steps failed"):
        shared_step_seconds(cfg, data.root / "missing", 1, seconds=0.5)


def test_utilisation_is_training_seconds_over_wall_clock_between_the_two_heights():
    registry = CollectorRegistry()
    trained = Counter("dilochain_node_committed_training_seconds", "", registry=registry)
    server = MetricsServer("127.0.0.1:0", registry)
    try:
        url = f"http://{server.address}/metrics"
        meter = Utilisation({"host-0": url, "host-down": "http://127.0.0.1:9/metrics"}, 10, 20)
        meter.tick(9)
        assert meter.samples == [] and meter.shares() == {}
        meter.tick(10)
        trained.inc(3.0)
        meter.tick(15)  # between the two: no sample
        assert len(meter.samples) == 1
        meter.tick(21)
        (t0, _), (t1, _) = meter.samples
        assert meter.shares() == {"host-0": pytest.approx(3.0 / (t1 - t0))}
        missed = Utilisation({"host-0": url}, 10, 20)  # first looked at past the last block
        missed.tick(20)
        missed.tick(21)
        assert missed.samples == [] and missed.shares() == {}
    finally:
        server.close()

"""A short fixed-seed fault-injection run (``dilochain.chaos``): validators, hosts and verifiers
killed, paused and cut off, a validator's database wiped, and the validator drill (a node joins
by state sync and bonds in, is jailed for downtime and unjailed, a validator's twin double-signs
and is tombstoned); every guarantee still holds."""

from __future__ import annotations

import pytest
from rich.console import Console

from bench.chaos import print_report
from dilochain.chaos import LIVENESS, Chaos, ChaosConfig, plan
from dilochain.validator_drill import GENESIS_BOND, STEPS, ValidatorDrill

pytestmark = pytest.mark.integration


def test_the_plan_is_seeded_and_covers_a_wipe():
    names = {"validator": ["node0", "node1"], "host": ["host-0"], "verifier": ["verifier-0"]}
    first = plan(ChaosConfig(seed=3, faults=5), 100, names)
    assert first == plan(ChaosConfig(seed=3, faults=5), 100, names)
    assert first != plan(ChaosConfig(seed=4, faults=5), 100, names)
    assert any(f.kind == "wipe" for f in first) and len(first) == 5
    assert [f.at for f in first] == sorted(f.at for f in first) and first[-1].at < 100


@pytest.mark.heavy(last=True)
def test_a_short_chaos_run_keeps_every_guarantee(tmp_path, capsys, monkeypatch):
    # Two rounds (round 1's commits record the global state round 0's aggregation made), with
    # shorter windows than the command's defaults.
    config = ChaosConfig(seed=1, rounds=2, faults=5, round_blocks=24, windows=(12, 32, 40, 16))
    report = Chaos(config, tmp_path).run()
    assert len(report.faults) == 5 and all(f.done_at is not None for f in report.faults)
    safety = {name: check for name, check in report.checks.items() if name != LIVENESS}
    assert safety and all(ok for ok, _ in safety.values()), report.checks
    assert set(STEPS.values()) <= set(safety), report.checks  # the drill ran every step
    assert "duplicate_vote" in [why for _, why in report.slashes]
    # Not vacuous: round 0 trained (and, by the checks, was decided); that later rounds train
    # too is progress an overloaded machine may not make, reported but not required here.
    assert report.outcomes[0], report.checks
    monkeypatch.setenv("COLUMNS", "200")  # bench.chaos prints this report (its smoke test)
    print_report(Console(), report, config.seed)
    printed = capsys.readouterr().out
    assert "duplicate_vote" in printed and f"after {report.seconds:.0f} s" in printed


def test_the_drill_stakes_every_genesis_validator_and_needs_four(tmp_path):
    drill = ValidatorDrill(tmp_path, "pw", "250ms", lambda _: None)
    with pytest.raises(ValueError, match="four validators"):
        drill.operators(3)
    stakes = drill.operators(4)
    assert [bond for _, bond in stakes] == [GENESIS_BOND] * 4
    assert len(set(drill.accounts)) == 6  # 4 genesis operators, the joiner's, the twin's sender
    assert drill.spared == "node1" and not drill.joined and not drill.done

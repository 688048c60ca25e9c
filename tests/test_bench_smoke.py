"""Every benchmark runs here at tiny sizes, from this process, so none can rot unnoticed
(``bench.train_throughput`` once crashed at HEAD for weeks; at tiny sizes ``bench.chain_ceiling``
counted no tx and ``bench.state_sync`` never caught up). Their figures are theirs to print, not
asserted; that each produced its table, and where it drives a chain that its load went
through, is."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys

import pytest
import torch

# bench: (its arguments, a pattern its output must hold)
CASES = {
    "train_throughput": (["--sizes", "10m", "--steps", "1", "--seq-len", "16", "--batch", "1"],
                         "tokens/s"),
    "artifact_sizes": ([], "1 Gbit/s"),
    "diloco_vs_ddp": (["--steps", "4", "--workers", "2", "--h", "2", "--compressors", "fp32"],
                      "DiLoCo H=2 fp32"),
    "writer_contention": (["--preset", "tiny", "--steps", "2", "--repeats", "1"], "SHA-256"),
    "proof_work": (["--preset", "tiny", "--repeats", "1"], "compress the pseudo-gradient"),
    "replay_tolerance": (["--preset", "tiny", "--hosts", "cpu"], "passes"),
    "verification": (["--preset", "tiny", "--trials", "20", "--repeats", "1"],
                     "verifiers per challenge"),
    "late_join": (["--sizes", "tiny", "--h", "2"], "to first commit"),
    "state_costs": (["--runs", "50", "--entries", "50", "--keys", "2000"], r"16 rows read"),
    # Benches of process networks (a chain process or more, 7-50 s each): each asserts that
    # its load or run went through, not only that a table was printed. bench.chaos prints the
    # report test_chaos's run makes; bench.block_following runs in test_block_watch.
    "protocol_traffic": (["--hosts", "12", "--verifiers", "3", "--rounds", "1", "--round-blocks",
                          "4", "--block-time", "200ms"], "held: every window of every round"),
    "simulate_flood": (["--seconds", "2", "--clients", "1", "--streams", "2"],
                       "ratio flooded/quiet"),
    "chain_tps": (["--txs", "200", "--state-keys", "100", "--clients", "1", "--streams", "2"],
                  r"txs included in blocks\s+│ 200 "),
    "chain_ceiling": (["--txs", "200", "--streams", "2", "--loaders", "1"],
                      r"txs accepted / included\s+│ 200 / 200\s+│ 200 / 200"),
    "state_sync": (["--height", "20", "--accounts", "10"], "state sync / block sync"),
    "block_answers": (["--txs", "16", "--readers", "1", "--seconds", "0.5", "--answers", "30",
                       "--unfinished", "30", "--per-connection", "10", "--block-time", "300ms"],
                      r"(?s)answers held / refused\s+│ 30 / 0.*unfinished calls held / refused\s+│ "
                      r"30 / 0"),
    "host_utilisation": (["--h", "4", "--rounds", "3", "--overlapped-only", "--window", "28"],
                         r"\b3 of 3\b"),
    "slow_links": (["--preset", "tiny", "--rates", "1gbit"], r"1gbit │\s+s3"),
}  # fmt: skip


@pytest.fixture
def torch_settings():
    """The benches set torch's threads and determinism for the process: put them back."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


NEEDS_ROOT = {"slow_links"}  # network namespaces and tc


HEAVY = {"host_utilisation"}  # trains with several host processes: one such test at a time


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.heavy] if n in HEAVY else []) for n in CASES]
)
def test_a_benchmark_runs_at_tiny_sizes(name, monkeypatch, capsys, torch_settings):
    if name in NEEDS_ROOT and (os.geteuid() != 0 or not shutil.which("tc")):
        pytest.skip(f"bench.{name} needs root and tc (iproute2)")
    args, needle = CASES[name]
    monkeypatch.setenv("COLUMNS", "200")  # rich's tables: no header cut to fit 80 columns
    monkeypatch.setattr(sys, "argv", [f"bench.{name}", *args])
    importlib.import_module(f"bench.{name}").main()
    assert re.search(needle, capsys.readouterr().out)

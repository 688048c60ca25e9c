"""Every benchmark that needs no network of processes runs here at tiny sizes, in this process,
so none can rot unnoticed (``bench.train_throughput`` once crashed at HEAD for weeks). Their
figures are theirs to print, not asserted; that each produced its table is."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

CASES = {
    "train_throughput": (["--sizes", "10m", "--steps", "1", "--seq-len", "16", "--batch", "1"],
                         "tokens/s"),
    "artifact_sizes": ([], "1 Gbit/s"),
    "diloco_vs_ddp": (["--steps", "4", "--workers", "2", "--h", "2", "--compressors", "fp32"],
                      "DiLoCo H=2 fp32"),
    "writer_contention": (["--preset", "tiny", "--steps", "2", "--repeats", "1"], "SHA-256"),
    "proof_work": (["--preset", "tiny", "--repeats", "1"], "compress the pseudo-gradient"),
    "replay_tolerance": (["--preset", "tiny", "--hosts", "cpu"], "passes"),
    "verification": (["--preset", "tiny", "--trials", "20"], "verifiers per challenge"),
    # The one bench of a process network here (a chain process, ~10 s): its duties are the
    # protocol's, so every window must hold and nothing may be refused.
    "protocol_traffic": (["--hosts", "12", "--verifiers", "3", "--rounds", "1", "--round-blocks",
                          "4", "--block-time", "200ms"], "held: every window of every round"),
}  # fmt: skip


@pytest.fixture
def torch_settings():
    """The benches set torch's threads and determinism for the process: put them back."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


@pytest.mark.parametrize("name", CASES)
def test_a_benchmark_runs_at_tiny_sizes(name, monkeypatch, capsys, torch_settings):
    args, needle = CASES[name]
    monkeypatch.setenv("COLUMNS", "200")  # rich's tables: no header cut to fit 80 columns
    monkeypatch.setattr(sys, "argv", [f"bench.{name}", *args])
    importlib.import_module(f"bench.{name}").main()
    assert needle in capsys.readouterr().out

"""How far an honest replay on other hardware lands from the host's checkpoint, against how far
a cheat lands: the numbers the genesis ``tolerance`` (tolerance mode) is set from.

A host trains one round of the default preset; verifiers replay every segment under other
settings (thread count, the run's precision) and report the relative L2 distance between the
replayed and the revealed end parameters. Cheats are replayed the same way. GPU-vs-CPU rows need
a GPU (``--device cuda`` for the host's side) and are printed only where one is present.

    .venv/bin/python -m bench.replay_tolerance [--preset small]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from dilochain.node.behaviors import RoundJob
from dilochain.node.cheats import behavior
from dilochain.testutil import shipped_data
from dilochain.training.diloco import initial_global
from dilochain.training.model import build_model
from dilochain.training.run_config import make_run_config
from dilochain.training.train_step import set_deterministic
from dilochain.verifier.replay import Policy, verify_challenge
from dilochain.verifier.testing import publish_round

HOST = "dilo1host"
MEASURE = Policy("tolerance", 1.0, 1.0)  # accept everything: we want the distances


def _round(cfg, data, base, how: str, device: str):
    model = build_model(cfg.model_config, 0).to(device)
    return behavior(how).train(RoundJob(model, cfg, data, HOST, 1, base, None))


def _distances(cfg, data, base, result, threads: int) -> list[float]:
    set_deterministic(threads)
    with tempfile.TemporaryDirectory() as work:
        store, commit, challenges = publish_round(Path(work), cfg, base, result, HOST)
        return [verify_challenge(cfg, data, commit, c, store, MEASURE).distance
                for c in challenges]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()
    data, pins = shipped_data()
    table = Table("host", "verifier", "work", "precision", "min distance", "max distance")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for precision in ("fp32", "bf16"):
        cfg = make_run_config(pins, args.preset, precision=precision)
        model = build_model(cfg.model_config, cfg.seed)
        base = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
        cheats = [("cpu", 1, c) for c in ("noisy", "wrong-data", "fewer-steps")]
        cases = [(d, 1, "honest") for d in devices] + cheats
        for device, host_threads, how in cases:
            set_deterministic(host_threads)
            result = _round(cfg, data, base, how, device)
            for threads in (1, 2):
                found = _distances(cfg, data, base, result, threads)
                table.add_row(f"{device}, {host_threads} thread", f"cpu, {threads} threads",
                              how, precision, f"{min(found):.2e}", f"{max(found):.2e}")  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()

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
from dilochain.protocol.params import PocParams
from dilochain.testutil import shipped_data
from dilochain.training.diloco import initial_global
from dilochain.training.model import build_model
from dilochain.training.run_config import make_run_config
from dilochain.training.train_step import set_deterministic
from dilochain.verifier.replay import Policy, verify_challenge
from dilochain.verifier.testing import publish_round

HOST = "dilo1host"
MEASURE = Policy("tolerance", 1.0, 1.0)  # accept any distance: we want the distances


def _round(cfg, data, base, how: str, device: str, compiled: bool):
    model = build_model(cfg.model_config, 0).to(device)
    if compiled:
        model.compile()  # as `node start --compile` does
    return behavior(how).train(RoundJob(model, cfg, data, HOST, 1, base, None))


def _replays(cfg, data, base, result, threads: int) -> list:
    set_deterministic(threads)
    with tempfile.TemporaryDirectory() as work:
        store, commit, challenges = publish_round(Path(work), cfg, base, result, HOST)
        return [verify_challenge(cfg, data, commit, c, store, MEASURE) for c in challenges]


def _outcome(verdicts: list, tolerance: float) -> str:
    early = [v.reason for v in verdicts if not v.passed]  # refused before any distance
    if early:
        return f"caught: {early[0]}"
    worst = max(v.distance for v in verdicts)
    return "caught" if worst > tolerance else "passes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()
    data, pins = shipped_data()
    tolerance = float(PocParams().tolerance)
    table = Table("host", "verifier", "work", "precision", "distance min", "distance max",
                  f"at tolerance {tolerance:g}", title=f"preset {args.preset!r}")  # fmt: skip
    hosts = [("cpu", False), ("cpu", True)] + (
        [("cuda", False)] if torch.cuda.is_available() else []
    )
    for precision in ("fp32", "bf16"):
        cfg = make_run_config(pins, args.preset, precision=precision)
        model = build_model(cfg.model_config, cfg.seed)
        base = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
        cases = [(d, c, "honest") for d, c in hosts]
        cases += [("cpu", False, cheat) for cheat in ("noisy", "wrong-data", "fewer-steps")]
        for device, compiled, how in cases:
            set_deterministic(1)
            result = _round(cfg, data, base, how, device, compiled)
            host = f"{device}, 1 thread{', compiled' if compiled else ''}"
            for threads in (1, 2):
                verdicts = _replays(cfg, data, base, result, threads)
                distances = [v.distance for v in verdicts if v.passed]
                low, high = (
                    (f"{min(distances):.1e}", f"{max(distances):.1e}") if distances else ("-", "-")
                )
                table.add_row(host, f"cpu, {threads} thread{'s' * (threads > 1)}", how,
                              precision, low, high, _outcome(verdicts, tolerance))  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()

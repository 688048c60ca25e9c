"""How far an honest replay on other hardware lands from the host's checkpoint, against how far
a cheat lands: the numbers the genesis ``tolerance`` (tolerance mode) is set from.

A host trains one round of the default preset; verifiers replay every segment under other
settings (thread count, the run's precision) and report the relative L2 distance between the
replayed and the revealed end parameters (and of the furthest AdamW moment, which tolerance mode
holds to ``verifier.replay.MOMENT_TOLERANCE``). Cheats are replayed the same way. GPU-vs-CPU
rows need a GPU (``--device cuda`` for the host's side) and are printed only where one is
present.

    .venv/bin/python -m bench.replay_tolerance [--preset small] [--hosts cuda,cuda-compiled]
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from dilochain.node.behaviors import RoundJob
from dilochain.node.cheats import behavior
from dilochain.protocol.params import PocParams
from dilochain.testutil import shipped_data
from dilochain.training.diloco import initial_global, params_of, relative_l2
from dilochain.training.model import build_model
from dilochain.training.run_config import make_run_config
from dilochain.training.train_step import load_inner_state, run_segment, set_deterministic
from dilochain.verifier.replay import Policy, verify_challenge
from dilochain.verifier.testing import publish_round

HOST = "dilo1host"
MEASURE = Policy("tolerance", 1.0, 1.0)  # accept any distance: we want the distances


def _round(cfg, data, base, how: str, device: str, compiled: bool):
    model = build_model(cfg.model_config, 0).to(device)
    if compiled:
        model.compile()  # as `node start --compile` does
    return behavior(how).train(RoundJob(model, cfg, data, HOST, 1, params_of(base), None))


def _replays(cfg, data, base, result, threads: int) -> list:
    set_deterministic(threads)
    with tempfile.TemporaryDirectory() as work:
        store, commit, challenges = publish_round(Path(work), cfg, base, result, HOST)
        return [verify_challenge(cfg, data, commit, c, store, MEASURE) for c in challenges]


def _one_step_short(cfg, data, result) -> list[float]:
    """Per segment: how far a replay that skips the segment's last step lands from the honest
    end (what a host that trains k-1 of every k steps would have to hide)."""
    set_deterministic(1)
    states = [c.state() for c in result.checkpoints]
    shards, k = data.shards_of(cfg.seed, HOST), cfg.checkpoint_interval
    distances = []
    for start, end in itertools.pairwise(states):
        state = load_inner_state(build_model(cfg.model_config, 0), cfg, start)
        run_segment(state, cfg, data, shards, result.data_seed, 1, k - 1)
        distances.append(relative_l2(state.params(), params_of(end)))
    return distances


def _outcome(verdicts: list, tolerance: float) -> str:
    early = [v.reason for v in verdicts if not v.passed]  # refused before any distance
    if early:
        return f"caught: {early[0]}"
    worst = max(v.distance for v in verdicts)
    return "caught" if worst > tolerance else "passes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument(
        "--hosts",
        default=None,
        help="the honest hosts' rows only, e.g. cuda,cuda-compiled (default: cpu, "
        "cpu-compiled and cuda where present, and the cheats)",
    )
    args = parser.parse_args()
    data, pins = shipped_data()
    defaults = PocParams()
    table = Table("host", "verifier", "work", "precision", "distance min", "distance max",
                  "moments max", "at the default tolerance",
                  title=f"preset {args.preset!r}")  # fmt: skip
    hosts = [("cpu", False), ("cpu", True)] + (
        [("cuda", False)] if torch.cuda.is_available() else []
    )
    cheats = ("noisy", "wrong-data", "fewer-steps")
    if args.hosts:
        names = args.hosts.split(",")
        hosts = [(h.removesuffix("-compiled"), h.endswith("-compiled")) for h in names]
        cheats = ()
    for precision in ("fp32", "bf16"):
        cfg = make_run_config(pins, args.preset, precision=precision)
        tolerance = Policy.for_run(defaults, precision).tolerance
        model = build_model(cfg.model_config, cfg.seed)
        base = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
        cases = [(d, c, "honest") for d, c in hosts]
        cases += [("cpu", False, cheat) for cheat in cheats]
        if cheats:
            short = _one_step_short(cfg, data, _round(cfg, data, base, "honest", "cpu", False))
            table.add_row("cpu, 1 thread", "cpu, 1 thread", "one step short", precision,
                          f"{min(short):.1e}", f"{max(short):.1e}", "-",
                          "caught" if min(short) > tolerance else "passes")  # fmt: skip
        for device, compiled, how in cases:
            set_deterministic(1)
            result = _round(cfg, data, base, how, device, compiled)
            host = f"{device}, 1 thread{', compiled' if compiled else ''}"
            for threads in (1, 2):
                verdicts = _replays(cfg, data, base, result, threads)
                passed = [v for v in verdicts if v.passed]
                low, high, moments = (
                    (f"{min(v.distance for v in passed):.1e}",
                     f"{max(v.distance for v in passed):.1e}",
                     f"{max(v.moment_distance for v in passed):.1e}") if passed else ("-",) * 3
                )  # fmt: skip
                table.add_row(host, f"cpu, {threads} thread{'s' * (threads > 1)}", how,
                              precision, low, high, moments,
                              _outcome(verdicts, tolerance))  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()

"""Proof-of-computation economics: verifier cost against training cost, and detection.

1. Cost: times one real verification (fetch + decode checkpoints, replay k inner steps with the
   node's step code, check the pseudo-gradient) against one host round (H inner steps plus its
   checkpoints), for the node's default preset; the verifier share of training compute is then
   sampling_rate x verifiers_per_challenge x t_verify / t_segment_of_training.
2. Detection: simulates many cheating hosts with the chain's own selection function (fresh
   beacon seeds): a cheater faking a fraction f of its segments over m segments is caught
   when any faked segment is challenged. Prints the measured rate beside 1 - (1 - p)^(f*m).
3. Screening: times one screen of a commit (pseudo-gradient against base - final checkpoint,
   held-out loss test) against the host's round (times a commit's committee of screeners, or
   times every verifier of a network of ``--network-verifiers``), and for every cheat in
   ``node/cheats.py`` (a real round on the 'tiny' preset) the rate at which it is caught by
   screening alone, by sampling alone at the default rate, and by both (a failed screen
   replays every segment).

    .venv/bin/python -m bench.verification [--trials 2000] [--preset small] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dilochain.chain.modules.challenges import is_challenged
from dilochain.node.behaviors import RoundJob
from dilochain.node.cheats import BEHAVIORS
from dilochain.protocol.params import PocParams
from dilochain.testutil import shipped_data
from dilochain.training.diloco import initial_global, params_of
from dilochain.training.model import build_model
from dilochain.training.round_work import train_round
from dilochain.training.run_config import make_run_config
from dilochain.training.train_step import set_deterministic
from dilochain.verifier.replay import Policy, verify_challenge
from dilochain.verifier.screening import screen_commit
from dilochain.verifier.testing import publish_round

HOST = "dilo1honest"
POLICY = Policy(PocParams().verification_mode, float(PocParams().tolerance),
                float(PocParams().pseudo_grad_tolerance))  # fmt: skip
MARGIN = float(PocParams().screen_loss_margin)


def measure_cost(preset: str = "small", repeats: int = 3) -> tuple[float, float, float, int, int]:
    """(seconds per host round, per verification, per screen, H, k) for ``preset``: the
    median of ``repeats`` of each, taken in turn (a round, a verification, a screen) so that
    the machine's drifts touch all three alike."""
    corpus, pins = shipped_data()
    cfg = make_run_config(pins, preset)
    model = build_model(cfg.model_config, cfg.seed)
    base = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    result = train_round(model, cfg, corpus, HOST, 1, params_of(base), None)
    rounds, verifications, screens = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        store, commit, challenges = publish_round(Path(tmp), cfg, base, result, HOST)
        # A verifier screens many commits of a round (a committee's share of every host's):
        # the first builds its model and the loss of the round's start, the rest reuse them.
        screen_commit(cfg, corpus, commit, b"\x01" * 32, store, POLICY, MARGIN)
        for _ in range(repeats):
            t = time.perf_counter()
            train_round(model, cfg, corpus, HOST, 1, params_of(base), None)
            rounds.append(time.perf_counter() - t)
            t = time.perf_counter()
            verdict = verify_challenge(
                cfg, corpus, commit, challenges[1], store, Policy("exact", 0, 1e-3)
            )
            verifications.append(time.perf_counter() - t)
            t = time.perf_counter()
            screened = screen_commit(cfg, corpus, commit, b"\x01" * 32, store, POLICY, MARGIN)
            screens.append(time.perf_counter() - t)
            assert verdict.passed and screened.passed, (verdict.reason, screened.reason)
    median = statistics.median
    return (median(rounds), median(verifications), median(screens), cfg.inner_steps,
            cfg.checkpoint_interval)  # fmt: skip


def cheat_detection(rate: float, anchors: int) -> list[tuple[str, float, float, float]]:
    """(cheat, caught by screening, by sampling at ``rate``, by both) for every cheat, each
    from one real 'tiny' round, screened under ``anchors`` different beacon anchors."""
    corpus, pins = shipped_data()
    cfg = make_run_config(pins, "tiny")
    model = build_model(cfg.model_config, cfg.seed)
    base = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    peer = train_round(
        build_model(cfg.model_config, 0), cfg, corpus, "dilo1peer", 1, params_of(base), None
    )
    rows = []
    for name, kind in BEHAVIORS.items():
        if name in ("honest", "noisy"):
            continue
        cheat = kind()
        job = RoundJob(build_model(cfg.model_config, 0), cfg, corpus, HOST, 1, params_of(base),
                       None, peer_pseudo_grad=lambda: peer.pseudo_grad)  # fmt: skip
        result = cheat.train(job)
        with tempfile.TemporaryDirectory() as tmp:
            store, commit, challenges = publish_round(Path(tmp), cfg, base, result, HOST)
            faked = 0
            for c in challenges:  # a segment is caught if its reveal or its replay fails
                committed = c.end_hash
                passed = (
                    cheat.reveal(committed) == committed
                    and verify_challenge(cfg, corpus, commit, c, store, POLICY).passed
                )
                faked += not passed
            screens = [
                screen_commit(cfg, corpus, commit, bytes([i]) * 32, store, POLICY, MARGIN)
                for i in range(anchors)
            ]
        by_screen = sum(not v.passed for v in screens) / anchors
        by_sampling = 1 - (1 - rate) ** faked
        both = by_screen * (faked > 0) + (1 - by_screen) * by_sampling
        rows.append((name, by_screen, by_sampling, both))
    return rows


def honest_noise() -> float:
    """Relative L2 between a segment trained on 2 threads and its replay on 1 (float drift)."""
    import torch

    from dilochain.training.diloco import relative_l2
    from dilochain.training.train_step import load_inner_state, run_segment

    corpus, pins = shipped_data()
    cfg = make_run_config(pins, "small", inner_steps=10, checkpoint_interval=10)
    model = build_model(cfg.model_config, cfg.seed)
    base = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    torch.set_num_threads(2)
    result = train_round(model, cfg, corpus, HOST, 0, params_of(base), None)
    torch.set_num_threads(1)
    start = result.checkpoints[0].state()
    state = load_inner_state(build_model(cfg.model_config, 0), cfg, start)
    shards = corpus.shards_of(cfg.seed, HOST)
    run_segment(state, cfg, corpus, shards, result.data_seed, 0, cfg.checkpoint_interval)
    end = result.checkpoints[1].state()
    return relative_l2(params_of(state.checkpoint()), params_of(end))


def detection_rate(rate: float, faked: int, trials: int, rng: random.Random) -> float:
    """Share of simulated cheaters with ``faked`` faked segments that get challenged."""
    caught = 0
    for trial in range(trials):
        seeds = [rng.randbytes(32) for _ in range(faked)]
        caught += any(is_challenged(seed, f"cheat{trial}", s, rate) for s, seed in enumerate(seeds))
    return caught / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--preset", default="small", help="the run preset whose costs are timed")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--repeats", type=int, default=3,
                        help="timings of each (round, verification, screen); medians")  # fmt: skip
    parser.add_argument("--anchors", type=int, default=5, help="beacon anchors per cheat screen")
    parser.add_argument("--network-verifiers", type=int, default=50,
                        help="verifiers of a network, for the cost of all screening")  # fmt: skip
    args = parser.parse_args()
    set_deterministic(args.threads)
    console = Console()
    round_s, verify_s, screen_s, h, k = measure_cost(args.preset, args.repeats)
    per_segment_training = round_s / (h // k)
    defaults = PocParams()
    verifiers = defaults.verifiers_per_challenge
    console.print(f"host round (H={h}, k={k}): {round_s:.2f}s; one verification: {verify_s:.2f}s "
                  f"({verify_s / per_segment_training:.2f}x the segment's training); medians of "
                  f"{args.repeats}")  # fmt: skip
    rng = random.Random(7)
    table = Table("sampling rate", "verifier cost / training", "faked segments (f=10%)",
                  "detected (measured)", "1-(1-p)^m (analytic)",
                  title=f"{verifiers} verifiers per challenge")  # fmt: skip
    for rate in (0.01, float(defaults.sampling_rate), 0.05, 0.25):
        cost = rate * verifiers * verify_s / per_segment_training
        for segments in (500, 5000):
            faked = segments // 10
            measured = detection_rate(rate, faked, args.trials, rng)
            analytic = 1 - (1 - rate) ** faked
            table.add_row(f"{rate:g}", f"{cost:.1%}", f"{faked} of {segments}",
                          f"{measured:.2%}", f"{analytic:.2%}")  # fmt: skip
    console.print(table)
    screeners = defaults.screeners_per_commit
    replays = float(defaults.sampling_rate) * verifiers * verify_s / per_segment_training
    console.print(f"one screen: {screen_s:.3f}s = {screen_s / round_s:.2%} of the host's round; "
                  f"with {args.network_verifiers} verifiers each screening every commit: "
                  f"{args.network_verifiers * screen_s / round_s:.1%} of training; with each "
                  f"commit screened by a committee of {screeners} (screeners_per_commit): "
                  f"{screeners * screen_s / round_s:.1%}, plus replays at the default rate "
                  f"{replays:.1%}: {screeners * screen_s / round_s + replays:.1%}")  # fmt: skip
    rate = float(defaults.sampling_rate)
    cheats = Table("cheat", "screening alone", f"sampling alone (p={rate:g})", "both",
                   title="detection per round ('tiny' preset, m=2 segments)")  # fmt: skip
    for name, by_screen, by_sampling, both in cheat_detection(rate, args.anchors):
        cheats.add_row(name, f"{by_screen:.0%}", f"{by_sampling:.1%}", f"{both:.1%}")
    console.print(cheats)
    noise = honest_noise()
    console.print(f"honest replay noise (10 steps on 2 threads vs 1): relative L2 {noise:.2e}; "
                  f"genesis tolerance {defaults.tolerance}")  # fmt: skip
    console.print(f"genesis default: sampling_rate={defaults.sampling_rate}, "
                  f"verifiers_per_challenge={verifiers}, quorum={defaults.quorum}")  # fmt: skip


if __name__ == "__main__":
    main()

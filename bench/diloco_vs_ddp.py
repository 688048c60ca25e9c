"""DiLoCo against fully synchronous data-parallel training: same model, data and compute.

Four simulated workers. DDP averages gradients every step (each worker sends its fp32
gradient every step); DiLoCo runs H inner AdamW steps per worker and averages pseudo-gradients
with the Nesterov outer step (each worker sends one pseudo-gradient per round: fp32, or
compressed with error feedback by a run's compressor, exactly as a host does). All use the
node's own model, data shards and step code. Prints final held-out loss, bytes sent per worker
and the ratio to DDP (a node's proof work is ``bench/proof_work.py``).

    .venv/bin/python -m bench.diloco_vs_ddp [--steps 1000] [--workers 4] [--h 50,200]
        [--compressors fp32,int8,dct-top4,dct-sign16] [--inner-lr 4e-4] [--outer-lr 0.7]
        [--batch-size 8]
        [--inner-state carried|reset|both] [--delayed] [--churn 0.25] [--data DIR] [--jobs 2]
    .venv/bin/python -m bench.diloco_vs_ddp --long   # 5,000 steps, H=50 (100 outer steps),
                                                     # every compressor
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import multiprocessing
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from dilochain.testutil import shipped_data
from dilochain.training.compress import compress_with_feedback, decompress
from dilochain.training.dataset import Dataset
from dilochain.training.diloco import (
    initial_global,
    outer_step,
    params_of,
    pseudo_gradient,
    round_start,
)
from dilochain.training.model import build_model, lm_loss, load_params, parameter_count
from dilochain.training.prepare import pins_of
from dilochain.training.run_config import Pins, llama, make_run_config
from dilochain.training.train_step import (
    eval_loss,
    fresh_inner_state,
    lr_at,
    set_deterministic,
    train_step,
)

BENCH_MODEL = llama(128, 2, 4, 64)


def _workers(n: int) -> list[str]:
    return [f"worker-{i}" for i in range(n)]


def run_ddp(cfg, corpus, workers, steps, heldout) -> tuple[float, int]:
    """Synchronous DP: every step averages the workers' gradients. Returns (eval, bytes/worker)."""
    model = build_model(cfg.model_config, cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.inner_lr, betas=(0.9, 0.95),
                            weight_decay=cfg.weight_decay, foreach=False)  # fmt: skip
    shards = [corpus.shards_of(cfg.seed, w, workers) for w in workers]
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        opt.zero_grad(set_to_none=True)
        for worker, mine in zip(workers, shards, strict=True):
            seed = int.from_bytes(hashlib.sha256(worker.encode()).digest()[:8], "big")
            batch = corpus.batch(mine, seed, step, cfg.batch_size, cfg.seq_len)
            (lm_loss(model, batch) / len(workers)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=False)
        opt.step()
    return eval_loss(model, heldout), steps * 4 * parameter_count(model)


def absent(workers: list[str], round_: int, churn: float) -> set[str]:
    """The ``churn`` fraction of ``workers`` that sit round ``round_`` out (a fixed draw)."""
    order = sorted(workers, key=lambda w: hashlib.sha256(f"churn/{round_}/{w}".encode()).digest())
    return set(order[: round(churn * len(workers))])


def run_diloco(cfg, corpus, workers, steps, heldout, delayed=False, churn=0.0) -> tuple[float, int]:
    """DiLoCo with H = cfg.inner_steps and cfg.compression ("fp32": none). ``delayed``: the
    overlapped rounds of a run with ``overlap`` (one-step delay): round r trains before round
    r-1's aggregate is known, each worker from ``diloco.round_start`` (θ_{r-1} stepped by its own
    round r-1 pseudo-gradient), as hosts and verifiers do. ``churn``: that fraction of the
    workers, drawn anew each round, is absent (trains nothing; as on chain, its next round
    starts without an error-feedback residual, nor carried moments). With the run's
    ``carry_inner_state`` each worker's round starts from the AdamW moments of its last final
    checkpoint (``train_step.start_checkpoint``, as hosts do), else from zero moments. Returns
    (eval loss, bytes sent per worker)."""
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    residuals: dict[str, dict | None] = dict.fromkeys(workers)
    sent, previous, own = 0, state, dict.fromkeys(workers)
    moments: dict[str, dict | None] = dict.fromkeys(workers)
    for round_ in range(steps // cfg.inner_steps):
        deltas = []
        away = absent(workers, round_, churn)
        for worker in workers:
            if worker in away:
                residuals[worker] = own[worker] = moments[worker] = None
                continue
            start = params_of(state)
            if delayed:
                start = round_start(previous, own[worker], cfg.outer_lr, cfg.outer_momentum)
            inner = fresh_inner_state(model, cfg, start, moments[worker])
            shards = corpus.shards_of(cfg.seed, worker, workers)
            seed = int.from_bytes(hashlib.sha256(f"{worker}/{round_}".encode()).digest()[:8], "big")
            while inner.step < cfg.inner_steps:
                train_step(inner, cfg, corpus, shards, seed, round_)
            delta = pseudo_gradient(start, inner.params())
            if cfg.carry_inner_state:
                moments[worker] = {k: v.clone() for k, v in inner.checkpoint().items()}
            if cfg.compression != "fp32":
                data, residuals[worker] = compress_with_feedback(
                    delta, residuals[worker], cfg.compression
                )
                delta = decompress(data)
                sent += len(data)
            else:
                sent += 4 * sum(v.numel() for v in delta.values())
            deltas.append(delta)
            own[worker] = delta
        previous, state = state, outer_step(state, deltas, cfg.outer_lr, cfg.outer_momentum)
    load_params(model, params_of(state))
    return eval_loss(model, heldout), sent // len(workers)


def _method(job: tuple) -> tuple[str, float, int, float]:
    """One method in a worker process: (name, eval loss, bytes per worker, seconds)."""
    name, h, compression, variant, args = job
    set_deterministic(args.threads)
    corpus, pins = _data(args.data)
    variant = dict(variant)
    cfg = make_run_config(pins, "small", model=BENCH_MODEL, total_rounds=max(1, args.steps // h),
                          inner_steps=h, warmup_steps=50, compression=compression,
                          carry_inner_state=variant.pop("carry", False),
                          **_knobs(args))  # fmt: skip
    heldout = corpus.heldout_batches(16, cfg.batch_size, cfg.seq_len)
    workers, t = _workers(args.workers), time.perf_counter()
    if compression is None:
        loss, sent = run_ddp(cfg, corpus, workers, args.steps, heldout)
    else:
        loss, sent = run_diloco(cfg, corpus, workers, args.steps, heldout, **variant)
    return name, loss, sent, time.perf_counter() - t


def _knobs(args: argparse.Namespace) -> dict:
    """The RunConfig fields the command line sets (the run's defaults for the others)."""
    given = {"inner_lr": args.inner_lr, "batch_size": args.batch_size, "outer_lr": args.outer_lr}
    return {field: value for field, value in given.items() if value is not None}


def _data(folder: Path | None) -> tuple[Dataset, Pins]:
    if folder is None:
        return shipped_data()
    pins = pins_of(folder)
    return Dataset(folder, pins.manifest_hash, pins.tokenizer_hash), pins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per worker")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads per method")
    parser.add_argument("--jobs", type=int, default=1, help="methods run side by side")
    parser.add_argument("--data", type=Path, help="a prepared dataset (default: the shipped one)")
    parser.add_argument("--h", default="50,200", help="inner steps per round, comma-separated")
    parser.add_argument(
        "--compressors",
        help="fp32 (none) or run compressors, comma-separated (default "
        "fp32,int8,dct-top4,dct-sign16; with --long fp32,int8,int4,dct-top4,dct-top2,"
        "dct-sign16)",
    )
    parser.add_argument(
        "--inner-lr", type=float, help="peak inner learning rate, DP's too (default: the run's)"
    )
    parser.add_argument("--outer-lr", type=float, help="DiLoCo's outer lr (default: the run's)")
    parser.add_argument(
        "--batch-size", type=int, help="sequences per worker step (default: the run's)"
    )
    parser.add_argument(
        "--inner-state",
        choices=("reset", "carried", "both"),
        default="carried",
        help="each DiLoCo worker keeps its AdamW moments from round to round (carried, as "
        "runs do by default), starts every round from zero moments (reset, a run with "
        "--reset-inner-state), or both",
    )
    parser.add_argument(
        "--delayed", action="store_true", help="also each DiLoCo method in overlapped rounds"
    )
    parser.add_argument(
        "--churn",
        type=float,
        default=0.0,
        help="also each DiLoCo method with this fraction of workers absent in "
        "each round (a new draw every round)",
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="5,000 steps at H=50 (100 outer steps), every compressor by default",
    )
    args = parser.parse_args()
    if args.long:
        args.steps, args.h = 5000, "50"
    args.compressors = args.compressors or (
        "fp32,int8,int4,dct-top4,dct-top2,dct-sign16"
        if args.long
        else "fp32,int8,dct-top4,dct-sign16"
    )
    console = Console()
    corpus, _ = _data(args.data)
    cfg = make_run_config(Pins("", "", corpus.manifest.vocab_size), "small", **_knobs(args))
    console.print(f"model: {parameter_count(build_model(llama_config(corpus), 1)):,} parameters; "
                  f"{args.workers} workers x {args.steps} steps of {cfg.batch_size} sequences, "
                  f"inner lr {cfg.inner_lr:g}, outer lr {cfg.outer_lr:g}; data {corpus.root} "
                  f"({sum(s.tokens for s in corpus.manifest.shards):,} tokens)")  # fmt: skip
    jobs = [("synchronous DP", args.steps, None, {}, args)]
    carried = {"reset": [False], "carried": [True], "both": [False, True]}[args.inner_state]
    for h, c, carry in itertools.product(map(int, args.h.split(",")),
                                         args.compressors.split(","), carried):  # fmt: skip
        name = f"DiLoCo H={h} {c}" + ("" if carry else ", AdamW reset each round")
        jobs.append((name, h, c, {"carry": carry}, args))
        if args.delayed:
            jobs.append((f"{name}, overlapped (one-step delay)", h, c,
                         {"carry": carry, "delayed": True}, args))  # fmt: skip
        if args.churn:
            jobs.append((f"{name}, {args.churn:.0%} of workers absent each round", h, c,
                         {"carry": carry, "churn": args.churn}, args))  # fmt: skip
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        results = {}
        for name, loss, sent, seconds in pool.imap_unordered(_method, jobs):
            console.print(f"{name} done in {seconds:.0f}s: eval loss {loss:.4f}, {sent:,} bytes")
            results[name] = (loss, sent)
    ddp_loss, ddp_bytes = results["synchronous DP"]
    table = Table("method", "eval loss", "vs DP", "bytes sent / worker", "fewer bytes than DP")
    for name, *_ in jobs:
        loss, sent = results[name]
        gap = "-" if name == jobs[0][0] else f"{(loss / ddp_loss - 1) * 100:+.1f}%"
        table.add_row(name, f"{loss:.4f}", gap, f"{sent:,}", f"{ddp_bytes / sent:,.0f}x")
    console.print(table)


def llama_config(corpus: Dataset) -> str:
    """The bench model's config on ``corpus``'s vocabulary."""
    return make_run_config(Pins("", "", corpus.manifest.vocab_size), "small",
                           model=BENCH_MODEL).model_config  # fmt: skip


if __name__ == "__main__":
    main()

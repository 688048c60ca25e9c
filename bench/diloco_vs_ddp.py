"""DiLoCo against fully synchronous data-parallel training: same model, data and compute.

Four simulated workers. DDP averages gradients every step (each worker sends its fp32
gradient every step); DiLoCo runs H inner AdamW steps per worker and averages pseudo-gradients
with the Nesterov outer step (each worker sends one pseudo-gradient per round, fp32 or int8).
Both use the node's own model, data shards and step code. Prints final held-out loss, bytes
sent per worker and the ratio to DDP; then the share of a node's round time spent hashing,
compressing, Merkle-rooting and signing its commit.

    .venv/bin/python -m bench.diloco_vs_ddp [--steps 1000] [--workers 4]
"""

from __future__ import annotations

import argparse
import hashlib
import time

import torch
from rich.console import Console
from rich.table import Table

from dilochain.client import sign_offline
from dilochain.protocol.merkle import merkle_root
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitRound
from dilochain.testutil import shipped_data, wallet
from dilochain.training.compress import compress, compress_with_feedback, decompress
from dilochain.training.diloco import initial_global, outer_step, params_of, pseudo_gradient
from dilochain.training.model import build_model, lm_loss, load_params, parameter_count
from dilochain.training.round_work import train_round
from dilochain.training.run_config import llama, make_run_config
from dilochain.training.tensor_codec import encode_state
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
    shards = [corpus.shard_of(cfg.seed, w) for w in workers]
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        opt.zero_grad(set_to_none=True)
        for worker, shard in zip(workers, shards, strict=True):
            seed = int.from_bytes(hashlib.sha256(worker.encode()).digest()[:8], "big")
            batch = corpus.batch(shard, seed, step, cfg.batch_size, cfg.seq_len)
            (lm_loss(model, batch) / len(workers)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=False)
        opt.step()
    return eval_loss(model, heldout), steps * 4 * parameter_count(model)


def run_diloco(cfg, corpus, workers, steps, heldout, int8: bool) -> tuple[float, int]:
    """DiLoCo with H = cfg.inner_steps. Returns (eval loss, bytes sent per worker)."""
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    errors: dict[str, dict | None] = dict.fromkeys(workers)
    sent = 0
    for round_ in range(steps // cfg.inner_steps):
        deltas = []
        for worker in workers:
            start = params_of(state)
            inner = fresh_inner_state(model, cfg, start)
            shard = corpus.shard_of(cfg.seed, worker)
            seed = int.from_bytes(hashlib.sha256(f"{worker}/{round_}".encode()).digest()[:8], "big")
            while inner.step < cfg.inner_steps:
                train_step(inner, cfg, corpus, shard, seed, round_)
            delta = pseudo_gradient(start, inner.params())
            if int8:
                data, errors[worker] = compress_with_feedback(delta, errors[worker], 8)
                deltas.append(decompress(data))
                sent += len(data)
            else:
                deltas.append(delta)
                sent += 4 * sum(v.numel() for v in delta.values())
        state = outer_step(state, deltas, cfg.outer_lr, cfg.outer_momentum)
    load_params(model, params_of(state))
    return eval_loss(model, heldout), sent // len(workers)


def commit_overhead() -> dict[str, float]:
    """Seconds per round of the node's default preset: training vs hashing/committing work."""
    corpus, pins = shipped_data()
    cfg = make_run_config(pins, "small")
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    t = time.perf_counter()
    result = train_round(model, cfg, corpus, "dilo1bench", 0, state, None)
    round_seconds = time.perf_counter() - t
    t = time.perf_counter()
    ckpt = fresh_inner_state(model, cfg, params_of(state)).checkpoint()
    for _ in result.checkpoints:
        hashlib.sha256(encode_state(ckpt)).digest()
    hashing = time.perf_counter() - t
    t = time.perf_counter()
    compress(pseudo_gradient(params_of(state), params_of(state)), 8)
    compressing = time.perf_counter() - t
    t = time.perf_counter()
    merkle_root(result.checkpoint_hashes)
    signer = wallet(1)
    msg = MsgCommitRound(host=str(signer.address()), run_id="r", round=0,
                         ckpt_root=result.ckpt_root, pseudo_grad_hash=b"\0" * 32)  # fmt: skip
    sign_offline(signer, [msg], sequence=0, account_number=0, chain_id="c")
    committing = time.perf_counter() - t
    training = round_seconds - hashing - compressing
    return {"round": round_seconds, "training": training, "hashing": hashing,
            "compressing": compressing, "merkle + commit tx": committing}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per worker")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_deterministic(args.threads)
    console = Console()
    corpus, pins = shipped_data()
    base = make_run_config(pins, "small", model=BENCH_MODEL,
                           total_rounds=1, inner_steps=args.steps, warmup_steps=50)  # fmt: skip
    heldout = corpus.heldout_batches(16, base.batch_size, base.seq_len)
    workers = _workers(args.workers)
    console.print(f"model: {parameter_count(build_model(base.model_config, 1)):,} parameters; "
                  f"{args.workers} workers x {args.steps} steps")  # fmt: skip
    table = Table("method", "eval loss", "vs DDP", "bytes sent / worker", "fewer bytes than DDP")
    t = time.perf_counter()
    ddp_loss, ddp_bytes = run_ddp(base, corpus, workers, args.steps, heldout)
    console.print(f"DDP done in {time.perf_counter() - t:.0f}s")
    table.add_row("synchronous DP", f"{ddp_loss:.4f}", "-", f"{ddp_bytes:,}", "1x")
    for h in (50, 200):
        for int8 in (False, True):
            cfg = make_run_config(pins, "small", model=BENCH_MODEL,
                                  total_rounds=args.steps // h, inner_steps=h,
                                  warmup_steps=50)  # fmt: skip
            t = time.perf_counter()
            loss, sent = run_diloco(cfg, corpus, workers, args.steps, heldout, int8)
            name = f"DiLoCo H={h}{' int8' if int8 else ''}"
            console.print(f"{name} done in {time.perf_counter() - t:.0f}s")
            table.add_row(name, f"{loss:.4f}", f"{(loss / ddp_loss - 1) * 100:+.1f}%",
                          f"{sent:,}", f"{ddp_bytes / sent:,.0f}x")  # fmt: skip
    console.print(table)
    overhead = commit_overhead()
    share = Table("node round (preset 'small', H=50, k=10)", "seconds", "share of round")
    for name, seconds in overhead.items():
        share.add_row(name, f"{seconds:.3f}", f"{seconds / overhead['round'] * 100:.2f}%")
    console.print(share)


if __name__ == "__main__":
    main()

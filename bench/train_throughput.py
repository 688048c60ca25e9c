"""Inner-loop throughput of the node's own step (``training.train_step``): tokens/s, achieved
TFLOP/s and model FLOPs utilisation for Llama configs of ~10M, ~125M and ~1B parameters.

FLOPs per token are 6·N (forward and backward over N non-embedding parameters) plus attention,
12·layers·hidden·seq_len; MFU divides the achieved rate by ``--peak-tflops`` (the device's dense
peak). The run's precision is bf16 autocast by default on CUDA, fp32 on CPU. A size that does not
fit is reported, not fatal. Figures are printed, not asserted.

    .venv/bin/python -m bench.train_throughput [--sizes 10m,125m] [--steps 4] [--device cpu]
        [--threads 2] [--peak-tflops X] [--compile] [--precision fp32|bf16]
        [--seq-len 256] [--batch N]  (N: each size's own batch by default)
"""

from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

from dilochain.testutil import shipped_data
from dilochain.training.model import build_model
from dilochain.training.run_config import llama, make_run_config
from dilochain.training.train_step import fresh_inner_state, set_deterministic, train_step

SEQ_LEN = 256
SIZES = {  # name: (hidden, layers, heads, batch)
    "10m": (384, 6, 6, 8),
    "125m": (768, 18, 12, 8),
    "1b": (2048, 20, 16, 4),
}


def measure(
    size: str, steps: int, device: str, precision: str, compile_model: bool,
    seq_len: int = SEQ_LEN, batch: int | None = None,
) -> dict:  # fmt: skip
    """Seconds per inner step (after one warm-up step) and the FLOPs it did."""
    hidden, layers, heads, default_batch = SIZES[size]
    batch = batch or default_batch
    corpus, pins = shipped_data()
    cfg = make_run_config(pins, "small", model=llama(hidden, layers, heads, seq_len),
                          seq_len=seq_len, batch_size=batch, inner_steps=steps + 1,
                          precision=precision)  # fmt: skip
    model = build_model(cfg.model_config, cfg.seed).to(device)
    embedding = model.get_input_embeddings().weight.numel()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = fresh_inner_state(model, cfg, params)
    if compile_model:
        model.compile()  # as `node start --compile` does
    shards = corpus.shards_of(cfg.seed, "bench")
    train_step(state, cfg, corpus, shards, 1, 0)  # warm-up: allocations, kernels, compilation
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        train_step(state, cfg, corpus, shards, 1, 0)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    n = sum(p.numel() for p in params.values()) - embedding
    tokens = batch * seq_len
    flops = tokens * (6 * n + 12 * layers * hidden * seq_len)
    return {"params": n + embedding, "seconds": seconds, "tokens": tokens, "flops": flops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10m,125m")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's dense peak (bf16 on GPUs), for MFU")  # fmt: skip
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default=None,
        help="the run's precision (default: bf16 on CUDA, fp32 on CPU)",
    )
    parser.add_argument("--seq-len", type=int, default=SEQ_LEN)
    parser.add_argument("--batch", type=int, default=None, help="sequences a step")
    parser.add_argument("--nondeterministic", action="store_true",
                        help="without the deterministic kernels a node runs with")  # fmt: skip
    args = parser.parse_args()
    if args.nondeterministic:
        torch.set_num_threads(args.threads)
    else:
        set_deterministic(args.threads)  # as a node runs
    precision = args.precision or ("bf16" if args.device == "cuda" else "fp32")
    console = Console()
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    table = Table("size", "parameters", "s / step", "tokens/s", "TFLOP/s", "MFU",
                  title=f"inner steps on {device_name} ({args.threads} threads on CPU"
                        f"{', nondeterministic' if args.nondeterministic else ''}), "
                        f"seq_len {args.seq_len}")  # fmt: skip
    for size in args.sizes.split(","):
        try:
            m = measure(
                size, args.steps, args.device, precision, args.compile, args.seq_len, args.batch
            )
        except (RuntimeError, MemoryError) as err:  # out of memory: report, go on
            table.add_row(size, "-", "-", "-", "-", f"failed: {str(err)[:160]}")
            continue
        tflops = m["flops"] / m["seconds"] / 1e12
        mfu = f"{tflops / args.peak_tflops:.1%}" if args.peak_tflops else "-"
        table.add_row(size, f"{m['params'] / 1e6:.1f}M", f"{m['seconds']:.3f}",
                      f"{m['tokens'] / m['seconds']:,.0f}", f"{tflops:.3f}", mfu)  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()

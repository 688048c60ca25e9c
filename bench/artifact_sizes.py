"""What a round moves at 1B, 8B and 70B parameters, from constants measured on a real model.

Measures, with the node's own encoders on a Llama of a few million parameters, the bytes per
parameter of a checkpoint's two objects (its weights: steps and parameters; its AdamW moments),
a global state (parameters, outer
momentum), a residual and the pseudo-gradient under every shipped compressor; then projects a
round of the small preset's shape (``--segments``, ``--sampling-rate``, ``--screeners``)
to larger models, stored as the issue asks (bf16 weights, fp32 moments: checkpoints of
2 + 4 + 4 bytes a parameter, the measured header overhead on top), with the seconds each
transfer takes at 100 Mbit/s and 1 Gbit/s. Rows:

- *checkpoint*, *disk/host/round*: what a host writes each round (segments + 1 checkpoints, its
  pseudo-gradient, residual and the global state);
- *S3 upload/host/round*: what a host publishes to an object store before its commit (final
  checkpoint's weights, pseudo-gradient, residual, global state) and once challenged (the start
  and end of each challenged segment, ``sampling_rate * segments`` of them on average, and the
  final checkpoint's moments when the next round's segment 0 is challenged, ``sampling_rate``);
- *blob upload/host/round*: what it serves from its blob service instead: the same reads, once
  per reader (each peer fetches its pseudo-gradient, each screener the commit's artifacts);
- *verifier/challenge*, *screen*: what one replay and one screen download (a screen's base
  global state is the round's, fetched once a round by each verifier; a replay of segment 0
  also reads the host's last final checkpoint, counted at its average of one in ``segments``).

    .venv/bin/python -m bench.artifact_sizes
"""

from __future__ import annotations

import argparse

import torch
from rich.console import Console
from rich.table import Table

from dilochain.protocol import model_config
from dilochain.protocol.compression import DCT_CHUNK
from dilochain.training.checkpoint_codec import CheckpointEncoding
from dilochain.training.compress import RESIDUAL_DTYPE, compress
from dilochain.training.diloco import initial_global
from dilochain.training.model import build_model, parameter_count
from dilochain.training.run_config import llama
from dilochain.training.tensor_codec import encode_state
from dilochain.training.train_step import start_checkpoint

COMPRESSORS = ["int8", "int4", "dct-top8", "dct-sign8"]
SIZES = {"1B": 1e9, "8B": 8e9, "70B": 70e9}
LINKS = {"100 Mbit/s": 100e6 / 8, "1 Gbit/s": 1e9 / 8}


def measured(hidden: int, layers: int) -> dict[str, float]:
    """Bytes per parameter of each artifact, encoded as the node encodes it (fp32; the
    residual bf16)."""
    config = model_config.canonical(llama(hidden, layers, max(1, hidden // 64), 64))
    model = build_model(config, seed=0)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    n = parameter_count(model)
    delta = {k: torch.randn_like(v) * 1e-3 for k, v in params.items()}
    checkpoint = CheckpointEncoding.of(start_checkpoint(params))
    sizes = {
        "checkpoint weights": len(checkpoint.weights) / n,
        "checkpoint moments": len(checkpoint.moments) / n,
        "global state": len(encode_state(initial_global(params))) / n,
        "residual": len(encode_state({k: v.to(RESIDUAL_DTYPE) for k, v in delta.items()})) / n,
    }
    for name in COMPRESSORS:
        sizes[f"pseudo-gradient {name}"] = len(compress(delta, name)) / n
    sizes["parameters"] = n
    return sizes


def _human(nbytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def _seconds(nbytes: float, rate: float) -> str:
    s = nbytes / rate
    return f"{s / 3600:,.1f} h" if s >= 3600 else f"{s:,.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--segments", type=int, default=5, help="H / k (small preset: 50/10)")
    parser.add_argument("--sampling-rate", type=float, default=0.015)
    parser.add_argument("--screeners", type=int, default=7, help="screeners_per_commit")
    parser.add_argument("--verifiers-per-challenge", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--compressor", default="int8", choices=COMPRESSORS)
    args = parser.parse_args()
    console = Console()
    per = measured(args.hidden, args.layers)
    table = Table(title=f"measured on a {per['parameters'] / 1e6:.1f}M-parameter Llama (fp32)")
    table.add_column("artifact")
    table.add_column("bytes / parameter", justify="right")
    for name, value in per.items():
        if name != "parameters":
            table.add_row(name, f"{value:.3f}")
    console.print(table)

    # bf16 weights + fp32 moments: 2 + 4 + 4 bytes, plus the encodings' measured overhead.
    weights = 2.0 + per["checkpoint weights"] - 4.0
    moments = per["checkpoint moments"]
    ckpt = weights + moments
    state = 2.0 + 4.0 + (per["global state"] - 8.0)  # bf16 weights, fp32 outer momentum
    residual = per["residual"]  # bf16, as the node keeps it
    pg = per[f"pseudo-gradient {args.compressor}"]
    s, p = args.segments, args.sampling_rate
    revealed = 2 * p * s  # start + end of each challenged segment, on average
    rows = {
        "checkpoint": ckpt,
        "disk/host/round": (s + 1) * ckpt + pg + residual + state,
        "S3 upload/host/round": weights + pg + residual + state + revealed * ckpt + p * moments,
        "blob upload/host/round": ((args.hosts - 1) * pg
                                   + args.screeners * (weights + pg + residual + state)
                                   + (revealed + p) * args.verifiers_per_challenge * ckpt),
        "verifier/challenge": 2 * ckpt + weights + ckpt / s + state + pg + residual,
        "screen": weights + pg + residual,  # the round's base state: once a round
    }  # fmt: skip
    out = Table(title=f"a round at scale: {s} segments, sampling {p}, {args.screeners} screeners, "
                f"{args.hosts} hosts, pseudo-gradients {args.compressor}; bf16 weights, fp32 "
                "moments")  # fmt: skip
    out.add_column("per")
    for size in SIZES:
        out.add_column(size, justify="right")
    for name, bytes_per_param in rows.items():
        out.add_row(name, *[_human(bytes_per_param * n) for n in SIZES.values()])
        for link, rate in LINKS.items():
            if name != "disk/host/round":
                seconds = [_seconds(bytes_per_param * n, rate) for n in SIZES.values()]
                out.add_row(f"  at {link}", *seconds)
    console.print(out)
    console.print(f"(DCT chunk {DCT_CHUNK}; every figure scales linearly with parameters)")


if __name__ == "__main__":
    main()

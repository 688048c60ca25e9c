"""How long a host that joins a run in progress takes to contribute, by model size: fetching the
chain's newest global state by hash from a peer's blob service (gRPC on loopback, hash-checked),
decoding it, and training its first round (H inner steps with the node's checkpoints), as the
node does (``HostNode._load`` → ``Aggregator.latest``, then ``train_round``).

    .venv/bin/python -m bench.late_join [--h 20] [--threads 2] [--sizes tiny,small,medium]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dilochain.artifacts.blob_service import PeerFetchingStore, serve_blobs
from dilochain.artifacts.store import LocalArtifactStore
from dilochain.testutil import shipped_data
from dilochain.training.checkpoint_codec import store_checkpoint
from dilochain.training.diloco import initial_global, params_of
from dilochain.training.model import build_model, max_artifact_bytes, parameter_count
from dilochain.training.round_work import train_round
from dilochain.training.run_config import llama, make_run_config
from dilochain.training.tensor_codec import decode_state, encode_state
from dilochain.training.train_step import set_deterministic

HOST = "dilo1joiner"
# (name, hidden, layers, heads): Llama shapes, growing (sequences of 64 tokens).
SIZES = [("tiny", 64, 1, 2), ("small", 256, 4, 4), ("medium", 512, 6, 8)]


def join(name: str, shape: tuple, h: int, root: Path) -> tuple[int, int, float, float]:
    """(parameters, state bytes, fetch + decode seconds, first-round seconds) for one size."""
    data, pins = shipped_data()
    model_config = llama(*shape, seq_len=64, vocab=pins.vocab_size)
    cfg = make_run_config(pins, "small", model=model_config, inner_steps=h,
                          checkpoint_interval=max(1, h // 2))  # fmt: skip
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    peer = LocalArtifactStore(root / name / "peer")
    digest = peer.put(encode_state(state))
    server, endpoint = serve_blobs(peer, "127.0.0.1:0")
    try:
        mine = LocalArtifactStore(root / name / "joiner")
        store = PeerFetchingStore(mine, lambda: [endpoint], max_artifact_bytes(model))
        started = time.perf_counter()
        fetched = decode_state(store.get(digest))
        fetch = time.perf_counter() - started
    finally:
        server.stop(grace=0)

    started = time.perf_counter()
    sink = functools.partial(store_checkpoint, mine.put_parts)
    train_round(model, cfg, data, HOST, 0, params_of(fetched), None, sink=sink)
    first = time.perf_counter() - started
    return parameter_count(model), peer.size(digest), fetch, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--h", type=int, default=20, help="inner steps of the first round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default=",".join(name for name, *_ in SIZES))
    args = parser.parse_args()
    sizes = [size for size in SIZES if size[0] in args.sizes.split(",")]
    if not sizes:
        parser.error(f"--sizes: choose from {', '.join(name for name, *_ in SIZES)}")
    set_deterministic(args.threads)
    title = "a late joiner, until it has trained a round"
    table = Table("model", "parameters", "global state", "fetch + decode",
                  f"first round (H={args.h})", "to first commit", title=title)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name, *shape in sizes:
            params, size, fetch, first = join(name, tuple(shape), args.h, Path(tmp))
            table.add_row(name, f"{params:,}", f"{size / 1e6:.1f} MB", f"{fetch:.2f} s",
                          f"{first:.1f} s", f"{fetch + first:.1f} s")  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()

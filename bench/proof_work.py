"""Proof work's share of a node's round: the round as a node runs it (checkpoints snapshotted,
then encoded, hashed and written to an artifact store by a background thread; the
pseudo-gradient compressed; the Merkle root; the commit tx signed; the fsync of it all comes
after the commit is sent, while the node waits for its reveal) against the same inner steps
with no proof work at all, alternated in one run; then what each piece would cost inline.

    .venv/bin/python -m bench.proof_work [--preset small] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dilochain.artifacts.store import LocalArtifactStore
from dilochain.client import sign_offline
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitRound
from dilochain.protocol.schedule import derive_data_seed
from dilochain.testutil import shipped_data, wallet
from dilochain.training.checkpoint_codec import CheckpointEncoding, store_checkpoint
from dilochain.training.compress import compress
from dilochain.training.diloco import initial_global, params_of, pseudo_gradient
from dilochain.training.model import build_model, parameter_count
from dilochain.training.round_work import checkpoint_steps, train_round
from dilochain.training.run_config import make_run_config
from dilochain.training.train_step import fresh_inner_state, set_deterministic, train_step

HOST = "dilo1bench"


def training_alone(model, cfg, data, state) -> float:
    """Seconds for the round's H inner steps with no checkpoint, hash or commit."""
    started = time.perf_counter()
    inner = fresh_inner_state(model, cfg, params_of(state))
    shards, seed = data.shards_of(cfg.seed, HOST), derive_data_seed(cfg.seed, HOST, 0)
    while inner.step < cfg.inner_steps:
        train_step(inner, cfg, data, shards, seed, 0)
    return time.perf_counter() - started


def node_round(model, cfg, data, state, store_dir: Path) -> float:
    """Seconds for the round as the node runs it, up to a signed commit tx."""
    store = LocalArtifactStore(store_dir)
    put = functools.partial(store.put, sync=False)  # as the node: fsync after the commit

    sink = functools.partial(store_checkpoint, functools.partial(store.put_parts, sync=False))

    started = time.perf_counter()
    result = train_round(model, cfg, data, HOST, 0, params_of(state), None, sink=sink)
    msg = MsgCommitRound(host=str(wallet(1).address()), run_id="r", round=0,
                         ckpt_root=result.ckpt_root, pseudo_grad_hash=put(result.pseudo_grad),
                         residual_hash=put(result.residual))  # fmt: skip
    sign_offline(wallet(1), [msg], sequence=0, account_number=0, chain_id="c")
    seconds = time.perf_counter() - started
    stored = [h for c in result.checkpoints for h in c.hashes()]
    store.sync([*stored, msg.pseudo_grad_hash, msg.residual_hash])
    return seconds


def inline_costs(model, cfg, state, store_dir: Path) -> dict[str, float]:
    """Seconds per round of each piece of proof work run inline, one after another."""
    checkpoint = fresh_inner_state(model, cfg, params_of(state)).checkpoint()
    count = len(checkpoint_steps(cfg))
    store = LocalArtifactStore(store_dir)
    started = time.perf_counter()
    encoding = CheckpointEncoding.of(checkpoint)  # headers and views of the tensors
    encode = time.perf_counter() - started
    started = time.perf_counter()
    encoding.digest()
    sha = time.perf_counter() - started
    started = time.perf_counter()
    store_checkpoint(store.put_parts, encoding)
    write = time.perf_counter() - started
    started = time.perf_counter()
    compress(pseudo_gradient(params_of(state), params_of(state)), cfg.compression)
    compressing = time.perf_counter() - started
    return {
        f"encode {count} checkpoints": encode * count, "sha256": sha * count,
        "write + fsync": write * count, "compress the pseudo-gradient": compressing,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_deterministic(args.threads)
    console = Console()
    data, pins = shipped_data()
    cfg = make_run_config(pins, args.preset)
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    console.print(
        f"preset {args.preset}: {parameter_count(model):,} parameters, H={cfg.inner_steps}, "
        f"k={cfg.checkpoint_interval}, {args.threads} threads"
    )
    alone, node = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            alone.append(training_alone(model, cfg, data, state))
            node.append(node_round(model, cfg, data, state, Path(tmp) / f"store-{i}"))
        inline = inline_costs(model, cfg, state, Path(tmp) / "inline")
    t_alone, t_node = statistics.median(alone), statistics.median(node)
    table = Table("round (median of alternating runs)", "seconds", "share of the node's round")
    table.add_row("training alone", f"{t_alone:.3f}", "")
    table.add_row("as the node runs it", f"{t_node:.3f}", "100%")
    table.add_row("proof work (difference)", f"{t_node - t_alone:.3f}",
                  f"{(t_node - t_alone) / t_node * 100:.2f}%")  # fmt: skip
    console.print(table)
    costs = Table("the same work inline", "seconds", "share of the node's round")
    for name, seconds in inline.items():
        costs.add_row(name, f"{seconds:.3f}", f"{seconds / t_node * 100:.2f}%")
    console.print(costs)


if __name__ == "__main__":
    main()

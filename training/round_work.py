"""One host's round of DiLoCo: H inner steps from the global state, checkpoints every k steps,
the compressed pseudo-gradient, the residual it leaves and the Merkle root the host commits."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dilochain.protocol.merkle import merkle_root
from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.protocol.schedule import derive_data_seed
from dilochain.training.checkpoint_codec import CheckpointEncoding
from dilochain.training.checkpoint_writer import CheckpointWriter, Sink
from dilochain.training.compress import compress_with_feedback
from dilochain.training.dataset import Dataset
from dilochain.training.diloco import all_finite, pseudo_gradient
from dilochain.training.distributed import DataParallel
from dilochain.training.model import CausalLM
from dilochain.training.tensor_codec import encode_state
from dilochain.training.train_step import load_inner_state, start_checkpoint, train_step

Progress = Callable[[int, float, float], None]  # (step, loss, tokens per second)


@dataclass
class RoundResult:
    """What a round produces: artifacts to publish and the fields of its commit."""

    checkpoints: list[CheckpointEncoding]
    checkpoint_hashes: list[bytes]
    ckpt_root: bytes
    pseudo_grad: bytes
    residual: bytes  # the error-feedback residual the round leaves (canonical encoding)
    data_seed: int
    loss: float
    tokens: int
    proof_seconds: float = 0.0  # encoding, hashing and storing its checkpoints (background)
    finite: bool = True  # False: training diverged (a NaN or an infinity in the parameters)


def checkpoint_steps(cfg: RunConfig) -> list[int]:
    """Inner steps at which a round is checkpointed: 0, k, 2k … H."""
    return list(range(0, cfg.inner_steps + 1, cfg.checkpoint_interval))


def train_round(
    model: CausalLM,
    cfg: RunConfig,
    data: Dataset,
    host: str,
    round_: int,
    start: dict[str, torch.Tensor],
    residual: dict[str, torch.Tensor] | None,
    carried: dict[str, torch.Tensor] | None = None,
    progress: Progress | None = None,
    sink: Sink | None = None,
    parallel: DataParallel | None = None,
    roster: Sequence[str] = (),
) -> RoundResult:
    """Train round ``round_`` from the parameters ``start`` (the global state's, or
    ``diloco.round_start``'s in an overlapped run), compressing with the ``residual`` the
    host's last round left (None: none), with the AdamW moments of ``carried`` (the final
    checkpoint of that round, in a run with ``carry_inner_state``; None: zero moments), on the
    shards the round's ``roster`` gives the host (empty: the host alone). Checkpoints are
    encoded and hashed in the background and, with ``sink``, handed to it (the host's artifact
    store) as they are ready. With ``parallel`` (rank 0 of the host's ranks), the other ranks
    train each step with it."""
    data_seed = derive_data_seed(cfg.seed, host, round_)
    shards = data.shards_of(cfg.seed, host, roster)
    first = start_checkpoint(start, carried)
    if parallel is not None:
        parallel.start_round(cfg, host, round_, first, shards)
    state = load_inner_state(model, cfg, first)
    writer = CheckpointWriter(sink)
    losses: list[float] = []
    started = time.perf_counter()
    tokens_per_step = cfg.batch_size * cfg.seq_len
    try:
        writer.submit(state.checkpoint())
        while state.step < cfg.inner_steps:
            losses.append(train_step(state, cfg, data, shards, data_seed, round_, parallel))
            if state.step % cfg.checkpoint_interval == 0:
                writer.submit(state.checkpoint())
            if progress:
                rate = state.step * tokens_per_step / (time.perf_counter() - started)
                progress(state.step, losses[-1], rate)
        delta = pseudo_gradient(start, state.params())
        pseudo_grad, left = compress_with_feedback(delta, residual, cfg.compression)
    finally:
        checkpoints, hashes = writer.results()
    tail = losses[-max(1, cfg.checkpoint_interval) :]
    return RoundResult(
        checkpoints=checkpoints,
        checkpoint_hashes=hashes,
        ckpt_root=merkle_root(hashes),
        pseudo_grad=pseudo_grad,
        residual=encode_state(left),
        data_seed=data_seed,
        loss=sum(tail) / len(tail),
        tokens=cfg.inner_steps * tokens_per_step,
        proof_seconds=writer.busy_seconds,
        finite=all(all_finite(d) for d in delta.values()),
    )


def serve_rounds(model: CausalLM, data: Dataset, parallel: DataParallel) -> int:
    """A non-zero rank's loop: train every round rank 0 starts, step for step with it, until
    rank 0 ends it; returns the rounds trained."""
    rounds = 0
    while (job := parallel.start_round(None)) is not None:
        cfg, host, round_, first, shards = job
        state = load_inner_state(model, cfg, first)
        data_seed = derive_data_seed(cfg.seed, host, round_)
        while state.step < cfg.inner_steps:
            train_step(state, cfg, data, shards, data_seed, round_, parallel)
        rounds += 1
    return rounds

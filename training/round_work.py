"""One host's round of DiLoCo: H inner steps from the global state, checkpoints every k steps,
the compressed pseudo-gradient and the Merkle root the host commits."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dilochain.protocol.hashing import content_hash
from dilochain.protocol.merkle import merkle_root
from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.protocol.schedule import derive_data_seed
from dilochain.training.compress import bits_of, compress_with_feedback
from dilochain.training.dataset import Dataset
from dilochain.training.diloco import params_of, pseudo_gradient
from dilochain.training.model import CausalLM
from dilochain.training.tensor_codec import encode_state
from dilochain.training.train_step import fresh_inner_state, train_step

Progress = Callable[[int, float, float], None]  # (step, loss, tokens per second)


@dataclass
class RoundResult:
    """What a round produces: artifacts to publish and the fields of its commit."""

    checkpoints: list[bytes]
    checkpoint_hashes: list[bytes]
    ckpt_root: bytes
    pseudo_grad: bytes
    error: dict[str, torch.Tensor]
    data_seed: int
    loss: float
    tokens: int


def checkpoint_steps(cfg: RunConfig) -> list[int]:
    """Inner steps at which a round is checkpointed: 0, k, 2k … H."""
    return list(range(0, cfg.inner_steps + 1, cfg.checkpoint_interval))


def train_round(
    model: CausalLM,
    cfg: RunConfig,
    data: Dataset,
    host: str,
    round_: int,
    global_state: dict[str, torch.Tensor],
    error: dict[str, torch.Tensor] | None,
    progress: Progress | None = None,
) -> RoundResult:
    """Train round ``round_`` from ``global_state``; nothing leaves the host here."""
    data_seed = derive_data_seed(cfg.seed, host, round_)
    shard = data.shard_of(cfg.seed, host)
    start = params_of(global_state)
    state = fresh_inner_state(model, cfg, start)
    checkpoints = [encode_state(state.checkpoint())]
    losses: list[float] = []
    started = time.perf_counter()
    tokens_per_step = cfg.batch_size * cfg.seq_len
    while state.step < cfg.inner_steps:
        losses.append(train_step(state, cfg, data, shard, data_seed, round_))
        if state.step % cfg.checkpoint_interval == 0:
            checkpoints.append(encode_state(state.checkpoint()))
        if progress:
            rate = state.step * tokens_per_step / (time.perf_counter() - started)
            progress(state.step, losses[-1], rate)
    delta = pseudo_gradient(start, state.params())
    pseudo_grad, new_error = compress_with_feedback(delta, error, bits_of(cfg.compression))
    hashes = [content_hash(c) for c in checkpoints]
    tail = losses[-max(1, cfg.checkpoint_interval) :]
    return RoundResult(
        checkpoints=checkpoints,
        checkpoint_hashes=hashes,
        ckpt_root=merkle_root(hashes),
        pseudo_grad=pseudo_grad,
        error=new_error,
        data_seed=data_seed,
        loss=sum(tail) / len(tail),
        tokens=cfg.inner_steps * tokens_per_step,
    )

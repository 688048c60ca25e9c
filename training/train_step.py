"""The inner training step, written once: the node trains with it and the verifier replays it.

A checkpoint is the whole inner state at a step: parameters, AdamW moments, the round's step
and AdamW's own step count (above the round's step when moments carry over from the host's last
round: ``start_checkpoint``), encoded canonically. One step is a pure function of (checkpoint,
batch indices, seed): its batch comes from the committed data seed, its learning rate from the
global step. Deterministic mode (``torch.use_deterministic_algorithms``, fixed thread count)
makes replays bit-exact on the same hardware; tolerance mode compares replays by relative L2
distance.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.training.dataset import Dataset
from dilochain.training.diloco import PARAM, all_finite
from dilochain.training.distributed import DataParallel
from dilochain.training.model import CausalLM, build_model, lm_loss, load_params

EXP_AVG, EXP_AVG_SQ, STEP = "exp_avg/", "exp_avg_sq/", "step"  # and PARAM, shared with diloco
ADAM_STEP = "adam_step"  # AdamW's step count (its bias correction): the round's step + carried
BETAS, EPS = (0.9, 0.95), 1e-8


def lr_at(cfg: RunConfig, global_step: int) -> float:
    """Inner learning rate: linear warm-up, then cosine decay to 10% over the whole run."""
    total = cfg.total_rounds * cfg.inner_steps
    if global_step < cfg.warmup_steps:
        return cfg.inner_lr * (global_step + 1) / cfg.warmup_steps
    progress = min(1.0, (global_step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.inner_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass
class InnerState:
    """A model and its AdamW optimizer, at some inner step of a round."""

    model: CausalLM
    optimizer: torch.optim.AdamW
    step: int
    adam_base: int = 0  # AdamW's step count at the round's step 0 (carried moments' count)

    def checkpoint(self) -> dict[str, torch.Tensor]:
        """The canonical checkpoint dict of this state.

        Its tensors are views of the live state (no copy): encode it before the next step.
        """
        zeros = torch.zeros_like
        out: dict[str, torch.Tensor] = {
            STEP: torch.tensor(self.step, dtype=torch.int64),
            ADAM_STEP: torch.tensor(self.adam_base + self.step, dtype=torch.int64),
        }
        for name, p in self.model.named_parameters():
            state = self.optimizer.state.get(p, {})
            out[PARAM + name] = p.detach()
            out[EXP_AVG + name] = state.get("exp_avg", zeros(p)).detach()
            out[EXP_AVG_SQ + name] = state.get("exp_avg_sq", zeros(p)).detach()
        return out

    def params(self) -> dict[str, torch.Tensor]:
        """Just the parameters (on the CPU)."""
        return {n: p.detach().cpu().clone() for n, p in self.model.named_parameters()}


def _optimizer(model: nn.Module, cfg: RunConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.inner_lr, betas=BETAS, eps=EPS,
        weight_decay=cfg.weight_decay, foreach=False,
    )  # fmt: skip


def checkpoint_problem(
    ckpt: dict[str, torch.Tensor], params: dict[str, torch.Tensor], moments: bool = True
) -> str | None:
    """Why ``ckpt`` cannot be an inner checkpoint of a model with ``params`` (None if it can):
    exactly its two step counts (integer scalars) and, for each parameter, a finite
    floating-point tensor of its shape as its value and (with ``moments``) as each AdamW
    moment. Checked before any arithmetic on a checkpoint a host published: torch broadcasts
    mismatched shapes, so two small tensors could make one of their product's size."""
    parts = (PARAM, EXP_AVG, EXP_AVG_SQ) if moments else (PARAM,)
    expected = {prefix + n for prefix in parts for n in params} | {STEP, ADAM_STEP}
    if set(ckpt) != expected:
        return "its tensors are not the run's model's"
    for key in (STEP, ADAM_STEP):
        if ckpt[key].shape != () or ckpt[key].dtype != torch.int64:
            return f"{key} is not an integer scalar"
    for name, value in ckpt.items():
        if name not in (STEP, ADAM_STEP):
            shape = params[name.split("/", 1)[1]].shape
            if value.shape != shape or not value.is_floating_point():
                return f"{name}: {value.dtype}{tuple(value.shape)}, not floating {tuple(shape)}"
            if not all_finite(value):  # NaN compares false with every tolerance
                return f"{name}: not finite"
    return None


def load_inner_state(model: CausalLM, cfg: RunConfig, ckpt: dict[str, torch.Tensor]) -> InnerState:
    """Put a checkpoint into ``model`` (in place) with a matching AdamW state."""
    names = [n for n, _ in model.named_parameters()]
    problem = checkpoint_problem(ckpt, dict(model.named_parameters()))
    if problem is not None:
        raise ValueError(f"checkpoint does not match the run's model: {problem}")
    step, adam_step = int(ckpt[STEP]), int(ckpt[ADAM_STEP])
    if not 0 <= step <= adam_step:
        raise ValueError(f"step {step} and AdamW step count {adam_step} are not "
                         "0 <= step <= count")  # fmt: skip
    load_params(model, {n: ckpt[PARAM + n] for n in names})
    optimizer = _optimizer(model, cfg)
    if adam_step:
        for name, p in model.named_parameters():
            optimizer.state[p] = {
                "step": torch.tensor(float(adam_step)),
                "exp_avg": ckpt[EXP_AVG + name].to(p.device, copy=True),
                "exp_avg_sq": ckpt[EXP_AVG_SQ + name].to(p.device, copy=True),
            }
    return InnerState(model, optimizer, step, adam_step - step)


def start_checkpoint(
    params: dict[str, torch.Tensor], carried: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Checkpoint 0 of a round, defined once for hosts and verifiers: the parameters the round
    starts from, with AdamW's moments and step count taken from ``carried`` (the final
    checkpoint of the host's last round, in a run with ``carry_inner_state``) or zero. Its
    tensors are those of ``params`` and ``carried``, not copies (loading copies them)."""
    out = {STEP: torch.tensor(0, dtype=torch.int64), ADAM_STEP: torch.tensor(0, dtype=torch.int64)}
    if carried is not None:
        out[ADAM_STEP] = carried[ADAM_STEP]
    for name, value in params.items():
        out[PARAM + name] = value
        for moment in (EXP_AVG, EXP_AVG_SQ):
            out[moment + name] = (
                carried[moment + name] if carried is not None else torch.zeros_like(value)
            )
    return out


def fresh_inner_state(
    model: CausalLM, cfg: RunConfig, params: dict[str, torch.Tensor],
    carried: dict[str, torch.Tensor] | None = None,
) -> InnerState:  # fmt: skip
    """Step 0 of a round: ``start_checkpoint(params, carried)`` loaded into ``model``."""
    return load_inner_state(model, cfg, start_checkpoint(params, carried))


def train_step(
    state: InnerState, cfg: RunConfig, data: Dataset, shards: Sequence[int], data_seed: int,
    round_: int, parallel: DataParallel | None = None,
) -> float:  # fmt: skip
    """One inner AdamW step (clipped, scheduled) on the batch the data seed assigns; its loss.
    With ``parallel``, this rank's slice of the batch, gradients averaged over the ranks."""
    device = next(state.model.parameters()).device
    batch = data.batch(shards, data_seed, state.step, cfg.batch_size, cfg.seq_len)
    if parallel is not None:
        batch = parallel.rows(batch)
    for group in state.optimizer.param_groups:
        group["lr"] = lr_at(cfg, round_ * cfg.inner_steps + state.step)
    state.model.train()
    state.optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
        loss = lm_loss(state.model, batch.to(device))
    loss.backward()
    loss = loss.detach().float()
    if parallel is not None:
        parallel.average([p.grad for p in state.model.parameters()] + [loss])
    if cfg.grad_clip > 0:
        nn.utils.clip_grad_norm_(state.model.parameters(), cfg.grad_clip, foreach=False)
    state.optimizer.step()
    state.step += 1
    return float(loss)


def run_segment(
    state: InnerState, cfg: RunConfig, data: Dataset, shards: Sequence[int], data_seed: int,
    round_: int, steps: int,
) -> list[float]:  # fmt: skip
    """``steps`` inner steps from ``state``; the verifier replays a segment with this."""
    return [train_step(state, cfg, data, shards, data_seed, round_) for _ in range(steps)]


EVAL_BATCHES = 4  # held-out batches a round's base global state is evaluated on


@torch.no_grad()
def eval_loss(model: CausalLM, batches: list[torch.Tensor]) -> float:
    """Mean held-out loss."""
    model.eval()
    device = next(model.parameters()).device
    return sum(float(lm_loss(model, b.to(device))) for b in batches) / len(batches)


def timed_steps(cfg: RunConfig, data: Dataset) -> Iterator[float]:
    """Inner steps of the run ``cfg`` on ``data`` from a fresh model, in this process on its
    torch threads, one a ``next``: each step's seconds."""
    model = build_model(cfg.model_config, cfg.seed)
    state = fresh_inner_state(model, cfg, {n: p.detach() for n, p in model.named_parameters()})
    shards = data.shards_of(cfg.seed, "timing")
    while True:
        started = time.perf_counter()
        train_step(state, cfg, data, shards, 0, 0)
        yield time.perf_counter() - started


def seconds_per_step(
    cfg: RunConfig, data: Dataset, threads: int = 1, steps: int = 12, warmup: int = 3
) -> float:
    """The median seconds of one inner step of the run ``cfg`` on ``data`` in this process,
    on ``threads`` torch threads (as a host trains with ``--threads``), from a fresh model."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        times = list(itertools.islice(timed_steps(cfg, data), warmup + steps))
        return statistics.median(times[warmup:])
    finally:
        torch.set_num_threads(before)


def set_deterministic(threads: int) -> None:
    """Make steps bit-exact replays of each other on the same hardware."""
    # cuBLAS is deterministic only with a fixed workspace, chosen before its first call
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)

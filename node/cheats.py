"""Dishonest host behaviours, for the devnet's cheater, the adversarial tests and benchmarks.

Each turns an honest round (or reveal) into a specific cheat the verifiers must catch; ``noisy``
is honest work whose floats differ slightly, as on other hardware, which tolerance mode must
accept. An operator never sets these; ``dilochain node start --behavior`` exists for the demo.
"""

from __future__ import annotations

import torch

from dilochain.node.behaviors import Behavior, Honest, RoundJob
from dilochain.protocol.hashing import content_hash
from dilochain.protocol.merkle import merkle_root
from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.protocol.schedule import derive_data_seed
from dilochain.training.checkpoint_codec import CheckpointEncoding
from dilochain.training.compress import compress, compress_with_feedback, decompress
from dilochain.training.diloco import PARAM, params_of, pseudo_gradient
from dilochain.training.round_work import RoundResult, checkpoint_steps
from dilochain.training.tensor_codec import encode_state
from dilochain.training.train_step import start_checkpoint

NOISE = 1e-6


def _with_checkpoints(result: RoundResult, checkpoints: list[CheckpointEncoding]) -> RoundResult:
    hashes = [c.digest() for c in checkpoints]
    result.checkpoints, result.checkpoint_hashes = checkpoints, hashes
    result.ckpt_root = merkle_root(hashes)
    return result


class RandomPseudoGrad(Honest):
    """Trains, then publishes a random pseudo-gradient of the right scale."""

    name = "random-pg"

    def train(self, job: RoundJob) -> RoundResult:
        result = job.train()
        fake = {
            k: torch.randn_like(v) * float(v.std())
            for k, v in decompress(result.pseudo_grad).items()
        }
        result.pseudo_grad = compress(fake, job.cfg.compression)
        return result


class NoTraining(Honest):
    """Trains nothing: every checkpoint is the round's first, the pseudo-gradient random, the
    loss made up. The cheat that pays (the work is what it skips), caught by the screen: its
    final checkpoint is not at step H (and its pseudo-gradient not the start minus it)."""

    name = "no-training"

    def train(self, job: RoundJob) -> RoundResult:
        cfg = job.cfg
        fake = {k: torch.randn_like(v) * cfg.inner_lr for k, v in job.start.items()}
        pseudo_grad, left = compress_with_feedback(fake, job.residual, cfg.compression)
        first = CheckpointEncoding.of(start_checkpoint(job.start, job.carried))
        result = RoundResult(
            checkpoints=[], checkpoint_hashes=[], ckpt_root=b"", pseudo_grad=pseudo_grad,
            residual=encode_state(left), data_seed=derive_data_seed(cfg.seed, job.host, job.round),
            loss=2.0, tokens=cfg.inner_steps * cfg.batch_size * cfg.seq_len,
        )  # fmt: skip
        return _with_checkpoints(result, [first] * len(checkpoint_steps(cfg)))


class FewerSteps(Honest):
    """Trains half the steps and pads the checkpoints with the last one."""

    name = "fewer-steps"

    def train(self, job: RoundJob) -> RoundResult:
        cfg = job.cfg
        short = RunConfig()
        short.CopyFrom(cfg)
        short.inner_steps = (
            cfg.inner_steps // 2 // cfg.checkpoint_interval * cfg.checkpoint_interval
        )
        result = job.train(cfg=short)
        missing = cfg.inner_steps // cfg.checkpoint_interval + 1 - len(result.checkpoints)
        result.tokens = cfg.inner_steps * cfg.batch_size * cfg.seq_len
        return _with_checkpoints(result, result.checkpoints + [result.checkpoints[-1]] * missing)


class WrongData(Honest):
    """Trains on another host's shard and claims its own data seed."""

    name = "wrong-data"

    def train(self, job: RoundJob) -> RoundResult:
        result = job.train(host=job.host + "-elsewhere")
        result.data_seed = derive_data_seed(job.cfg.seed, job.host, job.round)
        return result


class Noisy(Honest):
    """Honest work whose checkpoints differ by a relative 1e-6, like other hardware's floats
    (its pseudo-gradient and residual follow from its own final checkpoint, as they would)."""

    name = "noisy"

    def train(self, job: RoundJob) -> RoundResult:
        result = job.train()
        generator = torch.Generator().manual_seed(job.round)
        noisy = [result.checkpoints[0]] + [_perturb(c, generator) for c in result.checkpoints[1:]]
        delta = pseudo_gradient(job.start, params_of(noisy[-1].state()))
        result.pseudo_grad, left = compress_with_feedback(delta, job.residual, job.cfg.compression)
        result.residual = encode_state(left)
        return _with_checkpoints(result, noisy)


class BadReveal(Honest):
    """Trains honestly but reveals an end checkpoint it did not commit."""

    name = "bad-reveal"

    def reveal(self, end_hash: bytes) -> bytes | None:
        return content_hash(b"not my checkpoint" + end_hash)


class NoReveal(Honest):
    """Trains honestly but never answers a challenge."""

    name = "no-reveal"

    def reveal(self, end_hash: bytes) -> bytes | None:
        return None


class CopyPseudoGrad(Honest):
    """Publishes another host's pseudo-gradient as its own."""

    name = "copy-pg"

    def train(self, job: RoundJob) -> RoundResult:
        result = job.train()
        result.pseudo_grad = job.peer_pseudo_grad() or result.pseudo_grad
        return result


def _perturb(checkpoint: CheckpointEncoding, generator: torch.Generator) -> CheckpointEncoding:
    state = checkpoint.state()
    for key, value in state.items():
        if key.startswith(PARAM):
            noise = torch.randn(value.shape, generator=generator) * NOISE
            state[key] = value * (1 + noise)
    return CheckpointEncoding.of(state)


BEHAVIORS: dict[str, type[Behavior]] = {
    b.name: b
    for b in (Honest, RandomPseudoGrad, NoTraining, FewerSteps, WrongData, Noisy, BadReveal,
              NoReveal, CopyPseudoGrad)
}  # fmt: skip


def behavior(name: str) -> Behavior:
    """The behaviour called ``name``."""
    return BEHAVIORS[name]()

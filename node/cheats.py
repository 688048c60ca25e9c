"""Dishonest host behaviours, for the devnet's cheater and the adversarial tests.

Each turns an honest round (or reveal) into a specific cheat the verifiers must catch; ``noisy``
is honest work whose floats differ slightly, as on other hardware, which tolerance mode must
accept. An operator never sets these; ``dilochain node start --behavior`` exists for the demo.
"""

from __future__ import annotations

import hashlib

import torch

from dilochain.node.behaviors import Behavior
from dilochain.node.compress import bits_of, compress, decompress
from dilochain.node.data import Corpus
from dilochain.node.diloco import PARAM
from dilochain.node.round_work import RoundResult, train_round
from dilochain.node.tensor_codec import decode_state, encode_state
from dilochain.protocol.merkle import merkle_root
from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.protocol.schedule import derive_data_seed

NOISE = 1e-6


def _with_checkpoints(result: RoundResult, checkpoints: list[bytes]) -> RoundResult:
    hashes = [hashlib.sha256(c).digest() for c in checkpoints]
    result.checkpoints, result.checkpoint_hashes = checkpoints, hashes
    result.ckpt_root = merkle_root(hashes)
    return result


def _perturb(data: bytes, generator: torch.Generator) -> bytes:
    state = decode_state(data)
    for key, value in state.items():
        if key.startswith(PARAM):
            noise = torch.randn(value.shape, generator=generator) * NOISE
            state[key] = value * (1 + noise)
    return encode_state(state)


def cheat_round(
    behavior: Behavior, model, cfg: RunConfig, corpus: Corpus, host: str, round_: int,
    global_state, error, progress=None,
) -> RoundResult:  # fmt: skip
    """The round a host with ``behavior`` commits."""
    if behavior == "fewer-steps":
        short = RunConfig()
        short.CopyFrom(cfg)
        short.inner_steps = (
            cfg.inner_steps // 2 // cfg.checkpoint_interval * cfg.checkpoint_interval
        )
        result = train_round(model, short, corpus, host, round_, global_state, error, progress)
        missing = cfg.inner_steps // cfg.checkpoint_interval + 1 - len(result.checkpoints)
        result.tokens = cfg.inner_steps * cfg.batch_size * cfg.model.context
        return _with_checkpoints(result, result.checkpoints + [result.checkpoints[-1]] * missing)
    if behavior == "wrong-data":
        result = train_round(model, cfg, corpus, host + "-elsewhere", round_, global_state, error,
                             progress)  # fmt: skip
        result.data_seed = derive_data_seed(cfg.seed, host, round_)
        return result
    result = train_round(model, cfg, corpus, host, round_, global_state, error, progress)
    if behavior == "random-pg":
        fake = {
            k: torch.randn_like(v) * float(v.std())
            for k, v in decompress(result.pseudo_grad).items()
        }
        result.pseudo_grad = compress(fake, bits_of(cfg.compression))
    elif behavior == "noisy":
        generator = torch.Generator().manual_seed(round_)
        noisy = [result.checkpoints[0]] + [_perturb(c, generator) for c in result.checkpoints[1:]]
        result = _with_checkpoints(result, noisy)
    return result

"""Screening one commit, far cheaper than replaying it: is its pseudo-gradient the compression of
base - final checkpoint (plus the residual its last round left), and does applying it alone to
the round's base not raise the held-out loss (on a batch drawn from the round's beacon anchor,
unknown while the host trained) by more than the genesis margin? A failed screen only gets every
segment of the commit replayed."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

from dilochain.artifacts.store import ArtifactError, ArtifactStore
from dilochain.protocol.pb.poc.v1.types_pb2 import RoundCommit, RunConfig
from dilochain.training.compress import CompressionError
from dilochain.training.dataset import Dataset
from dilochain.training.model import build_model, lm_loss, load_params
from dilochain.training.tensor_codec import CodecError
from dilochain.verifier.replay import (
    CommitArtifacts,
    Policy,
    artifact_failure,
    host_fault_fails,
    pseudo_grad_mismatch,
)
from dilochain.verifier.verdicts import Verdict

# Held-out windows per loss test, in training batches: enough that an honest round's
# improvement is not lost in sampling noise.
SCREEN_BATCHES = 2


# A round's commits are screened on one held-out batch (drawn from its anchor), and most start
# from one state: a verifier's screens of a round share the model they load each state into
# (one a thread) and the loss before each pseudo-gradient (about a third of a screen's work).
_BASE_LOSSES = 64
_mine = threading.local()
_base_losses: OrderedDict[tuple, float] = OrderedDict()
_base_losses_lock = threading.Lock()


def _loss(model: torch.nn.Module, params: dict[str, torch.Tensor], tokens: torch.Tensor) -> float:
    load_params(model, params)
    with torch.no_grad():
        return float(lm_loss(model, tokens))


def _model(cfg: RunConfig, device: str) -> torch.nn.Module:
    """This thread's model of the run (its weights are whatever was loaded last)."""
    key = (cfg.model_config, cfg.seed, device)
    if getattr(_mine, "key", None) != key:
        _mine.model, _mine.key = build_model(cfg.model_config, cfg.seed).to(device), key
    return _mine.model


def _base_loss(key: tuple, compute: Callable[[], float]) -> float:
    """The held-out loss of a round's start state, computed once for every commit from it."""
    with _base_losses_lock:
        if key in _base_losses:
            _base_losses.move_to_end(key)
            return _base_losses[key]
    loss = compute()
    with _base_losses_lock:
        _base_losses[key] = loss
        while len(_base_losses) > _BASE_LOSSES:
            _base_losses.popitem(last=False)
    return loss


@host_fault_fails
def screen_commit(
    cfg: RunConfig,
    data: Dataset,
    commit: RoundCommit,
    anchor: bytes,
    store: ArtifactStore,
    policy: Policy,
    loss_margin: float,
    device: str = "cpu",
    compute: AbstractContextManager | None = None,
) -> Verdict:
    """Screen a commit; never raises for a host's fault (unavailable or malformed artifacts,
    tensors that do not fit the model), it fails the screen. Its artifacts are fetched to
    disk first; they are decoded and checked within ``compute`` (a slot of the verifier's
    cores and memory: a host that serves its bytes slowly holds no slot another screen could
    use, and a screen waiting for one holds no decoded state)."""
    try:
        CommitArtifacts.warm(store, commit, cfg)
        with compute or nullcontext():
            artifacts = CommitArtifacts.fetch(store, commit, cfg)
            return _screened(cfg, data, commit, anchor, artifacts, policy, loss_margin, device)
    except (ArtifactError, CodecError, CompressionError) as err:
        return artifact_failure(err)


def loss_rise(before: float, after: float) -> float:
    """The held-out loss's relative rise from ``before`` to ``after``: from a loss of zero (a
    state that predicts the batch outright), any rise is infinite and none is zero."""
    if before == 0:
        return math.inf if after > 0 else 0.0
    return (after - before) / before


def _screened(
    cfg: RunConfig, data: Dataset, commit: RoundCommit, anchor: bytes,
    artifacts: CommitArtifacts, policy: Policy, loss_margin: float, device: str,
) -> Verdict:  # fmt: skip
    mismatch = artifacts.final_mismatch(cfg)
    mismatch = mismatch or pseudo_grad_mismatch(artifacts, commit, cfg.compression, policy)
    if mismatch is not None:
        return dataclasses.replace(mismatch, inconsistent=True)
    base_params, pseudo_grad = artifacts.start, artifacts.pseudo_grad
    applied = {n: base_params[n] - pseudo_grad[n].to(base_params[n].dtype) for n in base_params}
    tokens = data.heldout_sample(int.from_bytes(anchor[:8], "big"),
                                   SCREEN_BATCHES * cfg.batch_size, cfg.seq_len)  # fmt: skip
    model, tokens = _model(cfg, device), tokens.to(device)
    start = (hashlib.sha256(cfg.SerializeToString()).digest(), commit.base_hash,
             commit.start_delta_hash, anchor, device)  # fmt: skip
    before = _base_loss(start, lambda: _loss(model, base_params, tokens))
    after = _loss(model, applied, tokens)
    rise = loss_rise(before, after)
    if not rise <= loss_margin:  # a NaN loss (inf - inf in the logits) is no pass either
        return Verdict(False, f"its pseudo-gradient raises the held-out loss by {rise:.1%}", rise)
    return Verdict(True, "pseudo-gradient consistent and held-out loss not raised", rise)

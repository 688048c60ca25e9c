"""Replay fingerprints (verifier/fingerprint.py): every honest replay of a segment fingerprints
the same middle state, and a verifier that does not replay cannot produce it."""

from __future__ import annotations

import pytest
import torch

from dilochain.protocol import verdict as sealing
from dilochain.protocol.verdict import fingerprint_step
from dilochain.training.checkpoint_codec import fetch_checkpoint
from dilochain.training.model import build_model
from dilochain.training.tensor_codec import state_hash
from dilochain.training.train_step import load_inner_state, run_segment
from dilochain.verifier.fingerprint import fingerprint
from dilochain.verifier.lazy import lazy_verdict
from dilochain.verifier.replay import verify_challenge
from dilochain.verifier.testing import publish_round
from tests.test_verifier_replay import CFG, DATA, EXACT, HOST, TOLERANT, base, cheated, honest

__all__ = ["base"]  # the module-scoped fixture


@pytest.fixture(scope="module")
def published(tmp_path_factory, base):
    return base, publish_round(tmp_path_factory.mktemp("round"), CFG, base, honest(base), HOST)


@pytest.mark.parametrize("policy", [EXACT, TOLERANT], ids=["exact", "tolerance"])
def test_replays_agree_and_lazy_guesses_do_not(published, policy):
    _, (store, commit, challenges) = published
    for c in challenges:
        first = verify_challenge(CFG, DATA, commit, c, store, policy)
        second = verify_challenge(CFG, DATA, commit, c, store, policy)
        assert first.passed and sealing.valid_length(first.fingerprint, policy.mode)
        assert first.fingerprint and sealing.agree(first.fingerprint, second.fingerprint,
                                                   policy.mode)  # fmt: skip
        guess = lazy_verdict("always-pass", c, store, policy)
        assert guess.passed and guess.fingerprint
        assert not sealing.agree(guess.fingerprint, first.fingerprint, policy.mode)


def test_exact_fingerprint_is_the_hash_of_the_middle_state(published):
    _, (store, commit, challenges) = published
    c = challenges[1]
    start = fetch_checkpoint(store.get, c.start_hash)
    state = load_inner_state(build_model(CFG.model_config, CFG.seed), CFG, start)
    shards = DATA.shards_of(CFG.seed, commit.host)
    run_segment(state, CFG, DATA, shards, commit.data_seed, commit.round,
                fingerprint_step(CFG.checkpoint_interval))  # fmt: skip
    expected = state_hash(state.checkpoint())
    assert verify_challenge(CFG, DATA, commit, c, store, EXACT).fingerprint == expected
    assert expected not in (c.start_hash, c.end_hash)  # a state nobody published


def test_tolerance_fingerprint_absorbs_replay_noise_not_a_wrong_state(published):
    _, (store, _, challenges) = published
    c = challenges[0]
    start, end = (fetch_checkpoint(store.get, h) for h in (c.start_hash, c.end_hash))
    generator = torch.Generator().manual_seed(0)

    def jitter(state, scale):
        return {k: v + scale * v.abs().mean() * torch.randn(v.shape, generator=generator)
                if v.is_floating_point() else v for k, v in state.items()}  # fmt: skip

    tol = float(TOLERANT.tolerance)
    mark = fingerprint(end, start, c, "tolerance", tol)
    for _ in range(5):  # honest noise: far below the tolerance
        assert sealing.agree(fingerprint(jitter(end, 1e-7), start, c, "tolerance", tol), mark,
                             "tolerance")  # fmt: skip
    assert not sealing.agree(fingerprint(jitter(end, 1e-2), start, c, "tolerance", tol), mark,
                             "tolerance")  # fmt: skip
    # Another challenge draws other projections of the same state.
    other = type(c)(run_id=c.run_id, round=c.round, host=c.host, segment=c.segment + 1)
    assert fingerprint(end, start, other, "tolerance", tol) != mark


def test_honest_replays_of_a_cheat_agree_on_its_failure(tmp_path, base):
    store, commit, challenges = publish_round(tmp_path, CFG, base, cheated("wrong-data", base),
                                              HOST)  # fmt: skip
    for c in challenges:
        a = verify_challenge(CFG, DATA, commit, c, store, TOLERANT)
        b = verify_challenge(CFG, DATA, commit, c, store, TOLERANT)
        assert not a.passed and a.fingerprint
        assert sealing.agree(a.fingerprint, b.fingerprint, "tolerance")


def test_a_replayed_state_too_large_to_fingerprint_fails_the_host():
    """A revealed start (finite, so it fits the model) that sends the replay to weights whose
    projections pass 64 bits (zero start weights: the quantum falls back to the tolerance) is
    a failed verdict on the host, never a verifier that crashes and leaves the challenge
    without votes."""
    from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
    from dilochain.verifier.replay import Verdict, host_fault_fails

    start = {"param/w": torch.zeros(1000)}
    middle = {"param/w": torch.full((1000,), 1e15)}

    @host_fault_fails
    def replayed() -> Verdict:
        mark = fingerprint(middle, start, Challenge(run_id="r", round=1, host="h", segment=1),
                           "tolerance", 1e-4)  # fmt: skip
        return Verdict(True, "replayed", fingerprint=mark)

    verdict = replayed()
    assert not verdict.passed and "does not fit 64 bits" in verdict.reason

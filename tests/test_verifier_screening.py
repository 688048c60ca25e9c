"""Screening one commit against honest rounds and cheats: the pseudo-gradient check catches a
published gradient that is not the host's own work, the loss test one that is consistent but
useless."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import pytest
import torch

from dilochain.artifacts import blob_service
from dilochain.artifacts.blob_service import SERVED_BYTES, PeerFetchingStore, serve_blobs
from dilochain.artifacts.store import ArtifactError, LocalArtifactStore
from dilochain.node.behaviors import RoundJob
from dilochain.node.cheats import CopyPseudoGrad, behavior
from dilochain.protocol.params import PocParams
from dilochain.protocol.pb.poc.v1.types_pb2 import RoundCommit
from dilochain.training.artifact_limits import ArtifactLimits
from dilochain.training.checkpoint_codec import CheckpointEncoding, index_objects
from dilochain.training.compress import compress, decompress, residual_after
from dilochain.training.diloco import PARAM, params_of
from dilochain.training.model import build_model
from dilochain.training.round_work import RoundResult, train_round
from dilochain.training.tensor_codec import decode_state, encode_state
from dilochain.verifier.replay import verify_challenge, warm_challenge
from dilochain.verifier.screening import screen_commit
from dilochain.verifier.testing import publish_round
from tests.test_checkpoint_codec import CountingStore
from tests.test_verifier_replay import CFG, DATA, OTHER, TOLERANT, base, cheated, honest, job

ANCHOR = hashlib.sha256(b"block at the end of the commit window").digest()
MARGIN = float(PocParams().screen_loss_margin)
__all__ = ["base"]  # the module-scoped fixture, shared


def screened(tmp_path, base, result: RoundResult, anchor=ANCHOR):
    store, commit, _ = publish_round(tmp_path, CFG, base, result, "dilo1host")
    return screen_commit(CFG, DATA, commit, anchor, store, TOLERANT, MARGIN)


def test_an_honest_round_passes_and_lowers_the_loss(tmp_path, base):
    verdict = screened(tmp_path, base, honest(base))
    assert verdict.passed, verdict.reason
    assert verdict.distance < 0  # the held-out loss fell


def test_a_screen_reads_no_checkpoint_s_moments(tmp_path, base):
    """A screen reads the final checkpoint's weights (a third of a checkpoint in fp32), never
    its AdamW moments or any other checkpoint: a host publishes those only when a replay
    needs them."""
    result = honest(base)
    _, commit, _ = publish_round(tmp_path, CFG, base, result, "dilo1host")
    store = CountingStore(tmp_path)
    assert screen_commit(CFG, DATA, commit, ANCHOR, store, TOLERANT, MARGIN).passed
    weights, moments, name = result.checkpoints[-1].hashes()
    assert name == commit.final_hash and weights == index_objects(result.checkpoints[-1].index)[0]
    read = set(store.read)
    assert moments not in read and {weights, name} <= read
    others = {h for c in result.checkpoints[:-1] for h in c.hashes()}
    assert not read & others


def test_a_screen_and_a_replay_ask_for_each_object_no_more_than_its_kind_can_take(tmp_path, base):
    """Every object a verifier reads is fetched with its kind's limit (``ArtifactLimits``),
    never the run's largest: a peer answering with junk costs no more than the object."""
    result = honest(base)
    _, commit, challenges = publish_round(tmp_path, CFG, base, result, "dilo1host", round_=2,
                                          residual_in=decode_state(result.residual),
                                          start_delta=result.pseudo_grad)  # fmt: skip

    class Limited(LocalArtifactStore):
        asked: dict[bytes, set] = {}

        def get(self, digest, limit=None):
            self.asked.setdefault(digest, set()).add(limit)
            return super().get(digest, limit)

        def warm(self, digest, limit=None):
            self.asked.setdefault(digest, set()).add(limit)

    store, plain, limits = Limited(tmp_path), LocalArtifactStore(tmp_path), ArtifactLimits.of(CFG)
    screen_commit(CFG, DATA, commit, ANCHOR, store, TOLERANT, MARGIN)
    weights = index_objects(plain.get(commit.final_hash))[0]
    assert store.asked == {
        commit.base_hash: {limits.state}, commit.start_delta_hash: {limits.pseudo_grad},
        commit.pseudo_grad_hash: {limits.pseudo_grad}, commit.residual_in_hash: {limits.residual},
        commit.final_hash: {limits.index}, weights: {limits.weights},
    }  # fmt: skip
    store.asked.clear()
    challenge = challenges[1]
    warm_challenge(CFG, store, commit, challenge, TOLERANT)
    for leaf in (challenge.start_hash, challenge.end_hash):
        leaf_weights, leaf_moments = index_objects(plain.get(leaf))
        assert store.asked[leaf] == {limits.index}
        assert store.asked[leaf_weights] == {limits.weights}
        assert store.asked[leaf_moments] == {limits.moments}
    verify_challenge(CFG, DATA, commit, challenge, store, TOLERANT)  # reads what it warmed
    assert None not in set().union(*store.asked.values())


def test_a_commit_naming_a_large_artifact_as_a_small_one_costs_its_screeners_nothing(
    tmp_path, base
):
    """A hostile commit names the round's base global state (every verifier holds it) as its
    final checkpoint's 64-byte index. Its screen fails, and that is all: the state, too large
    for an index on any disk or peer, was deleted as "damaged" and fetched again from every
    host, each then suspected for an hour of sending junk (a review of the per-kind limits)."""
    _, commit, _ = publish_round(tmp_path / "host", CFG, base, honest(base), "dilo1host")
    servers = [serve_blobs(LocalArtifactStore(tmp_path / "host"), "127.0.0.1:0") for _ in "abc"]
    hosts = [endpoint for _, endpoint in servers]
    local = LocalArtifactStore(tmp_path / "verifier")
    verifier = PeerFetchingStore(local, lambda: hosts, 1 << 30, owner=hosts[0])
    try:
        assert screen_commit(CFG, DATA, commit, ANCHOR, verifier, TOLERANT, MARGIN).passed
        hostile = RoundCommit()
        hostile.CopyFrom(commit)
        hostile.host, hostile.final_hash = "dilo1evil", commit.base_hash
        served = SERVED_BYTES._value.get()
        verdict = screen_commit(CFG, DATA, hostile, ANCHOR, verifier, TOLERANT, MARGIN)
        assert not verdict.passed and "more than the 64 it can be" in verdict.reason
        assert local.has(commit.base_hash) and SERVED_BYTES._value.get() == served
        assert blob_service._suspects.last([*hosts, "next:1"])[-1] == "next:1"  # none suspect
        fresh = PeerFetchingStore(LocalArtifactStore(tmp_path / "fresh"), lambda: hosts, 1 << 30)
        size = local.size(commit.base_hash)
        with pytest.raises(ArtifactError, match=f"{size} bytes, more than the 64 asked for"):
            fresh.warm(commit.base_hash, limit=64)  # held nowhere here: each host says its size
        assert SERVED_BYTES._value.get() == served and not fresh.has(commit.base_hash)
    finally:
        for server, _ in servers:
            server.stop(None)


def test_a_screen_fetches_everything_before_it_takes_a_slot_of_the_cores(tmp_path, base):
    """A host that serves its bytes slowly (or not at all) holds up its own screen only: the
    slot other screens wait for is taken once every artifact is on disk, and only then is
    anything decoded (a screen waiting for the slot holds no model-sized state)."""
    _, commit, _ = publish_round(tmp_path, CFG, base, honest(base), "dilo1host")

    class Warming(CountingStore):
        warmed: list[bytes] = []

        def warm(self, digest: bytes, limit: int | None = None) -> None:
            self.warmed.append(digest)

    store = Warming(tmp_path)
    entered = []

    class Slot:
        def __enter__(self):
            entered.append((len(store.warmed), len(store.read)))

        def __exit__(self, *exc):
            return False

    verdict = screen_commit(CFG, DATA, commit, ANCHOR, store, TOLERANT, MARGIN, "cpu", Slot())
    final = store.read[0]  # the final checkpoint's index, read to name its weights
    assert verdict.passed and entered == [(len(store.warmed), 1)] and final == commit.final_hash
    weights = index_objects(store.get(final))[0]
    assert {commit.base_hash, commit.pseudo_grad_hash, weights} == set(store.warmed)


def test_a_random_or_copied_pseudo_gradient_fails_the_consistency_check(tmp_path, base):
    random_pg = screened(tmp_path / "a", base, cheated("random-pg", base))
    assert not random_pg.passed and "start minus final" in random_pg.reason
    assert random_pg.inconsistent  # any replay of the commit finds it: one segment decides
    skipped = screened(tmp_path / "n", base, cheated("no-training", base))
    assert not skipped.passed and "not at step H" in skipped.reason
    assert skipped.inconsistent
    theirs = honest(base, OTHER)
    mine = CopyPseudoGrad().train(job(base, peer_pseudo_grad=lambda: theirs.pseudo_grad))
    copied = screened(tmp_path / "b", base, mine)
    assert not copied.passed and "start minus final" in copied.reason


def test_a_consistent_but_poisoning_pseudo_gradient_fails_the_loss_test(tmp_path, base):
    """A forger publishes a boosting update (final = 10 x base, Δ = -9 x base) with a final
    checkpoint made to match: consistent, so only the loss test catches it."""
    result = honest(base)
    base_params = params_of(base)
    poison = {name: -9.0 * value for name, value in base_params.items()}
    result.pseudo_grad = compress(poison, CFG.compression)
    final = result.checkpoints[-1].state()
    for name, delta in decompress(result.pseudo_grad).items():
        final[PARAM + name] = base_params[name] - delta
    sent = decompress(result.pseudo_grad)
    result.residual = encode_state(residual_after({n: base_params[n] - final[PARAM + n]
                                                   for n in base_params}, sent))  # fmt: skip
    result.checkpoints[-1] = CheckpointEncoding.of(final)
    result.checkpoint_hashes[-1] = result.checkpoints[-1].digest()
    verdict = screened(tmp_path, base, result)
    assert not verdict.passed and "raises the held-out loss" in verdict.reason
    assert not verdict.inconsistent  # a statistical test: every segment is replayed
    assert verdict.distance > MARGIN


def test_a_round_s_screens_share_the_loss_of_its_start(tmp_path, base, monkeypatch):
    """The held-out loss before a pseudo-gradient is the same for every commit of a round
    from one start state (one batch, drawn from the anchor): computed once, not once a
    commit; another anchor's batch is another loss."""
    from dilochain.verifier import screening

    monkeypatch.setattr(screening, "_base_losses", OrderedDict())  # other tests' screens
    computed, real = [], screening._loss

    def counted(model, params, tokens):
        computed.append(1)
        return real(model, params, tokens)

    monkeypatch.setattr(screening, "_loss", counted)
    first = screened(tmp_path / "a", base, honest(base))
    assert first.passed and len(computed) == 2  # before and after
    assert screened(tmp_path / "b", base, honest(base)).passed and len(computed) == 3
    result = honest(base)
    result.pseudo_grad = compress({n: -2.0 * v for n, v in decompress(result.pseudo_grad).items()},
                                  CFG.compression)  # fmt: skip
    assert not screened(tmp_path / "c", base, result).passed  # inconsistent: no loss asked
    other = screened(tmp_path / "d", base, honest(base), anchor=b"\x02" * 32)
    assert other.passed and len(computed) == 5 and other.distance != first.distance


def test_a_round_s_screens_read_and_check_their_base_once(tmp_path, base, monkeypatch):
    """Most commits of a round build on one global state: the last base decoded and checked is
    kept for the next screen or replay; a base that does not fit the model is refused each
    time, never kept; one with a non-finite value is found however its values sum."""
    import torch

    from dilochain.training.diloco import pseudo_gradient_problem
    from dilochain.verifier import replay

    monkeypatch.setattr(replay, "_last_base", None)
    store, commit, _ = publish_round(tmp_path, CFG, base, honest(base), "dilo1host")
    counting = CountingStore(tmp_path / "artifacts")
    counting.__dict__.update(store.__dict__, read=[])
    for _ in range(2):
        assert screen_commit(CFG, DATA, commit, ANCHOR, counting, TOLERANT, MARGIN).passed
    assert counting.read.count(commit.base_hash) == 1
    name = next(iter(params_of(base)))
    broken = {**base, PARAM + name: torch.full_like(base[PARAM + name], float("nan"))}
    for _ in range(2):
        verdict = screened(tmp_path / "nan", broken, honest(base))
        assert not verdict.passed and "base global state does not fit" in verdict.reason
    huge = {"w": torch.tensor([3e38, 3e38])}  # finite values whose sum is not
    assert pseudo_gradient_problem(huge, huge) is None
    for bad in ([float("inf"), float("-inf")], [1.0, float("nan")]):
        assert pseudo_gradient_problem({"w": torch.tensor(bad)}, huge) == "w: not finite"


def test_missing_artifacts_fail_the_screen(tmp_path, base):
    result = honest(base)
    store, commit, _ = publish_round(tmp_path, CFG, base, result, "dilo1host")
    commit.final_hash = b"\x00" * 32
    verdict = screen_commit(CFG, DATA, commit, ANCHOR, store, TOLERANT, MARGIN)
    assert not verdict.passed and "unavailable" in verdict.reason and not verdict.inconsistent


def _reshaped(state: dict, name: str, shape: tuple[int, ...]) -> dict:
    return {**state, name: state[name].reshape(shape)}


def test_tensors_shaped_to_broadcast_fail_before_any_arithmetic(tmp_path, base):
    """A base global state of one shape and a final checkpoint of another, each no larger
    than honest ones, would broadcast to their product (a verifier killed for memory by a
    commit of a few hundred kB): each is checked against the run's model first."""
    name = next(n for n, v in params_of(base).items() if v.dim() == 2)
    size = params_of(base)[name].numel()
    result = honest(base)
    column = _reshaped(base, PARAM + name, (size, 1))
    verdict = screened(tmp_path / "base", column, result)
    assert not verdict.passed and "base global state does not fit" in verdict.reason, verdict
    final = result.checkpoints[-1].state()
    result.checkpoints[-1] = CheckpointEncoding.of(_reshaped(final, PARAM + name, (1, size)))
    result.checkpoint_hashes[-1] = result.checkpoints[-1].digest()
    verdict = screened(tmp_path / "final", base, result)
    assert not verdict.passed and "final checkpoint does not fit" in verdict.reason, verdict
    # A replay checks the revealed checkpoints the same way, moments included.
    result = honest(base)
    start = result.checkpoints[1].state()
    moment = next(k for k in start if k.startswith("exp_avg/") and start[k].dim() == 2)
    result.checkpoints[1] = CheckpointEncoding.of(_reshaped(start, moment, (1, -1)))
    result.checkpoint_hashes[1] = result.checkpoints[1].digest()
    store, commit, challenges = publish_round(tmp_path / "replay", CFG, base, result, "dilo1host")
    verdict = verify_challenge(CFG, DATA, commit, challenges[1], store, TOLERANT)
    assert not verdict.passed and "checkpoint does not fit" in verdict.reason, verdict


def _second_round(base, residual, cfg=CFG):
    """Round 2 of the host, trained from ``residual`` (its round 1's, or None)."""
    return train_round(
        build_model(cfg.model_config, 0), cfg, DATA, "dilo1host", 2, params_of(base), residual
    )


def test_a_round_is_checked_against_the_residual_its_last_round_left(tmp_path, base):
    first = honest(base, "dilo1host")
    left = decode_state(first.residual)
    assert any(bool(v.abs().sum() > 0) for v in left.values())

    def screen(name, result, residual_in):
        store, commit, _ = publish_round(tmp_path / name, CFG, base, result, "dilo1host", 2,
                                         residual_in)  # fmt: skip
        return screen_commit(CFG, DATA, commit, ANCHOR, store, TOLERANT, MARGIN)

    honest_second = _second_round(base, left)
    assert screen("honest", honest_second, left).passed
    # Dropping what the last round owed (or claiming a residual it did not owe) is caught ...
    ignored = screen("ignored", _second_round(base, None), left)
    assert not ignored.passed and "residual" in ignored.reason
    # ... and so is a committed residual that is not what the pseudo-gradient left.
    inflated = _second_round(base, left)
    inflated.residual = encode_state({k: v * 2 for k, v in decode_state(inflated.residual).items()})
    forged = screen("forged", inflated, left)
    assert not forged.passed and "committed residual" in forged.reason


@pytest.mark.parametrize("compression", ["dct-top4", "dct-sign16"])
def test_dct_rounds_pass_and_a_random_one_fails(tmp_path, base, compression):
    cfg = CFG.__class__()
    cfg.CopyFrom(CFG)
    cfg.compression = compression
    result = train_round(
        build_model(cfg.model_config, 0), cfg, DATA, "dilo1host", 1, params_of(base), None
    )
    assert len(result.pseudo_grad) < len(honest(base).pseudo_grad) / 3
    store, commit, challenges = publish_round(tmp_path, cfg, base, result, "dilo1host")
    assert screen_commit(cfg, DATA, commit, ANCHOR, store, TOLERANT, MARGIN).passed
    assert all(verify_challenge(cfg, DATA, commit, c, store, TOLERANT).passed for c in challenges)
    job_ = RoundJob(
        build_model(cfg.model_config, 0), cfg, DATA, "dilo1host", 1, params_of(base), None
    )
    store, commit, _ = publish_round(tmp_path / "r", cfg, base, behavior("random-pg").train(job_),
                                     "dilo1host")  # fmt: skip
    verdict = screen_commit(cfg, DATA, commit, ANCHOR, store, TOLERANT, MARGIN)
    assert not verdict.passed and "compression" in verdict.reason


def _recompressed(base, result: RoundResult, nudge: float) -> RoundResult:
    """``result`` with its pseudo-gradient the compression of its own target moved by
    ``nudge`` (relative) and the residual that leaves: other bytes, decoding near or far."""
    start = params_of(base)
    final = params_of(result.checkpoints[-1].state())
    target = {n: start[n] - final[n] for n in start}
    gen = torch.Generator().manual_seed(5)
    moved = {n: t + nudge * t.abs().mean() * torch.randn(t.shape, generator=gen)
             for n, t in target.items()}  # fmt: skip
    result.pseudo_grad = compress(moved, CFG.compression)
    result.residual = encode_state(residual_after(target, decompress(result.pseudo_grad)))
    return result


def test_only_bytes_other_than_the_verifier_s_own_compression_are_measured(
    tmp_path, base, monkeypatch
):
    """The usual commit is, byte for byte, the verifier's own compression of its target and
    is passed without decoding it a second time; other bytes (another machine's near-tie) are
    measured against the tolerance, and pass or fail by it."""
    from dilochain.verifier import replay

    measured = []
    real = replay.relative_l2
    monkeypatch.setattr(replay, "relative_l2", lambda a, b: measured.append(real(a, b))
                        or measured[-1])  # fmt: skip
    assert screened(tmp_path / "h", base, honest(base)).passed and measured == []
    near = screened(tmp_path / "n", base, _recompressed(base, honest(base), 1e-6))
    assert near.passed, near.reason
    assert len(measured) == 1 and 0 < measured[0] <= TOLERANT.pseudo_grad_tolerance
    far = screened(tmp_path / "f", base, _recompressed(base, honest(base), 0.5))
    assert not far.passed and "not the compression" in far.reason and far.inconsistent
    assert measured[-1] > TOLERANT.pseudo_grad_tolerance


def test_a_nan_in_the_final_checkpoint_never_vouches_for_a_pseudo_gradient(tmp_path, base):
    """A host trains honestly but publishes its final checkpoint with one NaN in its weights
    and moments, and commits a pseudo-gradient that is not its work (zeros: a free ride) with
    the residual its own machine computes. NaN compares false with every tolerance, so the gap
    (NaN) passed the screen and the last segment's replay: both now fail the host."""
    from dilochain.artifacts.store import LocalArtifactStore
    from dilochain.protocol.merkle import merkle_root
    from dilochain.training.checkpoint_codec import fetch_checkpoint, store_checkpoint

    result = honest(base)
    scratch = LocalArtifactStore(tmp_path / "scratch")
    store_checkpoint(scratch.put_parts, result.checkpoints[-1])
    final = fetch_checkpoint(scratch.get, result.checkpoints[-1].digest())
    for value in final.values():
        if value.is_floating_point():
            value.view(-1)[0] = float("nan")
    result.checkpoints[-1] = CheckpointEncoding.of(final)
    result.checkpoint_hashes[-1] = result.checkpoints[-1].digest()
    result.ckpt_root = merkle_root(result.checkpoint_hashes)
    start = params_of(base)
    target = {n: start[n] - final[PARAM + n] for n in start}
    result.pseudo_grad = compress({n: torch.zeros_like(t) for n, t in start.items()},
                                  CFG.compression)  # fmt: skip
    result.residual = encode_state(residual_after(target, decompress(result.pseudo_grad)))
    store, commit, challenges = publish_round(tmp_path / "p", CFG, base, result, "dilo1host")
    screen = screen_commit(CFG, DATA, commit, ANCHOR, store, TOLERANT, MARGIN)
    assert not screen.passed and "not finite" in screen.reason
    last = verify_challenge(CFG, DATA, commit, challenges[-1], store, TOLERANT)
    assert not last.passed and "not finite" in last.reason


def test_a_held_out_loss_that_is_not_a_number_fails_the_screen(tmp_path, base, monkeypatch):
    """NaN compares false with the margin: a pseudo-gradient whose applied model scores NaN
    (its logits overflowing to inf - inf) must fail the loss test, not pass it."""
    from dilochain.verifier import screening

    monkeypatch.setattr(screening, "_loss", lambda *args: float("nan"))
    verdict = screened(tmp_path, base, honest(base), anchor=b"\x09" * 32)
    assert not verdict.passed and "raises the held-out loss" in verdict.reason


def test_a_rise_from_a_held_out_loss_of_zero_fails_and_no_rise_passes(tmp_path, base, monkeypatch):
    """A start state that predicts the held-out batch outright (a loss of exactly 0) must not
    end the screen in a division by zero (no vote): any rise from it fails, none passes."""
    from dilochain.verifier import screening

    assert screening.loss_rise(2.0, 2.1) == pytest.approx(0.05)
    assert screening.loss_rise(0.0, 0.0) == 0.0
    losses = iter([0.0, 1e-6])  # before, then after
    monkeypatch.setattr(screening, "_loss", lambda *args: next(losses))
    verdict = screened(tmp_path, base, honest(base), anchor=b"\x0a" * 32)
    assert not verdict.passed and "raises the held-out loss by inf%" in verdict.reason

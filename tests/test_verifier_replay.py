"""The verifier's check of one challenge, against honest rounds and each kind of cheat."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from dilochain.node.behaviors import RoundJob
from dilochain.node.cheats import BEHAVIORS, CopyPseudoGrad, behavior
from dilochain.node.config import BEHAVIOR_NAMES, NodeConfig
from dilochain.protocol.merkle import merkle_root
from dilochain.protocol.params import PocParams
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, Params, RunConfig
from dilochain.testutil import safetensors_declaring, shipped_data
from dilochain.training.checkpoint_codec import CheckpointEncoding, index_objects, store_checkpoint
from dilochain.training.compress import compress, decompress
from dilochain.training.dataset import DataError, Dataset
from dilochain.training.diloco import initial_global, params_of, relative_l2, round_start
from dilochain.training.model import build_model
from dilochain.training.round_work import train_round
from dilochain.training.run_config import make_run_config
from dilochain.training.tensor_codec import CodecError, decode_state
from dilochain.training.train_step import ADAM_STEP, EXP_AVG, EXP_AVG_SQ, STEP, set_deterministic
from dilochain.verifier.replay import (
    Policy,
    Verdict,
    host_fault_fails,
    verify_challenge,
)
from dilochain.verifier.testing import publish_round

DATA, PINS = shipped_data()
CFG = make_run_config(PINS, "tiny")
HOST, OTHER = "dilo1honest", "dilo1other"
EXACT = Policy("exact", 1e-4, 1e-3)
TOLERANT = Policy("tolerance", 1e-4, 1e-3)
set_deterministic(1)


@pytest.fixture(scope="module")
def base():
    model = build_model(CFG.model_config, CFG.seed)
    return initial_global({n: p.detach().clone() for n, p in model.named_parameters()})


def verdicts(tmp_path, base, result, policy, host=HOST):
    store, commit, challenges = publish_round(tmp_path, CFG, base, result, host)
    return [verify_challenge(CFG, DATA, commit, c, store, policy) for c in challenges]


def honest(base, host=HOST):
    return train_round(build_model(CFG.model_config, 0), CFG, DATA, host, 1, params_of(base), None)


def job(base, **kw) -> RoundJob:
    return RoundJob(
        build_model(CFG.model_config, 0), CFG, DATA, HOST, 1, params_of(base), None, **kw
    )


def cheated(name: str, base):
    return behavior(name).train(job(base))


def test_every_named_behavior_exists_and_honest_is_the_default():
    assert set(BEHAVIORS) == set(BEHAVIOR_NAMES)
    assert NodeConfig.model_fields["behavior"].default == "honest"
    assert behavior("honest").reveal(b"h") == b"h" and behavior("no-reveal").reveal(b"h") is None


def test_honest_round_passes_in_both_modes(tmp_path, base):
    result = honest(base)
    for policy in (EXACT, TOLERANT):
        assert all(v.passed for v in verdicts(tmp_path, base, result, policy)), policy


@pytest.mark.parametrize("name", ["random-pg", "no-training", "fewer-steps", "wrong-data"])
def test_cheats_fail_every_segment_they_touch(tmp_path, base, name):
    result = cheated(name, base)
    found = verdicts(tmp_path, base, result, TOLERANT)
    assert not all(v.passed for v in found), [v.reason for v in found]
    if name != "fewer-steps":  # the short cheat's first segments are honest work
        assert not any(v.passed for v in found)


def test_copied_pseudo_gradient_fails(tmp_path, base):
    theirs = honest(base, OTHER)
    mine = CopyPseudoGrad().train(job(base, peer_pseudo_grad=lambda: theirs.pseudo_grad))
    found = verdicts(tmp_path, base, mine, TOLERANT)
    assert not any(v.passed for v in found)
    assert all("pseudo-gradient" in v.reason for v in found)


def test_noisy_floats_pass_tolerance_but_not_exact(tmp_path, base):
    result = cheated("noisy", base)
    tolerant = verdicts(tmp_path / "t", base, result, TOLERANT)
    assert all(v.passed for v in tolerant), [v.reason for v in tolerant]
    assert all(0 < v.distance < TOLERANT.tolerance for v in tolerant)
    assert not all(v.passed for v in verdicts(tmp_path / "e", base, result, EXACT))


def test_moments_crafted_to_steer_the_next_segment_fail_tolerance_mode(tmp_path, base):
    """The next segment replays from the moments a checkpoint reveals: moments crafted to
    inject a step (a second moment near zero) agree with every replay of that next segment, so
    the replay of the segment that ends there compares them, each within its own tolerance."""
    result = honest(base)
    state = result.checkpoints[1].state()
    crafted = {k: v * 1e-6 if k.startswith(EXP_AVG_SQ) else v for k, v in state.items()}
    slightly = {k: v * (1 + 1e-3) if k.startswith(EXP_AVG) else v for k, v in state.items()}
    for name, forged, passed in (("crafted", crafted, False), ("slightly", slightly, True)):
        encoding = CheckpointEncoding.of(forged)
        result.checkpoints[1], result.checkpoint_hashes[1] = encoding, encoding.digest()
        result.ckpt_root = merkle_root(result.checkpoint_hashes)
        first = verdicts(tmp_path / name, base, result, TOLERANT)[0]
        assert first.passed == passed, (name, first.reason)
        if not passed:
            assert "AdamW moments are not the replay's" in first.reason
            assert first.distance > 0.99  # the second moment, all but gone


def test_missing_artifact_fails(tmp_path, base):
    store, commit, challenges = publish_round(tmp_path, CFG, base, honest(base), HOST)
    challenges[0].end_hash = b"\x07" * 32
    verdict = verify_challenge(CFG, DATA, commit, challenges[0], store, TOLERANT)
    assert not verdict.passed and "unavailable" in verdict.reason


def test_relative_l2():

    a = {"w": torch.ones(4)}
    assert relative_l2(a, a) == 0
    assert abs(relative_l2({"w": torch.ones(4) * 1.1}, a) - 0.1) < 1e-6
    # a NaN or an infinity is never within a tolerance (NaN > tolerance is False)
    for bad in (float("nan"), float("inf")):
        assert relative_l2({"w": torch.tensor([1.0, bad, 1.0, 1.0])}, a) == math.inf
        assert relative_l2(a, {"w": torch.tensor([1.0, bad, 1.0, 1.0])}) == math.inf
    assert decompress(compress(a, "int8"))["w"].allclose(a["w"])


@pytest.mark.parametrize("shape", [(1 << 63,), (1 << 40,) * 20, (1 << 31, 1 << 31), (2,)])
def test_declared_shapes_are_checked_before_allocating(shape):
    with pytest.raises(CodecError):
        decode_state(safetensors_declaring(shape))


def test_crafted_checkpoints_fail_the_host_not_the_verifier(tmp_path, base):
    result = honest(base)
    store, commit, challenges = publish_round(tmp_path, CFG, base, result, HOST)
    first = result.checkpoints[0]
    two_steps = CheckpointEncoding.of({**first.state(), STEP: torch.tensor([0, 0])})
    store_checkpoint(store.put_parts, two_steps)
    weights, moments = index_objects(first.index)
    crafted = [
        two_steps.digest(),
        store.put(bytes(first.weights)),  # not an index
        store.put(weights + weights),  # weights where its moments belong
        *(store.put(store.put(safetensors_declaring(shape)) + moments)
          for shape in ((1 << 63,), (1 << 40,) * 20)),
    ]  # fmt: skip
    for leaf in crafted:
        challenge = Challenge()
        challenge.CopyFrom(challenges[0])
        challenge.start_hash = leaf
        verdict = verify_challenge(CFG, DATA, commit, challenge, store, TOLERANT)
        assert not verdict.passed and verdict.reason, verdict


def test_a_replay_that_trips_on_a_host_s_bytes_fails_the_host(tmp_path, base, monkeypatch):
    """Whatever the host's bytes make the replay raise (a ValueError from a tensor that does
    not fit, beyond what the decoding checks catch) is a failed verdict, never an exception that
    leaves the host unjudged (a review found the guard moved off ``verify_challenge``)."""
    from dilochain.verifier import replay

    store, commit, challenges = publish_round(tmp_path, CFG, base, honest(base), HOST)

    def trips(*args, **kwargs):
        raise ValueError("a tensor of the host's that does not fit")

    monkeypatch.setattr(replay, "run_segment", trips)
    verdict = verify_challenge(CFG, DATA, commit, challenges[1], store, TOLERANT)
    assert not verdict.passed and "does not fit" in verdict.reason


def test_bf16_runs_train_under_autocast_and_replay_with_the_run_s_precision(tmp_path, base):
    bf16 = make_run_config(PINS, "tiny", precision="bf16")
    result = train_round(
        build_model(bf16.model_config, 0), bf16, DATA, HOST, 1, params_of(base), None
    )
    assert result.ckpt_root != honest(base).ckpt_root  # the precision changes the numbers
    store, commit, challenges = publish_round(tmp_path, bf16, base, result, HOST)
    for policy in (EXACT, TOLERANT):  # same machine, same precision: bit-exact
        assert all(verify_challenge(bf16, DATA, commit, c, store, policy).passed
                   for c in challenges), policy  # fmt: skip
    # A verifier replaying in float32 is not replaying the run: the segment does not match.
    assert not any(verify_challenge(CFG, DATA, commit, c, store, EXACT).passed
                   for c in challenges)  # fmt: skip


def test_the_verifier_s_own_broken_data_is_never_the_host_s_fault(tmp_path, base):
    store, commit, challenges = publish_round(tmp_path / "store", CFG, base, honest(base), HOST)
    copy = shutil.copytree(DATA.root, tmp_path / "data")
    shard = DATA.manifest.shards[DATA.shards_of(CFG.seed, HOST)[0]]
    (copy / shard.file).write_bytes((copy / shard.file).read_bytes()[:-2])  # truncated
    broken = Dataset(copy, PINS.manifest_hash, PINS.tokenizer_hash)
    with pytest.raises(DataError, match=f"{shard.file}: .* bytes; the manifest says"):
        verify_challenge(CFG, broken, commit, challenges[0], store, TOLERANT)


def test_bf16_runs_are_judged_with_their_own_tolerance():
    genesis = PocParams()
    queried = Params(**genesis.model_dump(mode="json"))  # what a verifier gets from the chain
    for params in (genesis, queried):
        assert Policy.for_run(params, "fp32").tolerance == 1e-4
        assert Policy.for_run(params, "bf16").tolerance == 2e-3


def test_an_overlapped_round_is_replayed_from_the_base_stepped_by_the_hosts_own_step(
    tmp_path, base
):
    """In an overlapped run a round starts from ``round_start``: the base global state stepped
    by the host's own last pseudo-gradient. The verifier derives that start from the commit; a
    host that trains from the base itself (the stale start) fails every segment."""
    cfg = RunConfig()
    cfg.CopyFrom(CFG)
    cfg.overlap = True
    own = honest(base).pseudo_grad  # the host's round 0 pseudo-gradient, as published
    start = round_start(base, decompress(own), cfg.outer_lr, cfg.outer_momentum)
    assert relative_l2(start, params_of(base)) > 1e-3
    model = build_model(cfg.model_config, 0)
    for name, origin, passed in (("eager", start, True), ("stale", params_of(base), False)):
        result = train_round(model, cfg, DATA, HOST, 1, origin, None)
        store, commit, challenges = publish_round(tmp_path / name, cfg, base, result, HOST,
                                                  start_delta=own)  # fmt: skip
        found = [verify_challenge(cfg, DATA, commit, c, store, EXACT) for c in challenges]
        assert [v.passed for v in found] == [passed] * len(found), [v.reason for v in found]
    assert "did not start from the global state" in found[0].reason
    assert "not the compression of start minus final" in found[-1].reason


def test_a_round_with_carried_moments_is_replayed_from_its_last_round_s_final_checkpoint(
    tmp_path, base
):
    """With ``carry_inner_state`` checkpoint 0 holds the AdamW moments and step count of the
    host's last final checkpoint (the commit's ``inner_in_hash``). An honest round passes; one
    that restarts AdamW, or forges the moments it carries, replays consistently from its own
    checkpoint 0, so only the check of segment 0's start catches it."""
    cfg = CFG
    assert cfg.carry_inner_state  # runs carry the moments by default
    model = build_model(cfg.model_config, 0)
    first = train_round(model, cfg, DATA, HOST, 0, params_of(base), None)
    carried = first.checkpoints[-1].state()
    assert int(carried[ADAM_STEP]) == cfg.inner_steps
    forged = {k: v * 2 if k.startswith("exp_avg/") else v for k, v in carried.items()}
    cases = (("honest", carried, True, ""), ("reset", None, False, "AdamW step count is 0, not 8"),
             ("forged", forged, False, "did not start from the AdamW moments"))  # fmt: skip
    results = {}
    for name, moments, passed, reason in cases:
        result = results[name] = train_round(model, cfg, DATA, HOST, 1, params_of(base), None,
                                             moments)  # fmt: skip
        final = result.checkpoints[-1].state()
        assert int(final[ADAM_STEP]) == (2 if moments is not None else 1) * cfg.inner_steps
        store, commit, challenges = publish_round(tmp_path / name, cfg, base, result, HOST,
                                                  carried=carried)  # fmt: skip
        for policy in (EXACT, TOLERANT):
            found = [verify_challenge(cfg, DATA, commit, c, store, policy) for c in challenges]
            assert found[0].passed == passed and reason in found[0].reason, found[0].reason
            assert all(v.passed for v in found[1:]), [v.reason for v in found]
    assert results["reset"].checkpoint_hashes[1] != results["honest"].checkpoint_hashes[1]


@pytest.mark.parametrize(
    "failure",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 17179869184 bytes"
        ),
        OSError(28, "No space left on device"),
        DataError("shard-0 is damaged"),
    ],
)
def test_the_verifier_s_own_failings_are_no_verdict_on_the_host(failure):
    """Memory, device, disk and data of the verifier's own are raised (no vote; asked again
    next pass), never a failed verdict that would slash an honest host."""

    @host_fault_fails
    def check() -> Verdict:
        raise failure

    with pytest.raises(type(failure)):
        check()


def test_bytes_that_do_not_fit_the_model_are_the_host_s_fault():
    @host_fault_fails
    def check() -> Verdict:
        raise RuntimeError("The size of tensor a (4) must match the size of tensor b (5)")

    verdict = check()
    assert not verdict.passed and "does not fit the run's model" in verdict.reason

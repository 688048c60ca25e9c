"""Checking one challenge: check a round's checkpoint 0 against what it must start from (segment 0),
replay the segment from its revealed start checkpoint, fingerprint the state at its middle step
(``verifier/fingerprint.py``), compare the result with the revealed end checkpoint, and check the
committed pseudo-gradient and residual against the round's base and final checkpoint. The step
code is the node's (``training.train_step``)."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dilochain.artifacts.store import ArtifactError, ArtifactStore, PeerUnreachable
from dilochain.protocol.hashing import content_hash
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, RoundCommit, RunConfig
from dilochain.protocol.verdict import fingerprint_step
from dilochain.training.artifact_limits import ArtifactLimits
from dilochain.training.checkpoint_codec import checkpoint_leaf, fetch_checkpoint, index_objects
from dilochain.training.compress import (
    RESIDUAL_DTYPE,
    CompressionError,
    compress,
    decompress,
    feedback_target,
    residual_after,
)
from dilochain.training.dataset import DataError, Dataset
from dilochain.training.diloco import (
    PARAM,
    global_state_problem,
    params_of,
    part_of,
    pseudo_gradient,
    pseudo_gradient_problem,
    relative_l2,
    round_start,
)
from dilochain.training.model import build_model, reference_params
from dilochain.training.tensor_codec import CodecError, decode_state, state_hash
from dilochain.training.train_step import (
    ADAM_STEP,
    EXP_AVG,
    EXP_AVG_SQ,
    STEP,
    InnerState,
    checkpoint_problem,
    load_inner_state,
    run_segment,
    start_checkpoint,
)
from dilochain.verifier.fingerprint import fingerprint
from dilochain.verifier.verdicts import Verdict


def artifact_failure(err: Exception) -> Verdict:
    """The verdict on a commit whose artifacts could not be had or decoded (unavailable when
    a peer could not be reached and none sent bad bytes: a host restarting is asked again)."""
    return Verdict(False, f"artifact unavailable or malformed: {err}",
                   unavailable=isinstance(err, PeerUnreachable))  # fmt: skip


# Relative L2 distance allowed, in tolerance mode, between each AdamW moment of a replayed and
# of a revealed end checkpoint. Looser than the parameters' tolerance: a moment is a running
# average of gradients, whose relative noise across kernels is that of a gradient, while a
# segment moves the parameters by a small fraction of their norm. A moment off by 5% changes an
# AdamW step by a few percent at most, while moments crafted to inject a step (an exp_avg_sq
# near zero, an exp_avg of the host's choosing) are off by far more.
MOMENT_TOLERANCE = 0.05


@dataclass(frozen=True)
class Policy:
    """How strictly replays are compared (from genesis params)."""

    mode: str  # "exact" or "tolerance"
    tolerance: float
    pseudo_grad_tolerance: float
    moment_tolerance: float = MOMENT_TOLERANCE

    @classmethod
    def for_run(cls, params, precision: str) -> Policy:
        """The chain's policy for a run of ``precision`` (``params``: the chain's ``Params``
        message or genesis ``PocParams``): bf16 runs have their own tolerance."""
        tolerance = params.tolerance_bf16 if precision == "bf16" else params.tolerance
        return cls(params.verification_mode, float(tolerance), float(params.pseudo_grad_tolerance))


_OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "cuda error", "cublas_status")


def local_failure(err: BaseException) -> bool:
    """Whether ``err`` is this machine failing, not the bytes it was given: memory (torch's
    OutOfMemoryError and the CPU allocator's failure are RuntimeErrors), the device."""
    return isinstance(err, torch.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and any(s in str(err).lower() for s in _OUT_OF_MEMORY)
    )


def host_fault_fails(check: Callable[..., Verdict]) -> Callable[..., Verdict]:
    """Bytes that decode but are not a checkpoint of the run's model (a step tensor of two
    elements, wrong shapes…) are the host's fault: a failed verdict, never the verifier's crash.
    The verifier's own failings are not the host's fault, and are raised: its data
    (:class:`DataError`), its memory or device (:func:`local_failure`), its disk (OSError)."""

    @functools.wraps(check)
    def guarded(*args, **kwargs) -> Verdict:
        try:
            return check(*args, **kwargs)
        except DataError:
            raise
        except (ValueError, TypeError, RuntimeError, KeyError, IndexError, OverflowError) as err:
            if local_failure(err):
                raise
            return Verdict(False, f"checkpoint does not fit the run's model: {err}")

    return guarded


def _refuse(problem: str | None, what: str) -> None:
    if problem is not None:
        raise CodecError(f"{what} does not fit the run's model: {problem}")


def fetch_fitting(store: ArtifactStore, leaf: bytes, cfg: RunConfig) -> dict[str, torch.Tensor]:
    """Checkpoint ``leaf`` whole, checked to fit the run's model (CodecError otherwise)."""
    like = reference_params(cfg.model_config)
    checkpoint = fetch_checkpoint(store.get, leaf, like=like)
    _refuse(checkpoint_problem(checkpoint, like), "checkpoint")
    return checkpoint


# The last base global state decoded and checked, by (hash, model config): a round's commits,
# screened and replayed one after another, mostly build on one state. One is kept (at 8B it is
# 64 GB), and it is dropped before another is decoded; its tensors are only read.
_last_base: tuple[tuple[bytes, str], dict[str, torch.Tensor]] | None = None
_last_base_lock = threading.Lock()


def _checked_base(
    store: ArtifactStore, digest: bytes, cfg: RunConfig, like: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Global state ``digest``, decoded and checked to fit the run's model (CodecError
    otherwise), from the last one kept if it is that one."""
    global _last_base
    key = (digest, cfg.model_config)
    with _last_base_lock:
        if _last_base is not None and _last_base[0] == key:
            return _last_base[1]
        _last_base = None
    base = decode_state(store.get(digest, limit=ArtifactLimits.of(cfg).state), like)
    _refuse(global_state_problem(base, like), "base global state")
    with _last_base_lock:
        _last_base = (key, base)
    return base


@dataclass(frozen=True)
class CommitArtifacts:
    """What a commit's consistency is checked on: the parameters the host's round started from
    (``diloco.round_start`` of its base global state), its final checkpoint's weights (steps
    and parameters, without the moments), its pseudo-gradient (decoded) and the residual it
    started from."""

    start: dict[str, torch.Tensor]
    final: dict[str, torch.Tensor]
    pseudo_grad: dict[str, torch.Tensor]
    residual_in: dict[str, torch.Tensor] | None

    @staticmethod
    def warm(store: ArtifactStore, commit: RoundCommit, cfg: RunConfig) -> None:
        """Have every object :meth:`fetch` reads on disk, fetched without decoding any (the
        final checkpoint's index is read to name its weights), each no larger than its kind
        can be; raises ArtifactError or CodecError."""
        limits = ArtifactLimits.of(cfg)
        named = [(commit.base_hash, limits.state), (commit.start_delta_hash, limits.pseudo_grad),
                 (commit.pseudo_grad_hash, limits.pseudo_grad),
                 (commit.residual_in_hash, limits.residual)]  # fmt: skip
        for digest, limit in named:
            if digest:
                store.warm(digest, limit=limit)
        weights = index_objects(store.get(commit.final_hash, limit=limits.index))[0]
        store.warm(weights, limit=limits.weights)

    @classmethod
    def fetch(cls, store: ArtifactStore, commit: RoundCommit, cfg: RunConfig) -> CommitArtifacts:
        """Fetch and decode them, the states arithmetic starts from here checked to fit the
        run's model first (the pseudo-gradients are, as they are decoded; the residual is, by
        :func:`pseudo_grad_mismatch`, before it is used); raises ArtifactError, CodecError or
        CompressionError."""
        like = reference_params(cfg.model_config)  # names and shapes: what every state must fit
        limits = ArtifactLimits.of(cfg)

        def compressed(digest: bytes) -> dict[str, torch.Tensor]:
            return decompress(store.get(digest, limit=limits.pseudo_grad), like, cfg.compression)

        residual_hash, delta_hash = commit.residual_in_hash, commit.start_delta_hash
        base = _checked_base(store, commit.base_hash, cfg, like)
        own = compressed(delta_hash) if delta_hash else None
        final = fetch_checkpoint(store.get, commit.final_hash, moments=False, like=like)
        _refuse(checkpoint_problem(final, like, moments=False), "final checkpoint")
        residual = store.get(residual_hash, limit=limits.residual) if residual_hash else None
        return cls(
            start=round_start(base, own, cfg.outer_lr, cfg.outer_momentum),
            final=final,
            pseudo_grad=compressed(commit.pseudo_grad_hash),
            residual_in=decode_state(residual, like) if residual is not None else None,
        )

    def final_mismatch(self, cfg: RunConfig) -> Verdict | None:
        """A failed verdict if the final checkpoint is not at step H, else None."""
        if int(self.final.get(STEP, torch.tensor(-1))) != cfg.inner_steps:
            return Verdict(False, "final checkpoint is not at step H")
        return None


def warm_challenge(
    cfg: RunConfig, store: ArtifactStore, commit: RoundCommit, challenge: Challenge,
    policy: Policy,
) -> None:  # fmt: skip
    """Have on disk every object :func:`verify_challenge` reads, fetched without decoding
    any: the revealed start checkpoint and (in tolerance mode) end, for a segment 0 the final
    checkpoint its moments continue, and the commit's artifacts. Raises ArtifactError or
    CodecError. Done before a replay takes a slot of the verifier's cores, so a host serving
    its checkpoints slowly holds no slot another replay could use. Nothing for a challenge
    that reveals another final checkpoint than its commit's: the replay fails it at once."""
    if challenge.final_hash != commit.final_hash:
        return
    leaves = [challenge.start_hash]
    leaves += [] if policy.mode == "exact" else [challenge.end_hash]
    leaves += [commit.inner_in_hash] if challenge.segment == 0 and commit.inner_in_hash else []
    limits = ArtifactLimits.of(cfg)
    for leaf in leaves:
        weights, moments = index_objects(store.get(leaf, limit=limits.index))
        store.warm(weights, limit=limits.weights)
        store.warm(moments, limit=limits.moments)
    CommitArtifacts.warm(store, commit, cfg)


@host_fault_fails
def verify_challenge(
    cfg: RunConfig,
    data: Dataset,
    commit: RoundCommit,
    challenge: Challenge,
    store: ArtifactStore,
    policy: Policy,
    device: str = "cpu",
    roster: Sequence[str] = (),
) -> Verdict:
    """Re-execute a challenged segment on ``device``, on the data shards the round's
    ``roster`` (empty: the host alone) gave the host; never raises for a host's fault, it fails
    the host."""
    k = cfg.checkpoint_interval
    try:
        start = fetch_fitting(store, challenge.start_hash, cfg)
        # exact mode compares the replay's name with the revealed one: no bytes needed
        exact = policy.mode == "exact"
        end = None if exact else fetch_fitting(store, challenge.end_hash, cfg)
        if challenge.final_hash != commit.final_hash:
            return Verdict(False, "revealed final checkpoint is not the committed one")
        artifacts = CommitArtifacts.fetch(store, commit, cfg)
    except (ArtifactError, CodecError, CompressionError) as err:
        return artifact_failure(err)
    if int(start.get(STEP, torch.tensor(-1))) != challenge.segment * k:
        return Verdict(False, "start checkpoint is not at the segment's first step")
    if (mismatch := artifacts.final_mismatch(cfg)) is not None:
        return mismatch
    model = build_model(cfg.model_config, cfg.seed).to(device)
    try:
        state = load_inner_state(model, cfg, start)
    except ValueError as err:
        return Verdict(False, str(err))
    if challenge.segment == 0:
        try:
            inner_in = commit.inner_in_hash
            carried = fetch_fitting(store, inner_in, cfg) if inner_in else None
        except (ArtifactError, CodecError) as err:
            return artifact_failure(err)
        if (mismatch := start_mismatch(start, artifacts.start, carried, policy)) is not None:
            return mismatch
    shards = data.shards_of(cfg.seed, commit.host, roster)
    middle = fingerprint_step(k)
    run_segment(state, cfg, data, shards, commit.data_seed, commit.round, middle)
    mark = fingerprint(_on_cpu(state), start, challenge, policy.mode, policy.tolerance)
    run_segment(state, cfg, data, shards, commit.data_seed, commit.round, k - middle)
    verdict = _compare(_on_cpu(state), end, challenge, policy)
    if verdict.passed:
        mismatch = pseudo_grad_mismatch(artifacts, commit, cfg.compression, policy)
        verdict = mismatch or verdict
    return dataclasses.replace(verdict, fingerprint=mark)


def start_mismatch(
    revealed: dict[str, torch.Tensor], params: dict[str, torch.Tensor],
    carried: dict[str, torch.Tensor] | None, policy: Policy,
) -> Verdict | None:  # fmt: skip
    """A failed verdict unless a round's revealed checkpoint 0 is ``start_checkpoint`` of the
    parameters it must start from and of ``carried``, the final checkpoint of the host's last
    round the chain names (``RoundCommit.inner_in_hash``; None: zero moments): the same AdamW
    step count, and parameters and each moment within the replay tolerance (0 when exact)."""
    expected = start_checkpoint(params, carried)
    got, want = int(revealed[ADAM_STEP]), int(expected[ADAM_STEP])
    if got != want:
        return Verdict(False, f"round's AdamW step count is {got}, not {want} as its host's "
                              "last round left")  # fmt: skip
    limit = 0.0 if policy.mode == "exact" else policy.tolerance
    moments = "round did not start from the AdamW moments its host's last round left"
    for prefix, problem in ((PARAM, "round did not start from the global state"),
                            (EXP_AVG, moments), (EXP_AVG_SQ, moments)):  # fmt: skip
        gap = relative_l2(part_of(revealed, prefix), part_of(expected, prefix))
        if gap > limit:
            return Verdict(False, problem, gap)
    return None


def _on_cpu(state: InnerState) -> dict[str, torch.Tensor]:
    return {name: t.cpu() for name, t in state.checkpoint().items()}


def _compare(
    replayed: dict[str, torch.Tensor], revealed: dict[str, torch.Tensor] | None,
    challenge: Challenge, policy: Policy,
) -> Verdict:  # fmt: skip
    distance = moments = 0.0
    if policy.mode == "exact":
        if checkpoint_leaf(replayed) != challenge.end_hash:
            return Verdict(False, "replayed segment does not match the revealed end checkpoint")
    else:
        if revealed is None or set(revealed) != set(replayed):
            return Verdict(False, "revealed end checkpoint's tensors are not the model's")
        for key in (STEP, ADAM_STEP):
            if int(revealed[key]) != int(replayed[key]):
                return Verdict(False, f"revealed end checkpoint's {key} is not the replay's")
        distance = relative_l2(params_of(replayed), params_of(revealed))
        if distance > policy.tolerance:
            return Verdict(False, "replayed segment is too far from the revealed end", distance)
        # The next segment replays from these moments as revealed: crafted ones would steer
        # its steps while every replay of it agreed.
        moments = max(relative_l2(part_of(revealed, moment), part_of(replayed, moment))
                      for moment in (EXP_AVG, EXP_AVG_SQ))  # fmt: skip
        if moments > max(policy.moment_tolerance, policy.tolerance):
            return Verdict(False, "revealed end checkpoint's AdamW moments are not the replay's",
                           moments)  # fmt: skip
    return Verdict(True, "segment replayed and pseudo-gradient consistent", distance,
                   moment_distance=moments)  # fmt: skip


def pseudo_grad_mismatch(
    artifacts: CommitArtifacts, commit: RoundCommit, compression: str, policy: Policy
) -> Verdict | None:
    """A failed verdict unless the committed pseudo-gradient is the run's compression of
    Δ = start - final checkpoint plus the residual the host's last round left (within the
    tolerance, for floating-point differences in choosing coefficients) and the committed
    residual is, bit for bit, what that pseudo-gradient left of it; else None."""
    for what, tensors, dtype in (("pseudo-gradient", artifacts.pseudo_grad, torch.float32),
                                 ("residual", artifacts.residual_in, RESIDUAL_DTYPE)):  # fmt: skip
        problem = tensors is not None and pseudo_gradient_problem(tensors, artifacts.start, dtype)
        if problem:
            return Verdict(False, f"{what} does not fit the model: {problem}")
    delta = pseudo_gradient(artifacts.start, params_of(artifacts.final))
    target = feedback_target(delta, artifacts.residual_in)
    own = compress(target, compression)
    # Bytes equal to the committed ones (the usual case: the compression is deterministic)
    # decode to the same tensors, so only a difference is decoded and measured.
    same = content_hash(own) == commit.pseudo_grad_hash
    gap = 0.0 if same else relative_l2(artifacts.pseudo_grad, decompress(own))
    if gap > policy.pseudo_grad_tolerance:
        return Verdict(False, "pseudo-gradient is not the compression of start minus final "
                              "checkpoint plus residual", gap)  # fmt: skip
    if state_hash(residual_after(target, artifacts.pseudo_grad)) != commit.residual_hash:
        return Verdict(False, "committed residual is not what the pseudo-gradient left")
    return None

"""Training rounds: the schedule, ``MsgCommitRound`` and global checkpoints.

Each round of a run takes ``period = round_blocks + beacon + reveal + verdict`` blocks: a
commit window of ``round_blocks`` blocks in which a host commits the round once; the beacon
window, at whose last block (the selection block) the challenges are drawn; a reveal window and
a verdict window, whose last block is the resolution block, at whose end challenges are decided
and failed hosts slashed. The next round's commit window follows, so aggregation can leave
slashed pseudo-gradients out. When a commit window ends, the majority base hash of its commits
is recorded as the round's global checkpoint: the hash of the global state (parameters + outer
momentum) the round started from.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import collateral, registry
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol.merkle import verify_merkle_proof
from dilochain.protocol.model_config import token_cost
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitRound, MsgCommitRoundResponse
from dilochain.protocol.pb.poc.v1.types_pb2 import GlobalCheckpoint, RoundCommit, Run
from dilochain.protocol.schedule import base_round, derive_data_seed, next_window, window_at


def segments(run: Run) -> int:
    """Segments per round: H / k (a commit's checkpoint tree has one more leaf)."""
    return run.config.inner_steps // run.config.checkpoint_interval


def opens_leaf(run: Run, ckpt_root: bytes, leaf: bytes, index: int, proof) -> bool:
    """Whether ``proof`` opens ``leaf`` at ``index`` of a commit's checkpoint tree."""
    return verify_merkle_proof(ckpt_root, leaf, index, segments(run) + 1, list(proof))


def tokens_per_round(run: Run) -> int:
    """Tokens one host trains on in a round: H steps x batch x context."""
    cfg = run.config
    return cfg.inner_steps * cfg.batch_size * cfg.seq_len


def work_per_round(run: Run) -> int:
    """The host work a verified round earns: its tokens x what a token of the run's model
    costs (:func:`~dilochain.protocol.model_config.token_cost`), so rewards follow compute,
    not the token count a run's creator chose (a tiny model at many tokens a step took most
    of an epoch's pool)."""
    return tokens_per_round(run) * _token_cost(run.config.model_config, run.config.seq_len)


@lru_cache(maxsize=256)
def _token_cost(model_config: str, seq_len: int) -> int:
    return token_cost(model_config, seq_len)  # checked when the run was created


def round_prefix(run_id: str, round_: int) -> bytes:
    """The prefix of a round's commits."""
    return b"commit/" + run_id.encode() + b"/%012d/" % round_


def _global_key(run_id: str, round_: int) -> bytes:
    return b"global/" + run_id.encode() + b"/%012d" % round_


def _commit_key(run_id: str, round_: int, host: str) -> bytes:
    return round_prefix(run_id, round_) + host.encode()


def commits(store: CacheStore, run_id: str, round_: int) -> list[RoundCommit]:
    """A round's commits, sorted by host address."""
    return [RoundCommit.FromString(v) for _, v in store.iterate(round_prefix(run_id, round_))]


def commit_of(store: CacheStore, run_id: str, round_: int, host: str) -> RoundCommit | None:
    """A host's commit of a round (None if it made none): one read, not a scan of the round."""
    raw = store.get(_commit_key(run_id, round_, host))
    return RoundCommit.FromString(raw) if raw is not None else None


def set_commit(store: CacheStore, commit: RoundCommit) -> None:
    """Store (or update) a host's commit of a round."""
    key = _commit_key(commit.run_id, commit.round, commit.host)
    store.set(key, commit.SerializeToString())


def global_checkpoints(store: CacheStore, run_id: str) -> list[GlobalCheckpoint]:
    """Recorded global checkpoints of a run, by round."""
    prefix = b"global/" + run_id.encode() + b"/"
    return [GlobalCheckpoint.FromString(v) for _, v in store.iterate(prefix)]


def _previous_commit(store: CacheStore, run_id: str, round_: int, host: str) -> RoundCommit:
    """A host's commit of the round before ``round_`` (an empty one if it made none): its
    residual is the one the round starts from, in an overlapped run its pseudo-gradient is the
    one the round's start steps the base by, and in a run with ``carry_inner_state`` its final
    checkpoint holds the AdamW moments the round continues from."""
    previous = commit_of(store, run_id, round_ - 1, host) if round_ else None
    return previous if previous is not None else RoundCommit()


def _handle_commit(ctx: Context, msg: MsgCommitRound) -> MsgCommitRoundResponse:
    run = registry.require_run(ctx.store, msg.run_id)
    if not registry.is_host(ctx.store, msg.run_id, msg.host):
        raise TxError(codes.UNAUTHORIZED, f"{msg.host} is not a host of run {msg.run_id!r}")
    window = window_at(run, ctx.params.poc, ctx.height)
    open_now = window is not None and window.start <= ctx.height <= window.end
    if not open_now or window.round != msg.round or msg.round >= run.config.total_rounds:
        current = f"{window.round} (blocks {window.start}-{window.end})" if open_now else "none"
        raise TxError(
            codes.INVALID_REQUEST,
            f"round {msg.round} is not open for commits at block {ctx.height}; open round: "
            f"{current}",
        )
    members = registry.roster(ctx.store, msg.run_id, msg.round)
    if members is None or msg.host not in members.hosts:
        raise TxError(codes.INVALID_REQUEST, f"{msg.host} is not in round {msg.round}'s roster "
                      "(it registered after the roster was drawn)")  # fmt: skip
    key = _commit_key(msg.run_id, msg.round, msg.host)
    if ctx.store.get(key) is not None:
        raise TxError(codes.INVALID_REQUEST, f"{msg.host} already committed round {msg.round}")
    short = collateral.locked(ctx.store, msg.host) - collateral.bonded(ctx.store, msg.host)
    if short > 0:  # a slash in one run left less than its runs and roles hold: no free commits
        raise TxError(codes.INSUFFICIENT_FUNDS, f"{msg.host} has {short}"
                      f"{ctx.params.poc.collateral_denom} less collateral bonded than its runs "
                      "and registrations reserve: deposit that much to commit again")  # fmt: skip
    for name in ("ckpt_root", "pseudo_grad_hash", "base_hash", "final_hash", "residual_hash"):
        if len(getattr(msg, name)) != 32:
            raise TxError(codes.INVALID_REQUEST, f"{name} must be a 32-byte sha256")
    # NaN or inf in state would reach every reader (a dashboard's JSON is then not JSON).
    if not all(math.isfinite(x) and x >= 0 for x in (msg.loss, msg.eval_loss)):
        raise TxError(codes.INVALID_REQUEST, "loss and eval_loss must be finite and not negative")
    if not opens_leaf(run, msg.ckpt_root, msg.final_hash, segments(run), msg.final_proof):
        raise TxError(codes.INVALID_REQUEST,
                      "final_hash and final_proof do not open ckpt_root's last leaf")  # fmt: skip
    expected_seed = derive_data_seed(run.config.seed, msg.host, msg.round)
    if msg.data_seed != expected_seed:
        raise TxError(codes.INVALID_REQUEST, f"data_seed must be {expected_seed}")
    if msg.tokens != tokens_per_round(run):
        raise TxError(codes.INVALID_REQUEST, f"tokens must be {tokens_per_round(run)}")
    previous = _previous_commit(ctx.store, msg.run_id, msg.round, msg.host)
    commit = RoundCommit(
        run_id=msg.run_id, round=msg.round, host=msg.host, ckpt_root=msg.ckpt_root,
        pseudo_grad_hash=msg.pseudo_grad_hash, data_seed=msg.data_seed, tokens=msg.tokens,
        loss=msg.loss, base_hash=msg.base_hash, height=ctx.height, eval_loss=msg.eval_loss,
        final_hash=msg.final_hash, residual_hash=msg.residual_hash,
        residual_in_hash=previous.residual_hash,
        start_delta_hash=previous.pseudo_grad_hash if run.config.overlap else b"",
        inner_in_hash=previous.final_hash if run.config.carry_inner_state else b"",
    )  # fmt: skip
    set_commit(ctx.store, commit)
    ctx.emit("commit_round", run_id=msg.run_id, round=msg.round, host=msg.host,
             pseudo_grad_hash=msg.pseudo_grad_hash.hex())  # fmt: skip
    return MsgCommitRoundResponse()


def end_block(ctx: Context) -> None:
    """At the end of every round's commit window, record the global state its commits built
    on (by majority of their base hashes) as the checkpoint of that state's round: the round
    itself, or the one before in an overlapped run (recorded once)."""
    for run in registry.active_runs(ctx.store):
        window = window_at(run, ctx.params.poc, ctx.height)
        if window is None or window.end != ctx.height or window.round >= run.config.total_rounds:
            continue
        based_on = base_round(run.config, window.round)
        key = _global_key(run.run_id, based_on)
        found = commits(ctx.store, run.run_id, window.round)
        if not found or ctx.store.get(key) is not None:
            continue
        tally = Counter(c.base_hash for c in found)
        (best, votes), *rest = tally.most_common()
        if rest and rest[0][1] == votes:
            ctx.emit("global_checkpoint_disputed", run_id=run.run_id, round=based_on)
            continue
        record = GlobalCheckpoint(run_id=run.run_id, round=based_on, hash=best,
                                  commits=len(found), agreeing=votes)  # fmt: skip
        ctx.store.set(key, record.SerializeToString())
        ctx.emit("global_checkpoint", run_id=run.run_id, round=based_on, hash=best.hex())


MSGS = [MsgSpec(MsgCommitRound, "host", _handle_commit)]


def _query_round_info(
    ctx: QueryContext, request: q.QueryRoundInfoRequest
) -> q.QueryRoundInfoResponse:
    run = registry.require_run(ctx.store, request.run_id)
    params = ctx.params.poc
    window = next_window(run, params, ctx.height)
    return q.QueryRoundInfoResponse(
        height=ctx.height,
        round=window.round,
        window_start=window.start,
        window_end=window.end,
        finished=window.round >= run.config.total_rounds,
        selection_height=window.selection,
        resolution_height=window.resolution,
        verdict_open_height=window.opening,
    )


def _query_commits(ctx: QueryContext, request: q.QueryCommitsRequest) -> q.QueryCommitsResponse:
    prefix = round_prefix(request.run_id, request.round)
    found, pages = page(ctx.store, prefix, request.pagination, RoundCommit.FromString)
    return q.QueryCommitsResponse(commits=found, pagination=pages)


def _query_global_checkpoints(
    ctx: QueryContext, request: q.QueryGlobalCheckpointsRequest
) -> q.QueryGlobalCheckpointsResponse:
    prefix = b"global/" + request.run_id.encode() + b"/"
    found, pages = page(ctx.store, prefix, request.pagination, GlobalCheckpoint.FromString)
    return q.QueryGlobalCheckpointsResponse(checkpoints=found, pagination=pages)


QUERIES: dict[str, QueryHandler] = {
    "RoundInfo": _query_round_info, "Commits": _query_commits,
    "GlobalCheckpoints": _query_global_checkpoints,
}  # fmt: skip

"""Training rounds: the commit-window schedule, ``MsgCommitRound`` and global checkpoints.

Round r of a run owns the blocks ``[start + r*round_blocks, start + (r+1)*round_blocks)``; a
host commits round r inside that window, once. When the window's last block ends, the base
hashes of the round's commits are tallied and the majority value is recorded as the round's
global checkpoint: the hash of the global state (parameters + outer momentum) it started from.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

from chain.context import Context, MsgSpec
from chain.errors import TxError, codes
from chain.modules import registry
from chain.state import CacheStore
from dilochain.poc.v1.tx_pb2 import MsgCommitRound, MsgCommitRoundResponse
from dilochain.poc.v1.types_pb2 import GlobalCheckpoint, RoundCommit, Run


@dataclass(frozen=True)
class Window:
    """The round whose commit window holds ``height``, and that window's blocks."""

    round: int
    start: int
    end: int


def derive_data_seed(seed: int, host: str, round_: int) -> int:
    """The data seed of (run seed, host, round): drives the host's shard and batch order."""
    digest = hashlib.sha256(f"dilochain-data/{seed}/{host}/{round_}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def window_at(run: Run, height: int) -> Window | None:
    """The round window containing ``height`` (None before the run starts)."""
    if height < run.start_height:
        return None
    blocks = run.config.round_blocks
    r = (height - run.start_height) // blocks
    start = run.start_height + r * blocks
    return Window(r, start, start + blocks - 1)


def tokens_per_round(run: Run) -> int:
    """Tokens one host trains on in a round: H steps x batch x context."""
    cfg = run.config
    return cfg.inner_steps * cfg.batch_size * cfg.model.context


def _round_prefix(run_id: str, round_: int) -> bytes:
    return b"commit/" + run_id.encode() + b"/%012d/" % round_


def _global_key(run_id: str, round_: int) -> bytes:
    return b"global/" + run_id.encode() + b"/%012d" % round_


def commits(store: CacheStore, run_id: str, round_: int) -> list[RoundCommit]:
    """A round's commits, sorted by host address."""
    return [RoundCommit.FromString(v) for _, v in store.iterate(_round_prefix(run_id, round_))]


def global_checkpoints(store: CacheStore, run_id: str) -> list[GlobalCheckpoint]:
    """Recorded global checkpoints of a run, by round."""
    prefix = b"global/" + run_id.encode() + b"/"
    return [GlobalCheckpoint.FromString(v) for _, v in store.iterate(prefix)]


def _handle_commit(ctx: Context, msg: MsgCommitRound) -> MsgCommitRoundResponse:
    run = registry.get_run(ctx.store, msg.run_id)
    if run is None:
        raise TxError(codes.NOT_FOUND, f"run {msg.run_id!r} not found")
    if not registry.is_host(ctx.store, msg.run_id, msg.host):
        raise TxError(codes.UNAUTHORIZED, f"{msg.host} is not a host of run {msg.run_id!r}")
    window = window_at(run, ctx.height)
    if window is None or window.round != msg.round or msg.round >= run.config.total_rounds:
        current = (
            "none" if window is None else f"{window.round} (blocks {window.start}-{window.end})"
        )
        raise TxError(
            codes.INVALID_REQUEST,
            f"round {msg.round} is not open for commits at block {ctx.height}; open round: "
            f"{current}",
        )
    key = _round_prefix(msg.run_id, msg.round) + msg.host.encode()
    if ctx.store.get(key) is not None:
        raise TxError(codes.INVALID_REQUEST, f"{msg.host} already committed round {msg.round}")
    for name in ("ckpt_root", "pseudo_grad_hash", "base_hash"):
        if len(getattr(msg, name)) != 32:
            raise TxError(codes.INVALID_REQUEST, f"{name} must be a 32-byte sha256")
    expected_seed = derive_data_seed(run.config.seed, msg.host, msg.round)
    if msg.data_seed != expected_seed:
        raise TxError(codes.INVALID_REQUEST, f"data_seed must be {expected_seed}")
    if msg.tokens != tokens_per_round(run):
        raise TxError(codes.INVALID_REQUEST, f"tokens must be {tokens_per_round(run)}")
    commit = RoundCommit(
        run_id=msg.run_id, round=msg.round, host=msg.host, ckpt_root=msg.ckpt_root,
        pseudo_grad_hash=msg.pseudo_grad_hash, data_seed=msg.data_seed, tokens=msg.tokens,
        loss=msg.loss, base_hash=msg.base_hash, height=ctx.height,
    )  # fmt: skip
    ctx.store.set(key, commit.SerializeToString())
    ctx.emit("commit_round", run_id=msg.run_id, round=msg.round, host=msg.host,
             pseudo_grad_hash=msg.pseudo_grad_hash.hex())  # fmt: skip
    return MsgCommitRoundResponse()


def end_block(ctx: Context) -> None:
    """Record the global checkpoint of every round whose commit window ends at this block."""
    for run in registry.runs(ctx.store):
        window = window_at(run, ctx.height)
        if window is None or window.end != ctx.height or window.round >= run.config.total_rounds:
            continue
        found = commits(ctx.store, run.run_id, window.round)
        if not found:
            continue
        tally = Counter(c.base_hash for c in found)
        (best, votes), *rest = tally.most_common()
        if rest and rest[0][1] == votes:
            ctx.emit("global_checkpoint_disputed", run_id=run.run_id, round=window.round)
            continue
        record = GlobalCheckpoint(run_id=run.run_id, round=window.round, hash=best,
                                  commits=len(found), agreeing=votes)  # fmt: skip
        ctx.store.set(_global_key(run.run_id, window.round), record.SerializeToString())
        ctx.emit("global_checkpoint", run_id=run.run_id, round=window.round, hash=best.hex())


MSGS = [MsgSpec(MsgCommitRound, "host", _handle_commit)]

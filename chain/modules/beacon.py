"""The challenge beacon: randomness for a round's selection that no single party can steer.

During a round's commit window every registered verifier may commit to a secret
(``MsgCommitBeacon``, ``sha256(secret || address)``). The hash of the window's last block is
the round's *anchor*, recorded one block later: its proposer chose it without knowing any
secret. In the beacon window that follows (``beacon_reveal_blocks`` blocks, ending with the
selection block) verifiers open their secrets (``MsgRevealBeacon``). At the end of the
selection block the seed is ``mix(anchor, opened secrets)``; a verifier that committed and
did not open is slashed ``beacon_withhold_slash_fraction``. Once the last commitment is in, the only
choice left to anyone is a committed verifier's to withhold its secret, which costs it that
slash (docs/DESIGN.md weighs this last-revealer bias).
"""

from __future__ import annotations

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import registry, slashing, verifiers
from dilochain.chain.state import CacheStore
from dilochain.protocol import beacon as encoding
from dilochain.protocol import schedule
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCommitBeacon,
    MsgCommitBeaconResponse,
    MsgRevealBeacon,
    MsgRevealBeaconResponse,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Beacon, BeaconEntry, Run


def round_prefix(run_id: str, round_: int) -> bytes:
    """The prefix of a round's beacon."""
    return b"beacon/" + run_id.encode() + b"/%012d/" % round_


def _entry_key(run_id: str, round_: int, verifier: str) -> bytes:
    return round_prefix(run_id, round_) + b"entry/" + verifier.encode()


def get(store: CacheStore, run_id: str, round_: int) -> Beacon:
    """A round's beacon: entries by verifier, anchor and seed once they are set."""
    prefix = round_prefix(run_id, round_)
    entries = [BeaconEntry.FromString(v) for _, v in store.iterate(prefix + b"entry/")]
    return Beacon(
        run_id=run_id, round=round_, entries=entries,
        anchor=store.get(prefix + b"anchor") or b"", seed=store.get(prefix + b"seed") or b"",
    )  # fmt: skip


def opened(store: CacheStore, run_id: str, round_: int) -> set[str]:
    """The verifiers that opened their secret of the round's beacon (alive in its beacon
    window)."""
    return {e.verifier for e in get(store, run_id, round_).entries if e.secret}


def seed(store: CacheStore, run_id: str, round_: int) -> bytes:
    """The round's seed (set at the end of its selection block, before challenges are drawn)."""
    value = store.get(round_prefix(run_id, round_) + b"seed")
    if value is None:
        raise ValueError(f"round {round_} of {run_id!r} has no beacon seed yet")
    return value


# ---- end of block ---------------------------------------------------------------------------
def _record_anchor(ctx: Context, run: Run, round_: int) -> None:
    ctx.store.set(round_prefix(run.run_id, round_) + b"anchor", ctx.last_block_hash)


def _close(ctx: Context, run: Run, round_: int) -> None:
    found = get(ctx.store, run.run_id, round_)
    opened = [(e.verifier, e.secret) for e in found.entries if e.secret]
    value = encoding.mix(found.anchor, opened)
    ctx.store.set(round_prefix(run.run_id, round_) + b"seed", value)
    ctx.emit("beacon", run_id=run.run_id, round=round_, seed=value.hex(),
             committed=len(found.entries), opened=len(opened))  # fmt: skip
    for entry in found.entries:
        if not entry.secret:
            slashing.slash(ctx, entry.verifier, ctx.params.poc.beacon_withhold_slash_fraction,
                           run.run_id, round_, "withheld its beacon secret",
                           schedule.round_window(run, ctx.params.poc, round_).start)  # fmt: skip


def end_block(ctx: Context) -> None:
    """One block after a commit window: record its anchor; at the selection block: the seed."""
    for run in registry.active_runs(ctx.store):
        for window in schedule.in_flight(run, ctx.params.poc, ctx.height):
            if window.round >= run.config.total_rounds:
                continue
            if ctx.height == window.end + 1:
                _record_anchor(ctx, run, window.round)
            if ctx.height == window.selection:
                _close(ctx, run, window.round)


# ---- messages -------------------------------------------------------------------------------
def _open_round(ctx: Context, run_id: str, round_: int) -> schedule.Window:
    run = registry.require_run(ctx.store, run_id)
    if round_ >= run.config.total_rounds:
        raise TxError(codes.INVALID_REQUEST, f"run {run_id!r} has no round {round_}")
    return schedule.round_window(run, ctx.params.poc, round_)


def require_beacon_window(ctx: Context, window: schedule.Window, what: str) -> None:
    """Refuse ``what`` (secrets, screens) outside the round's beacon window: after its commit
    window, up to and including its selection block."""
    if not window.end < ctx.height <= window.selection:
        raise TxError(codes.INVALID_REQUEST, f"{what} of round {window.round} are taken in "
                      f"blocks {window.end + 1}-{window.selection}")  # fmt: skip


def _handle_commit(ctx: Context, msg: MsgCommitBeacon) -> MsgCommitBeaconResponse:
    window = _open_round(ctx, msg.run_id, msg.round)
    verifiers.require_duty(ctx.store, msg.verifier, window.start)
    if not window.start <= ctx.height <= window.end:
        raise TxError(codes.INVALID_REQUEST, f"beacon commitments for round {msg.round} are "
                      f"taken in blocks {window.start}-{window.end}")  # fmt: skip
    if len(msg.commitment) != 32:
        raise TxError(codes.INVALID_REQUEST, "commitment must be a 32-byte sha256")
    key = _entry_key(msg.run_id, msg.round, msg.verifier)
    if ctx.store.get(key) is not None:
        raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} already committed to this beacon")
    entry = BeaconEntry(verifier=msg.verifier, commitment=msg.commitment)
    ctx.store.set(key, entry.SerializeToString())
    ctx.emit("beacon_commit", run_id=msg.run_id, round=msg.round, verifier=msg.verifier)
    return MsgCommitBeaconResponse()


def _handle_reveal(ctx: Context, msg: MsgRevealBeacon) -> MsgRevealBeaconResponse:
    # No registration check: a commitment made while registered may be opened after a slash
    # removed the verifier (else that removal would cost it a second slash).
    require_beacon_window(ctx, _open_round(ctx, msg.run_id, msg.round), "beacon secrets")
    key = _entry_key(msg.run_id, msg.round, msg.verifier)
    raw = ctx.store.get(key)
    if raw is None:
        raise TxError(codes.NOT_FOUND, f"{msg.verifier} made no commitment to this beacon")
    entry = BeaconEntry.FromString(raw)
    if entry.secret:
        raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} already opened its commitment")
    if (
        len(msg.secret) != encoding.SECRET_BYTES
        or encoding.commitment(msg.secret, msg.verifier) != entry.commitment
    ):
        raise TxError(codes.UNAUTHORIZED, "the secret does not open the commitment")
    entry.secret = msg.secret
    ctx.store.set(key, entry.SerializeToString())
    ctx.emit("beacon_reveal", run_id=msg.run_id, round=msg.round, verifier=msg.verifier)
    return MsgRevealBeaconResponse()


MSGS = [
    MsgSpec(MsgCommitBeacon, "verifier", _handle_commit),
    MsgSpec(MsgRevealBeacon, "verifier", _handle_reveal),
]


def _query_beacon(ctx: QueryContext, request: q.QueryBeaconRequest) -> q.QueryBeaconResponse:
    return q.QueryBeaconResponse(beacon=get(ctx.store, request.run_id, request.round))


QUERIES: dict[str, QueryHandler] = {"Beacon": _query_beacon}

"""Screening: every commit of every round is checked by verifiers before challenges are drawn.

Each commit opens its final checkpoint (the last leaf of its ``ckpt_root``). Between the end of
the commit window and the selection block, the commit's committee (``screeners_per_commit``
verifiers drawn from the round's beacon anchor, :mod:`dilochain.protocol.committee`) screens
it cheaply (its pseudo-gradient against base - final checkpoint, and a held-out loss test on a
batch drawn from the anchor, which nobody knew while committing) and votes
(``MsgSubmitScreen``: a verifier's votes on several commits in one message). At the selection
block a commit that a quorum failed has every one of its segments challenged: the screen never
slashes on its own, the full replay decides, so an honest host that fails the statistical loss
test is re-executed and paid. On a fail-closed chain (the default) so has every commit that no
quorum passed (too few verifiers screened it), and only commits a quorum passed can enter the
global state.
"""

from __future__ import annotations

from collections.abc import Callable

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import beacon, registry, rounds, verifiers
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol import committee as committees
from dilochain.protocol import schedule
from dilochain.protocol.params import MAX_SCREEN_VOTES
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgSubmitScreen,
    MsgSubmitScreenResponse,
    ScreenVote,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Screen, Vote


def round_prefix(run_id: str, round_: int) -> bytes:
    """The prefix of a round's screens."""
    return b"screen/" + run_id.encode() + b"/%012d/" % round_


def screens(store: CacheStore, run_id: str, round_: int) -> list[Screen]:
    """A round's screens (of the commits anyone voted on), by host."""
    return [Screen.FromString(v) for _, v in store.iterate(round_prefix(run_id, round_))]


def _save(store: CacheStore, screen: Screen) -> None:
    store.set(round_prefix(screen.run_id, screen.round) + screen.host.encode(),
              screen.SerializeToString())  # fmt: skip


def decide(ctx: Context, run_id: str, round_: int) -> tuple[set[str], set[str], set[str]]:
    """At the selection block: mark and return the hosts whose screen a quorum failed, those
    whose screen a quorum passed (a host in neither was not screened by a quorum), and those a
    quorum failed, every fail on contradicting artifacts (which one replayed segment decides)."""
    failed, passed, inconsistent = set(), set(), set()
    quorum = ctx.params.poc.quorum
    for screen in screens(ctx.store, run_id, round_):
        screen.failed = sum(not v.passed for v in screen.votes) >= quorum
        screen.passed = not screen.failed and sum(v.passed for v in screen.votes) >= quorum
        # One segment decides contradicting artifacts only when every fail says so: a fail
        # on the loss test beside two colluders' "inconsistent" keeps the full replay.
        fails = [v for v in screen.votes if not v.passed]
        screen.inconsistent = len(fails) >= quorum and all(v.inconsistent for v in fails)
        _save(ctx.store, screen)
        if screen.inconsistent:
            inconsistent.add(screen.host)
        if screen.failed:
            failed.add(screen.host)
            ctx.emit("screen_failed", run_id=run_id, round=round_, host=screen.host)
        elif screen.passed:
            passed.add(screen.host)
    return failed, passed, inconsistent


def passed(store: CacheStore, run_id: str, round_: int) -> set[str]:
    """The hosts whose screen of the round a quorum passed (once its selection block is done)."""
    return {s.host for s in screens(store, run_id, round_) if s.passed}


def committees_of(
    store: CacheStore, params, run_id: str, round_: int, window_start: int
) -> Callable[[str], set[str]]:
    """A host → the verifiers that screen its commit of the round (none before the anchor);
    the anchor and the verifier set are read once for every host it is asked about."""
    anchor = beacon.get(store, run_id, round_).anchor
    if not anchor:
        return lambda host: set()
    candidates = committees.eligible(verifiers.verifiers(store), window_start)
    size = params.screeners_per_commit
    return lambda host: committees.screen_committee(anchor, run_id, round_, host, candidates,
                                                    size)  # fmt: skip


def _handle_screen(ctx: Context, msg: MsgSubmitScreen) -> MsgSubmitScreenResponse:
    run = registry.require_run(ctx.store, msg.run_id)
    verifiers.require_verifier(ctx.store, msg.verifier)
    hosts = [vote.host for vote in msg.votes]
    if not 1 <= len(hosts) <= MAX_SCREEN_VOTES or len(set(hosts)) != len(hosts):
        raise TxError(codes.INVALID_REQUEST, f"a screen message carries 1 to {MAX_SCREEN_VOTES} "
                      "votes, one a host")  # fmt: skip
    window = schedule.round_window(run, ctx.params.poc, msg.round)
    beacon.require_beacon_window(ctx, window, "screens")
    if not beacon.get(ctx.store, msg.run_id, msg.round).anchor:
        raise TxError(codes.INVALID_REQUEST, f"screens of round {msg.round} are taken from "
                      f"block {window.end + 2}, once its anchor is recorded")  # fmt: skip
    chosen = committees_of(ctx.store, ctx.params.poc, msg.run_id, msg.round, window.start)
    for vote in msg.votes:
        _record_vote(ctx, msg, vote, chosen)
    return MsgSubmitScreenResponse()


def _record_vote(
    ctx: Context, msg: MsgSubmitScreen, vote: ScreenVote, chosen: Callable[[str], set[str]]
) -> None:
    # The commit first: a committee is drawn (50 hashes, not metered as gas) only for a host
    # that committed, never for any name a message lists.
    if len(vote.evidence_hash) not in (0, 32):  # kept in the screen every vote rewrites
        raise TxError(codes.INVALID_REQUEST, "an evidence hash is 32 bytes (or none)")
    if rounds.commit_of(ctx.store, msg.run_id, msg.round, vote.host) is None:
        raise TxError(codes.NOT_FOUND, f"{vote.host} did not commit round {msg.round}")
    if msg.verifier not in chosen(vote.host):
        raise TxError(codes.UNAUTHORIZED, f"{msg.verifier} is not on the screening committee of "
                      f"{vote.host}'s round {msg.round} commit")  # fmt: skip
    key = round_prefix(msg.run_id, msg.round) + vote.host.encode()
    raw = ctx.store.get(key)
    screen = Screen.FromString(raw) if raw else Screen(run_id=msg.run_id, round=msg.round,
                                                       host=vote.host)  # fmt: skip
    if any(v.verifier == msg.verifier for v in screen.votes):
        raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} already screened {vote.host}'s "
                      f"round {msg.round} commit")  # fmt: skip
    screen.votes.append(Vote(verifier=msg.verifier, passed=vote.passed,
                             evidence_hash=vote.evidence_hash,
                             inconsistent=vote.inconsistent and not vote.passed))  # fmt: skip
    _save(ctx.store, screen)
    ctx.emit("screen", run_id=msg.run_id, round=msg.round, host=vote.host, verifier=msg.verifier,
             passed=vote.passed)  # fmt: skip


MSGS = [MsgSpec(MsgSubmitScreen, "verifier", _handle_screen)]


def _query_screens(ctx: QueryContext, request: q.QueryScreensRequest) -> q.QueryScreensResponse:
    prefix = round_prefix(request.run_id, request.round)
    found, pages = page(ctx.store, prefix, request.pagination, Screen.FromString)
    return q.QueryScreensResponse(screens=found, pagination=pages)


QUERIES: dict[str, QueryHandler] = {"Screens": _query_screens}

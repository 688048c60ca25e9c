"""Proof of computation: challenge selection, reveals, verdicts, quorum and slashing.

At the end of a round's selection block, every segment of a commit whose screen failed
(``screening``) is challenged, and the round's beacon seed (``beacon``: the verifiers'
commit-reveal mixed with the commit window's last block hash) draws the rest: each (host,
segment) of the round's commits is challenged with probability ``sampling_rate`` and
assigned ``verifiers_per_challenge`` registered verifiers, all by
sha256 scores anyone can recompute. The host reveals the segment's start/end (and the round's
final) checkpoint hashes with Merkle proofs against its ``ckpt_root``; assigned verifiers
re-execute and seal their votes (``protocol/verdict.py``: passed and a fingerprint of a state
only a replay passes through), then open them in the verdict-opening window. At the resolution
block the opened votes that agree with the leading fingerprint count (``count_votes``): a quorum
of counted passes outnumbering the fails passes the segment, a quorum of counted fails with no
pass fails it, any other split leaves it undecided (``_decide``). A host that failed (or did
not reveal) loses ``slash_fraction`` of its collateral (burned), its commit is excluded from
aggregation and pay; one whose segment a quorum failed beside a counted pass is excluded and
unpaid, not slashed. A verifier loses ``verifier_slash_fraction`` for a vote it did not open or
a vote whose fingerprint disagrees with a leading one (it did not replay).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import (
    beacon,
    registry,
    rewards,
    rounds,
    screening,
    slashing,
    verifiers,
)
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol import schedule
from dilochain.protocol import verdict as sealing
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgOpenVerdict,
    MsgOpenVerdictResponse,
    MsgRevealCheckpoints,
    MsgRevealCheckpointsResponse,
    MsgSubmitVerdict,
    MsgSubmitVerdictResponse,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import (
    Challenge,
    ChallengeStatus,
    CommitOutcome,
    Run,
    SealedVote,
)

PENDING = ChallengeStatus.CHALLENGE_STATUS_PENDING
PASSED = ChallengeStatus.CHALLENGE_STATUS_PASSED
FAILED = ChallengeStatus.CHALLENGE_STATUS_FAILED
NOT_REVEALED = ChallengeStatus.CHALLENGE_STATUS_NOT_REVEALED
UNDECIDED = ChallengeStatus.CHALLENGE_STATUS_UNDECIDED
COMMIT_ACCEPTED = CommitOutcome.COMMIT_OUTCOME_ACCEPTED
COMMIT_PAID = CommitOutcome.COMMIT_OUTCOME_PAID
COMMIT_UNDECIDED = CommitOutcome.COMMIT_OUTCOME_UNDECIDED
COMMIT_FAILED = CommitOutcome.COMMIT_OUTCOME_FAILED


def score(seed: bytes, *parts: object) -> int:
    """A 64-bit pseudo-random score of ``parts`` under ``seed``."""
    data = seed + "/".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def is_challenged(seed: bytes, host: str, segment: int, rate) -> bool:
    """Whether (host, segment) is selected at sampling rate ``rate``."""
    return score(seed, "challenge", host, segment) < int(rate * 2**64)


def _prefix(run_id: str, round_: int) -> bytes:
    return b"chal/" + run_id.encode() + b"/%012d/" % round_


def _key(run_id: str, round_: int, host: str, segment: int) -> bytes:
    return _prefix(run_id, round_) + host.encode() + b"/%06d" % segment


def challenges(store: CacheStore, run_id: str, round_: int) -> list[Challenge]:
    """A round's challenges, by host then segment."""
    return [Challenge.FromString(v) for _, v in store.iterate(_prefix(run_id, round_))]


def _save(store: CacheStore, c: Challenge) -> None:
    store.set(_key(c.run_id, c.round, c.host, c.segment), c.SerializeToString())


def _get(ctx: Context, run_id: str, round_: int, host: str, segment: int) -> Challenge:
    raw = ctx.store.get(_key(run_id, round_, host, segment))
    if raw is None:
        raise TxError(
            codes.NOT_FOUND, f"no challenge of {host} segment {segment} in round {round_}"
        )
    return Challenge.FromString(raw)


# ---- end of block ---------------------------------------------------------------------------
class _Draw:
    """A round's verifiers in the order its challenges draw them: each ``preferred`` group
    (in order), then the rest, each group ordered by sha256 scores under the round's seed once
    a round; a challenge reads each group around from an offset of its own. So k verifiers
    cost O(k) a challenge instead of a sort of the whole verifier set (thousands of
    verifiers, thousands of forced challenges: seconds of one block's end). Each challenge's
    k verifiers are still a uniformly random k of its group (any k places of a random order)."""

    def __init__(self, seed: bytes, pool: list[str], *preferred: set[str]):
        self.seed = seed
        groups, left = [], list(pool)
        for group in (*preferred, None):
            taken = [v for v in left if group is None or v in group]
            left = [v for v in left if group is not None and v not in group]
            groups.append(sorted(taken, key=lambda v: score(seed, "assign", v)))
        self.groups = [g for g in groups if g]

    def pick(self, host: str, segment: int, count: int, skip: Collection[str] = ()) -> list[str]:
        """``count`` verifiers (fewer if the pool is short) to judge (host, segment), never the
        host itself nor any of ``skip``, the preferred groups first."""
        out: list[str] = []
        for i, group in enumerate(self.groups):
            start = score(self.seed, "offset", host, segment, i) % len(group)
            for j in range(len(group)):
                if len(out) == count:
                    return out
                v = group[(start + j) % len(group)]
                if v != host and v not in skip:
                    out.append(v)
        return out


def select(ctx: Context, run: Run, round_: int) -> None:
    """Create the round's challenges: every segment of a commit whose screen failed (on a
    fail-closed chain: whose screen no quorum passed) — only its last when a quorum failed it on
    contradicting artifacts, which every segment's replay checks — and each other segment with
    probability ``sampling_rate`` under the beacon seed. Each is assigned
    ``verifiers_per_challenge`` verifiers, those that opened the round's beacon secret (alive)
    first."""
    params, seed = ctx.params.poc, beacon.seed(ctx.store, run.run_id, round_)
    failed, passed, inconsistent = screening.decide(ctx, run.run_id, round_)
    last = rounds.segments(run) - 1
    draw = _Draw(seed, verifiers.staying(ctx.store), beacon.opened(ctx.store, run.run_id, round_))
    for commit in rounds.commits(ctx.store, run.run_id, round_):
        whole = commit.host not in passed if params.fail_closed else commit.host in failed
        for segment in range(rounds.segments(run)):
            sampled = is_challenged(seed, commit.host, segment, params.sampling_rate)
            forced = whole and (segment == last or commit.host not in inconsistent)
            if not sampled and not forced:
                continue
            assigned = draw.pick(commit.host, segment, params.verifiers_per_challenge)
            challenge = Challenge(run_id=run.run_id, round=round_, host=commit.host,
                                  segment=segment, verifiers=assigned,
                                  primaries=len(assigned))  # fmt: skip
            _save(ctx.store, challenge)
            ctx.emit("challenge", run_id=run.run_id, round=round_, host=commit.host,
                     segment=segment)  # fmt: skip


def hand_over(ctx: Context, run: Run, round_: int) -> None:
    """At the handover block: each revealed challenge whose assigned verifiers have not all
    voted gets as many backups, next in its ranking (verifiers that voted in this round first,
    then those alive at its beacon), so a verifier that went down mid-round does not leave an
    honest host unjudged. Backups vote in what is left of the verdict window."""
    seed = beacon.seed(ctx.store, run.run_id, round_)
    found = challenges(ctx.store, run.run_id, round_)
    voting = {v.verifier for c in found for v in c.votes}
    draw = _Draw(seed, verifiers.staying(ctx.store), voting,
                 beacon.opened(ctx.store, run.run_id, round_))  # fmt: skip
    for c in found:
        voted = {v.verifier for v in c.votes}
        missing = sum(v not in voted for v in c.verifiers)
        if not c.revealed or not missing:
            continue
        backups = draw.pick(c.host, c.segment, missing, skip=set(c.verifiers))
        if not backups:
            continue
        c.verifiers.extend(backups)
        _save(ctx.store, c)
        ctx.emit("challenge_handover", run_id=run.run_id, round=round_, host=c.host,
                 segment=c.segment, backups=",".join(backups))  # fmt: skip


def count_votes(c: Challenge, quorum: int, mode: str) -> None:
    """Mark the votes that count. The leading fingerprint is the one most opened votes agree
    with; if at least ``quorum`` do and no other fingerprint ties with it, every opened vote
    that agrees with it counts. Lazy verifiers who share a guess can tie with honest replays
    (then nothing counts) but never outnumber them while honest verifiers are the majority."""
    opened = [v for v in c.votes if v.opened]

    def agree(a: SealedVote, b: SealedVote) -> bool:
        return sealing.agree(a.fingerprint, b.fingerprint, mode)

    support = [sum(agree(v, other) for other in opened) for v in opened]
    best = max(support, default=0)
    leaders = [v for v, n in zip(opened, support, strict=True) if n == best]
    clear = best >= quorum and all(agree(a, b) for a in leaders for b in leaders)
    for vote in c.votes:
        vote.counted = clear and vote.opened and all(agree(vote, lead) for lead in leaders)


def _counted_fails(c: Challenge) -> int:
    return sum(v.counted and not v.passed for v in c.votes)


def _decide(c: Challenge, quorum: int) -> int:
    """A revealed challenge's status from its counted votes (those of one replay): PASSED on a
    quorum of passes that outnumber the fails; FAILED on a quorum of fails and no pass; any
    other split UNDECIDED. A replay is deterministic, so honest verifiers of one never split:
    a split means some voted against what they replayed, and the chain cannot tell which
    side. A host is slashed only when no counted vote stood for it, so verifiers colluding
    in a challenge's majority can leave an honest host's round unpaid but cannot slash it."""
    if not c.revealed:
        return NOT_REVEALED
    fails = _counted_fails(c)
    passes = sum(v.counted for v in c.votes) - fails
    if fails >= quorum and not passes:
        return FAILED
    if passes >= quorum and passes > fails:
        return PASSED
    return UNDECIDED


def _judge_verifiers(ctx: Context, c: Challenge, run_id: str, round_: int, begun: int) -> None:
    """Pay counted votes that agree with the decision; slash unopened votes and votes that
    disagree with a leading fingerprint (and what the verifier started unbonding since the
    round ``begun``). A counted vote against the decision (a split: only a PASSED decides one)
    is not paid and not slashed: a majority of colluders passing a cheat must not slash the
    honest verifier who failed it."""
    params = ctx.params.poc
    corroborated = any(v.counted for v in c.votes)
    decided = c.status in (FAILED, PASSED)
    for vote in c.votes:
        if not vote.opened:
            reason = "did not open its vote"
        elif not vote.counted:
            if not corroborated:  # no leading fingerprint: no one to judge by
                continue
            reason = "its fingerprint disagrees with the replays"
        else:
            if decided and vote.passed == (c.status == PASSED):
                rewards.credit(ctx, "verifier", vote.verifier, 1)
            continue
        slashing.slash(ctx, vote.verifier, params.verifier_slash_fraction, run_id, round_,
                       f"{reason} on {c.host} segment {c.segment}", begun)  # fmt: skip


def _missed_duties(ctx: Context, found: list[Challenge]) -> None:
    """A primary verifier that sealed no vote on any of the round's challenges it was assigned
    and others decided was absent: it loses its verifier reward for the epoch. (Those
    challenges were doable: their data and checkpoints were there. A slow verifier that voted
    on some of them is not absent.)"""
    assigned: dict[str, list[Challenge]] = {}
    for c in found:
        if c.status in (FAILED, PASSED):
            for verifier in c.verifiers[: c.primaries]:
                assigned.setdefault(verifier, []).append(c)
    for verifier, mine in sorted(assigned.items()):
        if not any(v.verifier == verifier for c in mine for v in c.votes):
            rewards.mark_missed(ctx, verifier)
            ctx.emit("verifier_missed_duty", run_id=mine[0].run_id, round=mine[0].round,
                     verifier=verifier, challenges=len(mine))  # fmt: skip


def resolve(ctx: Context, run: Run, round_: int) -> None:
    """Decide every challenge of the round; judge its verifiers; slash and exclude failed
    hosts; decide each commit's outcome: on a fail-closed chain only a commit a quorum
    screened passing and whose every challenge passed is ACCEPTED into the global state."""
    params = ctx.params.poc
    failed_hosts: set[str] = set()
    undecided_hosts: set[str] = set()
    contested_hosts: set[str] = set()  # a quorum failed a segment, a counted pass stood for it
    found = challenges(ctx.store, run.run_id, round_)
    begun = schedule.round_window(run, params, round_).start  # its verifiers' duties since
    for c in found:
        count_votes(c, params.quorum, params.verification_mode)
        c.status = _decide(c, params.quorum)
        _save(ctx.store, c)
        ctx.emit("challenge_resolved", run_id=run.run_id, round=round_, host=c.host,
                 segment=c.segment, status=ChallengeStatus.Name(c.status))  # fmt: skip
        if c.status in (FAILED, NOT_REVEALED):
            failed_hosts.add(c.host)
        elif c.status == UNDECIDED:
            undecided_hosts.add(c.host)
            if _counted_fails(c) >= params.quorum:
                contested_hosts.add(c.host)
        _judge_verifiers(ctx, c, run.run_id, round_, begun)
    _missed_duties(ctx, found)
    screened = screening.passed(ctx.store, run.run_id, round_)
    for commit in rounds.commits(ctx.store, run.run_id, round_):
        if commit.host in failed_hosts:
            commit.excluded = True
            commit.outcome = COMMIT_FAILED
            slashing.slash(ctx, commit.host, params.slash_fraction, run.run_id, round_,
                   "failed a challenge", infraction_height=commit.height)  # fmt: skip
            rewards.mark_slashed(ctx, commit.host)
            rewards.forfeit(ctx, commit.host)
            registry.jail(ctx, run.run_id, commit.host)
        elif commit.host in undecided_hosts:  # not shown to be right: neither paid nor slashed
            commit.outcome = COMMIT_UNDECIDED
            # left out of a fail-open chain's model too: a quorum found it wrong
            commit.excluded = commit.host in contested_hosts
            ctx.emit("work_unpaid", run_id=run.run_id, round=round_, host=commit.host,
                     reason="a challenge was left undecided")  # fmt: skip
        else:
            rewards.credit(ctx, "host", commit.host, rounds.work_per_round(run))
            commit.outcome = COMMIT_ACCEPTED if commit.host in screened else COMMIT_PAID
        rounds.set_commit(ctx.store, commit)
        ctx.emit("commit_outcome", run_id=run.run_id, round=round_, host=commit.host,
                 outcome=CommitOutcome.Name(commit.outcome))  # fmt: skip


# A run keeps the commits, screens, challenges and beacon of its last 64 decided rounds (as
# its rosters): what hosts, verifiers and exports read is a round or two old, and each round
# wrote ~hosts x (a commit, a screen, its challenges) that no one pays to keep for ever.
KEPT_ROUNDS = registry.KEPT_ROSTERS


def _forget(ctx: Context, run_id: str, round_: int) -> None:
    """Delete a long-decided round's commits, screens, challenges and beacon (its global
    state, which exports and newcomers start from, stays)."""
    for module in (rounds, screening, beacon):
        ctx.store.delete_all(module.round_prefix(run_id, round_))
    ctx.store.delete_all(_prefix(run_id, round_))


def end_block(ctx: Context) -> None:
    """Select challenges or resolve them for every run whose schedule says so at this block
    (and forget the round decided ``KEPT_ROUNDS`` before)."""
    for run in registry.active_runs(ctx.store):
        windows = schedule.in_flight(run, ctx.params.poc, ctx.height)
        if windows and windows[0].round >= run.config.total_rounds:
            registry.retire(ctx, run)
            continue
        for window in windows:
            if window.round >= run.config.total_rounds:
                continue
            if ctx.height == window.selection:
                select(ctx, run, window.round)
            elif ctx.height == window.handover:
                hand_over(ctx, run, window.round)
            elif ctx.height == window.resolution:
                resolve(ctx, run, window.round)
                if window.round >= KEPT_ROUNDS:
                    _forget(ctx, run.run_id, window.round - KEPT_ROUNDS)
                if window.round + 1 == run.config.total_rounds:
                    registry.retire(ctx, run)


# ---- messages -------------------------------------------------------------------------------
def _handle_reveal(ctx: Context, msg: MsgRevealCheckpoints) -> MsgRevealCheckpointsResponse:
    run = registry.require_run(ctx.store, msg.run_id)
    c = _get(ctx, msg.run_id, msg.round, msg.host, msg.segment)
    window = schedule.round_window(run, ctx.params.poc, msg.round)
    last = window.selection + ctx.params.poc.reveal_window_blocks
    if not window.selection < ctx.height <= last:
        raise TxError(codes.INVALID_REQUEST,
                      f"the reveal window is blocks {window.selection + 1}-{last}")  # fmt: skip
    if c.revealed:
        raise TxError(codes.INVALID_REQUEST, "already revealed")
    if any(len(h) != 32 for h in (msg.start_hash, msg.end_hash, msg.final_hash)):
        raise TxError(codes.INVALID_REQUEST, "a checkpoint's hash is 32 bytes")  # all re-read it
    commit = rounds.commit_of(ctx.store, msg.run_id, msg.round, msg.host)
    checks = [
        (msg.start_hash, msg.segment, msg.start_proof, "start"),
        (msg.end_hash, msg.segment + 1, msg.end_proof, "end"),
        (msg.final_hash, rounds.segments(run), msg.final_proof, "final"),
    ]
    for leaf, index, proof, name in checks:
        if commit is None or not rounds.opens_leaf(run, commit.ckpt_root, leaf, index, proof):
            raise TxError(
                codes.UNAUTHORIZED, f"{name} checkpoint does not match the committed root"
            )
    c.revealed = True
    c.start_hash, c.end_hash, c.final_hash = msg.start_hash, msg.end_hash, msg.final_hash
    _save(ctx.store, c)
    ctx.emit("reveal", run_id=msg.run_id, round=msg.round, host=msg.host, segment=msg.segment)
    return MsgRevealCheckpointsResponse()


def _assigned_challenge(ctx: Context, msg: MsgSubmitVerdict | MsgOpenVerdict) -> Challenge:
    c = _get(ctx, msg.run_id, msg.round, msg.host, msg.segment)
    if msg.verifier not in c.verifiers:
        raise TxError(codes.UNAUTHORIZED, f"{msg.verifier} is not assigned to this challenge")
    return c


def _handle_verdict(ctx: Context, msg: MsgSubmitVerdict) -> MsgSubmitVerdictResponse:
    run = registry.require_run(ctx.store, msg.run_id)
    c = _assigned_challenge(ctx, msg)
    if not c.revealed:
        raise TxError(codes.INVALID_REQUEST, "the challenge is not revealed yet")
    if ctx.height >= schedule.round_window(run, ctx.params.poc, msg.round).opening:
        raise TxError(codes.INVALID_REQUEST, "the verdict window has closed")
    if len(msg.commitment) != 32:
        raise TxError(codes.INVALID_REQUEST, "a verdict commitment is 32 bytes")
    if any(v.verifier == msg.verifier for v in c.votes):
        raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} already voted on this challenge")
    c.votes.append(SealedVote(verifier=msg.verifier, commitment=msg.commitment))
    _save(ctx.store, c)
    ctx.emit("verdict", run_id=msg.run_id, round=msg.round, host=msg.host, segment=msg.segment,
             verifier=msg.verifier)  # fmt: skip
    return MsgSubmitVerdictResponse()


def _handle_open_verdict(ctx: Context, msg: MsgOpenVerdict) -> MsgOpenVerdictResponse:
    run = registry.require_run(ctx.store, msg.run_id)
    c = _assigned_challenge(ctx, msg)
    window = schedule.round_window(run, ctx.params.poc, msg.round)
    if not window.opening <= ctx.height <= window.resolution:
        blocks = f"{window.opening}-{window.resolution}"
        raise TxError(codes.INVALID_REQUEST, f"votes are opened in blocks {blocks}")
    vote = next((v for v in c.votes if v.verifier == msg.verifier), None)
    if vote is None:
        raise TxError(codes.NOT_FOUND, f"{msg.verifier} has no vote on this challenge")
    if vote.opened:
        raise TxError(codes.INVALID_REQUEST, "already opened")
    if not sealing.valid_length(msg.fingerprint, ctx.params.poc.verification_mode):
        raise TxError(codes.INVALID_REQUEST, "the fingerprint's size does not fit the mode")
    if len(msg.salt) != sealing.SALT_BYTES:
        raise TxError(codes.INVALID_REQUEST, f"a salt is {sealing.SALT_BYTES} bytes")
    if len(msg.evidence_hash) not in (0, 32):  # kept in the challenge every vote rewrites
        raise TxError(codes.INVALID_REQUEST, "an evidence hash is 32 bytes (or none)")
    sealed = sealing.commitment(msg.verifier, msg.run_id, msg.round, msg.host, msg.segment,
                                msg.passed, msg.fingerprint, msg.salt)  # fmt: skip
    if sealed != vote.commitment:
        raise TxError(codes.UNAUTHORIZED, "the opening does not match the sealed vote")
    vote.opened, vote.passed = True, msg.passed
    vote.fingerprint, vote.evidence_hash = msg.fingerprint, msg.evidence_hash
    _save(ctx.store, c)
    ctx.emit("verdict_opened", run_id=msg.run_id, round=msg.round, host=msg.host,
             segment=msg.segment, verifier=msg.verifier, passed=msg.passed)  # fmt: skip
    return MsgOpenVerdictResponse()


MSGS = [
    MsgSpec(MsgRevealCheckpoints, "host", _handle_reveal),
    MsgSpec(MsgSubmitVerdict, "verifier", _handle_verdict),
    MsgSpec(MsgOpenVerdict, "verifier", _handle_open_verdict),
]


def _query_challenges(
    ctx: QueryContext, request: q.QueryChallengesRequest
) -> q.QueryChallengesResponse:
    prefix = _prefix(request.run_id, request.round)
    found, pages = page(ctx.store, prefix, request.pagination, Challenge.FromString)
    return q.QueryChallengesResponse(challenges=found, pagination=pages)


QUERIES: dict[str, QueryHandler] = {
    "Challenges": _query_challenges,
}  # fmt: skip

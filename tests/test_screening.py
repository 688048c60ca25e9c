"""Screening in process: verifiers screen every commit; a commit a quorum fails has every
segment challenged, and the replay (not the screen) decides whether it is slashed."""

from __future__ import annotations

import pytest

from dilochain.chain.errors import codes
from dilochain.chain.modules import beacon, challenges, rewards, rounds, screening, slashing
from dilochain.protocol.committee import screen_committee
from dilochain.protocol.params import MAX_SCREEN_VOTES
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgSubmitScreen, ScreenVote
from tests.test_beacon import window
from tests.test_challenges import (
    CHEAT,
    HONEST,
    LAZY,
    VERIFIERS,
    Chain,
    addr,
    open_votes,
    reveal,
    start_round_0,
    vote,
)

ACCEPTED, FAILED, PAID = (challenges.COMMIT_ACCEPTED, challenges.COMMIT_FAILED,
                          challenges.COMMIT_PAID)  # fmt: skip


def screen(net, v, host, passed, inconsistent=False):
    return net.send(v, MsgSubmitScreen(verifier=addr(v), run_id="r", round=0, votes=[
        ScreenVote(host=addr(host), passed=passed, evidence_hash=b"\x00" * 32,
                   inconsistent=inconsistent)]))  # fmt: skip


@pytest.fixture
def net(tmp_path):
    chain = start_round_0(Chain(tmp_path, sampling_rate="0"))  # only screens challenge
    yield chain
    chain.c.app.store.close()


def test_screens_are_taken_between_the_commit_window_and_selection(net):
    early = screen(net, VERIFIERS[0], HONEST, True)
    assert early.code == codes.INVALID_REQUEST and "blocks 4-5" in early.raw_log
    net.blocks_until(window(net).end)
    before = screen(net, VERIFIERS[0], HONEST, True)  # in the block that records the anchor
    assert before.code == codes.INVALID_REQUEST and "once its anchor is recorded" in before.raw_log
    net.c.block()
    outsider = screen(net, HONEST, CHEAT, False)
    assert outsider.code == codes.UNAUTHORIZED
    assert screen(net, VERIFIERS[0], VERIFIERS[1], True).code == codes.NOT_FOUND  # no commit
    assert screen(net, VERIFIERS[0], HONEST, True).code == 0
    twice = screen(net, VERIFIERS[0], HONEST, False)
    assert twice.code == codes.INVALID_REQUEST and "already screened" in twice.raw_log
    net.blocks_until(window(net).selection)
    late = screen(net, VERIFIERS[1], HONEST, True)
    assert late.code == codes.INVALID_REQUEST


def test_a_message_packs_a_verifier_s_votes_which_stand_or_fall_together(net):
    net.blocks_until(window(net).end + 1)
    v = VERIFIERS[0]

    def votes(*hosts, passed=True):
        return MsgSubmitScreen(verifier=addr(v), run_id="r", round=0, votes=[
            ScreenVote(host=h if isinstance(h, str) else addr(h), passed=passed)
            for h in hosts])  # fmt: skip

    for bad, code, why in (
        (votes(), codes.INVALID_REQUEST, f"1 to {MAX_SCREEN_VOTES} votes"),
        (votes(HONEST, HONEST), codes.INVALID_REQUEST, "one a host"),
        (votes(*[f"h{i}" for i in range(MAX_SCREEN_VOTES + 1)]), codes.INVALID_REQUEST,
         f"1 to {MAX_SCREEN_VOTES} votes"),
        (votes(HONEST, VERIFIERS[1]), codes.NOT_FOUND, "did not commit"),  # one bad vote
    ):  # fmt: skip
        refused = net.send(v, bad)
        assert refused.code == code and why in refused.raw_log, refused.raw_log
    # The good vote of the last fell with it: else HONEST's would now be "already screened".
    assert net.send(v, votes(HONEST, CHEAT, LAZY)).code == 0
    net.c.block()
    screens = {s.host: [(x.verifier, x.passed) for x in s.votes]
               for s in screening.screens(net.view, "r", 0)}  # fmt: skip
    assert screens == {addr(h): [(addr(v), True)] for h in (HONEST, CHEAT, LAZY)}


def test_a_failed_screen_challenges_every_segment_and_the_replay_decides(net):
    w = window(net)
    net.blocks_until(w.end + 1)  # the anchor is recorded
    for v in VERIFIERS:
        for host in (HONEST, CHEAT, LAZY):
            # CHEAT fails everyone's screen; LAZY (honest, unlucky) fails two of three;
            # HONEST fails one, short of the quorum of 2.
            fails = {CHEAT: True, LAZY: v != VERIFIERS[2], HONEST: v == VERIFIERS[0]}[host]
            assert screen(net, v, host, not fails).code == 0
    net.blocks_until(w.selection)
    view = net.view
    picked = {(c.host, c.segment) for c in challenges.challenges(view, "r", 0)}
    assert picked == {(addr(h), s) for h in (CHEAT, LAZY) for s in (0, 1)}
    found = {s.host: s.failed for s in screening.screens(view, "r", 0)}
    assert found == {addr(HONEST): False, addr(CHEAT): True, addr(LAZY): True}

    # The replays: CHEAT's fail, LAZY's pass. Only CHEAT is slashed; LAZY is paid.
    for host in (CHEAT, LAZY):
        for segment in (0, 1):
            assert net.send(host, reveal(host, segment)).code == 0
    for host in (CHEAT, LAZY):
        for segment in (0, 1):
            for v in VERIFIERS:
                assert vote(net, v, host, segment, host is LAZY).code == 0
    open_votes(net, w)
    net.blocks_until(w.resolution)
    view = net.view
    assert {s.address for s in slashing.slashes(view)} == {addr(CHEAT)}
    params = net.c.app.params
    work = {h: rewards.claimable(view, params, addr(h), 0).host_work for h in (HONEST, LAZY)}
    assert work[HONEST] == work[LAZY] != "0"
    outcomes = {c.host: c.outcome for c in rounds.commits(view, "r", 0)}
    assert outcomes == {addr(HONEST): ACCEPTED, addr(CHEAT): FAILED, addr(LAZY): PAID}


def test_a_screen_failed_on_contradicting_artifacts_replays_only_the_last_segment(net):
    w = window(net)
    net.blocks_until(w.end + 1)
    v0 = VERIFIERS[0]
    padded = net.send(v0, MsgSubmitScreen(verifier=addr(v0), run_id="r", round=0, votes=[
        ScreenVote(host=addr(CHEAT), passed=False, evidence_hash=b"\x00" * 4_000)]))  # fmt: skip
    assert padded.code == codes.INVALID_REQUEST and "32 bytes" in padded.raw_log
    for v in VERIFIERS:
        # CHEAT's artifacts contradict each other for all three; for LAZY two say so (a quorum)
        # but the third failed its loss test: colluders must not cut a fail on the loss test to
        # one replayed segment, so LAZY is replayed in full.
        assert screen(net, v, CHEAT, False, inconsistent=True).code == 0
        assert screen(net, v, LAZY, False, inconsistent=v != VERIFIERS[2]).code == 0
        assert screen(net, v, HONEST, True, inconsistent=True).code == 0  # a pass: ignored
    net.blocks_until(w.selection)
    picked = {(c.host, c.segment) for c in challenges.challenges(net.view, "r", 0)}
    assert picked == {(addr(CHEAT), 1), (addr(LAZY), 0), (addr(LAZY), 1)}
    found = {s.host: (s.failed, s.inconsistent) for s in screening.screens(net.view, "r", 0)}
    assert found == {addr(CHEAT): (True, True), addr(LAZY): (True, False),
                     addr(HONEST): (False, False)}  # fmt: skip
    # The one replay decides: CHEAT's fails, and it is slashed.
    assert net.send(CHEAT, reveal(CHEAT, 1)).code == 0
    for v in VERIFIERS:
        assert vote(net, v, CHEAT, 1, False).code == 0
    open_votes(net, w)
    net.blocks_until(w.resolution)
    assert addr(CHEAT) in {s.address for s in slashing.slashes(net.view)}


def test_a_commit_no_quorum_screened_is_replayed_in_full_and_kept_out_of_the_model(net):
    """Fail-closed: one verifier up screens alone (below the quorum of 2), so no commit is
    screened passing and every segment is challenged. The verifiers back for the replays pass
    HONEST (paid, left out of the model) and fail CHEAT's random pseudo-gradient (slashed); a
    verifier that voted on nothing decided without it loses its verifier reward."""
    w = window(net)
    net.blocks_until(w.end + 1)  # the anchor is recorded
    for host in (HONEST, CHEAT, LAZY):
        assert screen(net, VERIFIERS[0], host, host is not CHEAT).code == 0
    net.blocks_until(w.selection)
    view = net.view
    assert not screening.passed(view, "r", 0)
    picked = {(c.host, c.segment) for c in challenges.challenges(view, "r", 0)}
    assert picked == {(addr(h), s) for h in (HONEST, CHEAT, LAZY) for s in (0, 1)}
    for host in (HONEST, CHEAT):  # LAZY never reveals
        for segment in (0, 1):
            assert net.send(host, reveal(host, segment)).code == 0
    v0, v1, v2 = VERIFIERS
    for host in (HONEST, CHEAT):
        for segment in (0, 1):
            for v in (v0, v1):  # v2 is down
                assert vote(net, v, host, segment, host is HONEST).code == 0
    open_votes(net, w)
    net.blocks_until(w.resolution)
    view = net.view
    outcomes = {c.host: c.outcome for c in rounds.commits(view, "r", 0)}
    assert outcomes == {addr(HONEST): PAID, addr(CHEAT): FAILED, addr(LAZY): FAILED}
    params = net.c.app.params
    net.blocks_until(rewards.epoch_bounds(params, 0)[1])
    due = {v: rewards.claimable(net.view, params, addr(v), 0) for v in VERIFIERS}
    assert due[v0].verifier_work == due[v1].verifier_work == "4" and due[v2].amount == "0"
    assert rewards.claimable(net.view, params, addr(HONEST), 0).host_work != "0"


def test_only_a_commits_committee_may_screen_it(tmp_path):
    net = start_round_0(Chain(tmp_path, sampling_rate="0", screeners_per_commit=2))
    try:
        w = window(net)
        net.blocks_until(w.end + 1)
        anchor = beacon.get(net.view, "r", 0).anchor
        everyone = [addr(v) for v in VERIFIERS]
        draw = screening.committees_of(net.view, net.c.app.params.poc, "r", 0, w.start)
        chosen = draw(addr(HONEST))
        assert chosen == screen_committee(anchor, "r", 0, addr(HONEST), everyone, 2)
        assert len(chosen) == 2 and chosen < set(everyone)
        left_out = next(v for v in VERIFIERS if addr(v) not in chosen)
        refused = screen(net, left_out, HONEST, False)
        assert refused.code == codes.UNAUTHORIZED
        assert "not on the screening committee" in refused.raw_log
        assert all(screen(net, v, HONEST, False).code == 0
                   for v in VERIFIERS if addr(v) in chosen)  # fmt: skip
        net.blocks_until(w.selection)  # the committee's two votes are a quorum: it failed
        failed = [s for s in screening.screens(net.view, "r", 0) if s.failed]
        assert [s.host for s in failed] == [addr(HONEST)] and len(failed[0].votes) == 2
    finally:
        net.c.app.store.close()

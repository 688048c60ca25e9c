"""``MsgLeaveVerifier``: a verifier leaves the set; it gets no new duties, owes those of rounds
begun before it left, and once the last of them is resolved it is released and its collateral
unbonds."""

from __future__ import annotations

from dilochain.chain.errors import codes
from dilochain.chain.modules import (
    beacon,
    challenges,
    collateral,
    registry,
    slashing,
    verifiers,
)
from dilochain.protocol import schedule
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCommitBeacon,
    MsgCreateRun,
    MsgDepositCollateral,
    MsgLeaveVerifier,
    MsgRegisterVerifier,
    MsgWithdrawCollateral,
)
from dilochain.testutil import FAKE_DATA
from dilochain.training.run_config import make_run_config
from tests.test_challenges import CFG, CREATOR, VERIFIERS, Chain, addr, start_round_0


def _commit_beacon(net, v, run_id: str):
    return net.send(v, MsgCommitBeacon(verifier=addr(v), run_id=run_id, round=0,
                                       commitment=b"\x09" * 32))  # fmt: skip


def test_a_verifier_that_leaves_does_its_rounds_then_is_released_and_unbonds(tmp_path):
    net = start_round_0(Chain(tmp_path))
    v0, v1, v2 = VERIFIERS
    net.c.block()  # height 2: round 0's commit window opens
    window = schedule.round_window(registry.get_run(net.view, "r"), net.c.app.params.poc, 0)
    assert (window.start, window.end, window.resolution) == (2, 3, 11)
    assert net.send(v2, MsgLeaveVerifier(verifier=addr(v2))).code == 0
    assert _commit_beacon(net, v2, "r").code == 0  # round 0 began before it left: still its duty
    net.c.block()  # height 3
    (record,) = [v for v in verifiers.verifiers(net.view) if v.address == addr(v2)]
    assert (record.left_height, record.release_height) == (3, window.resolution)
    assert verifiers.staying(net.view) == sorted([addr(v0), addr(v1)])
    again = net.send(v2, MsgLeaveVerifier(verifier=addr(v2)))
    assert again.code == codes.INVALID_REQUEST and "already left at block 3" in again.raw_log
    back = net.send(v2, MsgRegisterVerifier(verifier=addr(v2)))
    assert back.code == codes.INVALID_REQUEST and "released, after block 11" in back.raw_log
    moved = net.send(v2, MsgRegisterVerifier(verifier=addr(v2), endpoint="v2.example:7001"))
    assert moved.code == 0, moved.raw_log  # a leaving verifier still serves, and may move
    stranger = net.send(CREATOR, MsgLeaveVerifier(verifier=addr(CREATOR)))
    assert stranger.code == codes.UNAUTHORIZED
    # A run created after it left is none of its business: no beacon of it is taken from it.
    assert net.send(CREATOR, MsgCreateRun(creator=addr(CREATOR), run_id="n", config=CFG)).code == 0
    net.blocks_until(4)
    fresh = schedule.round_window(registry.get_run(net.view, "n"), net.c.app.params.poc, 0)
    net.blocks_until(fresh.start - 1)
    refused = _commit_beacon(net, v2, "n")
    assert refused.code == codes.UNAUTHORIZED
    assert "left the verifier set at block 3" in refused.raw_log
    assert _commit_beacon(net, v0, "n").code == 0
    # Round 0's challenges go to those staying; v2's beacon entry counts as any other.
    net.blocks_until(window.selection)
    assert addr(v2) in {e.verifier for e in beacon.get(net.view, "r", 0).entries}
    found = challenges.challenges(net.view, "r", 0)
    assert found and all(set(c.verifiers) == {addr(v0), addr(v1)} for c in found)
    net.blocks_until(window.resolution - 1)
    assert verifiers.is_verifier(net.view, addr(v2))
    net.c.block()  # the resolution block: released at its end
    view = net.view
    assert not verifiers.is_verifier(view, addr(v2))
    held = collateral.info(view, addr(v2))
    assert (held.bonded, held.locked) == ("0", "0")
    # What it owed it answers for: it committed to round 0's beacon and never opened it.
    (slash,) = slashing.slashes(view, addr(v2))
    assert "beacon" in slash.reason and slash.amount == "600"
    assert [e.amount for e in held.unbonding] == ["1400"]
    # Released, it may register again.
    joined = net.send(v2, MsgDepositCollateral(depositor=addr(v2), amount="1000"),
                      MsgRegisterVerifier(verifier=addr(v2)))  # fmt: skip
    assert joined.code == 0, joined.raw_log
    net.c.block()
    assert addr(v2) in verifiers.staying(net.view)


OVERLAPPED = make_run_config(FAKE_DATA, "tiny", min_collateral="1000", round_blocks=9,
                             total_rounds=2, overlap=True)  # fmt: skip


def _overlapped(tmp_path) -> Chain:
    net = Chain(tmp_path, max_round_blocks=10, unbonding_blocks=30)
    run = MsgCreateRun(creator=addr(CREATOR), run_id="ov", config=OVERLAPPED)
    assert net.send(CREATOR, run).code == 0
    for v in VERIFIERS:
        assert net.send(v, MsgDepositCollateral(depositor=addr(v), amount="2000"),
                        MsgRegisterVerifier(verifier=addr(v))).code == 0  # fmt: skip
    net.c.block()
    return net


def test_a_leave_in_an_overlapped_run_s_tail_waits_for_its_last_round(tmp_path):
    """Once an overlapped run's last commit window has closed the newest round "begun" is one
    past its end, yet the last round is still being verified: leaving then released the
    verifier at once, and the beacon it withheld cost it nothing (found by a review)."""
    net, v2 = _overlapped(tmp_path), VERIFIERS[2]
    last = schedule.round_window(registry.get_run(net.view, "ov"), net.c.app.params.poc, 1)
    net.blocks_until(last.start - 1)
    commit = MsgCommitBeacon(verifier=addr(v2), run_id="ov", round=1, commitment=b"\x09" * 32)
    assert net.send(v2, commit).code == 0
    net.blocks_until(last.end)  # the last commit window is over, its round in flight
    assert net.send(v2, MsgLeaveVerifier(verifier=addr(v2))).code == 0
    net.c.block()
    (record,) = [v for v in verifiers.verifiers(net.view) if v.address == addr(v2)]
    assert record.release_height == last.resolution
    net.blocks_until(last.resolution)
    (slash,) = slashing.slashes(net.view, addr(v2))
    assert "beacon" in slash.reason and slash.amount == "600"  # 30% of its 2,000
    held = collateral.info(net.view, addr(v2))
    assert held.bonded == "0" and [e.amount for e in held.unbonding] == ["1400"]


def test_a_leaver_slashed_out_before_its_release_still_unbonds_the_rest(tmp_path):
    net, v2 = start_round_0(Chain(tmp_path)), VERIFIERS[2]
    assert net.send(v2, MsgWithdrawCollateral(depositor=addr(v2), amount="1000")).code == 0
    net.c.block()  # height 2: round 0's commit window; 1,000 bonded, the minimum
    assert _commit_beacon(net, v2, "r").code == 0
    assert net.send(v2, MsgLeaveVerifier(verifier=addr(v2))).code == 0
    net.blocks_until(12)  # its beacon slash at selection (5) removed it; release at 11
    held = collateral.info(net.view, addr(v2))
    assert not verifiers.is_verifier(net.view, addr(v2))
    assert (held.bonded, held.locked) == ("0", "0")
    # The 1,000 it withdrew after its duty began paid its share of the slash too.
    assert sorted(e.amount for e in held.unbonding) == ["700", "700"]


def test_collateral_withdrawn_after_a_duty_began_pays_its_slash(tmp_path):
    """A verifier slashed for a round's duty loses the same share of what it started
    unbonding since that round began, as a host does for its commit."""
    net, v2 = start_round_0(Chain(tmp_path)), VERIFIERS[2]
    net.c.block()  # height 2
    assert _commit_beacon(net, v2, "r").code == 0
    assert net.send(v2, MsgWithdrawCollateral(depositor=addr(v2), amount="1000")).code == 0
    net.blocks_until(6)  # past the selection block (5), where its withheld secret is slashed
    (slash,) = slashing.slashes(net.view, addr(v2))
    held = collateral.info(net.view, addr(v2))
    assert slash.amount == "600" and held.bonded == "700"
    assert [e.amount for e in held.unbonding] == ["700"]

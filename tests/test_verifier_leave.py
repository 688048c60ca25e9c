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
)
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

"""``MsgLeaveRun``: a host leaves a run; its collateral stays held until the round it left in
is resolved (so leaving never escapes a slash), then all its free collateral unbonds."""

from __future__ import annotations

import pytest

from dilochain.chain.errors import codes
from dilochain.chain.modules import bank, collateral, registry, slashing
from dilochain.protocol import schedule
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgLeaveRun, MsgRegisterHost
from tests.test_challenges import (
    CHEAT,
    HONEST,
    LAZY,
    VERIFIERS,
    Chain,
    addr,
    commit_round,
    open_votes,
    play_round,
    reveal,
    start_round_0,
    vote,
)

BOND = 10_000  # each host's deposit; the run holds 1,000 of it


@pytest.fixture
def net(tmp_path):
    """Run "r" of test_challenges: three hosts have committed round 0."""
    chain = start_round_0(Chain(tmp_path))
    yield chain
    chain.c.app.store.close()


def leave(net, host):
    return net.send(host, MsgLeaveRun(host=addr(host), run_id="r"))


def window_of(net, round_):
    return schedule.round_window(registry.get_run(net.view, "r"), net.c.app.params.poc, round_)


def test_a_leaving_host_is_held_until_its_round_resolves_then_unbonds(net):
    window = window_of(net, 0)
    assert leave(net, HONEST).code == 0  # it committed round 0 (in the fixture)
    net.c.block()
    view = net.view
    assert not registry.is_host(view, "r", addr(HONEST))
    assert addr(HONEST) not in {h.address for h in registry.members(view, "r")}
    # Still listed, endpoint and all, so verifiers can fetch the round it owes.
    (listed,) = [h for h in registry.hosts(view, "r") if h.address == addr(HONEST)]
    assert listed.left_height > 0 and listed.endpoint == "e:1"
    assert collateral.locked(view, addr(HONEST)) == 1_000  # held while round 0 can slash it
    again = leave(net, HONEST)
    assert again.code == codes.INVALID_REQUEST and "is not a host of run" in again.raw_log
    # It still reveals what it committed, and passes.
    net.blocks_until(window.selection)
    for segment in (0, 1):
        assert net.send(HONEST, reveal(HONEST, segment)).code == 0
        for v in VERIFIERS:
            assert vote(net, v, HONEST, segment, True).code == 0
    open_votes(net, window)
    net.blocks_until(window.resolution - 1)
    assert collateral.locked(net.view, addr(HONEST)) == 1_000
    net.blocks_until(window.resolution)
    held = collateral.info(net.view, addr(HONEST))
    assert held.bonded == "0" and held.locked == "0"
    assert addr(HONEST) not in {h.address for h in registry.hosts(net.view, "r")}
    (entry,) = held.unbonding
    assert entry.amount == str(BOND)
    assert not slashing.slashes(net.view, addr(HONEST))
    # Round 1: its commit is refused; after the unbonding period the collateral is paid back.
    assert commit_round(net, HONEST, 1).code != 0
    balance = bank.balance(net.view, addr(HONEST), DENOM)
    while (net.c.app.last_block_time_ns // 10**9 < entry.completion_time_unix
           or net.c.app.height < entry.completion_height):  # fmt: skip
        net.c.block()
    net.c.block()
    assert bank.balance(net.view, addr(HONEST), DENOM) == balance + BOND
    assert collateral.info(net.view, addr(HONEST)).unbonding == []


def test_leaving_does_not_escape_the_slash_of_a_round_it_committed(net):
    window = window_of(net, 0)
    assert leave(net, CHEAT).code == 0
    supply = bank.supply(net.view, DENOM)
    net.blocks_until(window.resolution)  # it never reveals (nor does anyone here)
    (slash,) = slashing.slashes(net.view, addr(CHEAT))
    assert slash.amount == "3000"  # 30% of what it had bonded, held by the run
    held = collateral.info(net.view, addr(CHEAT))
    assert held.bonded == "0" and [e.amount for e in held.unbonding] == ["7000"]
    assert bank.supply(net.view, DENOM) < supply


def test_leaving_a_finished_run_releases_at_once(net):
    hosts = (HONEST, CHEAT, LAZY)
    play_round(net, 0, hosts)
    for host in hosts:
        assert commit_round(net, host, 1).code == 0
    last = play_round(net, 1, hosts)  # the run's last round
    net.blocks_until(last.resolution + 1)
    assert leave(net, LAZY).code == 0
    net.c.block()
    held = collateral.info(net.view, addr(LAZY))
    assert held.locked == "0" and held.bonded == "0"
    assert [e.amount for e in held.unbonding] == [str(BOND)]


def test_a_host_that_leaves_and_comes_back_is_held_once_per_membership(net):
    back = MsgRegisterHost(host=addr(HONEST), run_id="r", endpoint="e2:1")
    for _ in range(2):  # leaves and is back before its round resolves, twice
        assert leave(net, HONEST).code == 0
        net.c.block()
        assert net.send(HONEST, back).code == 0
        net.c.block()
    assert registry.is_host(net.view, "r", addr(HONEST))
    assert collateral.locked(net.view, addr(HONEST)) == 3_000  # the membership + two holds
    play_round(net, 0, [HONEST])  # revealed and passed: both leave holds end at resolution
    assert collateral.locked(net.view, addr(HONEST)) == 1_000
    (listed,) = [h for h in registry.hosts(net.view, "r") if h.address == addr(HONEST)]
    assert listed.left_height == 0 and listed.endpoint == "e2:1"
    assert collateral.info(net.view, addr(HONEST)).unbonding == []  # a member unbonds nothing


def test_a_host_leaving_an_overlapped_run_s_tail_stays_listed_until_its_last_round(tmp_path):
    """After an overlapped run's last commit window its last round is still verified: a host
    leaving then stays listed (verifiers fetch from its endpoint) and held until it resolves
    (it was unlisted at once; found by a review)."""
    from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun, MsgDepositCollateral
    from tests.test_challenges import CREATOR
    from tests.test_verifier_leave import OVERLAPPED

    net = Chain(tmp_path, max_round_blocks=10, unbonding_blocks=30)
    run = MsgCreateRun(creator=addr(CREATOR), run_id="ov", config=OVERLAPPED)
    assert net.send(CREATOR, run).code == 0
    deposit = MsgDepositCollateral(depositor=addr(HONEST), amount=str(BOND))
    join = MsgRegisterHost(host=addr(HONEST), run_id="ov", endpoint="e:1")
    assert net.send(HONEST, deposit, join).code == 0
    net.c.block()
    last = schedule.round_window(registry.get_run(net.view, "ov"), net.c.app.params.poc, 1)
    net.blocks_until(last.end)
    assert net.send(HONEST, MsgLeaveRun(host=addr(HONEST), run_id="ov")).code == 0
    net.blocks_until(last.resolution - 1)
    assert addr(HONEST) in [h.address for h in registry.hosts(net.view, "ov")]
    net.c.block()  # the last round's resolution: released at its end
    assert addr(HONEST) not in [h.address for h in registry.hosts(net.view, "ov")]

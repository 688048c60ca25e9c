"""Vesting with clawback in process: a claim vests over epochs, a slash forfeits what has not
vested, and the supply stays genesis + paid - burned."""

from __future__ import annotations

import pytest

from dilochain.chain.errors import codes
from dilochain.chain.modules import bank, rewards, slashing
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgClaimReward, MsgWithdrawVested
from tests.test_challenges import (
    CHEAT,
    HONEST,
    LAZY,
    REWARDS,
    Chain,
    addr,
    commit_round,
    play_round,
    start_round_0,
)

HOSTS = (HONEST, CHEAT, LAZY)
SHARE = REWARDS["reward_per_epoch"] * 9 // 10 // 3  # each host's third of epoch 0's host pool


@pytest.fixture
def net(tmp_path):
    chain = start_round_0(Chain(tmp_path, rewards={"vesting_epochs": 4}))
    genesis_supply = bank.supply(chain.c.app.committed_view(), DENOM)
    yield chain, genesis_supply
    chain.c.app.store.close()


def _until_epoch(net, epoch):
    net.blocks_until(rewards.epoch_bounds(net.c.app.params, epoch)[0])


def _claim(net, host, epoch=0):
    return net.send(host, MsgClaimReward(claimer=addr(host), epoch=epoch))


def _withdraw(net, host):
    return net.send(host, MsgWithdrawVested(claimer=addr(host)))


def _grant(net, host):
    (grant,) = rewards.grants(net.view, net.c.app.params, addr(host), net.c.app.height)
    return grant


def test_a_claim_vests_over_epochs_and_a_slash_claws_back_the_rest(net):
    net, genesis_supply = net
    params = net.c.app.params
    play_round(net, 0, HOSTS)  # everyone honest in round 0 (epoch 0)
    for host in HOSTS:
        assert commit_round(net, host, 1).code == 0
    _until_epoch(net, 1)
    balance = {h: bank.balance(net.view, addr(h), DENOM) for h in HOSTS}
    for host in (HONEST, CHEAT):  # a quarter has vested by the first block of epoch 1
        assert _claim(net, host).code == 0
    net.c.block()
    paid = {h: bank.balance(net.view, addr(h), DENOM) - balance[h] for h in (HONEST, CHEAT)}
    fee = 5000  # 200,000 gas at 0.025
    assert paid == {HONEST: SHARE // 4 - fee, CHEAT: SHARE // 4 - fee}
    grant = _grant(net, HONEST)
    assert (grant.total, grant.vested, grant.paid) == (str(SHARE), str(SHARE // 4), str(SHARE // 4))
    nothing = _withdraw(net, HONEST)
    assert nothing.code == codes.NOT_FOUND and "no vested rewards" in nothing.raw_log

    # Round 1: CHEAT is caught (epoch 1). The three quarters it had not vested are forfeited.
    window = play_round(net, 1, HOSTS, failing=(CHEAT,))
    assert rewards.epoch_of(params, window.resolution) == 1
    assert slashing.slashes(net.view, addr(CHEAT))
    # Its grant is cut to what it was paid and, with nothing left to vest, dropped.
    assert not rewards.grants(net.view, params, addr(CHEAT), net.c.app.height)
    _until_epoch(net, 3)
    assert _withdraw(net, CHEAT).code == codes.NOT_FOUND  # nothing more will ever vest
    assert _withdraw(net, HONEST).code == 0  # epochs 2 and 3 of 4 have vested
    net.c.block()
    assert _grant(net, HONEST).paid == str(3 * SHARE // 4)
    _until_epoch(net, 4)
    assert _withdraw(net, HONEST).code == 0
    assert _claim(net, LAZY).code == 0  # claiming late: everything has vested, paid at once
    net.c.block()
    view = net.view
    assert not rewards.grants(view, params, addr(HONEST), net.c.app.height)  # done: dropped
    assert not rewards.grants(view, params, addr(LAZY), net.c.app.height)

    # Supply: genesis + rewards paid (HONEST and LAZY in full, CHEAT its vested quarter)
    # - collateral burned by slashes; fees only move to the fee collector.
    burned = sum(int(s.amount) for s in slashing.slashes(view))
    assert burned > 0
    assert bank.supply(view, DENOM) == genesis_supply + 2 * SHARE + SHARE // 4 - burned

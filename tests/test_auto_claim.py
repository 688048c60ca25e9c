"""Auto-claim: each closed epoch that pays is claimed once, vested rewards are withdrawn,
transient failures are retried with backoff, and a restarted claimer sends nothing twice.

The chain is a small in-memory ledger with the chain's rules for these two messages (a claim
pays half now and vests the rest at the next epoch; a second claim is refused)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import SimpleNamespace

from dilochain.auto_claim import AutoClaimer
from dilochain.client import TxRefused
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgClaimReward, MsgWithdrawVested
from dilochain.protocol.pb.poc.v1.types_pb2 import Claimable, EpochInfo, VestingGrant

ME = "dilo1me"


@dataclass
class Ledger:
    """Epochs, what ``ME`` earned in each, claims and vesting; ``send`` applies a tx."""

    epoch: int = 0
    earned: dict[int, int] = field(default_factory=dict)
    claimed: set[int] = field(default_factory=set)
    grants: dict[int, list[int]] = field(default_factory=dict)  # epoch: [total, vested, paid]
    sent: list = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # the next sends fail with these

    def close_epoch(self) -> None:
        self.epoch += 1
        for grant in self.grants.values():
            grant[1] = grant[0]  # the second half vests

    # PocClient's queries
    def epoch_info(self, epoch: int | None = None) -> EpochInfo:
        number = self.epoch if epoch is None else epoch
        return EpochInfo(epoch=number, closed=number < self.epoch)

    def claimable(self, address: str, epoch: int) -> Claimable:
        amount = self.earned.get(epoch, 0)
        return Claimable(address=address, epoch=epoch, amount=str(amount),
                         claimed=epoch in self.claimed)  # fmt: skip

    def vesting(self, address: str) -> list[VestingGrant]:
        return [VestingGrant(epoch=e, total=str(t), vested=str(v), paid=str(p))
                for e, (t, v, p) in self.grants.items() if p < t]  # fmt: skip

    def send(self, msg) -> SimpleNamespace:
        self.sent.append(msg)
        if self.failures:
            raise TxRefused(self.failures.pop(0))
        if isinstance(msg, MsgClaimReward):
            if msg.epoch in self.claimed:
                raise TxRefused(f"epoch {msg.epoch} already claimed")
            self.claimed.add(msg.epoch)
            total = self.earned[msg.epoch]
            self.grants[msg.epoch] = [total, total // 2, total // 2]
            paid, event = total // 2, "claim_reward"
        else:
            assert isinstance(msg, MsgWithdrawVested)
            paid = sum(v - p for _, v, p in self.grants.values())
            for grant in self.grants.values():
                grant[2] = grant[1]
            event = "withdraw_vested"
        return SimpleNamespace(events={event: {"amount": f"{paid}udlc"}}, hash="AB" * 32)


def claimer(ledger: Ledger, **kw) -> AutoClaimer:
    poc = SimpleNamespace(epoch=ledger.epoch_info, claimable=ledger.claimable,
                          vesting=ledger.vesting)  # fmt: skip
    return AutoClaimer(poc, ME, ledger.send, backoff_seconds=0, **kw)


def test_claims_each_paying_epoch_once_then_withdraws_what_vests(caplog):
    caplog.set_level(logging.INFO)
    ledger = Ledger(epoch=0, earned={0: 100, 2: 40})  # nothing earned in epoch 1
    auto = claimer(ledger)
    auto.step()
    assert ledger.sent == []  # epoch 0 is still open
    ledger.close_epoch()
    auto.step()
    assert ledger.sent == [MsgClaimReward(claimer=ME, epoch=0)]
    auto.step()  # same epoch: no query of every epoch again, nothing sent
    assert len(ledger.sent) == 1
    ledger.close_epoch()  # epoch 1 closes (nothing earned); epoch 0's second half vests
    auto.step()
    assert ledger.sent[1:] == [MsgWithdrawVested(claimer=ME)]
    ledger.close_epoch()
    auto.step()
    assert ledger.sent[2:] == [MsgClaimReward(claimer=ME, epoch=2)]
    assert auto.paid == 50 + 50 + 20
    assert "auto-claim: epoch 0 claimed: paid 50udlc now" in caplog.text

    # A restart: a new claimer over the same chain sends nothing already done.
    ledger.sent.clear()
    again = claimer(ledger)
    again.step()
    assert ledger.sent == []
    ledger.close_epoch()  # epoch 2's second half vests
    again.step()
    assert ledger.sent == [MsgWithdrawVested(claimer=ME)]


def test_transient_failures_are_retried_and_refusals_given_up(caplog):
    ledger = Ledger(epoch=2, earned={0: 10, 1: 10})
    ledger.failures = ["not included in a block within 30s"]
    auto = claimer(ledger)
    auto.step()  # epoch 0's claim fails; epoch 1 waits behind it
    assert [m.epoch for m in ledger.sent] == [0] and auto.next_epoch == 0
    auto.step()  # retried (backoff 0 here)
    assert [m.epoch for m in ledger.sent] == [0, 0, 1] and auto.next_epoch == 2

    stubborn = Ledger(epoch=1, earned={0: 10})
    stubborn.failures = ["insufficient funds for fees"] * 3
    auto = claimer(stubborn, max_attempts=3)
    for _ in range(3):
        auto.step()
    assert len(stubborn.sent) == 3 and auto.next_epoch == 1  # given up: no more spam
    assert "giving up after 3 tries" in caplog.text
    auto.step()
    assert len(stubborn.sent) == 3


def test_an_epoch_claimed_elsewhere_is_not_claimed_again():
    ledger = Ledger(epoch=1, earned={0: 10})
    auto = claimer(ledger)
    ledger.claimed.add(0)  # e.g. by `dilochain rewards claim` meanwhile
    ledger.grants[0] = [10, 10, 10]
    auto.step()
    assert ledger.sent == []

"""A verifier's round duties against the real chain: it commits to its beacon secret in the
commit window and opens it in the beacon window every round, from its key alone (restart-safe),
never slashed. (Screening against real hosts: the devnet and adversarial network tests.)"""

from __future__ import annotations

import logging
import time

import pytest

from dilochain.client import submit
from dilochain.poc_client import PocClient
from dilochain.protocol import beacon as encoding
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCreateRun,
    MsgDepositCollateral,
    MsgRegisterVerifier,
)
from dilochain.testutil import FAKE_DATA
from dilochain.training.run_config import make_run_config
from dilochain.verifier.ballots import BallotBox
from dilochain.verifier.round_duties import RoundDuties, beacon_secret

pytestmark = pytest.mark.integration


def test_duties_commit_and_open_the_beacon_every_round(running_chain, caplog, tmp_path):
    client, (creator, verifier, *_) = running_chain.client, running_chain.wallets
    address = str(verifier.address())
    cfg = make_run_config(
        FAKE_DATA,
        "tiny",
        round_blocks=4,
        total_rounds=2,
        start_delay_blocks=3,
    )
    submit(client, creator, MsgCreateRun(creator=str(creator.address()), run_id="b", config=cfg))
    submit(client, verifier, MsgDepositCollateral(depositor=address, amount="10000000"),
           MsgRegisterVerifier(verifier=address))  # fmt: skip
    poc = PocClient(running_chain.address)

    def send(*msgs, until_height=None):
        return submit(client, verifier, *msgs, until_height=until_height)

    screened = []  # no host commits in this run: nothing to screen
    screener = lambda *args: screened.append(args) or []  # noqa: E731
    ballots = BallotBox(tmp_path / "ballots.sqlite", address)  # no hosts: nothing to vote on
    participant = RoundDuties(poc, verifier, send, screener, ballots)
    caplog.set_level(logging.WARNING)
    deadline = time.monotonic() + 120
    while not poc.round_info("b").finished:
        assert time.monotonic() < deadline, "the run did not finish"
        participant.step()
        if poc.round_info("b").round == 1:  # a restarted verifier: fresh duties
            participant = RoundDuties(poc, verifier, send, screener, ballots)
        time.sleep(0.1)
    for round_ in (0, 1):
        found = poc.beacon("b", round_)
        (entry,) = found.entries
        secret = beacon_secret(verifier, "b", round_)
        assert entry.verifier == address and entry.secret == secret
        assert entry.commitment == encoding.commitment(secret, address)
        assert found.seed == encoding.mix(found.anchor, [(address, secret)])
    assert beacon_secret(verifier, "b", 0) != beacon_secret(verifier, "b", 1)
    assert not poc.slashes(address)
    assert "refused" not in caplog.text and not screened
    poc.close()

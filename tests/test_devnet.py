"""``dilochain devnet up`` end to end, then the chain it left behind, restarted and queried."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cosmpy.aerial.client import LedgerClient
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_q

from dilochain.cli.devnet_cmd import HOST_COLLATERAL, PASSWORD
from dilochain.client import TxRefused, network_config, submit
from dilochain.keyring import Keyring
from dilochain.localnet import ChainProcess
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgClaimReward
from dilochain.protocol.pb.poc.v1.types_pb2 import ChallengeStatus

FAILED = ChallengeStatus.CHALLENGE_STATUS_FAILED

pytestmark = pytest.mark.integration
ROUNDS = 3


def test_devnet_up_catches_the_cheater_and_pays_everyone(tmp_path):
    summary_path = tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "dilochain.cli.main", "devnet", "up", "--dir", str(tmp_path / "d"),
           "--rounds", str(ROUNDS), "--json", str(summary_path)]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "caught and slashed" in result.stdout
    summary = json.loads(summary_path.read_text())
    assert Path(summary["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    members = {m["name"]: m for m in summary["members"]}

    with ChainProcess(Path(summary["chain_home"]), "200ms") as chain:
        poc = PocClient(chain.address)
        client = LedgerClient(network_config(summary["chain_id"], chain.address))
        checkpoints = poc.global_checkpoints(run_id=summary["run_id"])
        assert [g.round for g in checkpoints] == list(range(ROUNDS))
        assert all(g.agreeing == g.commits >= 3 for g in checkpoints)
        for r in range(ROUNDS):  # both verifiers took part in every round's beacon
            found = poc.beacon(summary["run_id"], r)
            assert len(found.entries) == 2 and all(e.secret for e in found.entries)
        # Screening: the cheater's random pseudo-gradient fails round 0's screen, so every one of
        # its segments is replayed and it is caught then, whatever the sampling drew.
        screens = {x.host: x for x in poc.screens(summary["run_id"], 0)}
        cheater_address = members["host-3"]["address"]
        assert screens[cheater_address].failed and len(screens[cheater_address].votes) == 2
        honest = [members[f"host-{i}"]["address"] for i in range(3)]
        assert all(not screens[a].failed and len(screens[a].votes) == 2 for a in honest)
        cfg = poc.run(summary["run_id"]).config
        caught = [c for c in poc.challenges(summary["run_id"], 0) if c.host == cheater_address]
        segments = cfg.inner_steps // cfg.checkpoint_interval
        assert [c.segment for c in caught] == list(range(segments))
        assert all(c.status == FAILED for c in caught)

        cheater = members["host-3"]
        slashes = [s for s in poc.slashes(address=cheater["address"])]
        assert slashes, "the dishonest host was not slashed"
        expected = HOST_COLLATERAL
        for _ in slashes:
            expected -= int(expected * 0.3)
        bonded = poc.collateral(address=cheater["address"])
        assert int(bonded.bonded) == expected

        paid = 0
        for name in ("host-0", "host-1", "host-2", "verifier-0", "verifier-1"):
            member = members[name]
            assert member["claims"], f"{name} was paid nothing"
            assert not poc.slashes(address=member["address"])
            for claim in member["claims"]:
                due = poc.claimable(member["address"], claim["epoch"])
                info = poc.epoch(epoch=claim["epoch"])
                pool = int(info.reward_pool)
                share = (pool - pool // 10) * int(due.host_work) // max(1, int(info.host_work))
                share += pool // 10 * int(due.verifier_work) // max(1, int(info.verifier_work))
                assert due.claimed and int(due.amount) == claim["amount"] == share
                # Vesting over 2 epochs: a claim pays what has vested, the rest waits.
                vesting = {g.epoch: g for g in poc.vesting(member["address"])}
                grant = vesting.get(claim["epoch"])
                assert claim["paid"] == (int(grant.paid) if grant else claim["amount"])
                assert claim["amount"] // 2 <= claim["paid"]
                paid += claim["paid"]
        assert not members["host-3"]["claims"]

        # A second claim of the same epoch is refused.
        host0 = members["host-0"]
        wallet = Keyring(Path(host0["home"]) / "keyring").wallet("k", PASSWORD)
        with pytest.raises(TxRefused, match="already claimed"):
            submit(client, wallet, MsgClaimReward(claimer=host0["address"],
                                                  epoch=host0["claims"][0]["epoch"]))  # fmt: skip

        # Supply: genesis + rewards minted - collateral burned by slashing.
        burned = sum(int(s.amount) for s in poc.slashes())
        supply = client.bank.SupplyOf(bank_q.QuerySupplyOfRequest(denom=DENOM)).amount.amount
        assert int(supply) == summary["genesis_supply"] + paid - burned

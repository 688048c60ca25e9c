"""Cheating hosts against real node, verifier and chain processes: every cheat is caught and
slashed, honest hosts (even with slightly different floats) are not, and verifiers that vote
without replaying (always fail, always pass, copy the others) are penalised even where the honest
verifiers agree with them on the outcome. Two hosts (an honest one and a cheat) publish to an
S3 server (versitygw) instead of serving their artifacts: verifiers screen and replay them from
there alike."""

from __future__ import annotations

import signal
import time

import pytest
from cosmpy.aerial.client import LedgerClient

from dilochain.chain.modules.challenges import FAILED, NOT_REVEALED, PASSED
from dilochain.client import network_config, submit
from dilochain.keyring import Keyring
from dilochain.local_s3 import LocalS3
from dilochain.localnet import (
    ChainProcess,
    init_localnet,
    spawn_node,
    spawn_verifier,
    wait_until_ready,
)
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.testutil import CHAIN_ID, shipped_data, wallet
from dilochain.training.run_config import make_run_config

pytestmark = [pytest.mark.integration, pytest.mark.heavy]
PASSWORD = "pw"
HONEST = ["honest", "honest", "noisy"]
CHEATS = ["random-pg", "fewer-steps", "wrong-data", "bad-reveal", "no-reveal", "copy-pg"]
VERIFIERS = ["honest", "honest", "always-fail", "always-pass", "copy"]
# Hosts that train on two local processes (gloo): an honest one, replayed by one-process
# verifiers in tolerance mode, and a cheat.
TWO_RANKS = {1, (HONEST + CHEATS).index("wrong-data")}
OBJECT_STORE = {0, (HONEST + CHEATS).index("fewer-steps")}  # publish to S3, serve nothing
LAZY_SLASH = {"always-fail": "its fingerprint disagrees with the replays",
              "always-pass": "its fingerprint disagrees with the replays",
              "copy": "did not open its vote"}  # fmt: skip
COLLATERAL = 10_000_000
POC = {
    "sampling_rate": "1", "beacon_reveal_blocks": 15, "reveal_window_blocks": 10,
    "verdict_window_blocks": 25, "verdict_open_blocks": 40,
    "verifiers_per_challenge": len(VERIFIERS), "quorum": 2, "verification_mode": "tolerance",
    "tolerance": "1e-4", "slash_fraction": "0.3", "verifier_slash_fraction": "0.05",
    "min_verifier_collateral": COLLATERAL,
}  # fmt: skip


def _sealed_all(challenges, verifier: str) -> bool:
    """Whether ``verifier`` has sealed a vote on every revealed challenge assigned to it."""
    mine = [c for c in challenges if verifier in c.verifiers and c.revealed]
    return bool(mine) and all(any(v.verifier == verifier for v in c.votes) for c in mine)


def test_cheaters_are_slashed_and_honest_hosts_are_not(tmp_path):
    creator = wallet(400)
    host_homes = [tmp_path / f"host-{i}-{b}" for i, b in enumerate(HONEST + CHEATS)]
    verifier_homes = [tmp_path / f"verifier-{i}-{b}" for i, b in enumerate(VERIFIERS)]
    address = {h: Keyring(h / "keyring").add("k", PASSWORD)[0].address
               for h in host_homes + verifier_homes}  # fmt: skip
    funded = {a: {DENOM: 10**12} for a in [str(creator.address()), *address.values()]}
    init_localnet(tmp_path / "chain", CHAIN_ID, funded, poc=POC)
    # Every process is up (and every verifier registered) before the run exists, so round 0's
    # schedule, fixed when the run is created, does not race 14 processes starting on 2 cores.
    cfg = make_run_config(shipped_data()[1], "tiny", round_blocks=25, total_rounds=2,
                          start_delay_blocks=60, min_collateral=str(COLLATERAL))  # fmt: skip
    with ChainProcess(tmp_path / "chain", "200ms") as chain, LocalS3(tmp_path / "s3") as s3:
        client = LedgerClient(network_config(CHAIN_ID, chain.address))
        procs = []
        for i, (home, how) in enumerate(zip(host_homes, HONEST + CHEATS, strict=True)):
            flags = ["--nproc-per-node", "2"] if i in TWO_RANKS else []
            if i in OBJECT_STORE:
                flags += ["--object-store", s3.url, "--object-store-endpoint", s3.endpoint]
            procs.append(spawn_node(home, "adv", "k", chain.address, PASSWORD, "--behavior", how,
                                    "--wait-for-run", *flags,
                                    env=s3.env if i in OBJECT_STORE else None))  # fmt: skip
        for home, how in zip(verifier_homes, VERIFIERS, strict=True):
            procs.append(spawn_verifier(home, "k", chain.address, PASSWORD, "--behavior", how))
        nodes, verifiers = procs[: len(host_homes)], procs[len(host_homes) :]
        poc = PocClient(chain.address)
        try:
            wait_until_ready(nodes, host_homes, verifiers, verifier_homes)
            submit(client, creator, MsgCreateRun(creator=str(creator.address()), run_id="adv",
                                                 config=cfg))  # fmt: skip
            # Restart an honest verifier between sealing its round-0 votes and opening them:
            # the restarted process must open exactly what it sealed, in the opening window.
            # (Stopped as soon as it has sealed them all, so how fast a loaded machine replays
            # does not decide which challenges it leaves undecided.)
            first = address[verifier_homes[0]]
            while not _sealed_all(poc.challenges("adv", 0), first):
                info = poc.round_info("adv")
                assert info.round > 0 or info.height < info.verdict_open_height, "not sealed"
                time.sleep(0.2)
            verifiers[0].send_signal(signal.SIGINT)
            assert verifiers[0].wait(30) == 0
            verifiers[0] = spawn_verifier(verifier_homes[0], "k", chain.address, PASSWORD)
            for home, proc in zip(host_homes, nodes, strict=True):
                assert proc.wait(240) == 0, (home / "node.log").read_text()[-3000:]
        finally:
            for proc in verifiers:
                proc.terminate()
            for proc in verifiers:
                proc.wait(30)
        slashes = list(poc.slashes())
        locations = {h.address: h.endpoint for h in poc.hosts(run_id="adv")}
        bonded = {home: int(poc.collateral(address=a).bonded) for home, a in address.items()}
        commits, challenges, beacons, screens = [], [], [], []
        for r in range(cfg.total_rounds):
            commits += poc.commits(run_id="adv", round=r)
            challenges += poc.challenges("adv", r)
            beacons.append(poc.beacon("adv", r))
            screens += poc.screens("adv", r)

    slashed = {s.address for s in slashes}
    # The honest S3 host is registered at its prefix's URL; the S3 cheat (it serves nothing
    # else) failed its replays below, so they read what it published there.
    a = address[host_homes[0]]
    assert locations[a] == f"{s3.endpoint}/dilochain/runs/adv/{a}", locations
    # Every registered verifier (a restarted one too) committed and opened in time. A lazy one
    # slashed below the minimum in round 0 is removed (its next commitment refused) until its
    # service notices, bonds the minimum again and registers anew.
    honest = {address[h] for h, b in zip(verifier_homes, VERIFIERS, strict=True) if b == "honest"}
    assert len(beacons[0].entries) == len(VERIFIERS)
    for found in beacons:
        assert honest <= {e.verifier for e in found.entries}
        assert all(e.secret for e in found.entries)
    screened_out = {x.host for x in screens if x.failed}
    for home, behavior in zip(host_homes, HONEST + CHEATS, strict=True):
        a = address[home]
        mine = [c for c in commits if c.host == a]
        assert mine, f"{behavior} committed no round"
        if behavior in HONEST:
            assert a not in slashed, f"{behavior} host was slashed"
            assert not any(c.excluded for c in mine)
            assert bonded[home] == COLLATERAL
            assert a not in screened_out, f"{behavior} host failed a screen"
        else:
            assert a in slashed, f"{behavior} was not caught"
            assert all(c.excluded for c in mine), behavior
            assert bonded[home] <= COLLATERAL * 0.7, behavior
            statuses = {c.status for c in challenges if c.host == a}
            expected = NOT_REVEALED if behavior in ("bad-reveal", "no-reveal") else FAILED
            assert expected in statuses, (behavior, statuses)
            if behavior in ("random-pg", "copy-pg"):  # not its own base - final checkpoint
                assert a in screened_out, f"{behavior} passed every screen"
    passed = {(c.round, f"{c.host} segment {c.segment}") for c in challenges if c.status == PASSED}
    assert passed, "no challenge passed"
    for home, behavior in zip(verifier_homes, VERIFIERS, strict=True):
        mine = [s for s in slashes if s.address == address[home]]
        if behavior == "honest":
            assert not mine, [s.reason for s in mine]
            assert bonded[home] == COLLATERAL
            assert "already voted" not in (home / "verifier.log").read_text()  # restart-safe
            continue
        # Slashed (its service may have bonded the minimum again since, to register anew).
        assert sum(int(s.amount) for s in mine) > 0, behavior
        # Caught on honest hosts' challenges, that passed as always-pass and copy voted.
        caught = [s for s in mine if s.reason.startswith(LAZY_SLASH[behavior])
                  and (s.round, s.reason.rsplit(" on ", 1)[-1]) in passed]  # fmt: skip
        assert caught, (behavior, [s.reason for s in mine])

"""Overlapped rounds with real node, verifier and chain processes: each round trains while the
one before is verified, from the base stepped by the host's own last pseudo-gradient and with
the AdamW moments of its last final checkpoint (the run carries them); the verifier replays
those starts and passes every honest segment, the cheater is caught, and the
chain's global states are what an independent recomputation gives. One honest host's round 1
commit is lost (a failpoint): the round 2 it trained from it meanwhile is dropped, and its round
3 starts from the global state alone and passes."""

from __future__ import annotations

import re

import pytest
from cosmpy.aerial.client import LedgerClient

from dilochain.artifacts.store import LocalArtifactStore
from dilochain.chain.modules.challenges import FAILED, PASSED
from dilochain.client import network_config, submit
from dilochain.keyring import Keyring
from dilochain.localnet import (
    ChainProcess,
    init_localnet,
    spawn_node,
    spawn_verifier,
    wait_until_ready,
)
from dilochain.node.aggregation import aggregated
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.protocol.schedule import round_window
from dilochain.testutil import CHAIN_ID, shipped_data, wallet
from dilochain.training.compress import decompress
from dilochain.training.diloco import initial_global, outer_step
from dilochain.training.model import build_model
from dilochain.training.run_config import make_run_config
from dilochain.training.tensor_codec import state_hash

pytestmark = [pytest.mark.integration, pytest.mark.heavy]
PASSWORD = "pw"
BEHAVIORS = ["honest", "honest", "fewer-steps"]
LOSES = 1  # the host whose round 1 commit is lost
LOST = {(LOSES, 1), (LOSES, 2)}  # (host, round) never committed: lost, then dropped
ROUNDS = 4
COLLATERAL = 10_000_000
# 52 blocks of verification inside a 60-block commit window; 8 blocks to screen every commit
# (the cheater's missing artifacts cost a verifier its fetch retries).
POC = {"sampling_rate": "1", "beacon_reveal_blocks": 8, "reveal_window_blocks": 8,
       "verdict_window_blocks": 28, "verdict_open_blocks": 8, "verifiers_per_challenge": 2,
       "quorum": 2, "min_verifier_collateral": COLLATERAL}  # fmt: skip


def test_overlapped_rounds_train_while_the_last_is_verified(tmp_path):
    creator = wallet(500)
    homes = [tmp_path / f"host-{i}-{b}" for i, b in enumerate(BEHAVIORS)]
    checkers = [tmp_path / f"verifier-{i}" for i in range(2)]
    address = {h: Keyring(h / "keyring").add("k", PASSWORD)[0].address for h in homes + checkers}
    funded = {a: {DENOM: 10**12} for a in [str(creator.address()), *address.values()]}
    init_localnet(tmp_path / "chain", CHAIN_ID, funded, poc=POC)
    cfg = make_run_config(shipped_data()[1], "tiny", round_blocks=60, total_rounds=ROUNDS,
                          start_delay_blocks=50, min_collateral=str(COLLATERAL),
                          overlap=True, carry_inner_state=True)  # fmt: skip
    with ChainProcess(tmp_path / "chain", "200ms") as chain:
        client = LedgerClient(network_config(CHAIN_ID, chain.address))
        nodes = [spawn_node(home, "ov", "k", chain.address, PASSWORD, "--behavior", how,
                            "--wait-for-run", "--keep-decided-rounds", str(ROUNDS),
                            env={"DILOCHAIN_FAILPOINTS": "node.commit_lost@1"} if i == LOSES
                            else None)
                 for i, (home, how) in enumerate(zip(homes, BEHAVIORS, strict=True))]  # fmt: skip
        verifiers = [spawn_verifier(h, "k", chain.address, PASSWORD) for h in checkers]
        poc = PocClient(chain.address)
        try:
            wait_until_ready(nodes, homes, verifiers, checkers)
            submit(client, creator, MsgCreateRun(creator=str(creator.address()), run_id="ov",
                                                 config=cfg))  # fmt: skip
            for home, proc in zip(homes, nodes, strict=True):
                assert proc.wait(240) == 0, (home / "node.log").read_text()[-3000:]
            # A host serves its checkpoints until its last round is decided, long after the
            # run's last commit window: only then does it stop.
            last = round_window(poc.run("ov"), poc.params(), ROUNDS - 1).resolution
            assert poc.round_info("ov").height >= last
        finally:
            for proc in verifiers:
                proc.terminate()
            for proc in verifiers:
                proc.wait(30)
        run = poc.run("ov")
        params = poc.params()
        commits = {r: list(poc.commits("ov", r)) for r in range(ROUNDS)}
        challenges = [c for r in range(ROUNDS) for c in poc.challenges("ov", r)]
        records = {g.round: g.hash for g in poc.global_checkpoints("ov")}
        slashed = {s.address for s in poc.slashes()}

    honest = [address[h] for h, b in zip(homes, BEHAVIORS, strict=True) if b == "honest"]
    cheater = address[homes[BEHAVIORS.index("fewer-steps")]]
    lost = {(address[homes[i]], r) for i, r in LOST}
    for r in range(ROUNDS):
        by_host = {c.host: c for c in commits[r]}
        assert {h for h in honest if (h, r) not in lost} == set(by_host) - {cheater}, r
        if r == 0:
            continue
        # Round r trained and committed while round r-1 was still being verified ...
        assert min(c.height for c in commits[r]) < round_window(run, params, r - 1).resolution
        for host in set(honest) & set(by_host):  # ... from the base stepped by its own round
            own = next((c for c in commits[r - 1] if c.host == host), None)  # r-1 Δ, if any
            assert by_host[host].start_delta_hash == (own.pseudo_grad_hash if own else b"")
            assert by_host[host].inner_in_hash == (own.final_hash if own else b"")
    assert "round 2: dropped" in (homes[LOSES] / "node.log").read_text()
    # A host does not wait for a window to open: round 1's roster is drawn before the run
    # starts and it builds on θ_0, so every host trained it as soon as round 0 was done.
    second = round_window(run, params, 1).start
    for home in homes:
        found = re.search(r"round 1: training .* from block (\d+)", (home / "node.log").read_text())
        assert found and int(found[1]) < second - 1, home
    assert cheater in slashed and not slashed - {cheater}  # no host, no verifier
    assert all(c.excluded for r in commits for c in commits[r] if c.host == cheater)
    assert all(aggregated(c) for r in commits for c in commits[r] if c.host in honest)
    status = {(c.host, c.round, c.segment): c.status for c in challenges}
    assert {s for (h, _, _), s in status.items() if h in honest} == {PASSED}
    assert FAILED in {s for (h, _, _), s in status.items() if h == cheater}
    assert all((h, r, 0) in status for r in range(ROUNDS) for h in honest if (h, r) not in lost)

    # θ_{r+1} is the outer step of θ_r over round r's accepted pseudo-gradients; θ_r is recorded
    # from round r+1's commits (their base), so θ_0 … θ_{ROUNDS-2} are on chain.
    stores = [LocalArtifactStore(h / "artifacts") for h in homes]
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    assert sorted(records) == list(range(ROUNDS - 1))
    for r in range(ROUNDS - 1):
        assert state_hash(state) == records[r], f"round {r}"
        deltas = [decompress(next(s for s in stores if s.has(c.pseudo_grad_hash))
                             .get(c.pseudo_grad_hash))
                  for c in commits[r] if aggregated(c)]  # fmt: skip
        assert len(deltas) == sum((h, r) not in lost for h in honest)
        state = outer_step(state, deltas, cfg.outer_lr, cfg.outer_momentum)

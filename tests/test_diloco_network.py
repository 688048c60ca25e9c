"""Real node processes train a run over the real chain and agree on every global state: each of
three is killed once (mid inner loop, mid publish, between commit and reveal) and resumes, a
fourth joins late, and rounds below the genesis quorum of hosts carry the global state over.
One host has no blob service: it publishes to an S3 server (versitygw), as one behind NAT
would, and its peers read its artifacts there."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
from cosmpy.aerial.client import LedgerClient
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from dilochain.artifacts.pruning import Ledger
from dilochain.artifacts.store import LocalArtifactStore
from dilochain.chain.testnet import free_port
from dilochain.client import broadcast, network_config
from dilochain.failpoints import VARIABLE as FAILPOINTS
from dilochain.keyring import Keyring
from dilochain.local_s3 import LocalS3
from dilochain.localnet import ChainProcess, init_localnet, spawn_node, wait_until_ready
from dilochain.node.aggregation import aggregated
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.protocol.schedule import shard_assignment
from dilochain.testutil import CHAIN_ID, wallet
from dilochain.training.compress import decompress
from dilochain.training.dataset import file_sha256, read_manifest
from dilochain.training.diloco import initial_global, outer_step, params_of
from dilochain.training.model import build_model, load_params
from dilochain.training.prepare import PrepareOptions, default_documents, prepare
from dilochain.training.run_config import make_run_config
from dilochain.training.tensor_codec import state_hash

pytestmark = [pytest.mark.integration, pytest.mark.heavy]
PASSWORD = "node-pw"
ROUNDS = 6
MIN_HOSTS = 4  # genesis min_hosts_per_round: until the late joiner trains, rounds carry over


def _wait(predicate, timeout: float, what: str, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [p.args for p in procs if p.poll() is not None]
        assert not dead, f"a node exited early: {dead}"
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _checkpoints_stored(home, round_: int) -> int:
    """How many objects of its round's checkpoints a host's ledger says it stored."""
    entries = Ledger(home / "node" / "net").entries()
    return sum(e.kind == "checkpoint" and e.round == round_ for e in entries)


def _check_export(folder, cfg, data, state, digest):
    """``from_pretrained`` opens the export, its tokenizer is the run's, and the model computes
    the node's logits for that state and generates text."""
    assert (
        json.loads((folder / "dilochain.json").read_text())["global_state_sha256"] == digest.hex()
    )
    theirs = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.model_max_length == cfg.seq_len
    run_tokenizer = Tokenizer.from_file(str(data / "tokenizer.json"))
    text = "The for statement is used to iterate over the elements of a sequence"
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == run_tokenizer.encode(text).ids
    ours = build_model(cfg.model_config, cfg.seed)
    load_params(ours, params_of(state))
    with torch.no_grad():
        assert torch.equal(theirs(input_ids=ids).logits, ours(input_ids=ids).logits)
    generated = theirs.generate(ids, max_new_tokens=8, do_sample=False)
    assert generated.shape == (1, ids.shape[1] + 8)
    assert tokenizer.decode(generated[0]).startswith(text)


def test_hosts_train_rounds_and_agree_on_global_checkpoints(tmp_path):
    creator = wallet(300)
    homes = [tmp_path / f"host{i}" for i in range(4)]  # host 3 joins late
    hosts = [Keyring(h / "keyring").add("host", PASSWORD)[0].address for h in homes]
    funded = {a: {DENOM: 10**12} for a in [str(creator.address()), *hosts]}
    # Every segment is challenged (sampling rate 1), so every host reveals every round: a
    # reveal window of 8 blocks leaves a loaded machine's node time to do it. No verifier runs
    # here (this test is about hosts), so the chain aggregates every commit that did not fail.
    init_localnet(tmp_path / "chain", CHAIN_ID, funded,
                  poc={"reveal_window_blocks": 8, "verdict_window_blocks": 3,
                       "sampling_rate": "1", "min_hosts_per_round": MIN_HOSTS,
                       "fail_closed": False})  # fmt: skip
    # The run's own dataset (a 1,024-token BPE): hosts 0-2 have it (--data); host 3 has not
    # and fetches it by hash from their blob services.
    data = tmp_path / "dataset"
    pins = prepare(default_documents, data, PrepareOptions(1024, "text", 16_384, 12_288))
    # Hosts 0-2 are up before the run exists, so each registers within round 0's start delay
    # (hosts registered by then are round 0's roster) however slowly 2 cores start them.
    cfg = make_run_config(pins, "tiny", round_blocks=20,
                          total_rounds=ROUNDS, start_delay_blocks=60)  # fmt: skip
    with ChainProcess(tmp_path / "chain", "200ms") as chain, LocalS3(tmp_path / "s3") as s3:
        client = LedgerClient(network_config(CHAIN_ID, chain.address))
        poc = PocClient(chain.address)
        # Host 2 publishes to the object store (credentials in its environment only).
        s3_flags = ["--object-store", s3.url, "--object-store-endpoint", s3.endpoint]

        def spawn(home, *extra, env=None):
            # Every artifact kept: the test recomputes each global state from them afterwards.
            keep = ["--keep-decided-rounds", str(ROUNDS)]
            if home == homes[2]:
                keep, env = [*keep, *s3_flags], {**s3.env, **(env or {})}
            return spawn_node(home, "net", "host", chain.address, PASSWORD, *keep, *extra,
                              env=env)  # fmt: skip

        # Each of hosts 0-2 is killed (SIGKILL, by a failpoint) at one moment of one round:
        # mid inner loop, mid publish, between commit and reveal; then started again as it was.
        crashes = {0: ("node.mid_training", 1), 1: ("node.publish", 2), 2: ("node.committed", 3)}
        procs = [spawn(home, "--data", str(data), "--wait-for-run",
                       env={FAILPOINTS: "{}@{}".format(*crashes[i])})
                 for i, home in enumerate(homes[:3])]  # fmt: skip
        wait_until_ready(procs, homes[:3])
        create = MsgCreateRun(creator=str(creator.address()), run_id="net", config=cfg)
        broadcast(client, creator, create).wait_to_complete(poll_period=0.2)

        def recorded():
            return {g.round: g for g in poc.global_checkpoints("net")}

        def mine(i, round_):
            return [c for c in poc.commits("net", round_) if c.host == hosts[i]]

        at_crash = {}
        for i in sorted(crashes, key=lambda i: crashes[i][1]):
            point, round_ = crashes[i]
            _wait(lambda i=i: procs[i].poll() is not None, 120, f"host {i} to reach {point}",
                  [p for j, p in enumerate(procs) if j != i])  # fmt: skip
            assert procs[i].returncode == -signal.SIGKILL, (homes[i] / "node.log").read_text()
            with chain.paused():  # no block while it restarts: its windows are still open
                at_crash[i] = (mine(i, round_), _checkpoints_stored(homes[i], round_))
                log_size = (homes[i] / "node.log").stat().st_size
                procs[i] = spawn(homes[i], "--data", str(data))
                _wait(lambda i=i, n=log_size: "parameters, config sha256" in
                      (homes[i] / "node.log").read_text()[n:], 120, f"host {i} to restart",
                      [procs[i]])  # fmt: skip
                # What it owes it reveals from its record before torch loads and the model
                # builds (minutes at 8B, against a reveal window of a few blocks).
                restarted = (homes[i] / "node.log").read_text()[log_size:]
                assert restarted.index("revealing what rounds") < restarted.index("config sha256")
        # A host that joins late syncs to the chain's latest global checkpoint via its peers.
        _wait(lambda: 2 in recorded(), 90, "round 2's global checkpoint", procs)
        # It listens on one address and registers another (as behind NAT): peers and
        # verifiers dial the advertised one.
        port = free_port()
        procs.append(spawn(homes[3], "--blob-address", f"127.0.0.1:{port}",
                           "--advertise-address", f"localhost:{port}"))  # fmt: skip
        for proc in procs:
            assert proc.wait(150) == 0, (homes[procs.index(proc)] / "node.log").read_text()[-3000:]

        records = recorded()
        commits = {r: list(poc.commits(run_id="net", round=r)) for r in range(ROUNDS)}
        challenges = {r: list(poc.challenges("net", r)) for r in range(ROUNDS)}
        rosters = {r: poc.roster("net", r) for r in range(ROUNDS)}
        slashes = list(poc.slashes())
        hosts_held = poc.hosts(run_id="net")
        # The run has finished: by default the state its last round made, which no round
        # records (computed from the last recorded one), as a Hugging Face model folder.
        exported = subprocess.run(
            [sys.executable, "-m", "dilochain.cli.main", "export", "--chain", chain.address,
             "--run", "net", "--home", str(homes[0]), "--out", str(tmp_path / "export"),
             "--output", "json"], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr[-2000:]
        shown = json.loads(exported.stdout)
        assert shown["round"] == shown["total_rounds"] == ROUNDS and shown["derived"]
        assert shown["out"] == str(tmp_path / "export") and not exported.stderr
        listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"runs/net/{hosts[2]}/")
        in_bucket = {o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", [])}
    assert sorted(h.address for h in hosts_held) == sorted(hosts)
    assert sorted(records) == list(range(ROUNDS))
    for r, record in records.items():
        assert record.agreeing == record.commits == len(commits[r]), r
    assert len(commits[0]) == 3
    assert len(commits[ROUNDS - 1]) == 4
    assert hosts[3] in {c.host for c in commits[ROUNDS - 1]}  # joined late
    locations = {h.address: h.endpoint for h in hosts_held}
    assert locations[hosts[3]] == f"localhost:{port}"
    # Host 2 registered its prefix's URL, and published there what its commits and reveals
    # name, before naming it: peers aggregated its pseudo-gradients from there.
    assert locations[hosts[2]] == f"{s3.endpoint}/dilochain/runs/net/{hosts[2]}"
    named = {h.hex() for r in range(ROUNDS) for c in commits[r] if c.host == hosts[2]
             for h in (c.pseudo_grad_hash, c.residual_hash, c.final_hash)}  # fmt: skip
    named |= {h.hex() for r in range(ROUNDS) for c in challenges[r] if c.host == hosts[2]
              for h in (c.start_hash, c.end_hash)}  # fmt: skip
    assert named and named <= in_bucket, named - in_bucket
    assert {e.sha256 for e in read_manifest(data / "manifest.json").shards} <= in_bucket
    # What each crash left: killed mid inner loop or mid publish, no commit yet (the checkpoints
    # stored so far are in its ledger, recorded as they were stored, so pruning finds them:
    # halfway through, checkpoint 0 and perhaps the one at that step, which its writer thread
    # may not have reached); killed after its commit, the commit is on chain.
    stored = 3 * (cfg.inner_steps // cfg.checkpoint_interval + 1)  # weights, moments, index each
    assert at_crash[0][0] == [] and at_crash[0][1] in (0, 3, 6), at_crash[0]
    assert at_crash[1][0] == [] and at_crash[1][1] == stored
    assert len(at_crash[2][0]) == 1
    for i, (_, round_) in crashes.items():
        assert sum(c.host == hosts[i] for c in commits[round_]) <= 1  # never twice
        assert hosts[i] in {c.host for c in commits[ROUNDS - 1]}  # rejoined
    # Every segment was challenged (sampling rate 1): each committed one was revealed, even
    # host 2's round 3, committed just before it was killed; nobody was slashed.
    owed = [c for r in range(ROUNDS) for c in challenges[r]]
    assert {(c.host, c.round) for c in owed} == {(c.host, r) for r in range(ROUNDS)
                                                 for c in commits[r]}  # fmt: skip
    assert all(c.revealed for c in owed), [(c.host, c.round) for c in owed if not c.revealed]
    assert slashes == []
    fetched = homes[3] / "datasets" / pins.manifest_hash[:16]  # ... with the data it fetched
    manifest = read_manifest(data / "manifest.json")
    expected = {e.file: e.sha256 for e in [manifest.heldout, *manifest.shards]}
    got = {p.name: file_sha256(p) for p in fetched.glob("*.bin")}  # held-out + its shards
    trained = {
        manifest.shards[s].file
        for r in range(ROUNDS)
        if hosts[3] in rosters[r]
        for s in shard_assignment(cfg.seed, len(manifest.shards), rosters[r], hosts[3])
    }
    assert set(got) == {"heldout.bin", *trained}, got
    assert all(expected[name] == digest for name, digest in got.items())
    assert file_sha256(fetched / "tokenizer.json") == pins.tokenizer_hash

    # Recompute every global state independently from θ_0 and the published pseudo-gradients.
    stores = [LocalArtifactStore(h / "artifacts") for h in homes]
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    for r in range(ROUNDS):
        assert state_hash(state) == records[r].hash, f"round {r}"
        deltas = []
        for c in commits[r]:
            if not aggregated(c, fail_closed=False):
                continue
            store = next(s for s in stores if s.has(c.pseudo_grad_hash))
            deltas.append(decompress(store.get(c.pseudo_grad_hash)))
        if len(deltas) >= MIN_HOSTS:  # else θ and the outer momentum carry over unchanged
            state = outer_step(state, deltas, cfg.outer_lr, cfg.outer_momentum)
    _check_export(tmp_path / "export", cfg, data, state, state_hash(state))
    card = (tmp_path / "export" / "README.md").read_text()
    assert "dilochain run `net`" in card and pins.manifest_hash in card and "| 0 |" in card
    assert records[1].hash == records[0].hash  # three hosts in round 0: below the quorum
    assert state_hash(state) != records[0].hash  # the last round had four: the model moved

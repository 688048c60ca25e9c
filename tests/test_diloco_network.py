"""Three real node processes train a run over the real chain and agree on every global state."""

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

from dilochain.artifacts.store import LocalArtifactStore
from dilochain.client import broadcast, network_config
from dilochain.keyring import Keyring
from dilochain.localnet import ChainProcess, init_localnet, spawn_node
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.testutil import CHAIN_ID, wallet
from dilochain.training.compress import decompress
from dilochain.training.dataset import file_sha256, read_manifest
from dilochain.training.diloco import initial_global, outer_step, params_of
from dilochain.training.model import build_model, load_params
from dilochain.training.prepare import PrepareOptions, default_documents, prepare
from dilochain.training.run_config import make_run_config
from dilochain.training.tensor_codec import state_hash

pytestmark = pytest.mark.integration
PASSWORD = "node-pw"
ROUNDS = 6


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


def _check_export(folder, cfg, data, state, digest):
    """``from_pretrained`` opens the export, its tokenizer is the run's, and the model computes
    the node's logits for that state and generates text."""
    assert (
        json.loads((folder / "dilochain.json").read_text())["global_state_sha256"] == digest.hex()
    )
    theirs = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
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
    init_localnet(tmp_path / "chain", CHAIN_ID, funded,
                  poc={"reveal_window_blocks": 3, "verdict_window_blocks": 3})  # fmt: skip
    # The run's own dataset (a 1,024-token BPE): hosts 0-2 have it (--data); host 3 has not
    # and fetches it by hash from their blob services.
    data = tmp_path / "dataset"
    pins = prepare(default_documents, data, PrepareOptions(1024, "text", 16_384, 12_288))
    cfg = make_run_config(pins, "tiny", round_blocks=20,
                          total_rounds=ROUNDS, start_delay_blocks=50)  # fmt: skip
    with ChainProcess(tmp_path / "chain", "200ms") as chain:
        client = LedgerClient(network_config(CHAIN_ID, chain.address))
        create = MsgCreateRun(creator=str(creator.address()), run_id="net", config=cfg)
        broadcast(client, creator, create).wait_to_complete(poll_period=0.2)
        poc = PocClient(chain.address)

        def spawn(home, *extra):
            # Every artifact kept: the test recomputes each global state from them afterwards.
            keep = ["--keep-decided-rounds", str(ROUNDS)]
            return spawn_node(home, "net", "host", chain.address, PASSWORD, *keep, *extra)

        procs = [spawn(home, "--data", str(data)) for home in homes[:3]]

        def recorded():
            return {g.round: g for g in poc.global_checkpoints("net")}

        # Restart host 2 once round 1 is on chain: it must resume and commit again.
        _wait(lambda: 1 in recorded(), 90, "round 1's global checkpoint", procs)
        procs[2].send_signal(signal.SIGINT)
        assert procs[2].wait(30) == 0
        procs[2] = spawn(homes[2], "--data", str(data))
        # A host that joins late syncs to the chain's latest global checkpoint via its peers.
        _wait(lambda: 2 in recorded(), 90, "round 2's global checkpoint", procs)
        procs.append(spawn(homes[3]))
        for proc in procs:
            assert proc.wait(150) == 0, (homes[procs.index(proc)] / "node.log").read_text()[-3000:]

        records = recorded()
        commits = {r: list(poc.commits(run_id="net", round=r)) for r in range(ROUNDS)}
        hosts_held = poc.hosts(run_id="net")
        # The last recorded global state, as a Hugging Face model folder.
        exported = subprocess.run(
            [sys.executable, "-m", "dilochain.cli.main", "export", "--chain", chain.address,
             "--run", "net", "--artifacts", str(homes[0] / "artifacts"),
             "--out", str(tmp_path / "export")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr[-2000:]
    assert sorted(h.address for h in hosts_held) == sorted(hosts)
    assert sorted(records) == list(range(ROUNDS))
    for r, record in records.items():
        assert record.agreeing == record.commits == len(commits[r]), r
    assert all(len(commits[r]) == 3 for r in (0, 1))
    assert len(commits[ROUNDS - 1]) == 4
    assert hosts[2] in {c.host for c in commits[ROUNDS - 1]}  # resumed after its restart
    assert hosts[3] in {c.host for c in commits[ROUNDS - 1]}  # joined late
    fetched = homes[3] / "datasets" / pins.manifest_hash[:16]  # ... with the data it fetched
    manifest = read_manifest(data / "manifest.json")
    expected = {e.file: e.sha256 for e in [manifest.heldout, *manifest.shards]}
    got = {p.name: file_sha256(p) for p in fetched.glob("*.bin")}  # held-out + its own shard
    assert "heldout.bin" in got and len(got) == 2, got
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
            if c.excluded:  # e.g. host 2 was down when its round-1 challenge had to be revealed
                continue
            store = next(s for s in stores if s.has(c.pseudo_grad_hash))
            deltas.append(decompress(store.get(c.pseudo_grad_hash)))
        if r == ROUNDS - 1:
            _check_export(tmp_path / "export", cfg, data, state, records[r].hash)
        state = outer_step(state, deltas, cfg.outer_lr, cfg.outer_momentum)

"""``dilochain node start``: operator mistakes are one clear line, not a traceback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from cosmpy.crypto.address import Address

from dilochain.artifacts.object_store import ObjectStore
from dilochain.artifacts.pruning import Ledger
from dilochain.artifacts.store import LocalArtifactStore
from dilochain.chain.testnet import free_port
from dilochain.client import broadcast
from dilochain.keyring import Keyring
from dilochain.local_s3 import LocalS3
from dilochain.localnet import spawn_node, wait_for_logs
from dilochain.poc_client import PocClient
from dilochain.protocol import model_config
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCreateRun,
    MsgDepositCollateral,
    MsgRegisterHost,
    MsgRegisterVerifier,
)
from dilochain.testutil import shipped_data
from dilochain.training.prepare import PrepareOptions, prepare
from dilochain.training.run_config import make_run_config
from tests.conftest import cli

pytestmark = pytest.mark.integration
PASSWORD = "pw"
SMALL = PrepareOptions(vocab_size=300, shard_tokens=1024, heldout_tokens=1024)


@pytest.fixture(scope="module")
def run_id(running_chain) -> str:
    return _created(running_chain, "cli-run")


def _created(running_chain, run_id: str) -> str:
    """``run_id``, a run of the 'tiny' preset, created on the test chain."""
    creator = running_chain.wallets[1]
    cfg = make_run_config(shipped_data()[1], "tiny", min_collateral="5000000")
    msg = MsgCreateRun(creator=str(creator.address()), run_id=run_id, config=cfg)
    broadcast(running_chain.client, creator, msg).wait_to_complete(poll_period=0.1)
    return run_id


def node(home, *args, chain: str, password: str = PASSWORD) -> subprocess.CompletedProcess:
    return cli("node", "start", "--home", str(home), "--key", "op", "--chain", chain, *args,
               env={"DILOCHAIN_KEYRING_PASSWORD": password})  # fmt: skip


def one_line_error(result: subprocess.CompletedProcess, needle: str) -> None:
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], result.stderr[-2000:]


@pytest.fixture
def operator(tmp_path) -> tuple:
    info, _ = Keyring(tmp_path / "keyring").add("op", PASSWORD)
    return tmp_path, info.address


def test_unknown_run_and_unreachable_chain(running_chain, operator):
    home, _ = operator
    one_line_error(node(home, "--run", "ghost", chain=running_chain.address), "unknown run 'ghost'")
    one_line_error(node(home, "--run", "ghost", chain="127.0.0.1:1"), "no dilochain node answers")
    one_line_error(node(home, "--run", "ghost", chain="127.0.0.1:1"), "is `dilochain chain start`")
    rpc = running_chain.process.rpc_address  # a mistake newcomers make: CometBFT's port
    one_line_error(node(home, "--run", "ghost", chain=rpc), f"{rpc} is CometBFT's RPC")
    # An object store that is not an s3:// URL, or that does not answer, before anything else.
    one_line_error(node(home, "--run", "ghost", "--object-store", "https://bucket/x",
                        chain=running_chain.address), "an object store is s3://BUCKET")  # fmt: skip
    closed = f"http://127.0.0.1:{free_port()}"
    one_line_error(node(home, "--run", "ghost", "--object-store", "s3://bkt/p",
                        "--object-store-endpoint", closed, chain=running_chain.address),
                   "object store s3://bkt/p/ghost/")  # fmt: skip


def test_start_reads_the_home_config_and_logs_json(running_chain, run_id, operator):
    home, _ = operator
    cmd = [sys.executable, "-m", "dilochain.cli.main", "node", "init", "--home", str(home),
           "--key", "op", "--run", "ghost", "--chain", running_chain.address]  # fmt: skip
    init = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    # The config serves metrics on 127.0.0.1:9464; a test must not take a fixed port.
    result = node(home, "--metrics-address", "", chain=running_chain.address)
    one_line_error(result, "unknown run 'ghost'")
    # Flags override the file; JSON log lines for collectors.
    env = {**os.environ, "DILOCHAIN_KEYRING_PASSWORD": PASSWORD}
    cmd = [
        sys.executable,
        "-m",
        "dilochain.cli.main",
        "node",
        "start",
        "--home",
        str(home),
        "--run",
        "later",
        "--wait-for-run",
        "--log-format",
        "json",
        "--metrics-address",
        "",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        line = json.loads(proc.stderr.readline())
        assert line["message"] == "waiting for run later to be created"
        assert line["level"] == "info" and "time" in line
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_no_collateral(running_chain, run_id, operator):
    home, _ = operator
    one_line_error(node(home, "--run", run_id, chain=running_chain.address), "no collateral")


def test_compile_and_ranks_need_a_chain_that_verifies_with_tolerance(
    running_chain, run_id, operator
):
    home, _ = operator
    result = node(home, "--run", run_id, "--compile", chain=running_chain.address)
    one_line_error(result, "--compile: this chain verifies replays exactly")
    result = node(home, "--run", run_id, "--nproc-per-node", "2", chain=running_chain.address)
    one_line_error(result, "--nproc-per-node 2: this chain verifies replays exactly")
    result = node(home, "--run", run_id, "--nproc-per-node", "0", chain=running_chain.address)
    one_line_error(result, "--nproc-per-node: Input should be greater than or equal to 1")


def test_wrong_data_and_wrong_password(running_chain, run_id, operator, tmp_path):
    home, _ = operator
    text = tmp_path / "mine.txt"
    text.write_text("my own words, " * 4000)
    result = node(home, "--run", run_id, "--data", str(text), chain=running_chain.address)
    one_line_error(result, "mine.txt: not a dataset folder")
    mine = tmp_path / "mine"
    prepare(lambda: iter([text.read_text()]), mine, SMALL)
    result = node(home, "--run", run_id, "--data", str(mine), chain=running_chain.address)
    one_line_error(result, "is not the run's data manifest")
    damaged = shutil.copytree(shipped_data()[0].root, tmp_path / "damaged")
    (damaged / "heldout.bin").write_bytes((damaged / "heldout.bin").read_bytes()[:-6])
    result = node(home, "--run", run_id, "--data", str(damaged), chain=running_chain.address)
    one_line_error(result, "heldout.bin: 24570 bytes; the manifest says 12288 tokens")
    result = node(home, "--run", run_id, chain=running_chain.address, password="wrong")
    one_line_error(result, "wrong keyring password")


def test_corrupt_artifact_on_resume(running_chain, run_id, operator):
    home, address = operator
    funder = running_chain.wallets[1]
    running_chain.client.send_tokens(Address(address), 50_000_000, DENOM, funder).wait_to_complete(
        poll_period=0.1
    )
    digest = "ab" * 32
    state_dir = home / "node" / run_id
    state_dir.mkdir(parents=True)
    (state_dir / "state.json").write_text(
        json.dumps(
            {
                "round": 0,
                "global_hash": digest,
                "attempted": -1,
                "checkpoint_hashes": [],
            }
        )
    )
    artifact = home / "artifacts" / digest[:2] / digest
    artifact.parent.mkdir(parents=True)
    artifact.write_bytes(b"not what the hash says")
    # The saved state is damaged and on no peer: the node says so and starts from the chain's
    # (staying down would cost the reveals its record owes); stopped once it has said so.
    proc = spawn_node(home, run_id, "op", running_chain.address, PASSWORD)
    try:
        wait_for_logs([(proc, home / "node.log", "starting from the chain's latest")], 120)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    logged = (home / "node.log").read_text()
    assert "round 0's global state, saved before the restart, is lost" in logged
    assert "corrupt" in logged and "Traceback" not in logged and not artifact.exists()


def test_status_and_rewards_commands(running_chain, run_id, operator):
    home, address = operator
    status = cli("status", "--chain", running_chain.address)
    assert status.returncode == 0 and run_id in status.stdout and "dilochain-test" in status.stdout
    show = cli("rewards", "show", "--address", address, "--chain", running_chain.address)
    assert show.returncode == 0 and "rewards of" in show.stdout and "still vesting" in show.stdout
    # Piped, nothing is cut to fit 80 columns (amounts and addresses used to end in "…").
    assert "…" not in status.stdout + show.stdout and address in show.stdout
    assert "udlc" not in status.stdout + show.stdout and " DLC" in status.stdout  # amounts in DLC
    one_line_error(cli("status", "--chain", running_chain.address, "--run", "nosuch"),
                   "unknown run 'nosuch'")  # fmt: skip
    as_json = json.loads(cli("status", "--chain", running_chain.address, "-o", "json").stdout)
    assert as_json["chain_id"] == "dilochain-test" and run_id in {r["run_id"] for r in
                                                                 as_json["runs"]}  # fmt: skip
    shown = json.loads(cli("rewards", "show", "--address", address, "--chain",
                           running_chain.address, "--output", "json").stdout)  # fmt: skip
    assert shown["address"] == address and shown["vesting"] == []
    assert shown["epochs"][0]["epoch"] == 0 and shown["epochs"][0]["amount"] == "0"
    assert {"start_height", "end_height", "closed", "reward_pool", "host_work",
            "host_work_total"} <= set(shown["epochs"][0])  # fmt: skip
    env = {"DILOCHAIN_KEYRING_PASSWORD": PASSWORD}
    claim = cli("rewards", "claim", "--epoch", "0", "--key", "op", "--home", str(home),
                "--chain", running_chain.address, env=env)  # fmt: skip
    one_line_error(claim, "claim refused")
    withdraw = cli("rewards", "claim", "--key", "op", "--home", str(home), "--chain",
                   running_chain.address, env=env)  # fmt: skip
    one_line_error(withdraw, "withdrawal refused")


def test_export_errors_are_one_line(running_chain):
    # A run of its own: a host of another test may have had cli-run record a global state.
    fresh = _created(running_chain, "cli-export")
    for run, needle in (("nope", "unknown run"), (fresh, "no global state")):
        result = cli("export", "--chain", running_chain.address, "--run", run, "--out",
                     "/tmp/never-written")  # fmt: skip
        one_line_error(result, needle)


def test_a_model_transformers_cannot_build_is_one_line(running_chain, operator):
    creator = running_chain.wallets[1]
    # The chain checks what it can (sizes, budget); transformers does not know the type.
    alien = model_config.canonical({"model_type": "no-such-lm", "vocab_size": 256,
                                    "hidden_size": 32, "num_hidden_layers": 1})  # fmt: skip
    cfg = make_run_config(shipped_data()[1], "tiny", min_collateral="5000000")
    cfg.model_config = alien
    msg = MsgCreateRun(creator=str(creator.address()), run_id="alien", config=cfg)
    broadcast(running_chain.client, creator, msg).wait_to_complete(poll_period=0.1)
    home, _ = operator
    one_line_error(node(home, "--run", "alien", chain=running_chain.address), "no-such-lm")


def run_create(home, *args, chain: str) -> subprocess.CompletedProcess:
    return cli("run", "create", "--home", str(home), "--key", "op", "--chain", chain, "--preset",
               "tiny", *args, env={"DILOCHAIN_KEYRING_PASSWORD": PASSWORD})  # fmt: skip


def test_run_create_pins_model_tokenizer_and_data_and_checks_them_first(
    running_chain, operator, tmp_path
):
    home, address = operator
    funder = running_chain.wallets[2]
    running_chain.client.send_tokens(Address(address), 50_000_000, DENOM, funder).wait_to_complete(
        poll_period=0.1
    )
    data, pins = shipped_data()
    qwen = {"model_type": "qwen2", "vocab_size": pins.vocab_size, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
            "num_key_value_heads": 1, "max_position_embeddings": 64}  # fmt: skip
    configs = {"alien": {**qwen, "model_type": "no-such-lm"}, "narrow": {**qwen, "vocab_size": 300},
               "qwen": qwen}  # fmt: skip
    for name, config in configs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(config, indent=2))
    other = tmp_path / "other"
    prepare(lambda: iter(["some other words, " * 3000]), other, SMALL)
    chain = running_chain.address
    mistakes = [
        (["--model-config", str(tmp_path / "alien.json")], "no-such-lm"),
        (["--model-config", str(tmp_path / "narrow.json")], "smaller than the tokenizer's"),
        (["--tokenizer", str(other / "tokenizer.json"),
          "--data-manifest", str(data.root / "manifest.json")], "made with another tokenizer"),
        (["--data", str(tmp_path / "nowhere")], "nowhere/manifest.json: no such file"),
        (["--model-config", str(tmp_path / "missing.json")], "missing.json"),
        (["--model-config", str(tmp_path / "qwen.json")], "needs --seq-len and --batch-size"),
        (["--model-config", str(tmp_path / "qwen.json"), "--seq-len", "128", "--batch-size", "2"],
         "above the model's max_position_embeddings 64"),
        (["--overlap", "--round-blocks", "5"], "an overlapped run needs round_blocks above"),
        (["--outer-momentum", "1.0"], "outer_momentum"),
    ]  # fmt: skip
    for i, (args, needle) in enumerate(mistakes):
        one_line_error(run_create(home, "--run-id", f"bad{i}", *args, chain=chain), needle)
    created = run_create(home, "--run-id", "qwen-run", "--data", str(data.root), "--model-config",
                         str(tmp_path / "qwen.json"), "--seq-len", "48", "--batch-size", "2",
                         "--rounds", "3", "--overlap",
                         "--round-blocks", "30", "--outer-lr", "0.5", "--inner-lr", "1e-3",
                         "--reset-inner-state", chain=chain)  # fmt: skip
    assert created.returncode == 0, created.stderr[-2000:]
    assert "qwen2 model" in created.stdout and "udlc escrowed until it ends" in created.stdout
    assert "3 rounds of 8 inner steps on batches of 2 sequences of 48 tokens" in created.stdout
    with PocClient(chain) as poc:
        assert all(poc.run(f"bad{i}") is None for i in range(len(mistakes)))
        run = poc.run("qwen-run")
    assert run.config.data_manifest_hash == pins.manifest_hash
    assert run.config.tokenizer_hash == pins.tokenizer_hash
    assert run.config.model_config == model_config.canonical(qwen)
    assert run.config.total_rounds == 3 and run.config.overlap and run.config.round_blocks == 30
    assert (run.config.seq_len, run.config.batch_size) == (48, 2)
    assert run.config.outer_lr == 0.5 and abs(run.config.inner_lr - 1e-3) < 1e-9
    assert not run.config.carry_inner_state
    as_json = run_create(home, "--run-id", "json-run", "--data", str(data.root), "--preset", "tiny",
                         "--output", "json", chain=chain)  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    made = json.loads(as_json.stdout)
    assert made["run_id"] == "json-run" and made["data_manifest_hash"] == pins.manifest_hash
    assert made["deposit"].endswith("udlc") and made["height"] > 0 and len(made["txhash"]) == 64


def _bond_and_send(chain, operator, bond: str, msg) -> None:
    """Fund the operator's key, bond ``bond`` udlc of collateral and send ``msg`` with it."""
    home, address = operator
    chain.client.send_tokens(
        Address(address), 2 * int(bond), DENOM, chain.wallets[3]
    ).wait_to_complete(poll_period=0.1)
    mine = Keyring(home / "keyring").wallet("op", PASSWORD)
    deposit = MsgDepositCollateral(depositor=address, amount=bond)
    broadcast(chain.client, mine, deposit, msg).wait_to_complete(poll_period=0.1)


def test_leave(running_chain, run_id, operator):
    home, address = operator
    register = MsgRegisterHost(host=address, run_id=run_id, endpoint="127.0.0.1:1")
    _bond_and_send(running_chain, operator, "5000000", register)
    args = ["node", "leave", "--home", str(home), "--key", "op", "--run", run_id, "--chain",
            running_chain.address]  # fmt: skip
    env = {"DILOCHAIN_KEYRING_PASSWORD": PASSWORD}
    left = cli(*args, "--output", "json", env=env)
    assert left.returncode == 0, left.stderr
    receipt = json.loads(left.stdout)
    assert (receipt["host"], receipt["run_id"]) == (address, run_id) and receipt["height"] > 0
    with PocClient(running_chain.address) as poc:
        # No longer a member (listed with left_height until its round is decided, if any).
        assert all(h.left_height > 0 for h in poc.hosts(run_id) if h.address == address)
    one_line_error(cli(*args, env=env), "is not a host of run")


def test_verifier_leave(running_chain, run_id, operator):
    """``verifier leave``: a receipt naming the release block; once past it the verifier is
    deregistered and its collateral unbonds; leaving again is one line."""
    home, address = operator
    _bond_and_send(running_chain, operator, "10000000", MsgRegisterVerifier(verifier=address))
    args = ["verifier", "leave", "--home", str(home), "--key", "op", "--chain",
            running_chain.address]  # fmt: skip
    env = {"DILOCHAIN_KEYRING_PASSWORD": PASSWORD}
    left = cli(*args, "--output", "json", env=env)
    assert left.returncode == 0, left.stderr
    receipt = json.loads(left.stdout)
    release = int(receipt["release_height"])
    assert receipt["verifier"] == address and release >= receipt["height"] > 0
    with PocClient(running_chain.address) as poc:
        (me,) = [v for v in poc.verifiers() if v.address == address]
        assert (me.left_height, me.release_height) == (receipt["height"], release)
        one_line_error(cli(*args, env=env), f"already left at block {receipt['height']}")
        deadline = time.monotonic() + 120  # blocks come every 200 ms
        while poc.blocks.height <= release and time.monotonic() < deadline:
            poc.blocks.wait_past(poc.blocks.height, threading.Event(), 0.5)
        assert address not in {v.address for v in poc.verifiers()}
        assert [e.amount for e in poc.collateral(address).unbonding] == ["10000000"]
    one_line_error(cli(*args, env=env), "is not a registered verifier")


def test_prune_dry_run_then_prune(running_chain, operator, tmp_path):
    """``node prune`` deletes what no longer matters, locally and, for a host that publishes
    to an object store, from its bucket prefix too."""
    creator = running_chain.wallets[1]
    cfg = make_run_config(shipped_data()[1], "tiny", min_collateral="5000000", round_blocks=2)
    msg = MsgCreateRun(creator=str(creator.address()), run_id="quick", config=cfg)
    broadcast(running_chain.client, creator, msg).wait_to_complete(poll_period=0.1)
    home, address = operator
    store, ledger = LocalArtifactStore(home / "artifacts"), Ledger(home / "node" / "quick")
    (home / "node" / "quick").mkdir(parents=True)
    ledger.record(0, "checkpoint", [store.put(b"step %d" % i) for i in range(3)])
    ledger.record(0, "global", [store.put(b"theta 0")])
    with LocalS3(tmp_path / "s3") as s3:
        os.environ.update(s3.env)  # the host's credentials, for the uploads below only
        try:
            bucket = ObjectStore(s3.url, "quick", address, s3.endpoint)
            for entry in ledger.entries():
                digest = bytes.fromhex(entry.hash)
                bucket.publish(store.file(digest), digest)
        finally:
            for name in s3.env:
                del os.environ[name]
        with PocClient(running_chain.address) as poc:
            while poc.round_info("quick").round < 2:  # round 0 decided a round ago
                time.sleep(0.2)
        args = ["node", "prune", "--home", str(home), "--key", "op", "--run", "quick", "--chain",
                running_chain.address, "--object-store", s3.url, "--object-store-endpoint",
                s3.endpoint]  # fmt: skip
        dry = cli(*args, "--dry-run", "--output", "json", env=s3.env)
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert planned["dry_run"] and planned["freed_bytes"] > 0
        kinds = {a["kind"] for a in planned["artifacts"]}
        assert "checkpoint" in kinds and "global" not in kinds  # the newest global state stays
        assert len(list((home / "artifacts").glob("??/*"))) == 4
        listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"runs/quick/{address}/")
        assert listed["KeyCount"] == 4
        done = cli(*args, env=s3.env)
        assert done.returncode == 0 and "deleted" in done.stdout, done.stderr
        assert "deleted 3 objects from" in done.stdout
        listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"runs/quick/{address}/")
    assert [o["Key"].rsplit("/", 1)[1] for o in listed["Contents"]] == [ledger.entries()[0].hash]
    assert len(list((home / "artifacts").glob("??/*"))) == 1
    assert [e.kind for e in ledger.entries()] == ["global"]


def test_start_on_a_finished_run_locks_no_collateral(running_chain, operator):
    """A node started on a run that has finished serves what it may owe and ends (exit 0),
    without registering: it used to bond and lock the run's collateral again."""
    creator = running_chain.wallets[1]
    cfg = make_run_config(shipped_data()[1], "tiny", min_collateral="5000000", round_blocks=2,
                          total_rounds=1)  # fmt: skip
    msg = MsgCreateRun(creator=str(creator.address()), run_id="done-run", config=cfg)
    broadcast(running_chain.client, creator, msg).wait_to_complete(poll_period=0.1)
    with PocClient(running_chain.address) as poc:
        info = poc.round_info("done-run")
        running_chain.process.wait_for_height(info.resolution_height + 1, timeout=120)
        assert poc.round_info("done-run").finished
        home, address = operator
        result = node(home, "--run", "done-run", "--metrics-address", "",
                      chain=running_chain.address)  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        assert "run done-run has finished: not registering" in result.stderr
        assert poc.collateral(address=address).locked == "0"
        assert address not in {h.address for h in poc.hosts(run_id="done-run")}


def test_cosmos_style_keys_queries_sends_and_version(running_chain, tmp_path):
    """What a Cosmos user reaches for: keys imported, exported and deleted, a bank send and a
    balance query (text and ``--output json``), and ``version``."""
    from importlib.metadata import version

    from dilochain.testutil import wallet

    env = {"DILOCHAIN_KEYRING_PASSWORD": PASSWORD}
    funded = running_chain.wallets[3]
    secret = funded.signer().private_key_bytes.hex()
    home, chain = str(tmp_path / "k"), running_chain.address
    imported = cli("keys", "import-hex", "rich", secret, "--home", home, env=env)
    assert imported.returncode == 0 and str(funded.address()) in imported.stdout
    exported = cli("keys", "export", "rich", "--unarmored-hex", "--unsafe", "--home", home,
                   env=env)  # fmt: skip
    assert exported.returncode == 0 and exported.stdout.strip() == secret
    one_line_error(cli("keys", "export", "rich", "--unarmored-hex", "--home", home, env=env),
                   "add --unsafe")  # fmt: skip
    one_line_error(cli("keys", "import-hex", "bad", "00" * 31, "--home", home, env=env), "32 bytes")
    to = str(wallet(996).address())
    sent = cli("tx", "bank", "send", "rich", to, "7udlc", "--home", home, "--chain", chain,
               "--output", "json", env=env)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    receipt = json.loads(sent.stdout)
    assert receipt["code"] == 0 and receipt["height"] > 0 and len(receipt["txhash"]) == 64
    held = cli("query", "bank", "balances", to, "--chain", chain, "-o", "json")
    assert json.loads(held.stdout) == {"address": to, "balances": [{"denom": DENOM, "amount": "7"}]}
    assert "0.000007 DLC" in cli("query", "bank", "balances", to, "--chain", chain).stdout
    one_line_error(cli("query", "bank", "balances", "nobody", "--chain", chain), "address")
    one_line_error(cli("tx", "bank", "send", "rich", to, "7 udlc", "--home", home, "--chain",
                       chain, env=env), "amount")  # fmt: skip
    listed = json.loads(cli("keys", "list", "--home", home, "--output", "json").stdout)
    assert listed == [{"name": "rich", "address": str(funded.address()),
                       "pubkey": listed[0]["pubkey"]}]  # fmt: skip
    shown = json.loads(cli("keys", "show", "rich", "--home", home, "-o", "json").stdout)
    assert shown == listed[0]
    one_line_error(cli("keys", "delete", "rich", "--home", home), "--yes")  # no terminal
    wrong = {"DILOCHAIN_KEYRING_PASSWORD": "not it"}  # only the keyring's owner deletes
    one_line_error(cli("keys", "delete", "rich", "--yes", "--home", home, env=wrong),
                   "wrong keyring password")  # fmt: skip
    deleted = cli("keys", "delete", "rich", "--yes", "--home", home, "-o", "json", env=env)
    assert json.loads(deleted.stdout) == {"deleted": "rich", "address": str(funded.address())}
    one_line_error(cli("keys", "show", "rich", "--home", home), "no key named 'rich'")
    shown = json.loads(cli("version", "--output", "json").stdout)
    assert shown["dilochain"] == version("dilochain") and shown["cometbft"].startswith("0.38")


def test_node_reaches_the_chain_through_cometbft_rpc_alone(running_chain, tmp_path):
    """``--node tcp://host:26657``, as Cosmos CLIs take it: queries, a send that waits for its
    block, and the validator set, all through CometBFT's RPC; its mistakes are one line."""
    from dilochain.testutil import wallet

    env = {"DILOCHAIN_KEYRING_PASSWORD": PASSWORD}
    node = f"tcp://{running_chain.process.rpc_address}"
    home, to = str(tmp_path / "k"), str(wallet(997).address())
    secret = running_chain.wallets[2].signer().private_key_bytes.hex()
    assert cli("keys", "import-hex", "rich", secret, "--home", home, env=env).returncode == 0
    sent = cli("tx", "bank", "send", "rich", to, "5udlc", "--home", home, "--node", node,
               "-o", "json", env=env)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    receipt = json.loads(sent.stdout)
    assert receipt["code"] == 0 and receipt["height"] > 0
    held = json.loads(cli("query", "bank", "balances", to, "--node", node, "-o", "json").stdout)
    assert held["balances"] == [{"denom": DENOM, "amount": "5"}]
    listed = cli("query", "validators", "--node", node, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [v["status"] for v in json.loads(listed.stdout)] == ["bonded"]

    one_line_error(cli("query", "bank", "balances", to, "--node", "tcp://127.0.0.1:1"),
                   "no dilochain node answers at tcp://127.0.0.1:1")  # fmt: skip
    one_line_error(cli("query", "bank", "balances", to, "--node", "127.0.0.1:26657"),
                   "not a CometBFT RPC URL")  # fmt: skip
    one_line_error(cli("query", "bank", "balances", to, "--node", node, "--chain",
                       running_chain.address), "give one")  # fmt: skip
    one_line_error(cli("query", "bank", "balances", to, "--chain",
                       running_chain.process.rpc_address), f"give it as --node {node}")  # fmt: skip


def test_query_poc_reads_the_chain_s_own_objects(running_chain, run_id):
    """``query poc …``: runs, rounds, commits, params and the rest, as JSON (the .proto's
    field names) or YAML-like text; unknown runs and bad input are one line."""
    chain = ["--chain", running_chain.address]

    def ask(*args: str):
        done = cli("query", "poc", *args, *chain, "-o", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert ask("run", run_id)["run_id"] == run_id
    assert run_id in [r["run_id"] for r in ask("runs")]
    assert int(ask("round", run_id)["height"]) > 0
    assert ask("commits", run_id, "0") == [] and ask("challenges", run_id, "0") == []
    assert "sampling_rate" in ask("params")
    funded = str(running_chain.wallets[0].address())
    assert set(ask("collateral", funded)) >= {"bonded", "locked"}
    shown = cli("query", "poc", "run", run_id, *chain)
    assert shown.returncode == 0 and f"run_id: {run_id}" in shown.stdout
    one_line_error(cli("query", "poc", "run", "nope", *chain), "unknown run 'nope'")
    one_line_error(cli("query", "poc", "commits", run_id, "-1", *chain), "round: 0 or more")
    one_line_error(cli("query", "poc", "collateral", "not-an-address", *chain), "address")


def test_host_work_reads_as_a_share_of_the_epoch_s():
    from dilochain.cli.rewards_cmd import work_share

    assert work_share("84934656000000", "339738624000000") == "25.0% of 3.4e+14"
    assert work_share("0", "339738624000000") == "0" and work_share("7", "0") == "100.0% of 0"

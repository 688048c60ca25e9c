"""The ``dilochain`` CLI: the Cosmos-style commands and one-line errors for user mistakes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from cosmpy.aerial.wallet import LocalWallet

from dilochain.chain.home import genesis_path
from dilochain.chain.testnet import free_port, rpc_address
from dilochain.cli.main import main
from dilochain.genesis.document import load_genesis
from dilochain.localnet import rpc_status
from dilochain.testutil import wallet

ADDRESS = str(wallet(5).address())
MNEMONIC = (
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about"
)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dilochain.cli.main", *argv],
        capture_output=True, text=True, timeout=60, **kw,
    )  # fmt: skip


def assert_one_line_error(code: int, err: str, needle: str) -> None:
    assert code == 1
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err


@pytest.mark.parametrize(
    ("udlc", "shown"),
    [(0, "0 DLC"), (1, "0.000001 DLC"), (10_000_000, "10 DLC"), (1_234_567_890, "1,234.56789 DLC"),
     ("600000000", "600 DLC")],
)  # fmt: skip
def test_amounts_are_shown_in_dlc_exactly(udlc, shown):
    from dilochain.cli.common import dlc

    assert dlc(udlc) == shown


def test_init_and_add_genesis_account(tmp_path, capsys):
    home = str(tmp_path / "h")
    assert run(capsys, "chain", "init", "--home", home, "--chain-id", "net-1")[0] == 0
    code, out, _ = run(capsys, "chain", "add-genesis-account", ADDRESS, "1000udlc,5stake",
                       "--home", home, "-o", "json")  # fmt: skip
    assert code == 0 and json.loads(out) == {"address": ADDRESS, "amount": "1000udlc,5stake"}
    genesis = json.loads((tmp_path / "h" / "config" / "genesis.json").read_text())
    assert genesis["chain_id"] == "net-1"
    assert len(genesis["validators"]) == 1 and genesis["validators"][0]["power"] == "10"
    for name in ("config/config.toml", "config/node_key.json", "config/priv_validator_key.json",
                 "data/priv_validator_state.json"):  # fmt: skip
        assert (tmp_path / "h" / name).is_file(), name
    assert genesis["app_state"]["accounts"] == [
        {
            "address": ADDRESS,
            "coins": [{"denom": "stake", "amount": 5}, {"denom": "udlc", "amount": 1000}],
        }
    ]
    code, _, err = run(capsys, "chain", "init", "--home", home, "--chain-id", "net-1")
    assert_one_line_error(code, err, "already holds a chain")


def _init(home) -> None:
    main(["chain", "init", "--home", str(home), "--chain-id", "net-1",
          "--rpc-address", f"127.0.0.1:{free_port()}",
          "--p2p-address", f"127.0.0.1:{free_port()}"])  # fmt: skip


def test_chain_init_stakes_its_validator_for_an_open_set(tmp_path, capsys):
    operator = str(wallet(7).address())
    base = ["chain", "init", "--chain-id", "net-1"]
    code, _, _ = run(capsys, *base, "--home", str(tmp_path / "h"), "--operator", operator,
                     "--self-bond", "250000000")  # fmt: skip
    assert code == 0
    (validator,) = load_genesis(genesis_path(tmp_path / "h")).validators
    assert (validator.operator, validator.self_bond, validator.power) == (operator, 250_000_000,
                                                                          250)  # fmt: skip
    code, _, err = run(capsys, *base, "--home", str(tmp_path / "a"), "--operator", operator)
    assert_one_line_error(code, err, "--operator and --self-bond go together")
    code, _, err = run(capsys, *base, "--home", str(tmp_path / "b"), "--operator", operator,
                       "--self-bond", "5")  # fmt: skip
    assert_one_line_error(code, err, "the genesis min_self_bond")
    code, _, err = run(capsys, *base, "--home", str(tmp_path / "c"), "--operator", "nobody",
                       "--self-bond", "250000000")  # fmt: skip
    assert code == 1 and "nobody" in err and "Traceback" not in err


def test_chain_start_without_cometbft(tmp_path, capsys, monkeypatch):
    _init(tmp_path / "h")
    capsys.readouterr()
    monkeypatch.setenv("DILOCHAIN_COMETBFT", str(tmp_path / "nowhere"))
    code, _, err = run(capsys, "chain", "start", "--home", str(tmp_path / "h"))
    assert_one_line_error(code, err, "is not an executable file")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["chain", "init", "--chain-id", "bad id!"], "invalid chain id"),
        (["chain", "add-genesis-account", ADDRESS, "lots"], "invalid coin"),
        (["chain", "add-genesis-account", "nobody", "5udlc"], "no key named 'nobody'"),
        (["chain", "start", "--block-time", "fast"], "invalid duration"),
        (["chain", "start", "--block-time", "10ms"], "between 50ms and 60s"),
        (["keys", "show", "ghost"], "no key named 'ghost'"),
        (["keys", "list"], "no keyring"),
        (["chain", "add-genesis-account", ADDRESS, "1e30"], "without an exponent"),
        (["chain", "add-genesis-account", ADDRESS, "1e30udlc"], "without an exponent"),
        (["chain", "add-genesis-account", ADDRESS, "\u0665udlc"], "invalid coin"),
        (["chain", "init", "--chain-id", "n-1", "--rpc-address", "localhost"], "--rpc-address"),
        (["chain", "init", "--chain-id", "n-1", "--p2p-address", "h:0"], "--p2p-address"),
    ],
)
def test_user_errors_are_one_line(tmp_path, capsys, argv, needle):
    home = tmp_path / "h"
    if argv[1] != "init":
        main(["chain", "init", "--home", str(home), "--chain-id", "net-1"])
        capsys.readouterr()
    code, _, err = run(capsys, *argv, "--home", str(home))
    assert_one_line_error(code, err, needle)


def test_missing_home_and_bad_genesis(tmp_path, capsys):
    code, _, err = run(capsys, "chain", "start", "--home", str(tmp_path / "none"))
    assert_one_line_error(code, err, "no chain home")
    home = tmp_path / "h"
    main(["chain", "init", "--home", str(home), "--chain-id", "net-1"])
    path = home / "config" / "genesis.json"
    doc = json.loads(path.read_text())
    doc["app_state"]["accounts"] = [{"address": "dilo1bogus", "coins": []}]
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    code, _, err = run(capsys, "chain", "start", "--home", str(home))
    assert_one_line_error(code, err, "field app_state.accounts.0.address")


def test_damaged_files_are_one_clear_line(tmp_path, capsys, monkeypatch):
    home = tmp_path / "h"
    _init(home)
    monkeypatch.setenv("DILOCHAIN_KEYRING_PASSWORD", "pw")
    assert run(capsys, "keys", "add", "alice", "--home", str(home))[0] == 0
    key_file = home / "keyring" / "alice.json"
    key_file.write_text("{}")
    assert_one_line_error(*run(capsys, "keys", "show", "alice", "--home", str(home))[::2],
                          "damaged")  # fmt: skip
    key_file.write_text('{"name": "alice", "addr')  # truncated
    assert_one_line_error(*run(capsys, "keys", "list", "--home", str(home))[::2], "unreadable")
    (home / "keyring" / ".keyhash").write_text('{"salt": "00"')
    assert_one_line_error(*run(capsys, "keys", "add", "bob", "--home", str(home))[::2],
                          "unreadable")  # fmt: skip
    (home / "config" / "priv_validator_key.json").write_text("{}")
    assert_one_line_error(*run(capsys, "chain", "start", "--home", str(home))[::2],
                          "unreadable key file")  # fmt: skip


def test_garbage_chain_database_is_one_clear_line(tmp_path, capsys):
    home = tmp_path / "h"
    _init(home)
    (home / "data" / "chain.db").write_bytes(b"not sqlite at all" * 100)
    code, _, err = run(capsys, "chain", "start", "--home", str(home))
    assert_one_line_error(code, err, "is not a usable chain database")


def test_bad_flag_is_a_usage_error(tmp_path):
    result = cli("chain", "start", "--no-such-flag")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "unrecognized arguments" in result.stderr


def test_keys_add_list_show_and_wrong_password(tmp_path, capsys, monkeypatch):
    home = str(tmp_path)
    monkeypatch.setenv("DILOCHAIN_KEYRING_PASSWORD", "s3cret")
    code, out, _ = run(capsys, "keys", "add", "alice", "--home", home, "-o", "json")
    added = json.loads(out)
    assert code == 0 and len(added["mnemonic"].split()) == 24
    assert str(LocalWallet.from_mnemonic(added["mnemonic"], prefix="dilo").address()) == (
        added["address"])  # fmt: skip
    code, out, _ = run(capsys, "keys", "show", "alice", "-a", "--home", home)
    alice = out.strip()
    assert code == 0 and alice.startswith("dilo1")
    code, out, _ = run(capsys, "keys", "list", "--home", home)
    assert "alice" in out
    monkeypatch.setenv("DILOCHAIN_KEYRING_PASSWORD", "wrong")
    code, _, err = run(capsys, "keys", "add", "bob", "--home", home)
    assert_one_line_error(code, err, "wrong keyring password")


def test_keys_export_armored_and_import_as_the_cosmos_sdk_does(tmp_path, capsys, monkeypatch):
    """``keys export`` writes the SDK's armor (bcrypt, XSalsa20-Poly1305, CRC-24) under a
    passphrase read from stdin; ``keys import`` of it into another home gives the same key."""
    import base64
    import io

    from dilochain.key_armor import _crc24

    monkeypatch.setenv("DILOCHAIN_KEYRING_PASSWORD", "s3cret")
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    secret = wallet(31).signer().private_key_bytes.hex()
    assert run(capsys, "keys", "import-hex", "k", secret, "--home", first)[0] == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("phrase one\n"))
    code, armor, err = run(capsys, "keys", "export", "k", "--home", first)
    assert code == 0, err
    lines = armor.splitlines()
    assert lines[0] == "-----BEGIN TENDERMINT PRIVATE KEY-----" and "kdf: bcrypt" in lines
    assert lines[-1] == "-----END TENDERMINT PRIVATE KEY-----" and secret not in armor
    sealed = base64.b64decode("".join(lines[5:-2]))
    assert lines[-2] == "=" + base64.b64encode(_crc24(sealed).to_bytes(3, "big")).decode()
    (tmp_path / "k.armor").write_text(armor)
    monkeypatch.setattr("sys.stdin", io.StringIO("phrase one\n"))
    code, out, err = run(capsys, "keys", "import", "k2", str(tmp_path / "k.armor"),
                         "--home", second)  # fmt: skip
    assert code == 0, err
    assert str(wallet(31).address()) in out
    monkeypatch.setattr("sys.stdin", io.StringIO("phrase two\n"))
    code, _, err = run(capsys, "keys", "import", "k3", str(tmp_path / "k.armor"), "--home", second)
    assert_one_line_error(code, err, "wrong passphrase")
    code, _, err = run(capsys, "keys", "export", "k", "--unarmored-hex", "--home", first)
    assert_one_line_error(code, err, "add --unsafe")


def test_keys_recover_from_stdin(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DILOCHAIN_KEYRING_PASSWORD"}
    result = cli("keys", "add", "rec", "--recover", "--home", str(tmp_path),
                 input=f"pw\n{MNEMONIC}\n", env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = str(LocalWallet.from_mnemonic(MNEMONIC, prefix="dilo").address())
    assert expected in result.stdout
    nothing = cli("keys", "add", "other", "--home", str(tmp_path), input="", env=env)
    assert nothing.returncode == 1 and "Traceback" not in nothing.stderr
    assert "no terminal to ask on" in nothing.stderr
    assert "or set DILOCHAIN_KEYRING_PASSWORD" in nothing.stderr


def _start(home, address: str, rest: str = "127.0.0.1:0") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dilochain.cli.main", "chain", "start", "--home", str(home),
         "--grpc-address", address, "--rest-address", rest, "--block-time", "100ms"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.integration
def test_start_prints_addresses_and_stops_on_sigint(tmp_path):
    home = tmp_path / "h"
    _init(home)
    proc = _start(home, "127.0.0.1:0")
    assert proc.stdout.readline() == f"CometBFT RPC listening on {rpc_address(home)}\n"
    assert proc.stdout.readline().startswith("REST server listening on 127.0.0.1:")
    assert proc.stdout.readline().startswith("gRPC server listening on 127.0.0.1:")
    assert rpc_status(rpc_address(home))["node_info"]["network"] == "net-1"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped at height" in out and "Traceback" not in err


@pytest.mark.integration
@pytest.mark.parametrize("which", ["grpc", "rpc", "rest"])
def test_port_in_use(tmp_path, which):
    home = tmp_path / "h"
    _init(home)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(rpc_address(home).split(":")[1]) if which == "rpc" else 0))
        taken.listen()
        taken_address = f"127.0.0.1:{taken.getsockname()[1]}"
        port = taken.getsockname()[1]
        proc = _start(home, taken_address if which == "grpc" else "127.0.0.1:0",
                      taken_address if which == "rest" else "127.0.0.1:0")  # fmt: skip
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "Traceback" not in err and "add_port.cc" not in err  # no gRPC core line before it
    assert f"error: cannot listen on 127.0.0.1:{port}" in err


def test_testnet_init_and_chain_init_answer_in_json(tmp_path, capsys):
    code, out, err = run(capsys, "testnet", "init", "--validators", "2", "--dir",
                         str(tmp_path / "net"), "-o", "json")  # fmt: skip
    assert code == 0, err
    listed = json.loads(out)
    assert [n["name"] for n in listed["validators"]] == ["node0", "node1"]
    assert listed["validators"][1]["rpc"] == rpc_address(tmp_path / "net" / "node1")
    assert (listed["chain_id"], listed["accounts"]) == ("dilochain-testnet", [])
    code, out, err = run(capsys, "chain", "init", "--home", str(tmp_path / "h"), "--chain-id",
                         "net-2", "-o", "json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out) == {"chain_id": "net-2", "home": str(tmp_path / "h"),
                               "state_sync": None}  # fmt: skip


def test_testnet_init_funds_accounts_in_every_validator_s_genesis(tmp_path, capsys, monkeypatch):
    """A testnet's genesis funded no one, and it is written four times (a home per validator)
    before the first block: a newcomer had no way to get tokens for a host's collateral.
    ``--account`` funds an address or a key of ``--home``'s keyring in the shared genesis."""
    monkeypatch.setenv("DILOCHAIN_KEYRING_PASSWORD", "s3cret")
    home, bob = str(tmp_path / "keys"), str(wallet(1).address())
    code, out, _ = run(capsys, "keys", "add", "alice", "--home", home, "-o", "json")
    alice = json.loads(out)["address"]
    code, out, err = run(capsys, "testnet", "init", "--validators", "2", "--dir",
                         str(tmp_path / "net"), "--home", home, "--account",
                         "alice=5000000udlc", "--account", f"{bob}=7udlc", "--account",
                         f"{bob}=3udlc")  # fmt: skip
    assert code == 0, err
    assert f"funded {alice}: 5000000udlc" in out and f"funded {bob}: 10udlc" in out
    code, out, err = run(capsys, "testnet", "init", "--validators", "1", "--dir",
                         str(tmp_path / "json"), "--home", home, "--account",
                         "alice=5udlc", "-o", "json")  # fmt: skip
    assert json.loads(out)["accounts"] == [{"address": alice, "coins": "5udlc"}], err
    for node in ("node0", "node1"):
        doc = load_genesis(genesis_path(tmp_path / "net" / node))
        funded = {a.address: {c.denom: c.amount for c in a.coins} for a in doc.accounts}
        assert (funded[alice], funded[bob]) == ({"udlc": 5000000}, {"udlc": 10})
    code, _, err = run(capsys, "testnet", "init", "--dir", str(tmp_path / "other"),
                       "--account", "alice5000000udlc")  # fmt: skip
    assert_one_line_error(code, err, "give ADDRESS_OR_KEY=COINS")
    code, _, err = run(capsys, "testnet", "init", "--dir", str(tmp_path / "other"), "--home",
                       home, "--account", "carol=1udlc")  # fmt: skip
    assert_one_line_error(code, err, "no key named 'carol'")
    for given, needle in [  # an address wrong as one is not taken for a key's name
        ("cosmos1w508d6qejxtdg4y5r3zarvary0c5xw7k6ah60c=1udlc", "has prefix 'cosmos'"),
        ("DILO1W508D6QEJXTDG4Y5R3ZARVARY0C5XW7K8ARADH=1udlc", "not in lower case"),
        (f"{bob}=0udlc", "coins are positive"),
        (f"{bob}={2**256 - 1}udlc", "more than 2^256 - 1 udlc"),  # with the one below
    ]:
        accounts = ["--account", given, "--account", f"{bob}=1udlc"]
        code, _, err = run(capsys, "testnet", "init", "--dir", str(tmp_path / "other"),
                           "--home", home, *accounts)  # fmt: skip
        assert_one_line_error(code, err, needle)
    assert not (tmp_path / "other").exists()  # nothing written


def test_devnet_stops_every_member_and_kills_one_that_will_not():
    """Ctrl-C during ``devnet up`` left a verifier waiting for a chain that had already stopped,
    and ``proc.wait(30)`` ended the command with a TimeoutExpired traceback: members that do
    not stop when asked are killed after the grace period."""
    from dilochain.cli.devnet_cmd import _stop

    stubborn = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('up', flush=True); time.sleep(60)")  # fmt: skip
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for code in (stubborn, "import time; print('up', flush=True); time.sleep(60)")
    ]
    for proc in procs:
        assert proc.stdout.readline() == "up\n"  # its handlers are in place
    _stop(procs, grace=1)
    assert [p.returncode for p in procs] == [-signal.SIGKILL, -signal.SIGTERM]


@pytest.mark.parametrize("command", [("rewards", "show"), ("rewards", "claim", "--key", "k"),
                                     ("query", "poc", "epoch")])  # fmt: skip
def test_an_epoch_is_a_whole_number(command, capsys):
    """``--epoch -1`` reached the chain client and ended in a ValueError traceback."""
    with pytest.raises(SystemExit) as refused:
        main([*command, "--epoch", "-1"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "'-1' is not an epoch number" in err and "Traceback" not in err


def test_an_out_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys):
    """``data prepare --out`` and ``export --out`` under a file, or naming a file, stop at
    argument parsing with argparse's usage error, not after minutes of work with a traceback."""
    (tmp_path / "afile").write_text("x")
    for out, needle in ((tmp_path / "afile" / "sub", "is not a folder you can write in"),
                        (tmp_path / "afile", "is a file, not a folder")):  # fmt: skip
        for argv in (["data", "prepare", "--input", str(tmp_path), "--out", str(out)],
                     ["export", "--run", "r", "--out", str(out)]):  # fmt: skip
            with pytest.raises(SystemExit) as stop:
                main(argv)
            assert stop.value.code == 2
            err = capsys.readouterr().err
            assert "Traceback" not in err and needle in err, err
    assert (tmp_path / "afile").read_text() == "x"


def test_export_never_writes_into_a_folder_of_other_files(tmp_path, capsys):
    """``export --out .`` from a project would have overwritten its README.md: a folder that
    holds files and is not an earlier export (no dilochain.json) is refused before any work."""
    (tmp_path / "README.md").write_text("my project")
    with pytest.raises(SystemExit) as stop:
        main(["export", "--run", "r", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "holds other files" in err and "Traceback" not in err
    assert (tmp_path / "README.md").read_text() == "my project"


def test_query_poc_shows_hashes_in_hex_as_everything_else_does():
    """The protobuf JSON mapping writes bytes in base64, while logs, ``status`` and the
    dashboard write hashes in hex: ``query poc`` showed a commit's hashes in a form a user
    could not match with anything else. Bytes are hex at every depth now, in JSON and text."""
    from dilochain.cli.poc_query_cmd import _plain, _text
    from dilochain.protocol.pb.poc.v1.types_pb2 import Beacon, BeaconEntry, RoundCommit

    root = bytes(range(32))
    beacon = Beacon(run_id="r", anchor=b"\xab" * 32, entries=[
        BeaconEntry(verifier="v1", commitment=root, secret=b""),
        BeaconEntry(verifier="v2", commitment=b"\x01\x02", secret=b"\xff")])  # fmt: skip
    shown = _plain([beacon, RoundCommit(run_id="r", ckpt_root=root)])
    assert shown[0]["anchor"] == "ab" * 32 and shown[0]["seed"] == ""
    assert shown[0]["entries"] == [
        {"verifier": "v1", "commitment": root.hex(), "secret": ""},
        {"verifier": "v2", "commitment": "0102", "secret": "ff"},
    ]
    assert shown[1]["ckpt_root"] == root.hex() and shown[1]["round"] == "0"
    assert f"ckpt_root: {root.hex()}" in _text(shown)


def test_a_usage_error_is_one_line_and_a_missing_subcommand_lists_them(capsys):
    """A bad ``--preset`` printed ``run create``'s usage, 15 lines, above its error: the error
    is one line now, naming ``--help``; a command given without its subcommand shows its help,
    which lists them."""
    with pytest.raises(SystemExit) as ended:
        main(["run", "create", "--preset", "nope"])
    assert ended.value.code == 2
    assert capsys.readouterr().err == (
        "dilochain run create: error: argument --preset: invalid choice: 'nope' (choose from "
        "'demo', 'small', 'tiny') (see dilochain run create --help)\n"
    )
    with pytest.raises(SystemExit) as ended:
        main(["query", "poc"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "commits" in err and "a round's commits" in err
    assert err.endswith("(see dilochain query poc --help)\n")
    with pytest.raises(SystemExit) as ended:  # argparse reports these at the top level
        main(["status", "--bogus", "x"])
    assert capsys.readouterr().err == (
        "dilochain status: error: unrecognized arguments: --bogus x (see dilochain status --help)\n"
    )

"""``node init`` / ``verifier init`` write commented TOML; ``node start`` / ``verifier run``
read it under their flags, and a mistake in it is one line naming the key and the file."""

from __future__ import annotations

import tomllib

import pytest

from dilochain.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), err


@pytest.mark.parametrize("kind", ["node", "verifier"])
def test_init_writes_commented_toml_with_the_given_flags(tmp_path, capsys, kind):
    reachable = ["--blob-address", "0.0.0.0:7000", "--advertise-address", "203.0.113.7:7000"]
    extra = ["--run", "r1", *reachable] if kind == "node" else ["--data", "/d1", "--data", "/d2"]
    code, out, _ = run(capsys, kind, "init", "--home", str(tmp_path), "--key", "op",
                       "--chain", "10.0.0.5:9090", "--no-auto-claim", *extra)  # fmt: skip
    path = tmp_path / f"{kind}.toml"
    assert code == 0 and str(path) in out
    text = path.read_text()
    assert text.count("\n# ") >= 8  # every key has its comment
    values = tomllib.loads(text)
    assert values["key"] == "op" and values["chain"] == "10.0.0.5:9090"
    assert values["auto_claim"] is False and values["log_format"] == "text"
    assert values["metrics_address"].startswith("127.0.0.1:")
    if kind == "node":
        assert values["run_id"] == "r1" and values["device"] == "cpu" and values["threads"] == 1
        assert values["advertise_address"] == "203.0.113.7:7000"
    else:
        assert values["data"] == ["/d1", "/d2"] and values["jobs"] == 2
    # A second init does not overwrite it; --overwrite does.
    code, _, err = run(capsys, kind, "init", "--home", str(tmp_path))
    one_line_error(code, err, f"{path} exists")
    assert run(capsys, kind, "init", "--home", str(tmp_path), "--overwrite")[0] == 0
    text = path.read_text()
    assert "key" not in tomllib.loads(text)  # unset: commented out
    # Uncommenting any commented-out key leaves valid TOML (with an example value).
    uncommented = "\n".join(line[2:] if line.startswith("# ") and " = " in line else line
                            for line in text.splitlines())  # fmt: skip
    assert tomllib.loads(uncommented)["key"] == "operator"


def test_init_refuses_a_bad_value(tmp_path, capsys):
    code, _, err = run(capsys, "node", "init", "--home", str(tmp_path), "--threads", "0")
    one_line_error(code, err, "--threads", "greater than or equal to 1")
    assert not (tmp_path / "node.toml").exists()


@pytest.mark.parametrize(
    ("kind", "text", "needles"),
    [
        ("node", 'run_id = "r"\nkey = "op"\ncolour = "blue"\n',
         ["node.toml", "unknown key 'colour'"]),
        ("node", 'run_id = "r"\nkey = "op"\nthreads = "many"\n', ["node.toml: threads", "integer"]),
        ("node", 'run_id = "r"\nkey = "op"\ndevice = "tpu"\n', ["node.toml: device", "'cpu'"]),
        ("node", 'run_id = "r"\nkey = "op"\nmetrics_address = "nowhere"\n',
         ["node.toml: metrics_address", "not host:port"]),
        ("node", 'run_id = "r"\nkey = "op"\nblob_address = "127.0.0.1:99999"\n',
         ["node.toml: blob_address", "a port in 1-65535"]),
        ("node", 'key = "op"\n', ["no run_id: give --run or set run_id in", "node.toml"]),
        ("node", "run_id = \n", ["node.toml: not valid TOML"]),
        ("verifier", 'key = "op"\njobs = 0\n', ["verifier.toml: jobs", "greater than or equal"]),
        ("verifier", 'key = "op"\nrun_id = "r"\n', ["verifier.toml", "unknown key 'run_id'"]),
        ("verifier", 'key = "op"\nbehavior = "always-pass"\n', ["unknown key 'behavior'"]),
        ("node", 'run_id = "r"\nkey = "op"\nchain = "http://10.0.0.5:26657"\n',
         ["node.toml: chain", "is a URL", "host:port"]),
        ("verifier", 'key = "op"\nchain = ["10.0.0.5:9090", "10.0.0.6"]\n',
         ["verifier.toml: chain", "'10.0.0.6' is not host:port"]),
    ],
)  # fmt: skip
def test_a_mistake_in_the_file_is_one_line_naming_key_and_file(tmp_path, capsys, kind, text,
                                                               needles):  # fmt: skip
    (tmp_path / f"{kind}.toml").write_text(text)
    command = ["node", "start"] if kind == "node" else ["verifier", "run"]
    code, _, err = run(capsys, *command, "--home", str(tmp_path))
    one_line_error(code, err, *needles)


def test_flags_override_the_file(tmp_path, capsys):
    (tmp_path / "node.toml").write_text('run_id = "r"\nkey = "op"\nthreads = "many"\n')
    # The bad file value is overridden, so the next problem shows: the key is not in the keyring.
    code, _, err = run(capsys, "node", "start", "--home", str(tmp_path), "--threads", "2")
    one_line_error(code, err, "no key named 'op'")
    code, _, err = run(capsys, "node", "start", "--home", str(tmp_path), "--threads", "-1")
    one_line_error(code, err, "--threads:", "greater than or equal to 1")


def test_an_explicit_config_must_exist(tmp_path, capsys):
    missing = tmp_path / "elsewhere.toml"
    code, _, err = run(capsys, "verifier", "run", "--home", str(tmp_path), "--config", str(missing))
    one_line_error(code, err, f"{missing}: no such config file")


def test_several_chain_nodes_from_the_file_or_repeated_flags(tmp_path, capsys):
    from dilochain.node.config import NodeConfig

    both = ("10.0.0.5:9090", "10.0.0.6:9090")
    listed = NodeConfig(home=tmp_path, run_id="r", key="k", chain=list(both))
    joined = NodeConfig(home=tmp_path, run_id="r", key="k", chain="10.0.0.5:9090,10.0.0.6:9090")
    assert listed.chain == joined.chain == both
    assert listed.unreachable_blob_service() is not None  # node start would refuse it
    code, _, _ = run(capsys, "node", "init", "--home", str(tmp_path), "--chain", both[0],
                     "--chain", both[1])  # fmt: skip
    assert code == 0 and tomllib.loads((tmp_path / "node.toml").read_text())["chain"] == list(both)
    code, _, err = run(capsys, "status", "--chain", "tcp://127.0.0.1:26657")
    one_line_error(code, err, "--chain:", "is a URL")


def test_a_blob_service_no_other_machine_can_reach_is_refused_on_a_remote_chain(tmp_path, capsys):
    """A host behind NAT, or one that kept the loopback default, would register an endpoint
    no verifier can dial and be slashed for it: refused at start with what to set instead."""
    start = ["node", "start", "--home", str(tmp_path), "--key", "op", "--run", "r"]
    remote = [*start, "--chain", "10.0.0.5:9090"]
    code, _, err = run(capsys, *remote)
    one_line_error(code, err, "127.0.0.1:0 is reachable from this machine only",
                   "--advertise-address")  # fmt: skip
    code, _, err = run(capsys, *remote, "--blob-address", "0.0.0.0:7000")
    one_line_error(code, err, "0.0.0.0:7000 is reachable from this machine only")
    code, _, err = run(capsys, *remote, "--advertise-address", "http://203.0.113.7:7000")
    one_line_error(code, err, "--advertise-address", "not a URL")
    for fine in (
        [*remote, "--blob-address", "0.0.0.0:7000", "--advertise-address", "203.0.113.7:7000"],
        start,
    ):  # fmt: skip  (start: a chain on this machine)
        code, _, err = run(capsys, *fine)
        assert code == 1 and "reachable" not in err and "keyring" in err.lower(), err


def test_a_verifier_s_blob_service_is_refused_only_where_it_advertises_in_vain(tmp_path, capsys):
    """A verifier's blob service only backs hosts up (an accepted pseudo-gradient its host
    withholds): one no host can reach is served to nobody, with a warning; an advertised
    address it cannot listen behind is a config error, refused at start."""
    from dilochain.verifier.config import VerifierConfig

    remote = ["verifier", "run", "--home", str(tmp_path), "--key", "op", "--chain", "10.0.0.5:9090"]
    code, _, err = run(capsys, *remote, "--advertise-address", "203.0.113.8:7001")
    one_line_error(code, err, "listens on 127.0.0.1:0", "--blob-address 0.0.0.0:7000")
    code, _, err = run(capsys, *remote, "--blob-address", "0.0.0.0:7001", "--advertise-address",
                       "localhost:7001")  # fmt: skip
    one_line_error(code, err, "localhost:7001 is reachable from this machine only",
                   "hosts could not fetch from it what this verifier screened")  # fmt: skip
    code, _, err = run(capsys, *remote, "--blob-address", "0.0.0.0:7001")  # asked to serve
    one_line_error(code, err, "0.0.0.0:7001 is reachable from this machine only")
    code, _, err = run(capsys, *remote)  # the loopback default: warned at run, not refused
    assert code == 1 and "reachable" not in err and "keyring" in err.lower(), err
    loopback = VerifierConfig(home=tmp_path, key="op", chain=("10.0.0.5:9090",))
    assert "reachable from this machine only" in loopback.unreachable_blob_service()
    assert VerifierConfig(home=tmp_path, key="op").unreachable_blob_service() is None  # devnet
    (tmp_path / "verifier.toml").write_text('key = "op"\nblob_address = "127.0.0.1:99999"\n')
    code, _, err = run(capsys, "verifier", "run", "--home", str(tmp_path))
    one_line_error(code, err, "verifier.toml: blob_address", "a port in 1-65535")

"""A restarted host reveals what its resume record owes before it builds its model: importing
torch alone took 5 s here and a model's build takes minutes at 8B, against a reveal window of a
few blocks (0.6 s in the devnet) whose miss is a slash."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

from dilochain.node import reveals
from dilochain.node.resume import ResumeState, run_instance, state_file
from dilochain.node.reveals import early_revealer
from dilochain.protocol.merkle import merkle_root, verify_merkle_proof
from dilochain.protocol.params import PocParams
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, Run, RunConfig
from dilochain.protocol.schedule import round_window

RUN = Run(run_id="r", start_height=10, created_height=9, creator="dilo1creator",
          config=RunConfig(round_blocks=20, total_rounds=6))  # fmt: skip
LEAVES = [bytes([i]) * 32 for i in range(1, 6)]


def test_the_revealer_and_node_start_import_no_torch():
    code = ("import sys, dilochain.node.reveals, dilochain.cli.node_cmd; "
            "sys.exit('torch' in sys.modules)")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


class _Chain:
    """A chain at round 3's reveal window with one of the host's segments challenged."""

    def __init__(self):
        self.height = round_window(RUN, PocParams(), 3).selection
        self.sent: list = []

    def run(self, run_id):
        return RUN if run_id == "r" else None

    def params(self):
        return PocParams()

    def challenges(self, run_id, round_):
        return [Challenge(host="dilo1me", segment=1)] if round_ == 3 else []

    def round_info(self, run_id):
        return SimpleNamespace(height=self.height)

    def passes(self, done, poll):
        while not done.is_set():
            yield
            done.wait(0.01)

    def send(self, *msgs, until_height=None):
        self.sent.append((msgs, until_height))

    def close(self):
        self.closed = True


def _early(chain: _Chain, state_dir, monkeypatch, chain_id="chain-x"):
    chain.blocks, chain.closed = SimpleNamespace(passes=chain.passes), False
    monkeypatch.setattr(reveals, "PocClient", lambda addresses: chain)
    return early_revealer(("127.0.0.1:9090",), "r", chain_id, state_dir, "dilo1me", chain.send,
                          0.01, threading.Event())  # fmt: skip


def test_a_restart_reveals_from_its_record_before_the_node_exists(tmp_path, monkeypatch):
    ResumeState(3, b"\x09" * 32, 3, {3: LEAVES}, run_instance("chain-x", RUN)).save(
        state_file(tmp_path)
    )
    chain = _Chain()
    revealer = _early(chain, tmp_path, monkeypatch)
    try:
        for _ in range(500):
            if chain.sent:
                break
            threading.Event().wait(0.01)
    finally:
        revealer.close()
    (msgs, until), *again = chain.sent
    window = revealer.window(3)
    assert not again and until == window[-1] and chain.height + 1 in window
    (msg,) = msgs
    assert (msg.round, msg.segment, msg.start_hash, msg.end_hash, msg.final_hash) == (
        3, 1, LEAVES[1], LEAVES[2], LEAVES[-1])  # fmt: skip
    root = merkle_root(LEAVES)
    assert verify_merkle_proof(root, msg.end_hash, 2, 5, list(msg.end_proof))
    assert verify_merkle_proof(root, msg.start_hash, 1, 5, list(msg.start_proof))
    assert 3 in revealer.revealed  # the node that takes over does not reveal it again


def test_no_early_revealer_without_a_record_of_this_chain_s_run(tmp_path, monkeypatch):
    chain = _Chain()
    assert _early(chain, tmp_path, monkeypatch) is None  # no record
    ResumeState(3, b"\x09" * 32, 3, {3: LEAVES}, run_instance("chain-x", RUN)).save(
        state_file(tmp_path)
    )
    assert _early(chain, tmp_path, monkeypatch, chain_id="other") is None  # another run's
    assert chain.closed  # its chain client with it
    ResumeState(3, b"\x09" * 32, 3, {3: LEAVES}, "").save(state_file(tmp_path))
    legacy = _early(chain, tmp_path, monkeypatch, chain_id="other")  # a record before runs
    legacy.close()  # were named in it is taken, as the node takes it (the chain checks proofs)
    state_file(tmp_path).write_text("{not json")
    assert _early(chain, tmp_path, monkeypatch) is None  # damaged: the node rebuilds it


def test_a_restart_serves_what_it_reveals_before_the_node_exists(tmp_path):
    """Its blob service starts with ``node start``: what an early reveal names is fetchable
    before the model is built (the verifiers wait a few blocks past the reveal window); a
    blob address in use is one line, as before."""
    import socket

    import pytest

    from dilochain.artifacts.blob_service import fetch_from_peers
    from dilochain.cli.common import CliError
    from dilochain.cli.node_cmd import _serve_early
    from dilochain.node.reveals import serve_early

    served = serve_early(tmp_path / "artifacts", "127.0.0.1:0", "")
    try:
        digest = served.store.put(b"a revealed checkpoint")
        assert fetch_from_peers([served.endpoint], digest, 1 << 20) == b"a revealed checkpoint"
    finally:
        served.server.stop(grace=None)
    advertised = serve_early(tmp_path / "a", "127.0.0.1:0", "host.example:7000")
    advertised.server.stop(grace=None)
    assert advertised.endpoint == "host.example:7000"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cfg = SimpleNamespace(artifact_dir=tmp_path / "b", advertise_address="",
                              blob_address=f"127.0.0.1:{taken.getsockname()[1]}")  # fmt: skip
        with pytest.raises(CliError, match=r"cannot serve blobs on 127\.0\.0\.1"):
            _serve_early(cfg)


def test_a_restart_on_a_new_port_points_the_chain_there_before_the_node_exists(
    tmp_path, monkeypatch
):
    """A host listening on port 0 serves on another port after a restart, and registered it
    only once its model was built: the verifiers dialled the dead port, found its revealed
    checkpoints on no peer, and it was slashed for them (a devnet probe, kill -9 right after a
    commit). The early revealer moves the endpoint at once."""
    from dilochain.protocol.pb.poc.v1.types_pb2 import Host

    ResumeState(3, b"\x09" * 32, 3, {3: LEAVES}, run_instance("chain-x", RUN)).save(
        state_file(tmp_path)
    )
    chain = _Chain()
    members = [Host(address="dilo1me", endpoint="127.0.0.1:4000")]
    chain.hosts = lambda run_id: members
    chain.challenges = lambda run_id, round_: []  # nothing to reveal: only the move is sent
    revealer = _early(chain, tmp_path, monkeypatch)
    try:
        revealer.point_to("127.0.0.1:4000")  # the same port: nothing to move
        assert not chain.sent
        revealer.point_to("127.0.0.1:5000")
        ((msg,), until), *more = chain.sent
        assert (msg.host, msg.run_id, msg.endpoint, until, more) == (
            "dilo1me", "r", "127.0.0.1:5000", None, [])  # fmt: skip
        members[0].left_height = 9  # it left: the node decides what to do
        revealer.point_to("127.0.0.1:6000")
        assert len(chain.sent) == 1
    finally:
        revealer.close()

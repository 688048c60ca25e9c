"""The node's resume record: per-round checkpoint hashes survive a save and load, a record
written before they were kept per round still loads, and an unreadable one is one clear error."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dilochain.node.errors import NodeError
from dilochain.node.resume import ResumeState


def test_round_trip_keeps_each_rounds_checkpoint_hashes(tmp_path):
    path = tmp_path / "state.json"
    record = ResumeState(4, b"\x01" * 32, 5, {4: [b"\x02" * 32, b"\x03" * 32], 5: [b"\x04" * 32]})
    record.save(path)
    assert ResumeState.load(path) == record
    assert ResumeState.load(tmp_path / "none.json") is None


def test_a_record_with_one_list_of_hashes_is_the_attempted_rounds(tmp_path):
    path = tmp_path / "state.json"
    old = {"round": 3, "global_hash": "ab" * 32, "attempted": 3, "checkpoint_hashes": ["cd" * 32]}
    path.write_text(json.dumps(old))
    assert ResumeState.load(path).checkpoint_hashes == {3: [b"\xcd" * 32]}
    path.write_text(json.dumps({**old, "attempted": -1, "checkpoint_hashes": []}))
    assert ResumeState.load(path).checkpoint_hashes == {}


@pytest.mark.parametrize("text", ["not json", "[]", '{"round": 1}',
                                  '{"round": 0, "global_hash": "zz", "attempted": 0, '
                                  '"checkpoint_hashes": {}}'])  # fmt: skip
def test_an_unreadable_record_is_one_clear_error(tmp_path, text):
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(NodeError, match=r"state.json is unreadable"):
        ResumeState.load(path)


def test_a_saved_global_state_lost_everywhere_resumes_from_the_chain_s(tmp_path):
    """The record's global state is damaged on disk and no peer has it: the node starts from
    the chain's latest global checkpoint, still owing the reveals the record holds (staying
    down would get them slashed); a state it can have (a peer's copy) is resumed from."""
    import torch

    from dilochain.artifacts.store import ArtifactError
    from dilochain.node.aggregation import GlobalView
    from dilochain.node.host import HostNode
    from dilochain.training.tensor_codec import encode_state

    saved = GlobalView(5, {"param/w": torch.ones(2), "momentum/w": torch.zeros(2)})
    chain_s = GlobalView(3, {"param/w": torch.zeros(2), "momentum/w": torch.zeros(2)})
    owed = {6: [b"\x02" * 32, b"\x03" * 32]}
    ResumeState(5, saved.hash, 6, owed).save(tmp_path / "state.json")
    host = HostNode.__new__(HostNode)  # only what resuming uses
    host.cfg = SimpleNamespace(state_dir=tmp_path, run_id="r")
    host.aggregator = SimpleNamespace(latest=lambda: chain_s)
    host.limits = SimpleNamespace(state=1 << 20)

    def lost(digest, limit):
        raise ArtifactError(f"{digest.hex()[:8]} damaged here and on no peer")

    host.store = SimpleNamespace(get=lost)
    view, attempted = host._load()
    assert (view, attempted, host.checkpoint_hashes) == (chain_s, 6, owed)
    host.store = SimpleNamespace(get=lambda digest, limit: encode_state(saved.state))
    view, attempted = host._load()
    assert (view.round, view.hash, attempted) == (5, saved.hash, 6)


def test_a_record_of_another_run_of_the_same_id_is_set_aside(tmp_path):
    """A host whose folder holds a record of run r on a chain since reset (or another chain of
    the same name) resumed from it and stopped, the chain's state of the round differing
    ("foreign global state"): the record names its run, and another run's is set aside."""
    import torch

    from dilochain.node.aggregation import GlobalView
    from dilochain.node.host import HostNode
    from dilochain.node.resume import run_instance
    from dilochain.protocol.pb.poc.v1.types_pb2 import Run
    from dilochain.training.tensor_codec import encode_state

    old_run = Run(run_id="r", created_height=40, creator="dilo1old")
    now_run = Run(run_id="r", created_height=12, creator="dilo1old")
    saved = GlobalView(5, {"param/w": torch.ones(2), "momentum/w": torch.zeros(2)})
    chain_s = GlobalView(3, {"param/w": torch.zeros(2), "momentum/w": torch.zeros(2)})
    ResumeState(5, saved.hash, 6, {6: [b"\x02" * 32]}, run_instance("devnet", old_run)).save(
        tmp_path / "state.json"
    )
    (tmp_path / "pending_commit.json").write_text("{}")
    host = HostNode.__new__(HostNode)  # only what resuming uses
    host.cfg = SimpleNamespace(state_dir=tmp_path, run_id="r")
    host.client = SimpleNamespace(network_config=SimpleNamespace(chain_id="devnet"))
    host.aggregator = SimpleNamespace(latest=lambda: chain_s)
    host.store = SimpleNamespace(get=lambda digest, limit: pytest.fail("the old state was read"))
    host.limits = SimpleNamespace(state=1 << 20)
    host.run_ = now_run
    host.checkpoint_hashes = {}
    assert host._load() == (chain_s, -1) and host.checkpoint_hashes == {}
    assert not (tmp_path / "state.json").exists()
    assert not (tmp_path / "pending_commit.json").exists()
    aside = ResumeState.load(tmp_path / "state.devnet_r@40_dilo1old.json")
    assert aside is not None and aside.round == 5
    host.run_ = old_run  # its own run's record is resumed from, as before
    ResumeState(5, saved.hash, 6, {}, run_instance("devnet", old_run)).save(tmp_path / "state.json")
    host.store = SimpleNamespace(get=lambda digest, limit: encode_state(saved.state))
    assert host._load()[0].hash == saved.hash


def test_a_damaged_record_resumes_from_the_chain_with_the_reveals_the_ledger_names(tmp_path):
    """state.json unreadable (a damaged disk): the node does not stay down (the reveals it owes
    would be slashed). It starts from the chain's latest and finds the checkpoint names of its
    recent rounds among what its ledger says it stored, trusted where their Merkle root is
    its commit's on chain."""
    import torch

    from dilochain.artifacts.pruning import Ledger
    from dilochain.artifacts.store import LocalArtifactStore
    from dilochain.node.aggregation import GlobalView
    from dilochain.node.host import HostNode
    from dilochain.protocol.merkle import merkle_root
    from dilochain.protocol.pb.poc.v1.types_pb2 import RoundCommit

    local, ledger = LocalArtifactStore(tmp_path / "artifacts"), Ledger(tmp_path)
    names = {}
    for round_ in (3, 4, 5):
        stored = []
        for step in range(3):  # each checkpoint: weights, moments, then its 64-byte index
            weights = local.put(b"weights %d %d" % (round_, step) * 50)
            moments = local.put(b"moments %d %d" % (round_, step) * 50)
            stored += [weights, moments, local.put(weights + moments)]
        ledger.record(round_, "checkpoint", stored)
        names[round_] = stored[2::3]
    ledger.record(6, "global", [local.put(b"the state round 6 starts from, saved before it")])
    ledger.record(5, "pseudo_grad", [local.put(b"a pseudo-gradient")])
    commits = {4: RoundCommit(host="me", ckpt_root=merkle_root(names[4])),
               5: RoundCommit(host="me", ckpt_root=merkle_root(names[5][:2]))}  # fmt: skip
    (tmp_path / "state.json").write_text('{"round": 5, "global_h')  # cut short
    chain_s = GlobalView(4, {"param/w": torch.zeros(2), "momentum/w": torch.zeros(2)})
    host = HostNode.__new__(HostNode)  # only what resuming uses
    host.cfg = SimpleNamespace(state_dir=tmp_path, run_id="r")
    host.address, host.local, host.ledger = "me", local, ledger
    host.poc = SimpleNamespace(commits=lambda run_id, round_: [c for r, c in commits.items()
                                                               if r == round_])  # fmt: skip
    host.aggregator = SimpleNamespace(latest=lambda: chain_s)
    reachable = host.poc

    def unreachable(run_id, round_):
        raise ConnectionError("no chain node answers")

    host.poc = SimpleNamespace(commits=unreachable)
    with pytest.raises(ConnectionError):  # the record stays for the next start to rebuild
        host._load()
    assert (tmp_path / "state.json").exists() and not (tmp_path / "state.damaged").exists()
    host.poc = reachable
    view, attempted = host._load()
    assert (view, attempted) == (chain_s, 5)
    assert host.checkpoint_hashes == {4: names[4]}  # 3: no commit; 5: not what it committed
    assert (tmp_path / "state.damaged").exists() and not (tmp_path / "state.json").exists()


def test_a_restarted_host_that_cannot_register_still_serves_what_it_owes(tmp_path):
    """Registration (or moving its endpoint) refused after a restart: a host with a resume
    record may owe reveals, so it goes on to serve them; a fresh host stops with the error."""
    from dilochain.node.host import HostNode

    def refused(endpoint):
        raise NodeError("registration in run 'r' refused: not included within 30s")

    host = HostNode.__new__(HostNode)
    host.cfg = SimpleNamespace(state_dir=tmp_path, run_id="r")
    host.ensure_registered = refused
    with pytest.raises(NodeError, match="refused"):
        host._register_or_serve("127.0.0.1:7000")
    ResumeState(2, b"\x01" * 32, 2, {2: [b"\x02" * 32]}).save(tmp_path / "state.json")
    host._register_or_serve("127.0.0.1:7000")  # logged; the node goes on to run


def test_a_commit_tops_collateral_up_and_a_chain_error_there_costs_no_round():
    """A commit goes with the deposit a slash elsewhere left short; a chain node that does not
    answer that query (down a moment, a failover under way) leaves the commit to its own send,
    which rides the outage out, instead of losing the round."""
    import grpc

    from dilochain.node.host import HostNode
    from dilochain.protocol.pb.poc.v1.types_pb2 import CollateralInfo
    from dilochain.testutil import wallet

    class Down(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

    def down(address):
        raise Down()

    held = CollateralInfo(bonded="2800", locked="3000")
    host = SimpleNamespace(
        poc=SimpleNamespace(collateral=lambda address: held),
        wallet=wallet(1),
        client=SimpleNamespace(query_bank_balance=lambda *a: 10**6),
    )
    (deposit,) = HostNode._top_up(host)  # type: ignore[arg-type]
    assert deposit.amount == "200"
    host.poc.collateral = down
    assert HostNode._top_up(host) == []  # type: ignore[arg-type]

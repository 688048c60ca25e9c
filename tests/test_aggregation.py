"""Aggregation leaves out every pseudo-gradient that cannot be one, the same way for every party,
and never crashes on a hostile commit."""

from __future__ import annotations

import torch

from dilochain.artifacts.blob_service import PeerFetchingStore
from dilochain.artifacts.store import LocalArtifactStore
from dilochain.node.aggregation import Aggregator, GlobalView
from dilochain.protocol.pb.poc.v1.types_pb2 import RoundCommit
from dilochain.testutil import shipped_data
from dilochain.training.compress import compress, decompress
from dilochain.training.diloco import initial_global, outer_step, params_of
from dilochain.training.model import build_model
from dilochain.training.run_config import make_run_config

CFG = make_run_config(shipped_data()[1], "tiny")


class FakePoc:
    """The chain's answers Aggregator asks for: one round's commits, no recorded globals."""

    def __init__(self, commits: list[RoundCommit]):
        self._commits = commits

    def commits(self, run_id: str, round: int) -> list[RoundCommit]:
        return self._commits

    def global_checkpoints(self, run_id: str) -> list:
        return []


def test_invalid_pseudo_gradients_are_left_out_not_fatal(tmp_path):
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    view = GlobalView(0, initial_global(params))
    local = LocalArtifactStore(tmp_path)
    good = {k: torch.full_like(v, 0.01) for k, v in params_of(view.state).items()}
    first = sorted(good)[0]
    hostile = {
        "garbage": b"\x00not a pseudo-gradient",
        "missing-tensor": compress({k: v for k, v in good.items() if k != first}, "int8"),
        "wrong-shape": compress({**good, first: torch.zeros(3)}, "int8"),
        "not-finite": compress({**good, first: torch.full_like(good[first], float("nan"))}, "int8"),
    }
    commits = [RoundCommit(host="honest", base_hash=view.hash,
                           pseudo_grad_hash=local.put(compress(good, "int8")))]  # fmt: skip
    commits += [
        RoundCommit(host=name, base_hash=view.hash, pseudo_grad_hash=local.put(data))
        for name, data in hostile.items()
    ]
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    aggregator = Aggregator(FakePoc(commits), "r", CFG, store, patience=0)
    nxt = aggregator.advance(view)
    expected = outer_step(view.state, [decompress(local.get(commits[0].pseudo_grad_hash))],
                          CFG.outer_lr, CFG.outer_momentum)  # fmt: skip
    assert nxt.round == 1
    assert all(torch.equal(nxt.state[k], expected[k]) for k in expected)


def test_a_round_below_min_hosts_carries_the_global_state_over(tmp_path):
    params = {n: p.detach().clone() for n, p in build_model(CFG.model_config, 1).named_parameters()}
    view = GlobalView(0, initial_global(params))
    local = LocalArtifactStore(tmp_path)
    step = {k: torch.full_like(v, 0.01) for k, v in params_of(view.state).items()}
    digest = local.put(compress(step, "int8"))
    commits = [RoundCommit(host=h, base_hash=view.hash, pseudo_grad_hash=digest) for h in "ab"]
    store = PeerFetchingStore(local, lambda: [], limit=1 << 30)
    thin = Aggregator(FakePoc(commits), "r", CFG, store, patience=0, min_hosts=3)
    carried = thin.advance(view)
    assert carried.round == 1 and carried.hash == view.hash  # θ and the momentum, unchanged
    enough = Aggregator(FakePoc(commits), "r", CFG, store, patience=0, min_hosts=2)
    assert enough.advance(view).hash != view.hash

"""A host of two ranks (gloo, CPU): its round is the same canonical checkpoints and
pseudo-gradient a one-process verifier replays within tolerance (AdamW moments carried from its
last round too), and its cheats are caught."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from dilochain.chain.testnet import free_port
from dilochain.node.behaviors import RoundJob
from dilochain.node.cheats import behavior
from dilochain.training.diloco import params_of
from dilochain.training.distributed import DataParallel
from dilochain.training.model import build_model
from dilochain.training.round_work import serve_rounds, train_round
from dilochain.training.train_step import set_deterministic
from dilochain.verifier.replay import verify_challenge
from dilochain.verifier.testing import publish_round
from tests.test_verifier_replay import CFG, DATA, EXACT, HOST, TOLERANT, base, honest

__all__ = ["base"]  # the module-scoped fixture, shared
WORLD = 2


def _rank(rank: int, address: str, out: Path, base_state: dict) -> None:
    set_deterministic(1)
    parallel = DataParallel.join(rank, WORLD, address)
    model = build_model(CFG.model_config, 0)
    try:
        if rank:
            (out / "served").write_text(str(serve_rounds(model, DATA, parallel)))
            return
        results = {}
        for name in ("honest", "wrong-data", "fewer-steps"):
            job = RoundJob(
                model, CFG, DATA, HOST, 1, params_of(base_state), None, parallel=parallel
            )
            results[name] = behavior(name).train(job)
        carried = results["honest"].checkpoints[-1].state()
        results["carried"] = train_round(model, CFG, DATA, HOST, 2, params_of(base_state),
                                         None, carried, parallel=parallel)  # fmt: skip
        parallel.start_round(None)  # the end
        (out / "results.pkl").write_bytes(pickle.dumps(results))
    finally:
        parallel.close()


def test_two_rank_rounds_replay_in_one_process(tmp_path, base):
    address = f"127.0.0.1:{free_port()}"
    mp.start_processes(_rank, args=(address, tmp_path, base), nprocs=WORLD, start_method="spawn")
    results = pickle.loads((tmp_path / "results.pkl").read_bytes())
    assert (tmp_path / "served").read_text() == "4"  # rank 1 trained every round rank 0 did

    two = results["honest"]
    one = honest(base)  # the same round in one process
    assert len(two.checkpoints) == len(one.checkpoints)
    # step 0: the global state, bit for bit
    assert two.checkpoints[0].digest() == one.checkpoints[0].digest()
    store, commit, challenges = publish_round(tmp_path / "h", CFG, base, two, HOST)
    found = [verify_challenge(CFG, DATA, commit, c, store, TOLERANT) for c in challenges]
    assert all(v.passed for v in found), [v.reason for v in found]
    # Averaging two half-batch gradients sums in another order than one whole batch: replays
    # land within the tolerance but not on the same bits.
    assert all(0 < v.distance < TOLERANT.tolerance for v in found), [v.distance for v in found]
    assert not all(verify_challenge(CFG, DATA, commit, c, store, EXACT).passed for c in challenges)

    for cheat in ("wrong-data", "fewer-steps"):
        store, commit, challenges = publish_round(tmp_path / cheat, CFG, base, results[cheat], HOST)
        verdicts = [verify_challenge(CFG, DATA, commit, c, store, TOLERANT) for c in challenges]
        assert not all(v.passed for v in verdicts), cheat

    # Rank 0 sends the carried moments with the start: the round replays in one process.
    carried = two.checkpoints[-1].state()
    one = train_round(build_model(CFG.model_config, 0), CFG, DATA, HOST, 2, params_of(base),
                      None, carried)  # fmt: skip
    assert results["carried"].checkpoints[0].digest() == one.checkpoints[0].digest()
    store, commit, challenges = publish_round(tmp_path / "c", CFG, base, results["carried"],
                                              HOST, 2, carried=carried)  # fmt: skip
    found = [verify_challenge(CFG, DATA, commit, c, store, TOLERANT) for c in challenges]
    assert all(v.passed for v in found), [v.reason for v in found]


def _nccl_rank(rank: int, address: str, out: Path, base_state: dict) -> None:
    set_deterministic(1)
    parallel = DataParallel.join(rank, 1, address, "nccl")
    model = build_model(CFG.model_config, 0).to(parallel.device)
    try:
        results = {}
        for name in ("honest", "fewer-steps"):
            job = RoundJob(model, CFG, DATA, HOST, 1, params_of(base_state), None,
                           parallel=parallel)  # fmt: skip
            results[name] = behavior(name).train(job)
        parallel.start_round(None)
        (out / "results.pkl").write_bytes(pickle.dumps(results))
    finally:
        parallel.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_nccl_rank_on_a_gpu_trains_rounds_a_cpu_verifier_judges(tmp_path, base):
    """NCCL collectives run on the rank's GPU (checkpoint 0 broadcast there too); a CPU
    verifier replays the GPU's round within tolerance and catches its cheat."""
    address = f"127.0.0.1:{free_port()}"
    mp.start_processes(_nccl_rank, args=(address, tmp_path, base), nprocs=1, start_method="spawn")
    results = pickle.loads((tmp_path / "results.pkl").read_bytes())
    store, commit, challenges = publish_round(tmp_path / "h", CFG, base, results["honest"], HOST)
    found = [verify_challenge(CFG, DATA, commit, c, store, TOLERANT) for c in challenges]
    assert all(v.passed for v in found), [(v.reason, v.distance) for v in found]
    store, commit, challenges = publish_round(tmp_path / "c", CFG, base, results["fewer-steps"],
                                              HOST)  # fmt: skip
    verdicts = [verify_challenge(CFG, DATA, commit, c, store, TOLERANT) for c in challenges]
    assert not all(v.passed for v in verdicts)

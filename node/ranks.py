"""A host's extra ranks: with ``--nproc-per-node N`` the node (rank 0) spawns N - 1 local
worker processes that train every round's steps with it, data-parallel
(:mod:`dilochain.training.distributed`: gloo on CPUs, NCCL with one GPU a rank), and ends them
when it stops. Only rank 0 checkpoints, publishes and talks to the chain."""

from __future__ import annotations

import multiprocessing
import socket
from pathlib import Path

import torch

from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.training.dataset import Dataset
from dilochain.training.distributed import DataParallel
from dilochain.training.model import build_model
from dilochain.training.round_work import serve_rounds
from dilochain.training.train_step import set_deterministic


def _backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def _device(kind: str, rank: int) -> torch.device:
    return torch.device(f"cuda:{rank}") if kind == "cuda" else torch.device("cpu")


def _worker(
    rank: int, world: int, address: str, run: bytes, data_root: str, device: str, threads: int
) -> None:
    set_deterministic(threads)
    rc = RunConfig.FromString(run)
    model = build_model(rc.model_config, rc.seed).to(_device(device, rank))
    data = Dataset(Path(data_root), rc.data_manifest_hash, rc.tokenizer_hash)
    parallel = DataParallel.join(rank, world, address, _backend(device))
    try:
        serve_rounds(model, data, parallel)
    finally:
        parallel.close()


class HostRanks:
    """Rank 0's handle on the host's other ranks."""

    def __init__(self, world: int, rc: RunConfig, data: Dataset, device: str, threads: int):
        with socket.socket() as probe:  # a free loopback port for the process group
            probe.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{probe.getsockname()[1]}"
        context = multiprocessing.get_context("spawn")
        run = rc.SerializeToString()
        self.workers = []
        for rank in range(1, world):
            args = (rank, world, address, run, str(data.root), device, threads)
            self.workers.append(context.Process(target=_worker, args=args, daemon=True,
                                                name=f"dilochain-rank-{rank}"))  # fmt: skip
        for worker in self.workers:
            worker.start()
        self._group = (world, address, _backend(device))
        self._parallel: DataParallel | None = None

    @property
    def parallel(self) -> DataParallel:
        """Rank 0's place in the group, joined on first use (the workers start meanwhile, so
        registering with the chain does not wait for them)."""
        if self._parallel is None:
            world, address, backend = self._group
            self._parallel = DataParallel.join(0, world, address, backend)
        return self._parallel

    def close(self) -> None:
        """End the workers' round loop, leave the group, and reap them."""
        try:
            if self._parallel is not None:
                self._parallel.start_round(None)
                self._parallel.close()
        finally:
            for worker in self.workers:
                worker.join(30 if self._parallel is not None else 0)
                if worker.is_alive():
                    worker.terminate()

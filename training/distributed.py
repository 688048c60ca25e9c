"""Data parallelism inside one host: N local processes (ranks) train the same inner steps on
slices of each step's batch and average their gradients with ``torch.distributed`` (gloo on
CPUs, NCCL on GPUs), so every rank holds the same parameters and AdamW state after each step.

Rank 0 is the host: it alone checkpoints, compresses, publishes and talks to the chain; the
other ranks run :func:`serve_rounds`, one round per :meth:`DataParallel.start_round` that rank 0
broadcasts. Checkpoints and pseudo-gradients are the same canonical tensors whatever N is (every
rank's state is identical; rank 0's is the one written). A verifier replays a segment with one
process on the whole batch: the same mean gradient, summed in another order, so replays of an
N-process host agree within tolerance, not bit for bit (docs/DESIGN.md).
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig

TIMEOUT = datetime.timedelta(minutes=10)  # a rank that never answers fails the round, not hangs


@dataclass(frozen=True)
class DataParallel:
    """This process's place among the host's ranks."""

    rank: int
    world: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # collectives

    @classmethod
    def join(cls, rank: int, world: int, address: str, backend: str = "gloo") -> DataParallel:
        """Join the host's process group at ``address`` (``host:port`` of rank 0). NCCL runs
        collectives on the rank's GPU (``cuda:rank``), gloo on the CPU."""
        device = torch.device("cpu")
        if backend == "nccl":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)  # broadcast_object_list stages objects there
        dist.init_process_group(backend, init_method=f"tcp://{address}", rank=rank,
                                world_size=world, timeout=TIMEOUT)  # fmt: skip
        return cls(rank, world, device)

    def rows(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's equal slice of a step's batch."""
        if batch.shape[0] % self.world:
            raise ValueError(f"batch size {batch.shape[0]} is not divisible by {self.world} ranks")
        per = batch.shape[0] // self.world
        return batch[self.rank * per : (self.rank + 1) * per]

    def average(self, tensors: list[torch.Tensor]) -> None:
        """Replace each tensor by its mean over the ranks (one flat all-reduce, in place)."""
        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()

    def start_round(
        self, cfg: RunConfig | None, host: str = "", round_: int = 0,
        first: dict[str, torch.Tensor] | None = None, shards: tuple[int, ...] = (),
    ) -> tuple[RunConfig, str, int, dict[str, torch.Tensor], tuple[int, ...]] | None:  # fmt: skip
        """Rank 0 sends a round (its config, host identity, round, checkpoint 0 and data shards;
        a None config ends the workers); the other ranks receive it. Returns the round (None:
        end)."""
        header: list[object] = [None]
        if cfg is not None and first is not None:
            layout = [(n, tuple(first[n].shape)) for n in sorted(first)
                      if first[n].is_floating_point()]  # fmt: skip
            scalars = {n: int(t) for n, t in first.items() if not t.is_floating_point()}
            header = [(cfg.SerializeToString(), host, round_, layout, scalars, shards)]
        dist.broadcast_object_list(header, src=0)
        if header[0] is None:
            return None
        raw, host, round_, layout, scalars, shards = header[0]
        if first is not None:  # rank 0: send, and keep its own tensors
            flat = torch.cat([first[n].detach().reshape(-1).float() for n, _ in layout])
            dist.broadcast(flat.to(self.device), src=0)
            return cfg, host, round_, first, shards
        flat = torch.empty(sum(math.prod(shape) for _, shape in layout), device=self.device)
        dist.broadcast(flat, src=0)
        flat = flat.cpu()
        tensors = {n: torch.tensor(v, dtype=torch.int64) for n, v in scalars.items()}
        offset = 0
        for name, shape in layout:
            size = math.prod(shape)
            tensors[name] = flat[offset : offset + size].view(shape).clone()
            offset += size
        return RunConfig.FromString(raw), host, round_, tensors, shards

    def close(self) -> None:
        """Leave the process group."""
        dist.destroy_process_group()

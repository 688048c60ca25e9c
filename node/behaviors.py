"""How a host behaves in a round: the :class:`Behavior` protocol and its honest default.

The host program only ever calls a behaviour's ``train`` and ``reveal``; every dishonest
behaviour lives in :mod:`dilochain.node.cheats`, for the tests, benchmarks and the devnet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.training.checkpoint_writer import Sink
from dilochain.training.dataset import Dataset
from dilochain.training.distributed import DataParallel
from dilochain.training.model import CausalLM
from dilochain.training.round_work import Progress, RoundResult, train_round


@dataclass
class RoundJob:
    """Everything one round's training needs."""

    model: CausalLM
    cfg: RunConfig
    data: Dataset
    host: str
    round: int
    start: dict[str, torch.Tensor]  # the parameters the round starts from
    residual: dict[str, torch.Tensor] | None  # the one the host's last committed round left
    # That round's final checkpoint, whose AdamW moments this round continues from (runs with
    # carry_inner_state; None: zero moments).
    carried: dict[str, torch.Tensor] | None = None
    progress: Progress | None = None
    # Another host's pseudo-gradient of this round once one is committed (None if none comes
    # in time); only a copying cheat calls it.
    peer_pseudo_grad: Callable[[], bytes | None] = lambda: None
    sink: Sink | None = None  # where checkpoints go as they are ready (the artifact store)
    parallel: DataParallel | None = None  # the host's other ranks, when it has several
    roster: Sequence[str] = ()  # the round's hosts, as the chain drew them (shard assignment)

    def train(self, cfg: RunConfig | None = None, host: str | None = None) -> RoundResult:
        """The honest round (optionally under another config or host identity)."""
        return train_round(self.model, cfg or self.cfg, self.data, host or self.host,
                           self.round, self.start, self.residual, self.carried, self.progress,
                           self.sink, self.parallel, self.roster)  # fmt: skip


class Behavior(Protocol):
    """What a host does with a round and with a challenge."""

    name: str

    def train(self, job: RoundJob) -> RoundResult:
        """The round the host commits."""
        ...

    def reveal(self, end_hash: bytes) -> bytes | None:
        """The end-checkpoint hash revealed for a challenged segment (None: withhold)."""
        ...


class Honest:
    """Trains as specified and reveals what it committed."""

    name = "honest"

    def train(self, job: RoundJob) -> RoundResult:
        """The honest round."""
        return job.train()

    def reveal(self, end_hash: bytes) -> bytes | None:
        """The committed hash."""
        return end_hash

"""Sizing the devnet's rounds to the machine it runs on: a run's inner steps are fixed when it is
created, so the devnet measures the inner steps of the run's model here first, as fast as they go
with every training host stepping at once on this machine's cores, and gives each round as many
steps as fill its commit window.

An overlapped run's host trains round after round, held by the chain to one round a window, so
what it spends in inner steps is min(steps' seconds / window's seconds, 1): steps too few leave
it idle, steps too many make it skip rounds. The window is fixed (the devnet's blocks); the
steps follow the measurement."""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from dilochain.metrics_http import scrape

SEGMENTS = 4  # checkpoint segments a round: what a verifier samples from
MIN_INTERVAL = 2  # a segment's fingerprint is taken at its middle step
# The share of a window that steps fill at the measured pace; a host's lead in an overlapped
# run (its window less the verification blocks) absorbs a round that runs over. At 0.95 one
# round in ten overran on 2 shared cores (the pace measured differs ±10% between runs).
FILL = 0.9
WARMUP_STEPS = 5


def binomial_quantile(trials: int, p: float, q: float) -> int:
    """The least k with P(X <= k) >= ``q`` for X ~ Binomial(``trials``, ``p``)."""
    total = 0.0
    for k in range(trials + 1):
        total += math.comb(trials, k) * p**k * (1 - p) ** (trials - k)
        if total >= q:
            return k
    return trials


def shared_step_seconds(
    cfg, data: Path, processes: int, seconds: float = 3.0, niceness: int = 0
) -> float:
    """Mean seconds of an inner step of the run ``cfg`` on ``data`` while ``processes``
    processes (at ``niceness``, one torch thread each, as hosts) step at once for ``seconds``.
    Measured rather than derived from a step alone: contention for caches and memory costs
    more than the share of cores (4 steppers on 2 cores took 2.6 times a step alone, not 2)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, paces = ctx.Barrier(processes), ctx.Queue()
    args = (cfg.SerializeToString(), str(data), barrier, seconds, niceness, paces)
    workers = [ctx.Process(target=_step_for, args=args, daemon=True) for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        found: list[float] = []
        while len(found) < processes:
            try:
                found.append(paces.get(timeout=1))
            except queue.Empty:
                if any(w.exitcode not in (None, 0) for w in workers):
                    raise RuntimeError("a process timing inner steps failed") from None
        return statistics.fmean(found)
    finally:
        for worker in workers:
            worker.join(5)
            if worker.is_alive():
                worker.kill()


def _step_for(cfg_bytes: bytes, data: str, barrier, seconds: float, niceness: int, paces) -> None:
    """A worker of :func:`shared_step_seconds`: ready, wait for the others, step for
    ``seconds``, put its seconds a step."""
    import torch

    from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
    from dilochain.training.dataset import Dataset
    from dilochain.training.train_step import timed_steps

    os.nice(niceness)
    torch.set_num_threads(1)
    cfg = RunConfig.FromString(cfg_bytes)
    steps = timed_steps(cfg, Dataset(Path(data), cfg.data_manifest_hash, cfg.tokenizer_hash))
    for _ in range(WARMUP_STEPS):
        next(steps)
    barrier.wait(timeout=120)
    began, done = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
        next(steps)
        done += 1
    paces.put((time.perf_counter() - began) / done)


@dataclass(frozen=True)
class Sizing:
    """A round's inner steps and checkpoint interval, and what they came from."""

    inner_steps: int
    checkpoint_interval: int
    replay_seconds: float  # one step a verifier replays
    shared_seconds: float  # one inner step of a host, with everything that shares the cores
    window_seconds: float

    def describe(self, hosts: int, cores: int) -> str:
        """One line for the operator."""
        return (f"{self.inner_steps} inner steps a round (~{1000 * self.shared_seconds:.1f} ms "
                f"a step with {hosts} hosts training on {cores} cores, "
                f"{1000 * self.replay_seconds:.1f} ms a replayed one; "
                f"{self.window_seconds:.1f} s windows)")  # fmt: skip


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def size_rounds(
    replay_seconds: float,
    shared_seconds: float,
    window_seconds: float,
    replay: tuple[float, float] = (math.inf, 1.0),
    fill: float = FILL,
) -> Sizing:
    """Inner steps (a multiple of :data:`SEGMENTS`) that fill ``fill`` of a window at
    ``shared_seconds`` a step (a host's pace with everything else that runs beside it); and
    that a verifier replays in time at ``replay_seconds`` a step: ``replay`` is (seconds it
    has, the round's steps it replays per step a host trains)."""
    seconds, replays = replay
    steps = min(window_seconds / shared_seconds, seconds / (replays * replay_seconds))
    interval = max(MIN_INTERVAL, int(fill * steps) // SEGMENTS)
    return Sizing(SEGMENTS * interval, interval, replay_seconds, shared_seconds, window_seconds)


TRAINING = "dilochain_node_committed_training_seconds_total"


@dataclass
class Utilisation:
    """Each host's share of wall-clock in inner steps of rounds it committed, from the block
    ``first`` to the block ``last`` (round 1's start to the last round's, as
    ``bench.host_utilisation`` measures), read from its
    ``dilochain_node_committed_training_seconds_total`` (a round's seconds are counted once its
    commit lands: between round 1's start and the last round's, rounds 1 to R-2 land);
    :meth:`tick` samples it."""

    urls: dict[str, str]  # host name -> its metrics URL
    first: int
    last: int
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def tick(self, height: int) -> None:
        """Sample every host once the chain reaches ``first``, and again at ``last``; a first
        sample not taken before ``last`` measures nothing, so none is taken."""
        due = [self.first, self.last][len(self.samples) :]
        late = not self.samples and height >= self.last
        if due and height >= due[0] and not late:
            self.samples.append((time.monotonic(), self._read()))

    def _read(self) -> dict[str, float]:
        read = {}
        for name, url in self.urls.items():
            try:
                read[name] = scrape(url, timeout=2)[TRAINING]
            except (OSError, KeyError):  # a host that is down, or has not trained yet
                continue
        return read

    def shares(self) -> dict[str, float]:
        """Hosts measured at both ends (and not restarted between): their share."""
        if len(self.samples) < 2:
            return {}
        (t0, a), (t1, b) = self.samples
        return {name: (b[name] - a[name]) / (t1 - t0)
                for name in a if name in b and b[name] >= a[name]}  # fmt: skip

"""Sizing the devnet's rounds to the machine it runs on: a run's inner steps are fixed when it is
created, so the devnet measures an inner step of the run's model here first and gives each round
as many steps as fill its commit window, with every host sharing this machine's cores.

An overlapped run's host trains round after round, held by the chain to one round a window, so
what it spends in inner steps is min(steps' seconds / window's seconds, 1): steps too few leave
it idle, steps too many make it skip rounds. The window is fixed (the devnet's blocks); the
steps follow the measurement."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

from dilochain.metrics_http import scrape

SEGMENTS = 4  # checkpoint segments a round: what a verifier samples from
MIN_INTERVAL = 2  # a segment's fingerprint is taken at its middle step
# The share of a window that steps fill at the estimated pace; a host's lead in an overlapped
# run (its window less the verification blocks) absorbs a round that runs over.
FILL = 0.95


@dataclass(frozen=True)
class Sizing:
    """A round's inner steps and checkpoint interval, and what they came from."""

    inner_steps: int
    checkpoint_interval: int
    step_seconds: float  # one inner step alone on a core
    shared_seconds: float  # one inner step of a host sharing the cores
    window_seconds: float

    def describe(self, hosts: int, cores: int) -> str:
        """One line for the operator."""
        return (f"{self.inner_steps} inner steps a round ({1000 * self.step_seconds:.1f} ms a "
                f"step alone, ~{1000 * self.shared_seconds:.1f} ms with {hosts} hosts on {cores} "
                f"cores; {self.window_seconds:.1f} s windows)")  # fmt: skip


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def size_rounds(
    step_seconds: float,
    window_seconds: float,
    processes: float,
    cores: int,
    replay: tuple[float, float] = (math.inf, 1.0),
    fill: float = FILL,
) -> Sizing:
    """Inner steps (a multiple of :data:`SEGMENTS`) that fill ``fill`` of a window when
    ``processes`` busy processes share ``cores`` cores, each host's step ``step_seconds`` alone;
    and that a verifier replays in time: ``replay`` is (seconds it has, the round's steps it
    replays per step a host trains), at ``step_seconds`` a step on a core of its own."""
    shared = step_seconds * max(1.0, processes / cores)
    replay_seconds, replays = replay
    steps = min(window_seconds / shared, replay_seconds / (replays * step_seconds))
    interval = max(MIN_INTERVAL, int(fill * steps) // SEGMENTS)
    return Sizing(SEGMENTS * interval, interval, step_seconds, shared, window_seconds)


TRAINING = "dilochain_node_training_seconds_total"


@dataclass
class Utilisation:
    """Each host's share of wall-clock in inner steps from the block ``first`` to the block
    ``last`` (round 1's start to the last round's, as ``bench.host_utilisation`` measures),
    read from its ``dilochain_node_training_seconds_total``; :meth:`tick` samples it."""

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

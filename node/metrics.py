"""The host node's Prometheus metrics (served by ``node start --metrics-address``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from dilochain.artifacts.blob_service import FETCHED_BYTES, SERVED_BYTES
from dilochain.auto_claim import REWARDS_PAID
from dilochain.metrics_http import role_registry

REGISTRY = role_registry("node", SERVED_BYTES, FETCHED_BYTES, REWARDS_PAID)
INFO = Gauge("dilochain_node_info", "The run this node trains and the address it signs with",
             ("run_id", "address"), registry=REGISTRY)  # fmt: skip
INNER_STEPS = Counter("dilochain_node_inner_steps", "Inner steps trained", registry=REGISTRY)
TOKENS = Counter("dilochain_node_tokens", "Tokens trained on (rate() is throughput)",
                 registry=REGISTRY)  # fmt: skip
LOSS = Gauge("dilochain_node_loss", "Training loss of the last inner step", registry=REGISTRY)
EVAL_LOSS = Gauge("dilochain_node_eval_loss", "Held-out loss of the newest global state",
                  registry=REGISTRY)  # fmt: skip
ROUND = Gauge("dilochain_node_round", "The round the node trains or waits in", registry=REGISTRY)
ROUNDS_COMMITTED = Counter("dilochain_node_rounds_committed", "Rounds committed on chain",
                           registry=REGISTRY)  # fmt: skip
PROOF_SECONDS = Counter(
    "dilochain_node_proof_work_seconds",
    "Seconds spent encoding, hashing and storing checkpoints and pseudo-gradients",
    registry=REGISTRY,
)
COMMIT_LATENCY = Histogram(
    "dilochain_node_commit_latency_seconds",
    "From broadcasting a round's commit to its block",
    buckets=(0.25, 0.5, 1, 2, 4, 8, 16, 32),
    registry=REGISTRY,
)
BYTES_PUBLISHED = Counter(
    "dilochain_node_published_bytes",
    "Bytes of checkpoints, pseudo-gradients and residuals",
    registry=REGISTRY,
)
TRAINING_SECONDS = Counter("dilochain_node_training_seconds", "Seconds in inner steps",
                           registry=REGISTRY)  # fmt: skip
COMMITTED_TRAINING_SECONDS = Counter(
    "dilochain_node_committed_training_seconds",
    "Seconds in inner steps of rounds whose commit landed (training that counted)",
    registry=REGISTRY,
)
UTILISATION = Gauge(
    "dilochain_node_utilisation_ratio",
    "Seconds in inner steps / wall-clock seconds since start",
    registry=REGISTRY,
)
COLLATERAL = Gauge("dilochain_node_collateral_udlc", "This host's bonded collateral",
                   registry=REGISTRY)  # fmt: skip
SLASHED = Gauge("dilochain_node_slashed_udlc", "Collateral slashed from this host, in all",
                registry=REGISTRY)  # fmt: skip

Progress = Callable[[int, float, float, int], None]  # (step, loss, tokens/s, round)


class StepMeter:
    """A training-progress callback that updates the step metrics, then calls ``inner``
    (the terminal's progress bar, if any)."""

    def __init__(self, tokens_per_step: int, inner: Progress | None = None):
        self.tokens_per_step = tokens_per_step
        self.inner = inner
        self.started = time.monotonic()
        self.training_seconds = 0.0
        self.round_seconds = 0.0  # in inner steps, of the round in progress (or last trained)
        UTILISATION.set_function(self.utilisation)

    def utilisation(self) -> float:
        """Time in inner steps over wall-clock time since the node started."""
        return self.training_seconds / max(1e-9, time.monotonic() - self.started)

    def __call__(self, step: int, loss: float, rate: float, round_: int = 0) -> None:
        if step == 1:
            self.round_seconds = 0.0
        # ``rate`` is tokens since the round's first step over the seconds since then.
        elapsed = step * self.tokens_per_step / rate if rate > 0 else self.round_seconds
        self.training_seconds += elapsed - self.round_seconds
        TRAINING_SECONDS.inc(max(0.0, elapsed - self.round_seconds))
        self.round_seconds = elapsed
        INNER_STEPS.inc()
        LOSS.set(loss)
        TOKENS.inc(self.tokens_per_step)
        if self.inner is not None:
            self.inner(step, loss, rate, round_)

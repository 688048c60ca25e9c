"""The verifier's Prometheus metrics (served by ``verifier run --metrics-address``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from dilochain.artifacts.blob_service import FETCHED_BYTES, SERVED_BYTES
from dilochain.auto_claim import REWARDS_PAID
from dilochain.metrics_http import role_registry

REGISTRY = role_registry("verifier", SERVED_BYTES, FETCHED_BYTES, REWARDS_PAID)
INFO = Gauge("dilochain_verifier_info", "The address this verifier signs with", ("address",),
             registry=REGISTRY)  # fmt: skip
JOBS_RUN = Counter("dilochain_verifier_jobs", "Challenged segments replayed to a verdict",
                   registry=REGISTRY)  # fmt: skip
JOBS_FAILED = Counter(
    "dilochain_verifier_jobs_failed",
    "Replays that could not finish (this verifier's data)",
    registry=REGISTRY,
)
REPLAY_SECONDS = Histogram(
    "dilochain_verifier_replay_seconds",
    "Wall-clock of one replay",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128),
    registry=REGISTRY,
)
VERDICTS = Counter(
    "dilochain_verifier_verdicts",
    "Sealed verdicts by outcome",
    labelnames=("outcome",),
    registry=REGISTRY,
)
SCREENS = Counter("dilochain_verifier_screens", "Screen votes by outcome",
                  labelnames=("outcome",), registry=REGISTRY)  # fmt: skip
COLLATERAL = Gauge("dilochain_verifier_collateral_udlc", "This verifier's bonded collateral",
                   registry=REGISTRY)  # fmt: skip
SLASHED = Gauge("dilochain_verifier_slashed_udlc", "Collateral slashed from this verifier, in all",
                registry=REGISTRY)  # fmt: skip

"""The verifier's Prometheus metrics (served by ``verifier run --metrics-address``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

JOBS_RUN = Counter("dilochain_verifier_jobs", "Challenged segments replayed to a verdict")
JOBS_FAILED = Counter(
    "dilochain_verifier_jobs_failed", "Replays that could not finish (this verifier's data)"
)
REPLAY_SECONDS = Histogram(
    "dilochain_verifier_replay_seconds",
    "Wall-clock of one replay",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128),
)
VERDICTS = Counter(
    "dilochain_verifier_verdicts", "Sealed verdicts by outcome", labelnames=("outcome",)
)
SCREENS = Counter("dilochain_verifier_screens", "Screen votes by outcome", labelnames=("outcome",))

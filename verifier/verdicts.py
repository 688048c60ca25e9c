"""A verifier's finding on one challenge or screen (torch-free: its sealed-vote records read it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """A verifier's finding on one challenge."""

    passed: bool
    reason: str
    distance: float = 0.0  # of the parameters (relative L2), in tolerance mode
    moment_distance: float = 0.0  # of the furthest AdamW moment, in tolerance mode
    fingerprint: bytes = b""  # of the replay's middle state; empty when no replay ran
    # Failed on artifacts that contradict each other, which any replay of the commit finds.
    inconsistent: bool = False
    # Failed because a peer could not be reached for an artifact: worth asking again while
    # time allows.
    unavailable: bool = False

    @property
    def evidence_hash(self) -> bytes:
        """sha256 of the report, submitted with the vote."""
        return hashlib.sha256(f"{self.passed}|{self.reason}|{self.distance:.3e}".encode()).digest()

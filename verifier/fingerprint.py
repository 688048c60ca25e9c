"""A replay's fingerprint: the inner state at a segment's middle step (``protocol/verdict.py``),
which only re-executing the segment computes.

Exact mode hashes the whole state canonically. Tolerance mode projects its parameters on
``PROJECTIONS`` pseudo-random ±1 vectors, drawn from the challenge's identity, and divides by a
quantum of ``tolerance * ‖θ_start‖``: honest replays differ by far less than the tolerance,
so their projections land within one quantum; a guess (the revealed end state, the start, an
interpolation) is off by at least a segment's movement, which tolerance mode already requires
to be far larger than the tolerance.
"""

from __future__ import annotations

import hashlib

import torch

from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
from dilochain.protocol.verdict import PROJECTIONS, encode_projections
from dilochain.training.diloco import params_of
from dilochain.training.tensor_codec import state_hash


def _projection_seed(challenge: Challenge) -> int:
    key = f"dilochain-fingerprint/{challenge.run_id}/{challenge.round}/{challenge.host}/"
    digest = hashlib.sha256(f"{key}{challenge.segment}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # torch seeds are below 2**63


def projections(params: dict[str, torch.Tensor], seed: int) -> list[float]:
    """``PROJECTIONS`` dot products of the parameters (names in order) with ±1 vectors drawn
    from ``seed``, in float64."""
    generator = torch.Generator().manual_seed(seed)
    totals = [0.0] * PROJECTIONS
    for name in sorted(params):
        flat = params[name].detach().to("cpu", torch.float64).flatten()
        for i in range(PROJECTIONS):
            signs = torch.randint(0, 2, flat.shape, generator=generator, dtype=torch.int8)
            totals[i] += float(torch.where(signs.bool(), flat, -flat).sum())
    return totals


def fingerprint(
    state: dict[str, torch.Tensor], start: dict[str, torch.Tensor], challenge: Challenge,
    mode: str, tolerance: float,
) -> bytes:  # fmt: skip
    """The fingerprint of inner checkpoint ``state`` in the segment of ``challenge`` whose
    revealed start checkpoint is ``start``."""
    if mode == "exact":
        return state_hash(state)
    start_params = params_of(start)
    norm = sum(float((t.double() ** 2).sum()) for t in start_params.values()) ** 0.5
    quantum = tolerance * norm or tolerance
    values = projections(params_of(state), _projection_seed(challenge))
    return encode_projections([round(v / quantum) for v in values])

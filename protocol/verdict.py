"""Sealed verdicts, shared by the chain (which checks openings and compares fingerprints) and
verifiers (which seal and open): a vote is a commitment to (passed, replay fingerprint) under the
voter's address, opened once votes close, so it can be neither copied nor cast blind.

A fingerprint is what only a replay of the segment knows: the inner state at the segment's
middle step, which no party publishes. In exact mode it is that state's canonical hash (32
bytes); in tolerance mode it is ``PROJECTIONS`` signed 64-bit integers, the state's parameters
projected on pseudo-random ±1 vectors and divided by a quantum (``verifier/fingerprint.py``),
and two fingerprints agree when every component differs by at most one. Empty: no replay ran
(the host's artifacts were unusable).
"""

from __future__ import annotations

import hashlib
import struct

PROJECTIONS = 16
SALT_BYTES = 32
EXACT_BYTES = 32
TOLERANCE_BYTES = 8 * PROJECTIONS
_TAG = b"dilochain-verdict/v1"


def fingerprint_step(checkpoint_interval: int) -> int:
    """The step, counted from the segment's start, whose state is fingerprinted: the middle one,
    as far from the published start as from the published end."""
    return checkpoint_interval // 2


def commitment(
    verifier: str, run_id: str, round_: int, host: str, segment: int, passed: bool,
    fingerprint: bytes, salt: bytes,
) -> bytes:  # fmt: skip
    """sha256 over the voter, the challenge and the vote. The voter's address binds it: copied
    from another verifier it opens to nothing."""
    fields = [_TAG, verifier.encode(), run_id.encode(), b"%d" % round_, host.encode(),
              b"%d" % segment, b"1" if passed else b"0", fingerprint, salt]  # fmt: skip
    digest = hashlib.sha256()
    for field in fields:  # length-prefixed: no two votes encode alike
        digest.update(struct.pack(">I", len(field)) + field)
    return digest.digest()


def valid_length(fingerprint: bytes, mode: str) -> bool:
    """Whether a fingerprint has the size ``mode`` gives it (or is empty: no replay)."""
    return len(fingerprint) in (0, EXACT_BYTES if mode == "exact" else TOLERANCE_BYTES)


def encode_projections(values: list[int]) -> bytes:
    """Tolerance-mode fingerprint bytes of ``PROJECTIONS`` quantised projections."""
    if len(values) != PROJECTIONS:
        raise ValueError(f"a fingerprint has {PROJECTIONS} projections, not {len(values)}")
    if not all(-(2**63) <= v < 2**63 for v in values):  # a state far past its start's scale
        raise ValueError("a projection of the replayed state does not fit 64 bits")
    return struct.pack(f">{PROJECTIONS}q", *values)


def decode_projections(fingerprint: bytes) -> tuple[int, ...]:
    """The projections of a tolerance-mode fingerprint."""
    return struct.unpack(f">{PROJECTIONS}q", fingerprint)


def agree(a: bytes, b: bytes, mode: str) -> bool:
    """Whether two fingerprints show the same replay: equal in exact mode (and when either is
    empty); in tolerance mode within one quantum in every projection."""
    if mode == "exact" or not a or not b or len(a) != len(b):
        return a == b
    pairs = zip(decode_projections(a), decode_projections(b), strict=True)
    return all(abs(x - y) <= 1 for x, y in pairs)

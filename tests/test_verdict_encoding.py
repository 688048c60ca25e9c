"""Sealed verdicts' encoding (protocol/verdict.py): commitments bind every field, and
fingerprints agree exactly or within one quantum per projection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dilochain.protocol import verdict as sealing

projection = st.integers(min_value=-(2**62), max_value=2**62)
projections = st.lists(projection, min_size=sealing.PROJECTIONS, max_size=sealing.PROJECTIONS)
VOTE = ("dilo1v", "run", 3, "dilo1h", 1, True, b"\x01" * 32, b"\x02" * 32)


@given(st.integers(min_value=0, max_value=len(VOTE) - 1), st.data())
def test_a_commitment_binds_every_field(index, data):
    changed = list(VOTE)
    value = VOTE[index]
    if isinstance(value, bool):
        changed[index] = not value
    elif isinstance(value, int):
        changed[index] = data.draw(st.integers(min_value=0).filter(lambda v: v != value))
    elif isinstance(value, bytes):
        changed[index] = data.draw(st.binary(max_size=40).filter(lambda v: v != value))
    else:
        changed[index] = data.draw(st.text(max_size=20).filter(lambda v: v != value))
    assert sealing.commitment(*changed) != sealing.commitment(*VOTE)


def test_fields_cannot_trade_bytes():
    # Length prefixes: moving a byte from one field to the next changes the commitment.
    a = sealing.commitment("dilo1v", "ru", 3, "ndilo1h", 1, True, b"", b"")
    b = sealing.commitment("dilo1v", "run", 3, "dilo1h", 1, True, b"", b"")
    assert a != b


@given(projections)
def test_projections_round_trip_and_agree_with_themselves(values):
    encoded = sealing.encode_projections(values)
    assert len(encoded) == sealing.TOLERANCE_BYTES
    assert sealing.valid_length(encoded, "tolerance") and not sealing.valid_length(encoded, "exact")
    assert list(sealing.decode_projections(encoded)) == values
    assert sealing.agree(encoded, encoded, "tolerance")


@given(projections, st.lists(st.sampled_from([-1, 0, 1]), min_size=16, max_size=16))
def test_tolerance_allows_one_quantum_per_projection(values, shifts):
    a = sealing.encode_projections(values)
    b = sealing.encode_projections([v + s for v, s in zip(values, shifts, strict=True)])
    assert sealing.agree(a, b, "tolerance") and sealing.agree(b, a, "tolerance")
    assert sealing.agree(a, b, "exact") == (a == b)


@given(projections, st.integers(min_value=0, max_value=15), st.sampled_from([-3, -2, 2, 3]))
def test_two_quanta_anywhere_disagree(values, where, shift):
    moved = list(values)
    moved[where] += shift
    a, b = sealing.encode_projections(values), sealing.encode_projections(moved)
    assert not sealing.agree(a, b, "tolerance")


@pytest.mark.parametrize("mode", ["exact", "tolerance"])
def test_no_replay_agrees_only_with_no_replay(mode):
    some = b"\x03" * (sealing.EXACT_BYTES if mode == "exact" else sealing.TOLERANCE_BYTES)
    assert sealing.agree(b"", b"", mode)
    assert not sealing.agree(b"", some, mode) and not sealing.agree(some, b"", mode)
    assert sealing.valid_length(b"", mode) and not sealing.valid_length(some[:-1], mode)


def test_the_fingerprinted_step_is_strictly_inside_the_segment():
    for k in range(2, 200):
        assert 0 < sealing.fingerprint_step(k) < k
    with pytest.raises(ValueError):
        sealing.encode_projections([1, 2, 3])

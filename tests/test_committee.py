"""Screening committees (protocol/committee.py): who screens a commit, as the chain and every
verifier compute it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dilochain.protocol.committee import eligible, screen_committee
from dilochain.protocol.pb.poc.v1.types_pb2 import Verifier

ADDRESSES = st.lists(st.text("abcdef0123456789", min_size=4, max_size=12), min_size=1,
                     max_size=30, unique=True)  # fmt: skip


@given(ADDRESSES, st.binary(min_size=32, max_size=32), st.integers(0, 40), st.randoms())
def test_a_committee_is_a_fixed_size_subset_whatever_the_order(candidates, anchor, size, rnd):
    chosen = screen_committee(anchor, "run", 3, "host", candidates, size)
    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    assert chosen == screen_committee(anchor, "run", 3, "host", shuffled, size)
    assert chosen <= set(candidates)
    assert len(chosen) == (len(candidates) if size == 0 else min(size, len(candidates)))


def test_committees_differ_by_anchor_and_host_and_spread_the_work():
    candidates = [f"verifier-{i}" for i in range(50)]
    seats = dict.fromkeys(candidates, 0)
    for host in range(200):
        for verifier in screen_committee(b"\x01" * 32, "r", 0, f"h{host}", candidates, 5):
            seats[verifier] += 1
    assert sum(seats.values()) == 1000 and max(seats.values()) < 40  # 20 each on average
    first = screen_committee(b"\x01" * 32, "r", 0, "h", candidates, 5)
    assert first != screen_committee(b"\x02" * 32, "r", 0, "h", candidates, 5)


def test_only_verifiers_registered_before_the_window_and_not_left_by_then_are_eligible():
    registered = [Verifier(address="early", registered_height=5),
                  Verifier(address="at-start", registered_height=10),
                  Verifier(address="late", registered_height=12),
                  Verifier(address="left-before", registered_height=2, left_height=9),
                  Verifier(address="left-at-start", registered_height=2, left_height=10),
                  Verifier(address="left-after", registered_height=2, left_height=11)]  # fmt: skip
    assert eligible(registered, 10) == ["early", "left-at-start", "left-after"]

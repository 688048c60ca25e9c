"""Rendezvous shard assignment: a partition of the shards among a round's roster that moves
about 1/n of them when one host joins or leaves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.protocol.schedule import shard_assignment, shard_owners

HOSTS = st.lists(st.text("abcdef0123456789", min_size=4, max_size=12), min_size=1, max_size=12,
                 unique=True)  # fmt: skip


def assignment(seed: int, shards: int, roster: list[str]) -> dict[str, tuple[int, ...]]:
    return {h: shard_assignment(seed, shards, roster, h) for h in roster}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**63), shards=st.integers(1, 64), roster=HOSTS)
def test_owned_shards_partition_the_data_and_every_host_gets_some(seed, shards, roster):
    owners = shard_owners(seed, shards, tuple(sorted(roster)))
    found = assignment(seed, shards, roster)
    for host in roster:
        owned = tuple(s for s in range(shards) if owners[s] == host)
        # a host that wins no shard shares its own best one
        assert found[host] == owned or (not owned and len(found[host]) == 1)
    assert set().union(*found.values()) == set(range(shards))
    assert found == assignment(seed, shards, list(reversed(roster)))  # order does not matter


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**63), roster=HOSTS, joiner=st.text("ghijk", min_size=4, max_size=8))
def test_a_join_or_leave_only_moves_the_shards_of_the_one_that_came_or_went(seed, roster, joiner):
    shards = 64
    before = shard_owners(seed, shards, tuple(sorted(roster)))
    after = shard_owners(seed, shards, tuple(sorted([*roster, joiner])))
    assert all(a in (b, joiner) for a, b in zip(after, before, strict=True))
    if len(roster) > 1:
        gone = shard_owners(seed, shards, tuple(sorted(roster[1:])))
        assert all(g == b for g, b in zip(gone, before, strict=True) if b != roster[0])


def test_a_join_moves_about_one_nth_of_the_shards():
    shards, roster = 1000, [f"host{i}" for i in range(9)]
    before = assignment(7, shards, roster)
    after = assignment(7, shards, [*roster, "joiner"])
    moved = sum(len(set(before[h]) - set(after[h])) for h in roster)
    assert moved == len(after["joiner"])
    assert 0.06 * shards < moved < 0.14 * shards  # 1/10 of them, give or take
    sizes = [len(after[h]) for h in after]
    assert min(sizes) > 60 and max(sizes) < 140  # balanced


def test_a_host_outside_the_roster_is_scored_as_if_it_were_in_it():
    roster = ["a1", "b2", "c3"]
    assert shard_assignment(5, 16, roster, "d4") == shard_assignment(5, 16, [*roster, "d4"], "d4")

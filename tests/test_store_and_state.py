"""The SQLite store, the app-hash chain and the layered gas-metered caches."""

from __future__ import annotations

import itertools
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.chain.errors import TxError, codes
from dilochain.chain.state import CacheStore, GasMeter
from dilochain.chain.store import ChainStore, StoredBlock


@pytest.fixture
def store(tmp_path):
    s = ChainStore(tmp_path / "s.db")
    yield s
    s.close()


def test_commit_is_atomic_and_persistent(tmp_path):
    store = ChainStore(tmp_path / "s.db")
    block = StoredBlock(1, b"h" * 32, b"header", b"sig")
    store.commit({b"a": b"1", b"b": b"2"}, {"height": b"1"}, block)
    with pytest.raises(sqlite3.IntegrityError):  # a duplicate block row aborts the commit
        store.commit({b"a": b"changed"}, {"height": b"2"}, block)
    store.close()
    reopened = ChainStore(tmp_path / "s.db")
    assert reopened.get(b"a") == b"1" and reopened.height == 1
    assert reopened.block(1) == block
    reopened.close()


def test_iterate_prefix_bounds(store):
    store.commit({b"ab": b"1", b"ab\xff": b"2", b"ac": b"3", b"b": b"4"}, {})
    assert [k for k, _ in store.iterate(b"ab")] == [b"ab", b"ab\xff"]
    assert [k for k, _ in store.iterate(b"\xff")] == []
    assert len(list(store.iterate(b""))) == 4


def test_cache_layers_read_through_and_write_down(store):
    store.commit({b"k1": b"old", b"k2": b"gone"}, {})
    block = CacheStore(store)
    tx = block.child()
    tx.set(b"k1", b"new")
    tx.delete(b"k2")
    tx.set(b"k3", b"added")
    assert block.get(b"k1") == b"old"  # not yet written down
    assert dict(tx.iterate(b"k")) == {b"k1": b"new", b"k3": b"added"}
    tx.write()
    assert block.get(b"k1") == b"new" and block.get(b"k2") is None
    assert store.get(b"k1") == b"old"  # the root is only changed by a commit


def test_gas_is_metered_once_per_access_and_bounded(store):
    meter = GasMeter(limit=10_000)
    top = CacheStore(CacheStore(store), meter).child()
    top.get(b"missing")
    assert meter.consumed == GasMeter.READ_FLAT  # nested layers do not double-charge
    with pytest.raises(TxError) as err:
        for i in range(10):
            top.set(b"key%d" % i, b"v")
    assert err.value.code == codes.OUT_OF_GAS
    assert "out of gas" in err.value.log


def test_an_empty_value_is_never_written(store):
    """ICS-23 proves no empty value, nor the absence of a key whose neighbour holds one (a
    roster of no hosts, stored empty, once broke the proofs of absent keys beside it)."""
    with pytest.raises(ValueError, match="empty value"):
        CacheStore(store).set(b"roster/r/1", b"")


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.binary(min_size=1, max_size=4), st.binary(min_size=1, max_size=4),
                    max_size=10),
    st.dictionaries(st.binary(min_size=1, max_size=4),
                    st.none() | st.binary(min_size=1, max_size=4)),
)  # fmt: skip
def test_cache_view_equals_applied_writes(base, writes):
    class Dict:
        def get(self, key):
            return base.get(key)

        def iterate(self, prefix, start=b"", values=True):
            return iter(sorted((k, v if values else b"") for k, v in base.items()
                               if k.startswith(prefix) and k >= start))  # fmt: skip

    cache = CacheStore(Dict())
    for key, value in writes.items():
        if value is None:
            cache.delete(key)
        else:
            cache.set(key, value)
    expected = {**base, **writes}
    expected = {k: v for k, v in expected.items() if v is not None}
    assert dict(cache.iterate(b"")) == expected
    assert all(cache.get(k) == v for k, v in expected.items())


def _eager(base, layers, prefix, start):
    """Iteration as the store did it before it was lazy: every row of the range read, each
    layer's writes applied bottom to top, the result sorted."""
    low = max(prefix, start)
    merged = {k: v for k, v in base.items() if k.startswith(prefix) and k >= low}
    for writes in layers:
        for key, value in writes.items():
            if key.startswith(prefix) and key >= low:
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
    return sorted(merged.items())


short_keys = st.lists(st.sampled_from([b"\x00", b"a", b"b", b"\xff"]), max_size=4).map(b"".join)
row_keys = short_keys.filter(bool)
layer_writes = st.dictionaries(row_keys, st.none() | st.binary(min_size=1, max_size=3))


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(row_keys, st.binary(min_size=1, max_size=3)),
    st.lists(layer_writes, min_size=1, max_size=3),
    short_keys, short_keys, st.integers(0, 40),
)  # fmt: skip
def test_lazy_iteration_equals_the_eager_merge(tmp_path_factory, base, layers, prefix, start,
                                               limit):  # fmt: skip
    chain = ChainStore(tmp_path_factory.mktemp("lazy") / "s.db")
    chain._FIRST_CHUNK, chain._MAX_CHUNK = 2, 3  # many chunk boundaries in a few rows
    chain.commit(base, {})
    meter = GasMeter()
    top = CacheStore(chain, meter)
    for index, writes in enumerate(layers):
        if index:
            top = top.child()
        for key, value in writes.items():
            top.set(key, value) if value is not None else top.delete(key)
    spent = meter.consumed
    expected = _eager(base, layers, prefix, start)
    assert list(chain.iterate(prefix, start)) == _eager(base, [], prefix, start)
    assert list(itertools.islice(top.iterate(prefix, start), limit)) == expected[:limit]
    assert meter.consumed - spent == GasMeter.ITER_NEXT * len(expected[:limit])
    chain.close()


def test_writes_made_while_iterating_are_not_seen(store):
    store.commit({b"q/1": b"a", b"q/3": b"c"}, {})
    cache = CacheStore(store)
    cache.set(b"q/2", b"b")
    seen = []
    for key, value in cache.iterate(b"q/"):
        seen.append((key, value))
        cache.set(b"q/25", b"new")
        cache.delete(b"q/3")
    assert seen == [(b"q/1", b"a"), (b"q/2", b"b"), (b"q/3", b"c")]
    assert [k for k, _ in cache.iterate(b"q/")] == [b"q/1", b"q/2", b"q/25"]


def test_the_read_cache_is_bounded_by_bytes_oldest_first(store):
    store.CACHE_LIMIT_BYTES = 50 * (ChainStore.CACHE_ENTRY_OVERHEAD + 18)
    store.commit({b"key%05d" % i: b"v" * 10 for i in range(200)}, {})
    assert all(store.get(b"key%05d" % i) == b"v" * 10 for i in range(200))
    assert all(store.get(b"miss%05d" % i) is None for i in range(1000))
    counted = sum(len(k) + len(v or b"") + ChainStore.CACHE_ENTRY_OVERHEAD
                  for k, v in store._cache.items())  # fmt: skip
    assert store.cached_bytes == counted <= store.CACHE_LIMIT_BYTES
    assert list(store._cache)[-1] == b"miss00999" and b"key00000" not in store._cache
    store.commit({b"miss00999": b"now here", b"key00000": b"changed"}, {})  # write-through
    assert store.get(b"miss00999") == b"now here" and store.get(b"key00000") == b"changed"
    cached = dict(store._cache)
    assert [store.peek(b"peeked%d" % i) for i in range(100)] == [None] * 100
    assert store.peek(b"key00001") == b"v" * 10
    assert store._cache == cached  # a peek adds nothing

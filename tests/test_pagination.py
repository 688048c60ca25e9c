"""List queries page as the Cosmos SDK's do: whatever a stranger adds to a list, no answer
passes gRPC's size limit, and a client that follows next_key sees every entry once."""

from __future__ import annotations

import pytest

from dilochain.chain.errors import TxError
from dilochain.chain.pagination import DEFAULT_LIMIT, MAX_LIMIT, MAX_PAGE_BYTES, page
from dilochain.chain.state import CacheStore
from dilochain.chain.store import ChainStore
from dilochain.protocol.pb.poc.v1 import query_pb2 as q


@pytest.fixture
def store(tmp_path):
    chain = ChainStore(tmp_path / "s.db")
    chain.commit({b"item/%05d" % i: b"v%d" % i for i in range(2500)} | {b"other/1": b"x"}, {})
    view = CacheStore(chain)
    view.set(b"item/99999", b"pending")  # a layer's own writes page with the rest
    yield view
    chain.close()


def test_following_next_key_sees_every_entry_once_in_order(store):
    seen, key, pages = [], b"", 0
    while True:
        found, answer = page(store, b"item/", q.PageRequest(key=key), bytes)
        seen += found
        pages += 1
        assert len(found) <= DEFAULT_LIMIT
        key = answer.next_key
        if not key:
            break
    assert seen == [b"v%d" % i for i in range(2500)] + [b"pending"] and pages == 26


def test_offset_limit_and_total(store):
    found, answer = page(store, b"item/", q.PageRequest(offset=2490, limit=5, count_total=True),
                         bytes)  # fmt: skip
    assert found == [b"v%d" % i for i in range(2490, 2495)] and answer.total == 2501
    assert answer.next_key == b"02495"
    many, _ = page(store, b"item/", q.PageRequest(limit=10**9), bytes)
    assert len(many) == MAX_LIMIT
    for bad in (q.PageRequest(reverse=True), q.PageRequest(key=b"00001", offset=3)):
        with pytest.raises(TxError):
            page(store, b"item/", bad, bytes)


def test_a_page_stops_before_it_is_too_big(tmp_path):
    chain = ChainStore(tmp_path / "big.db")
    big = b"x" * (300 << 10)  # 16 KiB configs were not enough: entries of 300 KiB
    chain.commit({b"run/%03d" % i: big for i in range(40)}, {})
    found, answer = page(CacheStore(chain), b"run/", q.PageRequest(limit=1000), bytes)
    assert 0 < len(found) * len(big) <= MAX_PAGE_BYTES and answer.next_key
    chain.close()


def test_a_page_reads_about_its_size_from_the_database(tmp_path, monkeypatch):
    """Finished runs stay listed for good: a page of one must not read all of them."""
    chain = ChainStore(tmp_path / "runs.db")
    chain.commit({b"run/%05d" % i: b"r%d" % i for i in range(5000)}, {})
    read, chunk = [], chain._read_chunk

    def counted(*args):
        rows = chunk(*args)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(chain, "_read_chunk", counted)
    found, answer = page(CacheStore(chain), b"run/", q.PageRequest(limit=1), bytes)
    assert (found, answer.next_key, read) == ([b"r0"], b"00001", [ChainStore._FIRST_CHUNK])
    read.clear()
    found, _ = page(CacheStore(chain), b"run/", q.PageRequest(key=b"04000", limit=100), bytes)
    assert found[0] == b"r4000" and len(found) == 100 and 101 <= sum(read) < 2 * 101 + 16
    chain.close()


def test_an_offset_and_a_total_walk_past_entries_without_reading_their_values(
    tmp_path, monkeypatch
):
    """A stranger's page at offset 9,999 of 10,000 entries of 16 KiB read 160 MB of values it
    skipped (122 ms on the loop that runs consensus): skipped and counted entries are walked
    by key alone."""
    chain = ChainStore(tmp_path / "runs.db")
    chain.commit({b"run/%05d" % i: b"%05d" % i + b"v" * (16 << 10) for i in range(3000)}, {})
    value_bytes, chunk = [], chain._read_chunk

    def counted(*args):
        rows = chunk(*args)
        value_bytes.append(sum(len(value) for _, value in rows))
        return rows

    monkeypatch.setattr(chain, "_read_chunk", counted)
    request = q.PageRequest(offset=2900, limit=10, count_total=True)
    found, answer = page(CacheStore(chain), b"run/", request, lambda v: v[:5])
    assert found == [b"%05d" % i for i in range(2900, 2910)]
    assert (answer.next_key, answer.total) == (b"02910", 3000)
    assert sum(value_bytes) <= 32 * (16 << 10)  # the page's and a first chunk's, no more


def test_offsets_and_totals_walk_a_bounded_part_of_a_list(store, monkeypatch):
    """A query runs beside consensus and lists a stranger grows have no end: an offset past
    MAX_WALK, or a total that would count more than MAX_WALK entries past the page, is refused
    with a code (next_key still pages through everything)."""
    from dilochain.chain import pagination
    from dilochain.chain.pagination import page_rows

    monkeypatch.setattr(pagination, "MAX_WALK", 1000)
    _, answer = page(store, b"item/", q.PageRequest(limit=1000, offset=1000, count_total=True),
                     bytes)  # fmt: skip
    with pytest.raises(TxError, match="offset is at most 1,000"):
        page(store, b"item/", q.PageRequest(offset=1001), bytes)
    with pytest.raises(TxError, match="count_total is not answered"):
        page(store, b"item/", q.PageRequest(limit=10, count_total=True), bytes)
    assert answer.total == 2501  # 1,000 skipped, 1,000 shown, 501 counted past the page
    _, last = page(store, b"item/", q.PageRequest(limit=1000, offset=600, count_total=True),
                   bytes)  # fmt: skip
    assert last.total == 2501
    rows = [(b"%05d" % i, i) for i in range(2500)]
    with pytest.raises(TxError, match="count_total is not answered"):
        page_rows(rows, q.PageRequest(limit=10, count_total=True))
    assert page_rows(rows, q.PageRequest(limit=1000, offset=1000, count_total=True))[2] == 2500
    # With a key, no total is asked of the whole list, and nothing past the page is walked.
    walked = []
    listed = ((k, walked.append(k) or k) for k, _ in rows)
    page_rows(listed, q.PageRequest(key=b"x", limit=10, count_total=True))
    assert len(walked) == 11

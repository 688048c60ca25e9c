"""Pages of list queries, as the Cosmos SDK pages them (``PageRequest``/``PageResponse``): every
list a stranger can grow (runs, hosts, commits, challenges, slashes …) is answered a page at a
time, so no answer passes gRPC's 4 MiB limit however many entries there are."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import TypeVar

from dilochain.chain.errors import TxError, codes
from dilochain.chain.state import CacheStore
from dilochain.protocol.pb.poc.v1 import query_pb2 as q

T = TypeVar("T")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_PAGE_BYTES = 2 << 20  # well under gRPC's 4 MiB, whatever the entries' size
# Entries a request may have walked past its page (an offset skipped, a total counted): a
# query runs beside consensus, and lists a stranger grows (runs ever created, slashes) have no
# end; past this, a page is reached by ``next_key`` and a total is not counted.
MAX_WALK = 10_000


def _limit(request) -> int:
    """The page size ``request`` asks for, once its form is checked."""
    if request.reverse:
        raise TxError(codes.INVALID_REQUEST, "pagination: reverse is not supported")
    if request.key and request.offset:
        raise TxError(codes.INVALID_REQUEST, "pagination: give key or offset, not both")
    if request.offset > MAX_WALK:
        raise TxError(codes.INVALID_REQUEST, f"pagination: offset is at most {MAX_WALK:,}; "
                      "page on with next_key")  # fmt: skip
    return min(request.limit or DEFAULT_LIMIT, MAX_LIMIT)


def _walked(past: int) -> None:
    """Refuse a total that would take counting more than ``MAX_WALK`` entries past a page."""
    if past > MAX_WALK:
        raise TxError(codes.INVALID_REQUEST, f"pagination: count_total is not answered for "
                      f"a list past {MAX_WALK:,} entries; page on with next_key")  # fmt: skip


def page_rows(rows: Iterable[tuple[bytes, T]], request) -> tuple[list[T], bytes, int]:
    """One page of ``rows`` ((key, item) in key order, from ``request.key`` on), paged as
    :func:`page` pages the store (any ``PageRequest`` type): the page, the next page's key
    (empty: none) and the total (0 unless counted). Only the page's rows are taken unless
    the total is asked for."""
    limit = _limit(request)
    rows = iter(rows)
    skipped = sum(1 for _ in islice(rows, request.offset))
    shown = [item for _, item in islice(rows, limit)]
    following = next(rows, None)
    total = 0
    if request.count_total and not request.key:
        rest = sum(1 for _ in islice(rows, MAX_WALK + 1))
        _walked(rest)
        total = skipped + len(shown) + (following is not None) + rest
    return shown, following[0] if following else b"", total


def page(
    store: CacheStore, prefix: bytes, request: q.PageRequest, decode: Callable[[bytes], T]
) -> tuple[list[T], q.PageResponse]:
    """One page of the values under ``prefix``, in key order: from ``request.key`` (a
    ``next_key`` an earlier page returned) or ``request.offset``, at most ``request.limit``
    values (``DEFAULT_LIMIT`` when 0, ``MAX_LIMIT`` at most) and ``MAX_PAGE_BYTES``. Entries
    walked past (an offset skipped, a total counted) are walked by key alone: their values,
    up to a module's largest apiece, are never read."""
    limit = _limit(request)
    counting = request.count_total and not request.key  # a total is of the whole list
    start, skipped = prefix + request.key if request.key else b"", 0
    if request.offset:
        keys = store.iterate(prefix, start, values=False)
        skipped = sum(1 for _ in islice(keys, request.offset))
        first = next(keys, None)
        if first is None:
            return [], q.PageResponse(total=skipped if counting else 0)
        start = first[0]
    items: list[T] = []
    size, next_key = 0, b""
    for key, value in store.iterate(prefix, start):
        if len(items) == limit or (items and size + len(value) > MAX_PAGE_BYTES):
            next_key = key[len(prefix) :]
            break
        items.append(decode(value))
        size += len(value)
    total = skipped + len(items)
    if counting and next_key:
        rest = sum(1 for _ in islice(store.iterate(prefix, prefix + next_key, values=False),
                                     MAX_WALK + 1))  # fmt: skip
        _walked(rest)
        total += rest
    return items, q.PageResponse(next_key=next_key, total=total if counting else 0)

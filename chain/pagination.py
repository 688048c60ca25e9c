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


def _limit(request) -> int:
    """The page size ``request`` asks for, once its form is checked."""
    if request.reverse:
        raise TxError(codes.INVALID_REQUEST, "pagination: reverse is not supported")
    if request.key and request.offset:
        raise TxError(codes.INVALID_REQUEST, "pagination: give key or offset, not both")
    return min(request.limit or DEFAULT_LIMIT, MAX_LIMIT)


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
        total = skipped + len(shown) + (following is not None) + sum(1 for _ in rows)
    return shown, following[0] if following else b"", total


def page(
    store: CacheStore, prefix: bytes, request: q.PageRequest, decode: Callable[[bytes], T]
) -> tuple[list[T], q.PageResponse]:
    """One page of the values under ``prefix``, in key order: from ``request.key`` (a
    ``next_key`` an earlier page returned) or ``request.offset``, at most ``request.limit``
    values (``DEFAULT_LIMIT`` when 0, ``MAX_LIMIT`` at most) and ``MAX_PAGE_BYTES``."""
    limit = _limit(request)
    items: list[T] = []
    size, skipped, next_key, total = 0, 0, b"", 0
    for key, value in store.iterate(prefix, prefix + request.key if request.key else b""):
        total += 1
        if next_key:
            if not request.count_total:
                break
            continue
        if skipped < request.offset:
            skipped += 1
            continue
        if len(items) == limit or (items and size + len(value) > MAX_PAGE_BYTES):
            next_key = key[len(prefix) :]
            continue
        items.append(decode(value))
        size += len(value)
    counted = total if request.count_total and not request.key else 0
    return items, q.PageResponse(next_key=next_key, total=counted)

"""What a stranger's state costs the chain's hot paths, at sizes a long-lived chain reaches:
a page of one run over many finished runs (time and rows read from SQLite), the unbonding
queue's end-of-block pass over many pending entries with none due, and a block of new keys in
the state tree (with what inserting them into a plain sorted list, the tree's old layout, cost).

    .venv/bin/python -m bench.state_costs [--runs 5000] [--entries 200000] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import bisect
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sortedcontainers import SortedList

from dilochain.chain.context import Context
from dilochain.chain.modules import collateral
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.chain.state_tree import StateTree
from dilochain.chain.store import ChainStore
from dilochain.protocol.address import encode_address
from dilochain.protocol.params import DENOM, Params
from dilochain.protocol.pb.poc.v1 import query_pb2 as q


def _best_ms(work: Callable[[], object], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _counting_reads(store: ChainStore) -> list[int]:
    """Rows of each SQLite read ``store`` makes from now on."""
    read, chunk = [], store._read_chunk

    def counted(*args):
        rows = chunk(*args)
        read.append(len(rows))
        return rows

    store._read_chunk = counted
    return read


def page_of_one(folder: Path, runs: int) -> list[tuple[str, str]]:
    store = ChainStore(folder / "runs.db")
    store.commit({b"run/%06d" % i: random.randbytes(16 << 10) for i in range(runs)}, {})
    read = _counting_reads(store)
    request = q.PageRequest(limit=1)
    took = _best_ms(lambda: page(CacheStore(store.query_view()), b"run/", request, bytes))
    store.close()
    return [(f"Runs{{limit=1}} over {runs:,} runs of 16 KiB",
             f"{took:.2f} ms, {read[-1]} rows read")]  # fmt: skip


def unbonding_pass(folder: Path, entries: int) -> list[tuple[str, str]]:
    """``entries`` pending over the last 1,000 heights (within the unbonding period: none due)."""
    store, params = ChainStore(folder / "unbonding.db"), Params()
    state = CacheStore(store)
    for index in range(entries):
        height = 1 + index * 1000 // entries
        ctx = Context(state, height, height * 10**9, "bench", params)
        address = encode_address(index.to_bytes(20, "big"))
        collateral.bond_at_genesis(state, DENOM, address, 1)
        collateral.start_unbonding(ctx, address, 1)
    store.commit(state.writes, {})
    read = _counting_reads(store)
    ctx = Context(CacheStore(store), 1001, 1001 * 10**9, "bench", params, [])
    took = _best_ms(lambda: collateral.end_block(ctx))
    store.close()
    return [(f"end-of-block unbonding pass, {entries:,} entries pending, none due",
             f"{took:.2f} ms, {read[-1]} rows read")]  # fmt: skip


def tree_blocks(keys: int) -> list[tuple[str, str]]:
    rng = random.Random(1)
    start = time.perf_counter()
    tree = StateTree((rng.randbytes(24), b"v") for _ in range(keys))
    tree.root  # noqa: B018 - every inner hash computed
    built = time.perf_counter() - start
    rows = [(f"state tree of {keys:,} keys: built, root computed", f"{built:.2f} s")]
    listed = sorted(rng.getrandbits(256) for _ in range(keys))
    sorted_list = SortedList(listed)
    for new in (1, 100, 5000):
        writes = {rng.randbytes(24): b"new" for _ in range(new)}
        took = _best_ms(lambda w=writes: tree.update(w), repeats=1)
        paths = [rng.getrandbits(256) for _ in range(new)]
        kept = _best_ms(lambda p=paths: [sorted_list.add(x) for x in p], repeats=1)
        moved = _best_ms(lambda p=paths: [bisect.insort(listed, x) for x in p], repeats=1)
        rows.append((f"a block of {new:,} new keys: the tree's update; of which inserting "
                     "their paths (SortedList, was a plain list)",
                     f"{took:.1f} ms; {kept:.1f} ms (was {moved:.1f} ms)"))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    args = parser.parse_args()
    table = Table("what", "cost")
    with tempfile.TemporaryDirectory() as folder:
        rows = page_of_one(Path(folder), args.runs) + unbonding_pass(Path(folder), args.entries)
        for row in rows + tree_blocks(args.keys):
            table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()

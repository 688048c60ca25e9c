"""State-sync snapshots in-process: chunk encoding, a snapshot taken and served by one node and
restored by an empty one through ABCI, and every way a hostile snapshot is refused."""

from __future__ import annotations

import hashlib
import sqlite3
import struct

import pytest
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from hypothesis import given
from hypothesis import strategies as st

from dilochain.chain import snapshots
from dilochain.chain.abci import AbciHandler
from dilochain.chain.app import BLOCK_KEY, Application
from dilochain.chain.modules import bank
from dilochain.chain.snapshots import SnapshotStore, decode_chunk, encode_chunks
from dilochain.chain.store import ChainStore
from dilochain.protocol.params import DENOM
from dilochain.testutil import local_chain, signed_tx, wallet

ALICE = wallet(1)
A, B = str(ALICE.address()), str(wallet(2).address())
Applied = abci.ResponseApplySnapshotChunk


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.binary(max_size=3000))))
def test_chunks_hold_every_row_in_order(rows):
    chunks = list(encode_chunks(iter(rows)))
    assert [row for chunk in chunks for row in decode_chunk(chunk)] == rows
    assert all(chunks[1:]), "an empty chunk after others: CometBFT cannot carry it"
    assert all(len(c) < snapshots.CHUNK_BYTES + 4000 for c in chunks)


def test_rows_that_fill_the_last_chunk_exactly_leave_no_empty_one(monkeypatch):
    monkeypatch.setattr(snapshots, "CHUNK_BYTES", 100)
    rows = [(b"k%d" % i, b"v" * 90) for i in range(4)]  # 8 + 2 + 90 = 100 bytes each
    assert [len(c) for c in encode_chunks(rows)] == [100] * 4
    assert list(encode_chunks([])) == [b""]


def test_truncated_chunks_are_refused():
    (chunk,) = encode_chunks([(b"key", b"value")])
    for cut in (chunk[:3], chunk[:10], b"\x00" * 8 + b"x"):
        try:
            decode_chunk(cut)
        except ValueError:
            continue
        raise AssertionError(f"{cut!r} decoded")


def _served(tmp_path, monkeypatch):
    """A chain with a few blocks of state, its snapshot taken (small chunks: several of them),
    and an empty node of the same genesis."""
    monkeypatch.setattr(snapshots, "CHUNK_BYTES", 200)
    chain = local_chain(tmp_path / "a", {A: 10**12})
    for sequence in range(5):
        send = MsgSend(from_address=A, to_address=str(wallet(100 + sequence).address()),
                       amount=[Coin(denom=DENOM, amount="7")])  # fmt: skip
        chain.broadcast(signed_tx(ALICE, [send], sequence=sequence, account_number=0))
        chain.block()
    store = SnapshotStore(tmp_path / "snapshots", interval=1, keep=2)
    info = store.take(chain.app.height, chain.app.store.snapshot_rows())
    empty = Application(ChainStore(tmp_path / "b" / "chain.db"), chain.app.genesis)
    return chain, store, info, AbciHandler(empty, None, "test")


def _offer(handler, info, app_hash, fmt=snapshots.FORMAT, **changes) -> int:
    fields = {"height": info.height, "format": fmt, "chunks": info.chunks, "hash": info.hash,
              "metadata": info.metadata, **changes}  # fmt: skip
    request = abci.RequestOfferSnapshot(snapshot=abci.Snapshot(**fields), app_hash=app_hash)
    return handler._offer_snapshot(request).offer_snapshot.result


def _apply(handler, index, chunk, sender="peer"):
    request = abci.RequestApplySnapshotChunk(index=index, chunk=chunk, sender=sender)
    return handler._apply_snapshot_chunk(request).apply_snapshot_chunk


def test_an_empty_node_restores_a_served_snapshot_and_agrees(tmp_path, monkeypatch):
    chain, store, info, handler = _served(tmp_path, monkeypatch)
    serving = AbciHandler(chain.app, None, "test", snapshots=store)
    (listed,) = serving._list_snapshots(abci.RequestListSnapshots()).list_snapshots.snapshots
    assert (listed.height, listed.chunks, listed.hash) == (info.height, info.chunks, info.hash)
    assert info.chunks > 3
    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    for index in range(info.chunks):
        request = abci.RequestLoadSnapshotChunk(height=info.height, format=1, chunk=index)
        chunk = serving._load_snapshot_chunk(request).load_snapshot_chunk.chunk
        assert _apply(handler, index, chunk).result == Applied.ACCEPT
    restored = handler.app
    assert (restored.height, restored.app_hash) == (chain.app.height, chain.app.app_hash)
    assert restored.last_block_time_ns == chain.app.last_block_time_ns
    assert restored.store.meta("last_block_hash") == chain.app.store.meta("last_block_hash")
    view = restored.committed_view()
    assert bank.balance(view, str(wallet(103).address()), DENOM) == 7
    # It executes the next block exactly as the serving node does.
    send = MsgSend(from_address=A, to_address=B, amount=[Coin(denom=DENOM, amount="1")])
    raw = signed_tx(ALICE, [send], sequence=5, account_number=0)
    height, time_ns = chain.app.height + 1, chain.app.last_block_time_ns + 10**9
    hashes = [app.finalize_block(height, time_ns, [raw], b"h").app_hash
              for app in (chain.app, restored)]  # fmt: skip
    assert hashes[0] == hashes[1]
    # And it serves no second restore.
    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ABORT


def test_a_snapshot_that_does_not_hash_to_the_verified_app_hash_is_refused(tmp_path, monkeypatch):
    chain, store, info, handler = _served(tmp_path, monkeypatch)
    assert _offer(handler, info, b"\x01" * 32) == abci.ResponseOfferSnapshot.ACCEPT
    answers = [_apply(handler, i, store.chunk(info.height, 1, i), sender=f"p{i % 2}")
               for i in range(info.chunks)]  # fmt: skip
    assert [a.result for a in answers] == [Applied.ACCEPT] * (info.chunks - 1) + [
        Applied.REJECT_SNAPSHOT]  # fmt: skip
    assert list(answers[-1].reject_senders) == ["p0", "p1"]  # everyone who served it
    assert handler.app.height == 0 and list(handler.app.store.iterate(b"")) == []
    # The honest hash then restores.
    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    for index in range(info.chunks):
        assert _apply(handler, index, store.chunk(info.height, 1, index)).result == Applied.ACCEPT
    assert handler.app.store.get(BLOCK_KEY).startswith(b"%d/" % chain.app.height)


def test_hostile_offers_and_chunks_are_refused(tmp_path, monkeypatch):
    chain, store, info, handler = _served(tmp_path, monkeypatch)
    offer, app_hash = abci.ResponseOfferSnapshot, chain.app.app_hash
    assert _offer(handler, info, app_hash, fmt=2) == offer.REJECT_FORMAT
    assert _offer(handler, info, app_hash, chunks=0) == offer.REJECT
    assert _offer(handler, info, app_hash, chunks=1 << 20) == offer.REJECT
    assert _offer(handler, info, app_hash, metadata=info.metadata[:-1]) == offer.REJECT
    assert _offer(handler, info, app_hash, hash=b"\x00" * 32) == offer.REJECT
    assert _apply(handler, 0, b"").result == Applied.ABORT  # nothing offered
    assert _offer(handler, info, app_hash) == offer.ACCEPT
    # A chunk that is not the one the metadata names: fetched again, from someone else.
    bad = _apply(handler, 0, b"\x00" * 40, sender="liar")
    assert (bad.result, list(bad.refetch_chunks), list(bad.reject_senders)) == (
        Applied.RETRY, [0], ["liar"])  # fmt: skip
    assert _apply(handler, 1, store.chunk(info.height, 1, 1)).result == Applied.RETRY_SNAPSHOT
    # A snapshot whose own chunks do not decode is refused as a whole.
    garbage = b"\xff" * 12
    metadata = hashlib.sha256(garbage).digest()
    forged = snapshots.SnapshotInfo(info.height, 1, hashlib.sha256(metadata).digest(), metadata)
    assert _offer(handler, forged, app_hash) == offer.ACCEPT
    assert _apply(handler, 0, garbage).result == Applied.REJECT_SNAPSHOT
    assert list(handler.app.store.iterate(b"")) == []
    # One larger than any honest chunk is refused before it is decoded.
    huge = b"\x00\x00\x00\x01\x00\x00\x00\x00k" * (snapshots.MAX_CHUNK_BYTES // 9 + 1)
    metadata = hashlib.sha256(huge).digest()
    forged = snapshots.SnapshotInfo(info.height, 1, hashlib.sha256(metadata).digest(), metadata)
    assert _offer(handler, forged, app_hash) == offer.ACCEPT
    assert _apply(handler, 0, huge).result == Applied.REJECT_SNAPSHOT
    # A node that ran InitChain has a state of its own: no snapshot touches it.
    genesis_only = AbciHandler(local_chain(tmp_path / "g", {A: 1}).app, None, "t")
    assert _offer(genesis_only, info, app_hash) == offer.ABORT


def _forged(height: int, *chunks: bytes) -> snapshots.SnapshotInfo:
    """A snapshot of ``chunks`` whose metadata they all match (what a hostile peer serves)."""
    metadata = b"".join(hashlib.sha256(c).digest() for c in chunks)
    return snapshots.SnapshotInfo(height, len(chunks), hashlib.sha256(metadata).digest(), metadata)


def _row(key: bytes, value: bytes) -> bytes:
    return struct.pack(">II", len(key), len(value)) + key + value


def test_rows_no_module_writes_are_refused_before_they_are_written(tmp_path, monkeypatch):
    longest = b"k" * snapshots.MAX_KEY_BYTES
    assert decode_chunk(_row(longest, b"v")) == [(longest, b"v")]
    with pytest.raises(ValueError, match="a 1025-byte key and a 1-byte value"):
        decode_chunk(_row(longest + b"k", b"v"))
    with pytest.raises(ValueError, match="a 1-byte key and a 4194305-byte value"):
        decode_chunk(_row(b"k", bytes(snapshots.MAX_VALUE_BYTES + 1)))
    # The review's snapshot: chunks of one row with a key of megabytes, each matching the
    # metadata; the first is refused, nothing written.
    chain, _, info, handler = _served(tmp_path, monkeypatch)
    huge = [_row(bytes([i + 1]) * (4 << 20), b"v") for i in range(3)]
    assert _offer(handler, _forged(info.height, *huge), chain.app.app_hash) == (
        abci.ResponseOfferSnapshot.ACCEPT)  # fmt: skip
    refused = _apply(handler, 0, huge[0], sender="evil")
    assert (refused.result, list(refused.reject_senders)) == (Applied.REJECT_SNAPSHOT, ["evil"])
    assert list(handler.app.store.iterate(b"")) == []
    assert snapshots.MAX_CHUNK_BYTES == (1 << 20) + 8 + 1024 + (4 << 20)


def test_a_restore_writes_at_most_max_state_bytes(tmp_path, monkeypatch):
    chain, store, info, handler = _served(tmp_path, monkeypatch)
    chunks = [store.chunk(info.height, 1, i) for i in range(info.chunks)]
    monkeypatch.setattr(snapshots, "MAX_STATE_BYTES", sum(map(len, chunks)) - 1)
    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    answers = [_apply(handler, i, chunk).result for i, chunk in enumerate(chunks)]
    assert answers == [Applied.ACCEPT] * (info.chunks - 1) + [Applied.REJECT_SNAPSHOT]
    assert list(handler.app.store.iterate(b"")) == []
    monkeypatch.setattr(snapshots, "MAX_STATE_BYTES", sum(map(len, chunks)))
    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    assert {_apply(handler, i, chunk).result for i, chunk in enumerate(chunks)} == {Applied.ACCEPT}
    assert handler.app.app_hash == chain.app.app_hash


def test_a_full_disk_or_memory_rejects_the_snapshot_not_state_sync(tmp_path, monkeypatch):
    chain, store, info, handler = _served(tmp_path, monkeypatch)
    chunks = [store.chunk(info.height, 1, i) for i in range(info.chunks)]
    app, commit = handler.app, handler.app.store.commit

    def full_disk(writes, meta, block=None):
        if writes:
            raise sqlite3.OperationalError("database or disk is full")
        return commit(writes, meta, block)

    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    assert _apply(handler, 0, chunks[0]).result == Applied.ACCEPT
    monkeypatch.setattr(app.store, "commit", full_disk)
    refused = _apply(handler, 1, chunks[1], sender="honest")
    # Another snapshot is tried (ABORT would end state sync) and no peer is blamed.
    assert (refused.result, list(refused.reject_senders)) == (Applied.REJECT_SNAPSHOT, [])
    assert list(app.store.iterate(b"")) == []
    monkeypatch.setattr(app.store, "commit", commit)

    def out_of_memory(height, app_hash):
        raise MemoryError

    monkeypatch.setattr(app, "finish_restore", out_of_memory)
    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    answers = [_apply(handler, i, chunk, sender="honest") for i, chunk in enumerate(chunks)]
    assert [(a.result, list(a.reject_senders)) for a in answers[-2:]] == [
        (Applied.ACCEPT, []), (Applied.REJECT_SNAPSHOT, [])]  # fmt: skip
    assert list(app.store.iterate(b"")) == []


def test_snapshots_are_taken_when_due_and_only_the_newest_are_kept(tmp_path):
    chain = local_chain(tmp_path / "a", {A: 10**9})
    store = SnapshotStore(tmp_path / "snapshots", interval=2, keep=2)
    handler = AbciHandler(chain.app, None, "test", snapshots=store)
    for _ in range(7):
        handler._finalize_block(abci.RequestFinalizeBlock(height=chain.app.height + 1,
                                                          hash=b"h"))  # fmt: skip
        handler._commit(abci.RequestCommit())
        if store.thread is not None:
            store.thread.join()
    assert [s.height for s in store.list()] == [6, 4]
    assert store.chunk(6, 1, 99) == b"" and store.chunk(6, 2, 0) == b""


def test_blocks_are_pruned_only_past_evidence_and_kept_snapshots(tmp_path):
    chain = local_chain(tmp_path / "a", {A: 10**9})
    evidence = chain.app.genesis.consensus_params.evidence.max_age_num_blocks  # 100,000
    keep_all = AbciHandler(chain.app, None, "test")
    pruning = AbciHandler(chain.app, None, "test", retain_blocks=10,
                          snapshots=SnapshotStore(tmp_path / "s", interval=0))  # fmt: skip
    chain.app.store.commit({}, {"height": str(evidence + 500).encode()})
    assert keep_all._retain_height() == 0
    assert pruning._retain_height() == 500  # evidence outlives the 10 blocks asked for
    snapshots = SnapshotStore(tmp_path / "s", interval=200, keep=3)
    wide = AbciHandler(chain.app, None, "test", retain_blocks=evidence + 100, snapshots=snapshots)
    assert wide._retain_height() == 400
    snapshots.take(300, iter([(b"k", b"v")]))  # a snapshot still served keeps its blocks
    assert wide._retain_height() == 300


def test_a_snapshot_that_cannot_start_is_skipped_and_the_next_is_taken(tmp_path):
    store = SnapshotStore(tmp_path / "s", interval=1)

    def unreadable():
        raise OSError("unable to open database file")

    store.take_in_background(1, unreadable)  # logged, never raised into Commit
    store.take_in_background(2, lambda: iter([(b"k", b"v")]))
    store.thread.join()
    assert [s.height for s in store.list()] == [2]


def test_a_restore_cut_short_leaves_nothing_behind_a_later_genesis(tmp_path, monkeypatch):
    """Killed in the middle of a restore, then started without state sync: the rows already
    restored are dropped, and the chain starts from genesis like any other node."""
    chain, store, info, handler = _served(tmp_path, monkeypatch)
    assert _offer(handler, info, chain.app.app_hash) == abci.ResponseOfferSnapshot.ACCEPT
    assert _apply(handler, 0, store.chunk(info.height, 1, 0)).result == Applied.ACCEPT
    restarted = Application(ChainStore(tmp_path / "b" / "chain.db"), chain.app.genesis)
    fresh = local_chain(tmp_path / "c", {A: 10**12})
    assert restarted.init_chain() == fresh.app.app_hash
    assert list(restarted.store.iterate(b"")) == list(fresh.app.store.iterate(b""))


def test_a_snapshot_cut_off_mid_write_is_never_listed_and_is_swept_at_start(tmp_path):
    store = SnapshotStore(tmp_path / "s", interval=1)

    def killed_midway():
        yield b"k", b"v" * (2 * snapshots.CHUNK_BYTES)  # one whole chunk is written …
        raise KeyboardInterrupt  # … then the process dies (nothing after runs)

    with pytest.raises(KeyboardInterrupt):
        store.take(5, killed_midway())
    assert store.list() == [] and (tmp_path / "s" / ".partial-5" / "chunk-0").exists()
    assert store.chunk(5, 1, 0) == b""
    SnapshotStore(tmp_path / "s", interval=1)  # the node starts again
    assert list((tmp_path / "s").iterdir()) == []


def test_a_snapshot_a_peer_is_restoring_outlives_its_turn_to_be_pruned(tmp_path, monkeypatch):
    store = SnapshotStore(tmp_path / "s", interval=1, keep=1)
    for height in (1, 2):
        store.take(height, iter([(b"k", b"v")]))
    assert [s.height for s in store.list()] == [2]  # nobody asked for 1: pruned in turn
    assert [s.height for s in store.offer()] == [2]  # a peer is offered 2, to restore...
    for height in (3, 4):
        store.take(height, iter([(b"k", b"v")]))
    assert [s.height for s in store.list()] == [4, 2]  # ...so 2 is held past its turn (3 is not)
    assert store.chunk(2, snapshots.FORMAT, 0) and store.chunk(4, snapshots.FORMAT, 0)
    store.take(5, iter([(b"k", b"v")]))  # held beside at most `keep` more: the newest served
    assert [s.height for s in store.list()] == [5, 4]
    monkeypatch.setattr(SnapshotStore, "HOLD_SECONDS", 0.0)  # pruned once nobody asks for it
    store.take(6, iter([(b"k", b"v")]))
    assert [s.height for s in store.list()] == [6]

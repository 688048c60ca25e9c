"""Pruning: a host's artifact store levels off instead of growing with every round."""

from __future__ import annotations

import os
import threading

from dilochain.artifacts.pruning import Entry, Ledger, Retention, prunable
from dilochain.artifacts.store import LocalArtifactStore


def test_what_goes_and_when():
    entries = [
        Entry(3, "checkpoint", "c3"), Entry(3, "pseudo_grad", "p3"), Entry(3, "residual", "r3"),
        Entry(3, "checkpoint", "f3"), Entry(3, "final", "f3"),  # the final's weights, twice
        Entry(3, "checkpoint", "m3"), Entry(3, "moments", "m3"),  # and its moments
        Entry(4, "checkpoint", "c4"), *(Entry(r, "global", f"g{r}") for r in range(11)),
        Entry(5, "pseudo_grad", "g5"),  # a hash another (kept) entry names is never deleted
    ]  # fmt: skip
    keep = Retention(keep_global_states=3, archive_every=5, margin_rounds=1)
    names = lambda resolved: {e.hash for e in prunable(entries, resolved, keep)}  # noqa: E731
    assert names(3) == {"g1", "g2"}  # round 3 is decided, the margin keeps it a round more
    # The residual and the final checkpoint (carried AdamW moments) live a round longer.
    assert names(4) == {"c3", "p3", "g1", "g2", "g3"}
    assert names(5) == {"c3", "p3", "r3", "f3", "m3", "c4", "g1", "g2", "g3", "g4"}
    # Global states: the newest 3 (8, 9, 10) and the archive (0, 5, 10) stay, whatever is decided.
    assert names(100) - {"c3", "p3", "r3", "f3", "m3", "c4"} == {"g1", "g2", "g3", "g4", "g6",
                                                                  "g7"}  # fmt: skip
    # A verifier keeps the pseudo-gradients it screened two rounds longer (hosts fetch them).
    screened = Retention(keep_global_states=3, archive_every=5, pseudo_grad_rounds=2)
    kept = lambda resolved: {e.hash for e in prunable(entries, resolved, screened)}  # noqa: E731
    assert "p3" not in kept(5) and kept(6) >= {"p3", "c3"}


def play(tmp_path, rounds: int, retention: Retention | None) -> list[int]:
    """A host's store over ``rounds`` rounds (its checkpoints, its and two peers'
    pseudo-gradients, its residual, the next global state), pruned as each round resolves;
    the store's bytes after each round."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    ledger = Ledger(tmp_path)
    sizes = []
    for r in range(rounds):
        for kind, n in (("checkpoint", 3), ("pseudo_grad", 3), ("residual", 1), ("global", 1)):
            ledger.record(r, kind, [store.put(os.urandom(1000)) for _ in range(n)])
        if retention is not None:
            ledger.prune(store, r - 1, retention)  # round r - 1 resolved as round r began
        sizes.append(store.total_bytes())
    return sizes


def test_the_store_levels_off(tmp_path):
    grows = play(tmp_path / "a", 30, None)
    assert grows[29] == 30 * 8000  # everything, forever
    flat = play(tmp_path / "b", 30, Retention(keep_global_states=4, archive_every=0))
    assert flat[10] == flat[20] == flat[29] < 30_000  # levels off after a few rounds
    archived = play(tmp_path / "c", 30, Retention(keep_global_states=4, archive_every=10))
    assert archived[29] - archived[11] == 2000  # rounds 10 and 20 kept as an archive, and only them
    # The ledger forgets what was deleted.
    assert len(Ledger(tmp_path / "b").entries()) < 60


def test_what_prune_frees_counts_each_artifact_once(tmp_path):
    """A global state that carried over is listed for two rounds: what pruning reports freeing
    is what leaves the disk (it once said 29.1 MB freed of 27.3 MB stored)."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    ledger = Ledger(tmp_path)
    same = store.put(b"s" * 1000)
    ledger.record(0, "global", [same])
    ledger.record(1, "global", [same])  # carried over
    ledger.record(0, "checkpoint", [store.put(b"c" * 500)])
    before = store.total_bytes()
    retention = Retention(keep_global_states=0, archive_every=0)
    planned = ledger.prune(store, 10, retention, dry_run=True)
    freed = ledger.prune(store, 10, retention)
    assert sum(size for _, size in planned) == sum(size for _, size in freed) == 1500
    assert before - store.total_bytes() == 1500


def test_a_line_cut_short_is_skipped_and_the_next_record_starts_its_own(tmp_path):
    """A crash or a full disk mid-append leaves half a line: the ledger still reads (a node
    that cannot read it would never start again) and the next record is not glued to it."""
    ledger = Ledger(tmp_path)
    ledger.record(1, "checkpoint", [b"\x01" * 32])
    with ledger.path.open("a") as out:
        out.write('{"round": 1, "kind": "pseudo_gr')
    ledger.record(2, "global", [b"\x02" * 32])
    assert ledger.entries() == [Entry(1, "checkpoint", "01" * 32), Entry(2, "global", "02" * 32)]


def test_pruning_one_run_keeps_what_another_run_of_the_home_still_names(tmp_path):
    """A home's runs share its artifact store, and two runs of one architecture share objects
    (the zero AdamW moments; with one seed, round 0's state): pruning run A deleted run B's,
    which B's host then could neither serve nor publish, and its verifiers failed it."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    a, b = Ledger(tmp_path / "node" / "run-a"), Ledger(tmp_path / "node" / "run-b")
    for ledger in (a, b):
        ledger.path.parent.mkdir(parents=True)
    zeros, own = store.put(b"\0" * 1000), store.put(b"a" * 500)
    a.record(0, "checkpoint", [zeros, own])
    b.record(0, "checkpoint", [zeros])
    freed = a.prune(store, 10, Retention(keep_global_states=0, archive_every=0))
    assert sorted(size for _, size in freed) == [0, 500]  # only its own object left the disk
    assert store.has(zeros) and not store.has(own) and a.entries() == []
    assert [e.hash for e in b.entries()] == [zeros.hex()]
    b.prune(store, 10, Retention(keep_global_states=0, archive_every=0))
    assert not store.has(zeros)  # the last run that named it let it go


def test_a_store_that_will_not_list_uploads_is_still_pruned(tmp_path, caplog):
    """Credentials may allow puts and deletes but not listing unfinished uploads: cleaning those
    up is best effort, and the rest of pruning goes on."""
    from dilochain.artifacts.store import ArtifactError

    class Bucket:
        deleted: list[bytes] = []

        def abort_stale_uploads(self) -> int:
            raise ArtifactError("AccessDenied: s3:ListBucketMultipartUploads")

        def delete_all(self, digests) -> None:
            self.deleted.extend(digests)

    store = LocalArtifactStore(tmp_path / "artifacts")
    ledger = Ledger(tmp_path)
    old = store.put(b"c" * 500)
    ledger.record(0, "checkpoint", [old])
    bucket = Bucket()
    ledger.prune(store, 10, Retention(keep_global_states=0, archive_every=0), published=bucket)
    assert bucket.deleted == [old] and not store.has(old)
    assert any("not cleaned up" in r.getMessage() for r in caplog.records)


def test_a_commit_naming_a_data_file_never_has_a_host_delete_it(tmp_path):
    """The chain takes any 32 bytes as a pseudo-gradient's hash: a hostile commit naming the
    held-out shard's had every honest host record it as a peer's pseudo-gradient and, a round
    later, delete the link its blob service serves the run's data through (late joiners and
    restarted verifiers then found it nowhere)."""
    from types import SimpleNamespace

    from dilochain.node.host import HostNode
    from dilochain.protocol.pb.poc.v1.types_pb2 import RoundCommit
    from dilochain.testutil import shipped_data

    data, _ = shipped_data()
    local = LocalArtifactStore(tmp_path / "artifacts")
    for path, digest in data.files():
        local.link_file(path, bytes.fromhex(digest))
    shard = bytes.fromhex(data.files()[2][1])
    peer = local.put(b"a peer's pseudo-gradient")
    commits = {0: [RoundCommit(host="dilo1hostile", pseudo_grad_hash=shard),
                   RoundCommit(host="dilo1peer", pseudo_grad_hash=peer)]}  # fmt: skip
    host = SimpleNamespace(poc=SimpleNamespace(commits=lambda run, r: commits.get(r, [])),
                           cfg=SimpleNamespace(run_id="r"), ledger=Ledger(tmp_path / "state"),
                           local=local, retention=Retention(), objects=None, data=data)  # fmt: skip
    (tmp_path / "state").mkdir()
    HostNode.prune(host, range(0, 1), 0)
    HostNode.prune(host, range(1, 3), 5)
    assert local.has(shard) and not local.has(peer)


def test_a_prune_never_deletes_what_another_run_is_storing_and_has_not_recorded(tmp_path):
    """Run B stores the zero moments it shares with run A while A prunes: A reads the ledgers
    (B's does not name them yet), B records and stores them, A deletes. B's host would then
    neither serve nor publish them. B's record-then-store and A's read-then-delete now hold one
    lock of the home, so one of them waits for the other."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    a, b = Ledger(tmp_path / "node" / "run-a"), Ledger(tmp_path / "node" / "run-b")
    for ledger in (a, b):
        ledger.path.parent.mkdir(parents=True)
    zeros = store.put(b"\0" * 1000)
    a.record(0, "checkpoint", [zeros])
    read, entered = threading.Event(), threading.Event()
    delete = store.delete

    def let_b_in_then_delete(digest: bytes) -> None:
        read.set()
        entered.wait(1.0)  # B cannot get in while A holds the home's lock: A goes on
        delete(digest)

    def b_stores() -> None:
        read.wait(30)
        with b.storing(3, "checkpoint", [zeros]):
            entered.set()
            store.put(b"\0" * 1000)

    b_thread = threading.Thread(target=b_stores)
    b_thread.start()
    store.delete = let_b_in_then_delete
    a.prune(store, 10, Retention(keep_global_states=0, archive_every=0))
    b_thread.join(30)
    assert store.has(zeros) and [e.hash for e in b.entries()] == [zeros.hex()]
    assert a.entries() == []


def test_a_prune_never_unlinks_a_dataset_file_another_run_s_commit_named(tmp_path):
    """A home's runs share one artifact store; a commit of one run may name another run's
    public shard hash: pruning it would have unlinked the file that run's data is served by."""
    local = LocalArtifactStore(tmp_path / "artifacts")
    (tmp_path / "shard.bin").write_bytes(b"another run's shard")
    shard = local.put(b"another run's shard")
    local.delete(shard)
    local.link_file(tmp_path / "shard.bin", shard)
    (tmp_path / "state").mkdir()
    ledger = Ledger(tmp_path / "state")
    ledger.record(0, "pseudo_grad", [shard, local.put(b"a real pseudo-gradient")])
    gone = ledger.prune(local, 5, Retention())
    assert len(gone) == 2 and local.linked(shard) and local.has(shard)
    assert local.get(shard) == b"another run's shard"


def test_a_writer_waits_for_another_s_fetch_of_the_same_artifact_only_so_long(tmp_path):
    """Screens of a round all name its base state, fetched once: but the first fetch may be
    from a host that serves it at a drip, so the others wait for it a while only."""
    local = LocalArtifactStore(tmp_path / "artifacts")
    digest = b"\x07" * 32
    holding, release, beside = threading.Event(), threading.Event(), []

    def first() -> None:
        with local.writing(digest):
            holding.set()
            assert release.wait(30)

    holder = threading.Thread(target=first)
    holder.start()
    try:
        assert holding.wait(30)
        with local.writing(digest, wait=0.1):  # the holder is still fetching
            beside.append(holder.is_alive())
    finally:
        release.set()
        holder.join(30)
    assert beside == [True]
    with local.writing(digest, wait=0.1):  # free again: held, and released
        pass

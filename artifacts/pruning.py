"""Disk that does not grow without bound: a host's artifacts live as long as they can matter.

The artifact store is content-addressed and knows nothing of rounds, so the host records in a
ledger (``artifacts.jsonl`` in its state folder) what it stored for which round and why. Once a
round's challenges are decided (plus a margin of rounds, for peers that restart and verifiers
that are late), its segment checkpoints and pseudo-gradients can go; a round's error-feedback
residual and final checkpoint (``final``: its index and weights; ``moments``: its AdamW
moments, which a run with ``carry_inner_state`` carries) one round later (the next round starts
from them and its commit is checked against them); global states are kept for the newest
``keep`` rounds plus every ``archive_every``-th round. A hash that any kept entry still names is
never deleted. The dataset files the host serves are not in the ledger. A host that also
publishes to an object store deletes there first: a delete that fails leaves the ledger as it
was, for the next prune.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dilochain.artifacts.store import ArtifactError, LocalArtifactStore

if TYPE_CHECKING:
    from dilochain.artifacts.object_store import ObjectStore

log = logging.getLogger(__name__)

Kind = Literal["checkpoint", "pseudo_grad", "residual", "final", "moments", "global"]


@dataclass(frozen=True)
class Entry:
    """One artifact the host stored for a round."""

    round: int
    kind: Kind
    hash: str  # hex


@dataclass(frozen=True)
class Retention:
    """How long artifacts are kept (node config: ``keep_global_states``, ``archive_every``)."""

    keep_global_states: int = 4
    archive_every: int = 10  # 0: no archive
    margin_rounds: int = 1
    pseudo_grad_rounds: int = 0  # rounds more that pseudo-gradients are kept (a verifier's)


def prunable(entries: list[Entry], resolved: int, retention: Retention) -> list[Entry]:
    """The entries that can go once round ``resolved`` is decided (-1: none is)."""
    newest = max((e.round for e in entries if e.kind == "global"), default=-1)
    margin = retention.margin_rounds
    keep, drop = [], []
    for e in entries:
        if e.kind == "global":
            archived = retention.archive_every and e.round % retention.archive_every == 0
            recent = e.round > newest - retention.keep_global_states
            gone = e.round + margin <= resolved and not archived and not recent
        elif e.kind in ("residual", "final", "moments"):
            gone = e.round + 1 + margin <= resolved
        elif e.kind == "pseudo_grad":
            gone = e.round + retention.pseudo_grad_rounds + margin <= resolved
        else:
            gone = e.round + margin <= resolved
        (drop if gone else keep).append(e)
    kept = {e.hash for e in keep}
    return [e for e in drop if e.hash not in kept]


def _abort_stale_uploads(published: ObjectStore) -> None:
    """Abort a dead writer's unfinished uploads, if the store lets this host (credentials may
    allow puts and deletes but not listing uploads): nothing else of pruning waits on it."""
    try:
        published.abort_stale_uploads()
    except ArtifactError as err:
        log.warning("unfinished uploads not cleaned up: %s", err)


class Ledger:
    """The append-only record of what a host stored, rewritten without what was pruned."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / "artifacts.jsonl"
        self._lock = state_dir / "artifacts.lock"
        self._home_lock = state_dir.parent / "artifacts.lock"  # every run of the home's

    def _named_by_other_runs(self) -> set[str]:
        """The hashes the other runs' ledgers beside this one name: the local store is shared
        by a home's runs, and two runs of one architecture share objects (the zero moments,
        with one seed round 0's state), which pruning one run must not take from the other."""
        mine = self.path.resolve()
        return {e.hash for path in self.path.parent.parent.glob(f"*/{self.path.name}")
                if path.resolve() != mine for e in Ledger(path.parent).entries()}  # fmt: skip

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with _flocked(self._lock):
            yield

    @contextmanager
    def storing(self, round_: int, kind: Kind, digests: list[bytes]) -> Iterator[None]:
        """Record ``digests`` for ``round_`` as ``kind``, then store them (in the block), under
        the lock a prune of any of the home's runs holds from reading the other runs' ledgers
        to deleting: a prune never deletes an object a run is storing and has not recorded yet
        (two runs of one architecture store the same zero moments)."""
        with _flocked(self._home_lock):
            self.record(round_, kind, digests)
            yield

    def record(self, round_: int, kind: Kind, digests: list[bytes]) -> None:
        """Note that ``digests`` were stored for ``round_`` as ``kind``."""
        lines = "".join(json.dumps(asdict(Entry(round_, kind, d.hex()))) + "\n" for d in digests)
        with self._locked(), self.path.open("a+b") as out:
            if out.seek(0, os.SEEK_END):
                out.seek(-1, os.SEEK_END)
                if out.read(1) != b"\n":  # a line a crash cut short stays a line of its own
                    lines = "\n" + lines
            out.write(lines.encode())

    def entries(self) -> list[Entry]:
        """Every entry (duplicates merged), in order; a line a crash or a full disk cut short
        is skipped (its artifact stays on disk, never pruned), never a node that cannot
        start."""
        if not self.path.exists():
            return []
        found, torn = [], 0
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                found.append(Entry(**json.loads(line)))
            except (ValueError, TypeError):
                torn += 1
        if torn:
            log.warning("%s: %d unreadable lines skipped", self.path, torn)
        return list(dict.fromkeys(found))

    def prune(
        self, store: LocalArtifactStore, resolved: int, retention: Retention, dry_run: bool = False,
        published: ObjectStore | None = None,
    ) -> list[tuple[Entry, int]]:  # fmt: skip
        """Delete what :func:`prunable` allows (unless ``dry_run``), from ``published`` (the
        host's object store, if any: first, and an ``ArtifactError`` there deletes nothing
        here) and from ``store`` (but for what another run's ledger beside this one names, or
        a run is storing: :meth:`storing`); (entry, bytes freed) of each, an artifact listed
        under several entries (a state that carried over) counted once. It holds the home's
        lock, then this ledger's, as :meth:`storing` takes them, from reading the ledgers to
        its last delete."""
        if published is not None and not dry_run:
            _abort_stale_uploads(published)  # touches no ledger: outside the locks
        with _flocked(self._home_lock), self._locked():
            entries = self.entries()
            going = prunable(entries, resolved, retention)
            shared = self._named_by_other_runs()
            counted = set(shared)  # what stays on disk frees nothing
            sizes = []
            for e in going:
                sizes.append((e, 0 if e.hash in counted else store.size(bytes.fromhex(e.hash))))
                counted.add(e.hash)
            if dry_run or not going:
                return sizes
            if published is not None:  # this run's own prefix
                published.delete_all(bytes.fromhex(e.hash) for e in going)
            for e in going:  # never a link to a served dataset file: a commit of another
                # run may name one (its hash is public) to have this host stop serving it
                if e.hash not in shared and not store.linked(bytes.fromhex(e.hash)):
                    store.delete(bytes.fromhex(e.hash))
            left = set(going)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(asdict(e)) + "\n" for e in entries if e not in left))
            tmp.replace(self.path)
        return sizes


@contextmanager
def _flocked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (made if missing) across processes."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield

"""The round schedule of a run, in blocks, and each host's data seed for a round.

A round takes ``round_period`` blocks: a commit window of ``round_blocks`` blocks (hosts
commit their round, verifiers their beacon secrets); the beacon window, whose last block is the
selection block (verifiers open their secrets); a reveal window; a verdict window (verifiers seal
their votes); a verdict-opening window, whose last block is the resolution block. Rounds start
one period apart; in a run with ``overlap`` they start one commit window apart, so round r+1's
commit window opens as round r's closes and round r is verified while round r+1 trains (its
verification must end before round r+1's commit window does: ``overlap_problem``). The chain
enforces it, and hosts and verifiers follow it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from dilochain.protocol.params import PocParams, verification_blocks
from dilochain.protocol.pb.poc.v1.types_pb2 import Run, RunConfig

PATIENCE_MARGIN = 3  # blocks a vote cast when a verifier stops waiting has to land


@dataclass(frozen=True)
class Window:
    """A round's blocks: its commit window, its selection block, the first block of its
    verdict-opening window and its resolution block; and its handover block, in the middle of
    the verdict window, at whose end a challenge's assigned verifiers that have not voted are
    joined by backups."""

    round: int
    start: int
    end: int
    selection: int
    opening: int
    resolution: int
    handover: int

    @property
    def screen_patience(self) -> int:
        """Until this block a verifier waits for a host it cannot reach (a host restarting)
        instead of failing its screen: the middle of the screening (beacon) window, but never
        later than ``PATIENCE_MARGIN`` blocks before its end, so a vote still lands."""
        middle = self.end + 1 + (self.selection - self.end) // 2
        return min(middle, self.selection - PATIENCE_MARGIN)

    @property
    def replay_patience(self) -> int:
        """Until this block a verifier waits for a challenged host it cannot reach: early
        enough that its vote lands before ``handover`` (a vote missing then calls backups)."""
        return self.handover - PATIENCE_MARGIN


def derive_data_seed(seed: int, host: str, round_: int) -> int:
    """The data seed of (run seed, host, round): drives the host's shard and batch order."""
    digest = hashlib.sha256(f"dilochain-data/{seed}/{host}/{round_}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shard_assignment(
    seed: int, num_shards: int, roster: Sequence[str], host: str
) -> tuple[int, ...]:
    """The training shards ``host`` trains on in a round whose roster (the run's hosts when the
    round's commit window opened, as the chain records it) is ``roster``, by rendezvous hashing:
    each shard goes to the member with the highest sha256(seed, shard, member), so a join or a
    leave moves only the shards the joiner wins or the leaver held (about 1/n of them). A member
    that wins none (more members than shards) shares its own highest-scoring shard. ``host``
    outside ``roster`` is scored as if it were in it (a copying cheat uses a victim's shards)."""
    members = tuple(sorted(set(roster) | {host}))
    owners = shard_owners(seed, num_shards, members)
    owned = tuple(s for s, owner in enumerate(owners) if owner == host)
    if owned:
        return owned
    return (max(range(num_shards), key=lambda s: _score(seed, s, host)),)


def _score(seed: int, shard: int, member: str) -> bytes:
    return hashlib.sha256(f"dilochain-shard/{seed}/{shard}/{member}".encode()).digest()


@lru_cache(maxsize=16)
def shard_owners(seed: int, num_shards: int, members: tuple[str, ...]) -> tuple[str, ...]:
    """Each shard's owner among ``members``: the highest-scoring one (cached: every round of
    every host asks with the same roster)."""
    return tuple(max(members, key=lambda m: _score(seed, s, m)) for s in range(num_shards))


def round_period(round_blocks: int, params: PocParams) -> int:
    """Blocks from one round's start to the next: commit window, beacon window (ending with the
    selection block), reveal window, verdict window, verdict-opening window (ending with the
    resolution block)."""
    return round_blocks + verification_blocks(params)


def round_stride(run: Run, params: PocParams) -> int:
    """Blocks from one round's start to the next: its period, or in an overlapped run its
    commit window."""
    return _stride(run.config, params)


def _stride(cfg: RunConfig, params: PocParams) -> int:
    return cfg.round_blocks if cfg.overlap else round_period(cfg.round_blocks, params)


def run_lifetime(cfg: RunConfig, params: PocParams) -> int:
    """A run's start delay plus the blocks from its first round's start to its last round's
    resolution (``total_rounds`` at least 1, as ``MsgCreateRun`` checks first)."""
    return (
        cfg.start_delay_blocks
        + (cfg.total_rounds - 1) * _stride(cfg, params)
        + round_period(cfg.round_blocks, params)
    )


def overlap_problem(round_blocks: int, params: PocParams) -> str | None:
    """Why an overlapped run cannot have commit windows of ``round_blocks`` blocks (None if it
    can): a round's verification must end inside the next round's commit window, so that a
    host has round r-1's aggregate when round r+1 begins."""
    verification = verification_blocks(params)
    if verification < round_blocks:
        return None
    return (f"an overlapped run needs round_blocks above the {verification} blocks a round's "
            "verification takes (beacon, reveal, verdict and opening windows)")  # fmt: skip


def base_round(cfg: RunConfig, round_: int) -> int:
    """The round of the global state that round ``round_`` builds on (its commits' base): the
    round itself, or in an overlapped run the one before (round 0 builds on θ_0)."""
    return max(0, round_ - 1) if cfg.overlap else round_


def round_window(run: Run, params: PocParams, round_: int) -> Window:
    """The blocks of round ``round_``."""
    blocks = run.config.round_blocks
    start = run.start_height + round_ * round_stride(run, params)
    selection = start + blocks - 1 + params.beacon_reveal_blocks
    resolution = start + round_period(blocks, params) - 1
    opening = resolution - params.verdict_open_blocks + 1
    handover = selection + params.reveal_window_blocks + params.verdict_window_blocks // 2
    return Window(round_, start, start + blocks - 1, selection, opening, resolution, handover)


def roster_height(run: Run, params: PocParams, round_: int) -> int:
    """The block at whose end round ``round_``'s roster is drawn: the block before its commit
    window opens, or in an overlapped run the block that decides the global state it builds
    on (round r-2's resolution; rounds 0 and 1 both before round 0's window). From then on a
    host has everything round r needs, so one that finished round r-1 early starts it at once
    and commits it when its window opens."""
    if not run.config.overlap:
        return round_window(run, params, round_).start - 1
    if round_ < 2:
        return run.start_height - 1
    return round_window(run, params, round_ - 2).resolution


def rosters_drawn_at(run: Run, params: PocParams, height: int) -> list[int]:
    """The rounds whose roster is drawn at the end of block ``height``
    (:func:`roster_height`), of the run's ``total_rounds``."""
    if height + 1 == run.start_height:
        found = [0, 1] if run.config.overlap else [0]
    elif not run.config.overlap:
        window = window_at(run, params, height + 1)
        found = [window.round] if window is not None and window.start == height + 1 else []
    else:
        blocks = run.config.round_blocks
        offset = height + 1 - run.start_height - round_period(blocks, params)
        found = [offset // blocks + 2] if offset >= 0 and offset % blocks == 0 else []
    return [r for r in found if r < run.config.total_rounds]


def window_at(run: Run, params: PocParams, height: int) -> Window | None:
    """The newest round that has begun by ``height`` (None before the run starts): the round
    whose period holds it, or in an overlapped run the one whose commit window holds it."""
    if height < run.start_height:
        return None
    return round_window(run, params, (height - run.start_height) // round_stride(run, params))


def in_flight(run: Run, params: PocParams, height: int) -> list[Window]:
    """Every round whose period holds ``height``, oldest first (one, unless rounds overlap)."""
    newest = window_at(run, params, height)
    if newest is None:
        return []
    found = [newest]
    while found[0].round > 0:
        older = round_window(run, params, found[0].round - 1)
        if older.resolution < height:
            break
        found.insert(0, older)
    return found


def settled_at(run: Run, params: PocParams, height: int) -> int:
    """The block at whose end every round of ``run`` begun by ``height`` and not yet resolved
    is resolved (``height`` if none is in flight): in an overlapped run the last round's
    verification goes on after the next, nonexistent, round's period has begun."""
    return max((w.resolution for w in in_flight(run, params, height)
                if w.round < run.config.total_rounds), default=height)  # fmt: skip


def next_window(run: Run, params: PocParams, height: int) -> Window:
    """The round of the block after ``height`` (round 0, still ahead, before the run starts)."""
    return window_at(run, params, height + 1) or round_window(run, params, 0)

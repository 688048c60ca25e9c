"""Screening committees, shared by the chain (which takes screens only from a commit's committee)
and verifiers (which screen only the commits whose committee they are on).

A commit is screened by ``screeners_per_commit`` verifiers instead of by every one: per round
the network screens hosts x that many commits and sends as many screen votes, whatever the
number of verifiers. The committee of a host's commit is drawn from the round's beacon anchor
(the hash of the block after the commit window, which nobody knew while committing) among the
verifiers registered before the round's commit window opened (and not left by then), so a key
registered once the anchor is known cannot place itself on it.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from dilochain.protocol.pb.poc.v1.types_pb2 import Verifier

_TAG = b"dilochain-screen-committee/v1"


def eligible(verifiers: Iterable[Verifier], window_start: int) -> list[str]:
    """The addresses of ``verifiers`` on the committees of a round whose commit window opens at
    block ``window_start``: those registered before it that had not left by then (a verifier
    that leaves still sits on the committees of rounds begun before it left)."""
    return [v.address for v in verifiers if v.registered_height < window_start
            and (not v.left_height or v.left_height >= window_start)]  # fmt: skip


def screen_committee(
    anchor: bytes, run_id: str, round_: int, host: str, candidates: Iterable[str], size: int
) -> set[str]:
    """The verifiers among ``candidates`` that screen ``host``'s commit of the round: the
    ``size`` ranked first by SHA-256 of (anchor, run, round, host, verifier); all of them when
    ``size`` is 0 or covers them."""
    ranked = _ranked(anchor, run_id, round_, host, tuple(sorted(set(candidates))))
    return set(ranked[: size or None])


@functools.lru_cache(maxsize=4096)
def _ranked(
    anchor: bytes, run_id: str, round_: int, host: str, candidates: tuple[str, ...]
) -> tuple[str, ...]:
    """The ranking behind :func:`screen_committee`, kept for the next vote on the same commit
    (the chain checks each of a commit's ``size`` votes against it, once in CheckTx and once
    in the block)."""
    return tuple(sorted(candidates, key=lambda verifier: hashlib.sha256(
        b"\x00".join([_TAG, anchor, run_id.encode(), b"%d" % round_, host.encode(),
                      verifier.encode()])).digest()))  # fmt: skip

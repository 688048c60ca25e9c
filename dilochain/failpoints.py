"""Failpoints: named places in a process where a test makes it die as ``kill -9`` would, or
makes something fail that a test cannot otherwise make fail at a chosen moment.

``DILOCHAIN_FAILPOINTS="node.publish@2,node.committed@3"`` makes the process SIGKILL itself
the first time it reaches failpoint ``node.publish`` in round 2 (or ``node.committed`` in round
3). Crash-and-resume tests use it to kill a host at an exact moment (mid inner loop, mid
publish, between commit and reveal) instead of at a moment a timer happens to hit. ``armed``
asks whether a named failure is armed for a round (``node.commit_lost``: the node's commit of
that round is never included). Unset, a failpoint is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

VARIABLE = "DILOCHAIN_FAILPOINTS"


def _armed(spec: str) -> set[tuple[str, int]]:
    armed = set()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, round_ = item.partition("@")
        armed.add((name, int(round_)))
    return armed


ARMED = _armed(os.environ.get(VARIABLE, ""))


def armed(name: str, round_: int) -> bool:
    """Whether failpoint ``name`` is armed for round ``round_``."""
    return (name, round_) in ARMED


def failpoint(name: str, round_: int) -> None:
    """Die by SIGKILL here if failpoint ``name`` is armed for round ``round_``."""
    if armed(name, round_):
        os.kill(os.getpid(), signal.SIGKILL)

"""Supervision of a local network's processes (``testnet up``, ``devnet up``): a child that dies
is reported in one line and started again after a backoff, while the others go on; one that
keeps dying right after it starts (a damaged store, a port taken) is left stopped, with the
last line of its log. A child that exits with code 0 has finished its work (a host at the end
of its run) and is left alone."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_SECONDS = (1, 2, 4, 8, 16, 30)
QUICK_SECONDS = 15.0  # a death this soon after a start counts towards giving up
GIVE_UP_AFTER = 5  # quick deaths in a row


def exit_reason(code: int) -> str:
    """A process's exit status in words (``killed by SIGKILL``, ``exit code 1``)."""
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def last_line(log: Path) -> str:
    """The last non-empty line of a log (empty if none)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


@dataclass
class _Child:
    name: str
    start: Callable[[], subprocess.Popen]
    log: Path
    proc: subprocess.Popen | None
    started: float = field(default_factory=time.monotonic)
    quick_deaths: int = 0
    due: float | None = None  # when to start it again
    given_up: bool = False


class Supervisor:
    """Watches named processes; :meth:`check` (called every second or so) restarts the dead."""

    def __init__(self, say: Callable[[str], None], restart: bool = True):
        self.say = say
        self.restart = restart
        self.children: dict[str, _Child] = {}

    def watch(
        self, name: str, proc: subprocess.Popen | None, start: Callable[[], subprocess.Popen],
        log: Path,
    ) -> None:  # fmt: skip
        """Supervise ``proc`` (started by ``start``, which also starts it again)."""
        self.children[name] = _Child(name, start, log, proc)

    def check(self) -> None:
        """Report children that died since the last check, and start those whose backoff is
        over."""
        now = time.monotonic()
        for child in self.children.values():
            if child.given_up:
                continue
            if child.due is None and child.proc is not None and child.proc.poll() is not None:
                self._died(child, now)
            if child.due is not None and now >= child.due:
                self._start(child)

    def _died(self, child: _Child, now: float) -> None:
        code = child.proc.returncode
        if code == 0:
            child.given_up = True  # done, not dead
            return
        child.quick_deaths = child.quick_deaths + 1 if now - child.started < QUICK_SECONDS else 1
        why = exit_reason(code)
        if not self.restart:
            child.given_up = True
            self.say(f"{child.name} stopped ({why}); the others go on (see {child.log})")
            return
        if child.quick_deaths >= GIVE_UP_AFTER:
            child.given_up = True
            self.say(f"{child.name} keeps stopping right after it starts ({why}, "
                     f"{child.quick_deaths} times); left stopped, the others go on. Its log "
                     f"({child.log}) ends: {last_line(child.log)}")  # fmt: skip
            return
        delay = BACKOFF_SECONDS[min(child.quick_deaths, len(BACKOFF_SECONDS)) - 1]
        child.due = now + delay
        self.say(f"{child.name} stopped ({why}); starting it again in {delay} s "
                 f"(see {child.log})")  # fmt: skip

    def _start(self, child: _Child) -> None:
        child.due = None
        child.started = time.monotonic()
        try:
            child.proc = child.start()
        except Exception as err:  # a start that failed is a death like any other
            child.proc = None
            self.say(f"{child.name} did not start: {str(err).splitlines()[0]}")
            child.quick_deaths += 1
            if child.quick_deaths >= GIVE_UP_AFTER:
                child.given_up = True
                self.say(f"{child.name} left stopped after {child.quick_deaths} failed starts")
            else:
                child.due = time.monotonic() + BACKOFF_SECONDS[child.quick_deaths - 1]
            return
        self.say(f"{child.name} started again")

    @property
    def running(self) -> list[str]:
        """The children running now."""
        return [c.name for c in self.children.values()
                if c.proc is not None and c.proc.poll() is None]  # fmt: skip

"""``devnet up --churn``: hosts come and go while the devnet's run goes on.

One host starts once round 1's commit window has closed (it trains from the first round whose
roster it is in; started while the others train, its loading of torch and the model took their
cores and made them miss the window), one is killed with SIGKILL in the middle of its inner
loop in round 2 (a failpoint) and started again with the same home, and one leaves with
``dilochain node leave`` once it has committed round 3 (or the first round after it that it
made; its node reveals what it owes, then stops). What happened is read back from the chain
for the summary: the round each joined, crashed, came back and left.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dilochain.cli.common import CliError
from dilochain.failpoints import VARIABLE as FAILPOINTS
from dilochain.localnet import spawn_cli
from dilochain.poc_client import PocClient

JOIN_AT, CRASH_IN, LEAVE_AFTER = 1, 2, 3
JOINER, CRASHER, LEAVER = "host-4", "host-1", "host-2"
MIN_ROUNDS = LEAVE_AFTER + 2  # rounds left after the leave, with the crasher and the joiner


@dataclass
class ChurnEvent:
    """One membership change, by round."""

    member: str
    event: str  # "joined", "crashed", "resumed", "left"
    round: int
    detail: str = ""


class Churn:
    """Drives the scenario from the devnet's monitoring loop (:meth:`step` once a second)."""

    def __init__(
        self, poc: PocClient, run_id: str, addresses: dict[str, str],
        spawn: Callable[[str, dict[str, str]], subprocess.Popen],
        leave_args: Callable[[str], tuple[list[str], Path, dict[str, str]]],
    ):  # fmt: skip
        self.poc, self.run_id, self.addresses = poc, run_id, addresses
        self.spawn, self.leave_args = spawn, leave_args
        self.joined = self.restarted = self.left = False
        self.leaving: subprocess.Popen | None = None
        self.over = False
        self.events: list[ChurnEvent] = []

    @staticmethod
    def env(name: str) -> dict[str, str]:
        """The environment a host starts with: the crasher's failpoint."""
        return {FAILPOINTS: f"node.mid_training@{CRASH_IN}"} if name == CRASHER else {}

    def pending(self) -> bool:
        """Whether a change of the scenario is still to come (none once the run is over)."""
        return not self.over and not (
            self.joined
            and self.restarted
            and self.leaving is not None
            and self.leaving.poll() is not None
        )

    def step(self, procs: dict[str, subprocess.Popen]) -> None:
        """Start the joiner, restart the crashed host, make the leaver leave, as due."""
        info = self.poc.round_info(self.run_id)
        self.over = info.finished
        verifying = info.round == JOIN_AT and info.height > info.window_end  # window closed
        if not self.joined and (verifying or info.round > JOIN_AT):
            procs[JOINER] = self.spawn(JOINER, {})
            self.joined = True
        if not self.restarted and procs[CRASHER].poll() == -signal.SIGKILL:
            self.events.append(ChurnEvent(CRASHER, "crashed", CRASH_IN,
                                          "SIGKILL mid inner loop; started again"))  # fmt: skip
            procs[CRASHER] = self.spawn(CRASHER, {})
            self.restarted = True
        if self.leaving is None and any(
            self._committed(LEAVER, r) for r in range(LEAVE_AFTER, info.round + 1)
        ):
            args, log, env = self.leave_args(LEAVER)
            self.leaving = spawn_cli(args, log, env)
        if self.leaving is not None and self.leaving.poll() is not None:
            self.left = self.leaving.returncode == 0
            if not self.left:
                raise CliError(f"{LEAVER}: dilochain node leave failed; see its node.log")

    def _committed(self, name: str, round_: int) -> bool:
        return any(c.host == self.addresses[name] for c in self.poc.commits(self.run_id, round_))

    def summary(self, rounds: int) -> list[ChurnEvent]:
        """Every change with its round, completed from the chain's rosters and commits."""
        rosters = {r: self.poc.roster(self.run_id, r) or [] for r in range(rounds)}
        committed = {r: {c.host for c in self.poc.commits(self.run_id, r)} for r in range(rounds)}
        out = list(self.events)
        joiner = self.addresses[JOINER]
        first = next((r for r in range(rounds) if joiner in rosters[r]), None)
        if first is not None:
            out.append(ChurnEvent(JOINER, "joined", first, "first round in the roster"))
        back = next((r for r in range(CRASH_IN, rounds)
                     if self.addresses[CRASHER] in committed[r]), None)  # fmt: skip
        if back is not None:
            out.append(ChurnEvent(CRASHER, "resumed", back, "first commit since the crash"))
        leaver = self.addresses[LEAVER]
        last = max((r for r in range(rounds) if leaver in committed[r]), default=None)
        if self.left and last is not None:
            out.append(ChurnEvent(LEAVER, "left", last, "last round committed"))
        return sorted(out, key=lambda e: (e.round, e.member))

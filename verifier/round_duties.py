"""A verifier's time-critical duties in every round, run beside its replays: commit to a beacon
secret while the round's commit window is open; once it closes, open the secret (a commitment
left unopened is slashed) and screen every commit of the round before the selection block; in
the verdict-opening window, open every vote it sealed (an unopened vote is slashed too)."""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
from cosmpy.aerial.wallet import Wallet
from google.protobuf.message import Message

from dilochain.client import TxRefused
from dilochain.poc_client import PocClient
from dilochain.protocol import beacon as encoding
from dilochain.protocol import committee, schedule
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCommitBeacon,
    MsgRevealBeacon,
    MsgSubmitScreen,
    ScreenVote,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Beacon, BeaconEntry, RoundCommit, Run, Verifier
from dilochain.verifier.ballots import BallotBox

log = logging.getLogger(__name__)
MSGS_PER_TX = 32
# Screen votes a message: the chain reads the run, the beacon and the verifier set once a
# message (per vote, they were most of a 1,000-host round's screens block), and a message refused
# for one vote (sent again alone, as every refused tx's messages are) holds up at most 16.
VOTES_PER_SCREEN_MSG = 16

# (run, round, the round's beacon anchor, commits to screen, whether to wait for unreachable
# artifacts rather than fail their commits) -> one vote per commit screened
Screener = Callable[[Run, int, bytes, list[RoundCommit], bool], list[ScreenVote]]


def beacon_secret(wallet: Wallet, run_id: str, round_: int) -> bytes:
    """This verifier's secret for a round: a keyed hash under its private key, so a restarted
    verifier opens exactly what it committed and nobody else can compute it."""
    key = wallet.signer().private_key_bytes
    return hmac.digest(key, f"dilochain-beacon/{run_id}/{round_}".encode(), "sha256")


def send_batched(
    send: Callable[..., object], msgs: list[Message], what: str, until_height: int | None = None
) -> int:
    """Send ``msgs`` ``MSGS_PER_TX`` to a tx, each waited for until ``until_height`` at most
    (the last block of their window); the messages of a refused tx one by one, so one refusal
    does not sink the others. Returns how many were refused."""
    refused = 0
    for first in range(0, len(msgs), MSGS_PER_TX):
        batch = msgs[first : first + MSGS_PER_TX]
        try:
            send(*batch, until_height=until_height)
        except TxRefused as err:
            if len(batch) == 1:
                log.warning("%s refused: %s", what, err)
                refused += 1
            else:
                refused += sum(send_batched(send, [m], what, until_height) for m in batch)
    return refused


def own_record(poc, address: str) -> Verifier | None:
    """``address``'s record among the chain's verifiers (leaving ones included), if any."""
    return next((v for v in poc.verifiers() if v.address == address), None)


class RoundDuties:
    """Beacon commitments and openings, screens, and vote openings, for every active run, on
    time."""

    def __init__(
        self, poc: PocClient, wallet: Wallet, send: Callable[..., object],
        screener: Screener | None, ballots: BallotBox,
    ):  # fmt: skip
        self.poc = poc
        self.wallet = wallet
        self.address = str(wallet.address())
        self.send = send
        self.screener = screener
        self.ballots = ballots
        self.params = poc.params()  # the schedule's windows
        # (run, round, "commit"|"reveal"|"screen"|"open")
        self._done: set[tuple[str, int, str]] = set()
        self._failing: set[tuple[str, str]] = set()  # (run, error) already logged

    def _act(
        self, run_id: str, window: schedule.Window, action: str, *msgs: Message,
        complete: bool = True,
    ) -> bool:  # fmt: skip
        """Send an action's messages, waiting for them no later than the action's window ends;
        it is done once none was refused and it is ``complete`` (else it is tried again at the
        next poll while its window is open). Whether none was refused."""
        what = f"{action} of {run_id} round {window.round}"
        last = {"commit": window.end, "open": window.resolution}.get(action, window.selection)
        accepted = not send_batched(self.send, list(msgs), what, last)
        if accepted and complete:
            self._done.add((run_id, window.round, action))
        return accepted

    def step(self) -> None:
        """Do what the next block's place in each run's schedule calls for, in every round in
        flight (several when rounds overlap): beacon commitments and openings, vote openings.
        A run whose duties fail (hostile input, a bug) is logged and the others go on."""
        for run in self.poc.runs(active=True):
            self._guarded(run, screens=False)

    def screen_step(self, run: Run) -> None:
        """Screen what ``run``'s rounds in flight call for. Apart from :meth:`step`, and on a
        thread for each run (the service's): a screen takes as long as its run's model makes
        it (a hostile run's can take long), and no run's screens may delay another's screens
        or any beacon or vote opening, whose omission is slashed."""
        self._guarded(run, screens=True)

    def _guarded(self, run: Run, screens: bool) -> None:
        try:
            self._run_duties(run, screens)
        except grpc.RpcError:
            raise
        except Exception as err:
            if (run.run_id, type(err).__name__) not in self._failing:  # logged once
                self._failing.add((run.run_id, type(err).__name__))
                log.exception("round duties of run %s failed; the others go on", run.run_id)

    def _run_duties(self, run: Run, screens: bool) -> None:
        next_block = self.poc.round_info(run.run_id).height + 1
        windows = [w for w in schedule.in_flight(run, self.params, next_block)
                   if w.round < run.config.total_rounds]  # fmt: skip
        if not windows:
            return
        oldest = windows[0].round
        # In place: the other thread's duties add to the same set meanwhile.
        self._done.difference_update([d for d in list(self._done)
                                      if d[0] == run.run_id and d[1] < oldest])  # fmt: skip
        for window in windows:
            if screens:
                self._screens_due(run, window, next_block)
            else:
                self._round(run, window, next_block)

    def _round(self, run: Run, window: schedule.Window, next_block: int) -> None:
        round_ = window.round
        if window.opening <= next_block:
            if (run.run_id, round_, "open") not in self._done:
                self._open(run, window)
            return
        if next_block > window.selection:
            return
        action = "commit" if next_block <= window.end else "reveal"
        if (run.run_id, round_, action) in self._done:
            return
        beacon = self.poc.beacon(run.run_id, round_)
        mine = next((e for e in beacon.entries if e.verifier == self.address), None)
        self._beacon(run, window, action, mine)

    def _screens_due(self, run: Run, window: schedule.Window, next_block: int) -> None:
        if not window.end < next_block <= window.selection:
            return
        if (run.run_id, window.round, "screen") not in self._done:
            self._screen(run, window, self.poc.beacon(run.run_id, window.round), next_block)

    def _beacon(
        self, run: Run, window: schedule.Window, action: str, mine: BeaconEntry | None
    ) -> None:
        """Commit to this round's beacon secret (``action`` "commit") or open it ("reveal"),
        unless that is done (before a restart) or there is nothing to open."""
        if (mine is not None) if action == "commit" else (mine is None or bool(mine.secret)):
            self._done.add((run.run_id, window.round, action))
            return
        if action == "commit" and not self._on_duty(window):
            self._done.add((run.run_id, window.round, action))
            return
        secret = beacon_secret(self.wallet, run.run_id, window.round)
        fields = {"verifier": self.address, "run_id": run.run_id, "round": window.round}
        if action == "commit":
            msg = MsgCommitBeacon(**fields, commitment=encoding.commitment(secret, self.address))
        else:
            msg = MsgRevealBeacon(**fields, secret=secret)
        self._act(run.run_id, window, action, msg)

    def _on_duty(self, window: schedule.Window) -> bool:
        """Whether this verifier is registered and had not left the set when ``window`` began
        (the chain takes no beacon commitment from it otherwise)."""
        me = own_record(self.poc, self.address)
        return me is not None and (not me.left_height or me.left_height >= window.start)

    def _screen(self, run: Run, window: schedule.Window, beacon: Beacon, next_block: int) -> None:
        if not beacon.anchor:  # recorded one block after the commit window
            return
        voted = {s.host for s in self.poc.screens(run.run_id, window.round)
                 if any(v.verifier == self.address for v in s.votes)}  # fmt: skip
        candidates = committee.eligible(self.poc.verifiers(), window.start)
        size = self.params.screeners_per_commit
        todo = [c for c in self.poc.commits(run.run_id, window.round) if c.host not in voted
                and self.address in committee.screen_committee(
                    beacon.anchor, run.run_id, window.round, c.host, candidates, size)]  # fmt: skip
        patient = next_block < window.screen_patience
        # The run's hosts first, then any that left or was jailed since it committed: one gone
        # serves nothing, and its fetches' retries must not hold the others' votes past the
        # window (a cheater slashed in round 0 made every honest round-1 screen miss it).
        members = {h.address for h in self.poc.hosts(run_id=run.run_id)} if todo else set()
        accepted, unvoted = True, 0
        for group in (
            [c for c in todo if c.host in members], [c for c in todo if c.host not in members]
        ):  # fmt: skip
            votes = self._screen_until(run, window, beacon.anchor, group, patient)
            msgs = [MsgSubmitScreen(verifier=self.address, run_id=run.run_id, round=window.round,
                                    votes=votes[i : i + VOTES_PER_SCREEN_MSG])
                    for i in range(0, len(votes), VOTES_PER_SCREEN_MSG)]  # fmt: skip
            accepted = self._act(run.run_id, window, "screen", *msgs, complete=False) and accepted
            unvoted += len(group) - len(votes)
        # A commit left unvoted while patient (its host unreachable) is screened again.
        if accepted and (not patient or not unvoted):
            self._done.add((run.run_id, window.round, "screen"))

    def _screen_until(
        self, run: Run, window: schedule.Window, anchor: bytes, commits: list[RoundCommit],
        patient: bool,
    ) -> list[ScreenVote]:  # fmt: skip
        """Votes on ``commits``, screened a message's worth at a time until the next block is
        the last one a vote can land in: then what is screened goes out, and a commit left
        unscreened is replayed in full, as one nobody screened (a run whose screens are too
        slow for its window still lands the votes it finished)."""
        votes: list[ScreenVote] = []
        for first in range(0, len(commits), VOTES_PER_SCREEN_MSG):
            try:
                closing = self.poc.round_info(run.run_id).height + 1 >= window.selection
            except grpc.RpcError as err:  # votes finished before an outage still go out
                name = err.code().name
                log.warning("screens of %s round %d: chain error %s; sending the %d votes "
                            "finished", run.run_id, window.round, name, len(votes))  # fmt: skip
                break
            if closing:
                log.warning("screens of %s round %d: %d of %d commits left unscreened, the "
                            "window closes", run.run_id, window.round, len(commits) - first,
                            len(commits))  # fmt: skip
                break
            batch = commits[first : first + VOTES_PER_SCREEN_MSG]
            votes += self.screener(run, window.round, anchor, batch, patient)
        return votes

    def _open(self, run: Run, window: schedule.Window) -> None:
        """Open every vote of mine still sealed (done once none is left)."""
        round_ = window.round
        sealed = [c for c in self.poc.challenges(run.run_id, round_)
                  if any(v.verifier == self.address and not v.opened for v in c.votes)]  # fmt: skip
        if not sealed:
            self.ballots.forget_before(run.run_id, round_)
            self._done.add((run.run_id, round_, "open"))
            return
        openings = [m for m in map(self.ballots.opening, sealed) if m is not None]
        send_batched(self.send, openings, f"vote openings of {run.run_id} round {round_}",
                     window.resolution)  # fmt: skip


def ballots_file(home: Path) -> Path:
    """Where a verifier keeps its sealed votes (:class:`BallotBox`)."""
    return home / "ballots.sqlite"


def run_duties(
    poc: PocClient, stop: threading.Event, step: Callable[[], object], poll: float
) -> None:
    """Duties (``step``: the beacon's and openings, a run's screens or replays) until ``stop``,
    a pass a block (``poll`` seconds at most without pushed blocks); an error is logged and
    the next pass tries again (a duty missed is a slash or a lost vote, so the loop never ends
    on one)."""
    for _ in poc.blocks.passes(stop, poll):
        try:
            step()
        except grpc.RpcError as err:
            log.warning("%s: chain error %s; retrying", threading.current_thread().name,
                        err.code().name)  # fmt: skip
            stop.wait(1.0)
        except Exception:
            log.exception("%s failed; retrying", threading.current_thread().name)
            stop.wait(1.0)


class EarlyDuties:
    """A verifier's beacon and vote openings from the moment ``verifier run`` starts, before
    torch loads (5 s here) and the service exists: a restart within a beacon window of a few
    blocks otherwise withheld its secret (a slash) and left its sealed votes unopened. The
    service takes the duties over (:meth:`hand_over`) before it starts its own thread."""

    def __init__(self, duties: RoundDuties, poll: float):
        self.duties = duties
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=run_duties,
            args=(duties.poc, self._done, duties.step, poll),
            name="round-duties",
            daemon=True,
        )
        self._thread.start()

    @classmethod
    def start(
        cls, poc: PocClient, wallet: Wallet, send: Callable[..., object], home: Path,
        poll: float,
    ) -> EarlyDuties | None:  # fmt: skip
        """The duties of ``wallet``'s verifier, begun on a thread (None while no chain node
        answers: the service says so)."""
        try:
            box = BallotBox(ballots_file(home), str(wallet.address()))
            duties = RoundDuties(poc, wallet, send, None, box)
        except grpc.RpcError:
            poc.close()
            return None
        return cls(duties, poll)

    def hand_over(self) -> RoundDuties:
        """Stop the thread (it ends within a pass) and give its duties (what they did, the
        ballots they opened) to the service."""
        self._done.set()
        self._thread.join()
        return self.duties

"""A verifier's time-critical duties in every round, run beside its replays: commit to a beacon
secret while the round's commit window is open; once it closes, open the secret (a commitment
left unopened is slashed) and screen every commit of the round before the selection block."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable

from cosmpy.aerial.wallet import Wallet
from google.protobuf.message import Message

from dilochain.client import TxRefused
from dilochain.poc_client import PocClient
from dilochain.protocol import beacon as encoding
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitBeacon, MsgRevealBeacon, MsgSubmitScreen
from dilochain.protocol.pb.poc.v1.types_pb2 import Beacon, BeaconEntry, RoundCommit, Run

log = logging.getLogger(__name__)
SCREENS_PER_TX = 32

# (run, round, the round's beacon anchor, commits to screen) -> one vote per commit
Screener = Callable[[Run, int, bytes, list[RoundCommit]], list[MsgSubmitScreen]]


def beacon_secret(wallet: Wallet, run_id: str, round_: int) -> bytes:
    """This verifier's secret for a round: a keyed hash under its private key, so a restarted
    verifier opens exactly what it committed and nobody else can compute it."""
    key = wallet.signer().private_key_bytes
    return hmac.digest(key, f"dilochain-beacon/{run_id}/{round_}".encode(), "sha256")


class RoundDuties:
    """Beacon commitments and openings, and screens, for every active run, on time."""

    def __init__(
        self, poc: PocClient, wallet: Wallet, send: Callable[..., object], screener: Screener
    ):
        self.poc = poc
        self.wallet = wallet
        self.address = str(wallet.address())
        self.send = send
        self.screener = screener
        self._done: set[tuple[str, int, str]] = set()  # (run, round, "commit"|"reveal"|"screen")

    def _act(self, run_id: str, round_: int, action: str, *msgs: Message) -> None:
        try:
            for first in range(0, len(msgs), SCREENS_PER_TX):
                self.send(*msgs[first : first + SCREENS_PER_TX])
        except TxRefused as err:  # tried again at the next poll while the window is open
            log.warning("%s of %s round %d refused: %s", action, run_id, round_, err)
            return
        self._done.add((run_id, round_, action))

    def step(self) -> None:
        """Do whatever the next block's place in each run's schedule calls for."""
        for run in self.poc.runs():
            info = self.poc.round_info(run.run_id)
            next_block, round_ = info.height + 1, info.round
            if info.finished or not info.window_start <= next_block <= info.selection_height:
                continue
            self._done = {d for d in self._done if d[0] != run.run_id or d[1] >= round_}
            actions = ["commit"] if next_block <= info.window_end else ["reveal", "screen"]
            todo = [a for a in actions if (run.run_id, round_, a) not in self._done]
            if not todo:
                continue
            beacon = self.poc.beacon(run.run_id, round_)
            mine = next((e for e in beacon.entries if e.verifier == self.address), None)
            duties = {"commit": self._commit, "reveal": self._reveal, "screen": self._screen}
            for action in todo:
                duties[action](run, round_, beacon, mine)

    def _commit(self, run: Run, round_: int, beacon: Beacon, mine: BeaconEntry | None) -> None:
        if mine is not None:
            self._done.add((run.run_id, round_, "commit"))
            return
        sealed = encoding.commitment(beacon_secret(self.wallet, run.run_id, round_), self.address)
        self._act(
            run.run_id,
            round_,
            "commit",
            MsgCommitBeacon(
                verifier=self.address, run_id=run.run_id, round=round_, commitment=sealed
            ),
        )

    def _reveal(self, run: Run, round_: int, beacon: Beacon, mine: BeaconEntry | None) -> None:
        if mine is None or mine.secret:  # nothing to open (or opened before a restart)
            self._done.add((run.run_id, round_, "reveal"))
            return
        secret = beacon_secret(self.wallet, run.run_id, round_)
        self._act(
            run.run_id,
            round_,
            "reveal",
            MsgRevealBeacon(verifier=self.address, run_id=run.run_id, round=round_, secret=secret),
        )

    def _screen(self, run: Run, round_: int, beacon: Beacon, mine: BeaconEntry | None) -> None:
        if not beacon.anchor:  # recorded one block after the commit window
            return
        voted = {s.host for s in self.poc.screens(run.run_id, round_)
                 if any(v.verifier == self.address for v in s.votes)}  # fmt: skip
        todo = [c for c in self.poc.commits(run.run_id, round_) if c.host not in voted]
        votes = self.screener(run, round_, beacon.anchor, todo) if todo else []
        self._act(run.run_id, round_, "screen", *votes)

"""A verifier's part in every round's challenge beacon: commit to a secret while the round's
commit window is open, open it in the beacon window (a commitment left unopened is slashed)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable

from cosmpy.aerial.wallet import Wallet
from google.protobuf.message import Message

from dilochain.client import TxRefused
from dilochain.poc_client import PocClient
from dilochain.protocol import beacon as encoding
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCommitBeacon, MsgRevealBeacon

log = logging.getLogger(__name__)


def beacon_secret(wallet: Wallet, run_id: str, round_: int) -> bytes:
    """This verifier's secret for a round: a keyed hash under its private key, so a restarted
    verifier opens exactly what it committed and nobody else can compute it."""
    key = wallet.signer().private_key_bytes
    return hmac.digest(key, f"dilochain-beacon/{run_id}/{round_}".encode(), "sha256")


class BeaconParticipant:
    """Commits and opens this verifier's beacon secrets for every active run, on time."""

    def __init__(self, poc: PocClient, wallet: Wallet, send: Callable[..., object]):
        self.poc = poc
        self.wallet = wallet
        self.address = str(wallet.address())
        self.send = send
        self._done: set[tuple[str, int, str]] = set()  # (run, round, "commit" | "reveal")

    def _act(self, run_id: str, round_: int, action: str, msg: Message) -> None:
        try:
            self.send(msg)
        except TxRefused as err:  # tried again at the next poll while the window is open
            log.warning("beacon %s for %s round %d refused: %s", action, run_id, round_, err)
            return
        self._done.add((run_id, round_, action))

    def step(self) -> None:
        """Commit or open whatever the next block's place in each run's schedule calls for."""
        for run in self.poc.runs():
            info = self.poc.round_info(run.run_id)
            next_block, round_ = info.height + 1, info.round
            if info.finished or next_block < info.window_start:
                continue
            if next_block <= info.window_end:
                action = "commit"
            elif next_block <= info.selection_height:
                action = "reveal"
            else:
                continue
            self._done = {d for d in self._done if d[0] != run.run_id or d[1] >= round_}
            if (run.run_id, round_, action) in self._done:
                continue
            mine = [e for e in self.poc.beacon(run.run_id, round_).entries
                    if e.verifier == self.address]  # fmt: skip
            secret = beacon_secret(self.wallet, run.run_id, round_)
            if action == "commit" and not mine:
                sealed = encoding.commitment(secret, self.address)
                self._act(
                    run.run_id,
                    round_,
                    action,
                    MsgCommitBeacon(
                        verifier=self.address, run_id=run.run_id, round=round_, commitment=sealed
                    ),
                )
            elif action == "reveal" and mine and not mine[0].secret:
                self._act(
                    run.run_id,
                    round_,
                    action,
                    MsgRevealBeacon(
                        verifier=self.address, run_id=run.run_id, round=round_, secret=secret
                    ),
                )
            else:
                self._done.add((run.run_id, round_, action))

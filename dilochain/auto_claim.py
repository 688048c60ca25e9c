"""Auto-claim: a running node or verifier claims each closed epoch in which it earned
something, once, and withdraws what has vested of earlier claims.

It asks the chain before every claim (``Claimable.claimed``), so a restarted process never
claims twice and never sends a tx the chain would refuse as a double claim. A tx that fails for
a transient reason (not included, chain unreachable) is retried with backoff; one the chain
refuses is given up after a few tries, with one warning."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc
from cosmpy.aerial.tx_helpers import TxResponse
from prometheus_client import Counter

from dilochain.client import TxRefused
from dilochain.poc_client import PocClient
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgClaimReward, MsgWithdrawVested

# Registered by the roles that claim (node, verifier: metrics_http.role_registry).
REWARDS_PAID = Counter("dilochain_rewards_paid_udlc", "Rewards this process claimed and was paid",
                       registry=None)  # fmt: skip

log = logging.getLogger(__name__)
Send = Callable[..., TxResponse]  # signs and submits msgs in one tx; raises TxRefused


class AutoClaimer:
    """Claims ``address``'s rewards through ``send`` as epochs close."""

    def __init__(
        self, poc: PocClient, address: str, send: Send, *, poll_seconds: float = 2.0,
        max_attempts: int = 5, backoff_seconds: float = 2.0,
    ):  # fmt: skip
        self.poc = poc
        self.address = address
        self.send = send
        self.poll_seconds = poll_seconds
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.next_epoch = 0  # the first epoch not yet settled (claimed, empty or given up)
        self.attempts = 0  # failed tries at the current claim or withdrawal
        self.retry_at = 0.0  # monotonic time before which a failed tx is not retried
        self.seen_epoch = -1  # the current epoch at the last full pass
        self.paid = 0  # paid out by this claimer, in base units

    def step(self) -> None:
        """One pass: claim closed epochs in order, then withdraw what has vested."""
        if time.monotonic() < self.retry_at:
            return
        current = self.poc.epoch().epoch
        if current == self.seen_epoch and self.attempts == 0:
            return  # nothing closes or vests within an epoch
        while self.next_epoch < current:
            if not self._settle(self.next_epoch):
                return
            self.next_epoch += 1
        if self._withdraw():
            self.seen_epoch = current

    def _settle(self, epoch: int) -> bool:
        """Claim ``epoch`` if it pays and is unclaimed; False to try again later."""
        due = self.poc.claimable(address=self.address, epoch=epoch)
        if due.claimed or int(due.amount) == 0:
            return True
        msg = MsgClaimReward(claimer=self.address, epoch=epoch)
        return self._try(msg, "claim_reward", f"epoch {epoch} claimed")

    def _withdraw(self) -> bool:
        grants = self.poc.vesting(self.address)
        if sum(int(g.vested) - int(g.paid) for g in grants) <= 0:
            return True
        return self._try(MsgWithdrawVested(claimer=self.address), "withdraw_vested", "vested paid")

    def _try(self, msg, event: str, what: str) -> bool:
        """Send ``msg``; True when settled (paid, or given up after ``max_attempts``)."""
        try:
            response = self.send(msg)
        except TxRefused as err:
            if "already claimed" in str(err):
                return True
            return self._failed(what, str(err))
        found = response.events.get(event, {})
        amount = found.get("amount", "0udlc")
        paid = int("".join(ch for ch in amount if ch.isdigit()) or 0)
        self.paid += paid
        REWARDS_PAID.inc(paid)
        log.info("auto-claim: %s: paid %s now, %s vesting (tx %s)", what, amount,
                 found.get("vesting", "nothing"), response.hash)  # fmt: skip
        self.attempts = 0
        return True

    def _failed(self, what: str, reason: str) -> bool:
        self.attempts += 1
        if self.attempts >= self.max_attempts:
            log.warning("auto-claim: %s: giving up after %d tries: %s; claim it with "
                        "`dilochain rewards claim`", what, self.attempts, reason)  # fmt: skip
            self.attempts = 0
            return True
        delay = self.backoff_seconds * 2 ** (self.attempts - 1)
        log.warning("auto-claim: %s failed (%s); retrying in %.0f s", what, reason, delay)
        self.retry_at = time.monotonic() + delay
        return False

    def run(self, stop: threading.Event) -> None:
        """Pass every ``poll_seconds`` until ``stop``; a chain that does not answer is a
        transient error."""
        while not stop.is_set():
            try:
                self.step()
            except grpc.RpcError as err:
                log.warning("auto-claim: chain unreachable (%s); will retry", err.code())
            stop.wait(self.poll_seconds)

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run in a daemon thread."""
        thread = threading.Thread(target=self.run, args=(stop,), name="auto-claim", daemon=True)
        thread.start()
        return thread

"""``client.submit``'s wait for inclusion, against a scripted chain: it gives up on a tx once
the chain is past the last block of the tx's window (not on a wall clock, so a halt closes no
window), sends the same bytes again when no block includes them, and finds by hash a tx whose
broadcast answer was lost."""

from __future__ import annotations

import time
from types import SimpleNamespace

import grpc
import pytest
from cosmpy.aerial.exceptions import NotFoundError
from cosmpy.aerial.types import Account

from dilochain import client as client_module
from dilochain.client import RESEND_BLOCKS, Sender, TxRefused, submit
from dilochain.protocol.hashing import tx_hash
from dilochain.testutil import wallet

pytestmark = pytest.mark.wall_clock  # asserts how long things take: see conftest

RAW = b"signed tx bytes"
DIGEST = tx_hash(RAW).hex().upper()


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


class Chain:
    """A chain whose height moves as ``heights`` say (one value per question, the last one
    repeated), that includes the tx once it has been broadcast ``include_on`` times (never if
    None), and whose ``broadcast_fails`` first broadcasts lose their answer."""

    def __init__(self, heights, include_on=None, broadcast_fails=0, included_anyway=False):
        self.heights = list(heights)
        self.include_on = include_on
        self.broadcast_fails = broadcast_fails
        self.included_anyway = included_anyway  # a lost answer whose tx landed all the same
        self.broadcasts: list[bytes] = []
        self.sent_at: list[int] = []  # the height at each broadcast
        self.txs = SimpleNamespace(BroadcastTx=self._broadcast)
        self.height = self.heights[0]

    def query_account(self, address) -> Account:
        return Account(address, number=7, sequence=0)

    def query_height(self) -> int:
        self.height = self.heights.pop(0) if len(self.heights) > 1 else self.heights[0]
        return self.height

    def _broadcast(self, request):
        self.broadcasts.append(request.tx_bytes)
        self.sent_at.append(self.height)
        if len(self.broadcasts) <= self.broadcast_fails:
            raise Unavailable()
        return SimpleNamespace(tx_response=SimpleNamespace(code=0, raw_log="", txhash=DIGEST))

    def query_tx(self, digest: str):
        assert digest == DIGEST
        sent = len(self.broadcasts)
        if (self.include_on is not None and sent >= self.include_on) or (
            self.included_anyway and sent
        ):
            return SimpleNamespace(code=0, hash=digest, height=self.height, raw_log="")
        raise NotFoundError()


@pytest.fixture(autouse=True)
def signed(monkeypatch):
    monkeypatch.setattr(client_module, "_signed", lambda *args, **kwargs: RAW)


def test_a_tx_is_given_up_once_its_window_has_closed():
    chain = Chain(heights=[10, 11, 12, 13])
    started = time.monotonic()
    with pytest.raises(TxRefused, match="now it cannot be"):
        submit(chain, wallet(1), timeout=30, poll=0.05, until_height=12)
    assert chain.height == 13
    assert time.monotonic() - started < 10


def test_without_a_window_a_tx_is_waited_for_until_its_timeout():
    chain = Chain(heights=[10])
    started = time.monotonic()
    with pytest.raises(TxRefused, match="within 2s"):
        submit(chain, wallet(1), timeout=2, poll=0.05)
    assert time.monotonic() - started >= 2


def test_a_tx_no_block_includes_is_sent_again_as_the_same_bytes():
    """A node that took the tx and went down with its mempool: the chain moves on without it,
    so after RESEND_BLOCKS blocks the same bytes go out again (to whichever node answers)."""
    chain = Chain(heights=list(range(10, 10 + 3 * RESEND_BLOCKS)), include_on=2)
    result = submit(chain, wallet(1), timeout=30, poll=0.05, until_height=100)
    assert result.hash == DIGEST and chain.broadcasts == [RAW, RAW]


def test_near_its_window_s_end_a_tx_no_block_includes_is_sent_again_every_block():
    """First sent at 12 for a window ending at 15: a resend after RESEND_BLOCKS could land at
    16 at the earliest, too late; so it goes again at every block of what is left."""
    chain = Chain(heights=[h for h in range(12, 20) for _ in "ab"])  # each asked twice
    with pytest.raises(TxRefused, match="now it cannot be"):
        submit(chain, wallet(1), timeout=30, poll=0.05, until_height=15)
    assert chain.sent_at == [12, 13, 14, 15] and set(chain.broadcasts) == {RAW}


def test_a_lost_broadcast_answer_is_looked_up_by_hash():
    chain = Chain(heights=[10], broadcast_fails=1, included_anyway=True)
    assert submit(chain, wallet(1), timeout=5, poll=0.05).hash == DIGEST
    assert chain.broadcasts == [RAW]


def test_a_halt_closes_no_window():
    """The chain stops at block 11 for longer than the wall-clock timeout, then goes on and
    includes the tx in its window: it is counted, not reported refused."""
    halt = [11] * 4  # about 4 seconds at one height question a second
    chain = Chain(heights=[10, *halt, 12, 13], include_on=2)
    started = time.monotonic()
    result = submit(chain, wallet(1), timeout=1, poll=0.05, until_height=15)
    assert result.hash == DIGEST and time.monotonic() - started > 3


class Scripted(Chain):
    """CheckTx answers as ``answers`` say, one per broadcast (the last one repeated); txs in
    ``included`` are in a block."""

    def __init__(self, heights, answers, included=()):
        super().__init__(heights)
        self.answers = list(answers)
        self.included = set(included)

    def _broadcast(self, request):
        self.broadcasts.append(request.tx_bytes)
        code, log = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if code == 0:
            self.included.add(tx_hash(request.tx_bytes).hex().upper())
        return SimpleNamespace(tx_response=SimpleNamespace(code=code, raw_log=log, txhash=""))

    def query_tx(self, digest: str):
        if digest in self.included:
            return SimpleNamespace(code=0, hash=digest, height=self.height, raw_log="")
        raise NotFoundError()


TAKEN = (32, "account sequence mismatch: incorrect account sequence")


def test_a_tx_whose_sequence_it_took_itself_is_found_not_signed_again(monkeypatch):
    """A failover resent the bytes to a node that already has them in a block: that node
    answers 'incorrect account sequence'; the tx is looked up, not signed twice."""
    chain = Scripted([10], [TAKEN], included={DIGEST})
    assert submit(chain, wallet(1), timeout=5, poll=0.05).hash == DIGEST
    assert chain.broadcasts == [RAW]


def test_a_full_mempool_or_an_unreachable_cometbft_is_tried_again(monkeypatch):
    chain = Scripted(list(range(10, 30)), [(20, "mempool is full"), (1, "connection refused"),
                                           (0, "")])  # fmt: skip
    assert submit(chain, wallet(1), timeout=30, poll=0.05, until_height=100).hash == DIGEST
    assert chain.broadcasts == [RAW, RAW, RAW]


def test_a_sequence_another_tx_of_the_key_took_is_signed_again(monkeypatch):
    signed = iter([b"first", b"second"])
    monkeypatch.setattr(client_module, "_signed", lambda *args, **kwargs: next(signed))
    # Taken into a mempool that then lost it; sent again: another tx took its sequence.
    chain = Scripted(list(range(10, 40)), [(19, "tx already exists in cache"), TAKEN, (0, "")])
    result = submit(chain, wallet(1), timeout=30, poll=0.05, until_height=100)
    assert result.hash == tx_hash(b"second").hex().upper()


def test_a_sequence_left_by_a_dropped_tx_is_signed_at_the_one_the_chain_wants(monkeypatch):
    """This process counted sequence 5 next, but a tx of its own left every mempool: CheckTx
    says which one is due, and the tx is signed again at that one, at once."""
    sequences: list[int] = []

    def signed(client, wallet, msgs, memo=None, account=None):
        sequences.append(account.sequence)
        return b"seq%d" % account.sequence

    monkeypatch.setattr(client_module, "_signed", signed)
    wrong = (32, "account sequence mismatch, expected 3, got 5: incorrect account sequence")
    chain = Scripted(list(range(10, 40)), [wrong, (0, "")])
    sender = Sender(chain, wallet(1))
    sender._next = Account(wallet(1).address(), number=7, sequence=5)
    result = sender.submit(timeout=30, poll=0.05, until_height=100)
    assert sequences == [5, 3] and result.hash == tx_hash(b"seq3").hex().upper()
    assert sender._next.sequence == 4  # the next tx of the key is signed after this one


def test_a_tx_queued_behind_another_s_signing_is_waited_for_from_its_turn(monkeypatch):
    """Two threads of one process: the second waits for the signing lock while the first's
    signing is slow (retries through an outage, say). Its timeout counts from its turn, so a tx
    it then sends is waited for, not reported refused the moment it is in the mempool."""
    import threading

    turn = iter([2.5, 0.0])  # the first signing takes longer than the second's timeout

    def signed(*args, **kwargs):
        time.sleep(next(turn))
        return RAW

    class LateBlock(Chain):
        lookups = 0

        def query_tx(self, digest: str):  # in a block from the third look on
            self.lookups += 1
            if self.lookups < 3:
                raise NotFoundError()
            return SimpleNamespace(code=0, hash=digest, height=self.height, raw_log="")

    monkeypatch.setattr(client_module, "_signed", signed)
    sender = Sender(LateBlock(heights=[10]), wallet(1))
    first = threading.Thread(target=sender.submit, kwargs={"timeout": 30, "poll": 0.05})
    first.start()
    time.sleep(0.2)  # the first holds the signing lock
    assert sender.submit(timeout=2, poll=0.05).hash == DIGEST
    first.join(30)

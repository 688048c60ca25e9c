"""``client.submit``'s wait for inclusion: it gives up on a tx once the chain is past the last
block of the window the tx is for, instead of waiting out its timeout."""

from __future__ import annotations

import time

import pytest
from cosmpy.aerial.exceptions import QueryTimeoutError

from dilochain import client as client_module
from dilochain.client import TxRefused, submit
from dilochain.testutil import wallet


class NeverIncluded:
    """A broadcast tx that the mempool dropped: waiting for it always times out."""

    tx_hash = "AB" * 32
    response = None

    def wait_to_complete(self, timeout: float, poll_period: float) -> None:
        time.sleep(timeout)
        raise QueryTimeoutError()


class Chain:
    """A ledger client whose chain grows by one block each time its height is asked."""

    def __init__(self, height: int):
        self.height = height

    def query_height(self) -> int:
        self.height += 1
        return self.height


@pytest.fixture
def dropped(monkeypatch):
    monkeypatch.setattr(client_module, "broadcast", lambda *args: NeverIncluded())


def test_a_tx_is_given_up_once_its_window_has_closed(dropped):
    chain = Chain(height=10)
    started = time.monotonic()
    with pytest.raises(TxRefused, match="now it cannot be"):
        submit(chain, wallet(1), timeout=30, poll=0.05, until_height=12)
    assert chain.height == 13  # asked once a second until the chain was past block 12
    assert time.monotonic() - started < 5


def test_without_a_window_a_tx_is_waited_for_until_its_timeout(dropped):
    chain = Chain(height=10)
    with pytest.raises(TxRefused, match="within 2s"):
        submit(chain, wallet(1), timeout=2, poll=0.05)
    assert chain.height == 10  # never asked

"""Property tests: no byte string crashes the chain; valid txs decode to what was signed."""

from __future__ import annotations

import pytest
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dilochain.chain.app import MSG_SPECS
from dilochain.chain.errors import TxError
from dilochain.chain.tx import decode_tx
from dilochain.protocol.params import DENOM, AuthParams
from dilochain.testutil import local_chain, signed_tx, wallet

ALICE, BOB = wallet(11), wallet(12)
REGISTRY = {spec.type_url: spec for spec in MSG_SPECS}
SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    c = local_chain(tmp_path_factory.mktemp("props"), {str(ALICE.address()): 10**9})
    yield c
    c.app.store.close()


@pytest.fixture(scope="module")
def valid_tx() -> bytes:
    msg = MsgSend(
        from_address=str(ALICE.address()),
        to_address=str(BOB.address()),
        amount=[Coin(denom=DENOM, amount="3")],
    )
    return signed_tx(ALICE, [msg], sequence=0, account_number=0)


@SETTINGS
@given(st.binary(max_size=2048))
def test_random_bytes_are_rejected_not_crashing(chain, data):
    for result in (chain.app.check_tx(data), chain.app.simulate(data)):
        assert result.code != 0
        assert result.raw_log


@SETTINGS
@given(st.data())
def test_mutated_valid_tx_never_crashes(chain, valid_tx, data):
    raw = bytearray(valid_tx)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    result = chain.app.simulate(bytes(raw))
    assert isinstance(result.code, int)
    if bytes(raw) != valid_tx:
        # A mutated tx may still parse, but its signature no longer verifies.
        assert chain.app.check_tx(bytes(raw)).code != 0


@settings(max_examples=50, deadline=None)
@given(
    amounts=st.lists(st.integers(1, 10**30), min_size=1, max_size=3),
    memo=st.text(max_size=100),
    sequence=st.integers(0, 2**40),
)
def test_signed_txs_decode_to_what_was_signed(amounts, memo, sequence):
    msgs = [
        MsgSend(
            from_address=str(ALICE.address()),
            to_address=str(BOB.address()),
            amount=[Coin(denom=DENOM, amount=str(a))],
        )
        for a in amounts
    ]
    raw = signed_tx(ALICE, msgs, sequence=sequence, account_number=3, memo=memo)
    tx = decode_tx(raw, REGISTRY, AuthParams())
    assert [m for _, m in tx.msgs] == msgs
    assert tx.signers == [str(ALICE.address())]
    assert tx.body.memo == memo
    assert tx.auth_info.signer_infos[0].sequence == sequence


def test_oversized_tx_is_rejected():
    with pytest.raises(TxError) as err:
        decode_tx(b"\x00" * 100, REGISTRY, AuthParams(max_tx_bytes=10))
    assert err.value.code == 21

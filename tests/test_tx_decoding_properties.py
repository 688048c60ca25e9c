"""Property tests: no byte string crashes the chain; valid txs decode to what was signed."""

from __future__ import annotations

import pytest
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import TxRaw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dilochain.chain.app import MSG_SPECS
from dilochain.chain.errors import TxError, codes
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


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


unknown_fields = st.one_of(
    st.builds(lambda n, v: _varint(n << 3) + _varint(v), st.integers(4, 2**29 - 1),
              st.integers(0, 2**64 - 1)),
    st.builds(lambda n, b: _field(n, b), st.integers(4, 2**29 - 1), st.binary(max_size=8)),
    st.builds(lambda n, b: _varint(n << 3 | 5) + b, st.integers(4, 2**29 - 1),
              st.binary(min_size=4, max_size=4)),
)  # fmt: skip


@SETTINGS
@given(st.data())
def test_a_tx_raw_that_is_not_its_canonical_encoding_is_refused(chain, valid_tx, data):
    """Whatever changes a signed tx's envelope without changing what was signed (an unknown
    field anywhere, a field repeated, reordered, explicitly empty, or its length padded) is
    refused, so no relay can give a tx a second hash; the canonical bytes are accepted."""
    tx = TxRaw.FromString(valid_tx)
    fields = [_field(1, tx.body_bytes), _field(2, tx.auth_info_bytes),
              *[_field(3, s) for s in tx.signatures]]  # fmt: skip
    assert b"".join(fields) == valid_tx
    at = data.draw(st.integers(0, len(fields)))
    variant = data.draw(st.sampled_from(["unknown", "repeated", "reordered", "empty", "padded"]))
    if variant == "unknown":
        fields.insert(at, data.draw(unknown_fields))
    elif variant == "repeated":
        fields.insert(at, data.draw(st.sampled_from(fields[:2])))
    elif variant == "reordered":
        fields[0], fields[1] = fields[1], fields[0]
    elif variant == "empty":
        fields.insert(at, _field(data.draw(st.sampled_from([1, 2])), b""))
    else:
        body = tx.body_bytes
        fields[0] = b"\x0a" + _varint(len(body))[:-1] + bytes([_varint(len(body))[-1] | 0x80])
        fields[0] += b"\x00" + body
    raw = b"".join(fields)
    assert raw != valid_tx
    with pytest.raises(TxError) as err:
        decode_tx(raw, REGISTRY, AuthParams())
    assert err.value.code == codes.TX_DECODE and "TxRaw" in err.value.log
    assert chain.app.check_tx(raw).code == codes.TX_DECODE
    assert decode_tx(valid_tx, REGISTRY, AuthParams()).raw == valid_tx


def test_oversized_tx_is_rejected():
    with pytest.raises(TxError) as err:
        decode_tx(b"\x00" * 100, REGISTRY, AuthParams(max_tx_bytes=10))
    assert err.value.code == 21


@SETTINGS
@given(st.data())
def test_fields_the_chain_does_not_know_are_refused_anywhere_in_a_tx(chain, valid_tx, data):
    """An unknown field in a tx's auth info, its body or one of its messages (padding that a
    signer adds and pays for only as bytes) is refused; the SDK lets a body's "non-critical"
    ones (bit 11 of the number set) through, for extensions this chain does not have."""
    from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import TxBody

    tx = TxRaw.FromString(valid_tx)
    where = data.draw(st.sampled_from(["body", "auth_info", "message", "coin"]))
    known = {1023, 2047}  # TxBody's extension options; every other message's fields are < 20
    number = data.draw(st.integers(20, 2**29 - 1).filter(lambda n: n not in known))
    padding = _field(number, data.draw(st.binary(max_size=64)))
    body = TxBody.FromString(tx.body_bytes)
    if where == "body":
        tx.body_bytes += padding
    elif where == "auth_info":
        tx.auth_info_bytes += padding
    else:
        send = MsgSend.FromString(body.messages[0].value)
        if where == "coin":  # a message inside the message
            send.amount[0].MergeFromString(padding)
        body.messages[0].value = send.SerializeToString() + (padding if where == "message" else b"")
        tx.body_bytes = body.SerializeToString()
    raw = tx.SerializeToString()
    with pytest.raises(TxError) as err:
        decode_tx(raw, REGISTRY, AuthParams())
    assert err.value.code == codes.TX_DECODE and "fields the chain does not know" in err.value.log
    assert chain.app.check_tx(raw).code == codes.TX_DECODE

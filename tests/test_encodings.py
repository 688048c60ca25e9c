"""Addresses, coins and secp256k1 signatures."""

from __future__ import annotations

import hashlib

import pytest
from cosmpy.crypto.address import Address
from cosmpy.crypto.keypairs import PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from dilochain.chain.signature import SECP256K1_ORDER, valid_public_key, verify_secp256k1
from dilochain.genesis.coins import format_coins, parse_coins
from dilochain.protocol.address import (
    address_from_pubkey,
    decode_address,
    encode_address,
    module_address,
)


def test_address_matches_cosmpy():
    key = PrivateKey(b"\x01" * 32)
    public = key.public_key.public_key_bytes
    assert address_from_pubkey(public) == str(Address(key.public_key, prefix="dilo"))


@given(st.binary(min_size=20, max_size=20))
def test_address_round_trip(raw):
    assert decode_address(encode_address(raw)) == raw


@pytest.mark.parametrize(
    "bad",
    ["", "dilo1", "cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu", "dilo1qqqq", "x" * 50,
     encode_address(bytes(20)).upper()],  # the last: valid bech32, not the canonical form
)  # fmt: skip
def test_bad_addresses_are_refused(bad):
    with pytest.raises(ValueError):
        decode_address(bad)


def test_module_address_is_sdk_style():
    assert (
        decode_address(module_address("fee_collector"))
        == (hashlib.sha256(b"fee_collector").digest()[:20])
    )


# Denoms "e" + digit are refused ("1e30udlc" reads as an exponent but would be 1 "e30udlc"),
# and the display unit "dlc" (a user writing 10DLC meant udlc).
DENOMS = st.from_regex(r"(?!e[0-9])(?!dlc\Z)[a-z][a-z0-9]{2,10}", fullmatch=True)


@given(st.dictionaries(DENOMS, st.integers(0, 2**256 - 1), min_size=1))
def test_coins_round_trip(coins):
    assert parse_coins(format_coins(coins)) == coins


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "udlc",
        "10",
        "-5udlc",
        "1.5udlc",
        "5udlc,5udlc",
        "5u",
        "1e30udlc",
        "\u0661\u0660udlc",
        "\uff15udlc",
        f"{2**256}udlc",
    ],
)
def test_bad_coins_are_refused(bad):
    with pytest.raises(ValueError):
        parse_coins(bad)


def test_the_display_unit_is_not_a_denom():
    """``10DLC`` was taken as 10 of a denom "DLC" nobody can use (in genesis, in a send)."""
    for written in ("10DLC", "10dlc", "5udlc,10DLC"):
        with pytest.raises(ValueError, match=r"display unit: write the amount in udlc \(10"):
            parse_coins(written)


@given(st.binary(max_size=200), st.integers(1, 2**255))
def test_cosmpy_signatures_verify(message, secret):
    key = PrivateKey((secret % (SECP256K1_ORDER - 1) + 1).to_bytes(32, "big"))
    signature = key.sign(message)
    public = key.public_key.public_key_bytes
    assert verify_secp256k1(public, message, signature)
    assert not verify_secp256k1(public, message + b"!", signature)
    s = int.from_bytes(signature[32:], "big")
    high = signature[:32] + (SECP256K1_ORDER - s).to_bytes(32, "big")
    assert not verify_secp256k1(public, message, high)  # malleated high-S form


def test_invalid_public_keys():
    assert not valid_public_key(b"\x02" + b"\x00" * 32)
    assert not valid_public_key(b"\x05" * 33)
    assert not verify_secp256k1(b"\x05" * 33, b"m", b"\x01" * 64)

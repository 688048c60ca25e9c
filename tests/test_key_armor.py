"""``dilochain.key_armor``: the Cosmos SDK's armored private keys, both ways, and what a
damaged or foreign file gives."""

from __future__ import annotations

import base64

import pytest

from dilochain.key_armor import ArmorError, _crc24, armor_private_key, unarmor_private_key

RAW = bytes(range(1, 33))


def _corrupt_crc(armor: str) -> str:
    lines = armor.splitlines()
    lines[-2] = "=AAAA"
    return "\n".join(lines)


def test_a_key_survives_the_armor_and_its_crc_is_openpgp_s():
    armor = armor_private_key(RAW, "phrase")
    lines = armor.splitlines()
    assert lines[:4] == ["-----BEGIN TENDERMINT PRIVATE KEY-----", "kdf: bcrypt",
                         lines[2], "type: secp256k1"]  # fmt: skip
    assert len(bytes.fromhex(lines[2].removeprefix("salt: "))) == 16
    sealed = base64.b64decode("".join(lines[5:-2]))
    assert lines[-2] == "=" + base64.b64encode(_crc24(sealed).to_bytes(3, "big")).decode()
    assert _crc24(b"") == 0xB704CE  # RFC 4880's initial value
    assert unarmor_private_key("\ufeff\n" + armor + "\n\n", "phrase") == RAW
    assert armor != armor_private_key(RAW, "phrase")  # a fresh salt and nonce each time


def test_a_long_passphrase_counts_its_first_72_bytes_as_bcrypt_does():
    long = "x" * 72
    armor = armor_private_key(RAW, long + "tail")
    assert unarmor_private_key(armor, long + "another tail") == RAW
    with pytest.raises(ArmorError, match="wrong passphrase"):
        unarmor_private_key(armor, long[:-1])


@pytest.mark.parametrize(("damage", "needle"), [
    (lambda a: a.replace("kdf: bcrypt", "kdf: argon9"), "key derivation"),
    (lambda a: a.replace("type: secp256k1", "type: ed25519"), "not secp256k1"),
    (lambda a: a.rsplit("-----END", 1)[0], "cut short"),
    (lambda a: "hello\n" + a, "not an armored private key"),
    (_corrupt_crc, "CRC-24"),
])  # fmt: skip
def test_a_damaged_or_foreign_armor_is_refused_in_one_line(damage, needle):
    with pytest.raises(ArmorError, match=needle):
        unarmor_private_key(damage(armor_private_key(RAW, "phrase")), "phrase")


def test_only_a_secp256k1_key_is_armored_and_not_under_an_empty_passphrase():
    with pytest.raises(ArmorError, match="32 bytes"):
        armor_private_key(RAW[:31], "phrase")
    with pytest.raises(ArmorError, match="empty passphrase"):
        armor_private_key(RAW, "")

"""Private keys in the ASCII armor the Cosmos SDK's ``keys export`` writes and ``keys import``
reads, so a key moves between dilochain and any SDK chain's CLI: the key's amino bytes sealed
with XSalsa20-Poly1305 (PyNaCl's ``SecretBox``, a random nonce in front) under
SHA-256(bcrypt(passphrase, salt, cost 12)), in an OpenPGP-style armor block with ``kdf``,
``salt`` and ``type`` headers and a CRC-24 line. Reading is cosmpy's
(``PrivateKey.from_bcrypt_key``)."""

from __future__ import annotations

import base64
import hashlib
import io
import os

import bcrypt
from cosmpy.crypto.keypairs import PrivateKey
from nacl.secret import SecretBox

BLOCK = "TENDERMINT PRIVATE KEY"
BCRYPT_COST = 12
# Amino's prefix of tendermint/PrivKeySecp256k1 and the key's length: what the SDK encrypts.
_AMINO_SECP256K1 = bytes.fromhex("e1b0f79b20")
_BCRYPT_ALPHABET = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
)
_LINE = 64  # base64 characters per body line, as Go's armor writes them


class ArmorError(ValueError):
    """Not an armored secp256k1 key, or not this passphrase's."""


def _crc24(data: bytes) -> int:
    """OpenPGP's CRC-24 (RFC 4880, 6.1), the armor's checksum."""
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def _key(passphrase: str, salt: bytes) -> bytes:
    """SHA-256 of bcrypt's hash of ``passphrase`` with ``salt`` (16 bytes), as the SDK derives
    the sealing key."""
    encoded = base64.b64encode(salt)[:22].translate(_BCRYPT_ALPHABET)
    hashed = bcrypt.hashpw(passphrase.encode(), b"$2a$%02d$" % BCRYPT_COST + encoded)
    return hashlib.sha256(hashed).digest()


def armor_private_key(raw: bytes, passphrase: str) -> str:
    """The armored form of secp256k1 private key ``raw`` (32 bytes) under ``passphrase``."""
    if len(raw) != 32:
        raise ArmorError(f"a secp256k1 private key is 32 bytes, not {len(raw)}")
    if not passphrase:
        raise ArmorError("an empty passphrase protects nothing")
    salt = os.urandom(16)
    sealed = SecretBox(_key(passphrase, salt)).encrypt(_AMINO_SECP256K1 + raw)  # nonce first
    body = base64.b64encode(bytes(sealed)).decode()
    lines = [f"-----BEGIN {BLOCK}-----", "kdf: bcrypt", f"salt: {salt.hex().upper()}",
             "type: secp256k1", ""]  # fmt: skip
    lines += [body[i : i + _LINE] for i in range(0, len(body), _LINE)]
    checksum = base64.b64encode(_crc24(bytes(sealed)).to_bytes(3, "big")).decode()
    lines += [f"={checksum}", f"-----END {BLOCK}-----"]
    return "\n".join(lines) + "\n"


def unarmor_private_key(text: str, passphrase: str) -> bytes:
    """The 32-byte secp256k1 private key an armored block holds; :class:`ArmorError` if the
    block is malformed, of another key type, or not sealed under ``passphrase``."""
    try:
        key = PrivateKey.from_bcrypt_key(io.BytesIO(text.encode()), passphrase)
    except ValueError as err:  # cosmpy's ArmorError is one
        raise ArmorError(str(err)) from None
    return key.private_key_bytes

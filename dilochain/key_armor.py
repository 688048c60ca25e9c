"""Private keys in the ASCII armor the Cosmos SDK's ``keys export`` writes and ``keys import``
reads, so a key moves between dilochain and any SDK chain's CLI: the key's amino bytes sealed
with XSalsa20-Poly1305 (PyNaCl's ``SecretBox``, a random nonce in front) under
SHA-256(bcrypt(passphrase, salt, cost 12)), in an OpenPGP-style armor block with ``kdf``,
``salt`` and ``type`` headers and a CRC-24 line. Passphrases count their first 72 bytes, as
bcrypt (and the SDK's) does."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re

import bcrypt
from nacl.exceptions import CryptoError
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
_BCRYPT_MAX = 72  # bcrypt reads no further into a passphrase
_HEADER = re.compile(r"^([A-Za-z-]+):\s*(.*)$")
# secp256k1's group order: a private key is in [1, N).
_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


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
    secret = passphrase.encode()[:_BCRYPT_MAX]
    hashed = bcrypt.hashpw(secret, b"$2a$%02d$" % BCRYPT_COST + encoded)
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
    block is malformed or damaged, of another key type, or not sealed under ``passphrase``."""
    lines = [line.strip() for line in text.lstrip("\ufeff").strip().splitlines()]
    if len(lines) < 3 or lines[0] != f"-----BEGIN {BLOCK}-----":
        raise ArmorError(f"not an armored private key (no -----BEGIN {BLOCK}----- line)")
    if lines[-1] != f"-----END {BLOCK}-----":
        raise ArmorError(f"the armor is cut short (no -----END {BLOCK}----- line)")
    headers, body = {}, lines[1:-1]
    while body and (found := _HEADER.match(body[0])):
        headers[found[1].lower()] = found[2]
        body = body[1:]
    checksum = body.pop()[1:] if body and body[-1].startswith("=") else None
    if headers.get("kdf", "").lower() != "bcrypt":
        raise ArmorError(f"unsupported key derivation {headers.get('kdf', '')[:20]!r} (bcrypt)")
    if headers.get("type", "secp256k1").lower() != "secp256k1":
        raise ArmorError(f"a {headers['type'][:20]!r} key, not secp256k1")
    try:
        salt = bytes.fromhex(headers.get("salt", ""))
        sealed = base64.b64decode("".join(body), validate=True)
        expected = base64.b64decode(checksum, validate=True) if checksum else None
    except (ValueError, binascii.Error):
        raise ArmorError("the armor is damaged (salt or body not hex/base64)") from None
    if len(salt) != 16:
        raise ArmorError("the armor's salt is not 16 bytes")
    if expected is not None and expected != _crc24(sealed).to_bytes(3, "big"):
        raise ArmorError("the armor is damaged (its CRC-24 does not match)")
    try:
        plain = SecretBox(_key(passphrase, salt)).decrypt(sealed)
    except (CryptoError, ValueError):
        raise ArmorError("wrong passphrase, or the key file is damaged") from None
    raw = plain[len(_AMINO_SECP256K1) :]
    valid = len(raw) == 32 and 0 < int.from_bytes(raw, "big") < _ORDER
    if not plain.startswith(_AMINO_SECP256K1) or not valid:
        raise ArmorError("the sealed key is not a secp256k1 private key")
    return raw

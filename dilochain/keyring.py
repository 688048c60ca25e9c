"""An encrypted file keyring for secp256k1 account keys.

Each key is a JSON file ``NAME.json`` holding the address and public key in the clear and the
private key sealed with AES-256-GCM under a key derived from the keyring password with scrypt.
``.keyhash`` holds a scrypt verifier of the password, so a wrong password is caught at once.
Keys come from BIP-39 mnemonics on the Cosmos path m/44'/118'/0'/0/0, via cosmpy.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cosmpy.aerial.wallet import LocalWallet
from cosmpy.crypto.keypairs import PrivateKey
from cosmpy.mnemonic import (
    derive_child_key_from_mnemonic,
    generate_mnemonic,
    validate_mnemonic_and_normalise,
)
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from dilochain.protocol.address import ADDRESS_PREFIX

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_SCRYPT_N = 2**15


def _read_json(path: Path, fields: tuple[str, ...]) -> dict:
    """A keyring file's JSON object with ``fields``; a damaged file is one clear error."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise KeyringError(f"{path} is unreadable ({err}); restore it from a backup") from None
    if not isinstance(data, dict) or any(field not in data for field in fields):
        raise KeyringError(f"{path} is damaged (fields missing); restore it from a backup")
    return data


class KeyringError(Exception):
    """A keyring operation the user asked for cannot be done (message says why)."""


@dataclass(frozen=True)
class KeyInfo:
    """The public part of a stored key."""

    name: str
    address: str
    pubkey: str


def _derive(password: str, salt: bytes) -> bytes:
    return Scrypt(salt=salt, length=32, n=_SCRYPT_N, r=8, p=1).derive(password.encode())


class Keyring:
    """The keys in one directory, all sealed with one password."""

    def __init__(self, directory: Path):
        self.directory = directory

    def _path(self, name: str) -> Path:
        if not _NAME.match(name):
            raise KeyringError(f"invalid key name {name!r} (letters, digits, '.', '_', '-')")
        return self.directory / f"{name}.json"

    def _check_password(self, password: str) -> None:
        verifier = self.directory / ".keyhash"
        if not verifier.exists():
            if not password:
                raise KeyringError("the keyring password must not be empty")
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            salt = os.urandom(16)
            blob = {"salt": salt.hex(), "hash": _derive(password, salt).hex()}
            verifier.write_text(json.dumps(blob))
            os.chmod(verifier, 0o600)
            return
        blob = _read_json(verifier, ("salt", "hash"))
        try:
            expected = _derive(password, bytes.fromhex(blob["salt"])).hex()
        except (ValueError, TypeError):
            raise KeyringError(f"{verifier} is damaged; restore it from a backup") from None
        if not hmac.compare_digest(expected, str(blob["hash"])):
            raise KeyringError("wrong keyring password")

    def add(self, name: str, password: str, mnemonic: str | None = None) -> tuple[KeyInfo, str]:
        """Store a new key (from ``mnemonic``, or a fresh 24-word one); returns it and the words."""
        path = self._path(name)
        if path.exists():
            raise KeyringError(f"key {name!r} already exists")
        if mnemonic is None:
            mnemonic = generate_mnemonic(256)
        try:
            mnemonic = validate_mnemonic_and_normalise(mnemonic)
        except ValueError as err:
            raise KeyringError(f"invalid mnemonic: {err}") from None
        return self._store(name, password, derive_child_key_from_mnemonic(mnemonic)), mnemonic

    def import_private(self, name: str, password: str, raw: bytes) -> KeyInfo:
        """Store a key given as its 32 raw private-key bytes (``keys import-hex``)."""
        if self._path(name).exists():
            raise KeyringError(f"key {name!r} already exists")
        try:
            PrivateKey(raw)
        except Exception:  # cosmpy/ecdsa raise several kinds for a key that is no key
            raise KeyringError("not a secp256k1 private key (32 bytes, in range)") from None
        return self._store(name, password, raw)

    def _store(self, name: str, password: str, raw: bytes) -> KeyInfo:
        path = self._path(name)
        self._check_password(password)
        private = PrivateKey(raw)
        wallet = LocalWallet(private, prefix=ADDRESS_PREFIX)
        salt, nonce = os.urandom(16), os.urandom(12)
        sealed = AESGCM(_derive(password, salt)).encrypt(
            nonce, private.private_key_bytes, name.encode()
        )
        info = KeyInfo(name, str(wallet.address()), wallet.public_key().public_key)
        record = {
            "name": name,
            "address": info.address,
            "pubkey": info.pubkey,
            "salt": salt.hex(),
            "nonce": nonce.hex(),
            "ciphertext": base64.b64encode(sealed).decode(),
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.chmod(tmp, 0o600)
        tmp.replace(path)
        return info

    def delete(self, name: str) -> KeyInfo:
        """Remove key ``name``; what it was."""
        info = self.show(name)
        self._path(name).unlink()
        return info

    def _record(self, name: str) -> dict:
        path = self._path(name)
        if not path.exists():
            raise KeyringError(f"no key named {name!r} in {self.directory}")
        return _read_json(path, ("name", "address", "pubkey", "salt", "nonce", "ciphertext"))

    def show(self, name: str) -> KeyInfo:
        """The public part of key ``name`` (no password needed)."""
        record = self._record(name)
        return KeyInfo(record["name"], record["address"], record["pubkey"])

    def list(self) -> list[KeyInfo]:
        """All keys, by name."""
        if not self.directory.exists():
            raise KeyringError(f"no keyring at {self.directory} (add a key with `keys add`)")
        return [self.show(p.stem) for p in sorted(self.directory.glob("*.json"))]

    def wallet(self, name: str, password: str) -> LocalWallet:
        """Unseal key ``name`` into a cosmpy wallet."""
        record = self._record(name)
        self._check_password(password)
        try:
            raw = AESGCM(_derive(password, bytes.fromhex(record["salt"]))).decrypt(
                bytes.fromhex(record["nonce"]),
                base64.b64decode(record["ciphertext"]),
                name.encode(),
            )
        except InvalidTag:
            raise KeyringError(f"key {name!r} cannot be unsealed (wrong password?)") from None
        except (ValueError, TypeError):
            raise KeyringError(
                f"key file of {name!r} is damaged; restore it from a backup"
            ) from None
        return LocalWallet(PrivateKey(raw), prefix=ADDRESS_PREFIX)

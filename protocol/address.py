"""Bech32 account addresses, as the Cosmos SDK derives them from secp256k1 public keys."""

from __future__ import annotations

import hashlib
from functools import lru_cache

import bech32

ADDRESS_PREFIX = "dilo"


def _ripemd160(data: bytes) -> bytes:
    from Crypto.Hash import RIPEMD160  # pycryptodome, a dependency of cosmpy; OpenSSL 3 drops it

    return RIPEMD160.new(data).digest()


@lru_cache(maxsize=65536)
def address_from_pubkey(pubkey: bytes, prefix: str = ADDRESS_PREFIX) -> str:
    """The bech32 address of a compressed secp256k1 public key: ripemd160(sha256(pubkey))."""
    return encode_address(_ripemd160(hashlib.sha256(pubkey).digest()), prefix)


def module_address(name: str, prefix: str = ADDRESS_PREFIX) -> str:
    """The address of a module account (sha256(name)[:20], as in the Cosmos SDK)."""
    return encode_address(hashlib.sha256(name.encode()).digest()[:20], prefix)


def encode_address(raw: bytes, prefix: str = ADDRESS_PREFIX) -> str:
    """Bech32-encode 20 raw address bytes."""
    return bech32.bech32_encode(prefix, bech32.convertbits(raw, 8, 5))


def _shown(address: str) -> str:
    """An address as an error message quotes it: cut short, so a megabyte of garbage does not
    become a megabyte of error (gRPC status details travel in size-limited metadata)."""
    return repr(address) if len(address) <= 80 else f"{address[:64]!r}… ({len(address)} chars)"


@lru_cache(maxsize=65536)
def decode_address(address: str, prefix: str = ADDRESS_PREFIX) -> bytes:
    """The raw bytes of a bech32 address with the given prefix; raises ``ValueError`` if invalid.

    Only the lower-case form is an address: bech32 also reads an all-upper-case string, but
    state is keyed by the address as written, so ``DILO1…`` would be an account of its own that
    no key signs for (coins sent there are lost). Results are cached: bech32's checksum is pure
    Python and every tx decodes its signers.
    """
    if address != address.lower():
        hint = f" (write it {address.lower()!r})" if len(address) <= 80 else ""
        raise ValueError(f"address {_shown(address)} is not in lower case{hint}")
    hrp, data = bech32.bech32_decode(address)
    if hrp is None or data is None:
        raise ValueError(f"invalid bech32 address {_shown(address)}")
    if hrp != prefix:
        raise ValueError(f"address {_shown(address)} has prefix {hrp!r}, expected {prefix!r}")
    raw = bech32.convertbits(data, 5, 8, False)
    if raw is None or len(raw) not in (20, 32):
        raise ValueError(f"address {_shown(address)} has an invalid length")
    return bytes(raw)

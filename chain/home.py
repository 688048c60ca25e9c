"""A chain home: ``config/genesis.json``, ``config/priv_validator_key.json`` and ``data/``."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from genesis.models import GenesisDoc, load_genesis, parse_genesis, save_genesis


class HomeError(Exception):
    """A chain home that is missing or unusable."""


def genesis_path(home: Path) -> Path:
    """Where the home's genesis document lives."""
    return home / "config" / "genesis.json"


def db_path(home: Path) -> Path:
    """Where the home's chain database lives."""
    return home / "data" / "chain.db"


def _key_path(home: Path) -> Path:
    return home / "config" / "priv_validator_key.json"


def init_home(home: Path, chain_id: str, overwrite: bool = False) -> GenesisDoc:
    """Create a home with a fresh genesis and validator key; refuses to clobber one."""
    if genesis_path(home).exists() and not overwrite:
        raise HomeError(f"{home} already holds a chain (genesis.json exists); pass --overwrite")
    doc = parse_genesis({"chain_id": chain_id}, "chain id")
    save_genesis(doc, genesis_path(home))
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    path = _key_path(home)
    path.write_text(
        json.dumps(
            {
                "type": "tendermint/PrivKeyEd25519",
                "pub_key": base64.b64encode(public).decode(),
                "priv_key": base64.b64encode(raw).decode(),
            },
            indent=2,
        )
    )
    os.chmod(path, 0o600)
    return doc


def load_home(home: Path) -> tuple[GenesisDoc, Ed25519PrivateKey]:
    """The genesis and validator key of an initialised home."""
    if not genesis_path(home).exists():
        raise HomeError(f"no chain home at {home} (run `dilochain chain init --home {home}` first)")
    genesis = load_genesis(genesis_path(home))
    try:
        data = json.loads(_key_path(home).read_text())
        key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(data["priv_key"]))
    except (OSError, ValueError, KeyError) as err:
        raise HomeError(f"{_key_path(home)}: unreadable validator key ({err})") from None
    return genesis, key

"""Helpers for tests and benchmarks (as the Cosmos SDK's testutil): deterministic wallets, txs
signed offline by cosmpy, and an in-process chain driven block by block."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import struct
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from cosmpy.aerial.wallet import LocalWallet
from cosmpy.crypto.keypairs import PrivateKey
from google.protobuf.message import Message

from dilochain.chain.app import Application
from dilochain.chain.store import ChainStore
from dilochain.chain.testing import InProcessChain
from dilochain.client import sign_offline
from dilochain.genesis.document import GenesisDoc
from dilochain.protocol.address import ADDRESS_PREFIX
from dilochain.protocol.params import DENOM
from dilochain.training.run_config import Pins

if TYPE_CHECKING:
    from dilochain.training.dataset import Dataset

CHAIN_ID = "dilochain-test"
# Pins of a dataset nobody prepared: for chain-side tests, which never read the data.
FAKE_DATA = Pins("ab" * 32, "cd" * 32, 2048)


def wallet(seed: int) -> LocalWallet:
    """A deterministic test wallet."""
    return LocalWallet(PrivateKey(seed.to_bytes(32, "big")), prefix=ADDRESS_PREFIX)


def safetensors_declaring(shape: tuple[int, ...], data: bytes = b"\x00" * 4) -> bytes:
    """Crafted safetensors bytes: one float32 tensor ``x`` that declares ``shape`` over
    ``data`` (hostile-input tests and fuzz seeds)."""
    entry = {"dtype": "F32", "shape": list(shape), "data_offsets": [0, len(data)]}
    header = json.dumps({"x": entry}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def signed_tx(signer: LocalWallet, msgs: list[Message], **kwargs) -> bytes:
    """Raw tx bytes signed offline by cosmpy, for the test chain id unless given another."""
    return sign_offline(signer, msgs, **{"chain_id": CHAIN_ID, **kwargs})


def local_chain(tmp_path: Path, funded: dict[str, int], **params) -> InProcessChain:
    """An in-process chain over a fresh store in ``tmp_path`` with ``funded`` udlc balances.
    Its runs may ask any collateral (``min_host_collateral`` 1 unless ``poc`` says): unit tests
    count collateral in small numbers."""
    params = {**params, "poc": {"min_host_collateral": 1, **params.get("poc", {})}}
    app_state = {
        "accounts": [
            {"address": a, "coins": [{"denom": DENOM, "amount": n}]} for a, n in funded.items()
        ],
        "params": params,
    }
    genesis = GenesisDoc.model_validate({"chain_id": CHAIN_ID, "app_state": app_state})
    app = Application(ChainStore(tmp_path / "chain.db"), genesis)
    app.init_chain()
    return InProcessChain(app)


@functools.cache
def shipped_data() -> tuple[Dataset, Pins]:
    """The shipped default dataset (what hosts use without ``--data``), prepared once per
    process in a temporary folder, and the pins a run on it carries."""
    from dilochain.training.dataset import Dataset
    from dilochain.training.prepare import default_dataset, pins_of

    root = Path(tempfile.mkdtemp(prefix="dilochain-data-"))
    atexit.register(shutil.rmtree, root, True)
    folder = default_dataset(root)
    pins = pins_of(folder)
    return Dataset(folder, pins.manifest_hash, pins.tokenizer_hash), pins

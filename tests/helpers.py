"""Test helpers: signed txs built with cosmpy, and an in-process chain driven block by block."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from cosmpy.aerial.wallet import LocalWallet
from cosmpy.crypto.keypairs import PrivateKey
from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import TxResponse
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf.message import Message

from chain.address import ADDRESS_PREFIX
from chain.app import Application
from chain.devnet import SoloValidator, admit
from chain.mempool import Mempool
from chain.store import ChainStore
from dilochain.client import sign_offline
from genesis.models import DENOM, GenesisDoc

CHAIN_ID = "dilochain-test"


def wallet(seed: int) -> LocalWallet:
    """A deterministic test wallet."""
    return LocalWallet(PrivateKey(seed.to_bytes(32, "big")), prefix=ADDRESS_PREFIX)


def signed_tx(signer: LocalWallet, msgs: list[Message], **kwargs) -> bytes:
    """Raw tx bytes signed offline by cosmpy, for the test chain id unless given another."""
    return sign_offline(signer, msgs, **{"chain_id": CHAIN_ID, **kwargs})


@dataclass
class LocalChain:
    """An application, its mempool and a validator producing blocks on demand."""

    app: Application
    mempool: Mempool
    validator: SoloValidator

    def broadcast(self, raw: bytes) -> TxResponse:
        """CheckTx + mempool, like BroadcastTx."""
        return admit(self.app, self.mempool, raw)

    def block(self) -> list[TxResponse]:
        """Produce one block; returns the results of its txs, in order."""
        block = self.validator.produce_block()
        store = self.app.store
        return [
            TxResponse.FromString(store.tx(hashlib.sha256(raw).digest()).result)
            for raw in store.block_txs(block.height)
        ]


def local_chain(tmp_path: Path, funded: dict[str, int], **params) -> LocalChain:
    """A chain over a fresh store in ``tmp_path`` with ``funded`` udlc balances."""
    data = {
        "chain_id": CHAIN_ID,
        "accounts": [
            {"address": a, "coins": [{"denom": DENOM, "amount": n}]} for a, n in funded.items()
        ],
        "params": params,
    }
    genesis = GenesisDoc.model_validate(data)
    app = Application(ChainStore(tmp_path / "chain.db"), genesis)
    app.init_chain()
    mempool = Mempool(genesis.params.consensus.max_mempool_txs)
    validator = SoloValidator(app, mempool, Ed25519PrivateKey.generate(), 1.0, threading.RLock())
    return LocalChain(app, mempool, validator)

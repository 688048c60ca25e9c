"""Fuzz targets: each takes arbitrary bytes and may raise only the error its input deserves.

The test suite replays every target's committed seed corpus (``tests/fuzz/corpus/TARGET``);
``scripts/fuzz.sh TARGET [SECONDS]`` runs a target under atheris, coverage-guided, for longer.
An exception other than the allowed one is a bug: a crash an outsider could cause.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from dilochain.chain.app import MSG_SPECS
from dilochain.chain.context import Context
from dilochain.chain.errors import TxError
from dilochain.chain.state import CacheStore
from dilochain.genesis.document import GenesisError, parse_genesis
from dilochain.node.config import NodeConfig
from dilochain.testutil import local_chain, wallet
from dilochain.training.compress import CompressionError, decompress
from dilochain.training.tensor_codec import CodecError, decode_state

FUNDED = [wallet(900 + i) for i in range(3)]


@cache
def _chain():
    """One in-process chain, funded, shared by every input of the tx targets."""
    directory = Path(tempfile.mkdtemp(prefix="dilochain-fuzz-"))
    return local_chain(directory, {str(w.address()): 10**15 for w in FUNDED})


def tx(data: bytes) -> None:
    """Raw tx bytes through CheckTx, Simulate and FinalizeBlock: always a coded answer."""
    app = _chain().app
    for result in (app.check_tx(data), app.simulate(data)):
        assert result.code or result.gas_used >= 0
    block = app.finalize_block(app.height + 1, app.last_block_time_ns + 1, [data], b"\0" * 32)
    assert len(block.results) == 1
    app.commit()


def msg(data: bytes) -> None:
    """A message of any type (chosen by the first byte), decoded from the rest and run by its
    handler straight on state, past the ante handler: a TxError at most."""
    if not data:
        return
    spec = MSG_SPECS[data[0] % len(MSG_SPECS)]
    try:
        message = spec.message.FromString(data[1:])
    except Exception:  # protobuf's DecodeError, or others for bad UTF-8: the ante handler's code 2
        return
    app = _chain().app
    ctx = Context(CacheStore(app.store), app.height + 1, app.last_block_time_ns, app.chain_id,
                  app.params, [])  # fmt: skip
    with contextlib.suppress(TxError):
        spec.handler(ctx, message)


def pseudo_gradient(data: bytes) -> None:
    """Compressed pseudo-gradient bytes: CompressionError at most."""
    with contextlib.suppress(CompressionError):
        decompress(data)


def checkpoint(data: bytes) -> None:
    """Canonical tensor encoding: CodecError at most."""
    with contextlib.suppress(CodecError):
        decode_state(data)


def genesis(data: bytes) -> None:
    """A genesis document: GenesisError (or bad JSON) at most."""
    with contextlib.suppress(GenesisError, ValueError, RecursionError):
        parse_genesis(json.loads(data), "fuzz")


def node_config(data: bytes) -> None:
    """A node's configuration as JSON: a validation error at most."""
    with contextlib.suppress(ValidationError):
        NodeConfig.model_validate_json(data)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "tx": tx, "msg": msg, "pseudo_gradient": pseudo_gradient, "checkpoint": checkpoint,
    "genesis": genesis, "node_config": node_config,
}  # fmt: skip
CORPUS = Path(__file__).parent / "corpus"

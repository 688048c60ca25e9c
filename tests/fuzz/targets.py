"""Fuzz targets: each takes arbitrary bytes and may raise only the error its input deserves.

The test suite replays every target's committed seed corpus (``tests/fuzz/corpus/TARGET``);
``scripts/fuzz.sh TARGET [SECONDS]`` runs a target under atheris, coverage-guided, for longer.
An exception other than the allowed one is a bug: a crash an outsider could cause.
"""

from __future__ import annotations

import asyncio
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


@cache
def _query_router():
    """The router ``abci_query`` goes through, over the funded in-process chain."""
    import grpc
    from cosmpy.protos.tendermint.abci import types_pb2 as abci

    from dilochain.chain.grpc_services import Services, register_all
    from dilochain.chain.query_router import QueryRouter

    app = _chain().app
    router = QueryRouter(lambda: app.height)

    async def build() -> None:  # servicers register on a (never started) grpc.aio server
        register_all(grpc.aio.server(), Services(app, None), "fuzz", router)

    asyncio.run(build())
    return router, abci.ResponseQuery


def abci_query(data: bytes) -> None:
    """An ``abci_query``: the path is the routed one the first byte picks (or, past them, the
    text of the next bytes), the rest is the request. Always a coded answer, never a handler's
    internal error (CometBFT stops the node on an exception)."""
    if not data:
        return
    router, response_type = _query_router()
    paths = router.paths
    if data[0] < len(paths):
        path, body = paths[data[0]], data[1:]
    else:
        cut = data[1] % 40 if len(data) > 1 else 0
        path, body = data[2 : 2 + cut].decode("utf-8", "replace"), data[2 + cut :]
    answer = asyncio.run(router.query(path, body, prove=data[0] % 7 == 0))
    assert isinstance(answer, response_type) and answer.code != 1, (path, answer.log)


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


# The fuzzed model configs are built for real when the chain would take them: keep them small.
FUZZ_PARAMETER_BUDGET = 2_000_000


def model_config(data: bytes) -> None:
    """A run's model config (hostile: anyone creates runs): the chain's check, then the build
    every host and verifier makes, ModelConfigError at most."""
    from dilochain.protocol.model_config import ModelConfigError, check_budget
    from dilochain.training.model import build_checked_model

    text = data.decode("utf-8", "replace")
    with contextlib.suppress(ModelConfigError):
        check_budget(text, FUZZ_PARAMETER_BUDGET)
        build_checked_model(text, 0, FUZZ_PARAMETER_BUDGET)


def _read_as_file(data: bytes, name: str, read: Callable[[Path], object]) -> None:
    """``read`` the bytes as a file named ``name``: DataError at most."""
    from dilochain.training.dataset import DataError

    with tempfile.TemporaryDirectory(prefix="dilochain-fuzz-") as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        with contextlib.suppress(DataError):
            read(path)


def manifest(data: bytes) -> None:
    """A run's data manifest (fetched from peers, pinned by the run): DataError at most."""
    from dilochain.training.dataset import read_manifest

    _read_as_file(data, "manifest.json", read_manifest)


def tokenizer(data: bytes) -> None:
    """A ``tokenizer.json`` given to ``data prepare``: DataError at most (the Rust library's
    errors, panics included, become one)."""
    from dilochain.training.prepare import load_tokenizer

    _read_as_file(data, "tokenizer.json", load_tokenizer)


@cache
def _tiny_params():
    from dilochain.testutil import FAKE_DATA
    from dilochain.training.model import build_model
    from dilochain.training.run_config import make_run_config

    model = build_model(make_run_config(FAKE_DATA, "tiny").model_config, 0)
    return {name: p.detach() for name, p in model.named_parameters()}


def global_state(data: bytes) -> None:
    """Bytes a round's commits named as the run's global state: CodecError where they do not
    decode, else a problem or None from the check hosts make before using them."""
    from dilochain.training.diloco import global_state_problem

    with contextlib.suppress(CodecError):
        problem = global_state_problem(decode_state(data), _tiny_params())
        assert problem is None or isinstance(problem, str)


def node_config(data: bytes) -> None:
    """A node's configuration as JSON: a validation error at most."""
    with contextlib.suppress(ValidationError):
        NodeConfig.model_validate_json(data)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "tx": tx, "msg": msg, "pseudo_gradient": pseudo_gradient, "checkpoint": checkpoint,
    "genesis": genesis, "node_config": node_config, "abci_query": abci_query,
    "model_config": model_config, "manifest": manifest, "tokenizer": tokenizer,
    "global_state": global_state,
}  # fmt: skip
CORPUS = Path(__file__).parent / "corpus"

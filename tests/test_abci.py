"""The ABCI++ server: framing, each request kind, bad input, determinism across instances."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_q
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from hypothesis import given
from hypothesis import strategies as st

from dilochain.chain.abci import (
    AbciHandler,
    AbciServer,
    decode_frames,
    encode_frame,
    request_kind,
)
from dilochain.chain.errors import codes
from dilochain.chain.grpc_services import Services, register_all
from dilochain.chain.query_router import QueryRouter
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.testutil import CHAIN_ID, local_chain, signed_tx, wallet

ALICE, BOB = wallet(1), wallet(2)
A, B = str(ALICE.address()), str(BOB.address())


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(1, 50))
def test_frames_survive_any_chunking(messages, chunk):
    stream = b"".join(encode_frame(m) for m in messages)
    buffer, decoded = bytearray(), []
    for start in range(0, len(stream), chunk):
        buffer.extend(stream[start : start + chunk])
        decoded.extend(decode_frames(buffer))
    assert decoded == messages and not buffer


def test_bad_length_prefixes_are_refused():
    with pytest.raises(ValueError, match="malformed"):
        decode_frames(bytearray(b"\xff" * 11))
    with pytest.raises(ValueError, match="over the"):
        decode_frames(bytearray(encode_frame(b"")[:0] + b"\xff\xff\xff\xff\x7f"))


def _handler(tmp_path, on_fatal=None, **funded):
    chain, router = _router(tmp_path, **funded)
    return chain, AbciHandler(chain.app, router.query, "test", on_fatal=on_fatal)


def _router(tmp_path, **funded):
    chain = local_chain(tmp_path, funded or {A: 10**9})
    router = QueryRouter(lambda: chain.app.height)

    async def build() -> None:  # servicers register on a (never started) grpc.aio server
        services = Services(chain.app, None)
        register_all(grpc.aio.server(), services, "test", router)

    asyncio.run(build())
    return chain, router


def _send(amount: int, sequence: int) -> bytes:
    msg = MsgSend(from_address=A, to_address=B, amount=[Coin(denom=DENOM, amount=str(amount))])
    return signed_tx(ALICE, [msg], sequence=sequence, account_number=0)


def _finalize(height: int, txs: list[bytes]) -> abci.Request:
    request = abci.Request(finalize_block=abci.RequestFinalizeBlock(
        txs=txs, height=height, hash=bytes([height]) * 32))  # fmt: skip
    request.finalize_block.time.FromSeconds(1_700_000_000 + height)
    return request


def handle(handler: AbciHandler, request: abci.Request) -> abci.Response:
    return asyncio.run(handler.handle(request))


def test_block_lifecycle_and_bad_txs(tmp_path):
    chain, handler = _handler(tmp_path)
    info = handle(handler, abci.Request(info=abci.RequestInfo())).info
    assert info.last_block_height == 0 and info.last_block_app_hash == b""
    assert handle(handler, abci.Request(check_tx=abci.RequestCheckTx(tx=b"\x00junk"))).check_tx.code
    # The proposer leaves out what does not decode; a block holding it anyway still executes.
    good = _send(5, 0)
    prepared = handle(handler, abci.Request(prepare_proposal=abci.RequestPrepareProposal(
        txs=[good, b"\x00junk"], max_tx_bytes=1 << 20))).prepare_proposal  # fmt: skip
    assert list(prepared.txs) == [good]
    block = handle(handler, _finalize(1, [b"\x00junk", good])).finalize_block
    assert [r.code for r in block.tx_results] == [codes.TX_DECODE, 0]
    assert block.tx_results[0].log and block.tx_results[0].codespace == "sdk"
    committed = handle(handler, abci.Request(commit=abci.RequestCommit()))
    assert committed.WhichOneof("value") == "commit"
    info = handle(handler, abci.Request(info=abci.RequestInfo())).info
    assert info.last_block_height == 1 and info.last_block_app_hash == block.app_hash
    # A block it cannot execute (the wrong height) stops the node with that line; the app
    # stays at height 1.
    fatal: list[str] = []
    handler.on_fatal = fatal.append
    wrong = handle(handler, _finalize(5, []))
    assert wrong.WhichOneof("value") == "exception" and "expected block 2" in wrong.exception.error
    assert len(fatal) == 1 and "expected block 2" in fatal[0]
    assert chain.app.height == 1


def test_a_failing_handler_is_answered_with_a_code_never_an_exception(tmp_path, monkeypatch):
    chain, handler = _handler(tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    for method in ("check_tx", "prepare_proposal", "process_proposal"):
        monkeypatch.setattr(chain.app, method, broken)
    checked = handle(handler, abci.Request(check_tx=abci.RequestCheckTx(tx=_send(1, 0))))
    assert checked.check_tx.code == codes.INTERNAL and "a bug" in checked.check_tx.log
    prepared = handle(handler, abci.Request(prepare_proposal=abci.RequestPrepareProposal(
        txs=[_send(1, 0)], max_tx_bytes=1 << 20)))  # fmt: skip
    assert prepared.WhichOneof("value") == "prepare_proposal" and not prepared.prepare_proposal.txs
    vote = handle(handler, abci.Request(process_proposal=abci.RequestProcessProposal()))
    assert vote.process_proposal.status == abci.ResponseProcessProposal.ACCEPT


def test_a_failing_end_block_module_drops_its_own_work_and_the_block_goes_on(tmp_path, monkeypatch):
    from dilochain.chain.modules import rounds

    first, second = local_chain(tmp_path / "a", {A: 10**9}), local_chain(tmp_path / "b", {A: 10**9})

    def broken(ctx):
        ctx.store.set(b"half/done", b"1")
        raise RuntimeError("a bug")

    monkeypatch.setattr(rounds, "end_block", broken)
    hashes = []
    for chain in (first, second):
        block = chain.app.finalize_block(1, 1_700_000_000 * 10**9, [_send(5, 0)], b"h")
        chain.app.commit()
        assert [r.code for r in block.results] == [0] and chain.app.height == 1
        assert chain.app.store.get(b"half/done") is None
        hashes.append(block.app_hash)
    assert hashes[0] == hashes[1]


def test_every_routed_query_answers_any_bytes_with_a_code(tmp_path):
    """Empty, garbage and oversized requests to every path the router serves, and paths it
    does not: each answer is a ResponseQuery with a code (CometBFT stops on an exception)."""
    _, router = _router(tmp_path)
    rng = random.Random(29)
    bodies = [b"", b"\xff" * 7, rng.randbytes(200), b"\x0a" + b"\xff" * 9, rng.randbytes(1 << 20)]
    assert "/cosmos.bank.v1beta1.Query/Balance" in router.paths
    for path in router.paths:
        for body in bodies:
            answer = asyncio.run(router.query(path, body))
            assert isinstance(answer, abci.ResponseQuery) and answer.code != codes.INTERNAL, (
                path, answer.log)  # fmt: skip
    # cosmpy's generated base methods answer UNIMPLEMENTED: not routed, an unknown path.
    for path in ("/cosmos.auth.v1beta1.Query/ModuleAccounts", "/no.Such/Thing", "x" * 5000):
        answer = asyncio.run(router.query(path, b""))
        assert answer.code == codes.UNKNOWN_REQUEST and len(answer.log) < 400
    proved = asyncio.run(router.query("/cosmos.bank.v1beta1.Query/Balance", b"", prove=True))
    assert proved.code == codes.INVALID_REQUEST


def test_init_chain_checks_what_cometbft_read(tmp_path):
    chain, handler = _handler(tmp_path)
    app_state = chain.app.genesis.app_state.model_dump_json().encode()
    ok = handle(handler, abci.Request(init_chain=abci.RequestInitChain(
        chain_id=CHAIN_ID, app_state_bytes=app_state))).init_chain  # fmt: skip
    assert ok.app_hash == chain.app.app_hash
    wrong = handle(handler, abci.Request(init_chain=abci.RequestInitChain(chain_id="other")))
    assert "chain id" in wrong.exception.error


def test_queries_by_grpc_path(tmp_path):
    _, handler = _handler(tmp_path)
    request = bank_q.QueryBalanceRequest(address=A, denom=DENOM).SerializeToString()
    path = "/cosmos.bank.v1beta1.Query/Balance"
    answer = handle(handler, abci.Request(query=abci.RequestQuery(path=path, data=request))).query
    assert answer.code == 0
    assert bank_q.QueryBalanceResponse.FromString(answer.value).balance.amount == str(10**9)
    bad = bank_q.QueryBalanceRequest(address="dilo1nope", denom=DENOM).SerializeToString()
    answer = handle(handler, abci.Request(query=abci.RequestQuery(path=path, data=bad))).query
    assert answer.code == codes.INVALID_REQUEST and answer.log
    run = q.QueryRunRequest(run_id="nope").SerializeToString()
    path = "/dilochain.poc.v1.Query/Run"
    answer = handle(handler, abci.Request(query=abci.RequestQuery(path=path, data=run))).query
    assert answer.code == codes.NOT_FOUND and "run 'nope' not found" in answer.log
    epoch = q.QueryEpochRequest(current=True).SerializeToString()
    path = "/dilochain.poc.v1.Query/Epoch"
    answer = handle(handler, abci.Request(query=abci.RequestQuery(path=path, data=epoch))).query
    assert q.QueryEpochResponse.FromString(answer.value).epoch.start_height == 1
    unknown = abci.Request(query=abci.RequestQuery(path="/no.Such/Thing"))
    assert handle(handler, unknown).query.code == codes.UNKNOWN_REQUEST
    garbage = abci.Request(query=abci.RequestQuery(path=path, data=b"\xff\xff"))
    assert handle(handler, garbage).query.code == codes.TX_DECODE


def _ask(router: QueryRouter, queries: list[tuple[str, bytes]]) -> list[abci.ResponseQuery]:
    async def ask_all() -> list[abci.ResponseQuery]:
        return [await router.query(path, data) for path, data in queries]

    return asyncio.run(ask_all())


def test_queries_of_new_keys_add_nothing_to_the_read_cache(tmp_path):
    """Queries are free: the keys they ask for (denoms, run ids, raw state keys) must not
    stay in the store's read cache (300 distinct 4 MB denoms took a node's memory from 84 MiB
    to 1.3 GiB)."""
    chain, router = _router(tmp_path)
    store = chain.app.store
    before = (dict(store._cache), store.cached_bytes)
    queries = []
    for i in range(300):
        denom = f"denom{i:04d}"
        queries += [
            ("/cosmos.bank.v1beta1.Query/SupplyOf", bank_q.QuerySupplyOfRequest(denom=denom)),
            ("/cosmos.bank.v1beta1.Query/Balance", bank_q.QueryBalanceRequest(address=A,
                                                                              denom=denom)),
            ("/dilochain.poc.v1.Query/Run", q.QueryRunRequest(run_id=f"run-{i}")),
        ]  # fmt: skip
    answers = _ask(router, [(path, request.SerializeToString()) for path, request in queries])
    answers += _ask(router, [("/store/main/key", b"k" * 4000 + b"%d" % i) for i in range(300)])
    assert {a.code for a in answers} == {0, codes.NOT_FOUND}
    assert (dict(store._cache), store.cached_bytes) == before


def test_malformed_query_arguments_are_refused_before_any_read(tmp_path, monkeypatch):
    chain, router = _router(tmp_path)
    reads = []
    monkeypatch.setattr(chain.app.store, "peek", reads.append)
    monkeypatch.setattr(chain.app.store, "iterate", lambda *args: reads.append(args) or iter(()))
    huge = "a" * (4 << 20)
    refused = {
        "/cosmos.bank.v1beta1.Query/SupplyOf": (bank_q.QuerySupplyOfRequest(denom=huge),
                                                "invalid denom"),
        "/cosmos.bank.v1beta1.Query/Balance": (bank_q.QueryBalanceRequest(address=A, denom=""),
                                               "invalid denom"),
        "/dilochain.poc.v1.Query/Run": (q.QueryRunRequest(run_id=huge), "invalid run id"),
        "/dilochain.poc.v1.Query/Challenges": (q.QueryChallengesRequest(run_id="Run 1"),
                                               "invalid run id"),
        "/dilochain.poc.v1.Query/Slashes": (q.QuerySlashesRequest(address=huge),
                                            "invalid bech32 address"),
    }  # fmt: skip
    answers = _ask(router, [(p, r.SerializeToString()) for p, (r, _) in refused.items()])
    for answer, (_, expected) in zip(answers, refused.values(), strict=True):
        assert answer.code == codes.INVALID_REQUEST and expected in answer.log
        assert len(answer.log) < 300
    assert reads == []


def test_two_instances_agree_on_every_app_hash(tmp_path):
    funded = {A: 10**9, B: 10**9}
    first = local_chain(tmp_path / "a", funded)
    second = local_chain(tmp_path / "b", funded)
    rng = random.Random(7)
    sequence = 0
    for height in range(1, 21):
        txs = []
        for _ in range(rng.randrange(4)):
            amount = rng.choice([1, 1000, 10**12])  # some fail: overdraft, fee kept
            txs.append(_send(amount, sequence))
            sequence += 1
        if rng.random() < 0.2:
            txs.append(rng.randbytes(40))  # garbage in a block
        hashes = []
        for chain in (first, second):
            block = chain.app.finalize_block(height, 1_700_000_000 * 10**9 + height, txs, b"h")
            chain.app.commit()
            hashes.append(block.app_hash)
        assert hashes[0] == hashes[1], f"app hashes differ at height {height}"


def test_socket_server_answers_in_order_and_survives_garbage(tmp_path):
    _, handler = _handler(tmp_path)

    async def run() -> list[abci.Response]:
        server = AbciServer(handler)
        await server.start(tmp_path / "abci.sock")
        reader, writer = await asyncio.open_unix_connection(tmp_path / "abci.sock")
        requests = [
            abci.Request(echo=abci.RequestEcho(message="hi")).SerializeToString(),
            b"\x0a\xff\xff",
            abci.Request(flush=abci.RequestFlush()).SerializeToString(),
        ]
        writer.write(b"".join(encode_frame(r) for r in requests))  # fmt: skip
        await writer.drain()
        buffer, frames = bytearray(), []
        while len(frames) < 3:
            buffer.extend(await asyncio.wait_for(reader.read(4096), 5))
            frames.extend(decode_frames(buffer))
        writer.close()
        await server.stop()
        return [abci.Response.FromString(f) for f in frames]

    echo, garbage, flush = asyncio.run(run())
    # A request that does not decode is still answered in kind where a client could send it.
    bad_query = abci.Request(query=abci.RequestQuery(path="x")).SerializeToString()
    bad_query = bad_query.replace(b"x", b"\xff")
    assert request_kind(bad_query) == "query"
    assert echo.echo.message == "hi"
    assert "undecodable" in garbage.exception.error
    assert flush.WhichOneof("value") == "flush"
    assert (tmp_path / "abci.sock").stat().st_mode & 0o777 == 0o600


def test_only_cometbft_s_four_connections_are_served(tmp_path):
    """A local process cannot drive the application: past CometBFT's four connections, any
    other is closed at once, unanswered."""
    _, handler = _handler(tmp_path)

    async def run() -> tuple[list[bytes], bytes, int]:
        server = AbciServer(handler)
        await server.start(tmp_path / "abci.sock")
        echo = encode_frame(abci.Request(echo=abci.RequestEcho(message="x")).SerializeToString())
        answers, writers = [], []
        for _ in range(AbciServer.MAX_CONNECTIONS + 1):
            reader, writer = await asyncio.open_unix_connection(tmp_path / "abci.sock")
            try:
                writer.write(echo)
                await writer.drain()
                answers.append(await asyncio.wait_for(reader.read(4096), 5))
            except ConnectionResetError:  # closed before it could ask
                answers.append(b"")
            writers.append(writer)
        for writer in writers:
            writer.close()
        await server.stop()
        return answers[:-1], answers[-1], server.refused

    served, rogue, refused = asyncio.run(run())
    assert all(decode_frames(bytearray(a)) for a in served)
    assert rogue == b"" and refused == 1

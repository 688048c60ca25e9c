"""Callers that never read their answers: the node's gRPC answers are held within a budget of
bytes, the REST gateway's within its slots and a send deadline, so a stranger cannot fill the
node's memory or hold its answers for ever."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from google.protobuf import wrappers_pb2

from dilochain.chain import call_budget, rest_gateway
from dilochain.chain.answer_budget import BoundedAnswers, quiet_departed_callers
from dilochain.chain.call_budget import BoundedCalls
from dilochain.chain.rest_gateway import RestGateway
from dilochain.protocol.caller_budget import CallerBudget
from dilochain.protocol.server_options import server_options
from dilochain.testutil import NeverReads, until

MIB = 1 << 20
BIG = "/dilochain.test.Big/Get"  # answers as many bytes as it is asked for


def test_a_budget_bounds_each_caller_and_all_of_them():
    budget = CallerBudget(total=10, per_caller=4)
    assert budget.room("203.0.113.5", 4) and budget.take("203.0.113.5", 4)
    assert not budget.room("203.0.113.5", 1) and not budget.take("203.0.113.5", 1)
    assert budget.take("2001:db8::/64", 3) and budget.take("", 3)  # "": bounded by the total
    assert not budget.take("", 1) and not budget.take("198.51.100.7", 1)  # 10 of 10 held
    budget.give("203.0.113.5", 4)
    assert budget.take("", 4) and budget.held == 10
    for who, units in [("", 7), ("2001:db8::/64", 3)]:
        budget.give(who, units)
    assert budget.held == 0 and budget.take("203.0.113.5", 4)


class Aborted(Exception):
    """What :class:`Context`'s ``abort`` raises."""


class Context:
    """A servicer context of a caller at ``peer`` (gRPC's peer string), its done callbacks
    kept to call."""

    def __init__(self, peer: str):
        self._peer, self.done = peer, []

    def peer(self) -> str:
        return self._peer

    async def abort(self, code, details):
        raise Aborted(code, details)

    def add_done_callback(self, callback) -> None:
        self.done.append(callback)


def test_strangers_who_fill_their_budget_refuse_none_of_this_machine_s_callers():
    """Eight addresses that never read filled the node's one budget, and then every caller
    was refused, the node's own hosts and verifiers too (a review). This machine's callers
    have a budget of their own, and a stranger with no room left is refused before its call
    runs (a refused BroadcastTx still reached the mempool)."""
    ran: list[str] = []

    async def answer(request, context):
        ran.append(context.peer())
        return wrappers_pb2.BytesValue(value=b"x" * request.value)

    async def continuation(details):
        return grpc.unary_unary_rpc_method_handler(answer)

    strangers, local = CallerBudget(2 * MIB, MIB), CallerBudget(2 * MIB, 2 * MIB)
    interceptor = BoundedAnswers(strangers, local)

    async def scenario() -> None:
        bounded = (await interceptor.intercept_service(continuation, None)).unary_unary
        for ip in ("203.0.113.5", "198.51.100.7"):  # two strangers hold theirs in full
            await bounded(wrappers_pb2.UInt64Value(value=MIB - 64), Context(f"ipv4:{ip}:5"))
        with pytest.raises(Aborted, match="unread answers"):
            await bounded(wrappers_pb2.UInt64Value(value=10), Context("ipv4:192.0.2.9:5"))
        assert ran[-1] == "ipv4:198.51.100.7:5"  # the refused call never ran
        mine = Context("ipv4:127.0.0.1:5")
        assert len((await bounded(wrappers_pb2.UInt64Value(value=MIB), mine)).value) == MIB
        assert local.held == MIB + 4  # with BytesValue's tag and length
        mine.done[0](None)
        assert local.held == 0

    asyncio.run(scenario())


def _serve_big(budget: CallerBudget, calls: CallerBudget | None = None, options=None):
    """An aio gRPC server on 127.0.0.1 behind :class:`BoundedCalls` (this machine's budget
    ``calls``) and :class:`BoundedAnswers` (``budget``), as a node's, on a loop of its own
    (with channel arguments ``options``); (port, stop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def answer(request, context):
        answer = wrappers_pb2.BytesValue(value=b"x" * request.value)
        return answer.SerializeToString() if request.value % 2 else answer  # encoded: as it is

    async def start() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(interceptors=[BoundedCalls(local=calls),
                                               BoundedAnswers(local=budget)],
                                 options=options)  # fmt: skip
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "dilochain.test.Big", {"Get": grpc.unary_unary_rpc_method_handler(
                answer, wrappers_pb2.UInt64Value.FromString,
                wrappers_pb2.BytesValue.SerializeToString)},
        )])  # fmt: skip
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = asyncio.run_coroutine_threadsafe(start(), loop).result(30)

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)

    return port, stop


def test_answers_a_caller_never_reads_are_held_only_within_the_node_s_budget(caplog):
    budget = CallerBudget(total=4 * MIB, per_caller=MIB)  # this machine's: the total alone
    port, stop = _serve_big(budget)
    size = wrappers_pb2.BytesValue(value=b"x" * MIB).ByteSize()
    try:
        hog = NeverReads(f"127.0.0.1:{port}")
        for _ in range(8):
            hog.ask(BIG, wrappers_pb2.UInt64Value(value=MIB).SerializeToString())
        # 3 answers of 1 MiB and a few bytes fit in 4 MiB; the other 5 are refused
        until(lambda: hog.read(quiet=0.1) or hog.refused() == 5)
        assert budget.held == 3 * size and len(hog.status) == 5
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            get = channel.unary_unary(BIG, wrappers_pb2.UInt64Value.SerializeToString,
                                      wrappers_pb2.BytesValue.FromString)  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                get(wrappers_pb2.UInt64Value(value=2 * MIB), timeout=10)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "unread answers" in refused.value.details()
            quiet_departed_callers()
            hog.sock.close()  # the caller gone: what it held is given back
            until(lambda: budget.held == 0)
            # ... and grpcio's error for each answer it left is not in the node's log
            assert not [r for r in caplog.records if "ExecuteBatchError" in r.getMessage()]
            for extra in range(6):  # answers read are given back as they are delivered
                answer = get(wrappers_pb2.UInt64Value(value=3 * MIB + extra), timeout=10)
                assert answer.value == b"x" * (3 * MIB + extra)  # encoded ones sent as they are
            until(lambda: budget.held == 0)
    finally:
        stop()


def _serve_block(txs: list[bytes]):
    """A gRPC server answering ``GetBlockByHeight`` with a block of ``txs``; (server, address)."""
    block = tm_q.GetBlockByHeightResponse()
    block.block.data.txs.extend(txs)
    server = grpc.server(ThreadPoolExecutor(8))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "cosmos.base.tendermint.v1beta1.Service", {"GetBlockByHeight":
            grpc.unary_unary_rpc_method_handler(
                lambda request, context: block, tm_q.GetBlockByHeightRequest.FromString,
                tm_q.GetBlockByHeightResponse.SerializeToString)},
    )])  # fmt: skip
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def _get(address: str, path: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # reads nothing, holds little
    sock.connect((host, int(port)))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def _read_until_closed(sock: socket.socket) -> int:
    """Bytes read from ``sock`` until its peer closed it (or reset it)."""
    sock.settimeout(30)
    received = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 16):
            received += len(chunk)
    return received


def _status(sock: socket.socket) -> int:
    sock.settimeout(30)
    head = b""
    while b"\r\n" not in head:
        head += sock.recv(4096)
    return int(head.split()[1])


def test_calls_whose_request_never_ends_are_held_only_within_the_node_s_budget():
    """A caller that never finishes its requests held a call each for ever, counted nowhere
    (grpcio runs a unary method, and every interceptor's wrapper of it, once the request is
    in): 5,000 of them took a server from 35 to 117 MB. Calls are counted from their first
    frame now, those past the budget are refused at once, and a caller gone gives back what it
    held."""
    calls = CallerBudget(total=5, per_caller=5)  # this machine's: the total alone
    port, stop = _serve_big(CallerBudget(64 * MIB, 64 * MIB), calls)
    try:
        hog = NeverReads(f"127.0.0.1:{port}")
        for _ in range(8):
            hog.ask(BIG, wrappers_pb2.UInt64Value(value=MIB).SerializeToString(), finished=False)
        until(lambda: hog.read(quiet=0.1) or hog.refused() == 3)
        assert calls.held == 5
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            get = channel.unary_unary(BIG, wrappers_pb2.UInt64Value.SerializeToString,
                                      wrappers_pb2.BytesValue.FromString)  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                get(wrappers_pb2.UInt64Value(value=10), timeout=10)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "calls" in refused.value.details()
            hog.close()  # the caller gone: what it held is given back
            until(lambda: calls.held == 0)
            for size in (10, 11):  # an answer as a message, and one kept encoded
                assert get(wrappers_pb2.UInt64Value(value=size), timeout=10).value == b"x" * size
            until(lambda: calls.held == 0)
    finally:
        stop()


def test_a_request_that_drips_holds_its_call_only_so_long(monkeypatch):
    """A caller that never finishes its request, but stays (it answers the keepalive pings),
    held its call for as long as it liked; the request now has ``REQUEST_SECONDS``."""
    monkeypatch.setattr(call_budget, "REQUEST_SECONDS", 1.0)
    calls = CallerBudget(total=8, per_caller=8)
    port, stop = _serve_big(CallerBudget(64 * MIB, 64 * MIB), calls)
    try:
        dripping = NeverReads(f"127.0.0.1:{port}")
        for _ in range(3):
            dripping.ask(BIG, wrappers_pb2.UInt64Value(value=MIB).SerializeToString(), False)
        until(lambda: dripping.read(quiet=0.1) or calls.held == 3)
        until(lambda: dripping.read(quiet=0.1) or len(dripping.status) == 3)
        assert set(dripping.status.values()) == {str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])}
        assert calls.held == 0
    finally:
        dripping.close()
        stop()


def test_a_caller_that_vanished_gives_back_its_calls_and_answers():
    """A caller gone without closing its connection (its machine lost power, its NAT forgot
    it; here, a client that stops reading its socket, as a stopped process) gave TCP nothing to
    time out: its unfinished calls and its unread answers were held for ever. Servers ping a
    quiet connection now and close it when the ping goes unanswered."""
    calls, answers = CallerBudget(total=8, per_caller=8), CallerBudget(64 * MIB, 64 * MIB)
    port, stop = _serve_big(answers, calls, server_options(keepalive=1.0, timeout=1.0))
    try:
        gone = NeverReads(f"127.0.0.1:{port}")
        for finished in (False, False, True, True):
            gone.ask(BIG, wrappers_pb2.UInt64Value(value=MIB).SerializeToString(), finished)
        # while it answers pings (and grants no window) it holds them all
        until(lambda: gone.read(quiet=0.1) or (calls.held == 4 and answers.held > 2 * MIB))
        until(lambda: calls.held == 0 and answers.held == 0)  # its socket never read again
        gone.read(quiet=0.1)  # what it then reads is the server's goodbye, not an error
        assert gone.gone and gone.held() == 0
    finally:
        gone.close()
        stop()


def test_strangers_calls_are_bounded_by_address_and_in_all():
    """One address holds at most its share of the calls strangers may hold, and strangers
    together at most theirs; this machine's callers count against a budget of their own."""

    strangers, local = CallerBudget(3, 2), CallerBudget(8, 8)
    calls = BoundedCalls(strangers, local)

    async def scenario() -> None:
        held = [Context("ipv4:203.0.113.5:1"), Context("ipv4:203.0.113.5:2")]
        for context in held:
            await calls._admit(context)
        with pytest.raises(Aborted, match="calls"):
            await calls._admit(Context("ipv4:203.0.113.5:3"))  # its address's share
        await calls._admit(Context("ipv6:[2001:db8::1]:4"))
        with pytest.raises(Aborted, match="calls"):
            await calls._admit(Context("ipv4:198.51.100.7:5"))  # strangers' in all
        mine = Context("ipv4:127.0.0.1:6")
        await calls._admit(mine)
        assert (strangers.held, local.held) == (3, 1)
        for context in (*held, mine):
            context.done[0](None)
        assert (strangers.held, local.held) == (1, 0)

    asyncio.run(scenario())


def test_a_rest_caller_that_never_reads_holds_its_answers_bytes_only_until_its_deadline(
    monkeypatch,
):
    """The gateway let go of a request when its handler returned and aiohttp wrote the body
    after, so each connection that did not read held its answer (a block's JSON: tens of MB)
    for ever. Answers being written are held within a budget of bytes, and a caller that has
    not taken its answer by its deadline is cut off."""
    block = [b"t" * MIB] * 12  # ~16 MB of JSON: more than the sockets' buffers
    monkeypatch.setattr(rest_gateway, "NODE_ANSWER_BYTES", 40 * MIB)  # two such answers
    monkeypatch.setattr(rest_gateway, "SEND_SECONDS", 3.0)
    monkeypatch.setattr(rest_gateway, "SEND_RATE", 1 << 40)  # the deadline: 3 s whatever the size
    server, address = _serve_block(block)
    gateway = RestGateway([tm_q.DESCRIPTOR.services_by_name["Service"]], address)
    rest = gateway.start("127.0.0.1:0")
    path = "/cosmos/base/tendermint/v1beta1/blocks/5"
    try:
        hogs = [_get(rest, path) for _ in range(2)]
        until(lambda: gateway.sending.held > 30 * MIB)  # both are being sent (and not read)
        assert gateway.slots.held == 0  # requests are not held while their answers go out
        assert _status(_get(rest, path)) == 429  # a third answer would pass the budget
        until(lambda: _status(_get(rest, path)) == 200)  # past the deadline: given back
        until(lambda: gateway.sending.held == 0)
        length = len(urllib.request.urlopen(f"http://{rest}{path}", timeout=30).read())
        for hog in hogs:  # the gateway closed each reader that did not read
            assert _read_until_closed(hog) < length
    finally:
        gateway.stop()
        server.stop(None)

"""Several chain nodes behind one channel: addresses parsed, calls failing over from a node that
is down, paused or restarting, and errors that are not transient passed through at once."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest

from dilochain.chain.testnet import free_port
from dilochain.endpoints import AddressError, FailoverChannel, parse_addresses

pytestmark = pytest.mark.wall_clock  # asserts how long things take: see conftest

METHOD = "/test.Echo/Say"


def _server(port: int, name: str, delay: threading.Event | None = None) -> grpc.Server:
    """A node answering ``METHOD`` with its name; refuses b"bad"; hangs while ``delay`` is
    clear (a paused process)."""

    def say(request: bytes, context) -> bytes:
        if request == b"bad":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request")
        if delay is not None:
            delay.wait(10)
        return name.encode()

    handler = grpc.method_handlers_generic_handler(
        "test.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(4), handlers=[handler])
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def _say(channel: grpc.Channel, request: bytes = b"hi", timeout: float | None = None) -> str:
    return channel.unary_unary(METHOD)(request, timeout=timeout).decode()


def test_addresses_are_host_port_lists():
    assert parse_addresses("a:1") == ("a:1",)
    assert parse_addresses("a:1, b:2,a:1") == ("a:1", "b:2")
    assert parse_addresses(["a:1,b:2", "c:3"]) == ("a:1", "b:2", "c:3")
    for bad, says in [("http://a:1", "is a URL"), ("tcp://a:1", "is a URL"), ("a", "host:port"),
                      ("a:0", "host:port"), ("a:99999", "host:port"), ("", "no chain address"),
                      ("a:\u0665", "host:port")]:  # fmt: skip
        with pytest.raises(AddressError, match=says):
            parse_addresses(bad)


def test_calls_fail_over_between_nodes_and_come_back():
    down, up = free_port(), free_port()
    second = _server(up, "second")
    with FailoverChannel([f"127.0.0.1:{down}", f"127.0.0.1:{up}"], patience=10) as channel:
        assert _say(channel) == "second"  # the first node is down: the second answers
        first = _server(down, "first")
        second.stop(None)
        assert _say(channel) == "first"  # the second goes: back to the first
        with pytest.raises(grpc.RpcError) as refused:  # not transient: raised at once
            _say(channel, b"bad")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        first.stop(None)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as gone:  # every node down: given up after patience
            _say(channel, timeout=1.5)
        assert gone.value.code() == grpc.StatusCode.UNAVAILABLE
        assert 1.0 < time.monotonic() - started < 5


def test_a_node_that_restarts_within_the_patience_is_waited_for():
    port = free_port()
    with FailoverChannel(f"127.0.0.1:{port}", patience=20) as channel:
        server = _server(port, "node")
        assert _say(channel) == "node"
        server.stop(None)
        restarted: list[grpc.Server] = []
        timer = threading.Timer(2.0, lambda: restarted.append(_server(port, "again")))
        timer.start()
        try:
            assert _say(channel) == "again"
        finally:
            timer.join()
            restarted[0].stop(None)


def test_a_paused_node_does_not_hang_a_call():
    paused, up = free_port(), free_port()
    hung = threading.Event()
    servers = [_server(paused, "paused", delay=hung), _server(up, "live")]
    try:
        channel = FailoverChannel([f"127.0.0.1:{paused}", f"127.0.0.1:{up}"],
                                  attempt_seconds=1.0)  # fmt: skip
        started = time.monotonic()
        assert _say(channel) == "live"
        assert time.monotonic() - started < 5
        channel.close()
    finally:
        hung.set()
        for server in servers:
            server.stop(None)


@pytest.mark.parametrize(
    ("address", "local"),
    [("127.0.0.1:7000", True), ("127.8.9.1:1", True), ("localhost:7000", True),
     ("node.localhost:1", True), ("0.0.0.0:7000", True), ("[::]:7000", True),
     ("[::1]:7000", True), ("10.0.0.5:7000", False), ("203.0.113.7:7000", False),
     ("[2001:db8::1]:7000", False), ("host.example.org:7000", False)],
)  # fmt: skip
def test_addresses_only_this_machine_can_dial(address, local):
    from dilochain.protocol.endpoint import local_only, unreachable_endpoint

    assert local_only(address) is local
    assert (unreachable_endpoint(address, "", ("10.0.0.5:9090",)) is not None) is local
    assert unreachable_endpoint(address, "", ("127.0.0.1:9090", "localhost:9091")) is None


@pytest.mark.parametrize(
    ("listen", "advertised", "refused"),
    [("0.0.0.0:7000", "203.0.113.7:7000", ""), ("10.0.0.9:7000", "", ""),
     ("127.0.0.1:7000", "203.0.113.7:7000", "only this machine can reach"),
     ("localhost:7000", "203.0.113.7:7000", "only this machine can reach"),
     ("0.0.0.0:0", "203.0.113.7:7000", "a port picked at random"),
     ("0.0.0.0:7000", "", "reachable from this machine only"),
     ("0.0.0.0:7000", "127.0.0.1:7000", "reachable from this machine only")],
)  # fmt: skip
def test_a_blob_service_behind_nat_must_listen_where_it_advertises(listen, advertised, refused):
    from dilochain.protocol.endpoint import unreachable_endpoint

    problem = unreachable_endpoint(listen, advertised, ("10.0.0.5:9090",))
    assert (problem is None) if not refused else (refused in problem)


def test_a_host_on_a_private_network_is_refused_on_a_chain_reached_over_the_internet():
    from dilochain.protocol.endpoint import private_location_problem

    public, lan = ("8.8.4.4:9090", "node.example.com:9090"), ("10.0.0.5:9090",)
    assert "private network" in private_location_problem("192.168.1.9:7000", public)
    assert "private network" in private_location_problem("http://10.0.0.7:9000/b/p", public)
    assert private_location_problem("192.168.1.9:7000", lan) is None
    assert private_location_problem("192.168.1.9:7000", public, "allow") is None
    assert private_location_problem("1.1.1.1:7000", public) is None


def _at_height(height: int) -> grpc.Server:
    """A node whose latest block is ``height``."""
    from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q

    def latest(request: bytes, context) -> bytes:
        found = tm_q.GetLatestBlockResponse()
        found.block.header.height = height
        return found.SerializeToString()

    handler = grpc.method_handlers_generic_handler(
        "cosmos.base.tendermint.v1beta1.Service",
        {"GetLatestBlock": grpc.unary_unary_rpc_method_handler(latest)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(2), handlers=[handler])
    server.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server


def test_a_client_moves_off_a_node_frozen_behind_the_chain():
    """A node cut off from its peers answers every call at its old height: asked, the others
    say how far the chain is, and calls move to the newest one that is ahead."""
    frozen, behind, ahead = _at_height(7), _at_height(6), _at_height(12)
    down = free_port()
    nodes = [f"127.0.0.1:{s.port}" for s in (frozen, behind)] + [
        f"127.0.0.1:{down}",
        f"127.0.0.1:{ahead.port}",
    ]
    try:
        with FailoverChannel(nodes, attempt_seconds=1) as channel:
            assert channel.move_ahead(12) is None and channel.current == nodes[0]
            assert channel.move_ahead(7) == nodes[3] and channel.current == nodes[3]
    finally:
        for server in (frozen, behind, ahead):
            server.stop(grace=0)

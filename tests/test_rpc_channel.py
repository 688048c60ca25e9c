"""``dilochain.rpc_channel`` without a chain: which URLs are a CometBFT RPC, and what a call to
one that does not answer raises (the calls themselves: ``test_node_cli``'s ``--node`` test)."""

from __future__ import annotations

import grpc
import pytest
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_q
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2_grpc as bank_grpc

from dilochain.endpoints import FailoverChannel, open_channel
from dilochain.rpc_channel import RpcChannel, rpc_address


@pytest.mark.parametrize(("url", "address"), [
    ("tcp://127.0.0.1:26657", "127.0.0.1:26657"),
    ("http://node.example:26657/", "node.example:26657"),
    ("127.0.0.1:26657", None),  # no scheme: that is --chain's form
    ("https://node.example:443", None),
    ("tcp://127.0.0.1:26657/status", None),
    ("tcp://127.0.0.1", None),  # no port
    ("tcp://user@host:1", None),
])  # fmt: skip
def test_only_a_cometbft_rpc_url_is_one(url, address):
    assert rpc_address(url) == address


def test_one_rpc_url_opens_an_rpc_channel_and_addresses_a_failover_channel():
    with open_channel("tcp://127.0.0.1:26657") as channel:
        assert isinstance(channel, RpcChannel) and channel.addresses == ("tcp://127.0.0.1:26657",)
    with open_channel(["127.0.0.1:9090", "127.0.0.1:9091"]) as channel:
        assert isinstance(channel, FailoverChannel)
    with pytest.raises(ValueError, match="not a CometBFT RPC URL"):
        RpcChannel("127.0.0.1:26657")


def test_a_node_that_does_not_answer_is_unavailable():
    from dilochain.chain.testnet import free_port

    channel = RpcChannel(f"tcp://127.0.0.1:{free_port()}", timeout=2)
    stub = bank_grpc.QueryStub(channel)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Balance(bank_q.QueryBalanceRequest(address="dilo1", denom="udlc"))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "no CometBFT RPC answers" in caught.value.details()


@pytest.mark.parametrize(("reply", "needle"), [
    (b"\x00\x00\x00\x04\x00garbage, as a gRPC port answers HTTP/1.1", "no CometBFT RPC answers"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", "is not a CometBFT RPC"),
    (b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nnope", "answered HTTP 500"),
])  # fmt: skip
def test_a_server_that_is_not_cometbft_is_unavailable_not_a_crash(reply, needle):
    """What ``--node`` pointed at the wrong port meets: one gRPC status, never a traceback."""
    import socket
    import threading

    with socket.create_server(("127.0.0.1", 0)) as server:

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(reply)

        threading.Thread(target=answer, daemon=True).start()
        channel = RpcChannel(f"tcp://127.0.0.1:{server.getsockname()[1]}", timeout=5)
        with pytest.raises(grpc.RpcError) as caught:
            bank_grpc.QueryStub(channel).Balance(bank_q.QueryBalanceRequest(address="dilo1"))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert needle in caught.value.details()

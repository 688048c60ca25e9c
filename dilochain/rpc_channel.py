"""A chain client's gRPC calls answered through one node's CometBFT RPC, as Cosmos CLIs' ``--node``
works: a client that reaches a node's RPC port (26657) needs nothing else. Queries are
``abci_query`` with the method's path (the application answers every query service there, as
the SDK's gRPC query router does); ``BroadcastTx`` is ``broadcast_tx_sync``, ``GetTx`` is
``tx``, and the tendermint service's ``GetNodeInfo`` and ``GetLatestBlock``/``GetBlockByHeight``
come from ``status`` and ``block``."""

from __future__ import annotations

import base64
import http.client
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s
from cosmpy.protos.tendermint.p2p.types_pb2 import DefaultNodeInfo
from google.protobuf.message import DecodeError, Message

from dilochain.chain.comet_rpc import (
    block_from_json,
    broadcast_response,
    header_from_json,
    tx_response_from_json,
)
from dilochain.chain.errors import codes
from dilochain.protocol.endpoint import endpoint_problem
from dilochain.protocol.hashing import tx_hash

_TX_HASH = re.compile(r"[0-9A-Fa-f]{64}")
RPC_URL = re.compile(r"^(?:tcp|http)://(?P<address>[^/?#]+)/?\Z")
# ABCI query codes back to the gRPC statuses the application's router made them from.
_STATUSES = {
    codes.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    codes.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    codes.TX_DECODE: grpc.StatusCode.INVALID_ARGUMENT,
    codes.MEMPOOL_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    codes.UNKNOWN_REQUEST: grpc.StatusCode.UNIMPLEMENTED,
}


def rpc_address(url: str) -> str | None:
    """``host:port`` of a CometBFT RPC URL (``tcp://`` as CometBFT writes it, or ``http://``);
    None if ``url`` is not one."""
    match = RPC_URL.match(url.strip())
    if match is None or endpoint_problem(match["address"]) is not None:
        return None
    return match["address"]


class RpcError(grpc.RpcError):
    """A call that failed, with the gRPC status it would have had."""

    def __init__(self, status: grpc.StatusCode, details: str):
        super().__init__(details)
        self._status, self._details = status, details

    def code(self) -> grpc.StatusCode:
        return self._status

    def details(self) -> str:
        return self._details


class RpcChannel(grpc.Channel):
    """A ``grpc.Channel`` whose unary calls go to the CometBFT RPC at ``url`` (see the module
    docstring); a node that does not answer is ``UNAVAILABLE``."""

    def __init__(self, url: str, timeout: float = 30.0):
        address = rpc_address(url)
        if address is None:
            raise ValueError(f"{url[:80]!r} is not a CometBFT RPC URL (tcp://host:port)")
        self.addresses = (url,)
        self._url, self._timeout = f"http://{address}", timeout
        self._special: dict[str, Callable[[bytes, float | None], Message]] = {
            "/cosmos.tx.v1beta1.Service/BroadcastTx": self._broadcast,
            "/cosmos.tx.v1beta1.Service/GetTx": self._get_tx,
            "/cosmos.base.tendermint.v1beta1.Service/GetNodeInfo": self._node_info,
            "/cosmos.base.tendermint.v1beta1.Service/GetLatestBlock": self._latest_block,
            "/cosmos.base.tendermint.v1beta1.Service/GetBlockByHeight": self._block_at,
        }

    def call(self, method: str, timeout: float | None = None, **params: object) -> dict:
        """The ``result`` of one JSON-RPC call; :class:`RpcError` if it failed."""
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        request = urllib.request.Request(self._url, body.encode(),
                                         {"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=timeout or self._timeout) as reply:
                answer = json.load(reply)
        except urllib.error.HTTPError as err:  # CometBFT sends request errors as HTTP 500
            answer = _json_or_none(err)
            if answer is None:
                raise RpcError(grpc.StatusCode.UNAVAILABLE,
                               f"{self._url} answered HTTP {err.code}") from None  # fmt: skip
        except (OSError, ValueError, http.client.HTTPException) as err:  # refused, reset, …
            raise RpcError(grpc.StatusCode.UNAVAILABLE,
                           f"no CometBFT RPC answers at {self._url}: {err}") from None  # fmt: skip
        error = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(error, dict):
            raise RpcError(grpc.StatusCode.UNKNOWN,
                           str(error.get("data") or error.get("message")))  # fmt: skip
        if not isinstance(answer, dict) or not isinstance(answer.get("result"), dict):
            raise RpcError(grpc.StatusCode.UNAVAILABLE,
                           f"{self._url} is not a CometBFT RPC (no JSON-RPC answer)")  # fmt: skip
        return answer["result"]

    def unary(self, method: str, request: bytes, timeout: float | None = None) -> bytes:
        """The serialized answer of gRPC ``method`` to the serialized ``request``."""
        try:
            special = self._special.get(method)
            if special is not None:
                return special(request, timeout).SerializeToString()
            found = self.call("abci_query", timeout, path=method, data=request.hex())["response"]
            code = int(found.get("code") or 0)
            if code:
                status = _STATUSES.get(code, grpc.StatusCode.UNKNOWN)
                raise RpcError(status, str(found.get("log", "")))
            return base64.b64decode(found.get("value") or "", validate=True)
        except (KeyError, TypeError, AttributeError, ValueError, DecodeError) as err:
            raise RpcError(grpc.StatusCode.UNKNOWN,
                           f"unexpected answer to {method}: {err!r}"[:300]) from None  # fmt: skip

    def _broadcast(self, request: bytes, timeout: float | None) -> Message:
        raw = tx_s.BroadcastTxRequest.FromString(request).tx_bytes
        digest = tx_hash(raw).hex().upper()
        try:
            checked = self.call("broadcast_tx_sync", timeout, tx=base64.b64encode(raw).decode())
        except RpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                raise
            refused = broadcast_response(digest, None, err.details())
            return tx_s.BroadcastTxResponse(tx_response=refused)
        return tx_s.BroadcastTxResponse(tx_response=broadcast_response(digest, checked))

    def _get_tx(self, request: bytes, timeout: float | None) -> Message:
        wanted = tx_s.GetTxRequest.FromString(request).hash
        if not _TX_HASH.fullmatch(wanted):
            raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"invalid tx hash {wanted[:80]!r}: 64 hex digits")  # fmt: skip
        digest = base64.b64encode(bytes.fromhex(wanted)).decode()
        try:
            found = self.call("tx", timeout, hash=digest)
        except RpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE or "not found" not in err.details():
                raise  # down, or e.g. its tx index turned off: not worth waiting for
            raise RpcError(grpc.StatusCode.NOT_FOUND, f"tx not found: {wanted}") from None
        header = self.call("header", timeout, height=str(found["height"]))["header"]
        time_ns = header_from_json(header).time.ToNanoseconds()
        response, tx = tx_response_from_json(found, time_ns)
        return tx_s.GetTxResponse(tx=tx, tx_response=response)

    def _node_info(self, _request: bytes, timeout: float | None) -> Message:
        info = self.call("status", timeout)["node_info"]
        return tm_q.GetNodeInfoResponse(default_node_info=DefaultNodeInfo(
            network=info["network"], moniker=info.get("moniker", ""),
            version=info.get("version", "")))  # fmt: skip

    def _latest_block(self, _request: bytes, timeout: float | None) -> Message:
        block_id, block = block_from_json(self.call("block", timeout))
        return tm_q.GetLatestBlockResponse(block_id=block_id, block=block)

    def _block_at(self, request: bytes, timeout: float | None) -> Message:
        height = tm_q.GetBlockByHeightRequest.FromString(request).height
        try:
            block_id, block = block_from_json(self.call("block", timeout, height=str(height)))
        except RpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                raise
            raise RpcError(grpc.StatusCode.NOT_FOUND, f"block {height}: {err.details()}") from None
        return tm_q.GetBlockByHeightResponse(block_id=block_id, block=block)

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **_):
        """A multi-callable over :meth:`unary`."""
        return _RpcCallable(self, method, request_serializer, response_deserializer)

    def unary_stream(self, method, *args, **kwargs):
        raise NotImplementedError("streams do not go through CometBFT's RPC")

    stream_unary = stream_stream = unary_stream

    def subscribe(self, callback, try_to_connect=False):
        raise NotImplementedError("no connectivity to watch: each call is one HTTP request")

    def unsubscribe(self, callback):
        raise NotImplementedError("no connectivity to watch: each call is one HTTP request")

    def close(self) -> None:
        """Nothing held open: each call is one request."""

    def __enter__(self) -> RpcChannel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _RpcCallable(grpc.UnaryUnaryMultiCallable):
    def __init__(self, channel: RpcChannel, method: str, serialize, deserialize):
        self._channel, self._method = channel, method
        self._serialize, self._deserialize = serialize, deserialize

    def __call__(self, request, timeout=None, **_):
        return self.with_call(request, timeout)[0]

    def with_call(self, request, timeout=None, **_):
        """The answer and, for want of a gRPC call, None (no metadata comes over the RPC)."""
        raw = self._serialize(request) if self._serialize else request
        answer = self._channel.unary(self._method, raw, timeout)
        try:
            return (self._deserialize(answer) if self._deserialize else answer), None
        except DecodeError as err:
            raise RpcError(grpc.StatusCode.UNKNOWN,
                           f"undecodable answer to {self._method}: {err}") from None  # fmt: skip

    def future(self, request, timeout=None, **_):
        raise NotImplementedError("calls through CometBFT's RPC are synchronous")


def _json_or_none(err: urllib.error.HTTPError) -> object:
    """The JSON body of an HTTP error answer (None if it has none)."""
    try:
        return json.loads(err.read(1 << 20))
    except (OSError, ValueError, http.client.HTTPException):
        return None

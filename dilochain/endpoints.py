"""Several chain nodes behind one gRPC channel, so a client rides out a node's restart or a
short outage: each call goes to the node that answered last; a transient failure (the node is
down, restarting, paused or overloaded) moves it to the next node, and after a pass over all of
them it waits with exponential backoff, up to ``patience`` seconds, before giving up. The first
failure of an outage and the recovery are logged once each."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Annotated

import grpc
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from pydantic import BeforeValidator

from dilochain.protocol.endpoint import (
    PRIVATE_SWITCH,
    endpoint_problem,
    settle_private_peers,
)

log = logging.getLogger(__name__)

TRANSIENT = frozenset({
    grpc.StatusCode.UNAVAILABLE,  # down, restarting, connection reset
    grpc.StatusCode.DEADLINE_EXCEEDED,  # paused, or too slow for one attempt
    grpc.StatusCode.RESOURCE_EXHAUSTED,  # busy (the simulation gate)
})  # fmt: skip
ATTEMPT_SECONDS = 5.0  # one attempt at a node: a paused node must not hang a call for long
PATIENCE_SECONDS = 30.0
# gRPC waits up to 120 s between reconnects to a node that went away; a node back from a
# restart must be found within about a second: its chain goes on at once, and a reveal window
# is a few blocks (a host that backed off 4 s, 2 s a reconnect, was back 6 s after a devnet's
# validator and missed its reveal: slashed). Asking a node that is down once a second costs
# nothing.
RECONNECT = [("grpc.initial_reconnect_backoff_ms", 500), ("grpc.min_reconnect_backoff_ms", 500),
             ("grpc.max_reconnect_backoff_ms", 1000)]  # fmt: skip
MAX_BACKOFF_SECONDS = 1.0
LATEST_BLOCK = "/cosmos.base.tendermint.v1beta1.Service/GetLatestBlock"


def transient(err: grpc.RpcError) -> bool:
    """Whether a failed call is worth making again, here or at another node (a message over
    the size limit is RESOURCE_EXHAUSTED too, and no node will take it)."""
    return err.code() in TRANSIENT and "larger than max" not in (err.details() or "")


class AddressError(ValueError):
    """A chain address that is not ``host:port``."""


def parse_addresses(value: str | Sequence[str]) -> tuple[str, ...]:
    """The chain nodes' gRPC addresses from ``"host:port"``, ``"a:1,b:2"`` or a list of such;
    raises :class:`AddressError` naming what is wrong."""
    items = [value] if isinstance(value, str) else list(value)
    found: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise AddressError(f"a chain address is a string, not {item!r}")
        for part in item.split(","):
            address = part.strip()
            if address:
                found.append(_checked(address))
    if not found:
        raise AddressError("no chain address given (host:port, e.g. 127.0.0.1:9090)")
    return tuple(dict.fromkeys(found))


def _checked(address: str) -> str:
    if "://" in address:
        raise AddressError(
            f"{address!r} is a URL: give the chain's gRPC address as host:port "
            "(e.g. 127.0.0.1:9090), not CometBFT's RPC URL"
        )
    problem = endpoint_problem(address)
    if problem is not None:
        raise AddressError(f"{address[:80]!r} is not host:port (e.g. 127.0.0.1:9090): {problem}")
    return address


# A config field: one address, a comma-separated list or a TOML array of them.
ChainAddresses = Annotated[tuple[str, ...], BeforeValidator(parse_addresses)]


def open_channel(
    addresses: str | Sequence[str], patience: float = PATIENCE_SECONDS
) -> grpc.Channel:  # fmt: skip
    """A channel to the chain: through one node's CometBFT RPC when ``addresses`` is its URL
    (``tcp://host:26657``, as ``--node`` gives it; :class:`~dilochain.rpc_channel.RpcChannel`),
    else over the nodes' gRPC (:class:`FailoverChannel`)."""
    from dilochain.rpc_channel import RpcChannel, rpc_address

    items = [addresses] if isinstance(addresses, str) else list(addresses)
    settle_private_peers([a for item in items for a in item.split(",") if a],
                         os.environ.get(PRIVATE_SWITCH, ""))  # fmt: skip
    if len(items) == 1 and isinstance(items[0], str) and rpc_address(items[0]) is not None:
        return RpcChannel(items[0], timeout=patience)
    return FailoverChannel(addresses, patience)


def shown(addresses: Sequence[str]) -> str:
    """Addresses as one line for messages."""
    return ", ".join(addresses)


class FailoverChannel(grpc.Channel):
    """A ``grpc.Channel`` over several nodes of one chain (see the module docstring). Unary
    calls, which are all a chain client makes, fail over and retry; streams go to the current
    node."""

    def __init__(
        self, addresses: str | Sequence[str], patience: float = PATIENCE_SECONDS,
        attempt_seconds: float = ATTEMPT_SECONDS,
    ):  # fmt: skip
        self.addresses = parse_addresses(addresses)
        self.patience = patience
        self.attempt_seconds = attempt_seconds
        self._channels = [grpc.insecure_channel(a, options=RECONNECT) for a in self.addresses]
        self._index = 0
        self._down_since: float | None = None  # monotonic time the current outage began
        self._lock = threading.Lock()

    @property
    def current(self) -> str:
        """The address calls go to now."""
        return self.addresses[self._index]

    def _failed(self, index: int, err: grpc.RpcError) -> None:
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
                following = self.addresses[(index + 1) % len(self.addresses)]
                log.warning("chain node %s: %s (%s); %s", self.addresses[index],
                            err.code().name, (err.details() or "")[:120],
                            f"trying {following}" if following != self.addresses[index]
                            else "retrying")  # fmt: skip
            if self._index == index:
                self._index = (index + 1) % len(self.addresses)

    def move_ahead(self, height: int) -> str | None:
        """Make the node with the newest block the current one, if that block is past
        ``height`` (the newest the current node showed): a node cut off from its peers answers
        every call, frozen at its height, and a client on it would miss every window while the
        chain goes on. Each other node gets one short attempt; the address moved to, or None."""
        best, newest = None, height
        for index, channel in enumerate(self._channels):
            if index == self._index:
                continue
            latest = channel.unary_unary(
                LATEST_BLOCK, request_serializer=tm_q.GetLatestBlockRequest.SerializeToString,
                response_deserializer=tm_q.GetLatestBlockResponse.FromString,
            )  # fmt: skip
            try:
                found = latest(tm_q.GetLatestBlockRequest(), timeout=self.attempt_seconds)
            except grpc.RpcError:
                continue
            if found.block.header.height > newest:
                best, newest = index, found.block.header.height
        if best is None:
            return None
        with self._lock:
            behind, self._index = self.addresses[self._index], best
        log.warning("chain node %s shows no block past %d; %s is at %d: moved there", behind,
                    height, self.addresses[best], newest)  # fmt: skip
        return self.addresses[best]

    def _answered(self, index: int) -> None:
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is not None:
                log.warning("chain reachable again at %s after %.1f s", self.addresses[index],
                            time.monotonic() - self._down_since)  # fmt: skip
                self._down_since = None

    def _call(self, method: str, kwargs: dict, request, timeout, **call):
        """``with_call`` on the current node, failing over and backing off on transient errors
        until the caller's ``timeout`` (else ``patience``) runs out."""
        deadline = time.monotonic() + (self.patience if timeout is None else timeout)
        delay, tried = 0.25, 0
        while True:
            index = self._index
            remaining = deadline - time.monotonic()
            attempt = max(0.05, min(self.attempt_seconds, remaining))
            stub = self._channels[index].unary_unary(method, **kwargs)
            try:
                answer = stub.with_call(request, timeout=attempt, **call)
            except grpc.RpcError as err:
                if not transient(err):
                    raise
                self._failed(index, err)
                tried += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                if tried % len(self.addresses) == 0:  # a pass over every node: back off
                    time.sleep(min(delay, remaining))
                    delay = min(2 * delay, MAX_BACKOFF_SECONDS)
                continue
            self._answered(index)
            return answer

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **kw):
        """A multi-callable that fails over (``_registered_method`` and the like pass through)."""
        kwargs = dict(kw, request_serializer=request_serializer,
                      response_deserializer=response_deserializer)  # fmt: skip
        return _FailoverCallable(self, method, kwargs)

    def unary_stream(self, method, *args, **kwargs):
        return self._channels[self._index].unary_stream(method, *args, **kwargs)

    def stream_unary(self, method, *args, **kwargs):
        return self._channels[self._index].stream_unary(method, *args, **kwargs)

    def stream_stream(self, method, *args, **kwargs):
        return self._channels[self._index].stream_stream(method, *args, **kwargs)

    def subscribe(self, callback, try_to_connect=False):
        self._channels[self._index].subscribe(callback, try_to_connect)

    def unsubscribe(self, callback):
        self._channels[self._index].unsubscribe(callback)

    def close(self) -> None:
        """Close every node's channel."""
        for channel in self._channels:
            channel.close()

    def __enter__(self) -> FailoverChannel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _FailoverCallable(grpc.UnaryUnaryMultiCallable):
    def __init__(self, channel: FailoverChannel, method: str, kwargs: dict):
        self._channel = channel
        self._method = method
        self._kwargs = kwargs

    def __call__(self, request, timeout=None, **call):
        return self.with_call(request, timeout, **call)[0]

    def with_call(self, request, timeout=None, **call):
        return self._channel._call(self._method, self._kwargs, request, timeout, **call)

    def future(self, request, timeout=None, **call):
        stub = self._channel._channels[self._channel._index].unary_unary(
            self._method, **self._kwargs
        )
        return stub.future(request, timeout, **call)

"""ABCI ``Query`` by gRPC method path, as the Cosmos SDK's GRPCQueryRouter answers ``abci_query``.

``abci_query`` with path ``/cosmos.bank.v1beta1.Query/Balance`` and the request's protobuf
bytes runs the same servicer method the gRPC server runs, and answers the response's bytes.
Only methods the servicer implements are routed (a generated base method that answers
UNIMPLEMENTED is an unknown path); whatever a query sends, the answer is a response with a
code, never an exception, since CometBFT stops the node on an exception.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from dilochain.chain.errors import CODESPACE, codes

log = logging.getLogger(__name__)

MAX_PATH = 256  # longer paths are answered as unknown without being echoed
ABCI_QUERY_PEER = "abci_query"  # what a servicer's context.peer() says under this router
_STATUS_CODES = {
    grpc.StatusCode.NOT_FOUND: codes.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT: codes.INVALID_REQUEST,
    grpc.StatusCode.RESOURCE_EXHAUSTED: codes.MEMPOOL_FULL,
    grpc.StatusCode.UNIMPLEMENTED: codes.UNKNOWN_REQUEST,
}


class _Aborted(Exception):
    def __init__(self, status: grpc.StatusCode, details: str):
        super().__init__(details)
        self.status = status
        self.details = details


class _ServicerContext:
    """What a grpc.aio servicer context offers a query servicer, without a call behind it."""

    def __init__(self) -> None:
        self._code: grpc.StatusCode | None = None
        self._details = ""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise _Aborted(code, details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def invocation_metadata(self) -> tuple:
        return ()

    def peer(self) -> str:
        return ABCI_QUERY_PEER

    def time_remaining(self) -> float | None:
        return None


def failure(code: int, log_line: str, height: int) -> abci.ResponseQuery:
    """A refused query: its code (in the ``sdk`` codespace), log line and height."""
    return abci.ResponseQuery(code=code, log=log_line, codespace=CODESPACE, height=height)


def _generated_base(servicer: object) -> type | None:
    """The grpcio-generated ``…Servicer`` class ``servicer`` derives from (its methods answer
    UNIMPLEMENTED)."""
    return next((c for c in type(servicer).__mro__ if c.__module__.endswith("_pb2_grpc")), None)


# A path answered from raw bytes: (data, prove) -> the answer
RawQuery = Callable[[bytes, bool], abci.ResponseQuery]


class QueryRouter:
    """Routes ``/package.Service/Method`` paths to servicer methods, and raw paths
    (``/store/main/key``) to their handlers."""

    def __init__(self, height: Callable[[], int]):
        self._height = height
        self._routes: dict[str, tuple[Callable[..., Awaitable], type]] = {}
        self._raw: dict[str, RawQuery] = {}

    @property
    def paths(self) -> list[str]:
        """Every routed path, sorted."""
        return sorted([*self._routes, *self._raw])

    def add_raw(self, path: str, answer: RawQuery) -> None:
        """Route ``path`` to ``answer(data, prove)``."""
        self._raw[path] = answer

    def add(
        self, servicer: object, service: ServiceDescriptor, only: set[str] | None = None
    ) -> None:
        """Route every method of ``service`` that ``servicer`` implements (of ``only``, if
        given)."""
        base = _generated_base(servicer)
        for method in service.methods:
            if only is not None and method.name not in only:
                continue
            handler = getattr(servicer, method.name)
            if base is not None and getattr(type(servicer), method.name) is getattr(
                base, method.name, None
            ):
                continue  # the generated stub: UNIMPLEMENTED
            self._routes[f"/{service.full_name}/{method.name}"] = (
                handler,
                GetMessageClass(method.input_type),
            )

    async def query(self, path: str, data: bytes, prove: bool = False) -> abci.ResponseQuery:
        """Answer one ABCI query at the latest committed height; always a response."""
        height = self._height()
        try:
            return await self._answer(path, data, prove, height)
        except Exception as err:  # a bug in a handler must never reach CometBFT
            log.exception("query %r failed", path[:MAX_PATH])
            return failure(codes.INTERNAL, f"internal error: {type(err).__name__}", height)

    async def _answer(self, path: str, data: bytes, prove: bool, height: int):
        raw = self._raw.get(path)
        if raw is not None:
            return raw(data, prove)
        route = self._routes.get(path)
        if route is None:
            shown = path if len(path) <= MAX_PATH else path[:MAX_PATH] + "…"
            return failure(codes.UNKNOWN_REQUEST, f"unknown query path {shown!r}", height)
        if prove:
            return failure(codes.INVALID_REQUEST, "proofs are given for state keys (path "
                            "/store/main/key), not for gRPC query paths", height)  # fmt: skip
        handler, request_type = route
        try:
            request = request_type.FromString(data)
        except (DecodeError, ValueError) as err:
            return failure(codes.TX_DECODE, f"undecodable {request_type.__name__}: {err}", height)
        context = _ServicerContext()
        try:
            response = await handler(request, context)
        except _Aborted as err:
            return failure(_STATUS_CODES.get(err.status, codes.INTERNAL), err.details, height)
        if context.code() not in (None, grpc.StatusCode.OK) or response is None:
            status = context.code() or grpc.StatusCode.INTERNAL
            return failure(_STATUS_CODES.get(status, codes.INTERNAL), context.details(), height)
        return abci.ResponseQuery(code=0, value=response.SerializeToString(), height=height)

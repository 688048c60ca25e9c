"""ABCI ``Query`` by gRPC method path, as the Cosmos SDK's GRPCQueryRouter answers ``abci_query``.

``abci_query`` with path ``/cosmos.bank.v1beta1.Query/Balance`` and the request's protobuf
bytes runs the same servicer method the gRPC server runs, and answers the response's bytes.
"""

from __future__ import annotations

import grpc
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from dilochain.chain.errors import CODESPACE, codes

_STATUS_CODES = {
    grpc.StatusCode.NOT_FOUND: codes.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT: codes.INVALID_REQUEST,
}


class _Aborted(Exception):
    def __init__(self, status: grpc.StatusCode, details: str):
        super().__init__(details)
        self.status = status
        self.details = details


class _ServicerContext:
    """The part of a grpc.aio servicer context the query servicers use."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


def _failure(code: int, log: str, height: int) -> abci.ResponseQuery:
    return abci.ResponseQuery(code=code, log=log, codespace=CODESPACE, height=height)


class QueryRouter:
    """Routes ``/package.Service/Method`` paths to servicer methods."""

    def __init__(self, height: callable):
        self._height = height
        self._routes: dict[str, tuple[object, type]] = {}

    def add(self, servicer: object, service: ServiceDescriptor) -> None:
        """Route every method of ``service`` to ``servicer``."""
        for method in service.methods:
            handler = getattr(servicer, method.name)
            self._routes[f"/{service.full_name}/{method.name}"] = (
                handler,
                GetMessageClass(method.input_type),
            )

    async def query(self, path: str, data: bytes) -> abci.ResponseQuery:
        """Answer one ABCI query at the latest committed height."""
        height = self._height()
        route = self._routes.get(path)
        if route is None:
            return _failure(codes.UNKNOWN_REQUEST, f"unknown query path {path!r}", height)
        handler, request_type = route
        try:
            request = request_type.FromString(data)
        except DecodeError as err:
            return _failure(codes.TX_DECODE, f"undecodable {request_type.__name__}: {err}", height)
        try:
            response = await handler(request, _ServicerContext())
        except _Aborted as err:
            return _failure(_STATUS_CODES.get(err.status, codes.INTERNAL), err.details, height)
        return abci.ResponseQuery(code=0, value=response.SerializeToString(), height=height)

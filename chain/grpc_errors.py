"""A gRPC server interceptor: a request that does not decode is INVALID_ARGUMENT, with a message.

grpcio answers a request its deserializer rejects with a bare UNKNOWN/INTERNAL; this wraps every
unary method's deserializer so the handler itself can answer ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError


class _Undecodable:
    def __init__(self, error: str):
        self.error = error


def _tolerant(deserialize):
    def decode(raw: bytes):
        try:
            return deserialize(raw)
        except (DecodeError, ValueError, RuntimeError) as err:
            return _Undecodable(f"request does not decode: {err}")

    return decode


def _guarded(behavior):
    async def handle(request, context):
        if isinstance(request, _Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.error)
        return await behavior(request, context)

    return handle


class DecodeErrorsAsInvalidArgument(grpc.aio.ServerInterceptor):
    """Answers undecodable requests to every unary-unary method with INVALID_ARGUMENT."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            _guarded(handler.unary_unary),
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

"""gRPC server interceptors: a request that does not decode is INVALID_ARGUMENT, with a message
(grpcio answers a request its deserializer rejects with a bare UNKNOWN/INTERNAL; this wraps
every unary method's deserializer so the handler itself can answer ``INVALID_ARGUMENT``); and a
node that is starting or catching up answers UNAVAILABLE, so clients fail over to a node whose
state is current instead of reading this one's stale state.
"""

from __future__ import annotations

import grpc

from dilochain.protocol.grpc_decode import Undecodable, tolerant


def _guarded(behavior):
    async def handle(request, context):
        if isinstance(request, Undecodable):
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
            request_deserializer=tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )


# Methods that answer about the node itself: served whatever its state.
ALWAYS_SERVED = ("/cosmos.base.tendermint.v1beta1.Service/GetNodeInfo",
                 "/cosmos.base.tendermint.v1beta1.Service/GetSyncing")  # fmt: skip


class Readiness:
    """Whether the node's state is current (CometBFT answers and is not catching up)."""

    def __init__(self) -> None:
        self.ready = True
        self.why = ""


class UnavailableUntilReady(grpc.aio.ServerInterceptor):
    """Answers every unary-unary method but :data:`ALWAYS_SERVED` with UNAVAILABLE while the
    node is not :class:`Readiness`.ready."""

    def __init__(self, readiness: Readiness):
        self.readiness = readiness

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if (handler is None or handler.unary_unary is None
                or handler_call_details.method in ALWAYS_SERVED):  # fmt: skip
            return handler
        behavior, readiness = handler.unary_unary, self.readiness

        async def gated(request, context):
            if not readiness.ready:
                await context.abort(grpc.StatusCode.UNAVAILABLE, readiness.why)
            return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            gated,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

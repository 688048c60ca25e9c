"""Calls a node holds whose requests are not in yet. A gRPC call costs the node its state (~16 KB,
measured) and what has come of its request, from its first frame until it ends, and a caller need
never finish its request: 5,000 such calls over 50 connections took a server from 35 to 117 MB,
and grpcio runs a unary method (and every interceptor's wrapper of it) only once its request is
in, so nothing counted them. Each unary call (a unary answer or a stream of them) is served here
as a request stream, which grpcio hands over at its first frame: the call is counted, by its
caller's address, from then until it is over (answered, or its caller gone), and one that would
take its address past :data:`CALLER_CALLS`, or other machines' callers past :data:`NODE_CALLS`,
is refused ``RESOURCE_EXHAUSTED`` at once, its stream closed and nothing of its request read.
This machine's own callers (its hosts, verifiers and REST gateway) count against
:data:`LOCAL_CALLS` alone, so strangers who fill theirs refuse no protocol tx of the node's own
processes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import grpc

from dilochain.protocol.caller_budget import CallerBudget
from dilochain.protocol.endpoint import caller_address

# Calls held at once for other machines' callers and for one caller's address (an IPv4
# address, an IPv6 /64), and for this machine's own. A client keeps a handful at once (a host
# or verifier: its block stream and a query or a tx); a held call costs the node ~16 KB and
# what has come of its request (a tx's is at most the chain's 1 MiB).
NODE_CALLS = 512
CALLER_CALLS = 32
LOCAL_CALLS = 2048
# Seconds a call's request has to arrive once its first frame has: the chain's largest tx
# (1 MiB) at 280 kbit/s. A caller that drips its request (and answers the keepalive pings that
# close a silent one) holds its place this long at most, then must call again.
REQUEST_SECONDS = 30.0


class BoundedCalls(grpc.aio.ServerInterceptor):
    """Counts every unary-request call from its first frame until it is over, and refuses,
    ``RESOURCE_EXHAUSTED``, one its caller's budget (calls; by default :data:`NODE_CALLS` and
    :data:`CALLER_CALLS` for ``strangers``, :data:`LOCAL_CALLS` for this machine's callers,
    ``local``) cannot hold. Outermost of a server's interceptors: the method is served as a
    request stream, which the next interceptors do not see."""

    def __init__(self, strangers: CallerBudget | None = None, local: CallerBudget | None = None):
        self.strangers = strangers or CallerBudget(NODE_CALLS, CALLER_CALLS)
        self.local = local or CallerBudget(LOCAL_CALLS, LOCAL_CALLS)

    async def _admit(self, context) -> None:
        """Hold a call for ``context``'s caller until the call is over, or refuse it."""
        who = caller_address(context.peer())
        budget = self.local if who == "" else self.strangers
        if not budget.take(who):
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "busy: this node holds as many calls of yours (or of strangers) as it may; ask "
                "again once earlier ones are over",
            )
        context.add_done_callback(lambda _: budget.give(who))

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        admit = self._admit
        if handler.unary_unary is not None:
            answer = handler.unary_unary

            async def unary(requests: AsyncIterator, context):
                await admit(context)
                return await answer(await _one(requests, context), context)

            return grpc.stream_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        stream = handler.unary_stream

        async def streamed(requests: AsyncIterator, context):
            await admit(context)
            answers = stream(await _one(requests, context), context)
            if inspect.isasyncgen(answers):
                async for answer in answers:
                    yield answer
            else:  # a coroutine that writes its answers through the context
                await answers

        return grpc.stream_stream_rpc_method_handler(
            streamed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


async def _one(requests: AsyncIterator, context):
    """The one request of a unary call, if it arrives within :data:`REQUEST_SECONDS`."""
    try:
        async with asyncio.timeout(REQUEST_SECONDS):
            async for request in requests:
                return request
    except TimeoutError:
        await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"the request did not arrive within {REQUEST_SECONDS:g} s")  # fmt: skip
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a unary call without a request")

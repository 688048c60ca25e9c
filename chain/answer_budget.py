"""What a node holds for callers that do not read their answers. A gRPC answer stays in the
node's memory until its caller reads it, and a caller need never read (an HTTP/2 window of
zero): 400 unread ``GetBlockByHeight`` answers of one 1.4 MB block took a node from 129 MB to
1.7 GB, and a full 21 MiB block's would take any machine's memory, so one anonymous client
could stop a validator. Every unary answer is counted from the moment its handler returns until
the call is over (delivered, or its caller gone); an answer that would take the node past
:data:`NODE_ANSWER_BYTES` in all, or a caller's address past :data:`CALLER_ANSWER_BYTES`, is
refused ``RESOURCE_EXHAUSTED`` instead, and the caller may ask again once it has read what it
asked before. The REST gateway bounds its own answers in flight with the same
:class:`CallerBudget`.
"""

from __future__ import annotations

import grpc

from dilochain.chain.caller_budget import CallerBudget
from dilochain.protocol.endpoint import caller_address

# Answer bytes held for all callers at once, and for one caller's address (an IPv6 /64). A held
# answer costs the node about three times its bytes (the message, its encoding, the
# transport's copy): 256 MiB is under 1 GiB of memory, and one full block for each of 8 callers.
NODE_ANSWER_BYTES = 256 << 20
CALLER_ANSWER_BYTES = 32 << 20
# What an answer costs however small it is (the call's own state): a flood of tiny unread
# answers is bounded too.
MIN_ANSWER_BYTES = 1 << 10


class BoundedAnswers(grpc.aio.ServerInterceptor):
    """Refuses, ``RESOURCE_EXHAUSTED``, a unary answer that ``budget`` (bytes; by default
    :data:`NODE_ANSWER_BYTES` and :data:`CALLER_ANSWER_BYTES`) cannot hold until it is read.
    A handler may answer with bytes, its answer already encoded (a cached block's), which are
    sent as they are."""

    def __init__(self, budget: CallerBudget | None = None):
        self.budget = budget or CallerBudget(NODE_ANSWER_BYTES, CALLER_ANSWER_BYTES)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        behavior, budget = handler.unary_unary, self.budget

        async def bounded(request, context):
            answer = await behavior(request, context)
            encoded = isinstance(answer, bytes)
            size = max(len(answer) if encoded else answer.ByteSize(), MIN_ANSWER_BYTES)
            who = caller_address(context.peer())
            if not budget.take(who, size):
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"busy: this node holds as many unread answers as it may (this one is "
                    f"{size} bytes); ask again once earlier answers are read",
                )
            context.add_done_callback(lambda _: budget.give(who, size))
            return answer

        return grpc.unary_unary_rpc_method_handler(
            bounded,
            request_deserializer=handler.request_deserializer,
            response_serializer=_encoded_as_is(handler.response_serializer),
        )


def _encoded_as_is(serialize):
    """``serialize``, but an answer that is bytes already is sent as it is."""
    if serialize is None:
        return None
    return lambda answer: answer if isinstance(answer, bytes) else serialize(answer)

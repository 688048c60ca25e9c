"""What a node holds for callers that do not read their answers. A gRPC answer stays in the
node's memory until its caller reads it, and a caller need never read (an HTTP/2 window of
zero): 400 unread ``GetBlockByHeight`` answers of one 1.4 MB block took a node from 129 MB to
1.7 GB, and a full 21 MiB block's would take any machine's memory, so one anonymous client
could stop a validator. Every unary answer is counted from the moment its handler returns until
the call is over (delivered, or its caller gone); an answer that would take other machines'
callers past :data:`NODE_ANSWER_BYTES` in all, or a caller's address past
:data:`CALLER_ANSWER_BYTES`, is refused ``RESOURCE_EXHAUSTED`` instead (and a caller with no
room left is refused before its call runs), and the caller may ask again once it has read what
it asked before. This machine's own callers (its hosts and verifiers, the REST gateway, which
bounds its strangers itself) have a budget of their own, so strangers who fill theirs refuse
no protocol tx of the node's own processes.
"""

from __future__ import annotations

import logging

import grpc

from dilochain.protocol.caller_budget import CallerBudget
from dilochain.protocol.endpoint import caller_address

# Answer bytes held for other machines' callers at once, and for one caller's address (an IPv6
# /64); as many again for this machine's own. A held answer costs the node about its bytes when
# it was kept encoded (blocks, txs) and three times when it is a message (the message, its
# encoding, the transport's copy).
NODE_ANSWER_BYTES = 256 << 20
CALLER_ANSWER_BYTES = 32 << 20
# What an answer is counted as however small it is: a held call costs the node ~25 KB of its
# own (measured), so a flood of tiny unread answers is bounded by the same budget.
MIN_ANSWER_BYTES = 32 << 10


class BoundedAnswers(grpc.aio.ServerInterceptor):
    """Refuses, ``RESOURCE_EXHAUSTED``, a unary answer that its caller's budget (bytes; by
    default :data:`NODE_ANSWER_BYTES` and :data:`CALLER_ANSWER_BYTES` for ``strangers``,
    :data:`NODE_ANSWER_BYTES` for this machine's callers, ``local``) cannot hold until it is
    read. A handler may answer with bytes, its answer already encoded (a cached block's), which
    are sent as they are (so only behind this interceptor)."""

    def __init__(self, strangers: CallerBudget | None = None, local: CallerBudget | None = None):
        self.strangers = strangers or CallerBudget(NODE_ANSWER_BYTES, CALLER_ANSWER_BYTES)
        self.local = local or CallerBudget(NODE_ANSWER_BYTES, NODE_ANSWER_BYTES)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        behavior = handler.unary_unary

        async def bounded(request, context):
            who = caller_address(context.peer())
            budget = self.local if who == "" else self.strangers
            if not budget.room(who, MIN_ANSWER_BYTES):  # nothing done for a caller refused
                await _busy(context, MIN_ANSWER_BYTES)
            answer = await behavior(request, context)
            encoded = isinstance(answer, bytes)
            size = max(len(answer) if encoded else answer.ByteSize(), MIN_ANSWER_BYTES)
            if not budget.take(who, size):
                await _busy(context, size)
            context.add_done_callback(lambda _: budget.give(who, size))
            return answer

        return grpc.unary_unary_rpc_method_handler(
            bounded,
            request_deserializer=handler.request_deserializer,
            response_serializer=_encoded_as_is(handler.response_serializer),
        )


async def _busy(context, size: int) -> None:
    await context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"busy: this node holds as many unread answers as it may (this one is counted as "
        f"{size} bytes); ask again once earlier answers are read",
    )


class _CallerGone(logging.Filter):
    """Drops grpcio's error, with its traceback, for an answer whose caller went away before
    taking it: a stranger could write one to the node's log per call it leaves unread."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("ExecuteBatchError raised in core")


def quiet_departed_callers() -> None:
    """Install :class:`_CallerGone` on grpcio's logger (once)."""
    logger = logging.getLogger("grpc._cython.cygrpc")
    if not any(isinstance(f, _CallerGone) for f in logger.filters):
        logger.addFilter(_CallerGone())


def _encoded_as_is(serialize):
    """``serialize``, but an answer that is bytes already is sent as it is."""
    if serialize is None:
        return None
    return lambda answer: answer if isinstance(answer, bytes) else serialize(answer)

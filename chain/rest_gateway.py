"""The REST (LCD) server: grpc-gateway's JSON mapping of the node's gRPC services, built from
their service definitions rather than route by route.

Every method whose definition carries a ``google.api.http`` rule (the Cosmos SDK's query and tx
services: ``GET /cosmos/bank/v1beta1/balances/{address}``, ``POST /cosmos/tx/v1beta1/txs`` …) is
served at its path; a method without one (``dilochain.poc.v1.Query``) at ``GET
/{package as path}/{method in snake_case}`` (``/dilochain/poc/v1/round_info?run_id=r``). Path
segments and query parameters (``pagination.limit=5``) fill the request, a POST's JSON body too;
the call goes to the node's own gRPC server, as grpc-gateway proxies, so REST answers exactly
what gRPC answers. Responses are the protobuf JSON mapping with proto field names and every
field present (as the SDK's gateway); errors are ``{"code", "message", "details"}`` with the
HTTP status grpc-gateway gives the gRPC code.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import threading
from dataclasses import dataclass

import grpc
from aiohttp import web
from google.api import annotations_pb2
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from dilochain.chain.answer_budget import CALLER_ANSWER_BYTES, NODE_ANSWER_BYTES
from dilochain.protocol.caller_budget import CallerBudget
from dilochain.protocol.endpoint import caller_of

MAX_BODY_BYTES = 2 << 20  # a POST's JSON (a tx of up to 1 MiB, base64)
MAX_RESPONSE_BYTES = 64 << 20  # a large block or a long page, from the node's own gRPC
# Requests answered at once, in all and from one caller's address (an IPv6 /64; this machine's
# own callers are bounded by the first alone); more are told to come back (429).
MAX_IN_FLIGHT = 16
CALLER_IN_FLIGHT = 4
READ_SECONDS = 10.0  # a body that takes longer to arrive is refused
# Answers being written are held within the gRPC server's budgets of unread bytes
# (``answer_budget``), and a caller that has not taken its answer within SEND_SECONDS plus its
# bytes at SEND_RATE (1 Mbit/s) is cut off: a caller that never read held its answers in the
# gateway's memory for ever, as many as it had connections.
SEND_SECONDS = 10.0
SEND_RATE = 128 << 10  # bytes a second
_HTTP_STATUS = {  # grpc-gateway's mapping of gRPC codes
    grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400, grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409, grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429, grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501, grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}  # fmt: skip
_TEMPLATE_VARIABLE = re.compile(r"\{([a-z_][a-z0-9_.]*)(=[^}]*)?\}")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


@dataclass(frozen=True)
class Route:
    """One HTTP route onto one gRPC method."""

    verb: str  # "GET" or "POST"
    path: str  # aiohttp's form: {name} for a segment, {name:.+} for a rest-of-path variable
    grpc_path: str  # /package.Service/Method
    request: type[Message]
    response: type[Message]
    body: bool  # the request (or its remainder) comes as a JSON body


def _aiohttp_path(template: str) -> str:
    """``/a/{denom=**}`` -> ``/a/{denom:.+}``; ``/a/{address}`` unchanged."""
    return _TEMPLATE_VARIABLE.sub(
        lambda m: "{" + m.group(1) + (":.+" if m.group(2) else "") + "}", template
    )


def routes(services: list[ServiceDescriptor]) -> list[Route]:
    """The HTTP routes of ``services``' methods (see the module's docstring)."""
    found = []
    for service in services:
        for method in service.methods:
            request = GetMessageClass(method.input_type)
            response = GetMessageClass(method.output_type)
            grpc_path = f"/{service.full_name}/{method.name}"
            rule = method.GetOptions().Extensions[annotations_pb2.http]
            bindings = [rule, *rule.additional_bindings]
            verbs = [(b.WhichOneof("pattern"), b) for b in bindings if b.WhichOneof("pattern")]
            if not verbs:
                package = service.full_name.rsplit(".", 1)[0].replace(".", "/")
                path = f"/{package}/{_CAMEL.sub('_', method.name).lower()}"
                found.append(Route("GET", path, grpc_path, request, response, False))
            for verb, binding in verbs:
                if verb in ("get", "post"):
                    path = _aiohttp_path(getattr(binding, verb))
                    body = bool(binding.body)
                    found.append(Route(verb.upper(), path, grpc_path, request, response, body))
    return found


class BadRequest(ValueError):
    """A parameter that does not fit the request message."""


def _scalar(field: FieldDescriptor, text: str) -> object:
    kinds = FieldDescriptor
    if field.cpp_type in (kinds.CPPTYPE_INT32, kinds.CPPTYPE_INT64, kinds.CPPTYPE_UINT32,
                          kinds.CPPTYPE_UINT64, kinds.CPPTYPE_ENUM):  # fmt: skip
        if field.cpp_type == kinds.CPPTYPE_ENUM and not text.lstrip("-").isdigit():
            value = field.enum_type.values_by_name.get(text)
            if value is None:
                raise BadRequest(f"{field.name}: no value {text[:64]!r}")
            return value.number
        try:
            return int(text)
        except ValueError:
            raise BadRequest(f"{field.name}: {text[:64]!r} is not an integer") from None
    if field.cpp_type == kinds.CPPTYPE_BOOL:
        if text not in ("true", "false", "1", "0"):
            raise BadRequest(f"{field.name}: {text[:64]!r} is not true or false")
        return text in ("true", "1")
    if field.cpp_type in (kinds.CPPTYPE_FLOAT, kinds.CPPTYPE_DOUBLE):
        try:
            return float(text)
        except ValueError:
            raise BadRequest(f"{field.name}: {text[:64]!r} is not a number") from None
    if field.type == kinds.TYPE_BYTES:  # base64, standard or URL-safe, padded or not
        # (a "+" in a query string arrives as a space)
        padded = text.replace(" ", "+").replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4)
        try:
            return base64.b64decode(padded, validate=True)
        except binascii.Error:
            raise BadRequest(f"{field.name}: not base64") from None
    return text


def set_parameter(message: Message, dotted: str, text: str) -> None:
    """Set ``message``'s field at ``dotted`` (``pagination.limit``) from a URL parameter."""
    *parents, name = dotted.split(".")
    target = message
    for part in parents:
        field = target.DESCRIPTOR.fields_by_name.get(part)
        if field is None or field.message_type is None or _repeated(field):
            raise BadRequest(f"no field {dotted[:128]!r}")
        target = getattr(target, part)
    field = target.DESCRIPTOR.fields_by_name.get(name)
    if field is None or (field.message_type is not None):
        raise BadRequest(f"no field {dotted[:128]!r}")
    value = _scalar(field, text)
    if _repeated(field):
        getattr(target, name).append(value)
    else:
        setattr(target, name, value)


def _repeated(field: FieldDescriptor) -> bool:
    return field.label == FieldDescriptor.LABEL_REPEATED


def _error(status: grpc.StatusCode, message: str, http_status: int = 0) -> web.Response:
    return web.json_response(
        {"code": status.value[0], "message": message, "details": []},
        status=http_status or _HTTP_STATUS.get(status, 500),
    )


async def _sent(response: web.Response, request: web.Request) -> web.StreamResponse:
    """``response`` written to its caller, who must take it within :data:`SEND_SECONDS` and
    its bytes at :data:`SEND_RATE`; else, or if the caller went away, the connection is
    closed."""
    allowed = SEND_SECONDS + (response.content_length or 0) / SEND_RATE
    try:
        await asyncio.wait_for(_write(response, request), allowed)
    except (TimeoutError, ConnectionError):
        if request.transport is not None:
            request.transport.abort()
    return response


async def _write(response: web.Response, request: web.Request) -> None:
    await response.prepare(request)
    await response.write_eof()


class RestGateway:
    """:func:`routes` onto the gRPC server at ``grpc_address``, served by aiohttp on a thread
    and event loop of its own: turning JSON into protobuf and back is pure Python, and a
    stranger's large request must not hold up the loop that answers CometBFT."""

    def __init__(self, services: list[ServiceDescriptor], grpc_address: str):
        self.grpc_address = grpc_address
        self.routes = routes(services)
        self._calls: dict[str, grpc.aio.UnaryUnaryMultiCallable] = {}
        self._channel: grpc.aio.Channel | None = None
        self.slots = CallerBudget(MAX_IN_FLIGHT, CALLER_IN_FLIGHT)  # requests being answered
        self.sending = CallerBudget(NODE_ANSWER_BYTES, CALLER_ANSWER_BYTES)  # bytes being sent
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.app = web.Application(client_max_size=MAX_BODY_BYTES)
        seen = set()
        for route in self.routes:
            if (route.verb, route.path) not in seen:  # the first binding of a path wins
                seen.add((route.verb, route.path))
                self.app.router.add_route(route.verb, route.path, self._handler(route))

    def _handler(self, route: Route):
        async def handle(request: web.Request) -> web.StreamResponse:
            who = caller_of(request.remote)
            if not self.slots.take(who):
                busy = "as many requests as the gateway answers at once; try again"
                return _error(grpc.StatusCode.RESOURCE_EXHAUSTED, busy)
            try:
                response = await self._answer(route, request)
            finally:
                self.slots.give(who)
            size = response.content_length or 0
            if not self.sending.take(who, size):
                busy = "as many unread answers as the gateway holds; ask again once read"
                return _error(grpc.StatusCode.RESOURCE_EXHAUSTED, busy)
            try:
                return await _sent(response, request)
            finally:
                self.sending.give(who, size)

        return handle

    async def _answer(self, route: Route, request: web.Request) -> web.Response:
        message = route.request()
        try:
            if route.body and request.can_read_body:
                body = await asyncio.wait_for(request.text(), READ_SECONDS)
                json_format.Parse(body, message)
            for name, value in [*request.query.items(), *request.match_info.items()]:
                set_parameter(message, name, value)
        except web.HTTPRequestEntityTooLarge:
            return _error(grpc.StatusCode.INVALID_ARGUMENT,
                          f"a body of at most {MAX_BODY_BYTES} bytes", 413)  # fmt: skip
        except TimeoutError:
            return _error(grpc.StatusCode.DEADLINE_EXCEEDED, "the body came too slowly")
        # A request that does not fit its message, whatever protobuf or the JSON parser raise.
        except (BadRequest, json_format.ParseError, ValueError, TypeError, LookupError,
                RecursionError) as err:  # fmt: skip
            return _error(grpc.StatusCode.INVALID_ARGUMENT, str(err)[:300])
        try:
            response = await self._calls[route.grpc_path](message, timeout=30)
        except grpc.aio.AioRpcError as err:
            return _error(err.code(), err.details() or err.code().name)
        return web.json_response(json_format.MessageToDict(
            response, preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        ))  # fmt: skip

    async def _serve(self, address: str) -> str:
        self._channel = grpc.aio.insecure_channel(
            self.grpc_address, options=[("grpc.max_receive_message_length", MAX_RESPONSE_BYTES)]
        )
        for route in self.routes:
            self._calls[route.grpc_path] = self._channel.unary_unary(
                route.grpc_path,
                request_serializer=route.request.SerializeToString,
                response_deserializer=route.response.FromString,
            )
        host, port = address.rsplit(":", 1)
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, int(port), reuse_address=True)
        await site.start()
        bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        return f"{host}:{bound[1]}"

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._channel is not None:
            await self._channel.close()

    def start(self, address: str) -> str:
        """Listen on ``address`` (``host:0``: any free port) on the gateway's own thread; the
        address it listens on. Raises ``OSError`` if it cannot listen."""
        started: dict[str, object] = {}
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                started["address"] = loop.run_until_complete(self._serve(address))
            except OSError as err:
                started["error"] = err
            ready.set()
            if "error" not in started:
                loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=main, name="rest-gateway", daemon=True)
        self._thread.start()
        ready.wait()
        if "error" in started:
            self._thread.join()
            raise started["error"]  # type: ignore[misc]
        return str(started["address"])

    def stop(self) -> None:
        """Stop serving, close the gRPC channel and end the thread."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

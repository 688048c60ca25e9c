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

import base64
import binascii
import re
from dataclasses import dataclass

import grpc
from aiohttp import web
from google.api import annotations_pb2
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

MAX_BODY_BYTES = 2 << 20  # a POST's JSON (a tx of up to 1 MiB, base64)
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
        padded = text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4)
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


def _error(status: grpc.StatusCode, message: str) -> web.Response:
    return web.json_response(
        {"code": status.value[0], "message": message, "details": []},
        status=_HTTP_STATUS.get(status, 500),
    )


class RestGateway:
    """An aiohttp application serving :func:`routes` onto the gRPC server at
    ``grpc_address``."""

    def __init__(self, services: list[ServiceDescriptor], grpc_address: str):
        self.channel = grpc.aio.insecure_channel(grpc_address)
        self.app = web.Application(client_max_size=MAX_BODY_BYTES)
        self.routes = routes(services)
        seen = set()
        for route in self.routes:
            if (route.verb, route.path) not in seen:  # the first binding of a path wins
                seen.add((route.verb, route.path))
                self.app.router.add_route(route.verb, route.path, self._handler(route))
        self._runner: web.AppRunner | None = None

    def _handler(self, route: Route):
        call = self.channel.unary_unary(
            route.grpc_path,
            request_serializer=route.request.SerializeToString,
            response_deserializer=route.response.FromString,
        )

        async def handle(request: web.Request) -> web.Response:
            message = route.request()
            try:
                if route.body and request.can_read_body:
                    json_format.Parse(await request.text(), message)
                for name, value in request.query.items():
                    set_parameter(message, name, value)
                for name, value in request.match_info.items():
                    set_parameter(message, name, value)
            except (BadRequest, json_format.ParseError, UnicodeDecodeError) as err:
                return _error(grpc.StatusCode.INVALID_ARGUMENT, str(err)[:300])
            except web.HTTPRequestEntityTooLarge:
                return _error(grpc.StatusCode.INVALID_ARGUMENT,
                              f"a body of at most {MAX_BODY_BYTES} bytes")  # fmt: skip
            try:
                response = await call(message, timeout=30)
            except grpc.aio.AioRpcError as err:
                return _error(err.code(), err.details() or err.code().name)
            return web.json_response(json_format.MessageToDict(
                response, preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
            ))  # fmt: skip

        return handle

    async def start(self, address: str) -> str:
        """Listen on ``address`` (``host:0``: any free port); the address it listens on."""
        host, port = address.rsplit(":", 1)
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, int(port), reuse_address=True)
        await site.start()
        bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        return f"{host}:{bound[1]}"

    async def stop(self) -> None:
        """Stop serving and close the gRPC channel."""
        if self._runner is not None:
            await self._runner.cleanup()
        await self.channel.close()

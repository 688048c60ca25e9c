"""Requests that do not decode: grpcio answers a request its deserializer rejects with a bare
UNKNOWN/INTERNAL, so servers wrap each method's deserializer with :func:`tolerant` and answer an
:class:`Undecodable` request with INVALID_ARGUMENT and a message (the chain's gRPC server and a
host's blob service)."""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import DecodeError


class Undecodable:
    """What :func:`tolerant` hands the handler in place of a request that did not decode."""

    def __init__(self, error: str):
        self.error = error


def tolerant(deserialize: Callable[[bytes], object]) -> Callable[[bytes], object]:
    """``deserialize``, returning an :class:`Undecodable` instead of raising."""

    def decode(raw: bytes):
        try:
            return deserialize(raw)
        except (DecodeError, ValueError, RuntimeError) as err:
            return Undecodable(f"request does not decode: {err}")

    return decode

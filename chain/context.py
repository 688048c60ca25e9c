"""What a message handler sees: the state, the block it runs in, the params, and its events."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cosmpy.protos.tendermint.abci.types_pb2 import Event, EventAttribute
from google.protobuf.message import Message

from dilochain.chain.errors import TxError, codes
from dilochain.chain.state import CacheStore
from dilochain.protocol.params import Params


@dataclass
class Context:
    """Execution context of one tx (or of genesis / end-of-block work)."""

    store: CacheStore
    height: int
    time_ns: int
    chain_id: str
    params: Params
    events: list[Event] | None = field(default_factory=list)  # None: not recorded (CheckTx)
    last_block_hash: bytes = b""

    @property
    def time_s(self) -> int:
        """Block time in whole seconds."""
        return self.time_ns // 1_000_000_000

    def emit(self, kind: str, **attributes: Any) -> None:
        """Record an ABCI event (unless this context records none)."""
        if self.events is None:
            return
        self.events.append(
            Event(
                type=kind,
                attributes=[
                    EventAttribute(key=k, value=str(v), index=True) for k, v in attributes.items()
                ],
            )
        )

    def with_store(self, store: CacheStore) -> Context:
        """The same context over another cache layer (events are shared)."""
        return Context(
            store, self.height, self.time_ns, self.chain_id, self.params, self.events,
            self.last_block_hash,
        )  # fmt: skip


def block_timestamp(time_ns: int) -> str:
    """A block time as the Cosmos SDK writes it in a ``TxResponse`` (RFC 3339, seconds)."""
    return datetime.fromtimestamp(time_ns // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Handler = Callable[[Context, Any], Message]


@dataclass(frozen=True)
class QueryContext:
    """What a module's query handler reads: committed state, its height, the params."""

    store: CacheStore
    height: int
    params: Params


QueryHandler = Callable[[QueryContext, Any], Message]


@dataclass(frozen=True)
class MsgSpec:
    """How the chain decodes, authorizes and executes one message type."""

    message: type[Message]
    signer_field: str
    handler: Handler

    @property
    def type_url(self) -> str:
        """``/full.proto.Name`` as it appears in ``google.protobuf.Any``."""
        return "/" + self.message.DESCRIPTOR.full_name


_UINT = re.compile(r"[0-9]{1,78}")


def parse_uint(text: str) -> int | None:
    """An amount written as ASCII digits that fits 256 bits (the SDK's ``math.Int``), else None.

    (``str.isdigit`` would take an Arabic-Indic five as 5 and a superscript two as a digit.)
    """
    if not _UINT.fullmatch(text):
        return None
    value = int(text)
    return value if value.bit_length() <= 256 else None


def parse_amount(text: str, field_name: str) -> int:
    """A positive integer amount from a message's string field."""
    value = parse_uint(text)
    if not value:
        raise TxError(codes.INVALID_COINS, f"{field_name}: invalid amount {text[:80]!r}")
    return value


def get_int(store: CacheStore, key: bytes) -> int:
    """An integer state value (0 when absent)."""
    raw = store.get(key)
    return int(raw) if raw else 0


def set_int(store: CacheStore, key: bytes, value: int) -> None:
    """Store an integer state value, deleting the key at 0."""
    if value:
        store.set(key, str(value).encode())
    else:
        store.delete(key)

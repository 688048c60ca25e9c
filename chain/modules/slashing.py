"""Slashes: collateral taken (and burned) from a host or verifier, each recorded with its reason;
a slash also forfeits the address's unvested rewards."""

from __future__ import annotations

from decimal import Decimal

from dilochain.chain.context import Context, QueryContext, QueryHandler, get_int, set_int
from dilochain.chain.modules import collateral, rewards, verifiers
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.types_pb2 import Slash

_SEQ = b"seq/slash"  # outside the iterated slash/ prefix


def slash(
    ctx: Context, address: str, fraction: Decimal, run_id: str, round_: int, reason: str,
    infraction_height: int | None = None,
) -> None:  # fmt: skip
    """Burn ``fraction`` of ``address``'s collateral (and of what it unbonded since
    ``infraction_height``), forfeit its unvested rewards, and record why."""
    amount = collateral.slash(ctx, address, fraction, infraction_height)
    rewards.forfeit_unvested(ctx, address)
    verifiers.remove_if_uncovered(ctx, address)
    seq = get_int(ctx.store, _SEQ)
    set_int(ctx.store, _SEQ, seq + 1)
    record = Slash(address=address, run_id=run_id, round=round_, amount=str(amount),
                   reason=reason, height=ctx.height)  # fmt: skip
    ctx.store.set(b"slash/" + address.encode() + b"/%012d" % seq, record.SerializeToString())
    ctx.emit("slash", address=address, run_id=run_id, round=round_, amount=amount, reason=reason)


def _slash_prefix(address: str = "") -> bytes:
    return b"slash/" + (address.encode() + b"/" if address else b"")


def slashes(store: CacheStore, address: str = "") -> list[Slash]:
    """Slashes of one address (or all), oldest first per address."""
    return [Slash.FromString(v) for _, v in store.iterate(_slash_prefix(address))]


def _query_slashes(ctx: QueryContext, request: q.QuerySlashesRequest) -> q.QuerySlashesResponse:
    prefix = _slash_prefix(request.address)
    found, pages = page(ctx.store, prefix, request.pagination, Slash.FromString)
    return q.QuerySlashesResponse(slashes=found, pagination=pages)


QUERIES: dict[str, QueryHandler] = {"Slashes": _query_slashes}

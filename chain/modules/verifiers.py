"""Verifier registration: a verifier bonds ``min_verifier_collateral`` and registers once (again
to move the blob service it names); it is then assigned challenges and takes part in every
round's beacon. It leaves with ``MsgLeaveVerifier``: no new duties from then on, and once every
round begun before it left is resolved (its duties there done or slashed) it is released and
its free collateral unbonds."""

from __future__ import annotations

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import collateral, registry
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol.endpoint import location_problem
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgLeaveVerifier,
    MsgLeaveVerifierResponse,
    MsgRegisterVerifier,
    MsgRegisterVerifierResponse,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Verifier
from dilochain.protocol.schedule import settled_at


def _key(address: str) -> bytes:
    return b"verifier/" + address.encode()


def _leave_key(release_height: int, address: str) -> bytes:
    return b"vleave/%012d/" % release_height + address.encode()


def verifiers(store: CacheStore) -> list[Verifier]:
    """Registered verifiers (leaving ones included, until released), by address."""
    return [Verifier.FromString(v) for _, v in store.iterate(b"verifier/")]


def staying(store: CacheStore) -> list[str]:
    """The addresses of registered verifiers that are not leaving: those given new duties."""
    return [v.address for v in verifiers(store) if not v.left_height]


def _get(store: CacheStore, address: str) -> Verifier | None:
    value = store.get(_key(address))
    return None if value is None else Verifier.FromString(value)


def is_verifier(store: CacheStore, address: str) -> bool:
    """Whether ``address`` is a registered verifier."""
    return store.get(_key(address)) is not None


def require_verifier(store: CacheStore, address: str) -> Verifier:
    """``address``'s record; refuse (UNAUTHORIZED) a message from an address that is not a
    registered verifier."""
    record = _get(store, address)
    if record is None:
        raise TxError(codes.UNAUTHORIZED, f"{address} is not a registered verifier")
    return record


def require_duty(store: CacheStore, address: str, window_start: int) -> None:
    """Refuse (UNAUTHORIZED) a beacon commitment to a round whose commit window opened at
    ``window_start`` from an address that is not a registered verifier, or that left before
    that round began."""
    record = require_verifier(store, address)
    if record.left_height and record.left_height < window_start:
        raise TxError(codes.UNAUTHORIZED, f"{address} left the verifier set at block "
                      f"{record.left_height}, before this round began")  # fmt: skip


def _handle_register_verifier(
    ctx: Context, msg: MsgRegisterVerifier
) -> MsgRegisterVerifierResponse:
    # Hosts dial it: a blob service's host:port (a verifier serves no object store's URL).
    if msg.endpoint and (problem := location_problem(msg.endpoint, urls=False)) is not None:
        raise TxError(codes.INVALID_REQUEST, f"endpoint: {problem}")
    if (known := _get(ctx.store, msg.verifier)) is not None:
        if known.endpoint == msg.endpoint:
            if known.left_height:
                raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} is leaving; it can "
                              "register again once released, after block "
                              f"{known.release_height}")  # fmt: skip
            raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} is already a verifier")
        known.endpoint = msg.endpoint  # a member (a leaving one too) moves its blob service
        ctx.store.set(_key(msg.verifier), known.SerializeToString())
        ctx.emit("update_verifier", verifier=msg.verifier, endpoint=msg.endpoint)
        return MsgRegisterVerifierResponse()
    need = ctx.params.poc.min_verifier_collateral
    collateral.reserve(ctx.store, msg.verifier, need, "a verifier")
    record = Verifier(address=msg.verifier, registered_height=ctx.height, endpoint=msg.endpoint)
    ctx.store.set(_key(msg.verifier), record.SerializeToString())
    ctx.emit("register_verifier", verifier=msg.verifier)
    return MsgRegisterVerifierResponse()


def remove_if_uncovered(ctx: Context, address: str) -> None:
    """After a slash: a verifier left with less bonded collateral than the minimum is removed
    (its reservation released), so it gets no more challenges or beacon duties until it bonds
    enough and registers again, as a jailed host must. Commitments it sealed before (beacon
    secrets, votes) it may still open."""
    need = ctx.params.poc.min_verifier_collateral
    held_for_others = collateral.locked(ctx.store, address) - need  # runs, a validator
    covered = collateral.bonded(ctx.store, address) - held_for_others >= need
    if not is_verifier(ctx.store, address) or covered:
        return
    ctx.store.delete(_key(address))
    collateral.release(ctx.store, address, need)
    ctx.emit("remove_verifier", verifier=address,
             bonded=collateral.bonded(ctx.store, address))  # fmt: skip


def _handle_leave_verifier(ctx: Context, msg: MsgLeaveVerifier) -> MsgLeaveVerifierResponse:
    record = require_verifier(ctx.store, msg.verifier)
    if record.left_height:
        raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} already left at block "
                      f"{record.left_height}; it is released after block "
                      f"{record.release_height}")  # fmt: skip
    # Its duties are those of rounds begun by now (screens, beacon openings, votes, backups
    # handed over before their round resolves), in every run: released once all are resolved.
    release = max((settled_at(run, ctx.params.poc, ctx.height)
                   for run in registry.active_runs(ctx.store)), default=ctx.height)  # fmt: skip
    record.left_height, record.release_height = ctx.height, release
    ctx.store.set(_key(msg.verifier), record.SerializeToString())
    ctx.store.set(_leave_key(release, msg.verifier), b"%d" % ctx.height)
    ctx.emit("leave_verifier", verifier=msg.verifier, release_height=release)
    return MsgLeaveVerifierResponse(release_height=release)


def end_block(ctx: Context) -> None:
    """Release every verifier whose leave is due at this block (after this block's challenges
    were resolved and their slashes taken): deregister it, free its reservation and start
    unbonding all its free collateral (also when a slash removed it meanwhile, its reservation
    with it); a leave whose verifier registered again since is dropped."""
    due = []
    for key, value in ctx.store.iterate(b"vleave/"):
        _, release, address = key.decode().split("/", 2)
        if int(release) > ctx.height:
            break
        due.append((key, address, int(value)))
    for key, address, left in due:
        ctx.store.delete(key)
        record = _get(ctx.store, address)
        if record is not None and record.left_height != left:
            continue  # removed by a slash since, and registered again
        if record is not None:  # else a slash removed it (and its reservation) meanwhile
            ctx.store.delete(_key(address))
            collateral.release(ctx.store, address, ctx.params.poc.min_verifier_collateral)
        free = collateral.unbond_free(ctx, address)
        ctx.emit("verifier_left", verifier=address, unbonding=free)


MSGS = [
    MsgSpec(MsgRegisterVerifier, "verifier", _handle_register_verifier),
    MsgSpec(MsgLeaveVerifier, "verifier", _handle_leave_verifier),
]


def _query_verifiers(
    ctx: QueryContext, request: q.QueryVerifiersRequest
) -> q.QueryVerifiersResponse:
    found, pages = page(ctx.store, b"verifier/", request.pagination, Verifier.FromString)
    return q.QueryVerifiersResponse(verifiers=found, pagination=pages)


QUERIES: dict[str, QueryHandler] = {"Verifiers": _query_verifiers}

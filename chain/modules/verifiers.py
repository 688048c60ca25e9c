"""Verifier registration: a verifier bonds ``min_verifier_collateral`` and registers once; it is
then assigned challenges and takes part in every round's beacon."""

from __future__ import annotations

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import collateral
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgRegisterVerifier, MsgRegisterVerifierResponse
from dilochain.protocol.pb.poc.v1.types_pb2 import Verifier


def _key(address: str) -> bytes:
    return b"verifier/" + address.encode()


def verifiers(store: CacheStore) -> list[Verifier]:
    """Registered verifiers, by address."""
    return [Verifier.FromString(v) for _, v in store.iterate(b"verifier/")]


def is_verifier(store: CacheStore, address: str) -> bool:
    """Whether ``address`` is a registered verifier."""
    return store.get(_key(address)) is not None


def require_verifier(store: CacheStore, address: str) -> None:
    """Refuse (UNAUTHORIZED) a message from an address that is not a registered verifier."""
    if not is_verifier(store, address):
        raise TxError(codes.UNAUTHORIZED, f"{address} is not a registered verifier")


def _handle_register_verifier(
    ctx: Context, msg: MsgRegisterVerifier
) -> MsgRegisterVerifierResponse:
    if is_verifier(ctx.store, msg.verifier):
        raise TxError(codes.INVALID_REQUEST, f"{msg.verifier} is already a verifier")
    need = ctx.params.poc.min_verifier_collateral
    collateral.reserve(ctx.store, msg.verifier, need, "a verifier")
    record = Verifier(address=msg.verifier, registered_height=ctx.height)
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


MSGS = [MsgSpec(MsgRegisterVerifier, "verifier", _handle_register_verifier)]


def _query_verifiers(
    ctx: QueryContext, request: q.QueryVerifiersRequest
) -> q.QueryVerifiersResponse:
    found, pages = page(ctx.store, b"verifier/", request.pagination, Verifier.FromString)
    return q.QueryVerifiersResponse(verifiers=found, pagination=pages)


QUERIES: dict[str, QueryHandler] = {"Verifiers": _query_verifiers}

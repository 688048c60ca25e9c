"""The open validator set: who signs blocks, with what power, and what downtime and
double-signing cost (the chain's x/staking and x/slashing).

Genesis validators are the first members, with the power genesis gives them. Anyone joins with
``MsgCreateValidator``, reserving bonded collateral as its self-bond: its power is that stake
over ``power_reduction`` (capped by what is still bonded after slashes), the top
``max_validators`` by power sign. The power CometBFT last heard of each validator is kept in its
record; each block's end sends CometBFT the differences (``ResponseFinalizeBlock.
validator_updates``, in force two blocks later).

At the start of every block the votes of the last commit (``decided_last_commit``) count each
member's missed blocks over a sliding window of ``signed_blocks_window`` heights; one that
missed more than allowed is slashed ``slash_fraction_downtime`` and jailed for
``downtime_jail_blocks``, after which its operator may unjail it. CometBFT's evidence of a
duplicate vote or a light-client attack slashes ``slash_fraction_double_sign`` of the operator's
collateral, including what it unbonded since the infraction, and tombstones the validator: it
never signs again. A validator that leaves keeps its self-bond reserved until evidence against
it expires (``release_blocks`` and ``release_seconds``), and is then forgotten. The end of a
block visits only the validators in play (bonded, counted by CometBFT, or with a bond to
release), so jailed and tombstoned ones cost nothing per block.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler, parse_amount
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import collateral, slashing
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol.params import MAX_VALIDATOR_POWER
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCreateValidator,
    MsgCreateValidatorResponse,
    MsgLeaveValidatorSet,
    MsgLeaveValidatorSetResponse,
    MsgUnjailValidator,
    MsgUnjailValidatorResponse,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import (
    ChainValidator,
    ValidatorSetParams,
    ValidatorStatus,
)

BONDED = ValidatorStatus.VALIDATOR_STATUS_BONDED
JAILED = ValidatorStatus.VALIDATOR_STATUS_JAILED
TOMBSTONED = ValidatorStatus.VALIDATOR_STATUS_TOMBSTONED
LEAVING = ValidatorStatus.VALIDATOR_STATUS_LEAVING
MAX_MONIKER = 64
_CLOSED = b"valconf/closed"  # set at genesis when no genesis validator holds stake
_POOL = b"valconf/pool"  # b"<bonded stake> <not bonded stake>": see pool()


@dataclass(frozen=True)
class Vote:
    """One validator's part in the last commit: did it sign (a nil vote counts as signed, as
    in x/slashing; only an absent one is missed)."""

    address: str  # consensus address, upper-case hex
    signed: bool


@dataclass(frozen=True)
class Evidence:
    """CometBFT's proof that a validator signed two different things at one height."""

    address: str  # consensus address, upper-case hex
    height: int
    kind: str  # "duplicate_vote" or "light_client_attack"


def status_name(status: int) -> str:
    """``bonded``, ``jailed``, ``tombstoned`` or ``leaving``."""
    return ValidatorStatus.Name(status).removeprefix("VALIDATOR_STATUS_").lower()


def consensus_address(pub_key: bytes) -> str:
    """CometBFT's address of an ed25519 key: sha256(key)[:20], upper-case hex."""
    return hashlib.sha256(pub_key).digest()[:20].hex().upper()


def _key(address: str) -> bytes:
    return b"val/" + address.encode()


def _operator_key(operator: str) -> bytes:
    return b"valop/" + operator.encode()


def _miss_prefix(address: str) -> bytes:
    return b"valmiss/" + address.encode() + b"/"


def get(store: CacheStore, address: str) -> ChainValidator | None:
    """The validator with consensus address ``address``, if the chain knows it."""
    raw = store.get(_key(address))
    return ChainValidator.FromString(raw) if raw is not None else None


def _active_key(address: str) -> bytes:
    return b"valset/" + address.encode()


def _in_play(record: ChainValidator) -> bool:
    """Whether the end of a block must look at it: a candidate for power, power CometBFT
    still counts, or a bond still to release."""
    unreleased = record.status in (LEAVING, TOMBSTONED) and record.self_bond not in ("", "0")
    return record.status == BONDED or record.power != 0 or unreleased


def stake(record: ChainValidator) -> int:
    """Its stake in its set's units: udlc of self-bond, or a closed set's genesis power."""
    return int(record.self_bond or 0) or record.genesis_power


def pool(store: CacheStore) -> tuple[int, int]:
    """The stake of the validators CometBFT counts and of the rest (every record the chain
    keeps), kept up to date as records change so no query reads them all."""
    raw = store.get(_POOL)
    bonded, rest = raw.split() if raw is not None else (0, 0)
    return int(bonded), int(rest)


def _pooled(record: ChainValidator | None) -> tuple[int, int]:
    """What ``record`` adds to :func:`pool` (None: a record that is not kept)."""
    if record is None:
        return 0, 0
    return (stake(record), 0) if record.power else (0, stake(record))


def _repool(store: CacheStore, before: ChainValidator | None, after: ChainValidator | None):
    """Move :func:`pool` from counting ``before`` to counting ``after``."""
    (b0, r0), (b1, r1) = _pooled(before), _pooled(after)
    if (b0, r0) != (b1, r1):
        bonded, rest = pool(store)
        store.set(_POOL, b"%d %d" % (bonded - b0 + b1, rest - r0 + r1))


def _put(store: CacheStore, record: ChainValidator) -> None:
    """Store ``record``, and keep the index of those in play (the end of a block visits only
    them, however many jailed or tombstoned validators the chain has known) and the pool."""
    _repool(store, get(store, record.consensus_address), record)
    store.set(_key(record.consensus_address), record.SerializeToString())
    if _in_play(record):
        store.set(_active_key(record.consensus_address), b"1")
    else:
        store.delete(_active_key(record.consensus_address))


def members(store: CacheStore) -> list[ChainValidator]:
    """Every validator the chain knows, by consensus address."""
    return [ChainValidator.FromString(v) for _, v in store.iterate(b"val/")]


def in_play(store: CacheStore) -> list[ChainValidator]:
    """The validators bonded, holding power or not yet released (the ``valset/`` index: at most
    ``max_validators`` and those leaving), every bonded one among them."""
    found = (get(store, key.removeprefix(b"valset/").decode()) for key, _ in
             store.iterate(b"valset/"))  # fmt: skip
    return [record for record in found if record is not None]


def init_genesis(store: CacheStore, validators: Iterable, denom: str) -> None:
    """Record the genesis set (``GenesisValidator``s), as CometBFT starts with it. Staked
    validators' self-bonds are created as their operators' bonded, reserved collateral; a
    genesis set without stake (a development network's) is closed: it stays as it is."""
    validators = list(validators)
    if validators and not any(v.self_bond for v in validators):
        store.set(_CLOSED, b"1")
    for v in validators:
        pub_key = base64.b64decode(v.pub_key.value)
        if v.self_bond:
            collateral.bond_at_genesis(store, denom, v.operator, v.self_bond)
            collateral.reserve(store, v.operator, v.self_bond, "a genesis validator")
        record = ChainValidator(
            consensus_address=v.address, pub_key=pub_key, operator=v.operator,
            moniker=v.name, self_bond=str(v.self_bond),
            genesis_power=0 if v.self_bond else v.power, status=BONDED, power=v.power,
        )  # fmt: skip
        _put(store, record)
        if v.operator:
            store.set(_operator_key(v.operator), v.address.encode())


def closed(store: CacheStore) -> bool:
    """Whether the set is the genesis one for good (its validators hold no stake: nothing to
    weigh a joiner against, slash or release)."""
    return store.get(_CLOSED) is not None


def of_operator(store: CacheStore, operator: str) -> ChainValidator | None:
    """The validator ``operator`` runs, if any (the ``valop/`` index: one read)."""
    address = store.get(_operator_key(operator))
    return get(store, address.decode()) if address is not None else None


def by_operator(store: CacheStore, start: bytes = b"") -> Iterator[tuple[bytes, ChainValidator]]:
    """(operator, validator) of those that have an operator, in operator-address order from
    ``start`` on, read lazily: a page reads only its rows."""
    prefix = _operator_key("")
    for key, address in store.iterate(prefix, prefix + start):
        record = get(store, address.decode())
        if record is not None:
            yield key[len(prefix) :], record


def _of_operator(store: CacheStore, operator: str) -> ChainValidator:
    record = of_operator(store, operator)
    if record is None:
        raise TxError(codes.NOT_FOUND, f"{operator} operates no validator")
    return record


def _reset_signing(store: CacheStore, record: ChainValidator, height: int) -> None:
    """Downtime counts afresh from ``height`` (joined, rejoined or unjailed)."""
    for key, _ in list(store.iterate(_miss_prefix(record.consensus_address))):
        store.delete(key)
    record.missed_blocks = 0
    record.signing_start = height


# ---- messages --------------------------------------------------------------------------------
def proof_message(chain_id: str, operator: str) -> bytes:
    """What a consensus key signs to be registered by ``operator`` on ``chain_id``."""
    return f"dilochain-create-validator/v1|{chain_id}|{operator}".encode()


def _checked_key(ctx: Context, msg: MsgCreateValidator) -> None:
    """The key is an ed25519 key, and ``key_proof`` is its signature of the proof message."""
    if len(msg.pub_key) != 32:
        raise TxError(codes.INVALID_PUBKEY, f"pub_key: an ed25519 key is 32 bytes, not "
                                            f"{len(msg.pub_key)}")  # fmt: skip
    try:
        key = Ed25519PublicKey.from_public_bytes(msg.pub_key)
        key.verify(msg.key_proof, proof_message(ctx.chain_id, msg.operator))
    except ValueError as err:
        raise TxError(codes.INVALID_PUBKEY, f"pub_key: {err}") from None
    except InvalidSignature:
        signed = proof_message(ctx.chain_id, msg.operator).decode()
        why = f"key_proof: not the consensus key's signature of {signed!r} (only its holder "
        raise TxError(codes.UNAUTHORIZED, why + "registers a key)") from None


def _handle_create(ctx: Context, msg: MsgCreateValidator) -> MsgCreateValidatorResponse:
    params = ctx.params.validator_set
    _require_open(ctx)
    _checked_key(ctx, msg)
    if len(msg.moniker) > MAX_MONIKER or not msg.moniker.isprintable():
        raise TxError(codes.INVALID_REQUEST, f"moniker: at most {MAX_MONIKER} printable "
                                             "characters")  # fmt: skip
    amount = parse_amount(msg.amount, "amount")
    if amount < params.min_self_bond:
        least = params.min_self_bond
        raise TxError(codes.INSUFFICIENT_FUNDS,
                      f"a validator's self-bond is at least {least}, not {amount}")  # fmt: skip
    address = consensus_address(msg.pub_key)
    mine = ctx.store.get(_operator_key(msg.operator))
    if mine is not None and mine.decode() != address:
        raise TxError(codes.INVALID_REQUEST, f"{msg.operator} already operates validator "
                                             f"{mine.decode()}")  # fmt: skip
    record = get(ctx.store, address)
    if record is not None:
        raise TxError(codes.INVALID_REQUEST, f"consensus key {address} is taken (a validator "
                                             f"that is {status_name(record.status)})")  # fmt: skip
    collateral.reserve(ctx.store, msg.operator, amount, "a validator")
    record = ChainValidator(
        consensus_address=address, pub_key=msg.pub_key, operator=msg.operator,
        moniker=msg.moniker, self_bond=str(amount), status=BONDED, joined_height=ctx.height,
    )  # fmt: skip
    _reset_signing(ctx.store, record, ctx.height)
    _put(ctx.store, record)
    ctx.store.set(_operator_key(msg.operator), address.encode())
    ctx.emit("create_validator", validator=address, operator=msg.operator, amount=amount)
    return MsgCreateValidatorResponse(consensus_address=address)


def _require_open(ctx: Context) -> None:
    if closed(ctx.store):
        raise TxError(codes.UNAUTHORIZED, "this network's genesis validators hold no stake: "
                                          "its validator set is closed")  # fmt: skip


def _handle_leave(ctx: Context, msg: MsgLeaveValidatorSet) -> MsgLeaveValidatorSetResponse:
    _require_open(ctx)
    record = _of_operator(ctx.store, msg.operator)
    if record.status not in (BONDED, JAILED):
        status = status_name(record.status)
        raise TxError(
            codes.INVALID_REQUEST,
            f"validator {record.consensus_address} is {status}, not in the set",
        )
    record.status = LEAVING
    _put(ctx.store, record)
    earliest = ctx.height + ctx.params.validator_set.release_blocks + _LAST_VOTE
    ctx.emit("leave_validator_set", validator=record.consensus_address,
             earliest_release_height=earliest)  # fmt: skip
    return MsgLeaveValidatorSetResponse(release_height=earliest)


def _handle_unjail(ctx: Context, msg: MsgUnjailValidator) -> MsgUnjailValidatorResponse:
    record = _of_operator(ctx.store, msg.operator)
    if record.status != JAILED:
        raise TxError(codes.INVALID_REQUEST, f"validator {record.consensus_address} is not "
                                             "jailed")  # fmt: skip
    if ctx.height < record.jailed_until:
        raise TxError(codes.INVALID_REQUEST, f"validator {record.consensus_address} is jailed "
                                             f"until height {record.jailed_until}")  # fmt: skip
    record.status = BONDED
    _reset_signing(ctx.store, record, ctx.height)
    _put(ctx.store, record)
    ctx.emit("unjail_validator", validator=record.consensus_address)
    return MsgUnjailValidatorResponse()


MSGS = [
    MsgSpec(MsgCreateValidator, "operator", _handle_create),
    MsgSpec(MsgLeaveValidatorSet, "operator", _handle_leave),
    MsgSpec(MsgUnjailValidator, "operator", _handle_unjail),
]


# ---- the start of a block: evidence and downtime ----------------------------------------------
def _slash_operator(ctx: Context, record: ChainValidator, fraction, reason: str,
                    infraction_height: int | None = None) -> None:  # fmt: skip
    if record.operator and fraction:
        slashing.slash(ctx, record.operator, fraction, "", 0, reason, infraction_height)


def punish(ctx: Context, evidence: Evidence) -> None:
    """Slash and tombstone the validator CometBFT caught signing twice (in an open set)."""
    if closed(ctx.store):
        ctx.emit("double_sign", validator=evidence.address, infraction=evidence.kind,
                 infraction_height=evidence.height)  # fmt: skip
        return
    record = get(ctx.store, evidence.address)
    if record is None or record.status == TOMBSTONED:
        return
    fraction = ctx.params.validator_set.slash_fraction_double_sign
    _slash_operator(ctx, record, fraction, evidence.kind, evidence.height)
    record.status = TOMBSTONED
    _put(ctx.store, record)
    ctx.emit("tombstone_validator", validator=evidence.address, infraction=evidence.kind,
             infraction_height=evidence.height)  # fmt: skip


def _count_vote(ctx: Context, vote: Vote, window: int, max_missed: int) -> None:
    record = get(ctx.store, vote.address)
    if record is None or record.status != BONDED:
        return  # out of the set since (its removal takes effect two blocks later)
    bit = _miss_prefix(vote.address) + b"%d" % (ctx.height % window)
    was_missed = ctx.store.get(bit) is not None
    changed = vote.signed == was_missed  # the window's slot changes (else nothing to write)
    if vote.signed and was_missed:
        ctx.store.delete(bit)
        record.missed_blocks -= 1
    elif changed:
        ctx.store.set(bit, b"1")
        record.missed_blocks += 1
    counted = ctx.height >= record.signing_start + window
    if not vote.signed and counted and record.missed_blocks > max_missed:
        params = ctx.params.validator_set
        _slash_operator(ctx, record, params.slash_fraction_downtime, "downtime")
        record.status = JAILED
        record.jailed_until = ctx.height + params.downtime_jail_blocks
        _reset_signing(ctx.store, record, ctx.height)
        ctx.emit("jail_validator", validator=vote.address, missed=max_missed + 1,
                 window=window, jailed_until=record.jailed_until)  # fmt: skip
        changed = True
    if changed:
        _put(ctx.store, record)


def count_votes(ctx: Context, votes: Iterable[Vote]) -> None:
    """Count the last commit's votes into each bonded member's window; jail (and slash) one
    absent from too many (in an open set)."""
    if closed(ctx.store):
        return
    params = ctx.params.validator_set
    window = params.signed_blocks_window
    max_missed = window - int(params.min_signed_per_window * window)
    for vote in votes:
        _count_vote(ctx, vote, window, max_missed)


# ---- the end of a block: powers and releases --------------------------------------------------
def _power(store: CacheStore, record: ChainValidator, reduction: int) -> int:
    """Its self-bond over ``reduction``, counting only collateral that no other run or
    registration has reserved (a slash takes from the bond as a whole), at most
    :data:`~dilochain.protocol.params.MAX_VALIDATOR_POWER`."""
    if record.status != BONDED:
        return 0
    if record.genesis_power:
        return record.genesis_power
    self_bond = int(record.self_bond)
    held_for_others = collateral.locked(store, record.operator) - self_bond
    stake = min(self_bond, collateral.bonded(store, record.operator) - held_for_others)
    return min(max(0, stake) // reduction, MAX_VALIDATOR_POWER)


# CometBFT counts a validator two blocks after the update that drops it: it votes for that
# next block at the latest, whose evidence is the last that can come.
_LAST_VOTE = 3


def _release_clock(ctx: Context, record: ChainValidator) -> None:
    """Start counting a left or tombstoned validator's release once CometBFT no longer counts
    it: ``release_blocks`` after its last possible vote, and ``release_seconds`` after a block
    later than that vote."""
    params = ctx.params.validator_set
    if record.status not in (LEAVING, TOMBSTONED) or record.power:
        return
    if not record.release_height:
        record.release_height = ctx.height + params.release_blocks + _LAST_VOTE
    started = record.release_height - params.release_blocks - _LAST_VOTE
    if not record.release_time_ns and ctx.height >= started + _LAST_VOTE - 1:
        record.release_time_ns = ctx.time_ns + params.release_seconds * 1_000_000_000


def _release(ctx: Context, record: ChainValidator) -> bool:
    """Give a left or tombstoned validator's self-bond back once evidence against it has
    expired; whether it was released."""
    if record.status not in (LEAVING, TOMBSTONED) or record.self_bond in ("", "0"):
        return False
    if not record.release_height or not record.release_time_ns:
        return False
    if ctx.height < record.release_height or ctx.time_ns < record.release_time_ns:
        return False
    collateral.release(ctx.store, record.operator, int(record.self_bond))
    ctx.emit("release_validator_stake", validator=record.consensus_address,
             operator=record.operator, amount=record.self_bond)  # fmt: skip
    record.self_bond = "0"
    return True


def _forget(store: CacheStore, record: ChainValidator) -> None:
    """Drop a validator that left once nothing it signed can be held against it any more: the
    chain keeps no record of every validator that ever was (a tombstoned one stays, its key
    barred for good)."""
    _reset_signing(store, record, 0)
    _repool(store, get(store, record.consensus_address), None)
    for key in (_key(record.consensus_address), _active_key(record.consensus_address),
                _operator_key(record.operator)):  # fmt: skip
        store.delete(key)


def end_block(ctx: Context) -> list[tuple[bytes, int]]:
    """Release what is due and compute each member's power; the (ed25519 key, power) updates
    CometBFT must hear. A change that would leave no one signing is not sent."""
    params = ctx.params.validator_set
    records = in_play(ctx.store)
    wanted = {r.consensus_address: _power(ctx.store, r, params.power_reduction) for r in records}
    ranked = sorted((a for a, p in wanted.items() if p), key=lambda a: (-wanted[a], a))
    for address in ranked[params.max_validators :]:
        wanted[address] = 0
    changed = {r.consensus_address for r in records if wanted[r.consensus_address] != r.power}
    if changed and not any(wanted.values()):
        ctx.emit("validator_set_kept", reason="no validator would be left with power")
        changed = set()
    updates = []
    for record in records:
        before = ChainValidator()
        before.CopyFrom(record)
        if record.consensus_address in changed:
            if not record.power:  # back in CometBFT's set: its downtime counts afresh
                _reset_signing(ctx.store, record, ctx.height)
            record.power = wanted[record.consensus_address]
            updates.append((record.pub_key, record.power))
        _release_clock(ctx, record)
        released = _release(ctx, record)
        if released and record.status == LEAVING:
            _forget(ctx.store, record)  # its operator and key are free again
        elif record != before:
            _put(ctx.store, record)
    return updates


# ---- queries ---------------------------------------------------------------------------------
def params_message(params) -> ValidatorSetParams:
    """The validator-set params as the query returns them."""
    return ValidatorSetParams(
        power_reduction=params.power_reduction, min_self_bond=params.min_self_bond,
        max_validators=params.max_validators, signed_blocks_window=params.signed_blocks_window,
        min_signed_per_window=str(params.min_signed_per_window),
        downtime_jail_blocks=params.downtime_jail_blocks,
        slash_fraction_downtime=str(params.slash_fraction_downtime),
        slash_fraction_double_sign=str(params.slash_fraction_double_sign),
        release_blocks=params.release_blocks, release_seconds=params.release_seconds,
    )  # fmt: skip


def _query_validators(
    ctx: QueryContext, request: q.QueryValidatorsRequest
) -> q.QueryValidatorsResponse:
    found, pages = page(ctx.store, b"val/", request.pagination, ChainValidator.FromString)
    return q.QueryValidatorsResponse(
        validators=found, pagination=pages, params=params_message(ctx.params.validator_set)
    )


QUERIES: dict[str, QueryHandler] = {"Validators": _query_validators}

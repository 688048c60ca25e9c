"""Collateral: bonded stake held by the poc module account, withdrawn through an unbonding period.

Bonded collateral sits in the module account (so total supply is unchanged) and is what a later
slash takes from. A withdrawal starts an unbonding entry paid out at the end of the first block
whose time passes its completion time and that is ``unbonding_blocks`` past the withdrawal (so
it outlasts every commit that can still be slashed). Withdrawals of one address at one height
share an entry, and an address may have at most ``MAX_ENTRIES`` pending when it withdraws (as
x/staking's ``MaxEntries``). The registry locks the minimum a registered host must keep.
"""

from __future__ import annotations

from typing import NamedTuple

from dilochain.chain.address import require_address
from dilochain.chain.context import (
    Context,
    MsgSpec,
    QueryContext,
    QueryHandler,
    get_int,
    parse_amount,
    set_int,
)
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import bank
from dilochain.chain.state import CacheStore
from dilochain.protocol.address import module_address
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgDepositCollateral,
    MsgDepositCollateralResponse,
    MsgWithdrawCollateral,
    MsgWithdrawCollateralResponse,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import CollateralInfo, UnbondingEntry

MODULE_ACCOUNT = module_address("poc")
_NEXT_ID = b"seq/unbonding"  # outside the iterated unb/ prefix
MAX_ENTRIES = 7  # pending unbonding entries an address may have and still withdraw


def _bonded_key(address: str) -> bytes:
    return b"col/" + address.encode()


def _locked_key(address: str) -> bytes:
    return b"lock/" + address.encode()


def _entries_prefix(address: str) -> bytes:
    return b"unb/" + address.encode() + b"/"


def _entry_key(address: str, completion: int, entry_id: int) -> bytes:
    return _entries_prefix(address) + b"%012d/%d" % (completion, entry_id)


def _queue_key(due: int, completion: int, address: str, entry_id: int) -> bytes:
    """The queue is in order of maturity: an entry's due height and completion time both
    follow the block that made it, so the entries due at a block are the queue's head."""
    return b"unbq/%012d/%012d/" % (due, completion) + address.encode() + b"/%d" % entry_id


def _entry_value(amount: int, created: int, due: int) -> bytes:
    return b"%d/%d/%d" % (amount, created, due)


def _parse_entry(value: bytes) -> tuple[int, int, int]:
    """(amount, height the withdrawal was made at, first height it may be paid at) of an
    unbonding entry."""
    amount, created, due = value.split(b"/")
    return int(amount), int(created), int(due)


def bonded(store: CacheStore, address: str) -> int:
    """Collateral ``address`` has bonded."""
    return get_int(store, _bonded_key(address))


def locked(store: CacheStore, address: str) -> int:
    """Bonded collateral reserved by runs and verifier registration (not withdrawable)."""
    return get_int(store, _locked_key(address))


def bond_at_genesis(store: CacheStore, denom: str, address: str, amount: int) -> None:
    """Create ``amount`` of bonded collateral for ``address`` (a genesis validator's stake)."""
    bank.mint(store, MODULE_ACCOUNT, {denom: amount})
    set_int(store, _bonded_key(address), bonded(store, address) + amount)


def reserve(store: CacheStore, address: str, amount: int, purpose: str) -> None:
    """Lock ``amount`` of ``address``'s bonded collateral for ``purpose``, from what no other
    run or registration holds: one bond cannot stand behind two runs."""
    have, held = bonded(store, address), locked(store, address)
    if have - held < amount:
        raise TxError(
            codes.INSUFFICIENT_FUNDS,
            f"{purpose} needs {amount} bonded collateral, {address} has {max(0, have - held)} "
            f"free ({have} bonded, {held} locked)",
        )
    set_int(store, _locked_key(address), held + amount)


def release(store: CacheStore, address: str, amount: int) -> None:
    """Give back a reservation (a jailed host's run)."""
    set_int(store, _locked_key(address), max(0, locked(store, address) - amount))


def slash(ctx: Context, address: str, fraction, infraction_height: int | None = None) -> int:
    """Burn ``fraction`` of ``address``'s bonded collateral, and of every unbonding entry it
    withdrew at or after ``infraction_height`` (collateral that was bonded when the fault was
    committed stays slashable while it unbonds, as in x/staking); returns the amount taken."""
    have = bonded(ctx.store, address)
    amount = int(have * fraction)
    set_int(ctx.store, _bonded_key(address), have - amount)
    if infraction_height is not None:
        for entry in _entries(ctx.store, address):
            if entry.created < infraction_height:
                continue
            taken = int(entry.amount * fraction)
            value = _entry_value(entry.amount - taken, entry.created, entry.due)
            _set_entry(ctx.store, address, entry.key, value)
            amount += taken
    if amount:
        bank.burn(ctx.store, MODULE_ACCOUNT, {ctx.params.poc.collateral_denom: amount})
    return amount


class _Entry(NamedTuple):
    """A pending unbonding entry: its key, amount, the height it was made at and the first
    height it may be paid at."""

    key: bytes
    amount: int
    created: int
    due: int


def _entries(store: CacheStore, address: str) -> list[_Entry]:
    """``address``'s pending unbonding entries, by completion time."""
    prefix = _entries_prefix(address)
    return [_Entry(key, *_parse_entry(value)) for key, value in store.iterate(prefix)]


def _set_entry(store: CacheStore, address: str, key: bytes, value: bytes) -> None:
    """Write an unbonding entry of ``address`` under ``key`` and in the queue."""
    completion, entry_id = (int(part) for part in key.split(b"/")[-2:])
    store.set(key, value)
    store.set(_queue_key(_parse_entry(value)[2], completion, address, entry_id), value)


def info(store: CacheStore, address: str) -> CollateralInfo:
    """Bonded and unbonding collateral of ``address`` (its unbonding entries are few: one a
    height at most, and a withdrawal is refused past ``MAX_ENTRIES``)."""
    entries = [
        UnbondingEntry(amount=str(e.amount), completion_time_unix=int(e.key.split(b"/")[-2]),
                       completion_height=e.due)
        for e in _entries(store, address)
    ]  # fmt: skip
    return CollateralInfo(
        address=address,
        bonded=str(bonded(store, address)),
        unbonding=entries,
        locked=str(locked(store, address)),
    )


def _handle_deposit(ctx: Context, msg: MsgDepositCollateral) -> MsgDepositCollateralResponse:
    amount = parse_amount(msg.amount, "amount")
    denom = ctx.params.poc.collateral_denom
    bank.send(ctx, msg.depositor, MODULE_ACCOUNT, {denom: amount})
    set_int(ctx.store, _bonded_key(msg.depositor), bonded(ctx.store, msg.depositor) + amount)
    ctx.emit("deposit_collateral", depositor=msg.depositor, amount=f"{amount}{denom}")
    return MsgDepositCollateralResponse()


def _handle_withdraw(ctx: Context, msg: MsgWithdrawCollateral) -> MsgWithdrawCollateralResponse:
    amount = parse_amount(msg.amount, "amount")
    store, who = ctx.store, msg.depositor
    have = bonded(store, who)
    if amount > have:
        raise TxError(
            codes.INSUFFICIENT_FUNDS, f"bonded collateral {have} is smaller than {amount}"
        )
    held = locked(store, who)
    if have - amount < held:
        raise TxError(
            codes.INVALID_REQUEST,
            f"withdrawal would leave {have - amount} bonded; registered runs require {held}",
        )
    entries = _entries(store, who)
    if len(entries) >= MAX_ENTRIES and all(e.created != ctx.height for e in entries):
        raise TxError(
            codes.INVALID_REQUEST,
            f"too many unbonding entries for {who}: {len(entries)} pending, at most "
            f"{MAX_ENTRIES}; withdraw again once one completes (the first at height "
            f"{min(e.due for e in entries)})",
        )
    completion = _unbond(ctx, who, amount, entries)
    return MsgWithdrawCollateralResponse(completion_time_unix=completion)


def start_unbonding(ctx: Context, who: str, amount: int) -> int:
    """Move ``amount`` of ``who``'s bonded collateral into an unbonding entry, paid out after
    the unbonding period (slashable meanwhile for faults committed before); its completion."""
    return _unbond(ctx, who, amount, _entries(ctx.store, who))


def unbond_free(ctx: Context, who: str) -> int:
    """Start unbonding all of ``who``'s bonded collateral that nothing reserves (one that left
    a run or the verifier set); the amount, 0 if none."""
    free = bonded(ctx.store, who) - locked(ctx.store, who)
    if free > 0:
        start_unbonding(ctx, who, free)
    return max(0, free)


def _unbond(ctx: Context, who: str, amount: int, entries: list[_Entry]) -> int:
    """:func:`start_unbonding`, given ``who``'s pending ``entries``: into the one made at this
    height if there is one (its completion and due height are this height's)."""
    store = ctx.store
    set_int(store, _bonded_key(who), bonded(store, who) - amount)
    completion = ctx.time_s + ctx.params.poc.unbonding_period_seconds
    here = [(e.key, e.amount) for e in entries if e.created == ctx.height]
    key, held = here[0] if here else (_entry_key(who, completion, _next_id(store)), 0)
    value = _entry_value(held + amount, ctx.height, ctx.height + ctx.params.poc.unbonding_blocks)
    _set_entry(store, who, key, value)
    ctx.emit("withdraw_collateral", depositor=who, amount=amount, completion_time=completion)
    return completion


def _next_id(store: CacheStore) -> int:
    entry_id = get_int(store, _NEXT_ID)
    set_int(store, _NEXT_ID, entry_id + 1)
    return entry_id


def end_block(ctx: Context) -> None:
    """Pay out every unbonding entry whose completion time has passed and that has waited
    ``unbonding_blocks`` blocks (the longest a commit before it stays slashable): the head
    of the queue, read up to the first entry not due."""
    denom = ctx.params.poc.collateral_denom
    due = []
    for key, value in ctx.store.iterate(b"unbq/"):
        _, due_height, completion, address, entry_id = key.decode().split("/")
        if int(due_height) > ctx.height or int(completion) > ctx.time_s:
            break
        due.append((key, int(completion), address, int(entry_id), _parse_entry(value)[0]))
    for key, completion, address, entry_id, amount in due:
        ctx.store.delete(key)
        ctx.store.delete(_entry_key(address, completion, entry_id))
        if amount:
            bank.send(ctx, MODULE_ACCOUNT, address, {denom: amount})
        ctx.emit("complete_unbonding", depositor=address, amount=f"{amount}{denom}")


MSGS = [
    MsgSpec(MsgDepositCollateral, "depositor", _handle_deposit),
    MsgSpec(MsgWithdrawCollateral, "depositor", _handle_withdraw),
]


def _query_collateral(
    ctx: QueryContext, request: q.QueryCollateralRequest
) -> q.QueryCollateralResponse:
    address = require_address(request.address, "address")
    return q.QueryCollateralResponse(collateral=info(ctx.store, address))


QUERIES: dict[str, QueryHandler] = {"Collateral": _query_collateral}

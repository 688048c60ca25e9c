"""Collateral: bonded stake held by the poc module account, withdrawn through an unbonding period.

Bonded collateral sits in the module account (so total supply is unchanged) and is what a later
slash takes from. A withdrawal starts an unbonding entry paid out at the end of the first block
whose time passes its completion time and that is ``unbonding_blocks`` past the withdrawal (so
it outlasts every commit that can still be slashed). The registry locks the minimum a registered
host must keep.
"""

from __future__ import annotations

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


def _bonded_key(address: str) -> bytes:
    return b"col/" + address.encode()


def _locked_key(address: str) -> bytes:
    return b"lock/" + address.encode()


def _entry_key(address: str, completion: int, entry_id: int) -> bytes:
    return b"unb/" + address.encode() + b"/%012d/%d" % (completion, entry_id)


def _queue_key(completion: int, address: str, entry_id: int) -> bytes:
    return b"unbq/%012d/" % completion + address.encode() + b"/%d" % entry_id


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
        for key, value in ctx.store.iterate(b"unb/" + address.encode() + b"/"):
            held, created, due = _parse_entry(value)
            if created < infraction_height:
                continue
            taken = int(held * fraction)
            completion, entry_id = (int(part) for part in key.split(b"/")[-2:])
            value = _entry_value(held - taken, created, due)
            ctx.store.set(key, value)
            ctx.store.set(_queue_key(completion, address, entry_id), value)
            amount += taken
    if amount:
        bank.burn(ctx.store, MODULE_ACCOUNT, {ctx.params.poc.collateral_denom: amount})
    return amount


def info(store: CacheStore, address: str) -> CollateralInfo:
    """Bonded and unbonding collateral of ``address``."""
    prefix = b"unb/" + address.encode() + b"/"
    entries = []
    for key, value in store.iterate(prefix):
        amount, _, due = _parse_entry(value)
        completion = int(key.split(b"/")[-2])
        entries.append(UnbondingEntry(amount=str(amount), completion_time_unix=completion,
                                      completion_height=due))  # fmt: skip
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
    return MsgWithdrawCollateralResponse(completion_time_unix=start_unbonding(ctx, who, amount))


def start_unbonding(ctx: Context, who: str, amount: int) -> int:
    """Move ``amount`` of ``who``'s bonded collateral into an unbonding entry, paid out after
    the unbonding period (slashable meanwhile for faults committed before); its completion."""
    store = ctx.store
    set_int(store, _bonded_key(who), bonded(store, who) - amount)
    completion = ctx.time_s + ctx.params.poc.unbonding_period_seconds
    entry_id = get_int(store, _NEXT_ID)
    set_int(store, _NEXT_ID, entry_id + 1)
    value = _entry_value(amount, ctx.height, ctx.height + ctx.params.poc.unbonding_blocks)
    store.set(_entry_key(who, completion, entry_id), value)
    store.set(_queue_key(completion, who, entry_id), value)
    ctx.emit("withdraw_collateral", depositor=who, amount=amount, completion_time=completion)
    return completion


def end_block(ctx: Context) -> None:
    """Pay out every unbonding entry whose completion time has passed and that has waited
    ``unbonding_blocks`` blocks (the longest a commit before it stays slashable)."""
    denom = ctx.params.poc.collateral_denom
    due = []
    for key, value in ctx.store.iterate(b"unbq/"):
        _, completion, address, entry_id = key.decode().split("/")
        if int(completion) > ctx.time_s:
            break
        amount, _, due_height = _parse_entry(value)
        if ctx.height < due_height:
            continue  # its time has come, its blocks not yet
        due.append((key, int(completion), address, int(entry_id), amount))
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

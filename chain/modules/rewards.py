"""Epochs and rewards: work is credited when a round resolves, paid by ``MsgClaimReward``.

An epoch is ``epoch_blocks`` blocks. When a round's challenges are decided (its resolution
block), each commit whose challenges all passed credits its host the round's tokens, and each
verdict on the quorum side credits its verifier one unit, in the epoch of that block; a
verifier that missed a duty (sealed no vote on a challenge assigned to it that others decided)
earns nothing as a verifier for the epoch; a host slashed in an
epoch earns nothing for it, and forfeits its unclaimed host rewards of every earlier epoch
(never minted, so no one else's share grows and the pool is never overpaid); being jailed from
the run, it earns nothing more there unless it registers again. Once the epoch's last block is
committed its pool (``reward_per_epoch``, minted as it is paid out) is claimable:
``1 - verifier_share`` of it pro rata to host work, ``verifier_share`` pro rata to verdicts.
Each address claims an epoch once.

A claim does not pay the reward outright: it becomes a vesting grant that vests linearly over
``vesting_epochs`` epochs after the claimed one (what has vested by the claim is paid with it;
``MsgWithdrawVested`` pays the rest as it vests). A slash of the grant's owner, host or
verifier, forfeits whatever has not vested: it is never minted, so the supply stays genesis +
paid rewards - burned collateral.
"""

from __future__ import annotations

from dilochain.chain.address import require_address
from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler, get_int, set_int
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import bank
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol.params import Params
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgClaimReward,
    MsgClaimRewardResponse,
    MsgWithdrawVested,
    MsgWithdrawVestedResponse,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Claimable, EpochInfo, VestingGrant


def epoch_of(params: Params, height: int) -> int:
    """The epoch holding block ``height`` (blocks start at 1)."""
    return max(0, height - 1) // params.rewards.epoch_blocks


def epoch_bounds(params: Params, epoch: int) -> tuple[int, int]:
    """First and last block of an epoch."""
    blocks = params.rewards.epoch_blocks
    return epoch * blocks + 1, (epoch + 1) * blocks


def _work_key(epoch: int, role: str, address: str) -> bytes:
    return b"work/%012d/" % epoch + role.encode() + b"/" + address.encode()


def _slashed_key(epoch: int, address: str) -> bytes:
    return b"slashed/%012d/" % epoch + address.encode()


def _missed_key(epoch: int, address: str) -> bytes:
    return b"missed/%012d/" % epoch + address.encode()


def _claim_key(epoch: int, address: str) -> bytes:
    return b"claim/%012d/" % epoch + address.encode()


def _forfeit_key(address: str) -> bytes:
    return b"forfeit/" + address.encode()


def forfeit(ctx: Context, address: str) -> None:
    """A host that failed a challenge forfeits its unclaimed host rewards up to this epoch."""
    epoch = epoch_of(ctx.params, ctx.height)
    ctx.store.set(_forfeit_key(address), str(epoch).encode())
    ctx.emit("forfeit_rewards", address=address, through_epoch=epoch)


def _forfeits(store: CacheStore, address: str, epoch: int) -> bool:
    through = store.get(_forfeit_key(address))
    return through is not None and epoch <= int(through)


def _total_key(epoch: int, role: str) -> bytes:
    return b"worktotal/%012d/" % epoch + role.encode()


def _barred_key(role: str, epoch: int, address: str) -> bytes:
    """The key that bars ``address`` from ``role``'s rewards of ``epoch`` (a slashed host, a
    verifier that missed a duty)."""
    return (_slashed_key if role == "host" else _missed_key)(epoch, address)


def credit(ctx: Context, role: str, address: str, units: int) -> None:
    """Add ``units`` of ``role`` ("host" or "verifier") work in the current epoch (to the
    epoch's total too, unless the address is barred from it)."""
    epoch = epoch_of(ctx.params, ctx.height)
    key = _work_key(epoch, role, address)
    set_int(ctx.store, key, get_int(ctx.store, key) + units)
    if ctx.store.get(_barred_key(role, epoch, address)) is None:
        total = _total_key(epoch, role)
        set_int(ctx.store, total, get_int(ctx.store, total) + units)


def _bar(ctx: Context, role: str, address: str) -> None:
    """Bar ``address`` from ``role``'s rewards of the current epoch: its work so far leaves
    the epoch's total (kept as a running sum, so a claim reads two numbers, not every
    address's work)."""
    epoch = epoch_of(ctx.params, ctx.height)
    key = _barred_key(role, epoch, address)
    if ctx.store.get(key) is not None:
        return
    ctx.store.set(key, b"1")
    total = _total_key(epoch, role)
    own = get_int(ctx.store, _work_key(epoch, role, address))
    set_int(ctx.store, total, get_int(ctx.store, total) - own)


def mark_slashed(ctx: Context, address: str) -> None:
    """A slashed host earns nothing for the current epoch."""
    _bar(ctx, "host", address)


def mark_missed(ctx: Context, address: str) -> None:
    """A verifier that missed a duty earns no verifier reward for the current epoch."""
    _bar(ctx, "verifier", address)


def _own(store: CacheStore, epoch: int, role: str, address: str) -> int:
    """``address``'s ``role`` work in ``epoch`` that counts (0 when barred)."""
    if store.get(_barred_key(role, epoch, address)) is not None:
        return 0
    return get_int(store, _work_key(epoch, role, address))


def _total(store: CacheStore, epoch: int, role: str) -> int:
    return get_int(store, _total_key(epoch, role))


def epoch_info(store: CacheStore, params: Params, epoch: int, height: int) -> EpochInfo:
    """An epoch's bounds, pool and total work."""
    start, end = epoch_bounds(params, epoch)
    return EpochInfo(
        epoch=epoch, start_height=start, end_height=end, closed=height >= end,
        reward_pool=str(params.rewards.reward_per_epoch),
        host_work=str(_total(store, epoch, "host")),
        verifier_work=str(_total(store, epoch, "verifier")),
    )  # fmt: skip


def claimable(store: CacheStore, params: Params, address: str, epoch: int) -> Claimable:
    """What ``address`` earned in ``epoch`` (whether or not the epoch is closed yet)."""
    pool = params.rewards.reward_per_epoch
    verifier_pool = int(pool * params.rewards.verifier_share)
    host_pool = pool - verifier_pool
    host = _own(store, epoch, "host", address)
    verifier = _own(store, epoch, "verifier", address)
    amount = 0
    forfeited = bool(host) and _forfeits(store, address, epoch)
    if host and not forfeited:
        amount += host_pool * host // _total(store, epoch, "host")
    if verifier:
        amount += verifier_pool * verifier // _total(store, epoch, "verifier")
    claimed = store.get(_claim_key(epoch, address))
    return Claimable(
        address=address, epoch=epoch, amount=str(int(claimed) if claimed else amount),
        claimed=claimed is not None, host_work=str(host), verifier_work=str(verifier),
        forfeited=forfeited and claimed is None,
    )  # fmt: skip


def _grant_prefix(address: str) -> bytes:
    return b"vest/" + address.encode() + b"/"


def grants(store: CacheStore, params: Params, address: str, height: int) -> list[VestingGrant]:
    """``address``'s vesting grants not yet fully paid, by epoch, with what has vested."""
    found = [VestingGrant.FromString(v) for _, v in store.iterate(_grant_prefix(address))]
    for grant in found:
        grant.vested = str(_vested(params, grant, height))
    return found


def _vested(params: Params, grant: VestingGrant, height: int) -> int:
    epochs = params.rewards.vesting_epochs
    elapsed = min(epochs, max(0, epoch_of(params, height) - grant.epoch))
    granted = int(grant.total) + int(grant.forfeited or 0)
    return min(int(grant.total), granted * elapsed // epochs)


def _save_grant(ctx: Context, grant: VestingGrant) -> None:
    key = _grant_prefix(grant.address) + b"%012d" % grant.epoch
    grant.vested = ""  # computed when read
    done = int(grant.paid) == int(grant.total)
    if done and _vested(ctx.params, grant, ctx.height) == int(grant.total):
        ctx.store.delete(key)  # fully vested and paid: nothing left to track
    else:
        ctx.store.set(key, grant.SerializeToString())


def forfeit_unvested(ctx: Context, address: str) -> None:
    """A slashed address loses what has not vested of its grants (never minted)."""
    lost = 0
    for grant in grants(ctx.store, ctx.params, address, ctx.height):
        cut = int(grant.total) - int(grant.vested)
        if cut:
            grant.total = grant.vested
            grant.forfeited = str(int(grant.forfeited or 0) + cut)
            _save_grant(ctx, grant)
            lost += cut
    if lost:
        ctx.emit("forfeit_unvested", address=address, amount=f"{lost}udlc")


def _pay(ctx: Context, address: str, amount: int) -> None:
    if amount:
        bank.mint(ctx.store, address, {ctx.params.fees.fee_denom: amount})


def _handle_claim(ctx: Context, msg: MsgClaimReward) -> MsgClaimRewardResponse:
    _, end = epoch_bounds(ctx.params, msg.epoch)
    if ctx.height <= end:
        raise TxError(codes.INVALID_REQUEST,
                      f"epoch {msg.epoch} is still open (it ends at block {end})")  # fmt: skip
    due = claimable(ctx.store, ctx.params, msg.claimer, msg.epoch)
    if due.claimed:
        raise TxError(codes.INVALID_REQUEST,
                      f"{msg.claimer} already claimed epoch {msg.epoch}")  # fmt: skip
    amount = int(due.amount)
    if amount == 0 and due.forfeited:
        raise TxError(codes.INVALID_REQUEST, f"{msg.claimer} forfeited its rewards of epoch "
                                             f"{msg.epoch} by failing a challenge")  # fmt: skip
    if amount == 0:
        raise TxError(codes.NOT_FOUND, f"{msg.claimer} has no paid work in epoch {msg.epoch}")
    grant = VestingGrant(address=msg.claimer, epoch=msg.epoch, total=str(amount), paid="0",
                         forfeited="0")  # fmt: skip
    now = _vested(ctx.params, grant, ctx.height)
    grant.paid = str(now)
    _save_grant(ctx, grant)
    _pay(ctx, msg.claimer, now)
    ctx.store.set(_claim_key(msg.epoch, msg.claimer), str(amount).encode())
    ctx.emit("claim_reward", claimer=msg.claimer, epoch=msg.epoch, amount=f"{now}udlc",
             vesting=f"{amount}udlc")  # fmt: skip
    return MsgClaimRewardResponse(amount=str(now), vesting=str(amount))


def _handle_withdraw(ctx: Context, msg: MsgWithdrawVested) -> MsgWithdrawVestedResponse:
    paid = 0
    for grant in grants(ctx.store, ctx.params, msg.claimer, ctx.height):
        due = int(grant.vested) - int(grant.paid)
        if due:
            grant.paid = str(int(grant.paid) + due)
            _save_grant(ctx, grant)
            paid += due
    if paid == 0:
        raise TxError(codes.NOT_FOUND, f"{msg.claimer} has no vested rewards left to withdraw")
    _pay(ctx, msg.claimer, paid)
    ctx.emit("withdraw_vested", claimer=msg.claimer, amount=f"{paid}udlc")
    return MsgWithdrawVestedResponse(amount=str(paid))


MSGS = [
    MsgSpec(MsgClaimReward, "claimer", _handle_claim),
    MsgSpec(MsgWithdrawVested, "claimer", _handle_withdraw),
]


def _query_epoch(ctx: QueryContext, request: q.QueryEpochRequest) -> q.QueryEpochResponse:
    epoch = epoch_of(ctx.params, ctx.height + 1) if request.current else request.epoch
    return q.QueryEpochResponse(epoch=epoch_info(ctx.store, ctx.params, epoch, ctx.height))


def _query_claimable(
    ctx: QueryContext, request: q.QueryClaimableRequest
) -> q.QueryClaimableResponse:
    address = require_address(request.address, "address")
    found = claimable(ctx.store, ctx.params, address, request.epoch)
    return q.QueryClaimableResponse(claimable=found)


def _query_vesting(ctx: QueryContext, request: q.QueryVestingRequest) -> q.QueryVestingResponse:
    address = require_address(request.address, "address")
    found, pages = page(ctx.store, _grant_prefix(address), request.pagination,
                        VestingGrant.FromString)  # fmt: skip
    for grant in found:
        grant.vested = str(_vested(ctx.params, grant, ctx.height))
    return q.QueryVestingResponse(grants=found, pagination=pages)


QUERIES: dict[str, QueryHandler] = {
    "Epoch": _query_epoch, "Claimable": _query_claimable, "Vesting": _query_vesting,
}  # fmt: skip

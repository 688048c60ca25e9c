"""The training-run registry: runs and the hosts that joined them."""

from __future__ import annotations

import math
import re

from dilochain.chain.context import Context, MsgSpec, QueryContext, QueryHandler, parse_amount
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import bank, collateral
from dilochain.chain.pagination import page
from dilochain.chain.state import CacheStore
from dilochain.protocol import model_config
from dilochain.protocol.address import module_address
from dilochain.protocol.compression import compression_problem
from dilochain.protocol.endpoint import location_problem
from dilochain.protocol.params import PocParams
from dilochain.protocol.pb.poc.v1 import query_pb2 as q
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCreateRun,
    MsgCreateRunResponse,
    MsgLeaveRun,
    MsgLeaveRunResponse,
    MsgRegisterHost,
    MsgRegisterHostResponse,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import Host, Roster, Run, RunConfig
from dilochain.protocol.pb.poc.v1.types_pb2 import Params as ParamsProto
from dilochain.protocol.schedule import (
    overlap_problem,
    rosters_drawn_at,
    run_lifetime,
    settled_at,
)

_RUN_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")
RUNS_ACCOUNT = module_address("runs")  # where run deposits wait for their runs to end


def _run_key(run_id: str) -> bytes:
    return b"run/" + run_id.encode()


def _host_key(run_id: str, address: str) -> bytes:
    return b"host/" + run_id.encode() + b"/" + address.encode()


def require_run_id(run_id: str) -> str:
    """``run_id`` if a run can have it; an INVALID_REQUEST error quoting it (cut short) if not."""
    if not _RUN_ID.match(run_id):
        raise TxError(
            codes.INVALID_REQUEST,
            f"run_id: invalid run id {run_id[:80]!r}: 1 to 64 of a-z, 0-9, _ and -, "
            "not starting with _ or -",
        )
    return run_id


def get_run(store: CacheStore, run_id: str) -> Run | None:
    """The run ``run_id``, if registered."""
    raw = store.get(_run_key(run_id))
    return Run.FromString(raw) if raw is not None else None


def require_run(store: CacheStore, run_id: str) -> Run:
    """The run ``run_id``; a NOT_FOUND error if there is none."""
    run = get_run(store, run_id)
    if run is None:
        raise TxError(codes.NOT_FOUND, f"run {run_id!r} not found")
    return run


def runs(store: CacheStore) -> list[Run]:
    """All registered runs, by id."""
    return [Run.FromString(v) for _, v in store.iterate(b"run/")]


def _active_key(run_id: str) -> bytes:
    return b"active/" + run_id.encode()


def active_runs(store: CacheStore) -> list[Run]:
    """Runs whose last round has not resolved yet: the only ones end-of-block work visits, so a
    block's work does not grow with the number of finished runs."""
    found = (get_run(store, v.decode()) for _, v in store.iterate(b"active/"))
    return [run for run in found if run is not None]


def run_deposit(params: PocParams, config: RunConfig) -> int:
    """What creating a run with ``config`` escrows: ``run_deposit``, so much per byte of its
    config and so much per block of its life (``schedule.run_lifetime``)."""
    return (params.run_deposit + params.run_deposit_per_byte * config.ByteSize()
            + params.run_deposit_per_block * run_lifetime(config, params))  # fmt: skip


def retire(ctx: Context, run: Run) -> None:
    """Take a finished run out of the active set (it stays queryable) and refund its deposit."""
    ctx.store.delete(_active_key(run.run_id))
    ctx.emit("run_finished", run_id=run.run_id)
    if run.deposit and int(run.deposit):
        denom = ctx.params.poc.collateral_denom
        bank.send(ctx, RUNS_ACCOUNT, run.creator, {denom: int(run.deposit)})
        ctx.emit("run_deposit_refunded", run_id=run.run_id, creator=run.creator,
                 amount=f"{run.deposit}{denom}")  # fmt: skip


def hosts(store: CacheStore, run_id: str) -> list[Host]:
    """Hosts of ``run_id`` by address: its members and those that left and whose last round
    is not decided yet (``left_height`` set)."""
    return [Host.FromString(v) for _, v in store.iterate(b"host/" + run_id.encode() + b"/")]


def members(store: CacheStore, run_id: str) -> list[Host]:
    """Hosts registered in ``run_id`` (not leaving), by address."""
    return [h for h in hosts(store, run_id) if not h.left_height]


def _host(store: CacheStore, run_id: str, address: str) -> Host | None:
    raw = store.get(_host_key(run_id, address))
    return Host.FromString(raw) if raw is not None else None


# A run keeps the rosters of its last 64 rounds: a round is decided within two periods of its
# window, and a roster costs ~45 bytes a member, written every round for as long as the run
# lasts (up to max_total_rounds) with no gas paid after a host's registration.
KEPT_ROSTERS = 64


def _roster_key(run_id: str, round_: int) -> bytes:
    return b"roster/" + run_id.encode() + b"/%010d" % round_


def roster(store: CacheStore, run_id: str, round_: int) -> Roster | None:
    """The hosts of round ``round_`` (None before it is drawn)."""
    raw = store.get(_roster_key(run_id, round_))
    return Roster.FromString(raw) if raw is not None else None


def _draw_rosters(ctx: Context) -> None:
    """Record the run's hosts as the roster of each round whose roster is drawn at this block
    (``schedule.roster_height``: the block before its commit window opens, or in an overlapped
    run the block that decides the state it builds on): who may commit it, and what assigns
    each host its data shards (so a verifier derives a host's shards from chain state alone)."""
    for run in active_runs(ctx.store):
        for round_ in rosters_drawn_at(run, ctx.params.poc, ctx.height):
            drawn = Roster(hosts=[h.address for h in members(ctx.store, run.run_id)],
                           drawn_height=ctx.height)  # fmt: skip
            ctx.store.set(_roster_key(run.run_id, round_), drawn.SerializeToString())
            ctx.emit("roster", run_id=run.run_id, round=round_, hosts=len(drawn.hosts))
            if round_ >= KEPT_ROSTERS:  # long decided: its challenges were drawn and answered
                ctx.store.delete(_roster_key(run.run_id, round_ - KEPT_ROSTERS))


def _validate_config(cfg: RunConfig, params: PocParams) -> None:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise TxError(codes.INVALID_REQUEST, f"config: {what}")

    asked = parse_amount(cfg.min_collateral, "config.min_collateral")
    least = params.min_host_collateral
    need(asked >= least, f"min_collateral below the chain's minimum {least} (a failed commit "
         "must cost its host something)")  # fmt: skip
    host_slash = params.slash_fraction * asked
    withhold = params.beacon_withhold_slash_fraction * params.min_verifier_collateral
    need(host_slash <= withhold, f"min_collateral: a host's slash ({host_slash:f}) may not exceed "
         f"what withholding a beacon secret costs a verifier ({withhold:f}), or re-rolling a "
         "round's seed would pay for a cheater")  # fmt: skip
    try:
        model_config.check_budget(cfg.model_config, params.max_model_parameters, cfg.seq_len)
    except model_config.ModelConfigError as err:
        need(False, str(err))
    need(cfg.seq_len > 0, "seq_len must be positive")
    need(cfg.batch_size > 0 and cfg.round_blocks > 0 and cfg.total_rounds > 0,
         "batch_size, round_blocks and total_rounds must be positive")  # fmt: skip
    need(cfg.batch_size * cfg.seq_len <= params.max_step_tokens,
         f"batch_size x seq_len above the chain's maximum {params.max_step_tokens} tokens a "
         "step")  # fmt: skip
    need(cfg.round_blocks <= params.max_round_blocks,
         f"round_blocks above the chain's maximum {params.max_round_blocks}")  # fmt: skip
    need(cfg.inner_steps > 0, "inner_steps must be positive")
    # A segment's middle state, which only a replay computes, fingerprints a verifier's vote.
    need(cfg.checkpoint_interval >= 2, "checkpoint_interval must be at least 2")
    need(cfg.inner_steps % cfg.checkpoint_interval == 0,
         "inner_steps must be a multiple of checkpoint_interval")  # fmt: skip
    need(cfg.inner_steps <= params.max_inner_steps,
         f"inner_steps above the chain's maximum {params.max_inner_steps}")  # fmt: skip
    need(cfg.inner_steps // cfg.checkpoint_interval <= params.max_segments_per_round,
         f"more than {params.max_segments_per_round} segments (inner_steps / "
         "checkpoint_interval) per round")  # fmt: skip
    need(cfg.total_rounds <= params.max_total_rounds,
         f"total_rounds above the chain's maximum {params.max_total_rounds}")  # fmt: skip
    most = params.max_start_delay_blocks
    need(cfg.start_delay_blocks <= most, f"start_delay_blocks above the chain's maximum {most}")
    floats = (cfg.inner_lr, cfg.outer_lr, cfg.outer_momentum, cfg.weight_decay, cfg.grad_clip)
    need(all(math.isfinite(x) for x in floats), "learning rates, momentum, weight_decay and "
         "grad_clip must be finite numbers")  # fmt: skip
    need(cfg.inner_lr > 0 and cfg.outer_lr > 0 and 0 <= cfg.outer_momentum < 1,
         "learning rates must be positive and outer_momentum in [0, 1)")  # fmt: skip
    need(cfg.weight_decay >= 0 and cfg.grad_clip >= 0, "weight_decay and grad_clip must be >= 0")
    problem = compression_problem(cfg.compression)
    need(problem is None, problem or "")
    need(cfg.precision in ("fp32", "bf16"), "precision must be fp32 or bf16")
    for name in ("tokenizer_hash", "data_manifest_hash"):
        need(_is_sha256_hex(getattr(cfg, name)), f"{name} must be a lowercase hex sha256")
    if cfg.overlap:
        problem = overlap_problem(cfg.round_blocks, params)
        need(problem is None, problem or "")


def _is_sha256_hex(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def is_host(store: CacheStore, run_id: str, address: str) -> bool:
    """Whether ``address`` is registered in ``run_id`` (and has not left it)."""
    host = _host(store, run_id, address)
    return host is not None and not host.left_height


def jail(ctx: Context, run_id: str, address: str) -> None:
    """Remove a host that failed a challenge from the run, releasing the run's reservation of
    its collateral: its later commits are refused until it registers again (reserving the run's
    minimum collateral anew)."""
    host = _host(ctx.store, run_id, address)
    if host is None:
        return
    ctx.store.delete(_host_key(run_id, address))
    run = get_run(ctx.store, run_id)
    if run is not None and not host.left_height:  # a leaver's hold ends with its leave record
        collateral.release(ctx.store, address, int(run.config.min_collateral))
    ctx.emit("jail_host", run_id=run_id, host=address)


def _leave_key(release_height: int, run_id: str, address: str) -> bytes:
    return b"leave/%012d/" % release_height + run_id.encode() + b"/" + address.encode()


def _handle_leave_run(ctx: Context, msg: MsgLeaveRun) -> MsgLeaveRunResponse:
    run = require_run(ctx.store, msg.run_id)
    if not is_host(ctx.store, msg.run_id, msg.host):
        raise TxError(codes.INVALID_REQUEST, f"{msg.host} is not a host of run {msg.run_id!r}")
    host = _host(ctx.store, msg.run_id, msg.host)
    host.left_height = ctx.height  # listed (its endpoint serves verifiers) until released
    ctx.store.set(_host_key(msg.run_id, msg.host), host.SerializeToString())
    # Only rounds that have begun can hold a commit of the host: the hold ends once every one
    # in flight is resolved.
    release = settled_at(run, ctx.params.poc, ctx.height)
    key = _leave_key(release, msg.run_id, msg.host)
    held = int(run.config.min_collateral) + int(ctx.store.get(key) or b"0")  # left, back, left
    ctx.store.set(key, b"%d" % held)
    ctx.emit("leave_run", run_id=msg.run_id, host=msg.host, release_height=release)
    return MsgLeaveRunResponse(release_height=release)


def end_block(ctx: Context) -> None:
    """For each host that left a run and whose hold ends at this block (after the round's
    challenges were resolved and its slash taken): release the run's hold, unlist it and start
    unbonding all its free collateral (unless it came back as a member meanwhile: then only the
    hold goes). Then draw the rosters due at this block (after this block's jails and
    leaves)."""
    _release_leavers(ctx)
    _draw_rosters(ctx)


def _release_leavers(ctx: Context) -> None:
    due = []
    for key, value in ctx.store.iterate(b"leave/"):
        _, release, run_id, address = key.decode().split("/", 3)
        if int(release) > ctx.height:
            break
        due.append((key, run_id, address, int(value)))
    for key, run_id, address, held in due:
        ctx.store.delete(key)
        host = _host(ctx.store, run_id, address)
        collateral.release(ctx.store, address, held)
        if host is not None and not host.left_height:  # back as a member: it keeps its bond
            ctx.emit("leave_hold_released", run_id=run_id, host=address)
            continue
        if host is not None:
            ctx.store.delete(_host_key(run_id, address))
        free = collateral.unbond_free(ctx, address)
        ctx.emit("host_left", run_id=run_id, host=address, unbonding=free)


def _handle_create_run(ctx: Context, msg: MsgCreateRun) -> MsgCreateRunResponse:
    require_run_id(msg.run_id)
    if get_run(ctx.store, msg.run_id) is not None:
        raise TxError(codes.INVALID_REQUEST, f"run {msg.run_id!r} already exists")
    _validate_config(msg.config, ctx.params.poc)
    limit = ctx.params.poc.max_active_runs
    if sum(1 for _ in ctx.store.iterate(b"active/")) >= limit:
        raise TxError(codes.INVALID_REQUEST, f"the chain already runs its maximum of {limit} runs")
    deposit = run_deposit(ctx.params.poc, msg.config)
    if deposit:
        bank.send(ctx, msg.creator, RUNS_ACCOUNT, {ctx.params.poc.collateral_denom: deposit})
    run = Run(
        run_id=msg.run_id,
        creator=msg.creator,
        config=msg.config,
        created_height=ctx.height,
        start_height=ctx.height + 1 + msg.config.start_delay_blocks,
        deposit=str(deposit),
    )
    ctx.store.set(_run_key(msg.run_id), run.SerializeToString())
    ctx.store.set(_active_key(msg.run_id), msg.run_id.encode())
    ctx.emit("create_run", run_id=msg.run_id, creator=msg.creator,
             deposit=f"{deposit}{ctx.params.poc.collateral_denom}")  # fmt: skip
    return MsgCreateRunResponse()


def _handle_register_host(ctx: Context, msg: MsgRegisterHost) -> MsgRegisterHostResponse:
    run = require_run(ctx.store, msg.run_id)
    problem = location_problem(msg.endpoint)
    if problem is not None:  # every peer and verifier reads it
        raise TxError(codes.INVALID_REQUEST, f"endpoint: {problem}")
    key = _host_key(msg.run_id, msg.host)
    existing = _host(ctx.store, msg.run_id, msg.host)
    if existing is not None and not existing.left_height:  # a member moves its endpoint
        existing.endpoint = msg.endpoint
        ctx.store.set(key, existing.SerializeToString())
        ctx.emit("update_host", run_id=msg.run_id, host=msg.host, endpoint=msg.endpoint)
        return MsgRegisterHostResponse()
    if run.config.max_hosts and len(members(ctx.store, msg.run_id)) >= run.config.max_hosts:
        raise TxError(codes.INVALID_REQUEST, f"run {msg.run_id!r} is full")
    need = int(run.config.min_collateral)
    collateral.reserve(ctx.store, msg.host, need, f"run {msg.run_id!r}")
    host = Host(
        run_id=msg.run_id, address=msg.host, endpoint=msg.endpoint, registered_height=ctx.height
    )
    ctx.store.set(key, host.SerializeToString())
    ctx.emit("register_host", run_id=msg.run_id, host=msg.host)
    return MsgRegisterHostResponse()


MSGS = [
    MsgSpec(MsgCreateRun, "creator", _handle_create_run),
    MsgSpec(MsgRegisterHost, "host", _handle_register_host),
    MsgSpec(MsgLeaveRun, "host", _handle_leave_run),
]


def _query_params(ctx: QueryContext, request: q.QueryParamsRequest) -> q.QueryParamsResponse:
    values = ctx.params.poc.model_dump(mode="json")  # decimals become strings
    return q.QueryParamsResponse(params=ParamsProto(**values))


def _query_run(ctx: QueryContext, request: q.QueryRunRequest) -> q.QueryRunResponse:
    return q.QueryRunResponse(run=require_run(ctx.store, request.run_id))


def _query_runs(ctx: QueryContext, request: q.QueryRunsRequest) -> q.QueryRunsResponse:
    if request.active:  # what verifiers work on: bounded by max_active_runs
        found, pages = page(ctx.store, b"active/", request.pagination,
                            lambda run_id: require_run(ctx.store, run_id.decode()))  # fmt: skip
    else:
        found, pages = page(ctx.store, b"run/", request.pagination, Run.FromString)
    return q.QueryRunsResponse(runs=found, pagination=pages)


def _query_hosts(ctx: QueryContext, request: q.QueryHostsRequest) -> q.QueryHostsResponse:
    require_run(ctx.store, request.run_id)
    prefix = b"host/" + request.run_id.encode() + b"/"
    found, pages = page(ctx.store, prefix, request.pagination, Host.FromString)
    return q.QueryHostsResponse(hosts=found, pagination=pages)


def _query_roster(ctx: QueryContext, request: q.QueryRosterRequest) -> q.QueryRosterResponse:
    require_run(ctx.store, request.run_id)
    found = roster(ctx.store, request.run_id, request.round)
    return q.QueryRosterResponse(roster=found, drawn=found is not None)


QUERIES: dict[str, QueryHandler] = {
    "Params": _query_params, "Run": _query_run, "Runs": _query_runs, "Hosts": _query_hosts,
    "Roster": _query_roster,
}  # fmt: skip

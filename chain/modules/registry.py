"""The training-run registry: runs and the hosts that joined them."""

from __future__ import annotations

import re

from chain.context import Context, MsgSpec, parse_amount
from chain.errors import TxError, codes
from chain.modules import collateral
from chain.state import CacheStore
from dilochain.poc.v1.tx_pb2 import (
    MsgCreateRun,
    MsgCreateRunResponse,
    MsgRegisterHost,
    MsgRegisterHostResponse,
)
from dilochain.poc.v1.types_pb2 import Host, Run

_RUN_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def _run_key(run_id: str) -> bytes:
    return b"run/" + run_id.encode()


def _host_key(run_id: str, address: str) -> bytes:
    return b"host/" + run_id.encode() + b"/" + address.encode()


def get_run(store: CacheStore, run_id: str) -> Run | None:
    """The run ``run_id``, if registered."""
    raw = store.get(_run_key(run_id))
    return Run.FromString(raw) if raw is not None else None


def runs(store: CacheStore) -> list[Run]:
    """All registered runs, by id."""
    return [Run.FromString(v) for _, v in store.iterate(b"run/")]


def hosts(store: CacheStore, run_id: str) -> list[Host]:
    """Hosts registered in ``run_id``, by address."""
    return [Host.FromString(v) for _, v in store.iterate(b"host/" + run_id.encode() + b"/")]


def _handle_create_run(ctx: Context, msg: MsgCreateRun) -> MsgCreateRunResponse:
    if not _RUN_ID.match(msg.run_id):
        raise TxError(codes.INVALID_REQUEST, f"run_id: invalid run id {msg.run_id!r}")
    if get_run(ctx.store, msg.run_id) is not None:
        raise TxError(codes.INVALID_REQUEST, f"run {msg.run_id!r} already exists")
    cfg = msg.config
    if cfg.inner_steps == 0 or cfg.checkpoint_interval == 0:
        raise TxError(codes.INVALID_REQUEST, "config: inner_steps and checkpoint_interval > 0")
    if cfg.inner_steps % cfg.checkpoint_interval:
        raise TxError(
            codes.INVALID_REQUEST, "config: inner_steps must be a multiple of checkpoint_interval"
        )
    parse_amount(cfg.min_collateral, "config.min_collateral")
    run = Run(run_id=msg.run_id, creator=msg.creator, config=cfg, created_height=ctx.height)
    ctx.store.set(_run_key(msg.run_id), run.SerializeToString())
    ctx.emit("create_run", run_id=msg.run_id, creator=msg.creator)
    return MsgCreateRunResponse()


def _handle_register_host(ctx: Context, msg: MsgRegisterHost) -> MsgRegisterHostResponse:
    run = get_run(ctx.store, msg.run_id)
    if run is None:
        raise TxError(codes.NOT_FOUND, f"run {msg.run_id!r} not found")
    key = _host_key(msg.run_id, msg.host)
    if ctx.store.get(key) is not None:
        raise TxError(codes.INVALID_REQUEST, f"{msg.host} is already a host of {msg.run_id!r}")
    if run.config.max_hosts and len(hosts(ctx.store, msg.run_id)) >= run.config.max_hosts:
        raise TxError(codes.INVALID_REQUEST, f"run {msg.run_id!r} is full")
    need, have = int(run.config.min_collateral), collateral.bonded(ctx.store, msg.host)
    if have < need:
        raise TxError(
            codes.INSUFFICIENT_FUNDS,
            f"run {msg.run_id!r} needs {need} bonded collateral, {msg.host} has {have}",
        )
    collateral.lock(ctx.store, msg.host, need)
    host = Host(
        run_id=msg.run_id, address=msg.host, endpoint=msg.endpoint, registered_height=ctx.height
    )
    ctx.store.set(key, host.SerializeToString())
    ctx.emit("register_host", run_id=msg.run_id, host=msg.host)
    return MsgRegisterHostResponse()


MSGS = [
    MsgSpec(MsgCreateRun, "creator", _handle_create_run),
    MsgSpec(MsgRegisterHost, "host", _handle_register_host),
]

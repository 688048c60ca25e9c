"""Talking to a dilochain node with cosmpy: connection, tx building and submission."""

from __future__ import annotations

import logging
import math
import time
from decimal import Decimal

import grpc
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.client.utils import prepare_basic_transaction
from cosmpy.aerial.config import NetworkConfig
from cosmpy.aerial.exceptions import BroadcastError, QueryTimeoutError
from cosmpy.aerial.tx import SigningCfg, Transaction, TxFee
from cosmpy.aerial.tx_helpers import SubmittedTx, TxResponse
from cosmpy.aerial.wallet import Wallet
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.tx.v1beta1.service_pb2 import BroadcastMode, BroadcastTxRequest
from google.protobuf.message import Message

from dilochain.protocol.params import DENOM, FeeParams

log = logging.getLogger(__name__)


class ChainUnreachable(Exception):
    """No dilochain node answers at the given address."""


DEFAULT_GAS_PRICE = FeeParams().min_gas_price


def network_config(
    chain_id: str, grpc_address: str, min_gas_price: Decimal = DEFAULT_GAS_PRICE
) -> NetworkConfig:
    """cosmpy's network config for a dilochain node at ``grpc_address`` (host:port)."""
    return NetworkConfig(
        chain_id=chain_id,
        fee_minimum_gas_price=float(min_gas_price),
        fee_denomination=DENOM,
        staking_denomination=DENOM,
        url=f"grpc+http://{grpc_address}",
    )


def query_chain_id(grpc_address: str, timeout: float = 5.0) -> str:
    """Ask the node at ``grpc_address`` for its chain id."""
    with grpc.insecure_channel(grpc_address) as channel:
        try:
            info = tm_grpc.ServiceStub(channel).GetNodeInfo(
                tm_q.GetNodeInfoRequest(), timeout=timeout
            )
        except grpc.RpcError:
            raise ChainUnreachable(f"no dilochain node answers at {grpc_address}") from None
    return info.default_node_info.network


def connect(grpc_address: str, chain_id: str | None = None) -> LedgerClient:
    """An unmodified cosmpy ``LedgerClient`` for the node at ``grpc_address``."""
    return LedgerClient(network_config(chain_id or query_chain_id(grpc_address), grpc_address))


def sign_offline(
    signer: Wallet,
    msgs: list[Message],
    *,
    sequence: int,
    account_number: int,
    chain_id: str,
    gas_limit: int = 200_000,
    fee: int | None = None,
    memo: str = "",
) -> bytes:
    """Raw TxRaw bytes signed (SIGN_MODE_DIRECT) without asking the chain anything.

    The fee defaults to ``gas_limit`` at the default minimum gas price.
    """
    tx = Transaction()
    for msg in msgs:
        tx.add_message(msg)
    amount = math.ceil(gas_limit * DEFAULT_GAS_PRICE) if fee is None else fee
    tx.seal(
        SigningCfg.direct(signer.public_key(), sequence),
        fee=TxFee(amount=f"{amount}{DENOM}", gas_limit=gas_limit),
        memo=memo,
    )
    tx.sign(signer.signer(), chain_id, account_number)
    tx.complete()
    return tx.tx.SerializeToString()


def _kinds(msgs: tuple[Message, ...]) -> str:
    return ",".join(m.DESCRIPTOR.name for m in msgs)


def broadcast(
    client: LedgerClient, wallet: Wallet, *msgs: Message, memo: str | None = None
) -> SubmittedTx:
    """Sign ``msgs`` in one tx (gas by simulation, fee at the chain's price) and broadcast it;
    the tx's hash and CheckTx code are logged. Raises cosmpy's ``BroadcastError`` if refused."""
    tx = Transaction()
    for msg in msgs:
        tx.add_message(msg)
    tx = prepare_basic_transaction(client, tx, wallet, memo=memo)
    request = BroadcastTxRequest(
        tx_bytes=tx.tx.SerializeToString(), mode=BroadcastMode.BROADCAST_MODE_SYNC
    )
    checked = client.txs.BroadcastTx(request).tx_response
    level = logging.WARNING if checked.code else logging.INFO
    log.log(level, "tx %s %s broadcast: code %d%s", checked.txhash, _kinds(msgs), checked.code,
            f" ({checked.raw_log})" if checked.code else "")  # fmt: skip
    if checked.code:
        raise BroadcastError(checked.txhash, checked.raw_log)
    return SubmittedTx(client, checked.txhash)


class TxRefused(Exception):
    """The chain refused a tx (at simulation, CheckTx or in its block), or did not include it."""


def submit(
    client: LedgerClient, wallet: Wallet, *msgs: Message, timeout: float = 30, poll: float = 0.2,
    until_height: int | None = None,
) -> TxResponse:  # fmt: skip
    """Broadcast ``msgs`` in one tx and wait until it is in a block; raises :class:`TxRefused`.
    With ``until_height`` (the last block of the window the tx is for), it stops waiting once
    the chain is past that block (checked every second of waiting): the tx can no longer be
    included, e.g. its window closed and the mempool dropped it on recheck."""
    deadline = time.monotonic() + timeout
    try:
        submitted = _broadcast_in_sequence(client, wallet, msgs, deadline)
        while True:
            try:
                wait = max(0.0, min(1.0, deadline - time.monotonic()))
                return _included(submitted, msgs, wait, poll)
            except QueryTimeoutError:
                if time.monotonic() >= deadline:
                    log.warning("tx %s %s: not included within %ss", submitted.tx_hash,
                                _kinds(msgs), timeout)  # fmt: skip
                    raise TxRefused(f"not included in a block within {timeout}s") from None
                if until_height is not None and client.query_height() > until_height:
                    try:  # one last look: it may have landed while we asked
                        return _included(submitted, msgs, 0, poll)
                    except QueryTimeoutError:
                        log.warning("tx %s %s: not included, and now it cannot be",
                                    submitted.tx_hash, _kinds(msgs))  # fmt: skip
                        raise TxRefused("not included in a block, and now it cannot be") from None
    except BroadcastError as err:
        raise TxRefused(str(err)) from None
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.INVALID_ARGUMENT:  # simulation failed
            raise TxRefused(err.details()) from None
        if err.code() == grpc.StatusCode.NOT_FOUND:  # the signer's account does not exist yet
            raise TxRefused(f"{err.details()} (an account exists once it holds funds)") from None
        raise


SEQUENCE_TAKEN = "incorrect account sequence"


def _broadcast_in_sequence(
    client: LedgerClient, wallet: Wallet, msgs: tuple[Message, ...], deadline: float
) -> SubmittedTx:
    """Broadcast, signing again while another process's tx of the same key holds the account
    sequence (``node leave`` beside a running node, say) until it is in a block."""
    while True:
        try:
            return broadcast(client, wallet, *msgs)
        except (BroadcastError, grpc.RpcError) as err:
            text = str(err) if isinstance(err, BroadcastError) else (err.details() or "")
            if SEQUENCE_TAKEN not in text or time.monotonic() + 0.5 > deadline:
                raise
            log.info("tx %s: another tx of this key holds its sequence; signing again",
                     _kinds(msgs))  # fmt: skip
            time.sleep(0.5)


def _included(
    submitted: SubmittedTx, msgs: tuple[Message, ...], timeout: float, poll: float
) -> TxResponse:
    """Wait up to ``timeout`` for the tx's block; its result is logged with the tx's hash,
    height and code (cosmpy raises ``BroadcastError`` for a non-zero code)."""
    try:
        submitted.wait_to_complete(timeout=timeout, poll_period=poll)
    finally:
        response = submitted.response
        if response is not None:
            level = logging.WARNING if response.code else logging.INFO
            log.log(level, "tx %s %s in block %d: code %d", response.hash, _kinds(msgs),
                    response.height, response.code)  # fmt: skip
    return response

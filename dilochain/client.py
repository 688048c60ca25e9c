"""Talking to a dilochain node with cosmpy: connection, tx building and submission."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import urllib.request
from collections.abc import Sequence
from decimal import Decimal

import grpc
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.client.utils import prepare_basic_transaction
from cosmpy.aerial.config import NetworkConfig
from cosmpy.aerial.exceptions import BroadcastError, NotFoundError
from cosmpy.aerial.tx import SigningCfg, Transaction, TxFee
from cosmpy.aerial.tx_helpers import SubmittedTx, TxResponse
from cosmpy.aerial.types import Account
from cosmpy.aerial.wallet import Wallet
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.tx.v1beta1.service_pb2 import BroadcastMode, BroadcastTxRequest
from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import AuthInfo, TxRaw
from google.protobuf.message import DecodeError, Message

from dilochain.chain.errors import codes
from dilochain.endpoints import open_channel, shown, transient
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import DENOM, FeeParams
from dilochain.rpc_channel import rpc_address

log = logging.getLogger(__name__)
TX_IN_CACHE = codes.TX_IN_MEMPOOL  # CometBFT's mempool already holds these bytes
# A node that could not take a tx now (its CometBFT unreachable, its mempool full): sent again.
NOT_NOW = (codes.INTERNAL, codes.MEMPOOL_FULL)


class ChainUnreachable(Exception):
    """No dilochain node answers at the given address."""


DEFAULT_GAS_PRICE = FeeParams().min_gas_price
_CLIENT_STUBS = ("wasm", "auth", "txs", "bank", "staking", "distribution", "params", "consensus",
                 "tendermint")  # fmt: skip


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


def query_chain_id(addresses: str | Sequence[str], timeout: float = 3.0) -> str:
    """Ask the nodes at ``addresses`` (the first that answers) for their chain id."""
    with open_channel(addresses, patience=timeout) as channel:
        try:
            info = tm_grpc.ServiceStub(channel).GetNodeInfo(
                tm_q.GetNodeInfoRequest(), timeout=timeout
            )
        except grpc.RpcError:
            raise ChainUnreachable(
                f"no dilochain node answers at {shown(channel.addresses)}"
                + _hint(channel.addresses)
            ) from None
    return info.default_node_info.network


def _hint(addresses: Sequence[str]) -> str:
    """What the addresses are, when they are not a chain node's gRPC: a CometBFT RPC port
    (answers HTTP ``/status``) or nothing at all."""
    if len(addresses) == 1 and rpc_address(addresses[0]):
        return " (is the node running, and is this the [rpc] laddr of its config.toml?)"
    for address in addresses:
        try:
            with urllib.request.urlopen(f"http://{address}/status", timeout=1.0) as reply:
                if "node_info" in reply.read(1 << 16).decode("utf-8", "replace"):
                    return (f" ({address} is CometBFT's RPC: give it as --node "
                            f"tcp://{address}; --chain wants a node's gRPC address, which "
                            "`chain start` prints, 127.0.0.1:9090 by default)")  # fmt: skip
        except (OSError, ValueError):
            continue
    return " (is `dilochain chain start` running, and is this the gRPC address it printed?)"


def connect(addresses: str | Sequence[str], chain_id: str | None = None) -> LedgerClient:
    """An unmodified cosmpy ``LedgerClient`` whose calls go to the chain nodes at ``addresses``
    (``host:port``, one or several) through a :class:`FailoverChannel`: a node that restarts
    or goes down is ridden out; or, given one node's CometBFT RPC URL, through that
    (:func:`~dilochain.endpoints.open_channel`)."""
    chain_id = chain_id or query_chain_id(addresses)  # before a channel that could be left open
    channel = open_channel(addresses)
    first = channel.addresses[0]
    client = LedgerClient(network_config(chain_id, rpc_address(first) or first))
    for name in _CLIENT_STUBS:  # cosmpy's stubs, rebuilt over the channel
        setattr(client, name, type(getattr(client, name))(channel))
    return client


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


class TxRefused(Exception):
    """The chain refused a tx (at simulation, CheckTx or in its block), or did not include it."""


SEQUENCE_TAKEN = "incorrect account sequence"
RESEND_BLOCKS = 3  # blocks without inclusion after which the same bytes are sent again
WINDOW_PATIENCE = 900.0  # seconds a tx for a window is waited for at most (the chain may halt)


def _signed(
    client: LedgerClient, wallet: Wallet, msgs: tuple[Message, ...], memo=None, account=None
) -> bytes:
    """``msgs`` in one tx, gas by simulation, fee at the chain's price, signed (at ``account``'s
    number and sequence; the chain's committed ones when None)."""
    tx = Transaction()
    for msg in msgs:
        tx.add_message(msg)
    return prepare_basic_transaction(client, tx, wallet, account, memo=memo).tx.SerializeToString()


def _gas_of(raw: bytes) -> int | None:
    """The gas limit signed tx ``raw`` names (None for bytes that are no tx)."""
    try:
        return AuthInfo.FromString(TxRaw.FromString(raw).auth_info_bytes).fee.gas_limit
    except DecodeError:
        return None


def _broadcast_raw(client: LedgerClient, raw: bytes, msgs: tuple[Message, ...]) -> TxResponse:
    """CheckTx's answer to ``raw`` (logged with the tx's hash)."""
    request = BroadcastTxRequest(tx_bytes=raw, mode=BroadcastMode.BROADCAST_MODE_SYNC)
    checked = client.txs.BroadcastTx(request).tx_response
    level = logging.WARNING if checked.code and checked.code != TX_IN_CACHE else logging.INFO
    log.log(level, "tx %s %s broadcast: code %d%s", checked.txhash, _kinds(msgs), checked.code,
            f" ({checked.raw_log})" if checked.code else "")  # fmt: skip
    return checked


def broadcast(
    client: LedgerClient, wallet: Wallet, *msgs: Message, memo: str | None = None
) -> SubmittedTx:
    """Sign ``msgs`` in one tx (gas by simulation, fee at the chain's price) and broadcast it;
    the tx's hash and CheckTx code are logged. Raises cosmpy's ``BroadcastError`` if refused."""
    checked = _broadcast_raw(client, _signed(client, wallet, msgs, memo), msgs)
    if checked.code:
        raise BroadcastError(checked.txhash, checked.raw_log)
    return SubmittedTx(client, checked.txhash)


class _WrongSequence(Exception):
    """A node refused a tx's account sequence; ``expected`` is the one its mempool's state
    wants next (None where its answer does not say)."""

    def __init__(self, log_text: str):
        super().__init__(log_text)
        found = _EXPECTED.search(log_text)
        self.expected = int(found.group(1)) if found else None


_EXPECTED = re.compile(r"expected (\d+), got \d+")  # the Cosmos SDK's wording, and the chain's


class Sender:
    """One key's txs from one process, each waited for on its own: signing and broadcasting
    take turns (a short lock), waiting for a block does not, so a reveal is never held behind
    a commit or a claim waiting for its block. The next sequence is kept here: a tx in a
    mempool has taken one that the chain's account query does not show yet."""

    def __init__(self, client: LedgerClient, wallet: Wallet):
        self.client, self.wallet = client, wallet
        self._lock = threading.Lock()
        self._next: Account | None = None  # the account number and the next sequence to sign
        self._gas: dict[str, int] = {}  # per kinds of messages: the gas last simulated

    def submit(
        self, *msgs: Message, timeout: float = 30, poll: float = 0.2,
        until_height: int | None = None,
    ) -> TxResponse:  # fmt: skip
        """Broadcast ``msgs`` in one tx and wait until it is in a block; raises
        :class:`TxRefused`.

        The tx's hash is known before it is sent, so a broadcast whose answer was lost (its
        node went down, the client failed over) is looked for by hash, and a tx that no block
        includes while the chain moves on (a mempool lost with its node) is sent again, as the
        same bytes. With ``until_height`` (the last block of the window the tx is for) it waits
        until the chain is past that block (checked every second), then gives up: a halted
        chain closes no window, so it waits up to ``WINDOW_PATIENCE`` however slowly blocks
        come; without, it waits ``timeout`` seconds."""
        client = self.client
        patience = timeout if until_height is None else WINDOW_PATIENCE
        raw, sent_at, deadline = self._sign_and_send(msgs, patience)
        digest = tx_hash(raw).hex().upper()
        checked = 0.0
        while True:
            found = _lookup(client, digest)
            if found is not None:
                return _outcome(found, msgs)
            height = None
            if time.monotonic() - checked >= 1.0:
                height, checked = _height(client), time.monotonic()
            closed = until_height is not None and height is not None and height > until_height
            if closed or time.monotonic() >= deadline:
                found = _settled_lookup(client, digest)  # it may have landed while we asked
                if found is not None:
                    return _outcome(found, msgs)
                why = ", and now it cannot be" if closed else f" within {patience}s"
                log.warning("tx %s %s: not included%s", digest, _kinds(msgs), why)
                raise TxRefused(f"not included in a block{why}")
            if height is not None and _resend_due(height, sent_at, until_height):
                try:
                    sent_at = _send(client, raw, msgs) or sent_at
                except _WrongSequence:  # taken: by itself, or by another tx of the key
                    found = _settled_lookup(client, digest)
                    if found is not None:
                        return _outcome(found, msgs)
                    log.info("tx %s %s: another tx took its sequence; signing it again", digest,
                             _kinds(msgs))  # fmt: skip
                    raw, sent_at, _ = self._sign_and_send(msgs, deadline=deadline)
                    digest = tx_hash(raw).hex().upper()
            time.sleep(poll)

    def _sign_and_send(
        self, msgs: tuple[Message, ...], patience: float = 0.0, deadline: float | None = None
    ) -> tuple[bytes, int | None, float]:
        """The signed tx, the height it was first sent at (:func:`_send`) and the deadline of
        the wait for it: ``patience`` seconds from its turn to sign (a tx queued behind another
        thread's retries is not given up the moment it is sent), unless a ``deadline`` is
        given. It is signed at the next sequence as this process counts it; where a node says
        another is due (another process's tx of the key holds one, or a tx of ours left the
        mempools), signed again at that one. Simulation and the account query are what refuse
        a tx up front."""
        with self._lock:
            if deadline is None:
                deadline = time.monotonic() + patience
            while True:
                account = self._next
                try:
                    account = account or self.client.query_account(self.wallet.address())
                    raw = self._signed(msgs, account)
                    sent_at = _send(self.client, raw, msgs)
                except grpc.RpcError as err:
                    self._simulation_refused(err, account, deadline)
                    continue
                except _WrongSequence as err:
                    if _lookup(self.client, tx_hash(raw).hex().upper()) is None:
                        self._resequence(err.expected, account, deadline)
                        continue
                    sent_at = None  # a node took it, its answer was lost, and it is in a block
                self._next = Account(account.address, account.number, account.sequence + 1)
                return raw, sent_at, deadline

    def _signed(self, msgs: tuple[Message, ...], account: Account) -> bytes:
        """``msgs`` signed at ``account``, gas by simulation; where the node is too busy to
        simulate (its simulation gate full: strangers' simulations are free to send), with
        the gas this process last simulated for the same kinds of messages, half again: a
        protocol tx's window does not wait on strangers."""
        kinds = _kinds(msgs)
        try:
            raw = _signed(self.client, self.wallet, msgs, account=account)
        except grpc.RpcError as err:
            known = self._gas.get(kinds)
            if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or not transient(err) or not known:
                raise
            gas = known * 3 // 2
            log.warning("tx %s: simulation refused (%s); signed with %d gas, half again what "
                        "it last took", kinds, err.details() or err.code().name, gas)  # fmt: skip
            config = self.client.network_config
            return sign_offline(self.wallet, list(msgs), sequence=account.sequence,
                                account_number=account.number, chain_id=config.chain_id,
                                gas_limit=gas,
                                fee=math.ceil(gas * config.fee_minimum_gas_price))  # fmt: skip
        if gas := _gas_of(raw):
            self._gas[kinds] = gas
        return raw

    def _simulation_refused(
        self, err: grpc.RpcError, account: Account | None, deadline: float
    ) -> None:
        """Go on after a failed account query or simulation where it is worth trying again
        (unreachable, or a sequence not due); raise :class:`TxRefused` where it is not."""
        details = err.details() or ""
        if err.code() == grpc.StatusCode.NOT_FOUND:  # the signer's account does not exist
            raise TxRefused(f"{details} (an account exists once it holds funds)") from None
        if transient(err) and time.monotonic() + 1 < deadline:  # unreachable
            time.sleep(1.0)
            return
        if err.code() != grpc.StatusCode.INVALID_ARGUMENT:
            raise err
        if SEQUENCE_TAKEN not in details:  # simulation failed
            raise TxRefused(details) from None
        self._resequence(_WrongSequence(details).expected, account, deadline)

    def _resequence(self, expected: int | None, account: Account | None, deadline: float) -> None:
        """Sign next at ``expected``, or (unknown) at the chain's committed sequence after a
        moment: another process's tx holding it may then be in a block."""
        if time.monotonic() + 0.5 > deadline:
            raise TxRefused("another tx of this key holds its account sequence")
        if expected is not None and account is not None and expected != account.sequence:
            log.info("signing at sequence %d, not %d", expected, account.sequence)
            self._next = Account(account.address, account.number, expected)
            return
        log.info("another tx of this key holds its sequence; signing again")
        self._next = None
        time.sleep(0.5)


def _resend_due(height: int, sent_at: int | None, until_height: int | None) -> bool:
    """Whether a tx not yet in a block is sent again at ``height``: after ``RESEND_BLOCKS``
    blocks, or at every block once its window would close before that (a mempool lost late
    in a short window still has its chance; bytes a mempool holds are answered code 19)."""
    if sent_at is None:
        return True
    late = until_height is not None and height + RESEND_BLOCKS > until_height
    return height >= sent_at + (1 if late else RESEND_BLOCKS)


def submit(
    client: LedgerClient, wallet: Wallet, *msgs: Message, timeout: float = 30, poll: float = 0.2,
    until_height: int | None = None,
) -> TxResponse:  # fmt: skip
    """:meth:`Sender.submit` for a process that sends one tx of this key at a time."""
    return Sender(client, wallet).submit(*msgs, timeout=timeout, poll=poll,
                                         until_height=until_height)  # fmt: skip


def _send(client: LedgerClient, raw: bytes, msgs: tuple[Message, ...]) -> int | None:
    """Broadcast ``raw``: the height it was sent at (None if no node took it now: unreachable,
    its CometBFT unreachable, its mempool full). A sequence not due raises
    :class:`_WrongSequence`; CheckTx's other refusals raise :class:`TxRefused`."""
    try:
        height = client.query_height()
        checked = _broadcast_raw(client, raw, msgs)
    except grpc.RpcError as err:
        log.warning("tx %s: %s; will send it again", _kinds(msgs), err.code().name)
        return None
    if checked.code in (0, TX_IN_CACHE):  # in (this node's) mempool
        return height
    if checked.code in NOT_NOW:
        return None
    if SEQUENCE_TAKEN in checked.raw_log:
        raise _WrongSequence(checked.raw_log)
    raise TxRefused(checked.raw_log)


def _lookup(client: LedgerClient, digest: str) -> TxResponse | None:
    """The committed tx with this hash (None if not in a block, or no node answers)."""
    try:
        return client.query_tx(digest)
    except NotFoundError:
        return None
    except grpc.RpcError:
        return None


def _settled_lookup(client: LedgerClient, digest: str, tries: int = 4) -> TxResponse | None:
    """:func:`_lookup`, asked again for a moment before deciding a tx is not in a block:
    CometBFT indexes a block's txs just after committing it."""
    for attempt in range(tries):
        if attempt:
            time.sleep(0.25)
        if (found := _lookup(client, digest)) is not None:
            return found
    return None


def _height(client: LedgerClient) -> int | None:
    try:
        return client.query_height()
    except grpc.RpcError:
        return None


def _outcome(response: TxResponse, msgs: tuple[Message, ...]) -> TxResponse:
    """An included tx's result, logged; raises :class:`TxRefused` for a non-zero code."""
    level = logging.WARNING if response.code else logging.INFO
    log.log(level, "tx %s %s in block %d: code %d", response.hash, _kinds(msgs),
            response.height, response.code)  # fmt: skip
    if response.code:
        raise TxRefused(response.raw_log)
    return response

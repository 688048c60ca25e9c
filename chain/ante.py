"""The ante handler: what every tx must pass before its messages run (x/auth's decorators).

Checks timeout height, fee (denom and minimum gas price), each signer's account, public key,
sequence and SIGN_MODE_DIRECT signature; then deducts the fee and increments sequences.
"""

from __future__ import annotations

import base64
import math
from collections import OrderedDict
from enum import Enum

from cosmpy.protos.cosmos.crypto.secp256k1.keys_pb2 import PubKey
from cosmpy.protos.cosmos.tx.signing.v1beta1.signing_pb2 import SignMode
from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import SignDoc

from dilochain.chain.context import Context
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules import auth, bank
from dilochain.chain.signature import verify_secp256k1
from dilochain.chain.tx import DecodedTx
from dilochain.genesis.coins import format_coins
from dilochain.protocol.address import address_from_pubkey, module_address

FEE_COLLECTOR = module_address("fee_collector")
_PUBKEY_TYPE = "/" + PubKey.DESCRIPTOR.full_name


class Mode(Enum):
    """Why a tx runs: mempool admission, the mempool's recheck after a block, block execution or
    gas estimation."""

    CHECK = "check"
    RECHECK = "recheck"
    DELIVER = "deliver"
    SIMULATE = "simulate"


class SignatureCache:
    """Remembers txs whose signatures verified, so a block does not verify them twice.

    Keyed by tx hash and the signers' account numbers: the sign bytes are a function of the
    tx bytes, the chain id (fixed per process) and those account numbers alone.
    """

    def __init__(self, size: int = 200_000):
        self._size = size
        self._seen: OrderedDict[tuple[bytes, tuple[int, ...]], None] = OrderedDict()

    def __contains__(self, key: tuple[bytes, tuple[int, ...]]) -> bool:
        return key in self._seen

    def add(self, key: tuple[bytes, tuple[int, ...]]) -> None:
        """Record a verified (tx hash, account numbers) pair."""
        self._seen[key] = None
        if len(self._seen) > self._size:
            self._seen.popitem(last=False)


def _fee(ctx: Context, tx: DecodedTx, mode: Mode) -> dict[str, int]:
    fees = ctx.params.fees
    coins = bank.coins_from_proto(tx.auth_info.fee.amount, "fee", positive=False)
    if set(coins) - {fees.fee_denom}:
        raise TxError(codes.INVALID_COINS, f"fee: only {fees.fee_denom} is accepted")
    if mode is Mode.SIMULATE:
        # Estimate with a token fee so the fee transfer is metered like the real tx's.
        return coins or {fees.fee_denom: 1}
    required = math.ceil(tx.gas_limit * fees.min_gas_price)
    paid = coins.get(fees.fee_denom, 0)
    if paid < required:
        raise TxError(
            codes.INSUFFICIENT_FEE,
            f"insufficient fees; got: {paid}{fees.fee_denom} required: "
            f"{required}{fees.fee_denom}: insufficient fee",
        )
    return coins


def _signer_pubkey(tx: DecodedTx, index: int, signer: str, mode: Mode) -> bytes:
    info = tx.auth_info.signer_infos[index]
    if info.public_key.type_url != _PUBKEY_TYPE:
        raise TxError(codes.INVALID_PUBKEY, f"signer {index}: unsupported key type")
    try:
        key = PubKey.FromString(info.public_key.value).key
    except Exception:
        raise TxError(codes.INVALID_PUBKEY, f"signer {index}: malformed public key") from None
    if len(key) != 33 or address_from_pubkey(key) != signer:
        raise TxError(
            codes.INVALID_PUBKEY,
            f"pubKey does not match signer address {signer} with signer index: {index}",
        )
    # A simulation is not signed: cosmjs, as the SDK's own client, leaves its mode unspecified.
    allowed = {SignMode.SIGN_MODE_DIRECT}
    if mode is Mode.SIMULATE:
        allowed.add(SignMode.SIGN_MODE_UNSPECIFIED)
    if not info.mode_info.HasField("single") or info.mode_info.single.mode not in allowed:
        raise TxError(codes.INVALID_REQUEST, f"signer {index}: only SIGN_MODE_DIRECT is supported")
    return key


def run_ante(ctx: Context, tx: DecodedTx, mode: Mode, sig_cache: SignatureCache) -> None:
    """Authorize ``tx`` and charge it, writing fee and sequence changes into ``ctx.store``."""
    store, params = ctx.store, ctx.params.auth
    store.meter.consume(params.tx_size_cost_per_byte * len(tx.raw), "txSize")
    timeout = tx.body.timeout_height
    if timeout and ctx.height > timeout:
        raise TxError(
            codes.TX_TIMEOUT_HEIGHT, f"block height {ctx.height} > timeout height {timeout}"
        )
    fee = _fee(ctx, tx, mode)

    accounts = []
    for index, signer in enumerate(tx.signers):
        account = auth.get_account(store, signer)
        if account is None:
            raise TxError(codes.UNKNOWN_ADDRESS, f"account {signer} not found")
        key = _signer_pubkey(tx, index, signer, mode)
        if account.HasField("pub_key") and PubKey.FromString(account.pub_key.value).key != key:
            raise TxError(codes.INVALID_PUBKEY, f"pubkey of {signer} does not match its account")
        sequence = tx.auth_info.signer_infos[index].sequence
        if sequence != account.sequence:
            raise TxError(
                codes.WRONG_SEQUENCE,
                f"account sequence mismatch, expected {account.sequence}, got {sequence}: "
                "incorrect account sequence",
            )
        accounts.append((account, key))

    numbers = tuple(account.account_number for account, _ in accounts)
    cache_key = (tx.hash, numbers)
    verified = cache_key in sig_cache
    for index, (account, key) in enumerate(accounts):
        store.meter.consume(params.sig_verify_cost_secp256k1, "ante verify: secp256k1")
        if verified or mode is Mode.SIMULATE:
            continue
        sign_doc = SignDoc(
            body_bytes=tx.body_bytes,
            auth_info_bytes=tx.auth_info_bytes,
            chain_id=ctx.chain_id,
            account_number=account.account_number,
        ).SerializeToString()
        if not verify_secp256k1(key, sign_doc, tx.signatures[index]):
            raise TxError(
                codes.UNAUTHORIZED,
                f"signature verification failed; please verify account number "
                f"({account.account_number}), sequence ({account.sequence}) and chain-id "
                f"({ctx.chain_id}): unauthorized",
            )
    if not verified and mode is not Mode.SIMULATE:
        sig_cache.add(cache_key)

    payer = tx.signers[0]
    if fee:
        try:
            bank.send(ctx, payer, FEE_COLLECTOR, fee)
        except TxError as err:
            raise TxError(err.code, f"{err.log}: insufficient funds to pay fees") from None
    ctx.emit("tx", fee=format_coins(fee), fee_payer=payer)
    for index, (account, key) in enumerate(accounts):
        if not account.HasField("pub_key"):
            account.pub_key.Pack(PubKey(key=key), type_url_prefix="/")
        ctx.emit("tx", acc_seq=f"{account.address}/{account.sequence}")
        ctx.emit("tx", signature=base64.b64encode(tx.signatures[index]).decode())
        account.sequence += 1
        auth.set_account(store, account)

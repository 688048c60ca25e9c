"""Balances, supply and ``MsgSend``."""

from __future__ import annotations

from collections.abc import Iterable

from cosmpy.protos.cosmos.bank.v1beta1.bank_pb2 import DenomUnit, Metadata
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend, MsgSendResponse

from dilochain.chain.address import require_address
from dilochain.chain.context import Context, MsgSpec, get_int, parse_uint, set_int
from dilochain.chain.errors import TxError, codes
from dilochain.chain.modules.auth import ensure_account
from dilochain.chain.state import CacheStore
from dilochain.genesis.coins import format_coins
from dilochain.protocol.params import DENOM, DENOM_RULE

# What wallets and explorers show for the chain's token (bank's DenomsMetadata).
DENOM_METADATA = Metadata(
    description="The dilochain token: collateral, fees and rewards",
    denom_units=[DenomUnit(denom=DENOM, exponent=0, aliases=["microdlc"]),
                 DenomUnit(denom="dlc", exponent=6)],
    base=DENOM, display="dlc", name="DLC", symbol="DLC",
)  # fmt: skip


def balance_key(address: str, denom: str) -> bytes:
    """The state key of ``address``'s balance of ``denom`` (what a proven query asks for)."""
    return b"bal/" + address.encode() + b"/" + denom.encode()


def _supply_key(denom: str) -> bytes:
    return b"supply/" + denom.encode()


def balance(store: CacheStore, address: str, denom: str) -> int:
    """``address``'s balance of ``denom``."""
    return get_int(store, balance_key(address, denom))


def all_balances(store: CacheStore, address: str) -> dict[str, int]:
    """Every non-zero balance of ``address``, by denom."""
    prefix = b"bal/" + address.encode() + b"/"
    return {k[len(prefix) :].decode(): int(v) for k, v in store.iterate(prefix)}


def supply(store: CacheStore, denom: str) -> int:
    """Total supply of ``denom``."""
    return get_int(store, _supply_key(denom))


def total_supply(store: CacheStore) -> dict[str, int]:
    """Total supply of every denom."""
    return {k[len(b"supply/") :].decode(): int(v) for k, v in store.iterate(b"supply/")}


def mint(store: CacheStore, address: str, coins: dict[str, int]) -> None:
    """Create ``coins`` in ``address`` (genesis and rewards), growing the supply."""
    ensure_account(store, address)
    for denom, amount in coins.items():
        set_int(store, balance_key(address, denom), balance(store, address, denom) + amount)
        set_int(store, _supply_key(denom), supply(store, denom) + amount)


def burn(store: CacheStore, address: str, coins: dict[str, int]) -> None:
    """Destroy ``coins`` held by ``address`` (slashing), shrinking the supply."""
    for denom, amount in coins.items():
        set_int(store, balance_key(address, denom), balance(store, address, denom) - amount)
        set_int(store, _supply_key(denom), supply(store, denom) - amount)


def send(ctx: Context, sender: str, recipient: str, coins: dict[str, int]) -> None:
    """Move ``coins`` from ``sender`` to ``recipient``; raises insufficient funds."""
    store = ctx.store
    for denom, amount in coins.items():
        have = balance(store, sender, denom)
        if have < amount:
            raise TxError(
                codes.INSUFFICIENT_FUNDS,
                f"spendable balance {have}{denom} is smaller than {amount}{denom}: "
                "insufficient funds",
            )
        set_int(store, balance_key(sender, denom), have - amount)
    ensure_account(store, recipient)
    for denom, amount in coins.items():
        set_int(store, balance_key(recipient, denom), balance(store, recipient, denom) + amount)
    ctx.emit("transfer", recipient=recipient, sender=sender, amount=format_coins(coins))


def coins_from_proto(coins: Iterable, field_name: str, positive: bool = True) -> dict[str, int]:
    """Validate repeated ``cosmos.base.v1beta1.Coin`` into ``{denom: amount}``; ``positive``
    (an amount moved, as the SDK's ``IsAllPositive``) refuses a zero coin and requires one
    coin at least, else zero amounts are dropped (a fee of 0). A denom given twice is refused
    either way: thousands of zero coins were a way to make CheckTx slow for nothing."""
    result: dict[str, int] = {}
    seen: set[str] = set()
    for coin in coins:
        amount = parse_uint(coin.amount)
        if amount is None or not DENOM_RULE.match(coin.denom) or coin.denom in seen:
            raise TxError(codes.INVALID_COINS, f"{field_name}: invalid coins")
        if positive and not amount:
            raise TxError(codes.INVALID_COINS, f"{field_name}: 0{coin.denom} is not positive")
        seen.add(coin.denom)
        if amount:
            result[coin.denom] = amount
    if positive and not result:
        raise TxError(codes.INVALID_COINS, f"{field_name}: must be positive")
    return result


def _handle_send(ctx: Context, msg: MsgSend) -> MsgSendResponse:
    require_address(msg.to_address, "to_address")
    send(ctx, msg.from_address, msg.to_address, coins_from_proto(msg.amount, "amount"))
    return MsgSendResponse()


MSGS = [MsgSpec(MsgSend, "from_address", _handle_send)]

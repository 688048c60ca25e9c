"""Accounts: numbers, sequences and public keys (x/auth's BaseAccount)."""

from __future__ import annotations

from cosmpy.protos.cosmos.auth.v1beta1.auth_pb2 import BaseAccount

from dilochain.chain.context import get_int, set_int
from dilochain.chain.state import CacheStore

_NEXT_NUMBER = b"auth/next_account_number"


def _key(address: str) -> bytes:
    return b"acc/" + address.encode()


def get_account(store: CacheStore, address: str) -> BaseAccount | None:
    """The account at ``address``, if it exists."""
    raw = store.get(_key(address))
    return BaseAccount.FromString(raw) if raw is not None else None


def set_account(store: CacheStore, account: BaseAccount) -> None:
    """Store an account."""
    store.set(_key(account.address), account.SerializeToString())


def ensure_account(store: CacheStore, address: str) -> BaseAccount:
    """The account at ``address``, created with the next account number if new."""
    account = get_account(store, address)
    if account is None:
        number = get_int(store, _NEXT_NUMBER)
        set_int(store, _NEXT_NUMBER, number + 1)
        account = BaseAccount(address=address, account_number=number, sequence=0)
        set_account(store, account)
    return account

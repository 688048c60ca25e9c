"""Coin amounts written the Cosmos way: ``1000udlc`` or ``5udlc,7stake``: ASCII digits, at most
2^256 - 1, and no denom "e" + digit (``1e30udlc`` would be 1 of ``e30udlc``)."""

from __future__ import annotations

import re

# ASCII digits only (``\d`` would take any script's digits, which ``int`` then reads).
_COIN = re.compile(r"^([0-9]+)([a-zA-Z][a-zA-Z0-9/:._-]{2,127})\Z")
_EXPONENT = re.compile(r"^[eE][0-9]")  # "1e30udlc" is 1 of "e30udlc", never 10^30 udlc
MAX_AMOUNT = 2**256 - 1  # the SDK's Int bound
# Display units people write for a base denom ("10DLC" meant 10,000,000 udlc, not a denom
# "DLC" of its own nobody can use): the base denom and its power of ten.
_DISPLAY = {"dlc": ("udlc", 6)}


def parse_coins(text: str) -> dict[str, int]:
    """Parse ``"1000udlc,5stake"`` into ``{"udlc": 1000, "stake": 5}``; raises ``ValueError``."""
    coins: dict[str, int] = {}
    for part in text.split(","):
        match = _COIN.match(part.strip())
        if not match:
            raise ValueError(f"invalid coin {part.strip()!r} (expected an amount like 1000udlc)")
        amount, denom = int(match.group(1)), match.group(2)
        if denom.lower() in _DISPLAY:
            base, exponent = _DISPLAY[denom.lower()]
            raise ValueError(f"{denom} is a display unit: write the amount in {base} "
                             f"({amount}{denom} is {amount * 10**exponent}{base})")  # fmt: skip
        if _EXPONENT.match(denom):
            raise ValueError(f"invalid coin {part.strip()!r}: write the amount in base units "
                             "and digits, without an exponent (e.g. 1000000udlc)")  # fmt: skip
        if amount > MAX_AMOUNT:
            raise ValueError(f"invalid coin {part.strip()[:40]!r}: amount above 2^256 - 1")
        if denom in coins:
            raise ValueError(f"denom {denom!r} appears twice in {text!r}")
        coins[denom] = amount
    return coins


def format_coins(coins: dict[str, int]) -> str:
    """Inverse of :func:`parse_coins`, denoms sorted."""
    return ",".join(f"{amount}{denom}" for denom, amount in sorted(coins.items()))

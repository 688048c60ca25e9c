"""Coin amounts written the Cosmos way: ``1000udlc`` or ``5udlc,7stake``."""

from __future__ import annotations

import re

_COIN = re.compile(r"^(\d+)([a-zA-Z][a-zA-Z0-9/:._-]{2,127})$")


def parse_coins(text: str) -> dict[str, int]:
    """Parse ``"1000udlc,5stake"`` into ``{"udlc": 1000, "stake": 5}``; raises ``ValueError``."""
    coins: dict[str, int] = {}
    for part in text.split(","):
        match = _COIN.match(part.strip())
        if not match:
            raise ValueError(f"invalid coin {part.strip()!r} (expected an amount like 1000udlc)")
        amount, denom = int(match.group(1)), match.group(2)
        if denom in coins:
            raise ValueError(f"denom {denom!r} appears twice in {text!r}")
        coins[denom] = amount
    return coins


def format_coins(coins: dict[str, int]) -> str:
    """Inverse of :func:`parse_coins`, denoms sorted."""
    return ",".join(f"{amount}{denom}" for denom, amount in sorted(coins.items()))

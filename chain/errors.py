"""ABCI result codes (the Cosmos SDK's ``sdk`` codespace numbers) and the error carrying them."""

from __future__ import annotations

from types import SimpleNamespace

codes = SimpleNamespace(
    OK=0,
    INTERNAL=1,
    TX_DECODE=2,
    UNAUTHORIZED=4,
    INSUFFICIENT_FUNDS=5,
    UNKNOWN_REQUEST=6,
    INVALID_ADDRESS=7,
    INVALID_PUBKEY=8,
    UNKNOWN_ADDRESS=9,
    INVALID_COINS=10,
    OUT_OF_GAS=11,
    MEMO_TOO_LARGE=12,
    INSUFFICIENT_FEE=13,
    TOO_MANY_SIGNATURES=14,
    NO_SIGNATURES=15,
    INVALID_REQUEST=18,
    TX_IN_MEMPOOL=19,
    MEMPOOL_FULL=20,
    TX_TOO_LARGE=21,
    INVALID_GAS_LIMIT=25,
    TX_TIMEOUT_HEIGHT=30,
    WRONG_SEQUENCE=32,
    CONFLICT=36,
    NOT_FOUND=38,
)

CODESPACE = "sdk"


class TxError(Exception):
    """A tx (or one of its messages) is rejected with an ABCI code and a log line."""

    def __init__(self, code: int, log: str):
        super().__init__(log)
        self.code = code
        self.log = log

"""The genesis document, validated with pydantic: a bad field is refused with its name."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chain.address import decode_address

DENOM = "udlc"
_CHAIN_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,47}$")
_DENOM = re.compile(r"^[a-zA-Z][a-zA-Z0-9/:._-]{2,127}$")


class GenesisError(ValueError):
    """A genesis document that cannot be used; the message names the file and the field."""


def _valid_address(value: str) -> str:
    decode_address(value)
    return value


def _valid_denom(value: str) -> str:
    if not _DENOM.match(value):
        raise ValueError(f"invalid denom {value!r}")
    return value


Address = Annotated[str, AfterValidator(_valid_address)]
Denom = Annotated[str, AfterValidator(_valid_denom)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Coin(_Strict):
    """An amount of one denom."""

    denom: Denom
    amount: int = Field(ge=0)


class AuthParams(_Strict):
    """Tx size, memo and signature-cost limits (names as in x/auth)."""

    max_memo_characters: int = Field(default=256, ge=0)
    tx_size_cost_per_byte: int = Field(default=10, ge=0)
    sig_verify_cost_secp256k1: int = Field(default=1000, ge=0)
    max_tx_bytes: int = Field(default=1 << 20, gt=0)


class FeeParams(_Strict):
    """Fees are paid in ``fee_denom`` at no less than ``min_gas_price`` per unit of gas."""

    fee_denom: Denom = DENOM
    min_gas_price: Decimal = Field(default=Decimal("0.025"), ge=0)


class ConsensusParams(_Strict):
    """Block limits of the devnet consensus (as CometBFT's ``block`` params)."""

    max_block_bytes: int = Field(default=22_020_096, gt=0)
    max_block_gas: int = Field(default=-1, ge=-1)
    max_mempool_txs: int = Field(default=100_000, gt=0)


class PocParams(_Strict):
    """Collateral, challenge, verdict and slashing parameters of the poc module."""

    collateral_denom: Denom = DENOM
    unbonding_period_seconds: int = Field(default=60, ge=0)
    # With 3 verifiers a challenge, 1.5% keeps verifier compute near 5% of training and catches
    # a host faking 10% of 5,000 segments with >99.9% probability (bench/verification.py).
    sampling_rate: Decimal = Field(default=Decimal("0.015"), ge=0, le=1)
    reveal_window_blocks: int = Field(default=5, ge=1)
    verdict_window_blocks: int = Field(default=10, ge=1)
    verifiers_per_challenge: int = Field(default=3, ge=1)
    quorum: int = Field(default=2, ge=1)
    slash_fraction: Decimal = Field(default=Decimal("0.3"), ge=0, le=1)
    verifier_slash_fraction: Decimal = Field(default=Decimal("0.05"), ge=0, le=1)
    min_verifier_collateral: int = Field(default=1_000_000, ge=0)
    verification_mode: Literal["exact", "tolerance"] = "exact"
    # Relative L2 distance allowed between a replayed and a revealed checkpoint (tolerance mode);
    # bench/verification.py measures honest replay noise, this sits well above it.
    tolerance: Decimal = Field(default=Decimal("1e-4"), gt=0)
    # Relative L2 distance allowed between the committed (quantised, error-fed-back)
    # pseudo-gradient and base - final checkpoint.
    pseudo_grad_tolerance: Decimal = Field(default=Decimal("0.1"), gt=0)

    @model_validator(mode="after")
    def _quorum_reachable(self) -> PocParams:
        if self.quorum > self.verifiers_per_challenge:
            raise ValueError("quorum cannot exceed verifiers_per_challenge")
        return self


class RewardParams(_Strict):
    """Epochs and their reward pools."""

    epoch_blocks: int = Field(default=600, ge=1)
    reward_per_epoch: int = Field(default=1_000_000_000, ge=0)  # udlc minted per epoch
    verifier_share: Decimal = Field(default=Decimal("0.1"), ge=0, le=1)


class Params(_Strict):
    """All module parameters."""

    auth: AuthParams = AuthParams()
    fees: FeeParams = FeeParams()
    consensus: ConsensusParams = ConsensusParams()
    poc: PocParams = PocParams()
    rewards: RewardParams = RewardParams()


class GenesisAccount(_Strict):
    """An account funded at genesis."""

    address: Address
    coins: list[Coin] = []

    @field_validator("coins")
    @classmethod
    def _unique_denoms(cls, coins: list[Coin]) -> list[Coin]:
        denoms = [c.denom for c in coins]
        if len(denoms) != len(set(denoms)):
            raise ValueError("a denom appears twice")
        return sorted(coins, key=lambda c: c.denom)


class GenesisDoc(_Strict):
    """The whole genesis document of a dilochain network."""

    chain_id: str
    genesis_time: datetime = Field(default_factory=lambda: datetime.now(UTC))
    initial_height: int = Field(default=1, ge=1)
    params: Params = Params()
    accounts: list[GenesisAccount] = []

    @field_validator("chain_id")
    @classmethod
    def _valid_chain_id(cls, value: str) -> str:
        if not _CHAIN_ID.match(value):
            raise ValueError(f"invalid chain id {value!r} (letters, digits, '-', '_', '.')")
        return value

    @model_validator(mode="after")
    def _unique_accounts(self) -> GenesisDoc:
        addresses = [a.address for a in self.accounts]
        if len(addresses) != len(set(addresses)):
            raise ValueError("accounts: an address appears twice")
        return self

    def with_account(self, address: str, coins: dict[str, int]) -> GenesisDoc:
        """A copy with ``coins`` added to ``address`` (creating the account if new)."""
        accounts = {a.address: {c.denom: c.amount for c in a.coins} for a in self.accounts}
        merged = accounts.setdefault(address, {})
        for denom, amount in coins.items():
            merged[denom] = merged.get(denom, 0) + amount
        data = self.model_dump(mode="json")
        data["accounts"] = [
            {"address": addr, "coins": [{"denom": d, "amount": n} for d, n in held.items()]}
            for addr, held in accounts.items()
        ]
        return parse_genesis(data, "genesis")


def _describe(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(document)"
    message = first["msg"].removeprefix("Value error, ")
    return f"{source}: field {field}: {message}"


def parse_genesis(data: object, source: str = "genesis") -> GenesisDoc:
    """Validate a decoded genesis document; raises :class:`GenesisError` naming the bad field."""
    try:
        return GenesisDoc.model_validate(data)
    except ValidationError as err:
        raise GenesisError(_describe(err, source)) from None


def load_genesis(path: Path) -> GenesisDoc:
    """Read and validate a genesis JSON file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GenesisError(f"{path}: no such genesis file") from None
    except json.JSONDecodeError as err:
        raise GenesisError(f"{path}: not valid JSON ({err})") from None
    return parse_genesis(data, str(path))


def save_genesis(doc: GenesisDoc, path: Path) -> None:
    """Write a genesis document as indented JSON (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc.model_dump(mode="json"), indent=2) + "\n")
    tmp.replace(path)

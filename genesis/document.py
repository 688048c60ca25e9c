"""The genesis document, validated with pydantic: a bad field is refused with its name.

The file is CometBFT's own ``genesis.json`` (chain id, time, initial height, consensus params,
validators), with the application's params and funded accounts under ``app_state``; CometBFT
hands ``app_state`` to the application in InitChain. 64-bit integers are JSON strings, as
CometBFT writes them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from dilochain.genesis.coins import MAX_AMOUNT
from dilochain.protocol.address import decode_address
from dilochain.protocol.params import MAX_VALIDATOR_POWER, Denom, Int64, Params, StrictModel

_CHAIN_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,47}\Z")


class GenesisError(ValueError):
    """A genesis document that cannot be used; the message names the file and the field."""


def _valid_address(value: str) -> str:
    decode_address(value)
    return value


Address = Annotated[str, AfterValidator(_valid_address)]


class Coin(StrictModel):
    """An amount of one denom."""

    denom: Denom
    amount: int = Field(ge=0, le=MAX_AMOUNT)  # the SDK's Int bound, however it was summed


class BlockParams(StrictModel):
    """Block limits (CometBFT's ``consensus_params.block``)."""

    max_bytes: Int64 = Field(default=22_020_096, gt=0)
    max_gas: Int64 = Field(default=-1, ge=-1)


class EvidenceParams(StrictModel):
    """How old evidence of misbehaviour may be (CometBFT's defaults)."""

    max_age_num_blocks: Int64 = Field(default=100_000, gt=0)
    max_age_duration: Int64 = Field(default=172_800_000_000_000, gt=0)  # 48 h in ns
    max_bytes: Int64 = Field(default=1_048_576, ge=0)


class ValidatorParams(StrictModel):
    """Key types validators may use."""

    pub_key_types: list[Literal["ed25519"]] = ["ed25519"]


class VersionParams(StrictModel):
    """The application's protocol version."""

    app: Int64 = 0


class AbciParams(StrictModel):
    """Vote extensions stay off (0)."""

    vote_extensions_enable_height: Int64 = 0


class ConsensusParams(StrictModel):
    """CometBFT's consensus params, written into genesis so that CometBFT and the app agree."""

    block: BlockParams = BlockParams()
    evidence: EvidenceParams = EvidenceParams()
    validator: ValidatorParams = ValidatorParams()
    version: VersionParams = VersionParams()
    abci: AbciParams = AbciParams()


class GenesisAccount(StrictModel):
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


class PubKey(StrictModel):
    """A validator's ed25519 consensus key, as CometBFT's JSON writes it."""

    type: Literal["tendermint/PubKeyEd25519"] = "tendermint/PubKeyEd25519"
    value: str

    @field_validator("value")
    @classmethod
    def _ed25519(cls, value: str) -> str:
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            raise ValueError("not base64") from None
        if len(raw) != 32:
            raise ValueError("an ed25519 public key is 32 bytes")
        return value

    def address(self) -> str:
        """CometBFT's validator address: sha256(key)[:20] in upper-case hex."""
        return hashlib.sha256(base64.b64decode(self.value)).digest()[:20].hex().upper()


class GenesisValidator(StrictModel):
    """A validator of the genesis set."""

    address: str
    pub_key: PubKey
    power: Int64 = Field(gt=0, le=MAX_VALIDATOR_POWER)
    name: str = ""
    # The account behind it: its self-bond is that account's collateral (slashed for downtime
    # and double-signing), and it may unjail, leave and rejoin.
    operator: str = ""
    # udlc of collateral created bonded for the operator at genesis and reserved as the
    # validator's stake: power = self_bond / power_reduction. 0 for every validator: a closed
    # set (a development network's), fixed at genesis.
    self_bond: int = Field(default=0, ge=0)

    @field_validator("operator")
    @classmethod
    def _operator_address(cls, value: str) -> str:
        return _valid_address(value) if value else value

    @model_validator(mode="after")
    def _address_matches_key(self) -> GenesisValidator:
        if self.address != self.pub_key.address():
            raise ValueError(f"address {self.address} is not that of its pub_key")
        if self.self_bond and not self.operator:
            raise ValueError("a validator with a self_bond needs its operator")
        return self


class AppState(StrictModel):
    """What the application itself reads from genesis (CometBFT's ``app_state``)."""

    params: Params = Params()
    accounts: list[GenesisAccount] = []

    @model_validator(mode="after")
    def _unique_accounts(self) -> AppState:
        addresses = [a.address for a in self.accounts]
        if len(addresses) != len(set(addresses)):
            raise ValueError("accounts: an address appears twice")
        return self


class GenesisDoc(StrictModel):
    """The whole genesis document of a dilochain network, in CometBFT's layout."""

    genesis_time: datetime = Field(default_factory=lambda: datetime.now(UTC))
    chain_id: str
    initial_height: Int64 = Field(default=1, ge=1)
    consensus_params: ConsensusParams = ConsensusParams()
    validators: list[GenesisValidator] = []
    app_hash: str = ""
    app_state: AppState = AppState()

    @field_validator("chain_id")
    @classmethod
    def _valid_chain_id(cls, value: str) -> str:
        if not _CHAIN_ID.match(value):
            raise ValueError(f"invalid chain id {value!r} (letters, digits, '-', '_', '.')")
        return value

    @model_validator(mode="after")
    def _unique_validators(self) -> GenesisDoc:
        keys = [v.pub_key.value for v in self.validators]
        if len(keys) != len(set(keys)):
            raise ValueError("validators: a key appears twice")
        operators = [v.operator for v in self.validators if v.operator]
        if len(operators) != len(set(operators)):
            raise ValueError("validators: an operator appears twice")
        return self

    @model_validator(mode="after")
    def _stakes_make_the_powers(self) -> GenesisDoc:
        staked = [v for v in self.validators if v.self_bond]
        if staked and len(staked) != len(self.validators):
            raise ValueError("validators: every one has a self_bond (an open validator set) or "
                             "none has (a closed one)")  # fmt: skip
        params = self.app_state.params.validator_set
        for v in staked:
            if v.power != v.self_bond // params.power_reduction:
                raise ValueError(f"validators: {v.name or v.address}'s power must be its "
                                 f"self_bond / power_reduction = "
                                 f"{v.self_bond // params.power_reduction}")  # fmt: skip
            if v.self_bond < params.min_self_bond:
                raise ValueError(f"validators: {v.name or v.address}'s self_bond is below "
                                 f"min_self_bond ({params.min_self_bond})")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _stake_outlasts_evidence(self) -> GenesisDoc:
        kept, evidence = self.app_state.params.validator_set, self.consensus_params.evidence
        if kept.release_blocks < evidence.max_age_num_blocks:
            raise ValueError("app_state.params.validator_set.release_blocks must be at least "
                             "consensus_params.evidence.max_age_num_blocks: else a validator "
                             "that double-signed could leave with its stake before the "
                             "evidence lands")  # fmt: skip
        if kept.release_seconds * 1_000_000_000 < evidence.max_age_duration:
            raise ValueError(
                "app_state.params.validator_set.release_seconds must be at least "
                "consensus_params.evidence.max_age_duration (in seconds)"
            )
        return self

    @property
    def params(self) -> Params:
        """The application's module params."""
        return self.app_state.params

    @property
    def accounts(self) -> list[GenesisAccount]:
        """Accounts funded at genesis."""
        return self.app_state.accounts

    def with_validators(self, validators: list[GenesisValidator]) -> GenesisDoc:
        """A copy whose validator set is ``validators``."""
        data = self.model_dump(mode="json")
        data["validators"] = [v.model_dump(mode="json") for v in validators]
        return parse_genesis(data, "genesis")

    def with_account(self, address: str, coins: dict[str, int]) -> GenesisDoc:
        """A copy with ``coins`` added to ``address`` (creating the account if new)."""
        accounts = {a.address: {c.denom: c.amount for c in a.coins} for a in self.accounts}
        merged = accounts.setdefault(address, {})
        for denom, amount in coins.items():
            merged[denom] = merged.get(denom, 0) + amount
        data = self.model_dump(mode="json")
        data["app_state"]["accounts"] = [
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

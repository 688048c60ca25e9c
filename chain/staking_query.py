"""The validator set as ``cosmos.staking.v1beta1`` shows it, for wallets and explorers (Keplr,
cosmjs' staking extension, block explorers' validator pages): each validator with its operator
address (``dilovaloper…``), consensus key, status, tokens (its self-bond; a closed genesis set's
power in the same units) and moniker; an operator's self-bond as its one delegation.

There is no delegation by others and no commission: shares equal tokens, rates are zero.
"""

from __future__ import annotations

from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.crypto.ed25519.keys_pb2 import PubKey
from cosmpy.protos.cosmos.staking.v1beta1 import staking_pb2 as s
from google.protobuf.duration_pb2 import Duration

from dilochain.chain.modules import validator_set as vs
from dilochain.protocol.address import ADDRESS_PREFIX, decode_address, encode_address
from dilochain.protocol.pb.poc.v1.types_pb2 import ChainValidator

VALOPER_PREFIX = ADDRESS_PREFIX + "valoper"
_DEC = 10**18  # the SDK's LegacyDec travels as its integer times 10^18


def operator_address(record: ChainValidator) -> str:
    """``dilovaloper…`` of the operator's account (of the consensus address when it has none)."""
    raw = decode_address(record.operator) if record.operator else bytes.fromhex(
        record.consensus_address)  # fmt: skip
    return encode_address(raw, VALOPER_PREFIX)


def of_operator_address(store, address: str) -> ChainValidator | None:
    """The validator whose ``dilovaloper…`` address is ``address``, in two reads: its
    operator's (the ``valop/`` index) or, a closed set's member without one, its consensus
    address's."""
    try:
        raw = decode_address(address, VALOPER_PREFIX)
    except ValueError:
        return None
    record = vs.of_operator(store, encode_address(raw)) or vs.get(store, raw.hex().upper())
    return record if record is not None and operator_address(record) == address else None


def pool_tokens(store, power_reduction: int) -> tuple[int, int]:
    """The tokens of the validators CometBFT counts and of the rest, from the set's pool."""
    unit = power_reduction if vs.closed(store) else 1  # a closed set's stake is its power
    bonded, rest = vs.pool(store)
    return bonded * unit, rest * unit


def tokens(record: ChainValidator, power_reduction: int) -> int:
    """Its stake: the self-bond, or a closed genesis set's power in udlc."""
    return int(record.self_bond or 0) or record.genesis_power * power_reduction


def bond_status(record: ChainValidator) -> int:
    """BONDED while CometBFT counts it, UNBONDING while its bond waits for release, else
    UNBONDED."""
    if record.power:
        return s.BOND_STATUS_BONDED
    if record.status in (vs.LEAVING, vs.TOMBSTONED, vs.JAILED) and tokens(record, 1):
        return s.BOND_STATUS_UNBONDING
    return s.BOND_STATUS_UNBONDED


def to_staking(record: ChainValidator, power_reduction: int) -> s.Validator:
    """A validator as ``cosmos.staking.v1beta1.Validator``."""
    held = tokens(record, power_reduction)
    rates = s.CommissionRates(rate="0", max_rate="0", max_change_rate="0")
    validator = s.Validator(
        operator_address=operator_address(record),
        jailed=record.status in (vs.JAILED, vs.TOMBSTONED),
        status=bond_status(record),
        tokens=str(held),
        delegator_shares=str(held * _DEC),
        description=s.Description(moniker=record.moniker),
        unbonding_height=record.release_height,
        min_self_delegation="1",
        commission=s.Commission(commission_rates=rates),
    )
    validator.consensus_pubkey.Pack(PubKey(key=record.pub_key), type_url_prefix="/")
    return validator


def self_delegation(record: ChainValidator, denom: str) -> s.DelegationResponse:
    """An operator's self-bond as its delegation to its own validator."""
    bond = int(record.self_bond or 0)
    return s.DelegationResponse(
        delegation=s.Delegation(delegator_address=record.operator,
                                validator_address=operator_address(record),
                                shares=str(bond * _DEC)),
        balance=Coin(denom=denom, amount=str(bond)),
    )  # fmt: skip


def staking_params(params) -> s.Params:
    """The chain's validator-set params in x/staking's terms."""
    kept = params.validator_set
    return s.Params(
        unbonding_time=Duration(seconds=kept.release_seconds), max_validators=kept.max_validators,
        max_entries=1, historical_entries=0, bond_denom=params.poc.collateral_denom,
        min_commission_rate="0",
    )  # fmt: skip

"""The chain's module parameters, as genesis fixes them (validated with pydantic)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, model_validator

DENOM = "udlc"
DENOM_RULE = re.compile(r"^[a-zA-Z][a-zA-Z0-9/:._-]{2,127}\Z")


def valid_denom(value: str) -> str:
    """``value`` if it is a denom (the Cosmos SDK's rule); a ValueError quoting it cut short if
    not."""
    if not DENOM_RULE.match(value):
        raise ValueError(f"invalid denom {value[:128]!r}")
    return value


Denom = Annotated[str, AfterValidator(valid_denom)]
# CometBFT's JSON writes int64 values as strings; numbers are accepted on input.
Int64 = Annotated[int, PlainSerializer(str, return_type=str, when_used="json")]


class StrictModel(BaseModel):
    """Frozen, and an unknown field is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AuthParams(StrictModel):
    """Tx size, memo and signature-cost limits (names as in x/auth)."""

    max_memo_characters: int = Field(default=256, ge=0)
    tx_size_cost_per_byte: int = Field(default=10, ge=0)
    sig_verify_cost_secp256k1: int = Field(default=1000, ge=0)
    max_tx_bytes: int = Field(default=1 << 20, gt=0)
    # Bounds the work one tx (or one unsigned Simulate) can ask for.
    max_msgs_per_tx: int = Field(default=64, ge=1)
    # The most gas one Simulate may spend (it is unsigned and free: the SDK's query gas limit).
    simulate_gas_limit: int = Field(default=50_000_000, gt=0)


class FeeParams(StrictModel):
    """Fees are paid in ``fee_denom`` at no less than ``min_gas_price`` per unit of gas."""

    fee_denom: Denom = DENOM
    min_gas_price: Decimal = Field(default=Decimal("0.025"), ge=0)


class PocParams(StrictModel):
    """Collateral, challenge, verdict and slashing parameters of the poc module."""

    collateral_denom: Denom = DENOM
    unbonding_period_seconds: int = Field(default=60, ge=0)
    # With 3 verifiers a challenge, 1.5% keeps verifier compute near 5% of training and catches
    # a host faking 10% of 5,000 segments with >99.9% probability (bench/verification.py).
    sampling_rate: Decimal = Field(default=Decimal("0.015"), ge=0, le=1)
    # Blocks after a commit window in which verifiers open their beacon secrets and screen
    # every commit; the last one is the selection block.
    beacon_reveal_blocks: int = Field(default=4, ge=2)
    reveal_window_blocks: int = Field(default=5, ge=1)
    verdict_window_blocks: int = Field(default=10, ge=1)
    # After the verdict window: blocks in which assigned verifiers open their sealed votes
    # (the last one is the resolution block). A vote left unopened is slashed.
    verdict_open_blocks: int = Field(default=5, ge=2)
    verifiers_per_challenge: int = Field(default=3, ge=1)
    # Each commit is screened by this many verifiers drawn from the beacon anchor (0: by every
    # verifier), so screening grows with hosts, not hosts x verifiers (protocol/committee.py).
    screeners_per_commit: int = Field(default=7, ge=0)
    # At least 2: a vote counts only where another verifier's replay corroborates it.
    quorum: int = Field(default=2, ge=2)
    slash_fraction: Decimal = Field(default=Decimal("0.3"), ge=0, le=1)
    verifier_slash_fraction: Decimal = Field(default=Decimal("0.05"), ge=0, le=1)
    # Withholding a committed beacon secret re-rolls the round's seed; a re-roll can save a
    # cheating host at most its slash, so it costs the withholder at least that: runs may ask
    # hosts for no more than beacon_withhold_slash_fraction x min_verifier_collateral /
    # slash_fraction (checked in MsgCreateRun).
    beacon_withhold_slash_fraction: Decimal = Field(default=Decimal("0.3"), ge=0, le=1)
    min_verifier_collateral: int = Field(default=10_000_000, ge=0)
    # A run may not ask its hosts for less collateral: a failed commit costs its host
    # slash_fraction of it, while the replays it forces cost verifiers whatever the run's size
    # (a run's creator could otherwise register hosts bonded 1 udlc, slashed 0 for garbage).
    min_host_collateral: int = Field(default=1_000_000, ge=0)
    verification_mode: Literal["exact", "tolerance"] = "exact"
    # Relative L2 distance allowed between a replayed and a revealed checkpoint (tolerance mode)
    # of an fp32 run; bench/replay_tolerance.py measures honest noise and cheats around it.
    tolerance: Decimal = Field(default=Decimal("1e-4"), gt=0)
    # The same for runs in bf16 (autocast rounds at 2^-8: kernels that sum in another order,
    # compiled or on other hardware, land ~1e-3 apart). docs/DESIGN.md has the measurements.
    tolerance_bf16: Decimal = Field(default=Decimal("2e-3"), gt=0)
    # Relative L2 distance allowed between the committed pseudo-gradient and the run's
    # compression of base - final checkpoint + the residual the host's last round left, as a
    # verifier recomputes it: the same bits on one machine; on another, choosing DCT
    # coefficients in float64 may break a near tie differently (a few coefficients of many).
    pseudo_grad_tolerance: Decimal = Field(default=Decimal("1e-3"), gt=0)
    # Screening: applying a commit's pseudo-gradient alone to the round's base may raise the
    # held-out loss by at most this fraction, or a verifier votes its screen failed (an honest
    # tiny-model round lowers it by ~3%; a gradient-ascent one raises it). A failed screen only
    # costs a full replay of the commit, so the margin can be tight.
    screen_loss_margin: Decimal = Field(default=Decimal("0.02"), ge=0)

    # Bounds on what MsgCreateRun may ask of the chain: every segment of every commit can be
    # challenged in one selection block, so the work per block stays bounded.
    max_segments_per_round: int = Field(default=64, ge=1)
    max_inner_steps: int = Field(default=100_000, ge=1)
    max_total_rounds: int = Field(default=100_000, ge=1)
    max_start_delay_blocks: int = Field(default=100_000, ge=0)
    # A run's model, estimated from its config's sizes, may not be larger: every host and
    # verifier builds it, so a run creator must not choose what that costs them.
    max_model_parameters: int = Field(default=10_000_000_000, ge=1)
    # Tokens in one inner step (batch_size x seq_len): what a step's activations cost every
    # host and every verifier replaying it, chosen by the run creator, so bounded here.
    max_step_tokens: int = Field(default=1 << 20, ge=1)
    # Creating a run escrows this plus so much per byte of its config from the creator,
    # refunded when the run ends: every host and verifier reads, stores and works on every
    # run, so a run costs its creator what it costs the network while it lasts.
    run_deposit: int = Field(default=1_000_000, ge=0)
    run_deposit_per_byte: int = Field(default=100, ge=0)
    # ... and so much per block of its life: a run holds one of max_active_runs slots for its
    # whole schedule, up to max_total_rounds x max_round_blocks (10^9 blocks), so holding the
    # slots for years must lock more than holding them for a day.
    run_deposit_per_block: int = Field(default=1, ge=0)
    # A run's commit window is at most this many blocks, so a commit stays slashable for at
    # most round_period(max_round_blocks) blocks: from its commit to its round's resolution.
    max_round_blocks: int = Field(default=10_000, ge=1)
    # Unbonding collateral is paid out only after unbonding_period_seconds *and* this many
    # blocks, at least the longest a commit stays slashable, so withdrawing right after a
    # commit never escapes its slash (a genesis rule, checked below).
    unbonding_blocks: int = Field(default=10_100, ge=0)
    # A round's outer step needs at least this many accepted pseudo-gradients; with fewer the
    # global state carries over unchanged (a round a straggler or an outage left thin).
    min_hosts_per_round: int = Field(default=1, ge=1)
    # Fail-closed: only a commit that a quorum of verifiers screened as passing, and whose
    # every challenge passed, enters the global state. False is for chains of trusted hosts
    # with no verifiers (and tests of training alone): every commit not failed is aggregated.
    fail_closed: bool = True
    # End-of-block work visits every active run: their number is bounded.
    max_active_runs: int = Field(default=1_000, ge=1)

    @model_validator(mode="after")
    def _quorum_reachable(self) -> PocParams:
        if self.quorum > self.verifiers_per_challenge:
            raise ValueError("quorum cannot exceed verifiers_per_challenge")
        if 0 < self.screeners_per_commit < self.quorum:
            raise ValueError("screeners_per_commit cannot be below the quorum (0: every verifier)")
        return self

    @model_validator(mode="after")
    def _unbonding_outlasts_a_round(self) -> PocParams:
        slashable = self.slashable_blocks
        if self.unbonding_blocks < slashable:
            raise ValueError(f"unbonding_blocks must be at least {slashable}, the longest a "
                             "commit stays slashable (max_round_blocks and a round's "
                             "verification windows): else withdrawing escapes a slash")  # fmt: skip
        return self

    @property
    def slashable_blocks(self) -> int:
        """The longest a commit stays slashable: the longest commit window, then its round's
        verification; the least ``unbonding_blocks`` may be."""
        return self.max_round_blocks + verification_blocks(self)


def verification_blocks(params) -> int:
    """Blocks from a round's commit window to its resolution: beacon, reveal, verdict and
    verdict-opening windows (of :class:`PocParams` or the chain's ``Params`` message)."""
    return (params.beacon_reveal_blocks + params.reveal_window_blocks
            + params.verdict_window_blocks + params.verdict_open_blocks)  # fmt: skip


class RewardParams(StrictModel):
    """Epochs and their reward pools."""

    epoch_blocks: int = Field(default=600, ge=1)
    reward_per_epoch: int = Field(default=1_000_000_000, ge=0)  # udlc minted per epoch
    verifier_share: Decimal = Field(default=Decimal("0.1"), ge=0, le=1)
    # A claimed epoch reward vests linearly over this many epochs after the epoch; a slash
    # forfeits what has not vested. 1: everything has vested once the epoch closes.
    vesting_epochs: int = Field(default=4, ge=1, le=10_000)


MAX_SCREEN_VOTES = 256  # votes one MsgSubmitScreen carries at most
MAX_VALIDATORS = 10_000  # CometBFT's MaxVotesCount
# CometBFT refuses a set whose total power exceeds MaxInt64 / 8 (and halts on such an update):
# no validator gets more than its share of that at the most validators there can be.
MAX_VALIDATOR_POWER = (2**63 - 1) // 8 // MAX_VALIDATORS
# Bounds that keep what the validator set derives from its params within int64 (its records'
# heights and times, CometBFT's int64 heights): a block count added to a height fits for
# heights below 9.2 x 10^18 - 10^12 (10^12 blocks: 31 years at a block a millisecond), and
# release_seconds in nanoseconds added to a block time fits until 2229 (10^9 s: 31 years).
MAX_PARAM_BLOCKS = 10**12
MAX_RELEASE_SECONDS = 10**9


class ValidatorSetParams(StrictModel):
    """The open validator set: how stake becomes voting power, and what downtime and
    double-signing cost (names and defaults as in x/staking and x/slashing)."""

    power_reduction: int = Field(default=1_000_000, ge=1)  # udlc of stake per unit of power
    min_self_bond: int = Field(default=100_000_000, ge=1)
    max_validators: int = Field(default=100, ge=1, le=MAX_VALIDATORS)
    # Downtime: a validator that signs less than min_signed_per_window of the last
    # signed_blocks_window blocks is jailed (and slashed) for downtime_jail_blocks.
    signed_blocks_window: int = Field(default=100, ge=1, le=MAX_PARAM_BLOCKS)
    min_signed_per_window: Decimal = Field(default=Decimal("0.5"), ge=0, le=1)
    downtime_jail_blocks: int = Field(default=600, ge=0, le=MAX_PARAM_BLOCKS)
    slash_fraction_downtime: Decimal = Field(default=Decimal("0.0001"), ge=0, le=1)
    slash_fraction_double_sign: Decimal = Field(default=Decimal("0.05"), ge=0, le=1)
    # A validator that leaves (or is tombstoned) keeps its stake reserved this long, so that
    # evidence of what it signed while in the set can still slash it (both must pass; at least
    # the consensus params' evidence max age, which the genesis checks).
    release_blocks: int = Field(default=100_000, ge=0, le=MAX_PARAM_BLOCKS)
    release_seconds: int = Field(default=172_800, ge=0, le=MAX_RELEASE_SECONDS)


class Params(StrictModel):
    """All module parameters."""

    auth: AuthParams = AuthParams()
    fees: FeeParams = FeeParams()
    poc: PocParams = PocParams()
    rewards: RewardParams = RewardParams()
    validator_set: ValidatorSetParams = ValidatorSetParams()

    @model_validator(mode="after")
    def _a_round_s_reveals_fit_a_tx(self) -> Params:
        if self.poc.max_segments_per_round > self.auth.max_msgs_per_tx:
            raise ValueError("poc.max_segments_per_round cannot exceed auth.max_msgs_per_tx: "
                             "a host reveals a round's challenged segments in one tx")  # fmt: skip
        return self

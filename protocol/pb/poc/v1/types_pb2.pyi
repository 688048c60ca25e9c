from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommitOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMMIT_OUTCOME_PENDING: _ClassVar[CommitOutcome]
    COMMIT_OUTCOME_ACCEPTED: _ClassVar[CommitOutcome]
    COMMIT_OUTCOME_PAID: _ClassVar[CommitOutcome]
    COMMIT_OUTCOME_UNDECIDED: _ClassVar[CommitOutcome]
    COMMIT_OUTCOME_FAILED: _ClassVar[CommitOutcome]

class ChallengeStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHALLENGE_STATUS_PENDING: _ClassVar[ChallengeStatus]
    CHALLENGE_STATUS_PASSED: _ClassVar[ChallengeStatus]
    CHALLENGE_STATUS_FAILED: _ClassVar[ChallengeStatus]
    CHALLENGE_STATUS_NOT_REVEALED: _ClassVar[ChallengeStatus]
    CHALLENGE_STATUS_UNDECIDED: _ClassVar[ChallengeStatus]

class ValidatorStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VALIDATOR_STATUS_UNSPECIFIED: _ClassVar[ValidatorStatus]
    VALIDATOR_STATUS_BONDED: _ClassVar[ValidatorStatus]
    VALIDATOR_STATUS_JAILED: _ClassVar[ValidatorStatus]
    VALIDATOR_STATUS_TOMBSTONED: _ClassVar[ValidatorStatus]
    VALIDATOR_STATUS_LEAVING: _ClassVar[ValidatorStatus]
COMMIT_OUTCOME_PENDING: CommitOutcome
COMMIT_OUTCOME_ACCEPTED: CommitOutcome
COMMIT_OUTCOME_PAID: CommitOutcome
COMMIT_OUTCOME_UNDECIDED: CommitOutcome
COMMIT_OUTCOME_FAILED: CommitOutcome
CHALLENGE_STATUS_PENDING: ChallengeStatus
CHALLENGE_STATUS_PASSED: ChallengeStatus
CHALLENGE_STATUS_FAILED: ChallengeStatus
CHALLENGE_STATUS_NOT_REVEALED: ChallengeStatus
CHALLENGE_STATUS_UNDECIDED: ChallengeStatus
VALIDATOR_STATUS_UNSPECIFIED: ValidatorStatus
VALIDATOR_STATUS_BONDED: ValidatorStatus
VALIDATOR_STATUS_JAILED: ValidatorStatus
VALIDATOR_STATUS_TOMBSTONED: ValidatorStatus
VALIDATOR_STATUS_LEAVING: ValidatorStatus

class RunConfig(_message.Message):
    __slots__ = ("min_collateral", "max_hosts", "seed", "round_blocks", "total_rounds", "model_config", "seq_len", "batch_size", "inner_steps", "checkpoint_interval", "inner_lr", "warmup_steps", "weight_decay", "grad_clip", "outer_lr", "outer_momentum", "compression", "tokenizer_hash", "data_manifest_hash", "precision", "start_delay_blocks", "overlap", "carry_inner_state")
    MIN_COLLATERAL_FIELD_NUMBER: _ClassVar[int]
    MAX_HOSTS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ROUND_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INNER_STEPS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    INNER_LR_FIELD_NUMBER: _ClassVar[int]
    WARMUP_STEPS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    GRAD_CLIP_FIELD_NUMBER: _ClassVar[int]
    OUTER_LR_FIELD_NUMBER: _ClassVar[int]
    OUTER_MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_HASH_FIELD_NUMBER: _ClassVar[int]
    DATA_MANIFEST_HASH_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CARRY_INNER_STATE_FIELD_NUMBER: _ClassVar[int]
    min_collateral: str
    max_hosts: int
    seed: int
    round_blocks: int
    total_rounds: int
    model_config: str
    seq_len: int
    batch_size: int
    inner_steps: int
    checkpoint_interval: int
    inner_lr: float
    warmup_steps: int
    weight_decay: float
    grad_clip: float
    outer_lr: float
    outer_momentum: float
    compression: str
    tokenizer_hash: str
    data_manifest_hash: str
    precision: str
    start_delay_blocks: int
    overlap: bool
    carry_inner_state: bool
    def __init__(self, min_collateral: _Optional[str] = ..., max_hosts: _Optional[int] = ..., seed: _Optional[int] = ..., round_blocks: _Optional[int] = ..., total_rounds: _Optional[int] = ..., model_config: _Optional[str] = ..., seq_len: _Optional[int] = ..., batch_size: _Optional[int] = ..., inner_steps: _Optional[int] = ..., checkpoint_interval: _Optional[int] = ..., inner_lr: _Optional[float] = ..., warmup_steps: _Optional[int] = ..., weight_decay: _Optional[float] = ..., grad_clip: _Optional[float] = ..., outer_lr: _Optional[float] = ..., outer_momentum: _Optional[float] = ..., compression: _Optional[str] = ..., tokenizer_hash: _Optional[str] = ..., data_manifest_hash: _Optional[str] = ..., precision: _Optional[str] = ..., start_delay_blocks: _Optional[int] = ..., overlap: bool = ..., carry_inner_state: bool = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "creator", "config", "created_height", "start_height", "deposit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    START_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    DEPOSIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    creator: str
    config: RunConfig
    created_height: int
    start_height: int
    deposit: str
    def __init__(self, run_id: _Optional[str] = ..., creator: _Optional[str] = ..., config: _Optional[_Union[RunConfig, _Mapping]] = ..., created_height: _Optional[int] = ..., start_height: _Optional[int] = ..., deposit: _Optional[str] = ...) -> None: ...

class RoundCommit(_message.Message):
    __slots__ = ("run_id", "round", "host", "ckpt_root", "pseudo_grad_hash", "data_seed", "tokens", "loss", "base_hash", "height", "excluded", "eval_loss", "final_hash", "residual_hash", "residual_in_hash", "start_delta_hash", "inner_in_hash", "outcome")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CKPT_ROOT_FIELD_NUMBER: _ClassVar[int]
    PSEUDO_GRAD_HASH_FIELD_NUMBER: _ClassVar[int]
    DATA_SEED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    BASE_HASH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_FIELD_NUMBER: _ClassVar[int]
    EVAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    FINAL_HASH_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_HASH_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_IN_HASH_FIELD_NUMBER: _ClassVar[int]
    START_DELTA_HASH_FIELD_NUMBER: _ClassVar[int]
    INNER_IN_HASH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    host: str
    ckpt_root: bytes
    pseudo_grad_hash: bytes
    data_seed: int
    tokens: int
    loss: float
    base_hash: bytes
    height: int
    excluded: bool
    eval_loss: float
    final_hash: bytes
    residual_hash: bytes
    residual_in_hash: bytes
    start_delta_hash: bytes
    inner_in_hash: bytes
    outcome: CommitOutcome
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., host: _Optional[str] = ..., ckpt_root: _Optional[bytes] = ..., pseudo_grad_hash: _Optional[bytes] = ..., data_seed: _Optional[int] = ..., tokens: _Optional[int] = ..., loss: _Optional[float] = ..., base_hash: _Optional[bytes] = ..., height: _Optional[int] = ..., excluded: bool = ..., eval_loss: _Optional[float] = ..., final_hash: _Optional[bytes] = ..., residual_hash: _Optional[bytes] = ..., residual_in_hash: _Optional[bytes] = ..., start_delta_hash: _Optional[bytes] = ..., inner_in_hash: _Optional[bytes] = ..., outcome: _Optional[_Union[CommitOutcome, str]] = ...) -> None: ...

class EpochInfo(_message.Message):
    __slots__ = ("epoch", "start_height", "end_height", "closed", "reward_pool", "host_work", "verifier_work")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    END_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    REWARD_POOL_FIELD_NUMBER: _ClassVar[int]
    HOST_WORK_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_WORK_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_height: int
    end_height: int
    closed: bool
    reward_pool: str
    host_work: str
    verifier_work: str
    def __init__(self, epoch: _Optional[int] = ..., start_height: _Optional[int] = ..., end_height: _Optional[int] = ..., closed: bool = ..., reward_pool: _Optional[str] = ..., host_work: _Optional[str] = ..., verifier_work: _Optional[str] = ...) -> None: ...

class Claimable(_message.Message):
    __slots__ = ("address", "epoch", "amount", "claimed", "host_work", "verifier_work", "forfeited")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_FIELD_NUMBER: _ClassVar[int]
    HOST_WORK_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_WORK_FIELD_NUMBER: _ClassVar[int]
    FORFEITED_FIELD_NUMBER: _ClassVar[int]
    address: str
    epoch: int
    amount: str
    claimed: bool
    host_work: str
    verifier_work: str
    forfeited: bool
    def __init__(self, address: _Optional[str] = ..., epoch: _Optional[int] = ..., amount: _Optional[str] = ..., claimed: bool = ..., host_work: _Optional[str] = ..., verifier_work: _Optional[str] = ..., forfeited: bool = ...) -> None: ...

class Vote(_message.Message):
    __slots__ = ("verifier", "passed", "evidence_hash", "inconsistent")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_HASH_FIELD_NUMBER: _ClassVar[int]
    INCONSISTENT_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    passed: bool
    evidence_hash: bytes
    inconsistent: bool
    def __init__(self, verifier: _Optional[str] = ..., passed: bool = ..., evidence_hash: _Optional[bytes] = ..., inconsistent: bool = ...) -> None: ...

class SealedVote(_message.Message):
    __slots__ = ("verifier", "commitment", "opened", "passed", "fingerprint", "evidence_hash", "counted")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    COMMITMENT_FIELD_NUMBER: _ClassVar[int]
    OPENED_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_HASH_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    commitment: bytes
    opened: bool
    passed: bool
    fingerprint: bytes
    evidence_hash: bytes
    counted: bool
    def __init__(self, verifier: _Optional[str] = ..., commitment: _Optional[bytes] = ..., opened: bool = ..., passed: bool = ..., fingerprint: _Optional[bytes] = ..., evidence_hash: _Optional[bytes] = ..., counted: bool = ...) -> None: ...

class Challenge(_message.Message):
    __slots__ = ("run_id", "round", "host", "segment", "verifiers", "revealed", "start_hash", "end_hash", "final_hash", "votes", "status", "primaries")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    VERIFIERS_FIELD_NUMBER: _ClassVar[int]
    REVEALED_FIELD_NUMBER: _ClassVar[int]
    START_HASH_FIELD_NUMBER: _ClassVar[int]
    END_HASH_FIELD_NUMBER: _ClassVar[int]
    FINAL_HASH_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRIMARIES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    host: str
    segment: int
    verifiers: _containers.RepeatedScalarFieldContainer[str]
    revealed: bool
    start_hash: bytes
    end_hash: bytes
    final_hash: bytes
    votes: _containers.RepeatedCompositeFieldContainer[SealedVote]
    status: ChallengeStatus
    primaries: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., host: _Optional[str] = ..., segment: _Optional[int] = ..., verifiers: _Optional[_Iterable[str]] = ..., revealed: bool = ..., start_hash: _Optional[bytes] = ..., end_hash: _Optional[bytes] = ..., final_hash: _Optional[bytes] = ..., votes: _Optional[_Iterable[_Union[SealedVote, _Mapping]]] = ..., status: _Optional[_Union[ChallengeStatus, str]] = ..., primaries: _Optional[int] = ...) -> None: ...

class Slash(_message.Message):
    __slots__ = ("address", "run_id", "round", "amount", "reason", "height")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    address: str
    run_id: str
    round: int
    amount: str
    reason: str
    height: int
    def __init__(self, address: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., amount: _Optional[str] = ..., reason: _Optional[str] = ..., height: _Optional[int] = ...) -> None: ...

class Verifier(_message.Message):
    __slots__ = ("address", "registered_height", "left_height", "release_height", "endpoint")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    LEFT_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    RELEASE_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    address: str
    registered_height: int
    left_height: int
    release_height: int
    endpoint: str
    def __init__(self, address: _Optional[str] = ..., registered_height: _Optional[int] = ..., left_height: _Optional[int] = ..., release_height: _Optional[int] = ..., endpoint: _Optional[str] = ...) -> None: ...

class ChainValidator(_message.Message):
    __slots__ = ("consensus_address", "pub_key", "operator", "moniker", "self_bond", "genesis_power", "status", "jailed_until", "joined_height", "signing_start", "missed_blocks", "power", "release_height", "release_time_ns")
    CONSENSUS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PUB_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    MONIKER_FIELD_NUMBER: _ClassVar[int]
    SELF_BOND_FIELD_NUMBER: _ClassVar[int]
    GENESIS_POWER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    JAILED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    JOINED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SIGNING_START_FIELD_NUMBER: _ClassVar[int]
    MISSED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    POWER_FIELD_NUMBER: _ClassVar[int]
    RELEASE_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    RELEASE_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    consensus_address: str
    pub_key: bytes
    operator: str
    moniker: str
    self_bond: str
    genesis_power: int
    status: ValidatorStatus
    jailed_until: int
    joined_height: int
    signing_start: int
    missed_blocks: int
    power: int
    release_height: int
    release_time_ns: int
    def __init__(self, consensus_address: _Optional[str] = ..., pub_key: _Optional[bytes] = ..., operator: _Optional[str] = ..., moniker: _Optional[str] = ..., self_bond: _Optional[str] = ..., genesis_power: _Optional[int] = ..., status: _Optional[_Union[ValidatorStatus, str]] = ..., jailed_until: _Optional[int] = ..., joined_height: _Optional[int] = ..., signing_start: _Optional[int] = ..., missed_blocks: _Optional[int] = ..., power: _Optional[int] = ..., release_height: _Optional[int] = ..., release_time_ns: _Optional[int] = ...) -> None: ...

class ValidatorSetParams(_message.Message):
    __slots__ = ("power_reduction", "min_self_bond", "max_validators", "signed_blocks_window", "min_signed_per_window", "downtime_jail_blocks", "slash_fraction_downtime", "slash_fraction_double_sign", "release_blocks", "release_seconds")
    POWER_REDUCTION_FIELD_NUMBER: _ClassVar[int]
    MIN_SELF_BOND_FIELD_NUMBER: _ClassVar[int]
    MAX_VALIDATORS_FIELD_NUMBER: _ClassVar[int]
    SIGNED_BLOCKS_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MIN_SIGNED_PER_WINDOW_FIELD_NUMBER: _ClassVar[int]
    DOWNTIME_JAIL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SLASH_FRACTION_DOWNTIME_FIELD_NUMBER: _ClassVar[int]
    SLASH_FRACTION_DOUBLE_SIGN_FIELD_NUMBER: _ClassVar[int]
    RELEASE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    power_reduction: int
    min_self_bond: int
    max_validators: int
    signed_blocks_window: int
    min_signed_per_window: str
    downtime_jail_blocks: int
    slash_fraction_downtime: str
    slash_fraction_double_sign: str
    release_blocks: int
    release_seconds: int
    def __init__(self, power_reduction: _Optional[int] = ..., min_self_bond: _Optional[int] = ..., max_validators: _Optional[int] = ..., signed_blocks_window: _Optional[int] = ..., min_signed_per_window: _Optional[str] = ..., downtime_jail_blocks: _Optional[int] = ..., slash_fraction_downtime: _Optional[str] = ..., slash_fraction_double_sign: _Optional[str] = ..., release_blocks: _Optional[int] = ..., release_seconds: _Optional[int] = ...) -> None: ...

class GlobalCheckpoint(_message.Message):
    __slots__ = ("run_id", "round", "hash", "commits", "agreeing")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    AGREEING_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    hash: bytes
    commits: int
    agreeing: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., hash: _Optional[bytes] = ..., commits: _Optional[int] = ..., agreeing: _Optional[int] = ...) -> None: ...

class Host(_message.Message):
    __slots__ = ("run_id", "address", "endpoint", "registered_height", "left_height")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    LEFT_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    address: str
    endpoint: str
    registered_height: int
    left_height: int
    def __init__(self, run_id: _Optional[str] = ..., address: _Optional[str] = ..., endpoint: _Optional[str] = ..., registered_height: _Optional[int] = ..., left_height: _Optional[int] = ...) -> None: ...

class Roster(_message.Message):
    __slots__ = ("hosts", "drawn_height")
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    DRAWN_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    drawn_height: int
    def __init__(self, hosts: _Optional[_Iterable[str]] = ..., drawn_height: _Optional[int] = ...) -> None: ...

class UnbondingEntry(_message.Message):
    __slots__ = ("amount", "completion_time_unix", "completion_height")
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TIME_UNIX_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    amount: str
    completion_time_unix: int
    completion_height: int
    def __init__(self, amount: _Optional[str] = ..., completion_time_unix: _Optional[int] = ..., completion_height: _Optional[int] = ...) -> None: ...

class CollateralInfo(_message.Message):
    __slots__ = ("address", "bonded", "unbonding", "locked")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BONDED_FIELD_NUMBER: _ClassVar[int]
    UNBONDING_FIELD_NUMBER: _ClassVar[int]
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    address: str
    bonded: str
    unbonding: _containers.RepeatedCompositeFieldContainer[UnbondingEntry]
    locked: str
    def __init__(self, address: _Optional[str] = ..., bonded: _Optional[str] = ..., unbonding: _Optional[_Iterable[_Union[UnbondingEntry, _Mapping]]] = ..., locked: _Optional[str] = ...) -> None: ...

class Params(_message.Message):
    __slots__ = ("collateral_denom", "unbonding_period_seconds", "sampling_rate", "reveal_window_blocks", "verdict_window_blocks", "verifiers_per_challenge", "quorum", "slash_fraction", "verifier_slash_fraction", "min_verifier_collateral", "verification_mode", "tolerance", "pseudo_grad_tolerance", "max_segments_per_round", "max_inner_steps", "max_total_rounds", "max_start_delay_blocks", "max_active_runs", "beacon_reveal_blocks", "screen_loss_margin", "verdict_open_blocks", "tolerance_bf16", "min_hosts_per_round", "fail_closed", "max_model_parameters", "run_deposit", "run_deposit_per_byte", "max_round_blocks", "unbonding_blocks", "beacon_withhold_slash_fraction", "max_step_tokens", "screeners_per_commit", "min_host_collateral", "run_deposit_per_block")
    COLLATERAL_DENOM_FIELD_NUMBER: _ClassVar[int]
    UNBONDING_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_RATE_FIELD_NUMBER: _ClassVar[int]
    REVEAL_WINDOW_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_WINDOW_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    VERIFIERS_PER_CHALLENGE_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    SLASH_FRACTION_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_SLASH_FRACTION_FIELD_NUMBER: _ClassVar[int]
    MIN_VERIFIER_COLLATERAL_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_MODE_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    PSEUDO_GRAD_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    MAX_SEGMENTS_PER_ROUND_FIELD_NUMBER: _ClassVar[int]
    MAX_INNER_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MAX_START_DELAY_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    BEACON_REVEAL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SCREEN_LOSS_MARGIN_FIELD_NUMBER: _ClassVar[int]
    VERDICT_OPEN_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_BF16_FIELD_NUMBER: _ClassVar[int]
    MIN_HOSTS_PER_ROUND_FIELD_NUMBER: _ClassVar[int]
    FAIL_CLOSED_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    RUN_DEPOSIT_FIELD_NUMBER: _ClassVar[int]
    RUN_DEPOSIT_PER_BYTE_FIELD_NUMBER: _ClassVar[int]
    MAX_ROUND_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    UNBONDING_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BEACON_WITHHOLD_SLASH_FRACTION_FIELD_NUMBER: _ClassVar[int]
    MAX_STEP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SCREENERS_PER_COMMIT_FIELD_NUMBER: _ClassVar[int]
    MIN_HOST_COLLATERAL_FIELD_NUMBER: _ClassVar[int]
    RUN_DEPOSIT_PER_BLOCK_FIELD_NUMBER: _ClassVar[int]
    collateral_denom: str
    unbonding_period_seconds: int
    sampling_rate: str
    reveal_window_blocks: int
    verdict_window_blocks: int
    verifiers_per_challenge: int
    quorum: int
    slash_fraction: str
    verifier_slash_fraction: str
    min_verifier_collateral: int
    verification_mode: str
    tolerance: str
    pseudo_grad_tolerance: str
    max_segments_per_round: int
    max_inner_steps: int
    max_total_rounds: int
    max_start_delay_blocks: int
    max_active_runs: int
    beacon_reveal_blocks: int
    screen_loss_margin: str
    verdict_open_blocks: int
    tolerance_bf16: str
    min_hosts_per_round: int
    fail_closed: bool
    max_model_parameters: int
    run_deposit: int
    run_deposit_per_byte: int
    max_round_blocks: int
    unbonding_blocks: int
    beacon_withhold_slash_fraction: str
    max_step_tokens: int
    screeners_per_commit: int
    min_host_collateral: int
    run_deposit_per_block: int
    def __init__(self, collateral_denom: _Optional[str] = ..., unbonding_period_seconds: _Optional[int] = ..., sampling_rate: _Optional[str] = ..., reveal_window_blocks: _Optional[int] = ..., verdict_window_blocks: _Optional[int] = ..., verifiers_per_challenge: _Optional[int] = ..., quorum: _Optional[int] = ..., slash_fraction: _Optional[str] = ..., verifier_slash_fraction: _Optional[str] = ..., min_verifier_collateral: _Optional[int] = ..., verification_mode: _Optional[str] = ..., tolerance: _Optional[str] = ..., pseudo_grad_tolerance: _Optional[str] = ..., max_segments_per_round: _Optional[int] = ..., max_inner_steps: _Optional[int] = ..., max_total_rounds: _Optional[int] = ..., max_start_delay_blocks: _Optional[int] = ..., max_active_runs: _Optional[int] = ..., beacon_reveal_blocks: _Optional[int] = ..., screen_loss_margin: _Optional[str] = ..., verdict_open_blocks: _Optional[int] = ..., tolerance_bf16: _Optional[str] = ..., min_hosts_per_round: _Optional[int] = ..., fail_closed: bool = ..., max_model_parameters: _Optional[int] = ..., run_deposit: _Optional[int] = ..., run_deposit_per_byte: _Optional[int] = ..., max_round_blocks: _Optional[int] = ..., unbonding_blocks: _Optional[int] = ..., beacon_withhold_slash_fraction: _Optional[str] = ..., max_step_tokens: _Optional[int] = ..., screeners_per_commit: _Optional[int] = ..., min_host_collateral: _Optional[int] = ..., run_deposit_per_block: _Optional[int] = ...) -> None: ...

class BeaconEntry(_message.Message):
    __slots__ = ("verifier", "commitment", "secret")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    COMMITMENT_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    commitment: bytes
    secret: bytes
    def __init__(self, verifier: _Optional[str] = ..., commitment: _Optional[bytes] = ..., secret: _Optional[bytes] = ...) -> None: ...

class Beacon(_message.Message):
    __slots__ = ("run_id", "round", "entries", "anchor", "seed")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    entries: _containers.RepeatedCompositeFieldContainer[BeaconEntry]
    anchor: bytes
    seed: bytes
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[BeaconEntry, _Mapping]]] = ..., anchor: _Optional[bytes] = ..., seed: _Optional[bytes] = ...) -> None: ...

class VestingGrant(_message.Message):
    __slots__ = ("address", "epoch", "total", "vested", "paid", "forfeited")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    VESTED_FIELD_NUMBER: _ClassVar[int]
    PAID_FIELD_NUMBER: _ClassVar[int]
    FORFEITED_FIELD_NUMBER: _ClassVar[int]
    address: str
    epoch: int
    total: str
    vested: str
    paid: str
    forfeited: str
    def __init__(self, address: _Optional[str] = ..., epoch: _Optional[int] = ..., total: _Optional[str] = ..., vested: _Optional[str] = ..., paid: _Optional[str] = ..., forfeited: _Optional[str] = ...) -> None: ...

class Screen(_message.Message):
    __slots__ = ("run_id", "round", "host", "votes", "failed", "passed", "inconsistent")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    INCONSISTENT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    host: str
    votes: _containers.RepeatedCompositeFieldContainer[Vote]
    failed: bool
    passed: bool
    inconsistent: bool
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., host: _Optional[str] = ..., votes: _Optional[_Iterable[_Union[Vote, _Mapping]]] = ..., failed: bool = ..., passed: bool = ..., inconsistent: bool = ...) -> None: ...

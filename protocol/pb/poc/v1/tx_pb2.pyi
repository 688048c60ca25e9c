from dilochain.protocol.pb.poc.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MsgDepositCollateral(_message.Message):
    __slots__ = ("depositor", "amount")
    DEPOSITOR_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    depositor: str
    amount: str
    def __init__(self, depositor: _Optional[str] = ..., amount: _Optional[str] = ...) -> None: ...

class MsgDepositCollateralResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgWithdrawCollateral(_message.Message):
    __slots__ = ("depositor", "amount")
    DEPOSITOR_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    depositor: str
    amount: str
    def __init__(self, depositor: _Optional[str] = ..., amount: _Optional[str] = ...) -> None: ...

class MsgWithdrawCollateralResponse(_message.Message):
    __slots__ = ("completion_time_unix",)
    COMPLETION_TIME_UNIX_FIELD_NUMBER: _ClassVar[int]
    completion_time_unix: int
    def __init__(self, completion_time_unix: _Optional[int] = ...) -> None: ...

class MsgCreateRun(_message.Message):
    __slots__ = ("creator", "run_id", "config")
    CREATOR_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    creator: str
    run_id: str
    config: _types_pb2.RunConfig
    def __init__(self, creator: _Optional[str] = ..., run_id: _Optional[str] = ..., config: _Optional[_Union[_types_pb2.RunConfig, _Mapping]] = ...) -> None: ...

class MsgCreateRunResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgRegisterHost(_message.Message):
    __slots__ = ("host", "run_id", "endpoint")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    host: str
    run_id: str
    endpoint: str
    def __init__(self, host: _Optional[str] = ..., run_id: _Optional[str] = ..., endpoint: _Optional[str] = ...) -> None: ...

class MsgRegisterHostResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgLeaveRun(_message.Message):
    __slots__ = ("host", "run_id")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    host: str
    run_id: str
    def __init__(self, host: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class MsgLeaveRunResponse(_message.Message):
    __slots__ = ("release_height",)
    RELEASE_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    release_height: int
    def __init__(self, release_height: _Optional[int] = ...) -> None: ...

class MsgCommitRound(_message.Message):
    __slots__ = ("host", "run_id", "round", "ckpt_root", "pseudo_grad_hash", "data_seed", "tokens", "loss", "base_hash", "eval_loss", "final_hash", "final_proof", "residual_hash")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    CKPT_ROOT_FIELD_NUMBER: _ClassVar[int]
    PSEUDO_GRAD_HASH_FIELD_NUMBER: _ClassVar[int]
    DATA_SEED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    BASE_HASH_FIELD_NUMBER: _ClassVar[int]
    EVAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    FINAL_HASH_FIELD_NUMBER: _ClassVar[int]
    FINAL_PROOF_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_HASH_FIELD_NUMBER: _ClassVar[int]
    host: str
    run_id: str
    round: int
    ckpt_root: bytes
    pseudo_grad_hash: bytes
    data_seed: int
    tokens: int
    loss: float
    base_hash: bytes
    eval_loss: float
    final_hash: bytes
    final_proof: _containers.RepeatedScalarFieldContainer[bytes]
    residual_hash: bytes
    def __init__(self, host: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., ckpt_root: _Optional[bytes] = ..., pseudo_grad_hash: _Optional[bytes] = ..., data_seed: _Optional[int] = ..., tokens: _Optional[int] = ..., loss: _Optional[float] = ..., base_hash: _Optional[bytes] = ..., eval_loss: _Optional[float] = ..., final_hash: _Optional[bytes] = ..., final_proof: _Optional[_Iterable[bytes]] = ..., residual_hash: _Optional[bytes] = ...) -> None: ...

class MsgCommitRoundResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgRevealCheckpoints(_message.Message):
    __slots__ = ("host", "run_id", "round", "segment", "start_hash", "end_hash", "final_hash", "start_proof", "end_proof", "final_proof")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    START_HASH_FIELD_NUMBER: _ClassVar[int]
    END_HASH_FIELD_NUMBER: _ClassVar[int]
    FINAL_HASH_FIELD_NUMBER: _ClassVar[int]
    START_PROOF_FIELD_NUMBER: _ClassVar[int]
    END_PROOF_FIELD_NUMBER: _ClassVar[int]
    FINAL_PROOF_FIELD_NUMBER: _ClassVar[int]
    host: str
    run_id: str
    round: int
    segment: int
    start_hash: bytes
    end_hash: bytes
    final_hash: bytes
    start_proof: _containers.RepeatedScalarFieldContainer[bytes]
    end_proof: _containers.RepeatedScalarFieldContainer[bytes]
    final_proof: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, host: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., segment: _Optional[int] = ..., start_hash: _Optional[bytes] = ..., end_hash: _Optional[bytes] = ..., final_hash: _Optional[bytes] = ..., start_proof: _Optional[_Iterable[bytes]] = ..., end_proof: _Optional[_Iterable[bytes]] = ..., final_proof: _Optional[_Iterable[bytes]] = ...) -> None: ...

class MsgRevealCheckpointsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgRegisterVerifier(_message.Message):
    __slots__ = ("verifier", "endpoint")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    endpoint: str
    def __init__(self, verifier: _Optional[str] = ..., endpoint: _Optional[str] = ...) -> None: ...

class MsgRegisterVerifierResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgLeaveVerifier(_message.Message):
    __slots__ = ("verifier",)
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    def __init__(self, verifier: _Optional[str] = ...) -> None: ...

class MsgLeaveVerifierResponse(_message.Message):
    __slots__ = ("release_height",)
    RELEASE_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    release_height: int
    def __init__(self, release_height: _Optional[int] = ...) -> None: ...

class MsgSubmitVerdict(_message.Message):
    __slots__ = ("verifier", "run_id", "round", "host", "segment", "commitment")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    COMMITMENT_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    run_id: str
    round: int
    host: str
    segment: int
    commitment: bytes
    def __init__(self, verifier: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., host: _Optional[str] = ..., segment: _Optional[int] = ..., commitment: _Optional[bytes] = ...) -> None: ...

class MsgSubmitVerdictResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgOpenVerdict(_message.Message):
    __slots__ = ("verifier", "run_id", "round", "host", "segment", "passed", "fingerprint", "salt", "evidence_hash")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_HASH_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    run_id: str
    round: int
    host: str
    segment: int
    passed: bool
    fingerprint: bytes
    salt: bytes
    evidence_hash: bytes
    def __init__(self, verifier: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., host: _Optional[str] = ..., segment: _Optional[int] = ..., passed: bool = ..., fingerprint: _Optional[bytes] = ..., salt: _Optional[bytes] = ..., evidence_hash: _Optional[bytes] = ...) -> None: ...

class MsgOpenVerdictResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgClaimReward(_message.Message):
    __slots__ = ("claimer", "epoch")
    CLAIMER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    claimer: str
    epoch: int
    def __init__(self, claimer: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class MsgClaimRewardResponse(_message.Message):
    __slots__ = ("amount", "vesting")
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    VESTING_FIELD_NUMBER: _ClassVar[int]
    amount: str
    vesting: str
    def __init__(self, amount: _Optional[str] = ..., vesting: _Optional[str] = ...) -> None: ...

class MsgCommitBeacon(_message.Message):
    __slots__ = ("verifier", "run_id", "round", "commitment")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    COMMITMENT_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    run_id: str
    round: int
    commitment: bytes
    def __init__(self, verifier: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., commitment: _Optional[bytes] = ...) -> None: ...

class MsgCommitBeaconResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgRevealBeacon(_message.Message):
    __slots__ = ("verifier", "run_id", "round", "secret")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    run_id: str
    round: int
    secret: bytes
    def __init__(self, verifier: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., secret: _Optional[bytes] = ...) -> None: ...

class MsgRevealBeaconResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgWithdrawVested(_message.Message):
    __slots__ = ("claimer",)
    CLAIMER_FIELD_NUMBER: _ClassVar[int]
    claimer: str
    def __init__(self, claimer: _Optional[str] = ...) -> None: ...

class MsgWithdrawVestedResponse(_message.Message):
    __slots__ = ("amount",)
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    amount: str
    def __init__(self, amount: _Optional[str] = ...) -> None: ...

class MsgSubmitScreen(_message.Message):
    __slots__ = ("verifier", "run_id", "round", "votes")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    verifier: str
    run_id: str
    round: int
    votes: _containers.RepeatedCompositeFieldContainer[ScreenVote]
    def __init__(self, verifier: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., votes: _Optional[_Iterable[_Union[ScreenVote, _Mapping]]] = ...) -> None: ...

class ScreenVote(_message.Message):
    __slots__ = ("host", "passed", "evidence_hash", "inconsistent")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_HASH_FIELD_NUMBER: _ClassVar[int]
    INCONSISTENT_FIELD_NUMBER: _ClassVar[int]
    host: str
    passed: bool
    evidence_hash: bytes
    inconsistent: bool
    def __init__(self, host: _Optional[str] = ..., passed: bool = ..., evidence_hash: _Optional[bytes] = ..., inconsistent: bool = ...) -> None: ...

class MsgSubmitScreenResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MsgCreateValidator(_message.Message):
    __slots__ = ("operator", "pub_key", "amount", "moniker", "key_proof")
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    PUB_KEY_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    MONIKER_FIELD_NUMBER: _ClassVar[int]
    KEY_PROOF_FIELD_NUMBER: _ClassVar[int]
    operator: str
    pub_key: bytes
    amount: str
    moniker: str
    key_proof: bytes
    def __init__(self, operator: _Optional[str] = ..., pub_key: _Optional[bytes] = ..., amount: _Optional[str] = ..., moniker: _Optional[str] = ..., key_proof: _Optional[bytes] = ...) -> None: ...

class MsgCreateValidatorResponse(_message.Message):
    __slots__ = ("consensus_address",)
    CONSENSUS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    consensus_address: str
    def __init__(self, consensus_address: _Optional[str] = ...) -> None: ...

class MsgLeaveValidatorSet(_message.Message):
    __slots__ = ("operator",)
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    operator: str
    def __init__(self, operator: _Optional[str] = ...) -> None: ...

class MsgLeaveValidatorSetResponse(_message.Message):
    __slots__ = ("release_height",)
    RELEASE_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    release_height: int
    def __init__(self, release_height: _Optional[int] = ...) -> None: ...

class MsgUnjailValidator(_message.Message):
    __slots__ = ("operator",)
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    operator: str
    def __init__(self, operator: _Optional[str] = ...) -> None: ...

class MsgUnjailValidatorResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

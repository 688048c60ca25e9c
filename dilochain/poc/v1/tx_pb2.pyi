from dilochain.poc.v1 import types_pb2 as _types_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

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

class MsgCommitRound(_message.Message):
    __slots__ = ("host", "run_id", "round", "ckpt_root", "pseudo_grad_hash", "data_seed", "tokens", "loss", "base_hash")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    CKPT_ROOT_FIELD_NUMBER: _ClassVar[int]
    PSEUDO_GRAD_HASH_FIELD_NUMBER: _ClassVar[int]
    DATA_SEED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    BASE_HASH_FIELD_NUMBER: _ClassVar[int]
    host: str
    run_id: str
    round: int
    ckpt_root: bytes
    pseudo_grad_hash: bytes
    data_seed: int
    tokens: int
    loss: float
    base_hash: bytes
    def __init__(self, host: _Optional[str] = ..., run_id: _Optional[str] = ..., round: _Optional[int] = ..., ckpt_root: _Optional[bytes] = ..., pseudo_grad_hash: _Optional[bytes] = ..., data_seed: _Optional[int] = ..., tokens: _Optional[int] = ..., loss: _Optional[float] = ..., base_hash: _Optional[bytes] = ...) -> None: ...

class MsgCommitRoundResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunConfig(_message.Message):
    __slots__ = ("model", "inner_steps", "checkpoint_interval", "seed", "min_collateral", "max_hosts")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INNER_STEPS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MIN_COLLATERAL_FIELD_NUMBER: _ClassVar[int]
    MAX_HOSTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    inner_steps: int
    checkpoint_interval: int
    seed: int
    min_collateral: str
    max_hosts: int
    def __init__(self, model: _Optional[str] = ..., inner_steps: _Optional[int] = ..., checkpoint_interval: _Optional[int] = ..., seed: _Optional[int] = ..., min_collateral: _Optional[str] = ..., max_hosts: _Optional[int] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "creator", "config", "created_height")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    creator: str
    config: RunConfig
    created_height: int
    def __init__(self, run_id: _Optional[str] = ..., creator: _Optional[str] = ..., config: _Optional[_Union[RunConfig, _Mapping]] = ..., created_height: _Optional[int] = ...) -> None: ...

class Host(_message.Message):
    __slots__ = ("run_id", "address", "endpoint", "registered_height")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    address: str
    endpoint: str
    registered_height: int
    def __init__(self, run_id: _Optional[str] = ..., address: _Optional[str] = ..., endpoint: _Optional[str] = ..., registered_height: _Optional[int] = ...) -> None: ...

class UnbondingEntry(_message.Message):
    __slots__ = ("amount", "completion_time_unix")
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TIME_UNIX_FIELD_NUMBER: _ClassVar[int]
    amount: str
    completion_time_unix: int
    def __init__(self, amount: _Optional[str] = ..., completion_time_unix: _Optional[int] = ...) -> None: ...

class CollateralInfo(_message.Message):
    __slots__ = ("address", "bonded", "unbonding")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BONDED_FIELD_NUMBER: _ClassVar[int]
    UNBONDING_FIELD_NUMBER: _ClassVar[int]
    address: str
    bonded: str
    unbonding: _containers.RepeatedCompositeFieldContainer[UnbondingEntry]
    def __init__(self, address: _Optional[str] = ..., bonded: _Optional[str] = ..., unbonding: _Optional[_Iterable[_Union[UnbondingEntry, _Mapping]]] = ...) -> None: ...

class Params(_message.Message):
    __slots__ = ("collateral_denom", "unbonding_period_seconds")
    COLLATERAL_DENOM_FIELD_NUMBER: _ClassVar[int]
    UNBONDING_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    collateral_denom: str
    unbonding_period_seconds: int
    def __init__(self, collateral_denom: _Optional[str] = ..., unbonding_period_seconds: _Optional[int] = ...) -> None: ...

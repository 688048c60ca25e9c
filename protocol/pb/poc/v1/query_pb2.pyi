from dilochain.protocol.pb.poc.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PageRequest(_message.Message):
    __slots__ = ("key", "offset", "limit", "count_total", "reverse")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    COUNT_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    offset: int
    limit: int
    count_total: bool
    reverse: bool
    def __init__(self, key: _Optional[bytes] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ..., count_total: bool = ..., reverse: bool = ...) -> None: ...

class PageResponse(_message.Message):
    __slots__ = ("next_key", "total")
    NEXT_KEY_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    next_key: bytes
    total: int
    def __init__(self, next_key: _Optional[bytes] = ..., total: _Optional[int] = ...) -> None: ...

class QueryParamsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryParamsResponse(_message.Message):
    __slots__ = ("params",)
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    params: _types_pb2.Params
    def __init__(self, params: _Optional[_Union[_types_pb2.Params, _Mapping]] = ...) -> None: ...

class QueryCollateralRequest(_message.Message):
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: str
    def __init__(self, address: _Optional[str] = ...) -> None: ...

class QueryCollateralResponse(_message.Message):
    __slots__ = ("collateral",)
    COLLATERAL_FIELD_NUMBER: _ClassVar[int]
    collateral: _types_pb2.CollateralInfo
    def __init__(self, collateral: _Optional[_Union[_types_pb2.CollateralInfo, _Mapping]] = ...) -> None: ...

class QueryRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class QueryRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ...) -> None: ...

class QueryRunsRequest(_message.Message):
    __slots__ = ("pagination", "active")
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    pagination: PageRequest
    active: bool
    def __init__(self, pagination: _Optional[_Union[PageRequest, _Mapping]] = ..., active: bool = ...) -> None: ...

class QueryRunsResponse(_message.Message):
    __slots__ = ("runs", "pagination")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Run]
    pagination: PageResponse
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.Run, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryHostsRequest(_message.Message):
    __slots__ = ("run_id", "pagination")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    pagination: PageRequest
    def __init__(self, run_id: _Optional[str] = ..., pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryHostsResponse(_message.Message):
    __slots__ = ("hosts", "pagination")
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedCompositeFieldContainer[_types_pb2.Host]
    pagination: PageResponse
    def __init__(self, hosts: _Optional[_Iterable[_Union[_types_pb2.Host, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryRosterRequest(_message.Message):
    __slots__ = ("run_id", "round")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class QueryRosterResponse(_message.Message):
    __slots__ = ("roster", "drawn")
    ROSTER_FIELD_NUMBER: _ClassVar[int]
    DRAWN_FIELD_NUMBER: _ClassVar[int]
    roster: _types_pb2.Roster
    drawn: bool
    def __init__(self, roster: _Optional[_Union[_types_pb2.Roster, _Mapping]] = ..., drawn: bool = ...) -> None: ...

class QueryRoundInfoRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class QueryRoundInfoResponse(_message.Message):
    __slots__ = ("height", "round", "window_start", "window_end", "finished", "selection_height", "resolution_height", "verdict_open_height")
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    SELECTION_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_OPEN_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    height: int
    round: int
    window_start: int
    window_end: int
    finished: bool
    selection_height: int
    resolution_height: int
    verdict_open_height: int
    def __init__(self, height: _Optional[int] = ..., round: _Optional[int] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., finished: bool = ..., selection_height: _Optional[int] = ..., resolution_height: _Optional[int] = ..., verdict_open_height: _Optional[int] = ...) -> None: ...

class QueryCommitsRequest(_message.Message):
    __slots__ = ("run_id", "round", "pagination")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    pagination: PageRequest
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryCommitsResponse(_message.Message):
    __slots__ = ("commits", "pagination")
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    commits: _containers.RepeatedCompositeFieldContainer[_types_pb2.RoundCommit]
    pagination: PageResponse
    def __init__(self, commits: _Optional[_Iterable[_Union[_types_pb2.RoundCommit, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryGlobalCheckpointsRequest(_message.Message):
    __slots__ = ("run_id", "pagination")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    pagination: PageRequest
    def __init__(self, run_id: _Optional[str] = ..., pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryGlobalCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints", "pagination")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[_types_pb2.GlobalCheckpoint]
    pagination: PageResponse
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[_types_pb2.GlobalCheckpoint, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryChallengesRequest(_message.Message):
    __slots__ = ("run_id", "round", "pagination")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    pagination: PageRequest
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryChallengesResponse(_message.Message):
    __slots__ = ("challenges", "pagination")
    CHALLENGES_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    challenges: _containers.RepeatedCompositeFieldContainer[_types_pb2.Challenge]
    pagination: PageResponse
    def __init__(self, challenges: _Optional[_Iterable[_Union[_types_pb2.Challenge, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QuerySlashesRequest(_message.Message):
    __slots__ = ("address", "pagination")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    address: str
    pagination: PageRequest
    def __init__(self, address: _Optional[str] = ..., pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QuerySlashesResponse(_message.Message):
    __slots__ = ("slashes", "pagination")
    SLASHES_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    slashes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Slash]
    pagination: PageResponse
    def __init__(self, slashes: _Optional[_Iterable[_Union[_types_pb2.Slash, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryVerifiersRequest(_message.Message):
    __slots__ = ("pagination",)
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    pagination: PageRequest
    def __init__(self, pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryVerifiersResponse(_message.Message):
    __slots__ = ("verifiers", "pagination")
    VERIFIERS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    verifiers: _containers.RepeatedCompositeFieldContainer[_types_pb2.Verifier]
    pagination: PageResponse
    def __init__(self, verifiers: _Optional[_Iterable[_Union[_types_pb2.Verifier, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryEpochRequest(_message.Message):
    __slots__ = ("epoch", "current")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    current: bool
    def __init__(self, epoch: _Optional[int] = ..., current: bool = ...) -> None: ...

class QueryEpochResponse(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: _types_pb2.EpochInfo
    def __init__(self, epoch: _Optional[_Union[_types_pb2.EpochInfo, _Mapping]] = ...) -> None: ...

class QueryClaimableRequest(_message.Message):
    __slots__ = ("address", "epoch")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    address: str
    epoch: int
    def __init__(self, address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class QueryClaimableResponse(_message.Message):
    __slots__ = ("claimable",)
    CLAIMABLE_FIELD_NUMBER: _ClassVar[int]
    claimable: _types_pb2.Claimable
    def __init__(self, claimable: _Optional[_Union[_types_pb2.Claimable, _Mapping]] = ...) -> None: ...

class QueryBeaconRequest(_message.Message):
    __slots__ = ("run_id", "round")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class QueryBeaconResponse(_message.Message):
    __slots__ = ("beacon",)
    BEACON_FIELD_NUMBER: _ClassVar[int]
    beacon: _types_pb2.Beacon
    def __init__(self, beacon: _Optional[_Union[_types_pb2.Beacon, _Mapping]] = ...) -> None: ...

class QueryVestingRequest(_message.Message):
    __slots__ = ("address", "pagination")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    address: str
    pagination: PageRequest
    def __init__(self, address: _Optional[str] = ..., pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryVestingResponse(_message.Message):
    __slots__ = ("grants", "pagination")
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[_types_pb2.VestingGrant]
    pagination: PageResponse
    def __init__(self, grants: _Optional[_Iterable[_Union[_types_pb2.VestingGrant, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryScreensRequest(_message.Message):
    __slots__ = ("run_id", "round", "pagination")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    pagination: PageRequest
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryScreensResponse(_message.Message):
    __slots__ = ("screens", "pagination")
    SCREENS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    screens: _containers.RepeatedCompositeFieldContainer[_types_pb2.Screen]
    pagination: PageResponse
    def __init__(self, screens: _Optional[_Iterable[_Union[_types_pb2.Screen, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ...) -> None: ...

class QueryValidatorsRequest(_message.Message):
    __slots__ = ("pagination",)
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    pagination: PageRequest
    def __init__(self, pagination: _Optional[_Union[PageRequest, _Mapping]] = ...) -> None: ...

class QueryValidatorsResponse(_message.Message):
    __slots__ = ("validators", "pagination", "params")
    VALIDATORS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    validators: _containers.RepeatedCompositeFieldContainer[_types_pb2.ChainValidator]
    pagination: PageResponse
    params: _types_pb2.ValidatorSetParams
    def __init__(self, validators: _Optional[_Iterable[_Union[_types_pb2.ChainValidator, _Mapping]]] = ..., pagination: _Optional[_Union[PageResponse, _Mapping]] = ..., params: _Optional[_Union[_types_pb2.ValidatorSetParams, _Mapping]] = ...) -> None: ...

from dilochain.protocol.pb.poc.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.Run, _Mapping]]] = ...) -> None: ...

class QueryHostsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class QueryHostsResponse(_message.Message):
    __slots__ = ("hosts",)
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedCompositeFieldContainer[_types_pb2.Host]
    def __init__(self, hosts: _Optional[_Iterable[_Union[_types_pb2.Host, _Mapping]]] = ...) -> None: ...

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
    __slots__ = ("run_id", "round")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class QueryCommitsResponse(_message.Message):
    __slots__ = ("commits",)
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    commits: _containers.RepeatedCompositeFieldContainer[_types_pb2.RoundCommit]
    def __init__(self, commits: _Optional[_Iterable[_Union[_types_pb2.RoundCommit, _Mapping]]] = ...) -> None: ...

class QueryGlobalCheckpointsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class QueryGlobalCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[_types_pb2.GlobalCheckpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[_types_pb2.GlobalCheckpoint, _Mapping]]] = ...) -> None: ...

class QueryChallengesRequest(_message.Message):
    __slots__ = ("run_id", "round")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class QueryChallengesResponse(_message.Message):
    __slots__ = ("challenges",)
    CHALLENGES_FIELD_NUMBER: _ClassVar[int]
    challenges: _containers.RepeatedCompositeFieldContainer[_types_pb2.Challenge]
    def __init__(self, challenges: _Optional[_Iterable[_Union[_types_pb2.Challenge, _Mapping]]] = ...) -> None: ...

class QuerySlashesRequest(_message.Message):
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: str
    def __init__(self, address: _Optional[str] = ...) -> None: ...

class QuerySlashesResponse(_message.Message):
    __slots__ = ("slashes",)
    SLASHES_FIELD_NUMBER: _ClassVar[int]
    slashes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Slash]
    def __init__(self, slashes: _Optional[_Iterable[_Union[_types_pb2.Slash, _Mapping]]] = ...) -> None: ...

class QueryVerifiersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryVerifiersResponse(_message.Message):
    __slots__ = ("verifiers",)
    VERIFIERS_FIELD_NUMBER: _ClassVar[int]
    verifiers: _containers.RepeatedCompositeFieldContainer[_types_pb2.Verifier]
    def __init__(self, verifiers: _Optional[_Iterable[_Union[_types_pb2.Verifier, _Mapping]]] = ...) -> None: ...

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
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: str
    def __init__(self, address: _Optional[str] = ...) -> None: ...

class QueryVestingResponse(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[_types_pb2.VestingGrant]
    def __init__(self, grants: _Optional[_Iterable[_Union[_types_pb2.VestingGrant, _Mapping]]] = ...) -> None: ...

class QueryScreensRequest(_message.Message):
    __slots__ = ("run_id", "round")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class QueryScreensResponse(_message.Message):
    __slots__ = ("screens",)
    SCREENS_FIELD_NUMBER: _ClassVar[int]
    screens: _containers.RepeatedCompositeFieldContainer[_types_pb2.Screen]
    def __init__(self, screens: _Optional[_Iterable[_Union[_types_pb2.Screen, _Mapping]]] = ...) -> None: ...

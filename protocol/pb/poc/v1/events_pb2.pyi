from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class BlocksRequest(_message.Message):
    __slots__ = ("after_height",)
    AFTER_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    after_height: int
    def __init__(self, after_height: _Optional[int] = ...) -> None: ...

class BlocksResponse(_message.Message):
    __slots__ = ("height",)
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    height: int
    def __init__(self, height: _Optional[int] = ...) -> None: ...

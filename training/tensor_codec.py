"""The canonical byte encoding of a state dict, and its SHA-256: defined once, used everywhere.

Layout: ``b"DLT1"``, the tensor count (u32), then per tensor in sorted key order: the key
(u16 length + UTF-8), the dtype name (u8 length + ASCII), the rank (u8) and dims (u64 each),
then the raw little-endian data. A checkpoint's artifact bytes are exactly this encoding, so its
artifact hash and its state hash are the same number.
"""

from __future__ import annotations

import math
import struct

import torch

from dilochain.protocol.hashing import content_hash

MAGIC = b"DLT1"
_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int8": torch.int8,
    "uint8": torch.uint8,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


class CodecError(ValueError):
    """Bytes that are not a canonical state encoding."""


def encode_state(state: dict[str, torch.Tensor]) -> bytes:
    """Canonical bytes of ``state`` (tensors moved to CPU); the data is copied once."""
    parts: list[bytes | memoryview] = [MAGIC, struct.pack("<I", len(state))]
    for key in sorted(state):
        tensor = state[key].detach().to("cpu").contiguous()
        dtype = _NAMES.get(tensor.dtype)
        if dtype is None:
            raise CodecError(f"{key}: unsupported dtype {tensor.dtype}")
        name = key.encode()
        parts.append(struct.pack("<H", len(name)) + name)
        parts.append(struct.pack("<B", len(dtype)) + dtype.encode())
        parts.append(
            struct.pack("<B", tensor.dim()) + struct.pack(f"<{tensor.dim()}Q", *tensor.shape)
        )
        parts.append(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    return b"".join(parts)


def decode_state(data: bytes) -> dict[str, torch.Tensor]:
    """Inverse of :func:`encode_state`; raises :class:`CodecError` on malformed bytes."""
    try:
        if data[:4] != MAGIC:
            raise CodecError("not a dilochain tensor encoding")
        (count,), pos = struct.unpack_from("<I", data, 4), 8
        state: dict[str, torch.Tensor] = {}
        for _ in range(count):
            (n,) = struct.unpack_from("<H", data, pos)
            key = data[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (n,) = struct.unpack_from("<B", data, pos)
            dtype = _DTYPES[data[pos + 1 : pos + 1 + n].decode()]
            pos += 1 + n
            (rank,) = struct.unpack_from("<B", data, pos)
            shape = struct.unpack_from(f"<{rank}Q", data, pos + 1)
            pos += 1 + 8 * rank
            # Sized from the declared shape, checked against the bytes present before any
            # allocation: a crafted shape cannot make the decoder allocate more than it was sent.
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            if max(shape, default=0) >= 1 << 63 or size > len(data) - pos:
                raise CodecError(f"{key}: shape {shape} needs {size} bytes, {len(data) - pos} left")
            chunk = bytearray(data[pos : pos + size])
            pos += size
            flat = (
                torch.frombuffer(chunk, dtype=torch.uint8)
                if size
                else torch.empty(0, dtype=torch.uint8)
            )
            state[key] = flat.view(dtype).reshape(shape)
        if pos != len(data):
            raise CodecError("trailing bytes after the last tensor")
        return state
    except (struct.error, KeyError, UnicodeDecodeError, RuntimeError, ValueError, TypeError,
            OverflowError) as err:  # fmt: skip
        if isinstance(err, CodecError):
            raise
        raise CodecError(f"malformed tensor encoding: {err}") from None


def state_hash(state: dict[str, torch.Tensor]) -> bytes:
    """SHA-256 of the canonical encoding."""
    return content_hash(encode_state(state))

"""The canonical bytes of a state dict, and their SHA-256: defined once, used everywhere.

A state is stored as safetensors (``{"format": "pt"}`` metadata, as Hugging Face tools expect):
the library orders tensors by dtype then name and writes no timestamp, so equal states are equal
bytes whatever their dict order, and any safetensors reader opens a checkpoint. A checkpoint's
artifact bytes are exactly this encoding, so its artifact hash and its state hash are the same
number. Decoding never unpickles: safetensors checks every offset against the bytes present
before it allocates.
"""

from __future__ import annotations

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from dilochain.protocol.hashing import content_hash

METADATA = {"format": "pt"}  # one key: safetensors keeps a single-entry map's bytes fixed
_DTYPES = {torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
           torch.int32, torch.int8, torch.uint8}  # fmt: skip


class CodecError(ValueError):
    """Bytes that are not a state encoding."""


def encode_state(state: dict[str, torch.Tensor]) -> bytes:
    """Canonical safetensors bytes of ``state`` (tensors moved to the CPU)."""
    tensors = {}
    for key, value in state.items():
        if value.dtype not in _DTYPES:
            raise CodecError(f"{key}: unsupported dtype {value.dtype}")
        tensors[key] = value.detach().to("cpu").contiguous()
    return save(tensors, metadata=METADATA)


def decode_state(data: bytes) -> dict[str, torch.Tensor]:
    """Inverse of :func:`encode_state`; raises :class:`CodecError` on malformed bytes."""
    try:
        state = load(bytes(data))
    except (SafetensorError, ValueError, TypeError, RuntimeError, OverflowError) as err:
        raise CodecError(f"malformed safetensors: {err}") from None
    for key, value in state.items():
        if value.dtype not in _DTYPES:
            raise CodecError(f"{key}: unsupported dtype {value.dtype}")
    return state


def state_hash(state: dict[str, torch.Tensor]) -> bytes:
    """SHA-256 of the canonical encoding."""
    return content_hash(encode_state(state))

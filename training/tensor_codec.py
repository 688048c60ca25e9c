"""The canonical bytes of a state dict, and their SHA-256: defined once, used everywhere.

A state is stored as safetensors (``{"format": "pt"}`` metadata, as Hugging Face tools expect),
byte for byte what ``safetensors.torch.save`` writes (property-tested): tensors ordered by dtype
(safetensors' order) then name, no timestamp, so equal states are equal bytes whatever their
dict order, and any safetensors reader opens a checkpoint. :func:`encode_parts` lays the bytes
out as parts — the header, then each tensor's own memory — so a checkpoint is hashed and written
without one joined copy (hashlib and file writes release the GIL, a copy does not: the training
loop beside the checkpoint writer keeps running). A global state's, residual's or checkpoint
half's artifact bytes are exactly this encoding, so its artifact hash and its state hash are the
same number (a checkpoint is two of them and an index: ``checkpoint_codec``). Decoding never
unpickles: safetensors checks every offset against the bytes present before it allocates.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sized
from dataclasses import dataclass

import torch
from safetensors import SafetensorError
from safetensors.torch import load

from dilochain.protocol.hashing import Buffer, content_hash_parts

METADATA = {"format": "pt"}
# safetensors' name of each dtype we encode, in the order it lays tensors out (its enum order,
# descending: widest first), before their names.
_DTYPES = {
    torch.int64: "I64", torch.float64: "F64", torch.float32: "F32", torch.int32: "I32",
    torch.bfloat16: "BF16", torch.float16: "F16", torch.int8: "I8", torch.uint8: "U8",
}  # fmt: skip
_RANK = {dtype: rank for rank, dtype in enumerate(_DTYPES)}


class CodecError(ValueError):
    """Bytes that are not a state encoding."""


def encode_parts(state: dict[str, torch.Tensor]) -> list[Buffer]:
    """The canonical safetensors bytes of ``state`` as parts: the length-prefixed header, then
    each tensor's bytes — views of the tensors themselves where they are contiguous on the CPU,
    so snapshot what training will change before encoding it."""
    tensors = []
    for key, value in state.items():
        if value.dtype not in _DTYPES:
            raise CodecError(f"{key}: unsupported dtype {value.dtype}")
        tensors.append((key, value.detach().to("cpu").contiguous()))
    tensors.sort(key=lambda item: (_RANK[item[1].dtype], item[0]))
    header: dict[str, object] = {"__metadata__": METADATA}
    parts: list[Buffer] = []
    offset = 0
    for key, tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        header[key] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape),
                       "data_offsets": [offset, offset + size]}  # fmt: skip
        parts.append(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes with spaces
    return [struct.pack("<Q", len(text)) + text, *parts]


@dataclass(frozen=True, eq=False)
class Encoding:
    """A state's canonical bytes held as :func:`encode_parts` laid them out; ``bytes(e)`` joins
    them (where a caller needs them as one)."""

    parts: tuple[Buffer, ...]

    @classmethod
    def of(cls, state: dict[str, torch.Tensor]) -> Encoding:
        """The encoding of ``state`` (viewing its tensors: see :func:`encode_parts`)."""
        return cls(tuple(encode_parts(state)))

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __reduce__(self):  # pickled (to another process) as the joined bytes
        return Encoding, ((bytes(self),),)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def digest(self) -> bytes:
        """Its content hash (:func:`state_hash` of the state)."""
        return content_hash_parts(self.parts)


def encode_state(state: dict[str, torch.Tensor]) -> bytes:
    """Canonical safetensors bytes of ``state`` (:func:`encode_parts`, joined)."""
    return b"".join(encode_parts(state))


# A header entry (a name, its dtype, shape and offsets) is ~100 bytes; a state of a model's
# tensors holds at most 4 entries a parameter tensor (a compressed pseudo-gradient's shape,
# scale and two payloads) and a few more (steps, metadata).
HEADER_BYTES_PER_ENTRY = 256


def header_bound(like: Sized) -> int:
    """The most bytes the header of a state of a model with tensors ``like`` can need."""
    return 4096 + HEADER_BYTES_PER_ENTRY * (4 * len(like) + 16)


# A state's floats are at most float32: what models train in here (float32, bfloat16).
MAX_VALUE_BYTES = 4


def state_bound(like: dict[str, torch.Tensor], value_bytes: int = MAX_VALUE_BYTES,
                copies: int = 1) -> int:  # fmt: skip
    """The most bytes an encoding of ``copies`` values of each of ``like``'s tensors, of
    ``value_bytes`` each, can take (a few scalars besides fit its header's room): what a fetch
    of such a state allows, so a peer sending junk costs no more than the state itself."""
    return copies * value_bytes * sum(t.numel() for t in like.values()) + header_bound(like)


def decode_state(data: bytes | Encoding, like: Sized | None = None) -> dict[str, torch.Tensor]:
    """Inverse of :func:`encode_state`; raises :class:`CodecError` on malformed bytes. With
    ``like`` (the model's tensors), a header larger than a state of the model's can need is
    refused before it is parsed: 600,000 empty tensors in 33 MB cost 6 s and a GB to decode."""
    if like is not None and not isinstance(data, Encoding):  # a stranger's bytes
        declared = int.from_bytes(data[:8], "little")
        bound = header_bound(like)
        if declared > bound:
            raise CodecError(f"a header of {declared} bytes, more than a state of the model's "
                             f"{len(like)} tensors needs ({bound})")  # fmt: skip
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
    return content_hash_parts(encode_parts(state))

"""Pseudo-gradient compression: blockwise int8 / int4 quantisation with error feedback.

Each tensor is flattened and cut into blocks of ``BLOCK`` values; a block stores one float32
scale (its max |value| / qmax) and its values rounded to integers in [-qmax, qmax] (qmax 127 for
int8, 7 for int4, two int4 values packed per byte). The compressed bytes are what a host hashes,
publishes and what everyone aggregates. Error feedback keeps what quantisation dropped and adds
it to the next round's pseudo-gradient, so no signal is lost over rounds.

Layout: safetensors (``training/tensor_codec.py``), per parameter ``q/NAME`` (int8 values, or
uint8 with two int4 values a byte), ``scale/NAME`` (float32, one per block) and ``shape/NAME``
(int64 dims).
"""

from __future__ import annotations

import math

import torch

from dilochain.training.tensor_codec import CodecError, decode_state, encode_state

BLOCK = 128
_QMAX = {8: 127, 4: 7}
_Q, _SCALE, _SHAPE = "q/", "scale/", "shape/"


class CompressionError(ValueError):
    """Bytes that are not a valid compressed pseudo-gradient."""


def bits_of(name: str) -> int:
    """8 for ``"int8"``, 4 for ``"int4"``."""
    return {"int8": 8, "int4": 4}[name]


def _quantize(flat: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    qmax = _QMAX[bits]
    n = flat.numel()
    padded = torch.zeros(math.ceil(n / BLOCK) * BLOCK, dtype=torch.float32)
    padded[:n] = flat
    blocks = padded.view(-1, BLOCK)
    scales = blocks.abs().amax(dim=1) / qmax
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.clamp(torch.round(blocks / safe[:, None]), -qmax, qmax).to(torch.int8).view(-1)[:n]
    return scales, q


def _pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    if bits == 8:
        return q
    nibbles = (q + 8).to(torch.uint8)
    if nibbles.numel() % 2:
        nibbles = torch.cat([nibbles, torch.zeros(1, dtype=torch.uint8)])
    pairs = nibbles.view(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4)


def _unpack(packed: torch.Tensor, n: int) -> torch.Tensor:
    if packed.dtype == torch.int8:
        return packed[:n].float()
    low, high = (packed & 0x0F).to(torch.int16) - 8, (packed >> 4).to(torch.int16) - 8
    return torch.stack([low, high], dim=1).view(-1)[:n].float()


def compress(delta: dict[str, torch.Tensor], bits: int) -> bytes:
    """Quantise a pseudo-gradient into its canonical compressed bytes."""
    out: dict[str, torch.Tensor] = {}
    for key, value in delta.items():
        tensor = value.detach().to("cpu", torch.float32).contiguous()
        scales, q = _quantize(tensor.view(-1), bits)
        out[_Q + key] = _pack(q, bits)
        out[_SCALE + key] = scales
        out[_SHAPE + key] = torch.tensor(tensor.shape, dtype=torch.int64)
    return encode_state(out)


def _tensor(parts: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    q, scales, shape = parts[_Q + key], parts[_SCALE + key], parts[_SHAPE + key]
    if shape.dtype != torch.int64 or shape.dim() != 1 or bool((shape < 0).any()):
        raise CompressionError(f"{key}: bad shape")
    dims = [int(d) for d in shape]
    numel = math.prod(dims)
    packed = {torch.int8: numel, torch.uint8: -(-numel // 2)}.get(q.dtype)
    if packed is None or q.dim() != 1 or q.numel() != packed:
        raise CompressionError(f"{key}: {q.numel()} {q.dtype} values do not fit shape {dims}")
    if scales.dtype != torch.float32 or scales.shape != (-(-numel // BLOCK),):
        raise CompressionError(f"{key}: wrong number of block scales")
    per_value = scales.repeat_interleave(BLOCK)[:numel] if numel else scales
    return (_unpack(q, numel) * per_value).view(dims)


def decompress(data: bytes) -> dict[str, torch.Tensor]:
    """The float32 pseudo-gradient that compressed bytes stand for."""
    try:
        parts = decode_state(data)
    except CodecError as err:
        raise CompressionError(f"not a compressed pseudo-gradient: {err}") from None
    names = {k[len(_Q) :] for k in parts if k.startswith(_Q)}
    expected = {prefix + n for n in names for prefix in (_Q, _SCALE, _SHAPE)}
    if set(parts) != expected:
        raise CompressionError("tensors are not q/, scale/ and shape/ of the same names")
    try:
        return {name: _tensor(parts, name) for name in sorted(names)}
    except (RuntimeError, ValueError, OverflowError) as err:
        if isinstance(err, CompressionError):
            raise
        raise CompressionError(f"malformed pseudo-gradient: {err}") from None


def compress_with_feedback(
    delta: dict[str, torch.Tensor], error: dict[str, torch.Tensor] | None, bits: int
) -> tuple[bytes, dict[str, torch.Tensor]]:
    """Compress ``delta + error``; return the bytes and the new error (what they dropped)."""
    target = {k: v + error[k] if error else v.clone() for k, v in delta.items()}
    data = compress(target, bits)
    approx = decompress(data)
    return data, {k: target[k] - approx[k] for k in target}

"""Pseudo-gradient compression: blockwise int8 / int4 quantisation with error feedback.

Each tensor is flattened and cut into blocks of ``BLOCK`` values; a block stores one float32
scale (its max |value| / qmax) and its values rounded to integers in [-qmax, qmax] (qmax 127 for
int8, 7 for int4, two int4 values packed per byte). The compressed bytes are what a host hashes,
publishes and what everyone aggregates. Error feedback keeps what quantisation dropped and adds
it to the next round's pseudo-gradient, so no signal is lost over rounds.

Layout: ``b"DLQ1"``, bits (u8), block (u32), count (u32); per tensor in sorted key order: key
(u16 + UTF-8), rank (u8), dims (u64 each), the float32 scales, then the packed integers.
"""

from __future__ import annotations

import math
import struct

import torch

MAGIC = b"DLQ1"
BLOCK = 128
_QMAX = {8: 127, 4: 7}


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


def _pack(q: torch.Tensor, bits: int) -> bytes:
    if bits == 8:
        return q.numpy().tobytes()
    nibbles = (q + 8).to(torch.uint8)
    if nibbles.numel() % 2:
        nibbles = torch.cat([nibbles, torch.zeros(1, dtype=torch.uint8)])
    pairs = nibbles.view(-1, 2)
    return (pairs[:, 0] | (pairs[:, 1] << 4)).numpy().tobytes()


def _unpack(data: bytes, n: int, bits: int) -> torch.Tensor:
    raw = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if data
        else torch.empty(0, dtype=torch.uint8)
    )
    if bits == 8:
        return raw.view(torch.int8)[:n].float()
    low, high = (raw & 0x0F).to(torch.int16) - 8, (raw >> 4).to(torch.int16) - 8
    return torch.stack([low, high], dim=1).view(-1)[:n].float()


def compress(delta: dict[str, torch.Tensor], bits: int) -> bytes:
    """Quantise a pseudo-gradient into its canonical compressed bytes."""
    parts = [MAGIC, struct.pack("<BII", bits, BLOCK, len(delta))]
    for key in sorted(delta):
        tensor = delta[key].detach().to("cpu", torch.float32).contiguous()
        scales, q = _quantize(tensor.view(-1), bits)
        name = key.encode()
        parts.append(struct.pack("<H", len(name)) + name)
        parts.append(
            struct.pack("<B", tensor.dim()) + struct.pack(f"<{tensor.dim()}Q", *tensor.shape)
        )
        parts.append(scales.numpy().astype("<f4").tobytes())
        parts.append(_pack(q, bits))
    return b"".join(parts)


def decompress(data: bytes) -> dict[str, torch.Tensor]:
    """The float32 pseudo-gradient that compressed bytes stand for."""
    try:
        if data[:4] != MAGIC:
            raise CompressionError("not a compressed pseudo-gradient")
        bits, block, count = struct.unpack_from("<BII", data, 4)
        if bits not in _QMAX or block != BLOCK:
            raise CompressionError(f"unsupported bits={bits} block={block}")
        pos, out = 13, {}
        for _ in range(count):
            (n,) = struct.unpack_from("<H", data, pos)
            key = data[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (rank,) = struct.unpack_from("<B", data, pos)
            shape = struct.unpack_from(f"<{rank}Q", data, pos + 1)
            pos += 1 + 8 * rank
            numel = math.prod(shape)
            n_blocks = -(-numel // BLOCK)
            size = numel if bits == 8 else -(-numel // 2)
            # Checked against the bytes present before anything is allocated.
            if max(shape, default=0) >= 1 << 63 or 4 * n_blocks + size > len(data) - pos:
                raise CompressionError(f"{key}: shape {shape} does not fit the data")
            scales = torch.frombuffer(
                bytearray(data[pos : pos + 4 * n_blocks]), dtype=torch.float32
            )
            pos += 4 * n_blocks
            q = _unpack(data[pos : pos + size], numel, bits)
            pos += size
            if q.numel() != numel or scales.numel() != n_blocks:
                raise CompressionError(f"{key}: truncated")
            per_value = scales.repeat_interleave(BLOCK)[:numel] if numel else scales
            out[key] = (q * per_value).view(shape)
        if pos != len(data):
            raise CompressionError("trailing bytes")
        return out
    except (struct.error, UnicodeDecodeError, RuntimeError, ValueError, TypeError,
            OverflowError) as err:  # fmt: skip
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

"""Pseudo-gradient compression with error feedback: blockwise int8 / int4 quantisation, and DCT
top-k sparsification (DeMo-style).

The compressor is a run's choice (``RunConfig.compression``, names in
:mod:`dilochain.protocol.compression`); its bytes are what a host hashes, publishes and commits,
what verifiers screen and what everyone aggregates.

- ``int8`` / ``int4``: each tensor is flattened and cut into blocks of ``BLOCK`` values; a block
  stores one float32 scale (its max |value| / qmax) and its values rounded to integers in
  [-qmax, qmax] (qmax 127 for int8, 7 for int4, two int4 values packed per byte).
- ``dct-topK``: each tensor is flattened and cut into chunks of ``DCT_CHUNK`` values; a chunk
  keeps the K largest of its orthonormal DCT-II coefficients: their indices (uint8), their values
  int8-quantised and one float32 scale. ``dct-top4`` is 12 bytes per 64 values (0.19 bytes a
  parameter, against 4 for float32).
- ``dct-signK``: the same K coefficients a chunk, sent as a 64-bit mask of their positions, one
  sign bit each and one bfloat16 scale, the chunk's largest coefficient magnitude: each is
  decoded as ±scale. ``dct-sign16`` is also 12 bytes per 64 values, for four times the
  coefficients. Every kept coefficient but the largest is overshot; error feedback takes the
  overshoot back the next round (the residual stays bounded, tested), and at equal bytes it
  trained to a lower loss than the scales that overshoot less (docs/DESIGN.md).

Decoding is elementwise float32 arithmetic in a fixed order (the inverse DCT adds the K basis
rows one after another), so every party decodes the same bytes to the same bits; the basis is
rounded to float32 from values far from any float32 rounding boundary (tested), so every libm
gives the same one.

Error feedback keeps what compression dropped (the residual) and adds it to the next round's
pseudo-gradient, so no signal is lost over rounds. The residual is part of what a host commits:
``residual_out = (Δ + residual_in) - decompress(bytes)``, computed with :func:`feedback_target`
and :func:`residual_after` by the host and by every verifier, bit for bit.

Layout: safetensors (``training/tensor_codec.py``), per parameter ``shape/NAME`` (int64 dims),
``scale/NAME`` and either ``q/NAME`` (quantised: int8 values, or uint8 with two int4 values a
byte; float32 scales), ``idx/NAME`` (uint8) and ``coef/NAME`` (int8) for DCT top-k (float32
scales), or ``mask/NAME`` (uint8, eight a chunk: bit p of byte p // 8 is position p) and
``sign/NAME`` (uint8: the chunks' kept coefficients in order, bit i of byte i // 8 set for a
negative one) for DCT signs (bfloat16 scales).
"""

from __future__ import annotations

import functools
import math

import torch

from dilochain.protocol.compression import (
    DCT_CHUNK,
    DCT_MAX_TOP,
    compression_problem,
    dct_signs,
    dct_top_k,
)
from dilochain.training.tensor_codec import CodecError, decode_state, encode_state, header_bound

BLOCK = 128
_QMAX = {8: 127, 4: 7}
_BITS = {"int8": 8, "int4": 4}
_Q, _SCALE, _SHAPE, _IDX, _COEF = "q/", "scale/", "shape/", "idx/", "coef/"
_MASK, _SIGN = "mask/", "sign/"
_PAYLOADS = ((_Q,), (_IDX, _COEF), (_MASK, _SIGN))  # quantised, DCT top-k, DCT signs

Tensors = dict[str, torch.Tensor]


class CompressionError(ValueError):
    """Bytes that are not a valid compressed pseudo-gradient."""


@functools.cache
def dct_basis() -> tuple[torch.Tensor, torch.Tensor]:
    """The orthonormal DCT-II basis of a chunk (row j = frequency j), in float64 (to choose and
    quantise coefficients) and rounded to float32 (to decode)."""
    n = DCT_CHUNK
    freq = torch.arange(n, dtype=torch.float64)[:, None]
    pos = torch.arange(n, dtype=torch.float64)[None, :]
    basis = torch.cos(math.pi * (2 * pos + 1) * freq / (2 * n)) * math.sqrt(2 / n)
    basis[0] = math.sqrt(1 / n)
    return basis, basis.float()


def _blocks(flat: torch.Tensor, size: int, dtype: torch.dtype) -> torch.Tensor:
    padded = torch.zeros(math.ceil(flat.numel() / size) * size, dtype=dtype)
    padded[: flat.numel()] = flat
    return padded.view(-1, size)


def _int8_with_scale(values: torch.Tensor, qmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of float32 ``values`` as integers in [-qmax, qmax] and one scale per row."""
    scales = values.abs().amax(dim=1) / qmax
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.clamp(torch.round(values / safe[:, None]), -qmax, qmax).to(torch.int8)
    return q, scales


def _pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    if bits == 8:
        return q
    nibbles = (q + 8).to(torch.uint8)
    if nibbles.numel() % 2:
        nibbles = torch.cat([nibbles, torch.zeros(1, dtype=torch.uint8)])
    pairs = nibbles.view(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4)


def _quantised(flat: torch.Tensor, bits: int) -> Tensors:
    q, scales = _int8_with_scale(_blocks(flat, BLOCK, torch.float32), _QMAX[bits])
    return {_Q: _pack(q.view(-1)[: flat.numel()], bits), _SCALE: scales}


def _largest(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each chunk's DCT coefficients (float64) and the positions of its ``k`` largest, ascending
    (ties to the lower position)."""
    coeffs = _blocks(flat, DCT_CHUNK, torch.float64) @ dct_basis()[0].T
    largest = torch.sort(coeffs.abs(), dim=1, descending=True, stable=True).indices[:, :k]
    return coeffs, largest.sort(dim=1).values


def _dct_top(flat: torch.Tensor, k: int) -> Tensors:
    coeffs, idx = _largest(flat, k)
    q, scales = _int8_with_scale(coeffs.gather(1, idx).float(), 127)
    return {_IDX: idx.to(torch.uint8).view(-1), _COEF: q.view(-1), _SCALE: scales}


def _bits(flags: torch.Tensor) -> torch.Tensor:
    """Booleans packed eight a byte, bit i of byte i // 8 (zero-padded)."""
    padded = torch.zeros(-(-flags.numel() // 8) * 8, dtype=torch.uint8)
    padded[: flags.numel()] = flags.reshape(-1)
    return (padded.view(-1, 8) << torch.arange(8, dtype=torch.uint8)).sum(1, dtype=torch.uint8)


def _unbits(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` booleans of bytes that :func:`_bits` packed."""
    return ((packed[:, None] >> torch.arange(8, dtype=torch.uint8)) & 1).view(-1)[:n].bool()


def _dct_sign(flat: torch.Tensor, k: int) -> Tensors:
    coeffs, idx = _largest(flat, k)
    kept = torch.zeros(coeffs.shape, dtype=torch.bool).scatter(1, idx, True)
    scales = coeffs.abs().amax(dim=1).float().to(torch.bfloat16)
    return {_MASK: _bits(kept), _SIGN: _bits(coeffs.gather(1, idx) < 0), _SCALE: scales}


def compress(delta: Tensors, name: str) -> bytes:
    """``delta`` compressed by the compressor ``name``, as canonical bytes."""
    problem = compression_problem(name)
    if problem is not None:
        raise ValueError(problem)
    k = dct_top_k(name)
    out: Tensors = {}
    for key, value in delta.items():
        tensor = value.detach().to("cpu", torch.float32).contiguous()
        flat = tensor.view(-1)
        if k is None:
            parts = _quantised(flat, _BITS[name])
        else:
            parts = _dct_sign(flat, k) if dct_signs(name) else _dct_top(flat, k)
        out.update({prefix + key: part for prefix, part in parts.items()})
        out[_SHAPE + key] = torch.tensor(tensor.shape, dtype=torch.int64)
    return encode_state(out)


def _layout(numel: int, name: str) -> dict[str, tuple[torch.dtype, int]]:
    """What :func:`compress` by ``name`` stores for a tensor of ``numel`` values, besides its
    shape: each payload's (dtype, number of elements). A fixed layout, whatever the values."""
    k = dct_top_k(name)
    if k is None:
        packed = torch.int8 if _BITS[name] == 8 else torch.uint8
        return {_Q: (packed, -(-numel * _BITS[name] // 8)),
                _SCALE: (torch.float32, -(-numel // BLOCK))}  # fmt: skip
    chunks = -(-numel // DCT_CHUNK)
    if dct_signs(name):
        return {_MASK: (torch.uint8, chunks * DCT_CHUNK // 8),
                _SIGN: (torch.uint8, -(-chunks * k // 8)),
                _SCALE: (torch.bfloat16, chunks)}  # fmt: skip
    return {_IDX: (torch.uint8, chunks * k), _COEF: (torch.int8, chunks * k),
            _SCALE: (torch.float32, chunks)}  # fmt: skip


def _payload_bytes(numel: int, name: str) -> int:
    """The bytes :func:`compress` stores for a tensor of ``numel`` values (its scales
    included, its shape not)."""
    return sum(dtype.itemsize * count for dtype, count in _layout(numel, name).values())


def max_compressed_bytes(like: Tensors, name: str) -> int:
    """The most bytes a pseudo-gradient of a model with tensors ``like``, compressed by
    ``name``, can take: what a fetch of one allows (a peer sending junk costs a fetcher no
    more than the pseudo-gradient it asked for)."""
    values = sum(_payload_bytes(t.numel(), name) + 8 * t.dim() for t in like.values())
    return values + header_bound(like)


def _unpack(packed: torch.Tensor, n: int) -> torch.Tensor:
    if packed.dtype == torch.int8:
        return packed[:n].float()
    low, high = (packed & 0x0F).to(torch.int16) - 8, (packed >> 4).to(torch.int16) - 8
    return torch.stack([low, high], dim=1).view(-1)[:n].float()


def _dequantised(q: torch.Tensor, scales: torch.Tensor, numel: int, key: str) -> torch.Tensor:
    packed = {torch.int8: numel, torch.uint8: -(-numel // 2)}.get(q.dtype)
    if packed is None or q.dim() != 1 or q.numel() != packed:
        raise CompressionError(f"{key}: {q.numel()} {q.dtype} values do not fit {numel} values")
    if scales.shape != (-(-numel // BLOCK),):
        raise CompressionError(f"{key}: wrong number of block scales")
    per_value = scales.repeat_interleave(BLOCK)[:numel] if numel else scales
    return _unpack(q, numel) * per_value


def _inverse_dct(
    idx: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, numel: int, key: str
) -> torch.Tensor:
    chunks = -(-numel // DCT_CHUNK)
    if scales.shape != (chunks,) or idx.dtype != torch.uint8 or q.dtype != torch.int8:
        raise CompressionError(f"{key}: wrong number of chunk scales or wrong dtypes")
    k = q.numel() // chunks if chunks else 0
    if idx.shape != q.shape or q.dim() != 1 or q.numel() != k * chunks or k > DCT_MAX_TOP:
        raise CompressionError(f"{key}: {q.numel()} coefficients do not fit {chunks} chunks")
    if bool((idx >= DCT_CHUNK).any()):
        raise CompressionError(f"{key}: coefficient index out of the chunk")
    return _synthesised(q.view(chunks, k).float() * scales[:, None], idx.view(chunks, k).long())


def _inverse_dct_signs(
    mask: torch.Tensor, sign: torch.Tensor, scales: torch.Tensor, numel: int, key: str
) -> torch.Tensor:
    chunks = -(-numel // DCT_CHUNK)
    if scales.shape != (chunks,) or mask.shape != (chunks * DCT_CHUNK // 8,):
        raise CompressionError(f"{key}: wrong number of chunk scales or position masks")
    if mask.dtype != torch.uint8 or sign.dtype != torch.uint8 or sign.dim() != 1:
        raise CompressionError(f"{key}: masks and signs are not uint8 vectors")
    kept = _unbits(mask, chunks * DCT_CHUNK).view(chunks, DCT_CHUNK)
    k = int(kept[0].sum()) if chunks else 0
    if not bool((kept.sum(1) == k).all()) or k > DCT_MAX_TOP:
        raise CompressionError(f"{key}: chunks keep different numbers of coefficients")
    if sign.numel() != -(-chunks * k // 8):
        raise CompressionError(f"{key}: {sign.numel()} sign bytes do not fit {chunks * k} signs")
    negative = _unbits(sign, chunks * k).view(chunks, k)
    coef = torch.where(negative, -1.0, 1.0) * scales.float()[:, None]
    return _synthesised(coef, kept.nonzero()[:, 1].view(chunks, k))


def _synthesised(coef: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The chunks (flattened) whose DCT coefficients at positions ``rows`` are ``coef``."""
    basis = dct_basis()[1]
    out = torch.zeros(coef.shape[0], DCT_CHUNK)
    for t in range(coef.shape[1]):  # one basis row at a time: a fixed order of float32 additions
        out = out + coef[:, t : t + 1] * basis[rows[:, t]]
    return out.view(-1)


MAX_DIMS = 8  # a shape tensor longer than this is no model's


def _shape_problem(shape: torch.Tensor) -> bool:
    """Whether ``shape`` is not a shape: int64, one dimension, at most :data:`MAX_DIMS` sizes,
    none negative."""
    return (shape.dtype != torch.int64 or shape.dim() != 1 or shape.numel() > MAX_DIMS
            or bool((shape < 0).any()))  # fmt: skip


def _tensor(parts: Tensors, key: str) -> torch.Tensor:
    scales, shape = parts[_SCALE + key], parts[_SHAPE + key]
    if _shape_problem(shape):
        raise CompressionError(f"{key}: bad shape")
    signs = _MASK + key in parts
    wanted = torch.bfloat16 if signs else torch.float32
    if scales.dtype != wanted or scales.dim() != 1:
        raise CompressionError(f"{key}: scales are not a {wanted} vector")
    dims = [int(d) for d in shape]
    numel = math.prod(dims)
    if _Q + key in parts:
        return _dequantised(parts[_Q + key], scales, numel, key).view(dims)
    if signs:
        decoded = _inverse_dct_signs(parts[_MASK + key], parts[_SIGN + key], scales, numel, key)
    else:
        decoded = _inverse_dct(parts[_IDX + key], parts[_COEF + key], scales, numel, key)
    return decoded[:numel].view(dims)


def decompress(data: bytes, like: Tensors | None = None, name: str | None = None) -> Tensors:
    """The float32 pseudo-gradient that compressed bytes stand for. With ``like`` (the model's
    tensors), the names and shapes the bytes declare must be exactly those before anything is
    decoded: a few megabytes declaring a billion values cost nothing. With ``name`` (the run's
    compressor), so must every payload's dtype and size: another compressor's layout of the
    same bytes can cost many times the decoding (DCT top-31 fits an int8 run's bytes, 16 times)."""
    try:
        parts = decode_state(data, like)
    except CodecError as err:
        raise CompressionError(f"not a compressed pseudo-gradient: {err}") from None
    names = {k[len(_SHAPE) :] for k in parts if k.startswith(_SHAPE)}
    for n in names:  # before any value is read: a float shape of NaN, a million dimensions
        if _shape_problem(parts[_SHAPE + n]):
            raise CompressionError(f"{n}: bad shape")
    if like is not None:
        declared = {n: tuple(parts[_SHAPE + n].tolist()) for n in names}
        if declared != {n: tuple(t.shape) for n, t in like.items()}:
            raise CompressionError("its tensors are not the model's (names or shapes differ)")
    expected = set()
    for n in names:
        payload = next((p for p in _PAYLOADS if p[0] + n in parts), _PAYLOADS[0])
        expected |= {prefix + n for prefix in (_SHAPE, _SCALE, *payload)}
    if set(parts) != expected:
        raise CompressionError("tensors are not shape/, scale/ and q/ (or idx/ and coef/, or "
                               "mask/ and sign/) of the same names")  # fmt: skip
    for n in names if name is not None else ():
        numel = math.prod(int(d) for d in parts[_SHAPE + n])
        for prefix, (dtype, count) in _layout(numel, name).items():
            part = parts.get(prefix + n)
            if part is None or part.dtype != dtype or part.numel() != count:
                raise CompressionError(f"{n}: not the layout of the run's compressor {name}")
    try:
        return {name: _tensor(parts, name) for name in sorted(names)}
    except (RuntimeError, ValueError, OverflowError) as err:
        if isinstance(err, CompressionError):
            raise
        raise CompressionError(f"malformed pseudo-gradient: {err}") from None


def feedback_target(delta: Tensors, residual: Tensors | None) -> Tensors:
    """What a round compresses: its pseudo-gradient plus the residual its last round left
    (exactly ``delta`` when there is none)."""
    if residual is None:
        return dict(delta)
    return {k: v + residual[k] for k, v in delta.items()}


# A residual is kept (and published, and checked) in bfloat16: half the bytes of float32 (16 GB
# less a round for each host of an 8B model), and it holds what compression dropped, whose own
# rounding error (2^-8 of it) is far below what the next round's compression drops again.
RESIDUAL_DTYPE = torch.bfloat16


def residual_after(target: Tensors, decoded: Tensors) -> Tensors:
    """What compressing ``target`` dropped, in :data:`RESIDUAL_DTYPE`: the residual a round
    leaves to the next (every party rounds it alike, so hosts and verifiers hash the same)."""
    return {k: (target[k] - decoded[k]).to(RESIDUAL_DTYPE) for k in target}


def compress_with_feedback(
    delta: Tensors, residual: Tensors | None, name: str
) -> tuple[bytes, Tensors]:
    """Compress ``delta`` plus the last residual; return the bytes and the new residual."""
    target = feedback_target(delta, residual)
    data = compress(target, name)
    return data, residual_after(target, decompress(data))

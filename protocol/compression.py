"""The names of the pseudo-gradient compressors a run may choose (``RunConfig.compression``).

Defined here, without torch, so the chain can validate a run's choice and the training code can
dispatch on it: ``int8`` and ``int4`` (blockwise quantisation), ``dct-topK`` (the K largest of
every chunk of ``DCT_CHUNK`` DCT coefficients, int8-quantised, as in DeMo) and ``dct-signK``
(the same K coefficients sent as their positions and signs, with one scale a chunk).
"""

from __future__ import annotations

import re

DCT_CHUNK = 64
DCT_MAX_TOP = 32
_DCT = re.compile(r"dct-(top|sign)([1-9][0-9]?)")


def dct_top_k(name: str) -> int | None:
    """K of a ``dct-topK`` or ``dct-signK`` name (None for any other name)."""
    match = _DCT.fullmatch(name)
    return int(match.group(2)) if match else None


def dct_signs(name: str) -> bool:
    """Whether ``name`` is a ``dct-signK`` compressor (coefficients sent as signs)."""
    return name.startswith("dct-sign")


def compression_problem(name: str) -> str | None:
    """Why ``name`` is not a compressor (None if it is one)."""
    if name in ("int8", "int4"):
        return None
    k = dct_top_k(name)
    if k is not None and k <= DCT_MAX_TOP:
        return None
    return (f"compression must be int8, int4, dct-topK or dct-signK with K in 1..{DCT_MAX_TOP}, "
            f"not {name!r}")  # fmt: skip

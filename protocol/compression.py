"""The names of the pseudo-gradient compressors a run may choose (``RunConfig.compression``).

Defined here, without torch, so the chain can validate a run's choice and the training code can
dispatch on it: ``int8`` and ``int4`` (blockwise quantisation), ``dct-topK`` (the K largest of
every chunk of ``DCT_CHUNK`` DCT coefficients, int8-quantised, as in DeMo).
"""

from __future__ import annotations

import re

DCT_CHUNK = 64
DCT_MAX_TOP = 32
_DCT = re.compile(r"dct-top([1-9][0-9]?)")


def dct_top_k(name: str) -> int | None:
    """K of a ``dct-topK`` name (None for any other name)."""
    match = _DCT.fullmatch(name)
    return int(match.group(1)) if match else None


def compression_problem(name: str) -> str | None:
    """Why ``name`` is not a compressor (None if it is one)."""
    if name in ("int8", "int4"):
        return None
    k = dct_top_k(name)
    if k is not None and k <= DCT_MAX_TOP:
        return None
    return f"compression must be int8, int4 or dct-topK with K in 1..{DCT_MAX_TOP}, not {name!r}"

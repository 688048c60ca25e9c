"""The canonical state encoding: byte for byte what safetensors writes, laid out as parts that
hash and join to the same bytes, and decoded back to the same tensors."""

from __future__ import annotations

import hashlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from dilochain.protocol.hashing import content_hash_parts
from dilochain.training.tensor_codec import (
    METADATA,
    CodecError,
    decode_state,
    encode_parts,
    encode_state,
    state_hash,
)

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int8, torch.uint8]  # fmt: skip
NAMES = st.text(st.sampled_from('abz_.09AZ"\\\n\u00e9\u2028\U0001f600'), min_size=1, max_size=12)


@st.composite
def tensors(draw) -> torch.Tensor:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    seed = draw(st.integers(0, 2**31))
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 50
    return values.to(dtype)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(NAMES, tensors(), min_size=1, max_size=8))
def test_the_encoding_is_what_safetensors_writes(state):
    expected = save(state, metadata=METADATA)
    parts = encode_parts(state)
    assert b"".join(parts) == encode_state(state) == expected
    assert content_hash_parts(parts) == state_hash(state) == hashlib.sha256(expected).digest()
    decoded = decode_state(expected)
    assert decoded.keys() == state.keys()
    for key, value in state.items():
        assert decoded[key].dtype == value.dtype and torch.equal(decoded[key], value)


def test_parts_view_the_tensors_without_copying_them():
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.zeros(2)}
    header, *rest = encode_parts(state)
    assert isinstance(header, bytes) and all(isinstance(p, memoryview) for p in rest)
    state["w"][0, 0] = 7.0  # a view: snapshot before encoding what training changes
    assert decode_state(b"".join([header, *rest]))["w"][0, 0] == 7.0


def test_a_dtype_it_does_not_encode_is_refused():
    with pytest.raises(CodecError, match="unsupported dtype"):
        encode_parts({"flag": torch.zeros(2, dtype=torch.bool)})


def test_a_header_larger_than_the_model_s_state_needs_is_refused_before_it_is_parsed():
    """A stranger's artifact of 600,000 empty tensors cost a verifier 6 s and a GB to decode,
    before any name was compared with the model's: against the model, its header is refused
    by its declared length alone; the model's own states decode as ever."""
    like = {f"layer{i}.weight": torch.zeros(2, 2) for i in range(3)}
    own = {**like, **{f"momentum/{n}": t for n, t in like.items()}}
    assert decode_state(encode_state(own), like).keys() == own.keys()
    crafted = encode_state({f"t{i:06d}": torch.zeros(0) for i in range(2000)})
    assert len(decode_state(crafted)) == 2000  # without the model: nothing to bound it by
    with pytest.raises(CodecError, match="more than a state of the model's 3 tensors needs"):
        decode_state(crafted, like)

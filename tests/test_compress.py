"""Pseudo-gradient compressors: error bounds, sizes, error feedback, DCT top-k and signs,
determinism of decoding, names and malformed bytes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.protocol.compression import DCT_CHUNK, compression_problem, dct_signs, dct_top_k
from dilochain.training.compress import (
    CompressionError,
    compress,
    compress_with_feedback,
    dct_basis,
    decompress,
    max_compressed_bytes,
)
from dilochain.training.tensor_codec import decode_state, encode_state, header_bound

NAMES = ["int8", "int4", "dct-top4", "dct-top16", "dct-sign4", "dct-sign16"]


def _norm(tensors: dict[str, torch.Tensor]) -> float:
    return sum(float(v.double().norm() ** 2) for v in tensors.values()) ** 0.5


@pytest.mark.parametrize("bits", [8, 4])
def test_quantisation_error_is_bounded(bits):
    delta = {"w": torch.randn(1000) * 0.01, "b": torch.randn(3, 7)}
    back = decompress(compress(delta, f"int{bits}"))
    qmax = {8: 127, 4: 7}[bits]
    for k, v in delta.items():
        assert back[k].shape == v.shape
        assert float((back[k] - v).abs().max()) <= float(v.abs().max()) / qmax / 2 + 1e-7


@pytest.mark.parametrize(
    ("name", "ratio"), [("int8", 3.8), ("int4", 7.3), ("dct-top4", 20.5), ("dct-sign16", 20.2)]
)
def test_compressed_size(name, ratio):
    # Headers (~150 bytes a tensor) aside: int8 / int4 values plus a scale per block of 128;
    # dct-top4 four (index, value) byte pairs plus a float32 scale per chunk of 64; dct-sign16
    # a 64-bit position mask, 16 sign bits and a bfloat16 scale per chunk.
    large = {"w": torch.randn(100_000), "b": torch.randn(300, 70)}
    got = sum(v.numel() * 4 for v in large.values()) / len(compress(large, name))
    assert got > ratio, got


def test_dct_top_k_keeps_the_largest_frequencies():
    basis = dct_basis()[0].float()
    # Orthonormal: its own inverse.
    assert torch.allclose(basis @ basis.T, torch.eye(DCT_CHUNK), atol=1e-6)
    # A signal made of four frequencies per chunk comes back up to int8 rounding ...
    coeffs = torch.zeros(50, DCT_CHUNK)
    for row, freqs in enumerate(torch.randint(0, DCT_CHUNK, (50, 4)).tolist()):
        coeffs[row, freqs] = torch.randn(len(freqs))
    signal = {"w": (coeffs @ basis).reshape(10, 320)}
    back = decompress(compress(signal, "dct-top4"))["w"]
    assert float((back - signal["w"]).norm() / signal["w"].norm()) < 0.01
    # ... and a smooth one nearly so, while noise loses most of its energy.
    smooth = {"w": torch.sin(torch.linspace(0, 20, 64 * 100))}
    assert float((decompress(compress(smooth, "dct-top4"))["w"] - smooth["w"]).norm()) < 0.01 * 80
    noise = {"w": torch.randn(6400)}
    kept = decompress(compress(noise, "dct-top4"))["w"]
    assert 0.25 < float(kept.norm() / noise["w"].norm()) < 0.6


def test_dct_signs_send_the_largest_coefficients_as_signs_of_the_largest_magnitude():
    basis = dct_basis()[0].float()
    coeffs = torch.zeros(2, DCT_CHUNK)
    coeffs[0, [3, 9, 20, 40, 63]] = torch.tensor([0.5, -2.0, 0.25, -0.125, 0.01])
    coeffs[1, [0, 1, 2, 5, 6]] = torch.tensor([-1.5, 0.75, 0.1, -0.2, 0.05])
    back = decompress(compress({"w": coeffs @ basis}, "dct-sign4"))["w"].view(2, DCT_CHUNK)
    got = back.double() @ basis.double().T
    expected = torch.zeros(2, DCT_CHUNK, dtype=torch.float64)
    expected[0, [3, 9, 20, 40]] = torch.tensor([2.0, -2.0, 2.0, -2.0], dtype=torch.float64)
    expected[1, [0, 1, 2, 5]] = torch.tensor([-1.5, 1.5, 1.5, -1.5], dtype=torch.float64)
    assert torch.allclose(got, expected, atol=1e-5)


def test_dct_basis_rounds_to_float32_the_same_everywhere():
    """Every float64 basis value is thousands of float64 ulps from a float32 rounding boundary,
    so any cosine within that accuracy rounds to the same float32 basis (decoding is then the
    same bits on every machine)."""
    b64, b32 = dct_basis()
    for value, rounded in zip(b64.flatten().tolist(), b32.flatten().tolist(), strict=True):
        f = torch.tensor(rounded, dtype=torch.float32)
        up = float(torch.nextafter(f, torch.tensor(float("inf"))))
        down = float(torch.nextafter(f, torch.tensor(float("-inf"))))
        boundaries = ((rounded + up) / 2, (rounded + down) / 2)
        ulp = abs(value) * 2.0**-52
        assert min(abs(value - m) for m in boundaries) > 4096 * ulp, value


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(NAMES),
    st.lists(st.integers(0, 70), min_size=0, max_size=3),
    st.floats(1e-6, 1e3),
    st.integers(0, 2**31),
)
def test_any_tensor_round_trips_deterministically(name, shape, scale, seed):
    x = {"t": torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale}
    data = compress(x, name)
    assert compress({k: v.clone() for k, v in x.items()}, name) == data
    back = decompress(data)
    assert back["t"].shape == x["t"].shape and back["t"].dtype == torch.float32
    assert bool(torch.isfinite(back["t"]).all())
    if dct_signs(name):  # K coefficients of a chunk, each at most its largest: √K its norm
        bound = 1.01 * dct_top_k(name) ** 0.5 * float(x["t"].norm()) + 1e-6
        assert float(back["t"].norm()) <= bound
    else:  # never adds energy beyond rounding: dropping coefficients of an orthonormal transform
        assert float((back["t"] - x["t"]).norm()) <= 1.01 * float(x["t"].norm()) + 1e-6
    assert torch.equal(decompress(data)["t"], back["t"])


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([*NAMES, "dct-top1", "dct-top32", "dct-sign1", "dct-sign32"]),
    st.lists(st.lists(st.integers(1, 300), min_size=0, max_size=3), min_size=1, max_size=4),
)
def test_a_pseudo_gradient_of_any_model_fits_the_bound_its_fetch_allows(name, shapes):
    """A fetch of a pseudo-gradient stops past :func:`max_compressed_bytes`: every honest one
    must fit, and the bound is its size but for the header's room (the layout is fixed). The
    run's compressor's layout is required before decoding: another compressor's, though it
    fit the bytes, could cost many times the decoding."""
    like = {f"layer{i}.w": torch.randn(shape) for i, shape in enumerate(shapes)}
    data = compress(like, name)
    size, bound = len(data), max_compressed_bytes(like, name)
    assert size <= bound < size + header_bound(like)
    assert decompress(data, like, name).keys() == like.keys()
    other = "dct-top31" if name != "dct-top31" else "int8"
    with pytest.raises(CompressionError, match=f"not the layout of the run's compressor {other}"):
        decompress(data, like, other)


@pytest.mark.parametrize("name", NAMES)
def test_error_feedback_carries_what_compression_dropped(name):
    torch.manual_seed(0)
    deltas = [{"w": torch.randn(512) * 0.01} for _ in range(20)]
    residual, sent, rounding = None, torch.zeros(512), 0.0
    for delta in deltas:
        data, residual = compress_with_feedback(delta, residual, name)
        sent += decompress(data)["w"]
        assert residual["w"].dtype == torch.bfloat16
        rounding += 2**-9 * float(residual["w"].abs().max())  # bf16's half unit in the last place
    true = sum(d["w"] for d in deltas)
    # What was sent plus what is still owed equals the true sum, up to float error and the
    # residual's rounding to bfloat16 each round ...
    assert float((sent + residual["w"] - true).abs().max()) <= rounding + 1e-5
    # ... and what is owed stays bounded instead of growing with the rounds.
    assert _norm(residual) < _norm({"w": true}) * (0.2 if name.startswith("int") else 1.0)


def test_compressor_names():
    for ok in ("int8", "int4", "dct-top1", "dct-top4", "dct-top32", "dct-sign1", "dct-sign32"):
        assert compression_problem(ok) is None, ok
    for bad in ("", "int2", "fp4", "dct-top0", "dct-top33", "dct-top04", "DCT-top4", "dct-4",
                "dct-sign0", "dct-sign33", "dct-signs16"):  # fmt: skip
        assert compression_problem(bad) is not None, bad
    assert dct_top_k("dct-top8") == dct_top_k("dct-sign8") == 8 and dct_top_k("int8") is None
    assert dct_signs("dct-sign8") and not dct_signs("dct-top8")
    with pytest.raises(ValueError):
        compress({"w": torch.ones(3)}, "dct-top33")


def test_compressed_garbage_is_rejected():
    good = compress({"w": torch.ones(5)}, "int8")
    parts = decode_state(good)
    dct = decode_state(compress({"w": torch.ones(100)}, "dct-top4"))
    signs = decode_state(compress({"w": torch.randn(100)}, "dct-sign4"))  # 2 chunks, 8 signs
    uneven = signs["mask/w"].clone()
    uneven[0] |= 0xFF  # the first chunk keeps more coefficients than the second
    mismatched = [
        {**parts, "shape/w": torch.tensor([6])},  # more values than sent
        {**parts, "shape/w": torch.tensor([-5])},
        {**parts, "scale/w": torch.ones(2)},  # one block, two scales
        {**parts, "q/w": parts["q/w"].float()},
        {k: v for k, v in parts.items() if k != "scale/w"},
        {**parts, "extra": torch.ones(1)},
        {**dct, "idx/w": torch.full_like(dct["idx/w"], 64)},  # index outside the chunk
        {**dct, "coef/w": dct["coef/w"][:-1]},  # fewer values than indices
        {**dct, "idx/w": dct["idx/w"][:-1], "coef/w": dct["coef/w"][:-1]},  # 7 for 2 chunks
        {**dct, "coef/w": dct["coef/w"].to(torch.uint8)},
        {k: v for k, v in dct.items() if k != "idx/w"},
        {**signs, "mask/w": signs["mask/w"][:-1]},  # a chunk without its mask
        {**signs, "mask/w": uneven},
        {**signs, "mask/w": torch.full_like(signs["mask/w"], 0xFF)},  # 64 kept: above K's bound
        {**signs, "sign/w": torch.cat([signs["sign/w"], signs["sign/w"]])},  # 16 signs for 8
        {**signs, "scale/w": signs["scale/w"].float()},  # float32 scales: not this layout
        {**signs, "sign/w": signs["sign/w"].to(torch.int8)},
        {k: v for k, v in signs.items() if k != "sign/w"},
    ]
    for bad in [b"", b"DLQ1", good[:-1], good + b"x", *map(encode_state, mismatched)]:
        with pytest.raises(CompressionError):
            decompress(bad)


def test_a_shape_that_is_not_a_shape_is_a_compression_error_before_any_value_is_read():
    """A shape/ tensor of NaN or inf raised ValueError or OverflowError out of the checks (an
    honest host aggregating it stopped, and again at every restart), and one of a million
    entries cost seconds of Python ints per blob before it was compared."""
    model = {"w": torch.zeros(4, 25)}
    parts = decode_state(compress({"w": torch.randn(4, 25)}, "int8"))
    for shape in (torch.tensor([float("nan"), 25.0]), torch.tensor([float("inf"), 1.0]),
                  torch.zeros(1_000_000, dtype=torch.int64), torch.tensor([[4, 25]])):  # fmt: skip
        bad = encode_state({**parts, "shape/w": shape})
        for like in (model, None):
            with pytest.raises(CompressionError, match="bad shape"):
                decompress(bad, like)


def test_declared_sizes_are_checked_against_the_model_before_decoding():
    """A few kilobytes declaring a billion values (every chunk of a DCT layout is a handful of
    bytes) is refused against the model's own tensors before anything is allocated."""
    model = {"w": torch.zeros(4, 25), "b": torch.zeros(7)}
    honest = compress({"w": torch.randn(4, 25), "b": torch.randn(7)}, "dct-top4")
    assert decompress(honest, model).keys() == model.keys()
    parts = decode_state(honest)
    huge = encode_state({**parts, "shape/w": torch.tensor([1 << 15, 1 << 15])})
    for bad in (huge, compress({"w": torch.randn(100)}, "int8"),
                compress({"w": torch.randn(4, 25), "b": torch.randn(7), "c": torch.ones(2)},
                         "int8")):  # fmt: skip
        with pytest.raises(CompressionError, match="not the model's"):
            decompress(bad, model)

"""The classes a formats op gives its drawn and swept cases (case_flags), checked
against what the codec does with each class, for every element format: a value
classed RoundTrip encodes to a code that decodes to itself, one classed TiesToEven
encodes differently under ties-to-even and ties-away, one classed RoundingDirection
is neither, and so on; and the evidence a failure shows is read from the shapes."""

from __future__ import annotations

import numpy as np
import pytest

from ref.conformance.catalog import discover, flags
from ref.conformance.judges.evidence import block_of, element_case, input_texts, locate
from ref.formats import decode, encode
from ref.formats.catalog.case_classes import block_flags, code_flags, element_flags
from ref.formats.minifloat import FORMATS
from ref.testing.vector_files import Case

NAMES = [name for name, f in FORMATS.items() if f.nbits <= 16]


def _codes(f) -> np.ndarray:
    """Every code of an 8-bit-or-narrower format; 512 seeded ones of a 16-bit format."""
    codes = np.arange(1 << f.nbits, dtype=np.int64)
    if f.nbits > 8:
        codes = np.random.default_rng(f.nbits).choice(codes, 512, replace=False)
    return codes.astype(f.code_dtype)


def _positive_values(f) -> np.ndarray:
    """Positive finite values of the format, with each one's successor (for midpoints)."""
    every = decode(np.arange(1 << f.nbits, dtype=np.int64).astype(f.code_dtype), f.name).astype(np.float64)
    every = np.unique(every[np.isfinite(every) & (every > 0)])
    picked = np.unique(decode(_codes(f), f.name).astype(np.float64))
    at = np.searchsorted(every, picked[np.isfinite(picked) & (picked > 0)])
    return every, at


def _sides(v: float, f) -> tuple[int, int]:
    """The codes (ties to even) of the float64 values just below and just above v."""
    x = np.array([np.nextafter(v, -np.inf), np.nextafter(v, np.inf)])
    codes = encode(x, f.name, rounding="nearest_even")
    return int(codes[0]), int(codes[1])


@pytest.mark.parametrize("name", NAMES)
def test_each_value_class_behaves_as_its_name_says(name):
    f = FORMATS[name]
    every, at = _positive_values(f)
    at = at[at < len(every) - 1]
    values, following = every[at], every[at + 1]
    signs = (1.0, -1.0) if f.signed else (1.0,)
    mids = (values + following) / 2
    off = values + (following - values) / 4
    for sign in signs:
        for v in values * sign:
            found = element_flags(np.array([v]), f)
            assert "RoundTrip" in found and not {"TiesToEven", "RoundingDirection"} & set(found), (v, found)
            assert float(decode(encode(np.array([v]), f.name), f.name)[0]) == v
        for v in mids * sign:
            found = element_flags(np.array([v]), f)
            assert "TiesToEven" in found, (v, found)
            below, above = _sides(v, f)
            assert below != above, v  # a true tie: just below and just above it round apart
        for v in off * sign:
            found = element_flags(np.array([v]), f)
            assert "RoundingDirection" in found and "TiesToEven" not in found, (v, found)
            below, above = _sides(v, f)
            assert below == above, v  # not a tie: its neighbourhood rounds to one code


@pytest.mark.parametrize("name", NAMES)
def test_specials_and_the_edges_of_the_range_are_named(name):
    f = FORMATS[name]
    top, boundary = f.max_normal, f.max_normal + f.ulp_at_max / 2
    assert "MaxNormal" in element_flags(np.array([top]), f)
    assert "OverflowBoundary" in element_flags(np.array([(top + boundary) / 2]), f)
    assert "Overflow" in element_flags(np.array([boundary * 2]), f)
    assert {"NaN", "Infinity"} <= set(element_flags(np.array([np.nan, np.inf]), f))
    assert "MinNormal" in element_flags(np.array([f.min_normal]), f)
    assert "Float16Input" in element_flags(np.ones(2, np.float16), f)
    if f.has_zero:
        assert "SignedZero" in element_flags(np.array([-0.0]), f)
    if f.has_subnormals and f.has_zero:
        assert "Underflow" in element_flags(np.array([f.min_subnormal / 4]), f)
        assert "Subnormal" in element_flags(np.array([f.min_subnormal]), f)
        # at or below half the smallest subnormal: the encoder gives zero (ties to even)
        assert decode(encode(np.array([f.min_subnormal / 2]), f.name), f.name)[0] == 0


@pytest.mark.parametrize("name", NAMES)
def test_every_code_is_classed_by_what_it_decodes_to(name):
    f = FORMATS[name]
    codes = _codes(f)
    values = decode(codes, f.name)
    for code, value in zip(codes, values):
        found = code_flags(np.array([code], dtype=f.code_dtype), f)
        assert ("NaN" in found) == bool(np.isnan(value)) and ("Infinity" in found) == bool(np.isinf(value))
        assert ("Subnormal" in found) == bool(0 < abs(value) < f.min_normal)
        assert found[-1] == "Exhaustive"


def test_every_flag_a_formats_op_gives_is_explained():
    known = flags()
    rng = np.random.default_rng(0)
    for name, op in discover().items():
        if not name.startswith("formats.") or op.case_flags is None:
            continue
        cases = [case for case, _ in zip(op.exhaustive(op.variant_values), range(3))] if op.exhaustive else []
        for case in cases:
            assert set(op.case_flags(case)) <= set(known), name
    x = rng.standard_normal((2, 64)).astype(np.float32)
    x[1, 40] = np.nan
    x[0, :32] = 0
    assert {"ZeroBlock", "NanBlock"} <= set(block_flags(x, 32))
    assert not {"ZeroBlock", "NanBlock"} & set(block_flags(x[:, 32:][:1], 32))


def test_the_evidence_behind_an_output_element_is_read_from_the_shapes():
    x = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    scales_shape, codes_shape = (2, 2), (2, 64)
    assert block_of([x, np.zeros(scales_shape)]) == 32
    label, block = locate(x, (1, 1), scales_shape)  # a scale: the block of 32 behind it
    assert label == "[1, 32:64]" and np.array_equal(block, x[1, 32:])
    label, element = locate(np.zeros(scales_shape), (1, 40), codes_shape)  # an element: its block's scale
    assert label == "[1, 1]"
    text = input_texts({"x": x}, (1, 40), codes_shape, block=32)["x"]
    assert text.startswith("x[1, 40] = 104.0 (float32 0x42d00000), in the block x[..., 32:64]")
    cut = element_case(Case({"x": x}, {}), (1, 40), codes_shape, 32)
    assert np.array_equal(cut.inputs["x"], x[1:, 32:])
    q = np.ones((1, 3, 2, 4), np.float32)
    assert input_texts({"q": q}, (0, 2, 1, 3), q.shape, row=True)["q"] == \
        "q[0, 2, 1, 3] = 1.0 (float32 0x3f800000), in the row q[0, 2, 1, :] = float32[4] [1., 1., 1., 1.]"
    lse = np.zeros((1, 3, 2), np.float32)  # a per-row value behind an output row: its element
    assert input_texts({"lse": lse}, (0, 2, 1, 3), q.shape, row=True)["lse"] == "lse[0, 2, 1] = 0.0 (float32 0x00000000)"
    assert input_texts({"k": np.ones((1, 5, 2, 4))}, (0, 2, 1, 3), q.shape, row=True)["k"] == "float64[1, 5, 2, 4]"


def test_a_truncated_array_still_names_its_non_finite_values():
    from ref.conformance.judges.evidence import array_text

    x = np.linspace(-1, 1, 32, dtype=np.float32)
    x[13] = np.nan
    text = array_text(x)
    assert text.startswith("float32[32] [") and "..." in text and "(non-finite: nan at 13)" in text
    assert "non-finite" not in array_text(np.linspace(-1, 1, 32, dtype=np.float32))

"""Stochastic rounding with explicit random bits: the definition, its exact carry,
its golden vectors and its errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ref.conformance.catalog import discover
from ref.formats import FORMATS, decode, encode, encode_stochastic
from ref.formats.stochastic import SR_WIDTHS
from ref.formats.minifloat import truncate
from ref.formats.stochastic import carries

NAMES = list(FORMATS)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float4_e2m1fn", "bfloat16", "float8_e8m0fnu"])
def test_stochastic_rounding_is_unbiased(name):
    """Over an even grid of N random-bit values, the mean equals x to within ulp/N."""
    f = FORMATS[name]
    rng = np.random.default_rng(7)
    mags = np.exp(rng.uniform(np.log(f.min_subnormal), np.log(f.max_normal / 2), 64))
    x = (mags * (rng.choice([-1, 1], 64) if f.signed else 1)).astype(np.float32)
    n = 256
    grid = (np.arange(n, dtype=np.uint64) * (2**32 // n)).astype(np.uint32)
    xs, rb = np.repeat(x[:, None], n, 1), np.repeat(grid[None, :], 64, 0)
    mean = decode(encode_stochastic(xs, f, rb), f).astype(np.float64).mean(1)
    up = decode(encode(x, f, rounding="toward_positive"), f).astype(np.float64)
    down = decode(encode(x, f, rounding="toward_negative"), f).astype(np.float64)
    assert (np.abs(mean - x) <= (up - down) / n).all()
    assert (up > down).sum() > 50  # most of x is inexact: the test has something to average


def test_the_16_bit_hardware_carry():
    """rbits = R << 16 is the hardware rule: R added to the top 16 discarded bits."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4096).astype(np.float32) * 10
    r16 = rng.integers(0, 1 << 16, 4096, dtype=np.uint32)
    got = encode_stochastic(x, "float8_e4m3fn", r16 << 16)
    bits = x.view(np.uint32).astype(np.int64)
    normal = ((bits >> 23) & 0xFF) - 127 >= -6
    # float32 -> E4M3 normal drops 20 bits; the top 16 of them meet R.
    carry = (((bits & 0x7FFFFF) & 0xFFFFF) >> 4) + r16 >= (1 << 16)
    trunc = encode(x, "float8_e4m3fn", rounding="toward_zero")
    want = np.where(carry, trunc.astype(np.int64) + 1, trunc)
    sel = normal & (np.abs(x) < 400)
    assert np.array_equal(got[sel], want[sel].astype(np.uint8))
    assert sel.sum() > 3000


@given(name=st.sampled_from(NAMES), scale=st.floats(-1, 1), rbits=st.integers(0, 2**32 - 1))
def test_carry_is_the_exact_rational_rule(name, scale, rbits):
    """carries() against fractions: up iff (|x| - lo) / (hi - lo) + rbits / 2^32 >= 1."""
    f = FORMATS[name]
    value = scale * f.max_normal
    x = np.array([abs(value) if not f.signed else value])
    lo = abs(float(decode(encode(x, f, rounding="toward_zero", overflow="saturate"), f)[0]))
    hi = abs(float(decode(encode(np.abs(x), f, rounding="toward_positive", overflow="saturate"), f)[0]))
    assume(lo < abs(value) < hi)  # inexact and in range: below it, E8M0 clamps; above, overflow
    got = bool(carries(truncate(x, f), np.uint32([rbits]))[0])
    frac = (Fraction(abs(value)) - Fraction(lo)) / (Fraction(hi) - Fraction(lo))
    assert got == (frac + Fraction(rbits, 2**32) >= 1)


@pytest.mark.parametrize("name", NAMES)
def test_exact_values_never_step_and_zero_bits_truncate(name):
    f = FORMATS[name]
    codes = np.arange(1 << min(f.nbits, 12)).astype(f.code_dtype)
    codes = codes[~f.is_nan_code(codes)]
    values = decode(codes, f)
    values = values[np.isfinite(values)]
    every = np.full(values.shape, 2**32 - 1, np.uint32)
    assert np.array_equal(encode_stochastic(values, f, every), encode(values, f))
    x = np.random.default_rng(1).standard_normal(512).astype(np.float32) * min(f.max_normal / 4, 1e4)
    x = np.abs(x) if not f.signed else x
    assert np.array_equal(encode_stochastic(x, f, np.zeros(x.shape, np.uint32), overflow="saturate"),
                          encode(x, f, rounding="toward_zero", overflow="saturate"))


def test_a_stochastic_step_past_max_overflows_by_the_policy():
    """Not a rounding toward zero: under nonsaturating overflow the step goes to Inf."""
    x = np.float32([250.0, -250.0])  # between E4M3's max 240 and the virtual next 256
    ones = np.full(2, 2**32 - 1, np.uint32)
    assert encode_stochastic(x, "float8_e4m3", ones, overflow="nonsaturating").tolist() == [0x78, 0xF8]
    assert encode_stochastic(x, "float8_e4m3", ones, overflow="saturate").tolist() == [0x77, 0xF7]
    assert encode_stochastic(x, "float8_e4m3", np.zeros(2, np.uint32), overflow="nonsaturating").tolist() == \
        [0x77, 0xF7]


@pytest.mark.parametrize("name", NAMES)
def test_boundary_vectors_straddle_the_carry_at_every_width(name):
    specs = [s for s in discover()[f"formats.{name}.encode_stochastic"].vectors() if "SrBoundary" in s.flags]
    assert {s.case.params["sr_bits"] for s in specs} == set(SR_WIDTHS)
    for s in specs:  # each pair straddles the carry: rbits at the boundary, and one less
        x, rbits = s.case.inputs["x"], s.case.inputs["rbits"]
        up = encode_stochastic(x, name, rbits, sr_bits=s.case.params["sr_bits"])
        down = encode(x, name, rounding="toward_zero", overflow="saturate")
        assert (up != down).all() if "just complete" in s.comment else (up == down).all()


def test_every_input_dtype_and_rank_is_a_vector():
    specs = discover()["formats.float8_e4m3fn.encode_stochastic"].vectors()
    seen = {(s.case.inputs["x"].dtype.name, s.case.inputs["x"].ndim) for s in specs if s.result == "valid"}
    assert {"float16", "float32", "float64"} <= {d for d, _ in seen}
    assert {0, 1, 2, 3} <= {r for _, r in seen}
    refused = [s for s in specs if s.result == "invalid"]
    assert {str(s.case.inputs["rbits"].dtype) for s in refused} >= {"float32", "uint32"}


ONE = np.float32([1.3])


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: encode_stochastic(ONE, "float8_e5m2", np.uint64([1])), ValueError, ["rbits", "uint64"]),
        (lambda: encode_stochastic(np.float32([1, 2]), "float8_e5m2", np.uint32([1])), ValueError, ["rbits", "(1,)"]),
        (lambda: encode_stochastic(ONE, "float8_e5m2", np.float32([0.5])), ValueError, ["rbits", "float32"]),
        (lambda: encode_stochastic(np.int32([1]), "float8_e5m2", np.uint32([1])), TypeError, ["x", "int32"]),
        (lambda: encode_stochastic(ONE, "float4_e2m1fn", np.uint32([1]), overflow="nonsaturating"), ValueError,
         ["overflow", "float4_e2m1fn"]),
        (lambda: encode_stochastic(ONE, "float8_e5m2", np.uint32([1]), negative="magnitude"), ValueError,
         ["negative"]),
        *[(lambda bad=bad: encode_stochastic(ONE, "float8_e5m2", np.uint32([1]), sr_bits=bad), error,
           ["sr_bits", repr(bad)])
          for bad, error in (("16", TypeError), (16.0, TypeError), (True, TypeError), (None, TypeError),
                             (0, ValueError), (33, ValueError), (-8, ValueError))],
    ],
)
def test_errors_name_the_argument(call, error, words):
    with pytest.raises(error) as info:
        call()
    for w in words:
        assert w in str(info.value)

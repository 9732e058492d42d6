"""Comparators, ULP arithmetic and their negative controls."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.formats import FORMATS, decode, encode
from ref.testing.compare import compare_codes, compare_exact, compare_values
from ref.testing.strategies import realistic_arrays
from ref.testing.ulp import bits_to_str, ordinal, ulp_distance

NAMES = list(FORMATS)


@pytest.mark.parametrize("name", NAMES)
def test_ordinal_is_the_position_on_the_number_line(name):
    f = FORMATS[name]
    c = np.arange(1 << f.nbits, dtype=np.int64).astype(f.code_dtype)
    v = decode(c, f).astype(np.float64)
    ok = ~np.isnan(v)
    order = np.argsort(v[ok], kind="stable")
    pos = ordinal(c[ok], f)[order]
    assert (np.diff(pos) >= 0).all()  # sorted by value means sorted by ordinal
    distinct = np.unique(v[ok])
    assert len(np.unique(pos)) == len(distinct)  # +0 and -0 share position 0
    assert (np.diff(np.unique(pos)) == 1).all()  # neighbours are one ulp apart


def test_ulp_distance_nan_rules():
    f = FORMATS["float8_e4m3fn"]
    d = ulp_distance(np.uint8([0x7F, 0x7F, 0x00, 0x80]), np.uint8([0xFF, 0x01, 0x80, 0x01]), f)
    assert d.tolist() == [0.0, np.inf, 0.0, 1.0]


def test_bits_to_str():
    assert bits_to_str(0x7E, "float8_e4m3fn") == "0.1111.110"
    assert bits_to_str(0x7F, "float8_e8m0fnu") == "01111111"
    assert bits_to_str(0xB, "float4_e2m1fn") == "1.01.1"


def _controls(expected: np.ndarray, rng):
    """Outputs a wrong kernel plausibly produces: every comparator must reject each."""
    yield "all zero", np.zeros_like(expected)
    perm = rng.permutation(expected.size)
    shuffled = expected.reshape(-1)[perm].reshape(expected.shape)
    if not np.array_equal(shuffled, expected):
        yield "shuffled", shuffled
    off = expected.copy()
    off.flat[rng.integers(expected.size)] ^= 1  # one code off by one step
    yield "one code off by one", off


@given(name=st.sampled_from([n for n in NAMES if n != "float8_e8m0fnu"]),
       x=realistic_arrays(dtype=st.just(np.dtype(np.float32))), seed=st.integers(0, 2**32 - 1))
def test_negative_controls_fail_the_code_comparator(name, x, seed):
    f = FORMATS[name]
    expected = encode(x, f)
    if not np.any(expected & ~np.uint16(f.sign_mask)):  # all zeros: an all-zero output is right
        return
    for label, wrong in _controls(expected, np.random.default_rng(seed)):
        if np.array_equal(wrong, expected):
            continue
        cmp = compare_codes(expected, wrong, f)
        assert not cmp.ok, label
        assert cmp.first is not None and cmp.first.expected_bits and cmp.first.actual_bits


@given(x=realistic_arrays(dtype=st.just(np.dtype(np.float32)), scale=st.sampled_from([1e-3, 1.0, 1e6])),
       seed=st.integers(0, 2**32 - 1))
def test_negative_controls_fail_for_e8m0_scales(x, seed):
    """One scale step is one E8M0 code: off by one step must fail."""
    x = np.abs(x) + 1e-30
    expected = encode(x, "float8_e8m0fnu", rounding="toward_positive")
    for label, wrong in _controls(expected, np.random.default_rng(seed)):
        if not np.array_equal(wrong, expected):
            assert not compare_codes(expected, wrong, "float8_e8m0fnu").ok, label


@given(x=realistic_arrays(dtype=st.just(np.dtype(np.float32))), seed=st.integers(0, 2**32 - 1))
def test_negative_controls_fail_the_value_comparator(x, seed):
    rng = np.random.default_rng(seed)
    if not np.any(x):
        return
    assert not compare_values(x, np.zeros_like(x)).ok
    wrong = x.copy()
    i = rng.integers(x.size)
    wrong.flat[i] = np.nextafter(wrong.flat[i], np.float32(np.inf))
    cmp = compare_values(x, wrong)
    assert not cmp.ok and cmp.worst == 1.0 and cmp.mismatched == 1


def test_value_comparator_rules():
    assert not compare_values(np.float32([0.0]), np.float32([-0.0])).ok
    assert compare_values(np.float32([np.nan]), np.float64([-np.nan])).ok
    assert compare_values(np.float32([1.5]), np.float64([1.5])).ok
    inexact = compare_values(np.float32([1.0]), np.float64([1.0 + 2.0**-40]))
    assert not inexact.ok and inexact.worst == np.inf
    assert "dtype" in compare_values(np.float32([1.0]), np.int32([1])).problem
    assert "shape" in compare_values(np.float32([1.0]), np.float32([1.0, 2.0])).problem


def test_code_comparator_rules():
    f = "float4_e2m1fn"
    wide = compare_codes(np.uint8([1, 2]), np.int32([1, 2]), f)  # four bytes per code is not a code
    assert not wide.ok and "int32" in wide.problem
    dirty = compare_codes(np.uint8([0x1]), np.uint8([0x81]), f)
    assert not dirty.ok and dirty.worst == np.inf
    assert compare_codes(np.uint8([0x7F]), np.uint8([0xFF]), "float8_e4m3fn").ok  # NaN payload and sign
    assert "dtype" in compare_codes(np.uint8([1]), np.float32([1]), f).problem
    text = compare_codes(np.uint8([0x3]), np.uint8([0x4]), f).describe()
    assert "index (0,)" in text and "0.01.1" in text and "0.10.0" in text


def test_exact_comparator_for_plain_integers():
    cmp = compare_exact(np.uint8([0x21, 0x43]), np.uint8([0x12, 0x43]))
    assert not cmp.ok and cmp.first.expected_bits == "0x21" and cmp.first.actual_bits == "0x12"
    cmp = compare_exact(np.int64([2**31 + 80]), np.int64([-(2**31) + 80]))  # an int32 wrap, in its own width
    assert (cmp.first.expected_bits, cmp.first.actual_bits) == ("0x0000000080000050", "0xffffffff80000050")
    assert compare_exact(np.bool_([True]), np.bool_([False])).first.expected_bits is None
    assert "int32" in compare_exact(np.uint8([1]), np.int32([1])).problem


def test_bit_comparison_of_cache_contents_shows_values_and_their_bits():
    from ref.cache.catalog.paged import compare_bits

    expected = np.float32([1.0, np.nan, 3.0])
    got = expected.copy()
    got.view(np.uint32)[1] ^= 1  # another NaN payload: a bit copy differs
    cmp = compare_bits(expected, got)
    assert not cmp.ok and cmp.first.index == (1,) and cmp.first.actual == "nan"
    assert (cmp.first.expected_bits, cmp.first.actual_bits) == ("0x7fc00000", "0x7fc00001")
    assert cmp.worst == 1 and cmp.unit == "differing bits"
    got = np.float32([1.0, np.nan, -3.0])
    assert compare_bits(expected, got).first.expected == "3.0" and compare_bits(expected, got).worst == 1
    assert compare_bits(np.uint16([0x3F80]), np.uint16([0x0000])).worst == 7  # bfloat16 1.0 as its bits


def test_compare_parts_names_the_failing_output():
    from ref.testing.compare import compare_parts

    cmp = compare_parts((np.uint8([1]), np.float32([2.0])), (np.uint8([1]), np.float32([3.0])),
                        names=("codes", "scales"), comparators=(compare_exact, compare_values))
    assert not cmp.ok and cmp.describe().startswith("scales:")
    assert "tuple" in compare_parts((np.uint8([1]),), np.uint8([1]), names=("codes",),
                                    comparators=(compare_exact,)).problem


def test_float64_values_are_compared_without_overflow():
    """A wrong float64 output is a failed comparison with a distance, not an OverflowError."""
    cmp = compare_values([1.0], [2.0], fmt="float64")
    assert not cmp.ok and cmp.worst == 2.0**52 and cmp.first.index == (0,)
    opposite = compare_values(np.float64([-1.0, 3.0]), np.float64([1.0, 3.0]), fmt="float64")
    assert not opposite.ok and opposite.mismatched == 1 and opposite.worst == 2 * 0x3FF0000000000000
    assert compare_values(np.float64([np.nan, -0.0]), np.float64([-np.nan, -0.0]), fmt="float64").ok
    assert compare_values(np.float64([np.nan]), np.float64([1.0]), fmt="float64").worst == np.inf
    assert not compare_values(np.float64([np.inf]), np.float64([-np.inf]), fmt="float64").ok


def test_summary_is_describe_without_the_first_mismatch():
    x = np.array([1.0, 1.0625, 3.0], dtype=np.float32)  # 1.0625 is a tie of E4M3 between 1 and 1.125
    expected = encode(x, "float8_e4m3fn")
    actual = expected.copy()
    actual[1] += 1
    cmp = compare_codes(expected, actual, "float8_e4m3fn")
    assert not cmp.ok and cmp.first.index == (1,)
    assert cmp.summary() == "1 of 3 elements differ (worst 1 ulp of float8_e4m3fn, tolerance 0)"
    assert cmp.describe().startswith(cmp.summary() + "; first at index (1,)")
    shape = compare_codes(expected, actual[:2], "float8_e4m3fn")
    assert shape.summary() == shape.describe()  # a problem has no first mismatch to leave out


@given(st.floats(width=32, allow_nan=False))
def test_float_bits_are_the_dtype_bits_of_a_value_it_holds(x):
    from ref.testing.compare import float_bits

    value = np.float32(x)
    assert float_bits(float(value), np.float32) == f"0x{int(value.view(np.uint32)):08x}"
    if value != 0 and np.isfinite(value):  # a value float32 cannot hold: its float64 bits
        between = float(value) * (1 + 2.0**-40)
        assert float_bits(between, np.float32) == f"0x{int(np.float64(between).view(np.uint64)):016x}"


def test_a_float_mismatch_shows_the_bits_of_the_compared_dtype():
    cmp = compare_values(np.float32([1.0, 2.0]), np.float32([1.0, 2.5]))
    assert (cmp.first.expected_bits, cmp.first.actual_bits) == ("0x40000000", "0x40200000")
    cmp = compare_values(np.float64([1.0, 0.1]), np.float32([1.0, 0.1]), fmt="float64")
    assert cmp.first.expected_bits == "0x3fb999999999999a"  # float32 cannot hold float64's 0.1

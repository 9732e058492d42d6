"""The table form of encode (nearest representable value) equals the bit form."""

from __future__ import annotations

import numpy as np
import pytest

from ref.formats import FORMATS, NanPolicy, NegativePolicy, Rounding, decode, encode
from ref.formats.minifloat_table import encode_by_table, value_table
from ref.testing.strategies import edge_values, rounding_ties

SMALL = [n for n, f in FORMATS.items() if f.nbits <= 8]
WIDE = [n for n, f in FORMATS.items() if f.nbits > 8]
BF16_ALL = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
F16_ALL = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _options(f):
    """Every combination of encode's options that applies to the format."""
    nans = list(NanPolicy) if not f.has_nan else [NanPolicy.MAX]
    negatives = list(NegativePolicy) if not f.signed else [NegativePolicy.NAN]
    return [dict(rounding=r, overflow=o, nan=n, negative=g)
            for r in Rounding for o in f.overflow_policies() for n in nans for g in negatives]


def _assert_same(f, x):
    for options in _options(f):
        bits, table = encode(x, f, **options), encode_by_table(x, f, **options)
        bad = bits != table
        assert not bad.any(), (options, x[bad][:4], bits[bad][:4], table[bad][:4])


def _around(values, dtype):
    """values as `dtype`, and one `dtype` ulp either side of each."""
    v = values.astype(dtype)
    return np.concatenate([v, np.nextafter(v, dtype(np.inf)), np.nextafter(v, dtype(-np.inf))])


@pytest.mark.parametrize("name", SMALL)
def test_every_code_every_tie_and_their_neighbours(name):
    f = FORMATS[name]
    codes = np.arange(1 << f.nbits).astype(f.code_dtype)
    values = decode(codes, f).astype(np.float64)  # NaN and Inf included
    ties = rounding_ties(f)
    for dtype in (np.float32, np.float64):
        with np.errstate(over="ignore"):
            _assert_same(f, np.concatenate([_around(values, dtype), _around(ties, dtype)]))
    _assert_same(f, np.concatenate(list(edge_values(f, np.float16).values())))
    _assert_same(f, F16_ALL)
    _assert_same(f, BF16_ALL)


@pytest.mark.parametrize("name", WIDE)
def test_sixteen_bit_formats_on_ties_and_random_inputs(name):
    f = FORMATS[name]
    rng = np.random.default_rng(5)
    ties = rounding_ties(f)
    _assert_same(f, _around(ties, np.float32))
    _assert_same(f, _around(ties[::7], np.float64))
    _assert_same(f, rng.integers(0, 2**32, 1 << 15, dtype=np.uint64).astype(np.uint32).view(np.float32))
    _assert_same(f, rng.integers(0, 2**64, 1 << 14, dtype=np.uint64).view(np.float64))
    _assert_same(f, BF16_ALL[::3] if name == "bfloat16" else F16_ALL[::3])


@pytest.mark.parametrize("name", list(FORMATS))
def test_the_table_lists_every_finite_value_once_and_the_virtual_top(name):
    f = FORMATS[name]
    values, codes = value_table(f)
    assert (np.diff(values) > 0).all()
    assert codes.tolist() == list(range(f.max_code + 2))
    assert values[-2] == f.max_normal and values[-1] == f.max_normal + f.ulp_at_max


def test_options_are_checked_as_encode_checks_them():
    with pytest.raises(ValueError, match="rounding"):
        encode_by_table(np.float32([1]), "bfloat16", rounding="stochastic")
    with pytest.raises(ValueError, match="overflow"):
        encode_by_table(np.float32([1]), "float4_e2m1fn", overflow="nonsaturating")
    with pytest.raises(TypeError, match="x"):
        encode_by_table(np.int32([1]), "float8_e4m3fn")

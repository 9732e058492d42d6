"""The element codec against its definition, an independent table codec and ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from corpus import table_codec
from hypothesis import given
from hypothesis import strategies as st

from ref.conformance.catalog import discover
from ref.conformance.report import version_holds
from ref.formats.stochastic import encode_stochastic
from ref.formats import FORMATS, NanPolicy, Overflow, Rounding, decode, encode, get_format, round_to
from ref.testing.strategies import edge_values, float_bits_arrays, rounding_ties
from ref.testing.ulp import ordinal

NAMES = list(FORMATS)
ML = {n: (np.float16 if n == "float16" else getattr(ml_dtypes, n)) for n in NAMES}
BF16_ALL = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
F16_ALL = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _ml_variant(f):
    """The variants ml_dtypes implements: RNE (ties up for E8M0), no saturation."""
    return dict(
        rounding="nearest_away" if f.name == "float8_e8m0fnu" else "nearest_even",
        overflow="nonsaturating" if (f.has_inf or f.has_nan) else "saturate",
        nan="zero_flipped_sign",
    )


def _same_codes(f, a, b):
    return (a == b) | (f.is_nan_code(a) & f.is_nan_code(b))


def _ml_encode(x, f):
    with np.errstate(all="ignore"):
        return x.astype(ML[f.name]).view(f.code_dtype)


# E8M0 values ml_dtypes before 0.7.0 rounds up to 2^-126 although 2^-127 is nearer
# (spec/formats.md); 0.7.0 rounds them to nearest.
ML_E8M0_BUG = version_holds("ml-dtypes<0.7")


def _ml_e8m0_binade(x):
    with np.errstate(invalid="ignore"):
        ax = np.abs(x.astype(np.float64))
    return (x > 0) & (ax > 2.0**-127) & (ax < 1.5 * 2.0**-127) & ML_E8M0_BUG


@pytest.mark.parametrize("name", NAMES)
def test_every_bf16_and_f16_pattern_and_every_tie_matches_ml_dtypes(name):
    f = FORMATS[name]
    ev = edge_values(f, np.float32)
    for x in (BF16_ALL, F16_ALL, ev["ties"], ev["tie_neighbours"]):
        same = _same_codes(f, encode(x, f, **_ml_variant(f)), _ml_encode(x, f))
        if name == "float8_e8m0fnu":
            assert np.array_equal(~same, _ml_e8m0_binade(x)), "the E8M0 difference moved"
        else:
            assert same.all(), x[~same][:5]


@pytest.mark.parametrize("name", NAMES)
def test_ml_dtypes_rounds_float64_through_float32_before_0_7(name):
    """The named difference: before 0.7.0, ml_dtypes' float64 cast equals the oracle on
    float32(x); 0.7.0 rounds float64 once, as the oracle does (and as numpy's own
    float16 cast always did)."""
    f = FORMATS[name]
    with np.errstate(all="ignore"):
        x = np.concatenate(list(edge_values(f, np.float64).values()))
        x = np.concatenate([x, x * (1 + 2.0**-40), x * (1 - 2.0**-40)])
        x32 = x.astype(np.float32)
    once = encode(x, f, **_ml_variant(f))
    ml = _ml_encode(x, f)
    if name == "float16" or not version_holds("ml-dtypes<0.7"):
        assert _same_codes(f, once, ml).all(), x[~_same_codes(f, once, ml)][:5]
        return
    same = _same_codes(f, encode(x32, f, **_ml_variant(f)), ml)
    if name == "float8_e8m0fnu":
        same |= _ml_e8m0_binade(x32)
    assert same.all()
    assert not _same_codes(f, once, ml).all(), "no double-rounding case left"


@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_ml_dtypes_on_every_code(name):
    f = FORMATS[name]
    c = np.arange(1 << f.nbits, dtype=np.int64).astype(f.code_dtype)
    ours, theirs = decode(c, f), c.view(ML[name]).astype(np.float32)
    assert ours.dtype == np.float32
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    finite = ~np.isnan(ours)
    assert np.array_equal(ours[finite].view(np.uint32), theirs[finite].view(np.uint32))


@pytest.mark.parametrize("name", NAMES)
def test_parameters_match_ml_dtypes_finfo(name):
    f, info = FORMATS[name], ml_dtypes.finfo(ML[name])
    assert f.max_normal == float(info.max)
    assert f.min_normal == float(info.smallest_normal)
    assert f.min_subnormal == float(info.smallest_subnormal)


def test_parameters_from_the_specs():
    # (max normal, min normal, min subnormal) from OCP OFP8 / MX v1.0 and IEEE 754.
    table = {
        "float4_e2m1fn": (6.0, 1.0, 0.5),
        "float6_e2m3fn": (7.5, 1.0, 0.125),
        "float6_e3m2fn": (28.0, 0.25, 0.0625),
        "float8_e4m3fn": (448.0, 2.0**-6, 2.0**-9),
        "float8_e4m3": (240.0, 2.0**-6, 2.0**-9),
        "float8_e5m2": (57344.0, 2.0**-14, 2.0**-16),
        "float8_e4m3fnuz": (240.0, 2.0**-7, 2.0**-10),
        "float8_e5m2fnuz": (57344.0, 2.0**-15, 2.0**-17),
        "float8_e8m0fnu": (2.0**127, 2.0**-127, 2.0**-127),
        "float16": (65504.0, 2.0**-14, 2.0**-24),
        "bfloat16": ((2 - 2.0**-7) * 2.0**127, 2.0**-126, 2.0**-133),
    }
    assert set(table) == set(FORMATS)
    for name, want in table.items():
        f = FORMATS[name]
        assert (f.max_normal, f.min_normal, f.min_subnormal) == want, name


@pytest.mark.parametrize("name", NAMES)
def test_agrees_with_the_table_codec_in_every_variant(name):
    f = FORMATS[name]
    rng = np.random.default_rng(1)
    xs = [np.concatenate(list(edge_values(f, dt).values())) for dt in (np.float32, np.float64)]
    xs += [BF16_ALL[::7], F16_ALL[::5]]
    nans = [p.value for p in NanPolicy] if not f.has_nan else ["max"]
    negatives = ["nan", "magnitude"] if not f.signed else ["nan"]
    for x in xs:
        rb = rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
        for o in f.overflow_policies():
            for nan in nans:
                for neg in negatives:
                    for r in Rounding:
                        a = encode(x, f, rounding=r, overflow=o, nan=nan, negative=neg)
                        b = table_codec.encode(x, name, rounding=r.value, overflow=o.value, nan=nan, negative=neg)
                        same = _same_codes(f, a, b)
                        assert same.all(), (r, o, nan, neg, x[~same][:4])
                    for width in (32, 13, 8):
                        a = encode_stochastic(x, f, rb, sr_bits=width, overflow=o, nan=nan, negative=neg)
                        b = table_codec.encode_stochastic(x, rb, name, sr_bits=width, overflow=o.value, nan=nan,
                                                          negative=neg)
                        same = _same_codes(f, a, b)
                        assert same.all(), ("stochastic", width, o, nan, neg, x[~same][:4])


@pytest.mark.parametrize("name", NAMES)
def test_every_value_round_trips(name):
    f = FORMATS[name]
    c = np.arange(1 << f.nbits, dtype=np.int64).astype(f.code_dtype)
    keep = ~f.is_nan_code(c)
    if f.has_inf:
        keep &= np.isfinite(decode(c, f))
    for dt in (np.float32, np.float64):
        back = encode(decode(c[keep], f).astype(dt), f)
        assert np.array_equal(back, c[keep])


finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(name=st.sampled_from(NAMES), xs=st.lists(finite_f32, min_size=2, max_size=64))
def test_encoding_is_monotone(name, xs):
    f = FORMATS[name]
    x = np.sort(np.array(xs, dtype=np.float32))
    if not f.signed:
        x = np.abs(x)[np.abs(x) > 0]
        x.sort()
    for r in (Rounding.NEAREST_EVEN, Rounding.TOWARD_ZERO, Rounding.TOWARD_POSITIVE, Rounding.TOWARD_NEGATIVE):
        pos = ordinal(encode(x, f, rounding=r, overflow="saturate"), f)
        assert (np.diff(pos) >= 0).all()


@given(name=st.sampled_from(NAMES), x=float_bits_arrays(dtype=st.just(np.dtype(np.float32))))
def test_rounding_error_bounds(name, x):
    f = FORMATS[name]
    x = x[np.isfinite(x) & (np.abs(x) <= f.max_normal) & (np.abs(x) >= f.min_subnormal)]
    if not f.signed:
        x = np.abs(x)
    x64 = x.astype(np.float64)
    e = np.floor(np.log2(np.abs(x64))) if x.size else x64
    ulp = 2.0 ** (np.maximum(e, np.log2(f.min_normal)) - f.mbits)
    near = decode(encode(x, f), f).astype(np.float64)
    assert (np.abs(near - x64) <= ulp / 2).all()
    down = decode(encode(x, f, rounding="toward_negative"), f).astype(np.float64)
    up = decode(encode(x, f, rounding="toward_positive"), f).astype(np.float64)
    zero = decode(encode(x, f, rounding="toward_zero"), f).astype(np.float64)
    assert (down <= x64).all() and (up >= x64).all() and (np.abs(zero) <= np.abs(x64)).all()
    assert (up - down <= ulp).all()


def test_e8m0_ties_go_to_the_even_exponent():
    f = FORMATS["float8_e8m0fnu"]
    assert encode(np.float32([1.5, 3.0, 6.0, 12.0]), f).tolist() == [128, 128, 130, 130]
    assert encode(np.float32([1.5, 3.0, 6.0, 12.0]), f, rounding="nearest_away").tolist() == [128, 129, 130, 131]
    ties = rounding_ties(f)
    codes = encode(ties.astype(np.float32), f)
    assert (codes[codes != 0xFF] % 2 == 0).all()


def test_special_values():
    x = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e30, -1e30])
    e4 = encode(x, "float8_e4m3fn")
    assert e4.tolist() == [0x00, 0x80, 0x7E, 0xFE, 0x7F, 0xFF, 0x7E, 0xFE]
    e4n = encode(x, "float8_e4m3fn", overflow="nonsaturating")
    assert e4n.tolist() == [0x00, 0x80, 0x7F, 0xFF, 0x7F, 0xFF, 0x7F, 0xFF]
    e5 = encode(x, "float8_e5m2", overflow="nonsaturating", rounding="toward_zero")
    assert e5.tolist() == [0x00, 0x80, 0x7C, 0xFC, 0x7E, 0xFE, 0x7B, 0xFB]
    fnuz = encode(x, "float8_e4m3fnuz", overflow="nonsaturating")
    assert fnuz.tolist() == [0x00, 0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80]
    e8 = encode(np.float32([0.0, -1.0, np.inf, np.nan, 2.0**-140]), "float8_e8m0fnu")
    assert e8.tolist() == [0xFF, 0xFF, 0xFE, 0xFF, 0x00]
    fp4 = [encode(np.float32([np.nan, -np.nan]), "float4_e2m1fn", nan=p).tolist() for p in NanPolicy]
    assert fp4 == [[0x7, 0x7], [0x0, 0x0], [0x8, 0x0]]


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3, 4)])
def test_any_shape_and_strides(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32) if shape else np.float32(1.75)
    c = encode(x, "float8_e5m2")
    assert c.shape == np.shape(x) and c.dtype == np.uint8
    assert np.array_equal(decode(c, "float8_e5m2").shape, np.shape(x))
    if x.ndim == 3 and x.size:
        strided = x[:, ::2, ::-1]
        assert np.array_equal(encode(strided, "float8_e5m2"), encode(strided.copy(), "float8_e5m2"))


def test_input_is_not_modified():
    x = np.float32([1.3, -2.7, np.nan])
    before = x.copy()
    encode(x, "float4_e2m1fn")
    assert np.array_equal(x.view(np.uint32), before.view(np.uint32))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: encode(np.arange(3), "float8_e4m3fn"), TypeError, ["x", "int64"]),
        (lambda: encode(np.float32([1]), "float9"), ValueError, ["fmt", "float9"]),
        (lambda: encode(np.float32([1]), "bfloat16", rounding="up"), ValueError, ["rounding", "'up'"]),
        (lambda: encode(np.float32([1]), "bfloat16", rounding="stochastic"), ValueError, ["rounding", "stochastic"]),
        (lambda: encode(np.float32([1]), "float4_e2m1fn", overflow="nonsaturating"), ValueError,
         ["overflow", "float4_e2m1fn"]),
        (lambda: encode(np.float32([1]), "float4_e2m1fn", nan="nope"), ValueError, ["nan", "nope"]),
        (lambda: encode(np.float32([1]), "float8_e5m2", negative="magnitude"), ValueError,
         ["negative", "float8_e5m2"]),
        (lambda: decode(np.uint16([1]), "float8_e5m2"), TypeError, ["codes", "uint16"]),
        (lambda: decode(np.uint8([0x10]), "float4_e2m1fn"), ValueError, ["codes", "0x10"]),
        (lambda: decode(np.uint8([0x40]), "float6_e2m3fn"), ValueError, ["codes", "0x40"]),
        (lambda: decode(np.uint8([1]), 3), TypeError, ["fmt", "int"]),
        (lambda: encode(np.float32([1]), "bfloat16", rounding=1), TypeError, ["rounding", "int"]),
        (lambda: encode(np.float32([1]), "float8_e4m3fn", overflow=True), TypeError, ["overflow", "bool"]),
        (lambda: encode(np.float32([1]), "float4_e2m1fn", nan=Rounding.NEAREST_EVEN), TypeError, ["nan"]),
        (lambda: encode(np.float32([1]), "float8_e8m0fnu", negative="abs"), ValueError, ["negative", "'abs'"]),
        (lambda: encode(np.float32([1]), ["bfloat16"]), TypeError, ["fmt", "list"]),
        (lambda: round_to(np.float32([1]), "fp32"), ValueError, ["precision", "fp32"]),
        (lambda: round_to(np.float32([1]), 32), TypeError, ["precision", "int"]),
    ],
)
def test_errors_name_the_argument(call, error, words):
    with pytest.raises(error) as info:
        call()
    for w in words:
        assert w in str(info.value)


def test_enums_and_names_are_interchangeable():
    x = np.float32([2.5, -2.5])
    assert np.array_equal(encode(x, "float4_e2m1fn", rounding=Rounding.TOWARD_POSITIVE, overflow=Overflow.SATURATE),
                          encode(x, get_format("float4_e2m1fn"), rounding="toward_positive", overflow="saturate"))


def _specs(name):
    return discover()[name].vectors()


@pytest.mark.parametrize("name", [n for n in NAMES if FORMATS[n].nbits < 8])
def test_every_spare_bit_has_its_own_dirty_vector(name):
    f = FORMATS[name]
    dirty = [s for s in _specs(f"formats.{name}.decode") if "DirtyBits" in s.flags]
    assert all(s.result == "invalid" for s in dirty)
    assert sorted(int(s.case.inputs["codes"].max()).bit_length() - 1 for s in dirty) == list(range(f.nbits, 8))


@pytest.mark.parametrize("name", NAMES)
def test_every_accepted_dtype_and_rank_is_a_vector(name):
    enc = [s for s in _specs(f"formats.{name}.encode") if s.result != "invalid"]
    seen = {(s.case.inputs["x"].dtype.newbyteorder("=").name, s.case.inputs["x"].ndim) for s in enc}
    for dtype in ("float16", "float32", "float64"):
        assert {r for d, r in seen if d == dtype} >= {1, 3}, dtype
    assert {r for _, r in seen} >= {0, 1, 2, 3}
    refused = {s.case.inputs["x"].dtype.name for s in _specs(f"formats.{name}.encode") if s.result == "invalid"}
    assert {"int32", "bool"} <= refused
    dec = _specs(f"formats.{name}.decode")
    assert {s.case.inputs["codes"].ndim for s in dec if s.result == "valid"} >= {0, 1, 2, 3}


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_round_to_is_the_codec_round_trip_on_every_class_of_input(precision):
    """round_to's significand rounding against decode(encode(x)): random float64 bit
    patterns, every code's value, the ties between neighbours and one float64 ulp either
    side of each, the overflow threshold, signed zeros, NaN and infinities."""
    f = get_format(precision)
    rng = np.random.default_rng(7)
    values = decode(np.arange(1 << 16, dtype=np.uint16), f).astype(np.float64)
    finite = np.unique(values[np.isfinite(values)])
    ties = (finite[1:] + finite[:-1]) / 2
    top = f.max_normal + f.ulp_at_max / 2  # the first value that rounds to Inf
    x = np.concatenate([
        rng.integers(0, 1 << 64, 200_000, dtype=np.uint64).view(np.float64),
        rng.standard_normal(50_000) * np.exp2(rng.integers(-140, 130, 50_000)),
        finite, ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf),
        [top, -top, np.nextafter(top, 0), np.nextafter(-top, 0), 0.0, -0.0, np.inf, -np.inf, np.nan],
    ])
    got, want = round_to(x, precision), decode(encode(x, f), f).astype(np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    assert np.array_equal(got.view(np.uint64)[~both_nan], want.view(np.uint64)[~both_nan])
    assert np.array_equal(np.isnan(got), np.isnan(want))

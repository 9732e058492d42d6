"""MX block codecs against an independent composition (frexp scales, ml_dtypes casts),
their edge cases, errors, and the MX bug corpus."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import mx_composed
from corpus.formats_impls import MX_BUGS, mx_bug, mx_composed as composed_impl
from hypothesis import given
from hypothesis import strategies as st

from ref.conformance.runner import run
from ref.formats import mx
from ref.testing.compare import compare_block_codes
from ref.testing.strategies import block_shapes, outlier_arrays, realistic_arrays

ELEMS = list(mx.MX_ELEMENTS)
RULES = [r.value for r in mx.ScaleRule]


def _adversarial(rng):
    rows = [rng.standard_normal(64) * s for s in (1e-30, 1e-3, 1, 1e3, 1e30)]
    for k in (-126, -60, -1, 0, 1, 8, 60, 126):
        r = rng.uniform(-1, 1, 32) * 2.0**k
        r[0] = np.nextafter(np.float32(2.0**k), np.float32(0))
        rows.append(np.concatenate([r, r * 1.5]))
    rows.append(np.zeros(64))
    rows.append(np.full(64, 1e-40))
    rows.append(np.full(64, 3.4e38))
    return np.stack(rows).astype(np.float32)


@pytest.mark.parametrize("elem", ELEMS)
@pytest.mark.parametrize("rule", RULES)
def test_matches_the_independent_composition(elem, rule):
    rng = np.random.default_rng(hash((elem, rule)) % 2**32)
    for x in (_adversarial(rng), (rng.standard_normal((64, 128)) * 10).astype(np.float32)):
        for overflow in ("nan", "satfinite"):
            ours = mx.quantize(x, elem, scale_rule=rule, scale_overflow=overflow)
            theirs = mx_composed.quantize(x, elem, scale_rule=rule, scale_overflow=overflow)
            cmp = compare_block_codes(ours, theirs, elem_fmt=None if elem == "int8" else elem)
            assert cmp.ok, cmp.describe()
            assert np.array_equal(mx.dequantize(*ours, elem), mx_composed.dequantize(*theirs, elem), equal_nan=True)


@given(elem=st.sampled_from(ELEMS), rule=st.sampled_from(RULES),
       x=st.one_of(realistic_arrays(shape=block_shapes(block=32), dtype=st.just(np.dtype(np.float32))),
                   outlier_arrays(shape=block_shapes(block=32), dtype=st.just(np.dtype(np.float32)))))
def test_round_trip_error_is_within_half_an_element_ulp(elem, rule, x):
    codes, scales = mx.quantize(x, elem, scale_rule=rule)
    y = mx.dequantize(codes, scales, elem)
    blocks = x.reshape(*x.shape[:-1], -1, 32).astype(np.float64)
    exp = scales.astype(np.int64)[..., None] - 127
    emax, mbits = mx.MX_ELEMENTS[elem]
    top = mx.max_element(elem) * 2.0**exp
    clipped = np.clip(blocks, -top, top)
    # the element grid at magnitude |v| (subnormal spacing below the element's min normal)
    if elem == "int8":
        step = 2.0 ** (exp - 6) * np.ones_like(blocks)
    else:
        from ref.formats import get_format
        f = get_format(elem)
        lg = np.floor(np.log2(np.maximum(np.abs(clipped) / 2.0**exp, f.min_normal)))
        step = 2.0 ** (lg - mbits + exp)
    err = np.abs(y.reshape(blocks.shape) - clipped)
    assert (err <= step / 2 * (1 + 1e-12)).all()
    if rule == "rceil":  # no element saturates: amax / 2^X <= max
        assert (np.abs(blocks) <= top).all()


def test_edge_cases():
    z = np.zeros((1, 32), np.float32)
    assert mx.quantize(z, "float8_e4m3fn")[1].tolist() == [[0]]  # 2^-127
    poison = np.ones((2, 32), np.float32)
    poison[0, 1], poison[1, 2] = np.nan, np.inf
    codes, scales = mx.quantize(poison, "float4_e2m1fn")
    assert scales.tolist() == [[255], [255]] and not codes.any()
    assert mx.quantize(poison, "float4_e2m1fn", scale_overflow="satfinite")[1].tolist() == [[255], [254]]
    assert np.isnan(mx.dequantize(codes, scales, "float4_e2m1fn")).all()
    below = np.full((1, 32), np.nextafter(np.float32(2.0**20), np.float32(0)))
    assert mx.quantize(below, "float8_e5m2")[1].tolist() == [[127 + 19 - 15]]
    huge = np.full((1, 32), 3.4e38, np.float32)
    assert mx.quantize(huge, "int8", scale_rule="ceil")[1].tolist() == [[255]]
    assert mx.quantize(huge, "int8", scale_rule="ceil", scale_overflow="satfinite")[1].tolist() == [[254]]


def test_blocks_along_another_axis():
    x = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    c0, s0 = mx.quantize(x, "float8_e4m3fn", axis=0)
    c1, s1 = mx.quantize(x.T, "float8_e4m3fn", axis=-1)
    assert np.array_equal(c0, c1.T) and np.array_equal(s0, s1.T)
    assert np.array_equal(mx.dequantize(c0, s0, "float8_e4m3fn", axis=0), mx.dequantize(c1, s1, "float8_e4m3fn").T)


@pytest.mark.parametrize("call, error, word", [
    (lambda: mx.quantize(np.ones((2, 48), np.float32), "float4_e2m1fn"), ValueError, "multiple of block"),
    (lambda: mx.quantize(np.ones(32), "float4_e2m1fn"), TypeError, "float64"),
    (lambda: mx.quantize(np.ones(32, np.float32), "float9"), ValueError, "elem"),
    (lambda: mx.quantize(np.ones(32, np.float32), "int8", scale_rule="round"), ValueError, "rule"),
    (lambda: mx.quantize(np.ones(32, np.float32), "int8", block=0), ValueError, "block"),
    (lambda: mx.dequantize(np.zeros(32, np.uint8), np.zeros(2, np.uint8), "int8"), ValueError, "scales"),
    (lambda: mx.dequantize(np.zeros(32, np.int8), np.zeros(1, np.uint8), "int8"), TypeError, "codes"),
    (lambda: mx.scale_exponents(np.ones(2), "int8"), TypeError, "amax"),
    (lambda: mx.scale_exponents(np.ones(2, np.float32), "int8", scale_overflow="clamp"), ValueError,
     "scale_overflow"),
    (lambda: mx.scale_exponents(np.float32([1.0, -2.0]), "int8"), ValueError, "amax"),
    (lambda: mx.quantize(np.ones(32, np.float32), "int8", block=True), TypeError, "block"),
    (lambda: mx.quantize(np.ones(32, np.float32), "int8", block=32.0), TypeError, "block"),
    (lambda: mx.quantize(np.ones(32, np.float32), "int8", axis="0"), TypeError, "axis"),
    (lambda: mx.quantize(np.ones(32, np.float32), "int8", axis=1), ValueError, "axis"),
    (lambda: mx.dequantize(np.zeros(32, np.uint8), np.zeros(1, np.uint8), "int8", axis=-2), ValueError, "axis"),
    (lambda: mx.dequantize(np.full(32, 0x10, np.uint8), np.zeros(1, np.uint8), "float4_e2m1fn"), ValueError,
     "codes"),
    (lambda: mx.quantize(np.ones(32, np.float32), "int8", scale_rule=None), TypeError, "rule"),
])
def test_errors(call, error, word):
    with pytest.raises(error, match=word):
        call()


def test_composition_passes_the_suite():
    report = run(composed_impl(), examples=10, shrink=False)
    covered = [r for r in report.ops if r.verdict != "not covered"]
    assert len(covered) == 12 and report.ok, report.details()


def test_a_float32_dequantizer_passes_at_its_output_precision():
    """2^127 * 6 overflows float32 and e * 2^-127 is a float32 subnormal: a float32
    kernel rounds each exact product once, and that is what it is judged against."""
    report = run(composed_impl(("float32",), elems=("float8_e4m3fn", "int8")),
                 ops=["formats.mx*.dequantize"], examples=20, shrink=False)
    rows = [r for r in report.ops if r.verdict != "not covered"]
    assert len(rows) == 2 and report.ok, report.details()


@pytest.mark.parametrize("name", list(MX_BUGS))
def test_mx_bug_is_rejected_by_a_flagged_vector(name):
    flag = MX_BUGS[name][3]
    report = run(mx_bug(name), examples=0)
    failures = [f for r in report.ops for f in r.failures]
    assert not report.ok and any(flag in f.flags for f in failures), [f.flags for f in failures]

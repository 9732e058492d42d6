"""NVFP4 recipes: reproduced exactly by an independent composition of ml_dtypes casts,
shown to disagree where their float32 orders meet a tie, and their bugs rejected."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from corpus import nvfp4_composed
from corpus.formats_impls import NVFP4_BUGS, nvfp4_bug, nvfp4_composed as composed_impl

from ref.conformance.runner import run
from ref.formats import decode, nvfp4
from ref.conformance.catalog import discover
from ref.formats.catalog.mx import compare_at_output_precision
from ref.formats.catalog.nvfp4_ties import recipe_ties, torchao_order_ties

RECIPES = [r.value for r in nvfp4.Recipe]
ONES = np.ones((1, 16), np.float32)
CODES, SCALES = np.zeros((1, 16), np.uint8), np.zeros((1, 1), np.uint8)


def _inputs(rng):
    for scale in (1e-4, 1.0, 300.0):
        x = (rng.standard_normal((32, 64)) * scale).astype(np.float32)
        x[:, 3] *= 50
        yield x
    z = np.zeros((16, 32), np.float32)
    z[0, :16] = rng.standard_normal(16)
    yield z


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("tile_2d", [False, True])
def test_matches_the_independent_composition(recipe, tile_2d):
    rng = np.random.default_rng(len(recipe) + tile_2d)
    for x in _inputs(rng):
        ours = nvfp4.quantize(x, recipe=recipe, tile_2d=tile_2d)
        theirs = nvfp4_composed.quantize(x, recipe=recipe, tile_2d=tile_2d)
        for a, b in zip(ours, theirs):
            assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("a, b", [("transformer_engine", "vllm"), ("transformer_engine", "torchao_0_17"),
                                  ("vllm", "torchao_0_13")])
def test_recipes_disagree_on_ties_and_each_is_reproduced(a, b):
    bam = recipe_ties(a, b, 100.0)
    assert bam.size >= 8
    x = np.zeros((bam.size + 1, 16), np.float32)
    x[0, 0], x[1:, 0] = 100.0, bam
    qa, qb = nvfp4.quantize(x, recipe=a), nvfp4.quantize(x, recipe=b)
    assert (qa[1][1:] != qb[1][1:]).all()  # every searched block scale differs
    for recipe, q in ((a, qa), (b, qb)):
        c = nvfp4_composed.quantize(x, recipe=recipe)
        assert all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(q, c))


def test_dequantize_round_trip_error():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    for recipe in RECIPES:
        codes, scales, g = nvfp4.quantize(x, recipe=recipe)
        y = nvfp4.dequantize(codes, scales, g, recipe=recipe)
        block_scale = decode(scales, "float8_e4m3fn").astype(np.float64)
        step = np.repeat(block_scale, 16, axis=-1) * (1 / float(g) if not recipe.startswith("torchao") else float(g))
        assert (np.abs(y - x) <= 1.0 * step + 1e-12).all()  # half an E2M1 ulp at most (ulp <= 2)


def test_edge_cases():
    z = nvfp4.quantize(np.zeros((1, 16), np.float32))
    assert z[0].tolist() == [[0] * 16] and z[1].tolist() == [[0]] and float(z[2]) == 1.0
    for recipe in ("torchao_0_13", "torchao_0_17"):
        t = nvfp4.quantize(np.zeros((1, 16), np.float32), recipe=recipe)
        assert t[1].tolist() == [[0x08]]  # the 2^-6 floor on the block scale
    x = np.ones((2, 16), np.float32)
    x[0, 2] = np.nan
    codes, scales, _ = nvfp4.quantize(x)
    assert scales[0, 0] == 0x7F  # NaN block scale


@pytest.mark.parametrize("call, error, word", [
    (lambda: nvfp4.quantize(np.ones((2, 24), np.float32)), ValueError, "multiple of 16"),
    (lambda: nvfp4.quantize(np.ones((8, 16), np.float32), tile_2d=True), ValueError, "tile_2d"),
    (lambda: nvfp4.quantize(np.ones((1, 16)), recipe="te"), ValueError, "recipe"),
    (lambda: nvfp4.quantize(np.ones((1, 16))), TypeError, "float64"),
    (lambda: nvfp4.dequantize(np.zeros((1, 16), np.uint8), np.zeros((1, 2), np.uint8), 1.0), ValueError, "scales"),
    (lambda: nvfp4.dequantize(np.uint8(0), np.uint8(0), 1.0), ValueError, "codes"),
    (lambda: nvfp4.dequantize(np.zeros((1, 24), np.uint8), np.zeros((1, 2), np.uint8), 1.0), ValueError,
     "multiple of 16"),
    (lambda: nvfp4.dequantize(np.full((1, 16), 0x10, np.uint8), np.zeros((1, 1), np.uint8), 1.0), ValueError,
     "codes"),
    (lambda: nvfp4.random_hadamard(np.ones((1, 20), np.float32)), ValueError, "multiple of 16"),
    (lambda: nvfp4.random_hadamard(np.ones((1, 16), np.float32), signs=np.full(16, 2.0)), ValueError, "signs"),
    (lambda: nvfp4.quantize(ONES, tile_2d="false"), TypeError, "tile_2d"),
    (lambda: nvfp4.quantize(ONES, rht="false"), TypeError, "rht"),
    (lambda: nvfp4.quantize(ONES, tile_2d=1), TypeError, "tile_2d"),
    (lambda: nvfp4.quantize(ONES, global_amax="3"), TypeError, "global_amax"),
    (lambda: nvfp4.quantize(ONES, global_amax=True), TypeError, "global_amax"),
    (lambda: nvfp4.quantize(ONES, global_amax=np.nan), ValueError, "global_amax"),
    (lambda: nvfp4.quantize(ONES, global_amax=-1.0), ValueError, "global_amax"),
    (lambda: nvfp4.quantize(ONES, global_amax=np.inf), ValueError, "global_amax"),
    (lambda: nvfp4.quantize(ONES, global_amax=0), ValueError, "global_amax"),
    (lambda: nvfp4.quantize(ONES, global_amax=1e-50), ValueError, "global_amax"),  # 0 in float32
    (lambda: nvfp4.quantize(ONES, rbits=np.zeros((1, 16), np.uint32)), TypeError, "rbits"),
    (lambda: nvfp4.quantize(ONES, rounding="stochastic"), TypeError, "rounding"),
    (lambda: nvfp4.quantize_stochastic(ONES, np.zeros((1, 16), np.float32)), TypeError, "rbits"),
    (lambda: nvfp4.quantize_stochastic(ONES, np.zeros((16,), np.uint32)), ValueError, "rbits"),
    (lambda: nvfp4.quantize_stochastic(ONES, np.zeros((1, 16), np.uint32), tile_2d="true"), TypeError, "tile_2d"),
    (lambda: nvfp4.tensor_scale(np.float32(1), "te"), ValueError, "recipe"),
    (lambda: nvfp4.block_scales(np.float32([1]), np.float32(1), "te"), ValueError, "recipe"),
    (lambda: nvfp4.dequantize(CODES, SCALES, 0.0), ValueError, "global_scale"),
    (lambda: nvfp4.dequantize(CODES, SCALES, -2.0), ValueError, "global_scale"),
    (lambda: nvfp4.dequantize(CODES, SCALES, np.float32(np.inf)), ValueError, "global_scale"),
    (lambda: nvfp4.dequantize(CODES, SCALES, np.nan), ValueError, "global_scale"),
    (lambda: nvfp4.dequantize(CODES, SCALES, "1"), TypeError, "global_scale"),
    (lambda: nvfp4.dequantize(CODES, SCALES, 1e-45), ValueError, "global_scale"),  # 1/g overflows
    (lambda: nvfp4.dequantize(CODES, SCALES, 1.0, order="float32"), ValueError, "order"),
    (lambda: nvfp4.dequantize(CODES, SCALES, 1.0, recipe="torchao"), ValueError, "recipe"),
    (lambda: nvfp4.dequantize(CODES | 0x10, SCALES, 1.0), ValueError, "codes"),
])
def test_errors(call, error, word):
    with pytest.raises(error, match=word):
        call()


def test_the_torchao_orders_differ_on_their_vector_rows_and_are_reproduced():
    rows = torchao_order_ties(np.float32(100.0), np.random.default_rng(3))
    assert rows.shape[0] >= 8
    old, new = (nvfp4.quantize(rows, recipe=r) for r in ("torchao_0_13", "torchao_0_17"))
    assert np.array_equal(old[1], new[1]) and old[2] == new[2]  # same scales and p
    assert (old[0][1:] != new[0][1:]).any(axis=-1).all()  # every searched row has a code that differs
    for recipe, q in (("torchao_0_13", old), ("torchao_0_17", new)):
        c = nvfp4_composed.quantize(rows, recipe=recipe)
        assert all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(q, c))


def test_torchao_017_multiplies_by_the_reciprocal_of_the_combined_scale():
    """x * f32(f32(1/p) / sb), spelled out with ml_dtypes casts on one block."""
    x = np.float32([[100.0] + [0.0] * 15, [37.0, 1.3, -2.2, 30.1] + [0.4] * 12])
    codes, scales, p = nvfp4.quantize(x, recipe="torchao_0_17")
    assert p == np.float32(100.0) / np.float32(2688)
    sb = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    r = (np.float32(1) / p) / sb
    want = np.clip(x * r, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert np.array_equal(codes, want)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_a_nonfinite_tensor_amax_takes_unit_global_scale(recipe, poison):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 32)) * 100).astype(np.float32)
    x[1, 20] = poison
    codes, scales, g = nvfp4.quantize(x, recipe=recipe)
    assert g == 1.0
    unit = nvfp4.quantize(x, recipe=recipe, global_amax=2688.0)  # g = 2688 / 2688, p = 2688 / 2688
    assert unit[2] == 1.0 and np.array_equal(scales, unit[1])
    finite = np.isfinite(x).all(axis=-1)
    assert np.array_equal(codes[finite], unit[0][finite])
    if np.isnan(poison):
        assert scales[1, 1] == 0x7F


@pytest.mark.parametrize("recipe", RECIPES)
def test_dequantize_orders(recipe):
    """exact: float64 e * sb * d; scale_first: f32(e * f32(d * sb)) (torchao), which
    differs from the exact product rounded once where e is 1.5, 3 or 6."""
    codes = np.tile(np.arange(16, dtype=np.uint8), (4, 1))
    scales = np.uint8([[0x31], [0x45], [0x5B], [0x2D]])
    g = np.float32(13.7)
    d = g if recipe.startswith("torchao") else np.float32(1) / g
    e = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    sb = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    exact = nvfp4.dequantize(codes, scales, g, recipe=recipe)
    assert exact.dtype == np.float64
    assert np.array_equal(exact, e.astype(np.float64) * sb.astype(np.float64) * np.float64(d))
    first = nvfp4.dequantize(codes, scales, g, recipe=recipe, order="scale_first")
    assert first.dtype == np.float32 and np.array_equal(first, e * (d * sb))
    assert (first != exact.astype(np.float32)).any()


def test_dequantize_is_judged_at_the_output_precision():
    rng = np.random.default_rng(8)
    codes = rng.integers(0, 16, (4, 32)).astype(np.uint8)
    scales = rng.integers(1, 0x7F, (4, 2)).astype(np.uint8)
    exact = nvfp4.dequantize(codes, scales, np.float32(13.7))
    assert compare_at_output_precision(exact, exact).ok
    assert compare_at_output_precision(exact, exact.astype(np.float32)).ok  # rounded once
    twice = nvfp4.dequantize(codes, scales, np.float32(13.7), order="scale_first")
    assert not compare_at_output_precision(exact, twice).ok  # rounded twice
    assert compare_at_output_precision(exact, exact.astype(np.float16)).ok
    off = exact.astype(np.float32)
    off.flat[5] = np.nextafter(off.flat[5], np.float32(np.inf))
    assert not compare_at_output_precision(exact, off).ok


def test_the_catalog_oracles_are_the_module_functions_taking_json_values():
    ops = discover()
    assert ops["formats.nvfp4.quantize"].oracle is nvfp4.quantize
    assert ops["formats.nvfp4.quantize_stochastic"].oracle is nvfp4.quantize_stochastic
    assert ops["formats.nvfp4.quantize"].variant_values["tile_2d"] == (False, True)
    x = np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)
    for name in ("tile_2d", "rht"):
        with pytest.raises(TypeError, match=name):
            nvfp4.quantize(x, **{name: "true"})  # the JSON value is a bool, never its string


@pytest.mark.parametrize("recipe", RECIPES)
def test_stochastic_matches_the_composition_and_shares_quantize_scales(recipe):
    rng = np.random.default_rng(11)
    for x in _inputs(rng):
        bits = rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
        ours = nvfp4.quantize_stochastic(x, bits, recipe=recipe)
        theirs = nvfp4_composed.quantize_stochastic(x, bits, recipe=recipe)
        for a, b in zip(ours, theirs):
            assert np.array_equal(np.asarray(a), np.asarray(b))
        rne = nvfp4.quantize(x, recipe=recipe)
        assert np.array_equal(ours[1], rne[1]) and ours[2] == rne[2]


def test_stochastic_reads_only_the_top_byte():
    x = np.random.default_rng(12).standard_normal((4, 32)).astype(np.float32)
    top = np.random.default_rng(13).integers(0, 256, x.shape).astype(np.uint32) << 24
    low = np.random.default_rng(14).integers(0, 1 << 24, x.shape).astype(np.uint32)
    assert np.array_equal(nvfp4.quantize_stochastic(x, top)[0], nvfp4.quantize_stochastic(x, top | low)[0])
    ones = nvfp4.quantize_stochastic(x, np.full(x.shape, 0xFFFFFFFF, np.uint32))[0]
    zeros = nvfp4.quantize_stochastic(x, np.zeros(x.shape, np.uint32))[0]
    mags = (lambda c: decode(c, "float4_e2m1fn").astype(np.float64))
    nearest = np.abs(mags(nvfp4.quantize(x)[0]))
    assert (np.abs(mags(zeros)) <= nearest).all() and (np.abs(mags(ones)) >= nearest).all()
    assert (np.abs(mags(zeros)) < np.abs(mags(ones))).any()


def test_composition_passes_the_suite():
    report = run(composed_impl(), ops=["formats.nvfp4.quantize"], examples=10, shrink=False)
    assert report.ok and report.ops[0].verdict == "pass", report.details()
    assert report.ops[0].vectors_run >= 20
    report = run(composed_impl(), ops=["formats.nvfp4.quantize_stochastic"], examples=10, shrink=False)
    assert report.ok and report.ops[0].verdict == "pass", report.details()
    assert report.ops[0].vectors_run >= 20
    report = run(composed_impl(), ops=["formats.nvfp4.dequantize"], examples=0)
    assert report.ok and report.ops[0].verdict == "pass", report.details()
    assert report.ops[0].vectors_run >= 25


@pytest.mark.parametrize("name", list(NVFP4_BUGS))
def test_nvfp4_bug_is_rejected_by_a_flagged_vector(name):
    flag = NVFP4_BUGS[name][2]
    report = run(nvfp4_bug(name), ops=["formats.nvfp4.*"], examples=0)
    failures = [f for r in report.ops for f in r.failures]
    assert not report.ok and any(flag in f.flags for f in failures), [f.flags for f in failures]


def test_hadamard_is_orthogonal_and_matches_kronecker_construction():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    y = nvfp4.random_hadamard(x)
    assert np.array_equal(y, nvfp4_composed.hadamard(x))
    h = nvfp4.hadamard16()
    assert np.array_equal(h @ h.T, 16 * np.eye(16))
    back = (y.astype(np.float64).reshape(5, 4, 16) @ h / 4 * nvfp4.RHT_SIGNS).reshape(5, 64)
    assert np.allclose(back, x, rtol=0, atol=1e-6)
    assert np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-6)


def test_hadamard_spreads_a_single_outlier_evenly():
    for i in (0, 5, 15):
        x = np.zeros((1, 16), np.float32)
        x[0, i] = 8.0
        assert np.array_equal(np.abs(nvfp4.random_hadamard(x)), np.full((1, 16), 2.0, np.float32))

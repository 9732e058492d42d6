"""NVFP4 recipes: reproduced exactly by an independent composition of ml_dtypes casts,
shown to disagree where their float32 orders meet a tie, and their bugs rejected."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import nvfp4_composed
from corpus.formats_impls import NVFP4_BUGS, nvfp4_bug, nvfp4_composed as composed_impl

from ref.conformance.runner import run
from ref.formats import decode, nvfp4
from ref.formats.ops import _recipe_ties

RECIPES = [r.value for r in nvfp4.Recipe]


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


@pytest.mark.parametrize("a, b", [("transformer_engine", "vllm"), ("transformer_engine", "torchao"),
                                  ("vllm", "torchao")])
def test_recipes_disagree_on_ties_and_each_is_reproduced(a, b):
    bam = _recipe_ties(a, b, 100.0)
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
        step = np.repeat(block_scale, 16, axis=-1) * (1 / float(g) if recipe != "torchao" else float(g))
        assert (np.abs(y - x) <= 1.0 * step + 1e-12).all()  # half an E2M1 ulp at most (ulp <= 2)


def test_edge_cases():
    z = nvfp4.quantize(np.zeros((1, 16), np.float32))
    assert z[0].tolist() == [[0] * 16] and z[1].tolist() == [[0]] and float(z[2]) == 1.0
    t = nvfp4.quantize(np.zeros((1, 16), np.float32), recipe="torchao")
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
    (lambda: nvfp4.quantize(np.ones((1, 16), np.float32), rounding="toward_zero"), ValueError, "rounding"),
    (lambda: nvfp4.dequantize(np.zeros((1, 16), np.uint8), np.zeros((1, 2), np.uint8), 1.0), ValueError, "scales"),
    (lambda: nvfp4.random_hadamard(np.ones((1, 20), np.float32)), ValueError, "multiple of 16"),
    (lambda: nvfp4.random_hadamard(np.ones((1, 16), np.float32), signs=np.full(16, 2.0)), ValueError, "signs"),
])
def test_errors(call, error, word):
    with pytest.raises(error, match=word):
        call()


def test_composition_passes_the_suite():
    report = run(composed_impl(), ops=["formats.nvfp4.quantize"], examples=10, shrink=False)
    assert report.ok and report.ops[0].verdict == "pass", report.details()
    assert report.ops[0].vectors_run >= 20


@pytest.mark.parametrize("name", list(NVFP4_BUGS))
def test_nvfp4_bug_is_rejected_by_a_flagged_vector(name):
    flag = NVFP4_BUGS[name][2]
    report = run(nvfp4_bug(name), ops=["formats.nvfp4.quantize"], examples=0)
    failures = report.ops[0].failures
    assert report.ops[0].verdict == "fail" and any(flag in f.flags for f in failures), [f.flags for f in failures]


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

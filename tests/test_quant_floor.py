"""Below 4 bits and the floor (spec/quant.md#e8-nearest, #lloyd-max, #ecsq-gap,
#bf16-entropy): the E8/D8 decoder against brute force, its tie rules and exactness,
the corpus and the correct alternatives; Lloyd-Max codebooks against the published
MSEs; the entropy-coded scalar quantizer's gap approaching 1/2 log2(pi e / 6); the
bf16 field entropies of generated weights."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from corpus import quant_lattice as corpus
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize

from ref.conformance.adapters import numpy_lattice
from ref.conformance.implementation import Implementation
from ref.conformance.report import parse_entries
from ref.conformance.runner import run
from ref.formats.minifloat import encode
from ref.quant.entropy import bf16_fields, ecsq_gap, entropy_bits, field_entropies, gaussian_bf16_entropies
from ref.quant.lattice import d8_nearest, e8_nearest, in_e8
from ref.quant.lloyd_max import codebook, gaussian_mse, quantize

STEP = 2.0**-5  # test inputs: integers times 2^-5, so float64 distances are exact

# every offset in {-1, 0, 1}^8: the nearest point differs from the rounded x by at most one step per coordinate
OFFSETS = np.array(list(itertools.product((-1, 0, 1), repeat=8)), dtype=np.float64)  # [6561, 8]


def _brute(x: np.ndarray, coset: bool) -> tuple[np.ndarray, float]:
    """All nearest points of D8 (or E8) to one vector x [8], and the squared distance."""
    found = []
    for shift in ((0.0, 0.5) if coset else (0.0,)):
        cands = np.round(x - shift) + OFFSETS  # [6561, 8] integer points near x - shift
        cands = cands[cands.sum(axis=1) % 2 == 0] + shift
        found.append(cands)
    cands = np.concatenate(found)
    dist = ((cands - x) ** 2).sum(axis=1)
    best = dist.min()
    return cands[dist == best], best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-96, 96), min_size=8, max_size=8), st.booleans())
def test_the_decoder_returns_a_nearest_point_found_by_brute_force(ints, coset):
    x = np.array(ints, np.float64) * STEP
    y = (e8_nearest if coset else d8_nearest)(x)
    nearest, best = _brute(x, coset)
    assert ((y - x) ** 2).sum() == best
    assert any(np.array_equal(y, p) for p in nearest)
    if len(nearest) == 1:
        assert np.array_equal(y, nearest[0])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-8, 8), min_size=8, max_size=8))
def test_on_a_quarter_grid_every_tie_follows_the_stated_rule(ints):
    """Quarter steps make ties common: the result is always one of the nearest points,
    and equal to the row-by-row Fraction decoder's (the same rule, written apart)."""
    x = np.array(ints, np.float64) / 4
    y = e8_nearest(x)
    nearest, _ = _brute(x, True)
    assert any(np.array_equal(y, p) for p in nearest)
    assert np.array_equal(y, numpy_lattice.e8_nearest(x))
    assert np.array_equal(d8_nearest(x), numpy_lattice.d8_nearest(x))


def test_lattice_points_decode_to_themselves_and_outputs_are_lattice_points():
    rng = np.random.default_rng(14)
    x = rng.integers(-64, 65, (200, 8)) * STEP
    y = e8_nearest(x)
    assert in_e8(y).all() and np.array_equal(e8_nearest(y), y)
    d = d8_nearest(x)
    assert (d == np.round(d)).all() and (d.sum(axis=1) % 2 == 0).all()
    # the covering radius of E8 is 1 (squared distance at most 1); of D8, sqrt(2)... bounded by 2
    assert ((y - x) ** 2).sum(axis=1).max() <= 1 and ((d - x) ** 2).sum(axis=1).max() <= 2


def test_e8_quantizes_uniform_data_with_conway_and_sloanes_second_moment():
    """G(E8) = 929/12960 = 0.07168 per dimension (a unit-volume lattice), against 1/12 =
    0.0833 for the integers: measured 0.07164 +- 0.00004 on 200000 points, here on 4000."""
    x = np.random.default_rng(1982).random((4000, 8)) * 4
    mse = ((x - e8_nearest(x)) ** 2).sum(axis=1).mean() / 8
    assert abs(mse - 929 / 12960) < 2e-3


def test_ties_follow_the_stated_rule():
    assert np.array_equal(e8_nearest(np.full(8, 0.25)), np.zeros(8))  # D8 over the coset
    assert np.array_equal(e8_nearest(np.full(8, -0.25)), np.zeros(8))
    assert np.array_equal(d8_nearest(np.array([1.5, 1.5, 0, 0, 0, 0, 0, 0])), [1, 1, 0, 0, 0, 0, 0, 0])  # toward zero
    assert np.array_equal(d8_nearest(np.array([0.25, 0.25, 1, 0, 0, 0, 0, 0])), [1, 0, 1, 0, 0, 0, 0, 0])  # first worst
    assert np.array_equal(d8_nearest(np.eye(8)[0]), [2, 0, 0, 0, 0, 0, 0, 0])  # x >= f: up
    assert np.array_equal(d8_nearest(-np.eye(8)[0]), [0, 0, 0, 0, 0, 0, 0, 0])


def test_one_ulp_from_a_tie_is_decided_exactly():
    x = np.full(8, 0.25)
    x[0] += 2.0**-54  # nearer the coset point by 2^-54 in squared distance
    assert np.array_equal(e8_nearest(x), np.full(8, 0.5))
    x = np.full(8, 2.0**-1074)  # subnormal coordinates: the D8 point 0
    assert np.array_equal(e8_nearest(x), np.zeros(8))
    assert np.array_equal(e8_nearest(np.full(8, 0.5) - 2.0**-1074), np.full(8, 0.5))


def test_dtypes_ranks_and_invalid_inputs():
    x = np.arange(16, dtype=np.float32).reshape(2, 8) / 8
    assert e8_nearest(x).dtype == np.float64 and e8_nearest(x[0]).shape == (8,)
    assert e8_nearest(x.reshape(1, 2, 8)).shape == (1, 2, 8) and e8_nearest(np.zeros((0, 8))).shape == (0, 8)
    with pytest.raises(ValueError, match="x: expected shape"):
        e8_nearest(np.zeros(7))
    with pytest.raises(TypeError, match="x: expected float16"):
        e8_nearest(np.zeros(8, np.int32))
    with pytest.raises(ValueError, match="finite"):
        d8_nearest(np.full(8, np.nan))
    with pytest.raises(ValueError, match="2\\^50"):
        e8_nearest(np.full(8, 2.0**50))


# ------------------------------------------------------------------ kernels on the vectors

OPS = [corpus.E8, corpus.D8]


def test_correct_kernels_pass():
    for impl in corpus.CORRECT.values():
        report = run(impl, ops=OPS, examples=3)
        assert report.ok, (impl.name, [(f.where, f.flags) for r in report.ops for f in r.failures][:5])


def test_a_float64_decoder_fails_only_the_near_ties():
    report = run(corpus.FLOAT64, ops=OPS, examples=0)
    flags = {flag for r in report.ops for f in r.failures for flag in f.flags}
    assert flags == {"NearTie"}
    xfails = parse_entries(f"{corpus.E8}/NearTie float64 squared distances round one-ulp differences away")
    assert run(corpus.FLOAT64, ops=OPS, examples=5, xfails=xfails).ok


@pytest.mark.deep  # the default profile has the same check in tests/test_runner_corpus_rule.py
@pytest.mark.parametrize("name", list(corpus.LATTICE_BUGS))
def test_wrong_decoders_are_rejected_by_their_flag(name):
    op, flag, _ = corpus.LATTICE_BUGS[name]
    report = run(corpus.bug(name), ops=[op], examples=0)
    assert any(flag in f.flags for r in report.ops for f in r.failures), name


@pytest.mark.deep
def test_the_default_decoder_agrees_on_many_random_cases():
    impl = Implementation(numpy_lattice.NAME, numpy_lattice.OPS)
    assert run(impl, ops=OPS, examples=500).ok


# ------------------------------------------------------------------ Lloyd-Max


@pytest.fixture(scope="module")
def books():
    return {b: codebook(b) for b in (1, 2, 3, 4)}


def test_one_bit_is_the_conditional_mean_of_a_half_gaussian(books):
    levels, thresholds, mse = books[1]
    assert thresholds.tolist() == [0.0]
    assert np.allclose(levels, [-math.sqrt(2 / math.pi), math.sqrt(2 / math.pi)], rtol=0, atol=1e-13)
    assert abs(mse - (1 - 2 / math.pi)) < 1e-13


@pytest.mark.parametrize("bits,published", [(1, 0.3634), (2, 0.1175), (3, 0.03454), (4, 0.009497)])
def test_the_published_mses_are_reproduced(books, bits, published):
    """Max's 1960 table, to its four digits at 1..3 bits; at 4 bits the exact value is
    0.0095010 (scipy quadrature agrees to 1e-13 below): the table is 4.2e-4 low."""
    mse = books[bits][2]
    assert abs(mse - published) / published < (5e-4 if bits == 4 else 2.5e-4)


def test_the_codebook_is_a_fixed_point_and_its_mse_the_integral(books):
    levels, thresholds, mse = books[3]
    assert np.array_equal(thresholds, (levels[:-1] + levels[1:]) / 2)
    assert np.allclose(levels, -levels[::-1], rtol=0, atol=0)
    edges = np.concatenate([[-np.inf], thresholds, [np.inf]])
    total = sum(integrate.quad(lambda x, c=c: (x - c) ** 2 * math.exp(-x * x / 2) / math.sqrt(2 * math.pi),
                               lo, hi, epsabs=1e-15, epsrel=1e-13)[0]
                for c, lo, hi in zip(levels, edges[:-1], edges[1:]))
    assert abs(total - mse) < 1e-12
    moved = np.array([gaussian_mse(levels + d, thresholds) for d in (-1e-4, 1e-4)])
    assert np.all(moved > mse)  # the centroids minimize the MSE for these cells


def test_the_best_uniform_grid_is_worse_than_lloyd_max(books):
    """Max's uniform 16-level optimum: step 0.3352, MSE 0.01154."""
    def mse(s):
        return gaussian_mse((np.arange(16) - 7.5) * s, (np.arange(1, 16) - 8) * s)

    best = optimize.minimize_scalar(mse, bounds=(0.1, 0.6), method="bounded", options={"xatol": 1e-9})
    assert abs(best.x - 0.3352) < 1e-4 and abs(best.fun - 0.01154) < 1e-5
    assert best.fun > 1.2 * books[4][2]


def test_lloyd_max_quantize_and_invalid_arguments(books):
    levels = books[2][0]
    x = np.array([-np.inf, -1.0, 0.0, 0.5, levels[2], np.inf])
    assert quantize(x, levels).tolist() == [0, 0, 1, 2, 2, 3]  # 0 is the threshold between levels 1, 2: lower
    with pytest.raises(ValueError, match="x: NaN"):
        quantize(np.array([np.nan]), levels)
    with pytest.raises(ValueError, match="levels"):
        quantize(x, levels[::-1])
    with pytest.raises(ValueError, match="bits"):
        codebook(0)
    with pytest.raises(ValueError, match="max_iter"):
        codebook(4, max_iter=3)


# ------------------------------------------------------------------ the rate-distortion gap


def test_the_ecsq_gap_tends_to_half_log2_pi_e_over_6():
    limit = 0.5 * math.log2(math.pi * math.e / 6)  # 0.2546 bit
    errors = [abs(ecsq_gap(2.0**-k)["gap"] - limit) for k in range(0, 5)]
    assert errors[0] < 1e-4 and all(e < 1e-6 for e in errors[2:])
    assert errors[0] > errors[1] > errors[2]
    small = ecsq_gap(2.0**-6)
    assert abs(small["mse"] / (2.0**-12 / 12) - 1) < 1e-3  # D -> delta^2 / 12
    assert abs(small["rate"] - (0.5 * math.log2(2 * math.pi * math.e) + 6)) < 1e-3  # H -> h(X) - log2 delta


# ------------------------------------------------------------------ the lossless floor of bf16 weights


def test_gaussian_bf16_entropies_are_scale_free_and_below_the_field_sum():
    a, b = gaussian_bf16_entropies(0.02), gaussian_bf16_entropies(0.04)
    assert a["sign"] == 1.0 and all(abs(a[k] - b[k]) < 1e-3 for k in a)
    assert 2.54 < a["exponent"] < 2.55 and 6.97 < a["mantissa"] < 6.98 and 10.46 < a["code"] < 10.47
    assert a["code"] < a["sign"] + a["exponent"] + a["mantissa"]


def test_sampled_weights_measure_the_exact_entropies():
    rng = np.random.default_rng(2504)
    w = encode(rng.standard_normal(1 << 18) * 0.02, "bfloat16")
    got, exact = field_entropies(w), gaussian_bf16_entropies(0.02)
    assert abs(got["exponent"] - exact["exponent"]) < 5e-3 and abs(got["mantissa"] - exact["mantissa"]) < 5e-3
    assert 0 < exact["code"] - got["code"] < 0.1  # the plug-in estimate is biased low by about K / (2 n ln 2)
    heavy = field_entropies(encode(rng.standard_t(4, 1 << 18) * 0.02, "bfloat16"))
    assert heavy["exponent"] > exact["exponent"] + 0.1  # a heavier tail spreads the exponents


def test_entropy_helpers_refuse_bad_input():
    assert entropy_bits([1, 1, 0, 2]) == 1.5
    sign, exponent, mantissa = bf16_fields(np.array([0xBF80], np.uint16))  # -1.0
    assert (int(sign[0]), int(exponent[0]), int(mantissa[0])) == (1, 127, 0)
    with pytest.raises(TypeError, match="codes"):
        bf16_fields(np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="counts"):
        entropy_bits([0, 0])
    with pytest.raises(ValueError, match="delta"):
        ecsq_gap(0.0)

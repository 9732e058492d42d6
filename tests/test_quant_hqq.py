"""HQQ (spec/quant.md#hqq): the l_p shrink's properties, the solver's early stop and
objective, the group reshape, hqq's bit packings as round trips, conditioned inputs and
the two comparison rules (measured here), and the default kernel and corpus on the vectors."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import quant_hqq as corpus
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.conformance.adapters import numpy_hqq
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.quant import hqq
from ref.quant.catalog import hqq as catalog
from ref.testing.vector_files import load_vectors

OPS = ["quant.hqq.quantize", "quant.hqq.dequantize", "quant.hqq.pack", "quant.hqq.unpack"]


def _layer(seed: int, shape=(8, 64), exponent: int = -7) -> np.ndarray:
    return catalog._weights(np.random.default_rng(seed), shape, exponent, outlier=3)


# ------------------------------------------------------------------ the shrink operator

xs = st.floats(-1e3, 1e3, allow_nan=False)
betas = st.floats(0.5, 1e3)
ps = st.floats(0.1, 1.0)


@settings(max_examples=60, deadline=None)
@given(x=xs, beta=betas, p=ps)
def test_shrink_is_odd_and_shrinks(x, beta, p):
    y = float(hqq.shrink_lp(x, beta=beta, p=p))
    assert float(hqq.shrink_lp(-x, beta=beta, p=p)) == -y
    assert abs(y) <= abs(x) and (y == 0 or np.sign(y) == np.sign(x))


@settings(max_examples=60, deadline=None)
@given(x=xs, beta=betas, p=ps)
def test_shrink_is_zero_inside_its_threshold(x, beta, p):
    inside = x == 0 or abs(x) <= abs(x) ** (p - 1) / beta
    assert (float(hqq.shrink_lp(x, beta=beta, p=p)) == 0) == inside or abs(abs(x) - abs(x) ** (p - 1) / beta) < 1e-12


def test_shrink_at_p_1_is_the_soft_threshold():
    x = np.array([-3.0, -0.25, -0.1, 0.0, 0.05, 0.1, 0.5, 2.0])
    assert np.array_equal(hqq.shrink_lp(x, beta=10.0, p=1.0), np.sign(x) * np.maximum(np.abs(x) - 0.1, 0))


def test_shrink_at_zero_is_zero_and_p_above_1_is_refused():
    assert hqq.shrink_lp(0.0, beta=10.0, p=0.7) == 0
    with pytest.raises(ValueError, match="p:"):
        hqq.shrink_lp(1.0, beta=10.0, p=1.5)


# ------------------------------------------------------------------ the solver


@pytest.mark.parametrize("schedule", ["constant", "kappa"])
@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_the_error_decreases_until_the_stop(bits, schedule):
    """e_0 > e_1 > ... > e_{k-1}; the step that stopped has e_k >= e_{k-1}; at most `iters` steps."""
    g = hqq.group_view(_layer(bits), group=32, axis=1).astype(np.float64)
    s, z = hqq.initial_params(g, bits=bits, axis=1)
    _, errors = hqq.optimize_zero(g, s, z, bits=bits, axis=1, beta_schedule=schedule)
    assert 1 <= len(errors) <= 20
    kept = errors if len(errors) == 20 and errors[-1] < errors[-2] else errors[:-1]
    assert all(a > b for a, b in zip(kept, kept[1:]))
    if len(errors) < 20:
        assert errors[-1] >= errors[-2]


def test_the_zero_returned_is_the_one_after_the_stopping_step():
    """hqq updates the zero before it tests the error: the stop at step k returns z_{k+1}."""
    g = hqq.group_view(_layer(11, exponent=-11), group=64, axis=1).astype(np.float64)
    s, z0 = hqq.initial_params(g, bits=4, axis=1)
    z, errors = hqq.optimize_zero(g, s, z0, bits=4, axis=1)
    k = len(errors) - 1
    again, _ = hqq.optimize_zero(g, s, z0, bits=4, axis=1, iters=k + 1)
    assert np.array_equal(z, again)  # iters = k + 1 runs steps 0..k: the same z_{k+1}


@pytest.mark.parametrize("bits", hqq.BITS)
@pytest.mark.parametrize("axis", [0, 1])
def test_codes_are_integral_in_range_and_scales_positive(bits, axis):
    w = _layer(bits + 10 * axis, exponent=-5)
    codes, scale, zero = hqq.quantize(w, bits=bits, group=16, axis=axis)
    assert codes.dtype == np.uint8 and codes.max() <= (1 << bits) - 1
    assert codes.shape == ((16, w.size // 16) if axis == 0 else (w.size // 16, 16))
    assert scale.shape == zero.shape == ((1, w.size // 16) if axis == 0 else (w.size // 16, 1))
    assert (scale > 0).all() and np.isfinite(zero).all()


def test_axis_0_groups_are_strided_columns():
    """reshape(G, -1): group j holds flat elements j, j + numel/G, ... (for [out, in], column
    j % in of rows r, r + G', ...), not G consecutive elements."""
    w = np.arange(32, dtype=np.float32).reshape(4, 8)
    assert hqq.group_view(w, group=4, axis=0)[:, 1].tolist() == [1, 9, 17, 25]
    assert hqq.group_view(w, group=4, axis=1)[1].tolist() == [4, 5, 6, 7]


def test_flat_and_narrow_groups():
    """Range <= 1e-4: inverse scale 1 and exact dequantization; a narrow group's inverse scale clamps at 2e4."""
    w = np.array([[0.75] * 8, [0.75 + 2.0 ** -14] * 4 + [0.75] * 4, [0.0] * 7 + [1e-3]], np.float32)
    codes, scale, zero = hqq.quantize(w, bits=4, group=8, axis=1, optimize=False)
    assert scale[:2, 0].tolist() == [1.0, 1.0] and codes[0].tolist() == [0] * 8
    assert scale[2, 0] > 1 / 2e4 and codes[2, -1] == 15  # 15 / 1e-3 = 15000 < 2e4: not clamped
    assert hqq.quantize(np.full((1, 8), 1e-3 + 5e-4 * np.arange(8) / 7, np.float32), bits=8, group=8, axis=1,
                        optimize=False)[1][0, 0] == 1 / 2e4  # 255 / 5e-4 clamps


def test_bad_arguments_name_themselves():
    w = _layer(0)
    for kwargs, name in (({"bits": 7}, "bits"), ({"axis": 2}, "axis"), ({"group": 96}, "group"),
                         ({"beta_schedule": "linear"}, "beta_schedule"), ({"optimize": 1}, "optimize")):
        with pytest.raises((TypeError, ValueError), match=name):
            hqq.quantize(w, **kwargs)


# ------------------------------------------------------------------ packing


@pytest.mark.parametrize("layout", [m.value for m in hqq.Layout])
def test_pack_round_trips(layout):
    bits, k = hqq.FIELDS[hqq.Layout(layout)]
    rows = 13 if layout == "3bit_32" else 3 * k
    codes = np.random.default_rng(bits).integers(0, 1 << bits, (rows, 5)).astype(np.uint8)
    packed = hqq.pack(codes, layout=layout)
    assert packed.dtype == (np.int32 if layout == "3bit_32" else np.uint8)
    assert packed.shape == (-(-rows // 10) if layout == "3bit_32" else rows // k, 5)
    back = hqq.unpack(packed, layout=layout)
    assert np.array_equal(back[:rows], codes) and not back[rows:].any()


def test_4bit_puts_row_i_high_and_row_i_plus_half_low():
    assert hqq.pack(np.array([[1], [2], [3], [4]], np.uint8), layout="4bit_u8").ravel().tolist() == [0x13, 0x24]


# ------------------------------------------------------------------ conditioned inputs and the rules


def test_every_valid_vector_is_conditioned():
    for v in load_vectors("quant.hqq.quantize"):
        if v.result == "valid":
            assert catalog.conditioned(np.asarray(v.inputs["w"]), **v.params), v.comment


@pytest.mark.deep
def test_the_default_kernel_passes_the_vectors():
    """In the default profile tests/test_default_adapter.py runs it (and tests/test_runner_corpus_rule.py
    rejects each corpus bug by a vector carrying its flag)."""
    impl = Implementation(numpy_hqq.NAME, numpy_hqq.OPS, variants=numpy_hqq.VARIANTS)
    report = run(impl, ops=OPS, examples=0)
    assert report.ok, [(f.where, f.flags) for r in report.ops for f in r.failures][:5]


def test_every_bug_breaks_its_own_op_only():
    for name, (op, _, kernel) in corpus.HQQ_BUGS.items():
        assert callable(kernel) and op in OPS, name


def _measure(n: int):
    """The float32 default kernel against the float64 oracle on n random layers: the worst
    (codes fraction beyond CODE_SLACK, zero moved per (flips + 1) / G, scale relative) over
    all; and over conditioned layers the codes differing and the worst zero relative error."""
    worst = np.zeros(3)
    cond_codes, cond_zero, n_cond = 0, 0.0, 0
    for seed in range(n):
        rng = np.random.default_rng(seed)
        bits, group = hqq.BITS[seed % 7], (8, 16, 32, 64, 128)[(seed // 7) % 5]
        params = {"bits": bits, "group": group, "axis": (seed // 35) % 2, "round_zero": bool((seed // 70) % 2),
                  "beta_schedule": ("constant", "kappa")[(seed // 140) % 2]}
        w = catalog._weights(rng, ((1, 4, 16, 32)[seed % 4], 2 * group), (-12, -9, -7, -5, -3, -1)[
            (seed // 280) % 6], outlier=int(rng.integers(2 * group)) if seed % 2 else None)
        exp, act = hqq.quantize(w, **params), numpy_hqq.quantize(w, **params)
        d = np.abs(exp[0].astype(int) - act[0].astype(int))
        assert d.max() <= 1
        m = (d > 0).sum(axis=params["axis"], keepdims=True)
        dz = np.abs(exp[2] - act[2]) - catalog.ZERO_RTOL * (1 + np.abs(exp[2]))
        worst = np.maximum(worst, [((d > 0).sum() - catalog.CODE_SLACK) / d.size, (dz * group / (m + 1)).max(),
                                   np.abs(act[1] / exp[1] - 1).max()])
        if catalog.conditioned(w, **params):
            n_cond += 1
            cond_codes += int((d > 0).sum())
            cond_zero = max(cond_zero, float((np.abs(exp[2] - act[2]) / (1 + np.abs(exp[2]))).max()))
        assert catalog.agreement(exp, act).ok, (seed, catalog.agreement(exp, act).describe())
    return worst, n_cond, cond_codes, cond_zero


def test_the_rules_hold_on_random_layers():
    worst, n_cond, cond_codes, cond_zero = _measure(60)
    assert cond_codes == 0 and cond_zero <= catalog.ZERO_TIGHT and n_cond >= 20


@pytest.mark.deep
def test_the_measured_figures():
    """The spec's figures (spec/quant.md#hqq-tolerance), over 3360 layers: any layer: codes beyond
    the slack at most 4.2e-3 of them, zeros at most 0.99 (flips + 1) / G, scales 1.4e-7; conditioned
    layers (64%): no code differs, zeros within 2.2e-6 relative."""
    worst, n_cond, cond_codes, cond_zero = _measure(3360)
    assert worst[0] <= catalog.CODE_FRACTION / 2 and worst[1] <= catalog.ZERO_PER_FLIP / 2
    assert worst[2] <= catalog.SCALE_RTOL / 4
    assert cond_codes == 0 and cond_zero <= catalog.ZERO_TIGHT / 8 and n_cond >= 0.5 * 3360


@pytest.mark.deep
def test_the_default_kernel_agrees_on_many_conditioned_examples():
    impl = Implementation(numpy_hqq.NAME, numpy_hqq.OPS, variants=numpy_hqq.VARIANTS)
    report = run(impl, ops=OPS, examples=300)
    assert report.ok, [(f.where, f.flags) for r in report.ops for f in r.failures][:5]


@pytest.mark.parametrize("bits", [4, 3])
@pytest.mark.parametrize("axis", [0, 1])
def test_state_dict_round_trips(bits, axis):
    """hqq 0.2.8's HQQLinear state dict (checked against hqq itself: the same keys, dtypes, shapes,
    meta and W_q words, and hqq's loader dequantizes it to load_state_dict's weights)."""
    w = _layer(bits, shape=(32, 64), exponent=-11)
    sd = hqq.state_dict(w, bits=bits, group=16, axis=axis)
    assert bytes(sd["packing"]).decode() == ("4bit_u8" if bits == 4 else "3bit_32") and sd["scale"].dtype == np.float16
    assert int(sd["round_zero"]) == (bits == 4) and sd["shape"].tolist() == [32, 64]
    codes, scale, zero = hqq.quantize(w, bits=bits, group=16, axis=axis, round_zero=bits == 4)
    half = [a.astype(np.float16).astype(np.float32) for a in (scale, zero)]
    want = hqq.dequantize(codes, *half)
    assert np.array_equal(hqq.load_state_dict(sd), want.reshape(32, 64))

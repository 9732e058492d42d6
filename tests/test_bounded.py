"""The bounded comparator: the rule, its non-finite cases, negative controls that
must fail at every precision, and correct low-precision kernels that must pass on
every seed (run thousands under HYPOTHESIS_PROFILE=deep)."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.attention.attend import attend
from ref.attention.catalog.common import OUT_LSE
from ref.attention.emulate import attend as attend_emulated
from ref.attention.flash import attend_tiled
from ref.testing.attention_cases import grid
from ref.testing.bounded import FLOOR_UNITS, Bound, compare_bounded, compare_bounded_parts, precision_of, ratio

sys.path.insert(0, str(Path(__file__).parent))
from corpus.attention_impls import hf_eager, naive  # noqa: E402

LOW = ("bfloat16", "float16", "float32")


@given(st.integers(0, 2**32 - 1), st.sampled_from(list(FLOOR_UNITS)), st.sampled_from(["relative", "absolute", "log"]),
       st.floats(1, 4), st.floats(0, 4))
def test_the_rule_is_exactly_k_times_plus_the_floor(seed, precision, scale, k, floor):
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((3, 5)) * 10.0 ** rng.integers(-3, 3)
    m = e + rng.standard_normal(e.shape) * 1e-3 * np.abs(e).max()
    bound = Bound(k, floor, scale)
    top = np.abs(e).max()
    unit = FLOOR_UNITS[precision]
    allowance = {"relative": unit * top, "absolute": unit * max(1, top),
                 "log": unit + min(unit, 2.0**-20) * top}[scale]
    tol = k * np.abs(m - e).max() + floor * allowance
    idx = tuple(rng.integers(0, s) for s in e.shape)
    for factor, ok in ((0.999, True), (1.001, False)):
        a = e.copy()
        a[idx] += factor * tol
        cmp = compare_bounded(e, m, a, precision=precision, bound=bound)
        assert cmp.ok is ok
        if not ok:
            assert cmp.first.index == idx and cmp.mismatched == 1


def test_non_finite_values_must_match():
    e = np.array([1.0, np.nan, np.inf, -np.inf, 2.0])
    assert compare_bounded(e, e, e.copy(), precision="bfloat16").ok
    for bad in ([1.0, 0.0, np.inf, -np.inf, 2.0], [1.0, np.nan, -np.inf, -np.inf, 2.0],
                [1.0, np.nan, np.inf, -np.inf, np.nan], [1.0, np.nan, np.inf, -np.inf, np.inf]):
        cmp = compare_bounded(e, e, np.array(bad), precision="bfloat16")
        assert not cmp.ok and cmp.first is not None
        assert cmp.summary() == "1 of 5 elements are NaN or infinite where the oracle's are finite, or miss " \
                                "the oracle's NaN or infinity (no tolerance applies)"
    assert compare_bounded(np.full(3, -np.inf), np.full(3, -np.inf), np.full(3, -np.inf), precision="float32").ok


def test_shapes_types_and_precisions():
    e = np.ones((2, 3))
    assert not compare_bounded(e, e, np.ones((3, 2)), precision="float32").ok
    assert "shape" in compare_bounded(e, e, np.ones(6), precision="float32").describe()
    assert not compare_bounded(e, e, np.ones((2, 3), np.int32), precision="float32").ok
    structured = np.zeros((2, 3), dtype=[("a", np.float32)])
    assert "float array" in compare_bounded(e, e, structured, precision="float32").describe()
    with pytest.raises(ValueError, match="precision"):
        attend_emulated("float8", np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 1, 2)))
    assert compare_bounded(e, e, np.ones((2, 3), ml_dtypes.bfloat16), precision="bfloat16").ok
    with pytest.raises(ValueError, match="precision"):
        compare_bounded(e, e, e, precision="float8")
    with pytest.raises(ValueError, match="emulated"):
        compare_bounded(e, e[:1], e, precision="float32")
    with pytest.raises(ValueError, match="k >= 1"):
        Bound(k=0.5)
    with pytest.raises(ValueError, match="scale"):
        Bound(scale="linear")
    assert precision_of(np.ones(2, ml_dtypes.bfloat16)) == "bfloat16"
    assert precision_of(np.ones(2, np.float16)) == "float16"
    with pytest.raises(ValueError, match="PRECISION"):
        precision_of(np.ones(2, ml_dtypes.float8_e4m3fn))
    parts = compare_bounded_parts((e, e), (e, e), (e, e + 1), names=("a", "b"), bounds={"a": Bound(), "b": Bound()},
                                  precision="float32")
    assert not parts.ok and parts.part == "b"
    assert not compare_bounded_parts((e, e), (e, e), e, names=("a", "b"), bounds={"a": Bound(), "b": Bound()},
                                     precision="float32").ok
    assert ratio(compare_bounded(e, e, e, precision="float32")) == 0


@st.composite
def attention_inputs(draw, min_lk=1, stds=(0.5, 1.0, 2.0)):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 3))
    d = draw(st.sampled_from([8, 16, 64, 128]))
    lq, lk = draw(st.integers(2, 16)), draw(st.integers(min_lk, 48))
    std = draw(st.sampled_from(stds))
    inputs = {"q": grid(rng, (1, lq, hq, d), std), "k": grid(rng, (1, lk, hkv, d), std),
              "v": grid(rng, (1, lk, hkv, d))}
    opts = {"causal": draw(st.booleans())}
    if draw(st.booleans()):
        opts["sinks"] = grid(rng, (hq,))
    if draw(st.booleans()):
        opts["softcap"] = 5.0
    return inputs, opts


def _judge(precision, inputs, opts, actual):
    expected = attend(**inputs, **opts)
    emulated = attend_emulated(precision, **inputs, **opts)
    return compare_bounded_parts(expected, emulated, actual, names=("out", "lse"), bounds=OUT_LSE,
                                 precision=precision)


@given(attention_inputs(), st.sampled_from(LOW), st.integers(1, 32), st.integers(1, 32))
def test_correct_low_precision_kernels_pass_on_every_seed(problem, precision, bq, bk):
    """Three kernels that round differently from the emulation: the online-softmax
    algorithm tile by tile, a per-head loop keeping the logits in float32, and Hugging
    Face's eager attention (every tensor in the dtype). None may ever be rejected."""
    inputs, opts = problem
    tiled = attend_tiled(**inputs, **opts, block_q=bq, block_k=bk, precision=precision)
    cmp = _judge(precision, inputs, opts, tiled)
    assert cmp.ok, cmp.describe()
    for kernel in (naive, hf_eager):
        out, lse = kernel(**{k: np.asarray(v) for k, v in inputs.items()}, **opts, precision=precision)
        cmp = _judge(precision, inputs, opts, (np.asarray(out, np.float64), lse))
        assert cmp.ok, (kernel.__name__, cmp.describe())


@given(attention_inputs(min_lk=4, stds=(1.0, 2.0)), st.sampled_from(LOW),
       st.sampled_from(["zeros", "shuffled rows", "neighbouring head"]))
def test_negative_controls_fail_at_every_precision(problem, precision, control):
    """On inputs whose rows and heads differ (four keys or more; with one key every
    row's output is that key's value, and a shuffle changes nothing)."""
    inputs, opts = problem
    out, lse = attend_emulated(precision, **inputs, **opts)
    if control == "zeros":
        out = np.zeros_like(out)
    elif control == "shuffled rows":
        out = np.roll(out, 1, axis=1)
    else:
        if out.shape[2] == 1:
            inputs = {**inputs, "q": np.concatenate([inputs["q"]] * 2, axis=2)}
            inputs["q"][:, :, 1] *= -1
            opts = {**opts, "sinks": None if opts.get("sinks") is None else np.repeat(opts["sinks"], 2)}
            out, lse = attend_emulated(precision, **inputs, **opts)
        out = np.roll(out, 1, axis=2)
    cmp = _judge(precision, inputs, opts, (out, lse))
    assert not cmp.ok


def test_a_bounded_mismatch_shows_both_bit_patterns():
    e = np.array([1.0, 2.0, 4.0])
    got = np.array([1.0, 2.0, 4.5], dtype=np.float32)
    cmp = compare_bounded(e, e, got, precision="float32")
    assert not cmp.ok and cmp.first.index == (2,)
    assert (cmp.first.expected_bits, cmp.first.actual_bits) == ("0x4010000000000000", "0x40900000")

"""RoPE against a per-element loop, its algebra, torch re-statements of Hugging Face,
Meta and DeepSeek code, hand-derived YaRN/Llama-3.1 figures, and its error cases."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.attention import emulate
from ref.attention.rope import RopeStyle, apply_rope, rope_frequencies, yarn_mscale
from ref.formats import round_to

ROPE_STYLES = [style.value for style in RopeStyle]

LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
DEEPSEEK_V3 = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
               "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
GPT_OSS = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
           "beta_slow": 1.0, "truncate": False}
BF16 = ml_dtypes.bfloat16


# ---------------------------------------------------------------- the loop ---------

def naive_inv_freq(r, base, scaling):
    """inv_freq one pair at a time, from the definitions (Meta's llama3 loop, YaRN's ramp)."""
    scaling = dict(scaling or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    out, factor_attn = [], 1.0
    for i in range(r // 2):
        f = base ** (-2.0 * i / r)
        if kind == "linear":
            f = f / scaling["factor"]
        elif kind == "llama3":
            s, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
            l0 = scaling["original_max_position_embeddings"]
            wavelen = 2 * math.pi / f
            if wavelen < l0 / hi:
                pass
            elif wavelen > l0 / lo:
                f = f / s
            else:
                smooth = (l0 / wavelen - lo) / (hi - lo)
                f = (1 - smooth) * f / s + smooth * f
        elif kind == "yarn":
            s, l0 = scaling["factor"], scaling["original_max_position_embeddings"]
            fast, slow = scaling.get("beta_fast", 32), scaling.get("beta_slow", 1)
            lo = r * math.log(l0 / (fast * 2 * math.pi)) / (2 * math.log(base))
            hi = r * math.log(l0 / (slow * 2 * math.pi)) / (2 * math.log(base))
            if scaling.get("truncate", True):
                lo, hi = math.floor(lo), math.ceil(hi)
            lo, hi = max(lo, 0), min(hi, r - 1)
            hi = hi + 0.001 if lo == hi else hi
            ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
            f = (f / s) * ramp + f * (1 - ramp)
        out.append(f)
    if kind == "yarn":
        s = scaling["factor"]
        m, mall = scaling.get("mscale"), scaling.get("mscale_all_dim")

        def msc(scale, k=1.0):
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0

        if "attention_factor" in scaling:
            factor_attn = scaling["attention_factor"]
        elif m and mall:
            factor_attn = msc(s, m) / msc(s, mall)
        else:
            factor_attn = msc(s)
    return out, factor_attn


def naive_rope(x, positions, *, rotary_dim=None, base=10000.0, style="neox", scaling=None, attention_factor="cos_sin"):
    x = np.asarray(x).astype(np.float64)
    d = x.shape[-1]
    r = d if rotary_dim is None else rotary_dim
    inv, fa = naive_inv_freq(r, base, scaling)
    fa = fa if attention_factor == "cos_sin" else 1.0
    pos = np.broadcast_to(np.asarray(positions), x.shape[:-2])
    out = x.copy()
    for t in np.ndindex(*x.shape[:-2]):
        m = int(pos[t])
        for h in range(x.shape[-2]):
            v = x[t + (h,)]
            for i in range(r // 2):
                ja, jb = (i, i + r // 2) if style == "neox" else (2 * i, 2 * i + 1)
                c, s = math.cos(m * inv[i]) * fa, math.sin(m * inv[i]) * fa
                out[t + (h, ja)] = v[ja] * c - v[jb] * s
                out[t + (h, jb)] = v[jb] * c + v[ja] * s
    return out


# ---------------------------------------------------------------- strategies -------

def scalings():
    llama3 = st.builds(
        lambda s, lo, gap, l0: {"rope_type": "llama3", "factor": s, "low_freq_factor": lo,
                                "high_freq_factor": lo + gap, "original_max_position_embeddings": l0},
        st.floats(1, 64), st.floats(0.25, 4), st.floats(0.5, 8), st.sampled_from([512, 2048, 8192, 32768]))
    yarn = st.builds(
        lambda s, l0, fast, slow, mscales, truncate: {
            "rope_type": "yarn", "factor": s, "original_max_position_embeddings": l0, "beta_fast": fast,
            "beta_slow": slow, "truncate": truncate, **mscales},
        st.floats(1, 64), st.sampled_from([256, 2048, 4096, 32768]), st.floats(4, 64), st.floats(0.25, 2),
        st.sampled_from([{}, {"mscale": 1.0, "mscale_all_dim": 1.0}, {"mscale": 0.707, "mscale_all_dim": 1.0},
                         {"mscale": 1.0, "mscale_all_dim": 0}, {"attention_factor": 1.3}]),
        st.booleans())
    linear = st.builds(lambda s: {"rope_type": "linear", "factor": s}, st.floats(0.5, 16))
    return st.one_of(st.none(), st.just({"rope_type": "default"}), linear, llama3, yarn)


@st.composite
def cases(draw, max_position=100_000):
    """x [*S, H, D] of any float dtype, positions broadcastable to S, and the options."""
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    h, d = draw(st.integers(1, 3)), 2 * draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from([np.float64, np.float32, np.float16, BF16]))
    x = (rng.standard_normal((*lead, h, d)) * draw(st.sampled_from([1e-3, 1.0, 40.0]))).astype(dtype)
    pshape = lead[-1:] if len(lead) == 2 and draw(st.booleans()) else lead  # [L] against x [B, L, H, D]
    positions = rng.integers(0, max_position, pshape)
    options = dict(rotary_dim=2 * draw(st.integers(0, d // 2)), base=draw(st.sampled_from([1e4, 5e5, 1.5e5, 1e6])),
                   style=draw(st.sampled_from(ROPE_STYLES)), scaling=draw(scalings()))
    return x, positions, options


def _pair_norms(x, r, style):
    i = np.arange(r // 2)
    ia, ib = (i, i + r // 2) if style == "neox" else (2 * i, 2 * i + 1)
    return np.hypot(x[..., ia], x[..., ib]), ia, ib


# ---------------------------------------------------------------- the definition ---

@given(cases(), st.sampled_from(["cos_sin", "none"]))
def test_matches_the_per_element_loop(case, attention_factor):
    x, positions, options = case
    got = apply_rope(x, positions, attention_factor=attention_factor, **options)
    want = naive_rope(x, positions, attention_factor=attention_factor, **options)
    assert got.dtype == np.float64 and got.shape == x.shape
    # angles up to 1e5 rad carry ~1e-11 of float64 rounding; any real slip is O(1)
    scale = np.abs(x.astype(np.float64)).max(axis=-1, keepdims=True) + 1e-300
    np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=1e-9)


@given(cases())
def test_each_pair_keeps_its_norm_and_the_rest_pass_through(case):
    x, positions, options = case
    out = apply_rope(x, positions, attention_factor="none", **options)
    r, xf = options["rotary_dim"], x.astype(np.float64)
    before, _, _ = _pair_norms(xf, r, options["style"])
    after, _, _ = _pair_norms(out, r, options["style"])
    np.testing.assert_allclose(after, before, rtol=1e-12, atol=0)
    assert np.array_equal(out[..., r:], xf[..., r:])  # bit for bit
    _, factor = rope_frequencies(r, base=options["base"], scaling=options["scaling"])
    scaled, _, _ = _pair_norms(apply_rope(x, positions, **options), r, options["style"])
    np.testing.assert_allclose(scaled, factor * before, rtol=1e-12, atol=0)


@given(st.integers(0, 2**32 - 1), st.integers(0, 50_000), st.integers(0, 50_000), st.integers(0, 50_000),
       st.sampled_from(ROPE_STYLES), scalings())
def test_scores_depend_on_the_offset_only(seed, m, n, shift, style, scaling):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, 1, 4, 16))  # one token, 4 heads, D 16
    opts = dict(style=style, scaling=scaling, attention_factor="none")

    def scores(mq, nk):
        return np.einsum("thd,thd->th", apply_rope(q, [mq], **opts), apply_rope(k, [nk], **opts))

    tol = 1e-9 * np.linalg.norm(q) * np.linalg.norm(k)
    np.testing.assert_allclose(scores(m, n), scores(m + shift, n + shift), rtol=0, atol=tol)
    lo, hi = sorted((m, n))
    q0, k0 = (q, k) if m <= n else (k, q)
    rel = np.einsum("thd,thd->th", q0, apply_rope(k0, [hi - lo], **opts))
    np.testing.assert_allclose(scores(lo, hi) if m <= n else scores(hi, lo), rel, rtol=0, atol=tol)


@given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.integers(0, 4))
def test_gptj_is_neox_on_interleaved_dims(seed, half, extra):
    rng = np.random.default_rng(seed)
    r, d = 2 * half, 2 * half + extra
    x = rng.standard_normal((5, 2, d))
    positions = rng.integers(0, 10_000, 5)
    perm = np.r_[np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, d)]  # evens, odds, pass-through
    gptj = apply_rope(x, positions, rotary_dim=r, style="gptj", scaling=LLAMA31)
    neox = apply_rope(x[..., perm], positions, rotary_dim=r, style="neox", scaling=LLAMA31)
    assert np.array_equal(gptj[..., perm], neox)
    if r >= 4:  # the two styles really differ
        assert not np.allclose(apply_rope(x, positions, rotary_dim=r, style="neox"),
                               apply_rope(x, positions, rotary_dim=r, style="gptj"))


@given(cases())
def test_partial_rotary_is_the_full_rotation_of_the_leading_dims(case):
    x, positions, options = case
    r = options["rotary_dim"]
    out = apply_rope(x, positions, **options)
    full = apply_rope(x[..., :r], positions, **{**options, "rotary_dim": None})
    assert np.array_equal(out[..., :r], full)
    assert np.array_equal(out[..., r:], x[..., r:].astype(np.float64))


@given(cases())
def test_rotary_dim_zero_and_position_zero_are_the_identity(case):
    x, positions, options = case
    xf = x.astype(np.float64)
    assert np.array_equal(apply_rope(x, positions, **{**options, "rotary_dim": 0}), xf)
    opts = {**options, "scaling": None}
    assert np.array_equal(apply_rope(x, np.zeros_like(positions), **opts), xf)


@given(st.integers(0, 2**32 - 1), st.integers(0, 30_000), st.integers(0, 30_000), st.sampled_from(ROPE_STYLES),
       scalings())
def test_rotations_compose(seed, m, n, style, scaling):
    x = np.random.default_rng(seed).standard_normal((3, 2, 12))
    opts = dict(style=style, scaling=scaling, attention_factor="none")
    twice = apply_rope(apply_rope(x, [m] * 3, **opts), [n] * 3, **opts)
    np.testing.assert_allclose(twice, apply_rope(x, [m + n] * 3, **opts), rtol=0, atol=1e-9)


def test_positions_broadcast_over_batch_and_packed_tokens_are_independent():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 3, 8))  # B, L, H, D
    pos = rng.integers(0, 4096, 5)
    by_l = apply_rope(x, pos, style="gptj", scaling=DEEPSEEK_V3)
    by_bl = apply_rope(x, np.stack([pos, pos]), style="gptj", scaling=DEEPSEEK_V3)
    assert np.array_equal(by_l, by_bl)
    packed = apply_rope(x.reshape(10, 3, 8), np.r_[pos, pos], style="gptj", scaling=DEEPSEEK_V3)
    assert np.array_equal(packed, by_l.reshape(10, 3, 8))
    one = [apply_rope(x[0, t:t + 1], pos[t:t + 1], style="gptj", scaling=DEEPSEEK_V3) for t in range(5)]
    assert np.array_equal(np.concatenate(one), by_l[0])
    assert np.array_equal(apply_rope(x[0, :1], np.int64(pos[0])), apply_rope(x[0, :1], pos[:1]))  # 0-d positions


def test_empty_and_non_finite_inputs():
    assert apply_rope(np.zeros((0, 2, 8)), np.zeros(0, np.int64)).shape == (0, 2, 8)
    assert emulate.rope("bfloat16", np.zeros((2, 0, 2, 8), np.float32), np.zeros(0, np.int64)).size == 0
    x = np.array([[[np.inf, 1.0, np.nan, 2.0, 3.0, 4.0]]])  # neox pairs (0, 3), (1, 4), (2, 5)
    at0 = apply_rope(x, [0])
    assert at0[0, 0, 0] == np.inf and np.isnan(at0[0, 0, 3])  # b' = b cos 0 + inf * sin 0 = NaN
    assert np.isnan(at0[0, 0, 2]) and np.isnan(at0[0, 0, 5])  # NaN stays in its pair
    assert np.array_equal(at0[0, 0, [1, 4]], [1.0, 3.0])  # the finite pair (1, 3) is untouched
    at5 = apply_rope(x, [5])
    assert np.all(np.isinf(at5[0, 0, [0, 3]])) and np.all(np.isfinite(at5[0, 0, [1, 4]]))


def test_hand_worked_values():
    # D = 4, base 100: inv_freq (1, 1/10); position 2 turns pair 0 by 2 rad and pair 1 by 0.2 rad
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]])
    c2, s2, c02, s02 = math.cos(2), math.sin(2), math.cos(0.2), math.sin(0.2)
    neox = [1 * c2 - 3 * s2, 2 * c02 - 4 * s02, 3 * c2 + 1 * s2, 4 * c02 + 2 * s02]  # pairs (0,2), (1,3)
    gptj = [1 * c2 - 2 * s2, 2 * c2 + 1 * s2, 3 * c02 - 4 * s02, 4 * c02 + 3 * s02]  # pairs (0,1), (2,3)
    # atol: a few ulps of the terms (up to 4), which cancel in 2 cos 0.2 - 4 sin 0.2 = 0.077;
    # numpy 1.24's float64 cos and sin (AVX-512) differ from the C library's by an ulp.
    np.testing.assert_allclose(apply_rope(x, [2], base=100.0)[0, 0], neox, rtol=1e-15, atol=4 * 2.0**-52 * 4)
    np.testing.assert_allclose(apply_rope(x, [2], base=100.0, style="gptj")[0, 0], gptj, rtol=1e-15,
                               atol=4 * 2.0**-52 * 4)


# ---------------------------------------------------------------- frequencies ------

@given(st.integers(0, 64), st.sampled_from([1e4, 5e5, 1.5e5, 2.0]), scalings())
def test_frequencies_match_the_loop(half, base, scaling):
    inv, factor = rope_frequencies(2 * half, base=base, scaling=scaling)
    want, want_factor = naive_inv_freq(2 * half, base, scaling)
    assert inv.dtype == np.float64 and inv.shape == (half,)
    np.testing.assert_allclose(inv, want, rtol=1e-13, atol=0)
    assert factor == pytest.approx(want_factor, rel=1e-15)


def test_llama31_has_all_three_regions_and_meets_at_both_bounds():
    inv0, _ = rope_frequencies(128, base=500000.0)
    inv, factor = rope_frequencies(128, base=500000.0, scaling=LLAMA31)
    assert factor == 1.0
    wavelen = 2 * math.pi / inv0
    high, low = wavelen < 8192 / 4, wavelen > 8192 / 1  # 2048 and 8192 tokens
    mid = ~high & ~low
    assert high.sum() and low.sum() and mid.sum()  # Llama 3.1's figures use every branch
    assert np.array_equal(inv[high], inv0[high])
    np.testing.assert_allclose(inv[low], inv0[low] / 8, rtol=1e-15)
    ratio = inv[mid] / inv0[mid]
    assert np.all((ratio > 1 / 8) & (ratio < 1)) and np.all(np.diff(ratio) < 0)  # interpolates, monotone

    # Place a wavelength exactly on each bound (x4 and x1 are exact in binary):
    # smooth is 1 on the high bound and 0 on the low bound, so the pieces meet there.
    for i in (10, 30, 50):
        w = float(wavelen[i])
        at_high = rope_frequencies(128, base=500000.0, scaling={**LLAMA31, "original_max_position_embeddings": 4 * w})
        at_low = rope_frequencies(128, base=500000.0, scaling={**LLAMA31, "original_max_position_embeddings": w})
        assert at_high[0][i] == pytest.approx(inv0[i], rel=1e-15)
        assert at_low[0][i] == pytest.approx(inv0[i] / 8, rel=1e-15)
        for nudge in (1 - 1e-6, 1 + 1e-6):  # just either side of each bound: the right piece, continuous
            for l0, limit in ((4 * w * nudge, inv0[i]), (w * nudge, inv0[i] / 8)):
                scaling = {**LLAMA31, "original_max_position_embeddings": l0}
                near = rope_frequencies(128, base=500000.0, scaling=scaling)[0][i]
                assert near == pytest.approx(naive_inv_freq(128, 500000.0, scaling)[0][i], rel=1e-13)
                assert near == pytest.approx(limit, rel=1e-5)


def test_deepseek_v3_yarn_ramp_by_hand():
    # r 64, base 1e4, L0 4096: d(n) = 64 ln(4096 / (2 pi n)) / (2 ln 1e4)
    # d(32) = 64 * 3.0143 / 18.4207 = 10.47 -> low 10; d(1) = 64 * 6.4799 / 18.4207 = 22.51 -> high 23
    inv0, _ = rope_frequencies(64)
    inv, factor = rope_frequencies(64, scaling=DEEPSEEK_V3)
    assert factor == 1.0  # mscale / mscale_all_dim = 1: DeepSeek scales the softmax instead
    assert np.array_equal(inv[:11], inv0[:11])  # ramp 0 up to i = low: extrapolated (kept)
    np.testing.assert_allclose(inv[23:], inv0[23:] / 40, rtol=1e-15)  # ramp 1 from i = high
    ramp = (np.arange(11, 23) - 10) / 13
    np.testing.assert_allclose(inv[11:23], inv0[11:23] * (1 - ramp) + inv0[11:23] / 40 * ramp, rtol=1e-14)


def test_gpt_oss_yarn_is_untruncated():
    # r 64, base 150000, L0 4096: d(32) = 64 * 3.0143 / (2 * 11.9184) = 8.094, d(1) = 17.398
    inv0, _ = rope_frequencies(64, base=150000.0)
    inv, factor = rope_frequencies(64, base=150000.0, scaling=GPT_OSS)
    assert factor == pytest.approx(0.1 * math.log(32) + 1, rel=1e-15)
    lo = 64 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(150000))
    hi = 64 * math.log(4096 / (2 * math.pi)) / (2 * math.log(150000))
    assert 8.09 < lo < 8.10 and 17.39 < hi < 17.40
    ramp = np.clip((np.arange(32) - lo) / (hi - lo), 0, 1)
    np.testing.assert_allclose(inv, inv0 * (1 - ramp) + inv0 / 32 * ramp, rtol=1e-14)
    truncated, _ = rope_frequencies(64, base=150000.0, scaling={**GPT_OSS, "truncate": True})
    assert not np.allclose(truncated, inv)  # the option matters


def test_yarn_equal_betas_untruncated_make_a_step():
    # beta_fast = beta_slow = 4: d(4) = 64 ln(4096 / (8 pi)) / (2 ln 1e4) = 64 * 5.0937 / 18.4207 = 17.70,
    # and the ramp, widened by 0.001, is a step between pairs 17 and 18
    inv0, _ = rope_frequencies(64)
    scaling = {"rope_type": "yarn", "factor": 10.0, "original_max_position_embeddings": 4096, "beta_fast": 4,
               "beta_slow": 4, "truncate": False}
    inv, _ = rope_frequencies(64, scaling=scaling)
    assert np.array_equal(inv[:18], inv0[:18])
    np.testing.assert_allclose(inv[18:], inv0[18:] / 10, rtol=1e-15)


@pytest.mark.parametrize("scaling, want", [
    ({"factor": 40, "mscale": 1, "mscale_all_dim": 1}, 1.0),  # DeepSeek-V3: the ratio is 1
    ({"factor": 4}, 0.1 * math.log(4) + 1),  # YaRN's default, sqrt(1/t) = 0.1 ln s + 1
    ({"factor": 40, "mscale": 1, "mscale_all_dim": 0}, 0.1 * math.log(40) + 1),  # all_dim 0: the default
    ({"factor": 40, "mscale": 0.707, "mscale_all_dim": 1}, (0.0707 * math.log(40) + 1) / (0.1 * math.log(40) + 1)),
    ({"factor": 40, "mscale": 1, "mscale_all_dim": 0.707}, (0.1 * math.log(40) + 1) / (0.0707 * math.log(40) + 1)),
    ({"factor": 8, "attention_factor": 0.5, "mscale": 1, "mscale_all_dim": 1}, 0.5),  # given: wins
    ({"factor": 0.5}, 1.0),  # s <= 1
    ({"factor": 1}, 1.0),
])
def test_yarn_attention_factor(scaling, want):
    _, factor = rope_frequencies(16, scaling={"rope_type": "yarn", "original_max_position_embeddings": 4096,
                                              **scaling})
    assert factor == pytest.approx(want, rel=1e-15)


def test_yarn_mscale_is_deepseeks_softmax_factor():
    # DeepSeek-V3: softmax scale (192)^-0.5 * mscale^2 with mscale = 0.1 * 1.0 * ln 40 + 1 = 1.36889
    assert yarn_mscale(40, 1.0) == pytest.approx(1.3688879, abs=1e-7)  # ln 40 = 3.6888795
    assert yarn_mscale(40, 0.707) == pytest.approx(0.0707 * 3.6888795 + 1, abs=1e-7)
    assert yarn_mscale(1.0, 5.0) == 1.0 and yarn_mscale(0.25) == 1.0


def test_yarn_factor_scales_cos_and_sin_only_under_cos_sin():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 2, 24))
    pos = rng.integers(0, 20_000, 6)
    scaling = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048}
    with_factor = apply_rope(x, pos, rotary_dim=16, scaling=scaling)
    without = apply_rope(x, pos, rotary_dim=16, scaling=scaling, attention_factor="none")
    f = 0.1 * math.log(16) + 1
    np.testing.assert_allclose(with_factor[..., :16], f * without[..., :16], rtol=1e-14)
    assert np.array_equal(with_factor[..., 16:], x[..., 16:]) and np.array_equal(without[..., 16:], x[..., 16:])


# ---------------------------------------------------------------- torch re-statements

def _f32_rtol(base):
    """float32 holds 2i/r to 2^-24 relative, and base^(-2i/r) multiplies that by ln(base);
    pow, the reciprocal and the scaling add a few float32 roundings."""
    return 4 * (math.log(base) + 4) * 2.0**-24


def test_default_and_llama3_frequencies_match_torch_float32_and_float64():
    torch = pytest.importorskip("torch")

    def hf_style(r, base, s, lo, hi, l0, dtype):
        inv = 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.int64).to(dtype) / r))
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > l0 / lo, inv / s, inv)
        smooth = (l0 / wavelen - lo) / (hi - lo)
        medium = ~(wavelen < l0 / hi) & ~(wavelen > l0 / lo)
        return inv, torch.where(medium, (1 - smooth) * scaled / s + smooth * scaled, scaled)

    rng = np.random.default_rng(11)
    configs = [(128, 500000.0, 8.0, 1.0, 4.0, 8192), (64, 500000.0, 32.0, 1.0, 4.0, 8192)]  # Llama 3.1, 3.2
    configs += [(int(2 * rng.integers(1, 65)), float(rng.choice([1e4, 5e5, 1e6])), float(rng.uniform(1, 64)),
                 float(rng.uniform(0.5, 2)), float(rng.uniform(2.5, 8)), int(rng.choice([2048, 8192])))
                for _ in range(20)]
    for r, base, s, lo, hi, l0 in configs:
        scaling = {"rope_type": "llama3", "factor": s, "low_freq_factor": lo, "high_freq_factor": hi,
                   "original_max_position_embeddings": l0}
        plain, _ = rope_frequencies(r, base=base)
        got, _ = rope_frequencies(r, base=base, scaling=scaling)
        for dtype, rtol in ((torch.float64, 1e-13), (torch.float32, _f32_rtol(base))):
            inv, llama = hf_style(r, base, s, lo, hi, l0, dtype)
            np.testing.assert_allclose(plain, inv.double().numpy(), rtol=rtol)
            np.testing.assert_allclose(got, llama.double().numpy(), rtol=rtol)


def test_yarn_frequencies_match_torch_float32_and_float64():
    torch = pytest.importorskip("torch")

    def deepseek_style(r, base, s, l0, fast, slow, truncate, dtype):
        def corr(n):
            return r * math.log(l0 / (n * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = (math.floor(corr(fast)), math.ceil(corr(slow))) if truncate else (corr(fast), corr(slow))
        lo, hi = max(lo, 0), min(hi, r - 1)
        hi = hi + 0.001 if lo == hi else hi
        freqs = 1.0 / (base ** (torch.arange(0, r, 2, dtype=dtype) / r))
        smooth = 1 - torch.clamp((torch.arange(r // 2, dtype=dtype) - lo) / (hi - lo), 0, 1)
        return freqs / s * (1 - smooth) + freqs * smooth

    rng = np.random.default_rng(12)
    configs = [(64, 10000.0, 40.0, 4096, 32.0, 1.0, True), (64, 150000.0, 32.0, 4096, 32.0, 1.0, False),
               (64, 50000.0, 32.0, 4096, 1.0, 1.0, True)]  # DeepSeek-V3, gpt-oss, Kimi-K2-like (beta 1/1)
    configs += [(int(2 * rng.integers(1, 65)), float(rng.choice([1e4, 1.5e5, 1e6])), float(rng.uniform(1, 64)),
                 int(rng.choice([512, 4096, 32768])), float(rng.uniform(8, 64)), float(rng.uniform(0.5, 2)),
                 bool(rng.integers(2))) for _ in range(20)]
    for r, base, s, l0, fast, slow, truncate in configs:
        scaling = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": l0, "beta_fast": fast,
                   "beta_slow": slow, "truncate": truncate}
        got, _ = rope_frequencies(r, base=base, scaling=scaling)
        for dtype, rtol in ((torch.float64, 1e-13), (torch.float32, _f32_rtol(base))):
            want = deepseek_style(r, base, s, l0, fast, slow, truncate, dtype)
            np.testing.assert_allclose(got, want.double().numpy(), rtol=rtol)


def test_rotation_matches_torch_rotate_half_and_complex_multiply():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    for _ in range(10):
        b, l, h, d = (int(v) for v in rng.integers(1, 5, 4))
        d *= 4
        x = rng.standard_normal((b, l, h, d))
        pos = rng.integers(0, 100_000, (b, l))
        tx, tp = torch.from_numpy(x), torch.from_numpy(pos).double()
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        freqs = tp[..., None] * inv  # [B, L, D/2]
        # Hugging Face Llama: cos/sin over cat(freqs, freqs), q * cos + rotate_half(q) * sin
        emb = torch.cat([freqs, freqs], dim=-1)[:, :, None]
        half = torch.cat([-tx[..., d // 2:], tx[..., :d // 2]], dim=-1)
        hf = tx * emb.cos() + half * emb.sin()
        np.testing.assert_allclose(apply_rope(x, pos), hf.numpy(), rtol=0, atol=1e-10)
        # Meta's Llama and DeepSeek reference code: consecutive pairs as complex numbers
        z = torch.view_as_complex(tx.reshape(b, l, h, d // 2, 2).contiguous())
        meta = torch.view_as_real(z * torch.polar(torch.ones_like(freqs), freqs)[:, :, None]).flatten(3)
        np.testing.assert_allclose(apply_rope(x, pos, style="gptj"), meta.numpy(), rtol=0, atol=1e-10)


# ---------------------------------------------------------------- emulation --------

@given(cases(max_position=8192), st.sampled_from(["bfloat16", "float16", "float32"]))
def test_emulated_is_representable_and_within_a_few_ulps(case, precision):
    x, positions, options = case
    xp = round_to(x.astype(np.float64), precision)  # exact at precision, so only the op's rounding shows
    emu = emulate.rope(precision, xp, positions, **options)
    assert np.array_equal(round_to(emu, precision), emu)
    exact = apply_rope(xp, positions, **options)
    mant = {"bfloat16": 7, "float16": 10, "float32": 23}[precision]
    r, style = options["rotary_dim"], options["style"]
    norms, ia, ib = _pair_norms(exact, r, style)
    # float32 angles at positions < 8192 are good to ~1e-3 rad; each output is at most
    # the pair's norm, so its error is a rounding of it plus that angle error.
    emin = {"bfloat16": -126, "float16": -14, "float32": -126}[precision]
    # one ulp of the pair's norm, never finer than the precision's subnormal spacing
    ulp = 2.0 ** (np.maximum(np.floor(np.log2(np.maximum(norms, 1e-300))), emin) - mant)
    # low precisions store cos, sin, both products and the result: about 4 roundings
    bound = 2 * ulp + 2e-3 * norms if precision == "float32" else 4 * ulp
    assert np.all(np.abs(emu[..., ia] - exact[..., ia]) <= bound)
    assert np.all(np.abs(emu[..., ib] - exact[..., ib]) <= bound)
    assert np.array_equal(emu[..., r:], xp[..., r:])


def test_emulated_float64_is_the_oracle_and_bfloat16_rounds():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 3, 32)).astype(np.float32)
    pos = rng.integers(0, 4096, (4, 6))
    for options in ({}, {"style": "gptj", "scaling": DEEPSEEK_V3}, {"scaling": GPT_OSS}, {"scaling": LLAMA31}):
        assert np.array_equal(emulate.rope("float64", x, pos, **options), apply_rope(x, pos, **options))
        emu = emulate.rope("bfloat16", x, pos, **options)
        assert not np.array_equal(emu, apply_rope(x, pos, **options))


def test_emulated_matches_a_numpy_float32_pipeline_bit_for_bit():
    """The emulation is one of two pipelines written here in NumPy's own float32 and
    low-precision arithmetic: frequencies from the float64 formula rounded once, or
    computed in float32 (reference code); it is the one further from the oracle."""
    rng = np.random.default_rng(6)
    for precision, dtype in (("bfloat16", BF16), ("float16", np.float16), ("float32", np.float32)):
        for style, scaling in (("neox", GPT_OSS), ("gptj", DEEPSEEK_V3), ("neox", LLAMA31)):
            x = (rng.standard_normal((7, 2, 16)) * 3).astype(dtype)
            pos = rng.integers(0, 200_000, 7)
            pipelines = []
            for freq_dtype in ("float64", "float32"):
                inv, factor = rope_frequencies(12, base=150000.0, scaling=scaling, dtype=freq_dtype)
                theta = pos.astype(np.float32)[:, None] * inv.astype(np.float32)  # float32 multiply
                cos = np.cos(theta.astype(np.float64)).astype(np.float32) * np.float32(factor)
                sin = np.sin(theta.astype(np.float64)).astype(np.float32) * np.float32(factor)
                cos, sin = cos.astype(dtype), sin.astype(dtype)  # the cache in the activation dtype
                i = np.arange(6)
                ia, ib = (i, i + 6) if style == "neox" else (2 * i, 2 * i + 1)
                a, b = x[..., ia], x[..., ib]  # arithmetic in `dtype`: each result rounded to it
                want = x.copy()
                want[..., ia] = a * cos[:, None] - b * sin[:, None]
                want[..., ib] = b * cos[:, None] + a * sin[:, None]
                pipelines.append(want.astype(np.float64))
            got = emulate.rope(precision, x, pos, rotary_dim=12, base=150000.0, style=style,
                                      scaling=scaling)
            exact = apply_rope(x, pos, rotary_dim=12, base=150000.0, style=style, scaling=scaling)
            errors = [np.abs(p - exact).max() for p in pipelines]
            assert np.array_equal(got, pipelines[int(np.argmax(errors))]), (precision, style)


def test_float32_frequencies_are_the_formula_in_float32():
    for scaling in (None, LLAMA31, DEEPSEEK_V3, GPT_OSS, {"rope_type": "linear", "factor": 4.0}):
        for r in (6, 64, 128):
            f64, a = rope_frequencies(r, base=500000.0, scaling=scaling)
            f32, b = rope_frequencies(r, base=500000.0, scaling=scaling, dtype="float32")
            assert a == b and f32.dtype == np.float64
            assert np.array_equal(f32, f32.astype(np.float32))  # float32 values
            assert np.allclose(f32, f64, rtol=2e-6, atol=0)  # a few float32 ulps of the formula
    with pytest.raises(ValueError, match="dtype"):
        rope_frequencies(8, dtype="float16")


# ---------------------------------------------------------------- errors -----------

X = np.zeros((3, 2, 8))
P = np.arange(3)
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}


@pytest.mark.parametrize("call, error, name", [
    (lambda: apply_rope(X, P, rotary_dim=3), ValueError, "rotary_dim"),
    (lambda: apply_rope(X, P, rotary_dim=10), ValueError, "rotary_dim"),
    (lambda: apply_rope(X, P, rotary_dim=-2), ValueError, "rotary_dim"),
    (lambda: apply_rope(X, P, rotary_dim=4.0), TypeError, "rotary_dim"),
    (lambda: apply_rope(np.zeros((3, 2, 7)), P), ValueError, "rotary_dim"),  # odd D as the default
    (lambda: rope_frequencies(5), ValueError, "rotary_dim"),
    (lambda: apply_rope(X, P.astype(np.float64)), TypeError, "positions"),
    (lambda: apply_rope(X, np.array([True, False, True])), TypeError, "positions"),
    (lambda: apply_rope(X, np.array([0, -1, 2])), ValueError, "positions"),
    (lambda: apply_rope(X, np.arange(4)), ValueError, "positions"),
    (lambda: apply_rope(X.astype(np.int32), P), TypeError, "x"),
    (lambda: apply_rope(np.zeros(8), P), ValueError, "x"),
    (lambda: apply_rope(X, P, style="rotate_half"), ValueError, "style"),
    (lambda: apply_rope(X, P, attention_factor="softmax"), ValueError, "attention_factor"),
    (lambda: apply_rope(X, P, base=1.0), ValueError, "base"),
    (lambda: apply_rope(X, P, base=0.5), ValueError, "base"),
    (lambda: apply_rope(X, P, base=float("nan")), ValueError, "base"),
    (lambda: apply_rope(X, P, scaling={"rope_type": "dynamic", "factor": 2.0}), ValueError, "rope_type"),
    (lambda: apply_rope(X, P, scaling={"factor": 2.0}), ValueError, "rope_type"),
    (lambda: apply_rope(X, P, scaling={"rope_type": "yarn", "type": "linear", "factor": 2.0}), ValueError,
     "rope_type"),
    (lambda: apply_rope(X, P, scaling="yarn"), TypeError, "scaling"),
    (lambda: apply_rope(X, P, scaling={"rope_type": "linear"}), ValueError, "factor"),
    (lambda: apply_rope(X, P, scaling={**LLAMA31, "factor": None}), ValueError, "factor"),
    (lambda: apply_rope(X, P, scaling={k: v for k, v in LLAMA31.items() if k != "low_freq_factor"}), ValueError,
     "low_freq_factor"),
    (lambda: apply_rope(X, P, scaling={k: v for k, v in LLAMA31.items() if k != "high_freq_factor"}), ValueError,
     "high_freq_factor"),
    (lambda: apply_rope(X, P, scaling={k: v for k, v in LLAMA31.items()
                                       if k != "original_max_position_embeddings"}), ValueError,
     "original_max_position_embeddings"),
    (lambda: apply_rope(X, P, scaling={**LLAMA31, "high_freq_factor": 1.0}), ValueError, "high_freq_factor"),
    (lambda: apply_rope(X, P, scaling={**LLAMA31, "factor": -8.0}), ValueError, "factor"),
    (lambda: apply_rope(X, P, scaling={"rope_type": "yarn", "factor": 4.0}), ValueError,
     "original_max_position_embeddings"),
    (lambda: apply_rope(X, P, scaling={**YARN, "beta_fast": 0.5}), ValueError, "beta_fast"),
    (lambda: apply_rope(X, P, scaling={**YARN, "beta_slow": 0}), ValueError, "beta_slow"),
    (lambda: apply_rope(X, P, scaling={**YARN, "truncate": "no"}), TypeError, "truncate"),
    (lambda: apply_rope(X, P, scaling={**YARN, "attention_factor": -1.0}), ValueError, "attention_factor"),
    (lambda: apply_rope(X, P, base=10000.0, scaling={**YARN, "rope_theta": 1e6}), ValueError, "base, rope_theta"),
    (lambda: apply_rope(X, P, scaling={**YARN, "rope_theta": "1e6"}), TypeError, "rope_theta"),
    (lambda: apply_rope(X, P, scaling={**YARN, "rope_theta": 0.5}), ValueError, "rope_theta"),
    (lambda: apply_rope(X, P, rotary_dim=8, scaling={"rope_type": "default", "partial_rotary_factor": 0.5}),
     ValueError, "rotary_dim, partial_rotary_factor"),
    (lambda: apply_rope(X, P, scaling={"rope_type": "default", "partial_rotary_factor": 1.5}), ValueError,
     "partial_rotary_factor"),
    (lambda: apply_rope(X, P, scaling={"rope_type": "default", "partial_rotary_factor": True}), TypeError,
     "partial_rotary_factor"),
    (lambda: apply_rope(X, P, scaling={"rope_type": "default", "partial_rotary_factor": 0.25 / 2}), ValueError,
     "rotary_dim"),
    (lambda: apply_rope(X, P, mscale_keys="vllm"), ValueError, "mscale_keys"),
    (lambda: apply_rope(X, P, scaling={**YARN, "mscale_all_dim": "1"}), TypeError, "mscale_all_dim"),  # unread
    (lambda: apply_rope(X, P, scaling={**YARN, "mscale": -0.5}), ValueError, "mscale"),
    (lambda: apply_rope(X, P, scaling={**YARN, "attention_factor": "1.2", "mscale": 1}), TypeError,
     "attention_factor"),
    (lambda: apply_rope(X, P, attention_factor="none", scaling={**YARN, "beta_fast": "32"}), TypeError,
     "beta_fast"),
    (lambda: apply_rope(X, P, style=None), TypeError, "style"),
    (lambda: apply_rope(X, P.astype(bool)), TypeError, "positions"),
    (lambda: apply_rope(X, P, rotary_dim="8"), TypeError, "rotary_dim"),
    (lambda: apply_rope(X, P, rotary_dim=True), TypeError, "rotary_dim"),
    (lambda: apply_rope(X, P, base="10000"), TypeError, "base"),
    (lambda: apply_rope(X, P, scaling={**YARN, "factor": "4"}), TypeError, "factor"),
    (lambda: apply_rope(X, P, scaling={"rope_type": 3}), ValueError, "rope_type"),
    (lambda: rope_frequencies(8, dtype="float16"), ValueError, "dtype"),
    (lambda: apply_rope(X, P, scaling={**LLAMA31, "beta_fast": 32}), ValueError, "beta_fast"),
    (lambda: apply_rope(X, P, scaling={**YARN, "mscale": "1", "mscale_all_dim": 1}), TypeError, "mscale"),
    (lambda: apply_rope(X, P, scaling={**YARN, "mscale": 1, "mscale_all_dim": -1}), ValueError, "mscale_all_dim"),
    (lambda: yarn_mscale(0.0), ValueError, "factor"),
    (lambda: emulate.rope("float8", X, P), ValueError, "precision"),
    (lambda: emulate.rope("bfloat16", X, P, rotary_dim=9), ValueError, "rotary_dim"),
    (lambda: emulate.rope("bfloat16", X, P.astype(np.float32)), TypeError, "positions"),
])
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


# ------------------------------------------------ transformers 5 rope_parameters ------

def test_rope_theta_in_the_mapping_is_the_base():
    x, pos = np.random.default_rng(1).standard_normal((4, 2, 16)), np.array([0, 3, 900, 70000])
    params = {**LLAMA31, "rope_theta": 500000.0}  # as transformers 5 configs carry it
    want = apply_rope(x, pos, base=500000.0, scaling=LLAMA31)
    assert np.array_equal(apply_rope(x, pos, scaling=params), want)
    assert np.array_equal(apply_rope(x, pos, base=500000.0, scaling=params), want)  # agreeing: fine
    assert not np.allclose(apply_rope(x, pos, scaling=LLAMA31), want)  # the default base 10000 differs


def test_partial_rotary_factor_in_the_mapping_sets_rotary_dim():
    x, pos = np.random.default_rng(2).standard_normal((3, 1, 128)), np.array([1, 50, 4000])
    params = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    got = apply_rope(x, pos, scaling=params)
    assert np.array_equal(got, apply_rope(x, pos, rotary_dim=32))
    assert np.array_equal(got[..., 32:], x[..., 32:])  # int(128 * 0.25) = 32 dims rotate, the rest pass
    assert np.array_equal(apply_rope(x, pos, rotary_dim=32, scaling=params), got)


def _mscale(s, m):
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


@pytest.mark.parametrize("keys,transformers,vllm", [
    ({}, _mscale(40, 1), _mscale(40, 1)),
    ({"mscale": 0.707}, _mscale(40, 1), _mscale(40, 0.707)),
    ({"mscale_all_dim": 0.707}, _mscale(40, 1), _mscale(40, 1) / _mscale(40, 0.707)),
    ({"attention_factor": 1.25}, 1.25, _mscale(40, 1)),
    ({"mscale": 1.0, "mscale_all_dim": 0.8}, _mscale(40, 1) / _mscale(40, 0.8), _mscale(40, 1) / _mscale(40, 0.8)),
    ({"mscale": 1.0, "mscale_all_dim": 0.8, "attention_factor": 1.25}, 1.25, _mscale(40, 1) / _mscale(40, 0.8)),
])
def test_yarn_attention_factor_as_each_engine_reads_the_keys(keys, transformers, vllm):
    """transformers 5.24 `_compute_yarn_parameters` and vLLM's DeepseekScalingRotaryEmbedding
    (mscale default 1, mscale_all_dim default 0, attention_factor not read), written out here."""
    cfg = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, **keys}
    assert rope_frequencies(64, scaling=cfg)[1] == pytest.approx(transformers, rel=1e-15)
    assert rope_frequencies(64, scaling=cfg, mscale_keys="vllm_deepseek")[1] == pytest.approx(vllm, rel=1e-15)
    x, pos = np.ones((1, 1, 8)), np.array([0])  # at position 0 the rotation is the factor times x
    assert apply_rope(x, pos, scaling=cfg, mscale_keys="vllm_deepseek")[0, 0, 0] == pytest.approx(vllm, rel=1e-15)

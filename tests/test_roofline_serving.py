"""The serving formulas (ref.roofline.moe, specdec, perf, disagg, stacking): the
tutorial's figures, brute-force and exact-arithmetic checks of the bounded ops,
properties over model configurations, the catalog's vectors against plausible
wrong calculators, and the argument checks.

Hardware here is a plain namespace with the attributes the functions read (name,
flops, bandwidth, capacity): the figures are the tutorial's, quoted where used.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.roofline import emulate
from ref.roofline.catalog import serving as catalog
from ref.roofline.config import MLP, Attention, Block, Model, MoE
from ref.roofline.disagg import break_even, handoff, transfer_time
from ref.roofline.kv import kv_bytes
from ref.roofline.moe import expected_experts, moe_bytes_touched
from ref.roofline.perf import decode_step, max_batch, phase_time, prefill, ridge
from ref.roofline.specdec import expected_tokens, speedup
from ref.roofline.stacking import nsa_read_tokens, stacked_kv
from ref.roofline.weights import weight_bytes

I, F = np.int64, np.float64

# The tutorial: "B200 ~4.5 PFLOP/s dense FP8, 8 TB/s"; bf16 is half the FP8 rate.
B200 = SimpleNamespace(name="B200", flops={"bfloat16": 2.25e15, "float8": 4.5e15}, bandwidth=8e12, capacity=180e9)
M3_ULTRA = SimpleNamespace(name="M3 Ultra", flops={"bfloat16": 28.4e12}, bandwidth=819e9, capacity=512e9)
RTX_5090 = SimpleNamespace(name="RTX 5090", flops={"bfloat16": 209.5e12}, bandwidth=1792e9, capacity=32e9)
NVLINK = SimpleNamespace(name="nvlink5", bytes_per_s=900e9)
SLOW_LINK = SimpleNamespace(name="pcie4_x16", bytes_per_s=32e9)

# Qwen3-8B's config.json: 36 layers, hidden 4096, 32 q heads, 8 KV heads, head_dim 128,
# intermediate 12288, vocab 151936, untied, q/k norms.
QWEN3_8B = Model("Qwen3-8B", 4096, 151936, (Block(36, Attention(32, 8, 128, qk_norm=True), MLP(12288)),))
# Qwen3-30B-A3B's: 48 layers, hidden 2048, 32 q heads, 4 KV heads, 128 experts, top-8 of 768.
QWEN3_30B = Model("Qwen3-30B-A3B", 2048, 151936,
                  (Block(48, Attention(32, 4, 128, qk_norm=True), MoE(128, 8, 768)),))
# Llama-3.1-70B's: 80 layers, hidden 8192, 64 q heads, 8 KV heads, intermediate 28672, vocab 128256.
LLAMA_70B = Model("Llama-3.1-70B", 8192, 128256, (Block(80, Attention(64, 8, 128), MLP(28672)),))


# ---------------------------------------------------------------- expected_experts

def _brute_force_experts(e: int, k: int, b: int) -> Fraction:
    """The mean number of distinct experts over every equally likely routing."""
    subsets = list(itertools.combinations(range(e), k))
    total = sum(len(set().union(*picks)) for picks in itertools.product(subsets, repeat=b))
    return Fraction(total, len(subsets) ** b)


@pytest.mark.parametrize("e,k,b", [(4, 2, 2), (5, 2, 3), (5, 3, 2), (6, 1, 3), (3, 3, 2), (6, 2, 0), (4, 0, 2)])
def test_expected_experts_is_the_mean_over_every_routing(e, k, b):
    """Without replacement: each token's k experts are distinct."""
    got = float(expected_experts(I(e), I(k), I(b)))
    assert got == pytest.approx(float(_brute_force_experts(e, k, b)), rel=1e-14, abs=1e-14)


def test_expected_experts_edges_and_the_tutorial_model():
    # Qwen3-30B-A3B (128 experts, top-8): one token touches exactly 8, never fewer.
    assert expected_experts(I([128, 128, 128, 128]), I([8, 8, 128, 8]), I([1, 0, 5, 0])).tolist() == [8.0, 0.0, 128.0,
                                                                                                      0.0]
    assert math.copysign(1.0, float(expected_experts(I(128), I(8), I(0)))) == 1.0  # +0, not -0
    # 32 tokens: 128 (1 - (15/16)^32) = 111.77..., well under min(128, 256).
    assert float(expected_experts(I(128), I(8), I(32))) == pytest.approx(128 * (1 - (15 / 16) ** 32), rel=1e-14)


@given(e=st.integers(1, 10**6), frac=st.floats(0, 1), b=st.integers(0, 10**7))
def test_expected_experts_between_its_bounds_and_monotone(e, frac, b):
    k = int(frac * e)
    got = float(expected_experts(I(e), I(k), I(b)))
    more = float(expected_experts(I(e), I(k), I(b + 1)))
    assert 0 <= got <= min(e, k * b) * (1 + 1e-12)
    assert got <= more * (1 + 1e-12)
    if b >= 1:
        assert got >= k * (1 - 1e-12)


@given(e=st.integers(2, 2**40), b=st.integers(1, 2**30))
def test_expected_experts_keeps_digits_when_k_over_e_is_tiny(e, b):
    """Exact rational arithmetic to 1e-12 where (1 - k/E)^B as written loses them."""
    p = Fraction(1, e)
    # E (1 - (1 - p)^B) = E sum_{j>=1} (-1)^(j+1) C(B, j) p^j; the terms fall fast when B p < 1/2.
    if b * p > Fraction(1, 2):
        return
    total, term, j = Fraction(0), Fraction(1), 1
    while True:
        term = term * (b - j + 1) / j * p
        total += term if j % 2 else -term
        if term < Fraction(1, 10**20) * total or term == 0:
            break
        j += 1
    assert float(expected_experts(I(e), I(1), I(b))) == pytest.approx(float(e * total), rel=1e-12)


# ---------------------------------------------------------------- speculative decoding

def test_expected_tokens_the_tutorials_figure():
    # The tutorial: (1 - a^(k+1)) / (1 - a) = 3.36 at a = 0.8, k = 4 (exactly 3.3616).
    assert float(expected_tokens(F(0.8), I(4))) == pytest.approx(3.3616, rel=1e-15)
    assert float(speedup(F(0.8), I(4), F(0.0))) == pytest.approx(3.3616, rel=1e-15)


def test_expected_tokens_edges():
    assert expected_tokens(F([1.0, 1.0, 0.0, 0.5]), I([0, 7, 9, 0])).tolist() == [1.0, 8.0, 1.0, 1.0]


@given(num=st.integers(0, 2**20), k=st.integers(0, 60), cost=st.fractions(0, 4, max_denominator=64))
def test_expected_tokens_and_speedup_equal_exact_sums(num, k, cost):
    a = Fraction(num, 2**20)  # dyadic: exact in float64
    exact = sum(a**i for i in range(k + 1))
    assert float(expected_tokens(F(float(a)), I(k))) == pytest.approx(float(exact), rel=1e-13)
    want = exact / (k * cost + 1)
    assert float(speedup(F(float(a)), I(k), F(float(cost)))) == pytest.approx(float(want), rel=1e-13)


@given(shift=st.integers(20, 52), k=st.integers(1, 10**6))
def test_expected_tokens_near_one_keeps_its_digits(shift, k):
    """a = 1 - 2^-shift: the closed form as written cancels, the oracle does not."""
    a = 1 - Fraction(1, 2**shift)
    exact = (1 - a ** (k + 1)) / (1 - a) if k < 2000 else None
    got = float(expected_tokens(F(float(a)), I(k)))
    if exact is None:  # the sum of k + 1 terms, each within (k+1) 2^-shift of 1
        assert (k + 1) * (1 - (k + 1) * 2.0**-shift) <= got <= k + 1
    else:
        assert got == pytest.approx(float(exact), rel=1e-13)


# ---------------------------------------------------------------- phase_time

@given(f=st.floats(0, 1e20), b=st.floats(0, 1e16), p=st.floats(1e6, 1e18), w=st.floats(1e6, 1e15))
def test_phase_time_roofline_properties(f, b, p, w):
    t_max = float(phase_time(F(f), F(b), F(p), F(w)))
    t_sum = float(phase_time(F(f), F(b), F(p), F(w), overlap="sum"))
    assert t_max == max(f / p, b / w)
    assert t_max <= t_sum <= 2 * t_max * (1 + 1e-15)
    # Twice the work on twice the hardware takes the same time.
    assert float(phase_time(F(2 * f), F(2 * b), F(2 * p), F(2 * w))) == pytest.approx(t_max, rel=1e-15)


def test_phase_time_the_tutorials_prefill():
    # 1.03 PFLOP at 4.5 PFLOP/s: ~0.23 s, compute-bound (16.4 GB of weights take 2 ms at 8 TB/s).
    assert float(phase_time(F(1.03e15), F(16.4e9), F(4.5e15), F(8e12))) == pytest.approx(0.2289, abs=1e-4)
    assert float(phase_time(F(0.0), F(0.0), F(1.0), F(1.0))) == 0.0


# ---------------------------------------------------------------- argument checks

@pytest.mark.parametrize("call, error, words", [
    (lambda: expected_experts(I([8]), I([9]), I([1])), ValueError, "top_k"),
    (lambda: expected_experts(I([0]), I([0]), I([1])), ValueError, "experts"),
    (lambda: expected_experts(I([8]), I([2]), I([-1])), ValueError, "tokens"),
    (lambda: expected_experts(I([8]), I([2]), F([1.0])), TypeError, "tokens"),
    (lambda: expected_experts(I([8]), np.array([True]), I([1])), TypeError, "top_k"),
    (lambda: expected_experts(I([8, 8]), I([2, 2]), I([1])), ValueError, "tokens"),
    (lambda: expected_experts(np.uint64([2**64 - 1]), I([2]), I([1])), ValueError, "experts"),
    (lambda: expected_tokens(F([1.5]), I([2])), ValueError, "alpha"),
    (lambda: expected_tokens(F([np.nan]), I([2])), ValueError, "alpha"),
    (lambda: expected_tokens(I([1]), I([2])), TypeError, "alpha"),
    (lambda: expected_tokens(F([0.5]), I([-2])), ValueError, "k"),
    (lambda: expected_tokens(F([0.5, 0.5]), I([2])), ValueError, "k"),
    (lambda: speedup(F([0.5]), I([2]), F([-0.5])), ValueError, "cost"),
    (lambda: speedup(F([0.5]), I([2]), F([np.inf])), ValueError, "cost"),
    (lambda: speedup(F([0.5]), I([2]), F([0.5, 0.5])), ValueError, "cost"),
    (lambda: phase_time(F([1.0]), F([1.0]), F([0.0]), F([1.0])), ValueError, "peak_flops"),
    (lambda: phase_time(F([1.0]), F([-1.0]), F([1.0]), F([1.0])), ValueError, "bytes"),
    (lambda: phase_time(F([1.0]), F([1.0]), F([1.0]), F([-1.0])), ValueError, "bandwidth"),
    (lambda: phase_time(I([1]), F([1.0]), F([1.0]), F([1.0])), TypeError, "flops"),
    (lambda: phase_time(F([1.0]), F([1.0]), F([1.0]), F([1.0]), overlap="min"), ValueError, "overlap"),
    (lambda: phase_time(F([1e300]), F([1.0]), F([1e-300]), F([1.0])), ValueError, "overflows"),
    (lambda: ridge(B200, "float4"), ValueError, "fmt"),
    (lambda: decode_step(QWEN3_8B, B200, -1), ValueError, "context"),
    (lambda: decode_step(QWEN3_8B, B200, 10, 0), ValueError, "batch"),
    (lambda: moe_bytes_touched(QWEN3_30B, 4, embedding="some"), ValueError, "embedding"),
    (lambda: max_batch(QWEN3_8B, B200, 0), ValueError, "context"),
    (lambda: max_batch(QWEN3_8B, B200, 10, reserve=-1.0), ValueError, "reserve"),
    (lambda: max_batch(QWEN3_8B, B200, 10, reserve="1e9"), TypeError, "reserve"),
    (lambda: moe_bytes_touched(QWEN3_30B, 4, embedding=1), TypeError, "embedding"),
    (lambda: emulate.expected_tokens("float8", F([0.5]), I([2])), ValueError, "precision"),
    (lambda: transfer_time(-1.0, NVLINK), ValueError, "nbytes"),
    (lambda: stacked_kv(QWEN3_8B, read_fraction=1.5), ValueError, "read_fraction"),
])
def test_bad_arguments_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ---------------------------------------------------------------- emulations

@settings(max_examples=40)
@given(e=st.integers(1, 4096), frac=st.floats(0, 1), b=st.integers(0, 60000), a=st.floats(0, 1),
       k=st.integers(0, 64), c=st.floats(0, 2))
def test_emulations_are_the_oracle_at_float64_and_near_it_at_float32(e, frac, b, a, k, c):
    ek, cases = int(frac * e), []
    cases.append((emulate.expected_experts, expected_experts, (I(e), I(ek), I(b))))
    cases.append((emulate.expected_tokens, expected_tokens, (F(a), I(k))))
    cases.append((emulate.speedup, speedup, (F(a), I(k), F(c))))
    cases.append((emulate.phase_time, phase_time, (F(e * 1e9), F(b * 1e6), F(4.5e15), F(8e12))))
    for emu, oracle, args in cases:
        exact = float(oracle(*args))
        assert float(emu("float64", *args)) == exact
        assert float(emu("float32", *args)) == pytest.approx(exact, rel=2e-5, abs=1e-30)
        assert float(emu("bfloat16", *args)) == pytest.approx(exact, rel=2**-5, abs=1e-30)


# ---------------------------------------------------------------- the catalog's vectors

def _op(name):
    return next(op for op in catalog.OPERATIONS if op.name == name)


def _rejected_by(op_name, kernel, flag):
    """Whether a valid vector flagged `flag` rejects `kernel` at float64 by the bounded rule."""
    op = _op(op_name)
    for spec in op.vectors():
        if spec.result != "valid" or flag not in spec.flags:
            continue
        expected = op.oracle(**spec.case.inputs, **spec.case.params)
        with np.errstate(all="ignore"):
            actual = np.asarray(kernel(**spec.case.inputs, **spec.case.params), np.float64)
        emulated = op.emulate("float64", **spec.case.inputs, **spec.case.params)
        if not op.compare(expected, actual, emulated, "float64").ok:
            return True
    return False


def _f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


WRONG = [
    ("roofline.moe.expected_experts", "WithoutReplacement",
     lambda experts, top_k, tokens: (lambda e, k, b: e * (1 - (1 - 1 / e) ** (k * b)))(*_f64(experts, top_k, tokens))),
    ("roofline.moe.expected_experts", "Saturation",
     lambda experts, top_k, tokens: np.minimum(experts, top_k * tokens).astype(np.float64)),
    ("roofline.moe.expected_experts", "NearOne",
     lambda experts, top_k, tokens: (lambda e, k, b: e * (1 - (1 - k / e) ** b))(*_f64(experts, top_k, tokens))),
    ("roofline.specdec.expected_tokens", "AlphaOne",
     lambda alpha, k: (1 - alpha ** (k + 1.0)) / (1 - alpha)),
    ("roofline.specdec.expected_tokens", "NearOne",
     lambda alpha, k: np.where(alpha == 1, k + 1.0, (1 - alpha ** (k + 1.0)) / (1 - np.where(alpha == 1, 0.5, alpha)))),
    ("roofline.specdec.expected_tokens", "BonusToken",
     lambda alpha, k: np.array([sum(float(a) ** i for i in range(int(n))) for a, n in zip(np.ravel(alpha), np.ravel(k))]
                               ).reshape(np.shape(alpha))),
    ("roofline.specdec.speedup", "BonusToken",
     lambda alpha, k, cost: (expected_tokens(alpha, k) - alpha ** k) / (k * cost + 1)),  # k terms
    ("roofline.specdec.speedup", "TargetStep",
     lambda alpha, k, cost: expected_tokens(alpha, k) / (k * cost)),
    ("roofline.phase_time", "Overlap",
     lambda flops, bytes, peak_flops, bandwidth, overlap="max": flops / peak_flops + bytes / bandwidth),
    ("roofline.phase_time", "MemoryBound",
     lambda flops, bytes, peak_flops, bandwidth, overlap="max": flops / peak_flops),
    ("roofline.phase_time", "ComputeBound",
     lambda flops, bytes, peak_flops, bandwidth, overlap="max": bytes / bandwidth),
]


@pytest.mark.parametrize("op_name, flag, kernel", WRONG, ids=[f"{o}-{f}" for o, f, _ in WRONG])
def test_a_wrong_calculator_is_rejected_by_a_vector_carrying_its_flag(op_name, flag, kernel):
    assert _rejected_by(op_name, kernel, flag)


@pytest.mark.parametrize("op", catalog.OPERATIONS, ids=lambda op: op.name)
def test_vectors_are_computed_or_rejected_as_declared(op):
    for spec in op.vectors():
        if spec.result == "invalid":
            with pytest.raises((ValueError, TypeError)):
                op.oracle(**spec.case.inputs, **spec.case.params)
        else:
            out = np.asarray(op.oracle(**spec.case.inputs, **spec.case.params))
            assert out.dtype == np.float64 and out.shape == np.shape(next(iter(spec.case.inputs.values())))
            assert np.all(np.isfinite(out)), spec.comment
        assert set(spec.flags) <= set(catalog.FLAGS) | {"Random", "EmptyInput", "InvalidInput", "NaN"}


# ---------------------------------------------------------------- model level

def test_qwen3_8b_decode_at_40k_the_tutorials_figures():
    """The tutorial: 16.4 GB weights + ~6 GB KV = ~22 GB per token, ~364 tok/s on 8 TB/s
    (8000 / 22 with 22 rounded first; the unrounded 22.28 GB gives 359)."""
    assert kv_bytes(QWEN3_8B, 1) == 147_456  # 36 * 8 * 128 * 2 * 2
    whole = decode_step(QWEN3_8B, B200, 40_000, embedding="table")
    assert whole.bound == "memory"
    assert whole.bytes == weight_bytes(QWEN3_8B) + 40_000 * 147_456
    assert whole.bytes / 1e9 == pytest.approx(22.28, abs=0.01)
    assert whole.tokens_per_s == pytest.approx(8e12 / whole.bytes)
    assert round(whole.tokens_per_s) == 359
    # Reading only the looked-up embedding row: the 1.24 GB table is not read.
    rows = decode_step(QWEN3_8B, B200, 40_000)
    assert whole.bytes - rows.bytes == (151_936 - 1) * 4096 * 2
    # Batch 32 at 40k needs 32 x 5.9 = 188.7 GB of KV (the tutorial's 192 is 32 x 6).
    assert 32 * kv_bytes(QWEN3_8B, 40_000) / 1e9 == pytest.approx(188.7, abs=0.05)


def test_qwen3_8b_prefill_at_40k_on_a_b200():
    """The tutorial: ~1.03 PFLOP, ~0.23 s at the FP8 rate, compute-bound."""
    est = prefill(QWEN3_8B, B200, 40_000, fmt="float8")
    assert est.bound == "compute"
    assert est.flops / 1e15 == pytest.approx(1.03, abs=0.005)
    assert est.time == pytest.approx(0.23, abs=0.005)
    assert est.tokens_per_s == pytest.approx(40_000 / est.time)
    empty = prefill(QWEN3_8B, B200, 0)
    assert (empty.flops, empty.bytes, empty.time) == (0.0, 0.0, 0.0)


def test_ridge_points():
    # 4500 / 8 = 562.5 FLOP/byte (B200, FP8); the R200 as the tutorial quotes it: 35 PF / 20 TB/s = 1750.
    assert ridge(B200, "float8") == 562.5
    assert ridge(SimpleNamespace(name="R200", flops={"float8": 35e15}, bandwidth=20e12), "float8") == 1750


def test_70b_does_not_fit_a_32_gb_card():
    assert max_batch(LLAMA_70B, RTX_5090, 1) == 0
    assert max_batch(QWEN3_8B, B200, 40_000) == (180e9 - weight_bytes(QWEN3_8B)) // (40_000 * 147_456)


def _dense(layers, hidden, heads, kv_heads, head_dim, inter, vocab):
    return Model("m", hidden, vocab, (Block(layers, Attention(heads, kv_heads, head_dim), MLP(inter)),))


configs = st.builds(lambda layers, hidden, g, kv_heads, head_dim, inter, vocab: _dense(
    layers, hidden, kv_heads * g, kv_heads, head_dim, inter, vocab),
    st.integers(1, 8), st.integers(1, 64).map(lambda x: 16 * x), st.integers(1, 4), st.integers(1, 4),
    st.sampled_from([16, 64, 128]), st.integers(1, 64).map(lambda x: 32 * x), st.integers(1, 4096))


@settings(max_examples=40)
@given(model=configs, context=st.integers(0, 10**6), batch=st.integers(1, 512))
def test_decode_bytes_are_weights_plus_batch_times_kv(model, context, batch):
    est = decode_step(model, B200, context, batch, embedding="table")
    assert est.bytes == weight_bytes(model) + batch * kv_bytes(model, context)
    one = decode_step(model, B200, context, 1, embedding="table")
    assert est.flops == batch * one.flops
    # More sequences per step never lowers the batch's tokens per second.
    assert est.tokens_per_s >= one.tokens_per_s * (1 - 1e-12)


@settings(max_examples=30)
@given(model=configs, context=st.integers(1, 10**5))
def test_doubling_layers_doubles_the_kv_a_sequence_reads(model, context):
    block = model.blocks[0]
    double = Model("m2", model.hidden, model.vocab, (Block(2 * block.count, block.mixer, block.ffn),))
    extra = decode_step(double, B200, context, 3).bytes - decode_step(model, B200, context, 3).bytes
    assert extra == 3 * kv_bytes(model, context) + (weight_bytes(double) - weight_bytes(model))


@given(batch=st.integers(1, 10**5))
def test_moe_bytes_touched_between_active_and_total(batch):
    touched = moe_bytes_touched(QWEN3_30B, batch, embedding="table")
    more = moe_bytes_touched(QWEN3_30B, batch + 1, embedding="table")
    total = weight_bytes(QWEN3_30B)
    expert = 3 * 2048 * 768 * 2  # gate, up, down in bf16
    active = total - 48 * (128 - 8) * expert
    assert active * (1 - 1e-12) <= touched <= more * (1 + 1e-12) <= total * (1 + 1e-12)
    if batch == 1:
        assert touched == pytest.approx(active, rel=1e-15)


def test_moe_decode_reads_far_less_than_its_weights_at_batch_1():
    """Qwen3-30B-A3B at batch 1 reads its active experts; by batch 64 nearly all 128."""
    one, many = decode_step(QWEN3_30B, B200, 4096, 1), decode_step(QWEN3_30B, B200, 4096, 64)
    assert one.bytes < 0.25 * weight_bytes(QWEN3_30B)
    assert float(expected_experts(I(128), I(8), I(64))) > 125  # 128 (1 - (15/16)^64) = 125.94
    assert many.bytes > 0.9 * weight_bytes(QWEN3_30B)


def test_disaggregation_nvlink_wins_and_break_even_is_a_crossing():
    h = handoff(QWEN3_8B, B200, NVLINK, 40_000, fmt="float8")
    assert h.kv_bytes == 40_000 * 147_456
    assert h.transfer_s == pytest.approx(5.89824e9 / 900e9)
    assert h.transfer_wins
    assert break_even(QWEN3_8B, B200, NVLINK, fmt="float8") == []
    for c in break_even(QWEN3_8B, B200, SLOW_LINK, fmt="float8"):
        before = handoff(QWEN3_8B, B200, SLOW_LINK, c - 1, fmt="float8").transfer_wins
        assert handoff(QWEN3_8B, B200, SLOW_LINK, c, fmt="float8").transfer_wins != before


def test_stacked_kv_qwen3_8b_at_1m_tokens():
    """The tutorial: GQA 147 GB stored / read, + MHA2MLA 46/46, + 4-bit 11.5/11.5, + sparse
    reads 11.5 / ~1.2; "1M tokens = 147 GB, 9x the weights"."""
    rows = stacked_kv(QWEN3_8B, 1_000_000)
    gb = [(round(r.stored / 1e9, 2), round(r.read / 1e9, 3)) for r in rows]
    assert gb[0] == (147.46, 147.456) and gb[1] == (46.08, 46.08) and gb[2] == (11.52, 11.52)
    assert gb[4] == (11.52, 1.152)
    assert rows[3].stored == rows[2].stored + 1_000_000 * 36 * (640 // 32) * 4  # fp16 scale + zero per 32
    assert round(rows[0].stored / weight_bytes(QWEN3_8B)) == 9
    compressed, original = nsa_read_tokens(1_000_000)
    assert (compressed, original) == ((1_000_000 - 32) // 16 + 1, 16 * 64 + 512)
    assert rows[5].read == (compressed + original) * 36 * 640 * 4 // 8


# ---------------------------------------------------------------- correct kernels at low precision, controls

def _f32(*arrays):
    return [np.asarray(a).astype(np.float32) for a in arrays]


def _experts_f32(experts, top_k, tokens):
    e, k, b = _f32(experts, top_k, tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(e * np.expm1(np.where(b > 0, b * np.log1p(-k / e), np.float32(0))))


def _tokens_f32(alpha, k):
    a, n = _f32(alpha, np.asarray(k) + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a == 1, n, -np.expm1(n * np.log(a)) / (np.float32(1) - a)).astype(np.float32)


CORRECT = [
    ("roofline.moe.expected_experts", _experts_f32, "float32"),
    ("roofline.specdec.expected_tokens", _tokens_f32, "float32"),
    ("roofline.specdec.speedup",
     lambda alpha, k, cost: (_tokens_f32(alpha, k) / (np.float32(1) + _f32(k)[0] * _f32(cost)[0])).astype(np.float32),
     "float32"),
    ("roofline.phase_time",
     lambda flops, bytes, peak_flops, bandwidth, overlap="max": (lambda f, b, p, w: np.maximum(f / p, b / w)
                                                                if overlap == "max" else f / p + b / w)(
         *_f32(flops, bytes, peak_flops, bandwidth)), "float32"),
]


def _judged(op, kernel, precision, spec):
    expected = op.oracle(**spec.case.inputs, **spec.case.params)
    with np.errstate(all="ignore"):
        actual = np.asarray(kernel(**spec.case.inputs, **spec.case.params))
    emulated = op.emulate(precision, **spec.case.inputs, **spec.case.params)
    return op.compare(expected, actual, emulated, precision)


@pytest.mark.parametrize("op_name, kernel, precision", CORRECT, ids=[c[0] for c in CORRECT])
def test_a_correct_float32_kernel_passes_every_vector(op_name, kernel, precision):
    op = _op(op_name)
    for spec in op.vectors():
        if spec.result == "valid":
            assert _judged(op, kernel, precision, spec).ok, spec.comment


@pytest.mark.parametrize("precision", ["float64", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", catalog.OPERATIONS, ids=lambda op: op.name)
def test_an_all_zero_output_fails_at_every_precision(op, precision):
    zero = lambda **kw: np.zeros(np.shape(next(iter(kw.values()))))  # noqa: E731
    assert any(not _judged(op, zero, precision, spec).ok for spec in op.vectors() if spec.result == "valid")


# ---------------------------------------------------------------- measured runs stay under the roofline

# Llama-3.1-8B's config.json: 32 layers, hidden 4096, 32 q heads, 8 KV heads, head_dim 128,
# intermediate 14336, vocab 128256, untied (https://huggingface.co/meta-llama/Llama-3.1-8B).
LLAMA_8B = Model("Llama-3.1-8B", 4096, 128256, (Block(32, Attention(32, 8, 128), MLP(14336)),))


def test_published_dgx_spark_runs_are_below_the_roofline():
    """The table's measured DGX Spark runs (SGLang, FP8 weights) against the roofline's
    bounds: decode at batch 1 from bandwidth alone, prefill at the Spark's only dense
    figure (FP4, faster than FP8: still a bound). 20.5 tok/s is about 60% of the bound."""
    from ref.roofline.hardware import HARDWARE, MEASURED
    from ref.roofline.models import MODELS

    spark = HARDWARE["DGX Spark"]
    for run in MEASURED.values():
        model = {"Llama 3.1 8B": LLAMA_8B, "Llama 3.1 70B": MODELS["Llama-3.1-70B"]}[run.model]
        decode = decode_step(model, spark, 0, run.batch, fmt=None, weight_format="float8_tensor")
        assert run.decode_tokens_per_s <= decode.tokens_per_s
        assert run.prefill_tokens_per_s <= prefill(model, spark, 2048, fmt="float4",
                                                   weight_format="float8_tensor").tokens_per_s
    one = next(r for r in MEASURED.values() if r.model == "Llama 3.1 8B" and r.batch == 1)
    bound = decode_step(LLAMA_8B, spark, 0, 1, fmt=None, weight_format="float8_tensor").tokens_per_s
    assert 0.5 < one.decode_tokens_per_s / bound < 0.7


def test_the_table_models_are_the_ones_these_tests_write_out():
    """The figures above use models written from config.json here; the table's own
    (ref.roofline.models, built by ref.roofline.hf) give the same estimates."""
    from ref.roofline.hardware import HARDWARE
    from ref.roofline.models import MODELS

    b200 = HARDWARE["B200"]
    for local in (QWEN3_8B, QWEN3_30B, LLAMA_70B):
        table = MODELS[local.name]
        for batch in (1, 32):
            assert decode_step(table, b200, 40_000, batch, fmt="float8") == decode_step(local, b200, 40_000, batch,
                                                                                         fmt="float8")
        assert prefill(table, b200, 4096, fmt="float8") == prefill(local, b200, 4096, fmt="float8")
    assert ridge(b200, "float8") == 562.5  # the tutorial's 4500 / 8

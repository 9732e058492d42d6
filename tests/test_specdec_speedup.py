"""The speed-up model of speculative decoding (ref.specdec.speedup): acceptance as
1 - TV and as the step's own acceptance probability, the expected tokens per step
(ref.roofline.specdec's formula) against simulated steps, the length law, and the
wall-clock model on the roofline: Theorem 3.8 at small batch, the slow-down batch
where verification turns compute-bound (spec/specdec.md, "The speed-up model")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from ref.conformance.adapters.numpy_specdec_rng import rejection_sample_rng
from ref.roofline import HARDWARE, MODELS, decode_step, expected_tokens, ridge, speedup
from ref.specdec.marginals import rejection_sample_marginals
from ref.specdec.speedup import (acceptance, length_law, positionwise_tokens, slowdown_batch, spec_step,
                                 tv_distance, verify_step)

rows = st.integers(1, 6).flatmap(lambda v: st.tuples(
    *[st.lists(st.integers(0, 5), min_size=v, max_size=v).filter(any)] * 2))


@settings(max_examples=30, deadline=None)
@given(rows)
def test_acceptance_is_one_minus_tv_and_the_steps_acceptance(pair):
    """sum min(p, q) = 1 - TV(p, q) = E_{x~q} min(1, p(x)/q(x)), and the statistical
    oracle's probability of reaching position 1 (draft 0 accepted), averaged over x ~ q."""
    p, q = (np.asarray(r, dtype=np.float64) / sum(r) for r in pair)
    a = float(acceptance(p, q))
    assert a == pytest.approx(1.0 - float(tv_distance(p, q)), abs=1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert a == pytest.approx(float(np.sum(np.where(q > 0, q * np.minimum(1.0, p / q), 0.0))), abs=1e-12)
    v = p.size
    _, probs = rejection_sample_marginals(np.tile(np.stack([p, p]), (v, 1, 1)), np.arange(v)[:, None],
                                          np.ones(v, np.int64), np.zeros(v, bool), np.tile(q, (v, 1, 1)))
    assert float(q @ (1.0 - probs[:, 1, v])) == pytest.approx(a, abs=1e-12)


def test_acceptance_edge_cases_and_checks():
    assert acceptance([1.0, 0.0], [0.0, 1.0]) == 0.0 and acceptance([0.25, 0.75], [0.25, 0.75]) == 1.0
    assert acceptance(np.ones((3, 1)), np.ones((3, 1))).tolist() == [1.0] * 3
    for bad, match in (([0.5, 0.6], "p"), ([np.nan, 1.0], "p"), ([-0.5, 1.5], "p")):
        with pytest.raises(ValueError, match=match):
            acceptance(bad, [0.5, 0.5])
    with pytest.raises(TypeError, match="q"):
        acceptance([0.5, 0.5], np.array([1, 0]))
    with pytest.raises(ValueError, match="shapes"):
        acceptance([0.5, 0.5], [1.0])


def test_expected_tokens_and_the_length_law():
    assert float(expected_tokens(np.float64(0.8), np.int64(4))) == pytest.approx(3.3616, abs=1e-12)
    law = length_law(0.8, 4)
    assert law.sum() == pytest.approx(1.0) and law @ np.arange(1, 6) == pytest.approx(3.3616)
    assert positionwise_tokens([0.8] * 4) == pytest.approx(3.3616)
    assert positionwise_tokens([0.5, 1.0, 0.0]) == pytest.approx(1 + 0.5 + 0.5)
    assert length_law(1.0, 3).tolist() == [0, 0, 0, 1] and length_law(0.0, 2).tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="alpha"):
        length_law(1.5, 2)


def test_simulated_steps_emit_the_expected_tokens():
    """The default kernel's steps (the sampler the statistical judge accepts): drafts x ~ q
    with acceptance(p, q) = 3/4 at every position, k = 4; the mean number of emitted tokens
    is expected_tokens(3/4, 4) within 4 standard errors and their histogram fits the
    length law (chi-square)."""
    p = np.array([12, 4, 0, 0], dtype=np.float64) / 16
    q = np.array([8, 4, 4, 0], dtype=np.float64) / 16
    alpha, k, b = float(acceptance(p, q)), 4, 20000
    assert alpha == 0.75
    rng = np.random.default_rng(11)
    x = rng.choice(4, size=(b, k), p=q)
    out = rejection_sample_rng(np.broadcast_to(p, (b, k + 1, 4)).copy(), x, np.full(b, k), np.zeros(b, bool),
                               np.broadcast_to(q, (b, k, 4)).copy(), seed=5)
    n = (out >= 0).sum(axis=1)
    law = length_law(alpha, k)
    mean, sd = float(expected_tokens(np.float64(alpha), np.int64(k))), math.sqrt(law @ np.arange(1, 6) ** 2 -
                                                                                    (law @ np.arange(1, 6)) ** 2)
    assert abs(n.mean() - mean) < 4 * sd / math.sqrt(b)
    counts = np.bincount(n, minlength=k + 2)[1:]
    assert stats.chisquare(counts, law * b).pvalue > 1e-4


def test_simulated_with_the_chain_oracle():
    """The same with ref.specdec.rejection's chain_sample (the oracle of section 1, every
    random number an input), where it is present."""
    rejection = pytest.importorskip("ref.specdec.rejection")
    p = np.array([12, 4, 0, 0], dtype=np.float64) / 16
    q = np.array([8, 4, 4, 0], dtype=np.float64) / 16
    k, b = 4, 20000
    rng = np.random.default_rng(12)
    out = rejection.chain_sample(np.broadcast_to(p, (b, k + 1, 4)).copy(), rng.choice(4, size=(b, k), p=q),
                                 np.full(b, k), rng.random((b, k)), rng.random(b), np.zeros(b, bool),
                                 np.broadcast_to(q, (b, k, 4)).copy())
    n = (np.asarray(out) >= 0).sum(axis=1)
    counts = np.bincount(n, minlength=k + 2)[1:]
    assert stats.chisquare(counts, length_law(0.75, k) * b).pvalue > 1e-4


H100, LLAMA70, QWEN8 = HARDWARE["H100"], MODELS["Llama-3.1-70B"], MODELS["Qwen3-8B"]


def test_verification_of_one_token_is_a_decode_step_save_the_logits():
    """verify_step(tokens=1) reads what decode_step reads and does its FLOPs (one position's
    logits either way); k + 1 tokens multiply the FLOPs by about k + 1, and the bytes only
    by the k more embedding rows each sequence looks up."""
    one, step = verify_step(QWEN8, H100, 4096, 8, 1), decode_step(QWEN8, H100, 4096, 8)
    assert one.bytes == step.bytes and one.flops == step.flops and one.time == step.time
    five = verify_step(QWEN8, H100, 4096, 8, 5)
    assert five.bytes - step.bytes == 8 * 4 * QWEN8.hidden * 2 and 4.9 < five.flops / step.flops < 5.2


def test_small_batches_give_theorem_3_8():
    """Memory-bound at batch 1: verification costs one plain step (and k embedding rows), and
    with the draft's cost a fixed share c the speed-up is roofline.specdec.speedup(alpha, k, c)
    = E / (k c + 1)."""
    s = spec_step(LLAMA70, H100, context=4096, batch=1, k=4, alpha=0.8, draft=0.05)
    assert s.verify.bound == s.plain.bound == "memory"
    assert s.speedup == pytest.approx(float(speedup(np.float64(0.8), np.int64(4), np.float64(0.05))), rel=1e-5)
    assert s.tokens == pytest.approx(3.3616)


def test_the_slowdown_batch():
    """At context 0 (weights only, a dense model) the plain step is memory-bound up to the
    ridge batch r = ridge / (2 FLOP per parameter per byte); the verification is
    compute-bound past r / (k + 1) and speculation loses once (k + 1) B / r + k c > E:
    B* = r (E - k c) / (k + 1). Long contexts (KV reads) keep it a speed-up."""
    k, alpha, c = 4, 0.8, 0.05
    got = slowdown_batch(LLAMA70, H100, context=0, k=k, alpha=alpha, draft=c, limit=1 << 16)
    step = decode_step(LLAMA70, H100, 0, 1)
    r = ridge(H100) * step.bytes / step.flops  # the batch at which the plain step meets the ridge
    predicted = r * (3.3616 - k * c) / (k + 1)
    assert abs(got - predicted) / predicted < 0.02
    below = spec_step(LLAMA70, H100, context=0, batch=got - 1, k=k, alpha=alpha, draft=c)
    at = spec_step(LLAMA70, H100, context=0, batch=got, k=k, alpha=alpha, draft=c)
    assert below.speedup >= 1.0 > at.speedup and at.verify.bound == "compute"
    assert slowdown_batch(LLAMA70, H100, context=4096, k=k, alpha=alpha, draft=c, limit=1 << 16) is None
    assert slowdown_batch(LLAMA70, H100, context=0, k=k, alpha=0.0, draft=1.0, limit=64) == 1  # none accepted

"""QJL (ref.kv.qjl): the sketch's conventions as the reference has them, the estimator's
identities, the outlier variant, the bit counts, and the estimator's law (unbiased,
with the predicted variance: a z-test over independent Gaussian projections)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ref.conformance.adapters import numpy_kv_qjl
from ref.conformance.implementation import load_implementation
from ref.conformance.runner import run
from ref.kv import qjl
from ref.kv.catalog.qjl import H16, hadamard_projection, integer_projection, keys

Z = 5.33  # two-sided N(0, 1) tail 1e-7 per z-score: a false alarm rate of ~1e-6 over this file's checks


def _rng(seed=0):
    return np.random.default_rng(seed)


def test_signs_pack_least_significant_bit_first():
    s = -np.ones((1, 16), np.int8)
    s[0, 0], s[0, 9] = 1, 1
    assert qjl.pack_signs(s).tolist() == [[1, 2]]
    r = _rng().choice(np.array([-1, 1], np.int8), (3, 4, 40))
    assert np.array_equal(qjl.unpack_signs(qjl.pack_signs(r)), r)
    assert np.array_equal(numpy_kv_qjl.pack(r), qjl.pack_signs(r))


def test_zero_projection_gives_minus_one():
    k = np.zeros((1, 1, 2, 16))
    k[0, 0, 1] = H16[5]  # S k = 16 e_5 for S = H16: every other row exactly 0
    signs, norms = qjl.sketch(k, H16.astype(np.float64))
    assert (signs[0, 0, 0] == -1).all() and norms[0, 0, 0] == 0
    assert signs[0, 0, 1].tolist() == [1 if i == 5 else -1 for i in range(16)] and norms[0, 0, 1] == 4


def test_scores_equal_the_inner_product_with_the_decoded_key_and_read_head_h_over_g():
    rng = _rng(1)
    k, q, S = keys(rng, (2, 2, 5, 16)), keys(rng, (2, 6, 3, 16)), integer_projection(rng, 24, 16)
    state = qjl.encode(k, S)
    got = qjl.scores(q, S, state["signs"], state["norms"])
    k_hat = qjl.decode(state, S)
    for h in range(6):
        want = q[:, h].astype(np.float64) @ np.swapaxes(k_hat[:, h // 3], -1, -2)
        assert np.allclose(got[:, h], want, rtol=1e-13, atol=1e-13)
    signs, norms = qjl.sketch(k, S)
    assert np.array_equal(qjl.scores(q, S, signs, norms), got)


def test_outlier_scores_reduce_to_the_plain_ones_without_outliers():
    rng = _rng(2)
    k, q, S = keys(rng, (1, 2, 4, 16)), keys(rng, (1, 2, 2, 16)), hadamard_projection(rng, 2)
    none = np.zeros((1, 2, 2, 16), bool)
    signs, norms, osigns, onorms = qjl.sketch_outliers(k, S, none, 8)
    assert (osigns == -1).all() and (onorms == 0).all()
    plain = qjl.scores(q, S, *qjl.sketch(k, S))
    assert np.allclose(qjl.scores_outliers(q, S, signs, norms, none, osigns, onorms), plain, rtol=0, atol=1e-12)


def test_outlier_scores_are_the_sum_of_two_sketches():
    """With every channel an outlier and m_out = m, the inlier part is empty and the
    score is the plain estimate of k under S."""
    rng = _rng(3)
    k, q, S = keys(rng, (1, 1, 4, 16)), keys(rng, (1, 1, 2, 16)), integer_projection(rng, 16, 16)
    every = np.ones((1, 1, 2, 16), bool)
    signs, norms, osigns, onorms = qjl.sketch_outliers(k, S, every, 16)
    assert (signs == -1).all() and np.array_equal(onorms, norms)
    got = qjl.scores_outliers(q, S, signs, norms, every, osigns, onorms)
    assert np.allclose(got, qjl.scores(q, S, osigns, norms), rtol=1e-13)


def test_outlier_channels_by_group_norm_lower_index_on_ties():
    k = np.zeros((1, 1, 4, 8))
    k[0, 0, 0, 1] = 10
    k[0, 0, :, 5] = 6
    k[0, 0, 3, 6] = 9
    assert np.flatnonzero(qjl.outlier_channels(k, 4, 1)[0, 0, 0]).tolist() == [5]
    assert np.flatnonzero(qjl.outlier_channels(k, 4, 2)[0, 0, 0]).tolist() == [1, 5]
    tie = np.zeros((1, 1, 2, 8))
    tie[0, 0, :, [3, 6]] = 4
    assert np.flatnonzero(qjl.outlier_channels(tie, 2, 1)[0, 0, 0]).tolist() == [3]
    with pytest.raises(ValueError, match="group"):
        qjl.outlier_channels(k, 3, 1)


def test_invalid_inputs_name_the_argument():
    rng = _rng(4)
    k, S = keys(rng, (1, 1, 2, 16)), integer_projection(rng, 8, 16)
    with pytest.raises(ValueError, match="^S:"):
        qjl.sketch(k, S[:, :8])
    bad = k.copy()
    bad[0, 0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="^k:"):
        qjl.sketch(bad, S)
    signs, norms = qjl.sketch(k, S)
    with pytest.raises(ValueError, match="^norms:"):
        qjl.scores(keys(rng, (1, 1, 1, 16)), S, signs, -norms)
    with pytest.raises(ValueError, match="^q:"):
        qjl.scores(keys(rng, (1, 3, 1, 16)), S, np.concatenate([signs] * 2, 1), np.concatenate([norms] * 2, 1))
    with pytest.raises(ValueError, match="^outlier_dim:"):
        qjl.sketch_outliers(k, S, np.zeros((1, 1, 1, 16), bool), 9)


def test_bits_per_element():
    assert qjl.bits_per_element(32768, 128, m=256) == (256 + 16) / 128  # 2.125
    # the reference's setting: 8 outliers per 32 tokens, outlier sketch 256, a 128-token buffer
    assert qjl.bits_per_element(32768, 128, m=256, outliers=8, outlier_dim=256, group=32, buffer=128) == 546 / 128
    # 100 tokens with a 64-token buffer: 64 sketched, 36 in 16 bits
    assert qjl.bits_per_element(100, 128, m=256, buffer=64) == (64 * 272 + 36 * 16 * 128) / (100 * 128)


def test_sphere_factor():
    assert qjl.sphere_factor(1) == pytest.approx(math.sqrt(math.pi / 2), rel=1e-15)  # u_1 = +-1
    assert qjl.sphere_factor(128) == pytest.approx(1.0019550, abs=1e-7)
    for d in (16, 64, 256, 4096):
        assert abs(qjl.sphere_factor(d) - (1 + 1 / (4 * d))) < 1 / d**2


def _pairs(rng, d):
    q, k = rng.integers(-8, 9, d) / 4, rng.integers(-8, 9, d) / 4
    orth = k.copy()
    orth[0] = 0
    q_perp = np.zeros(d)
    q_perp[0] = 1.0  # orthogonal to `orth`
    return [(q, k), (k, k), (-2 * k, k), (q_perp, orth)]


def test_estimator_is_unbiased_with_the_predicted_variance():
    rng = _rng(5)
    d, m, n = 16, 32, 2000
    projections = rng.standard_normal((n, m, d))
    for q, k in _pairs(rng, d):
        z_mean, z_var = qjl.unbiasedness(q, k, projections)
        assert abs(z_mean) < Z and abs(z_var) < Z, (q, k, z_mean, z_var)
    # the test has teeth: without sqrt(pi/2) the mean is 0.80 <q, k>
    q, k = _pairs(rng, d)[1]
    e = qjl.estimates(q, k, projections) / qjl.SCALE
    v = float(qjl.estimator_variance(q, k, m))
    assert abs(e.mean() - q @ k) / math.sqrt(v / n) > 10 * Z


def test_predicted_variance_formula():
    q, k = np.array([1.0, 0, 0]), np.array([2.0, 0, 0])
    assert qjl.estimator_variance(q, k, 4) == pytest.approx((math.pi / 2 - 1) * 4 / 4)  # parallel: (pi/2 - 1)/m
    assert qjl.estimator_variance(np.array([0, 1.0, 0]), k, 8) == pytest.approx(math.pi / 2 * 4 / 8)


@pytest.mark.deep
def test_default_kernel_passes_with_examples():
    impl = load_implementation("ref.conformance.adapters.numpy_kv_qjl")
    report = run(impl, ops=["kv.qjl.*"], examples=5, shrink=False)
    assert report.ok, [f.where for r in report.ops for f in r.failures]


@pytest.mark.deep
def test_orthogonalized_rows_carry_the_sphere_factor():
    """The reference's projection (QR blocks of a Gaussian matrix times sqrt(D)): the
    mean estimate is sphere_factor(D) <q, k>, 6.4% high at D = 4; Gaussian rows are
    unbiased at the same D (z-tests against each)."""
    rng = _rng(6)
    d, n = 4, 200_000
    q, k = np.array([1.0, 2, 0, -1]), np.array([2.0, 1, 1, 0])
    blocks = np.linalg.qr(rng.standard_normal((n, d, d)))[0].transpose(0, 2, 1) * math.sqrt(d)
    e = qjl.estimates(q, k, blocks)
    se = e.std() / math.sqrt(n)
    assert abs(e.mean() - qjl.sphere_factor(d) * (q @ k)) < Z * se
    assert abs(e.mean() - q @ k) > Z * se
    z_mean, z_var = qjl.unbiasedness(q, k, rng.standard_normal((n, d, d)))
    assert abs(z_mean) < Z and abs(z_var) < Z


@pytest.mark.deep
def test_reference_setting_variance():
    """m = 256, D = 128 (the reference's general layers): unbiased, variance as predicted."""
    rng = _rng(7)
    d, m, n = 128, 256, 400
    projections = rng.standard_normal((n, m, d))
    for q, k in _pairs(rng, d):
        z_mean, z_var = qjl.unbiasedness(q, k, projections)
        assert abs(z_mean) < Z and abs(z_var) < Z


def test_attention_over_qjl_keys_is_attend_on_the_decoded_keys():
    from ref.attention import attend as attention
    from ref.kv import qjl_attend
    from ref.kv.catalog.qjl_attend import attend_inputs

    rng = _rng(8)
    x = attend_inputs(rng, 1, 2, 2, 3, 4, 2)
    logits = np.concatenate([qjl.scores(x["q"], x["S"], x["signs"], x["norms"]),
                             np.einsum("bhgqd,bhtd->bhgqt", x["q"].reshape(1, 2, 2, 3, 16).astype(np.float64),
                                       x["k_recent"].astype(np.float64)).reshape(1, 4, 3, 2)], axis=-1) / 4
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = np.einsum("bhgqt,bhtd->bhgqd", p.reshape(1, 2, 2, 3, 6), x["v"].astype(np.float64)).reshape(1, 4, 3, 8)
    assert np.allclose(qjl_attend.attend(**x), want, rtol=1e-12, atol=1e-12)
    # with outliers: the decoded keys reproduce scores_outliers
    y = attend_inputs(rng, 1, 1, 1, 2, 4, 0, outliers=True)
    parts = {k: y[k] for k in ("S", "signs", "norms", "outliers", "outlier_signs", "outlier_norms")}
    k_hat = qjl_attend.decode_outliers(**parts)
    assert np.allclose(np.einsum("bhqd,bhtd->bhqt", y["q"].astype(np.float64), k_hat),
                       qjl.scores_outliers(y["q"], **parts), rtol=1e-12, atol=1e-12)
    out, _ = attention(np.swapaxes(y["q"], 1, 2), np.swapaxes(k_hat, 1, 2), np.swapaxes(y["v"], 1, 2))
    assert np.allclose(qjl_attend.attend(**y), np.swapaxes(out, 1, 2), rtol=1e-13)

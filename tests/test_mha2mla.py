"""MHA2MLA: at full rank the converted layer is the (partial-RoPE) original layer; the
partial-RoPE model and the S_2-norm scores match loops written here from the paper's
definitions; the low-rank KV error falls with the rank; GQA groups are contiguous."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ref.attention.mha2mla import (ConvertedLayer, convert, converted_attention, joint_svd, kv_bytes_per_token,
                                   original_attention, pair_scores, select_rope_pairs)


def _layer(rng, h, hkv, d, hidden):
    w = [rng.standard_normal((n * d, hidden)) / math.sqrt(hidden) for n in (h, hkv, hkv)]
    return w[0] * 2.0, w[1] * 2.0, w[2]


def _shapes(rng, n):
    for _ in range(n):
        hkv = int(rng.integers(1, 4))
        h = hkv * int(rng.integers(1, 4))
        d = 2 * int(rng.integers(1, 6))
        hidden = int(rng.integers(4, 3 * hkv * d))  # both hidden < 2 Hkv d and hidden > 2 Hkv d
        yield h, hkv, d, hidden, int(rng.integers(1, 3)), int(rng.integers(1, 7))


def _random_keep(rng, hkv, d, p):
    keep = np.zeros((hkv, d // 2), bool)
    for g in range(hkv):
        keep[g, rng.choice(d // 2, p, replace=False)] = True
    return keep


def _close(a, b, rtol=1e-10):
    return np.abs(a - b).max() <= rtol * max(1.0, np.abs(b).max())


def _full_rank(hkv, d, p, hidden):
    return min(hkv * (2 * d - 2 * p), hidden)


def test_full_rope_full_rank_is_the_original_layer():
    rng = np.random.default_rng(0)
    for h, hkv, d, hidden, b, length in _shapes(rng, 30):
        wq, wk, wv = _layer(rng, h, hkv, d, hidden)
        x = rng.standard_normal((b, length, hidden))
        keep = np.ones((hkv, d // 2), bool)
        layer = convert(wq, wk, wv, keep, _full_rank(hkv, d, d // 2, hidden), n_heads=h)
        o1, l1 = original_attention(x, wq, wk, wv, n_heads=h)
        o2, l2 = converted_attention(x, layer)
        assert o2.shape == (b, length, h, d) and _close(o2, o1) and _close(l2, l1)


def test_full_rank_partial_rope_is_the_partial_rope_model():
    rng = np.random.default_rng(1)
    for h, hkv, d, hidden, b, length in _shapes(rng, 30):
        wq, wk, wv = _layer(rng, h, hkv, d, hidden)
        x = rng.standard_normal((b, length, hidden))
        p = int(rng.integers(0, d // 2 + 1))
        keep = _random_keep(rng, hkv, d, p)
        layer = convert(wq, wk, wv, keep, _full_rank(hkv, d, p, hidden), n_heads=h)
        pos = rng.integers(0, 50, (b, length))
        o1, l1 = original_attention(x, wq, wk, wv, n_heads=h, keep=keep, positions=pos)
        o2, l2 = converted_attention(x, layer, positions=pos)
        assert _close(o2, o1) and _close(l2, l1)
        assert layer.w_k_rope.shape == (hkv, 2 * p, hidden) and layer.w_uk.shape[:2] == (hkv, d - 2 * p)


def _rotate_neox(y, pos, freqs, keep_pairs):
    """Rotate pair f = (y[f], y[f + d/2]) by pos * freqs[f] where keep_pairs[f]."""
    half = y.shape[-1] // 2
    z = y[:half] + 1j * y[half:]
    z = np.where(keep_pairs, z * np.exp(1j * pos * freqs), z)
    return np.concatenate([z.real, z.imag])


def _loop_partial_rope(x, wq, wk, wv, h, keep, causal=True, base=10000.0):
    """The partial-RoPE MHA/GQA layer, one head and one query at a time."""
    b, length, _ = x.shape
    hkv, half = keep.shape
    d = 2 * half
    freqs = base ** (-2 * np.arange(half) / d)
    out = np.zeros((b, length, h, d))
    for bi in range(b):
        for hi in range(h):
            g = hi // (h // hkv)  # contiguous groups
            q = x[bi] @ wq[hi * d:(hi + 1) * d].T
            k = x[bi] @ wk[g * d:(g + 1) * d].T
            v = x[bi] @ wv[g * d:(g + 1) * d].T
            kr = np.stack([_rotate_neox(k[j], j, freqs, keep[g]) for j in range(length)])
            for i in range(length):
                s = kr @ _rotate_neox(q[i], i, freqs, keep[g]) / math.sqrt(d)
                if causal:
                    s = np.where(np.arange(length) <= i, s, -np.inf)
                e = np.exp(s - s.max())
                out[bi, i, hi] = e @ v / e.sum()
    return out


def test_partial_rope_model_matches_the_loop():
    rng = np.random.default_rng(2)
    for h, hkv, d, hidden, b, length in _shapes(rng, 12):
        wq, wk, wv = _layer(rng, h, hkv, d, hidden)
        x = rng.standard_normal((b, length, hidden))
        keep = _random_keep(rng, hkv, d, int(rng.integers(0, d // 2 + 1)))
        for causal in (True, False):
            got, _ = original_attention(x, wq, wk, wv, n_heads=h, keep=keep, causal=causal)
            assert _close(got, _loop_partial_rope(x, wq, wk, wv, h, keep, causal))


def test_dropping_rope_and_interleaved_groups_change_the_answer():
    rng = np.random.default_rng(3)
    h, hkv, d, hidden = 4, 2, 8, 24
    wq, wk, wv = _layer(rng, h, hkv, d, hidden)
    x = rng.standard_normal((1, 6, hidden))
    full, _ = original_attention(x, wq, wk, wv, n_heads=h)
    keep = select_rope_pairs(2, head_dim=d, n_kv_heads=hkv, selection="high")
    partial, _ = original_attention(x, wq, wk, wv, n_heads=h, keep=keep)
    assert not _close(partial, full, 1e-6)
    # query head h reading KV head h % Hkv (interleaved) is a different layer
    wq_perm = wq.reshape(h, d, hidden)[[0, 2, 1, 3]].reshape(-1, hidden)
    interleaved = _loop_partial_rope(x, wq_perm, wk, wv, h, np.ones((hkv, d // 2), bool))[:, :, [0, 2, 1, 3]]
    assert not _close(full, interleaved, 1e-6)


def _loop_scores(x, wq, wk, h, hkv, d):
    half = d // 2
    qn = np.zeros((h, half))
    kn = np.zeros((hkv, half))
    for hi in range(h):
        q = x @ wq[hi * d:(hi + 1) * d].T
        for f in range(half):
            qn[hi, f] = np.mean([math.hypot(t[f], t[f + half]) for t in q])
    for g in range(hkv):
        k = x @ wk[g * d:(g + 1) * d].T
        for f in range(half):
            kn[g, f] = np.mean([math.hypot(t[f], t[f + half]) for t in k])
    return np.array([[sum(qn[hi, f] * kn[g, f] for hi in range(g * (h // hkv), (g + 1) * (h // hkv)))
                      for f in range(half)] for g in range(hkv)])


def test_pair_scores_match_the_loop_and_find_a_planted_pair():
    rng = np.random.default_rng(4)
    for h, hkv, d, hidden, _, _ in _shapes(rng, 10):
        wq, wk, _ = _layer(rng, h, hkv, d, hidden)
        x = rng.standard_normal((int(rng.integers(1, 20)), hidden))
        assert _close(pair_scores(x, wq, wk, n_heads=h), _loop_scores(x, wq, wk, h, hkv, d), 1e-12)
        g, f = int(rng.integers(hkv)), int(rng.integers(d // 2))
        wk_planted = wk.copy()
        wk_planted[[g * d + f, g * d + f + d // 2]] *= 1e3  # pair f of KV head g dominates its head
        keep = select_rope_pairs(1, head_dim=d, n_kv_heads=hkv, scores=pair_scores(x, wq, wk_planted, n_heads=h))
        assert keep[g, f] and keep.sum() == hkv


def test_pair_scores_aggregate_the_query_heads_of_each_group():
    rng = np.random.default_rng(5)
    h, hkv, d, hidden = 6, 2, 8, 16
    wq, wk, _ = _layer(rng, h, hkv, d, hidden)
    x = rng.standard_normal((30, hidden))
    base = pair_scores(x, wq, wk, n_heads=h)
    wq2 = wq.copy()
    wq2[4 * d:5 * d] *= 3.0  # query head 4 is in group 1 (heads 3, 4, 5)
    scores = pair_scores(x, wq2, wk, n_heads=h)
    assert np.array_equal(scores[0], base[0]) and (scores[1] > base[1]).all()


def test_select_rope_pairs_rules():
    cases = {"high": [0, 1], "low": [6, 7], "uniform": [1, 5]}
    for selection, pairs in cases.items():
        keep = select_rope_pairs(2, head_dim=16, n_kv_heads=3, selection=selection, uniform_start=1)
        assert keep.shape == (3, 8) and all(np.flatnonzero(row).tolist() == pairs for row in keep)
    assert np.flatnonzero(select_rope_pairs(4, head_dim=16, n_kv_heads=1, selection="uniform")[0]).tolist() == [
        0, 2, 4, 6]
    scores = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0]])
    keep = select_rope_pairs(2, head_dim=8, n_kv_heads=2, scores=scores)
    assert keep.tolist() == [[False, True, True, False], [True, True, False, False]]  # ties: lower f
    for p in (0, 4):
        assert select_rope_pairs(p, head_dim=8, n_kv_heads=2, scores=scores).sum() == 2 * p
    assert not select_rope_pairs(0, head_dim=8, n_kv_heads=1, selection="uniform").any()


def _kv_error(x, wk, wv, layer, keep, d):
    """|X (W_kv - W_uk/uv W_dkv)^T|_F over the NoPE key rows and the value rows."""
    hkv = keep.shape[0]
    dims = np.concatenate([keep, keep], axis=1)
    w_nope = wk.reshape(hkv, d, -1)[~dims].reshape(-1, wk.shape[1])
    exact = x @ np.concatenate([w_nope, wv]).T
    approx = x @ (np.concatenate([layer.w_uk.reshape(-1, layer.w_dkv.shape[0]),
                                  layer.w_uv.reshape(-1, layer.w_dkv.shape[0])]) @ layer.w_dkv).T
    return np.linalg.norm(exact - approx)


def test_kv_error_falls_with_the_rank_and_vanishes_at_full_rank():
    rng = np.random.default_rng(6)
    h, hkv, d, hidden = 4, 2, 8, 20
    wq, wk, wv = _layer(rng, h, hkv, d, hidden)
    x = rng.standard_normal((2, 7, hidden))
    keep = select_rope_pairs(1, head_dim=d, n_kv_heads=hkv, scores=pair_scores(x.reshape(-1, hidden), wq, wk,
                                                                               n_heads=h))
    full = _full_rank(hkv, d, 1, hidden)
    exact, _ = original_attention(x, wq, wk, wv, n_heads=h, keep=keep)
    kv_err, w_err, out_err = [], [], []
    for r in range(1, full + 1):
        layer = convert(wq, wk, wv, keep, r, n_heads=h)
        kv_err.append(_kv_error(x.reshape(-1, hidden), wk, wv, layer, keep, d))
        w_err.append(_kv_error(np.eye(hidden), wk, wv, layer, keep, d))
        out_err.append(np.abs(converted_attention(x, layer)[0] - exact).max())
        assert np.allclose(layer.w_dkv @ layer.w_dkv.T, np.eye(r), atol=1e-12)  # V_r^T: orthonormal rows
    assert all(b <= a * (1 + 1e-9) + 1e-12 for a, b in zip(kv_err, kv_err[1:]))
    assert all(b <= a * (1 + 1e-9) + 1e-12 for a, b in zip(w_err, w_err[1:]))
    assert kv_err[-1] < 1e-12 * kv_err[0] and out_err[-1] < 1e-12 and out_err[0] > 1e-3
    sv = np.linalg.svd(np.concatenate([wk.reshape(hkv, d, -1)[~np.concatenate([keep, keep], 1)], wv]),
                       compute_uv=False)
    assert np.allclose(w_err, np.sqrt(np.maximum(np.cumsum((sv**2)[::-1])[::-1][1:].tolist() + [0.0], 0)),
                       atol=1e-12)  # Eckart-Young: the discarded singular values


def test_whitened_svd_is_better_on_its_calibration_set():
    rng = np.random.default_rng(7)
    for _ in range(10):
        hidden = int(rng.integers(4, 12))
        wk, wv = rng.standard_normal((int(rng.integers(1, 10)), hidden)), rng.standard_normal((6, hidden))
        x = rng.standard_normal((40, hidden)) * rng.uniform(0.1, 5, hidden)  # anisotropic activations
        w = np.concatenate([wk, wv])
        for r in range(1, min(w.shape) + 1):
            parts_w = joint_svd(wk, wv, r)
            parts_x = joint_svd(wk, wv, r, svd="whitened", calibration=x)
            approx_w = np.concatenate(parts_w[1:]) @ parts_w[0]
            approx_x = np.concatenate(parts_x[1:]) @ parts_x[0]
            assert np.linalg.norm(x @ (w - approx_x).T) <= np.linalg.norm(x @ (w - approx_w).T) * (1 + 1e-9) + 1e-12
            assert np.linalg.norm(w - approx_w) <= np.linalg.norm(w - approx_x) * (1 + 1e-9) + 1e-12
        assert _close(approx_x, w, 1e-10)  # full rank: exact


def test_kv_bytes_per_token():
    assert kv_bytes_per_token(head_dim=128, n_kv_heads=8, rope_pairs=16, rank=256) == {
        "original": 2 * 8 * 128 * 2, "converted": (256 + 8 * 32) * 2}
    llama2 = dict(head_dim=128, n_kv_heads=32, rope_pairs=8, rank=64 * 32)  # 16 RoPE dims, d_kv = 64
    assert kv_bytes_per_token(**llama2) == {"original": 16384, "converted": 5120}
    int4 = kv_bytes_per_token(**llama2, bits_per_value=4)
    assert int4 == {"original": 4096, "converted": 1280}
    assert round(100 * (1 - int4["converted"] / 16384), 2) == 92.19  # vs the 16-bit original
    assert kv_bytes_per_token(head_dim=64, n_kv_heads=1, rope_pairs=0, rank=3, bits_per_value=4) == {
        "original": 64, "converted": 1.5}


def test_errors():
    rng = np.random.default_rng(0)
    h, hkv, d, hidden = 4, 2, 8, 12
    wq, wk, wv = _layer(rng, h, hkv, d, hidden)
    x = rng.standard_normal((1, 3, hidden))
    keep = np.ones((hkv, d // 2), bool)
    cases = [
        (lambda: original_attention(x, wq, wk, wv, n_heads=3), ValueError, "w_q"),
        (lambda: original_attention(x, wq, wk[:, :-1], wv, n_heads=h), ValueError, "w_k"),
        (lambda: original_attention(x, wq, wk[:-8], wv, n_heads=h), ValueError, "w_v"),
        (lambda: original_attention(x, wq, np.concatenate([wk, wk[:8]]), np.concatenate([wv, wv[:8]]), n_heads=h),
         ValueError, "w_k"),  # 3 KV heads do not divide 4
        (lambda: original_attention(x[0], wq, wk, wv, n_heads=h), ValueError, "x"),
        (lambda: original_attention(x[..., :-1], wq, wk, wv, n_heads=h), ValueError, "x"),
        (lambda: original_attention(x.astype(int), wq, wk, wv, n_heads=h), TypeError, "x"),
        (lambda: original_attention(x, wq, wk, wv, n_heads=h, keep=keep[:1]), ValueError, "keep"),
        (lambda: original_attention(x, wq, wk, wv, n_heads=h, keep=keep.astype(int)), TypeError, "keep"),
        (lambda: original_attention(x, wq, wk, wv, n_heads=h, keep=np.array([[1, 0, 0, 0], [1, 1, 0, 0]], bool)),
         ValueError, "same number"),
        (lambda: original_attention(x, wq, wk, wv, n_heads=h, positions=np.arange(4)), ValueError, "positions"),
        (lambda: convert(wq, wk, wv, keep, 0, n_heads=h), ValueError, "rank"),
        (lambda: convert(wq, wk, wv, keep, hidden + 1, n_heads=h), ValueError, "rank"),
        (lambda: convert(wq, wk, wv, keep, 2, n_heads=h, svd="split"), ValueError, "svd"),
        (lambda: convert(wq, wk, wv, keep, 2, n_heads=h, svd="whitened"), ValueError, "calibration"),
        (lambda: joint_svd(wk, wv, 2, svd="whitened", calibration=x[0]), ValueError, "positive definite"),
        (lambda: joint_svd(wk[:, :-1], wv, 2), ValueError, "w_k_nope"),
        (lambda: converted_attention(x, (wq, keep)), TypeError, "layer"),
        (lambda: pair_scores(x, wq, wk, n_heads=h), ValueError, "calibration"),
        (lambda: select_rope_pairs(5, head_dim=8, n_kv_heads=1, selection="high"), ValueError, "rope_pairs"),
        (lambda: select_rope_pairs(3, head_dim=8, n_kv_heads=1, selection="uniform"), ValueError, "rope_pairs"),
        (lambda: select_rope_pairs(2, head_dim=8, n_kv_heads=1, selection="uniform", uniform_start=2),
         ValueError, "uniform_start"),
        (lambda: select_rope_pairs(2, head_dim=8, n_kv_heads=1), ValueError, "scores"),
        (lambda: select_rope_pairs(2, head_dim=8, n_kv_heads=2, scores=np.ones((1, 4))), ValueError, "scores"),
        (lambda: select_rope_pairs(2, head_dim=8, n_kv_heads=1, selection="S-high"), ValueError, "selection"),
        (lambda: select_rope_pairs(2, head_dim=7, n_kv_heads=1, selection="high"), ValueError, "head_dim"),
        (lambda: kv_bytes_per_token(head_dim=128, n_kv_heads=8, rope_pairs=65, rank=4), ValueError, "rope_pairs"),
        (lambda: kv_bytes_per_token(head_dim=128, n_kv_heads=8, rope_pairs=2, rank=4.0), TypeError, "rank"),
        (lambda: kv_bytes_per_token(head_dim=128, n_kv_heads=8, rope_pairs=2, rank=4, bits_per_value=0), ValueError,
         "bits_per_value"),
    ]
    for call, error, word in cases:
        with pytest.raises(error, match=word):
            call()
    assert isinstance(convert(wq, wk, wv, keep, 2, n_heads=h), ConvertedLayer)

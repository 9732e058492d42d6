"""DSA (ref.sparse.dsa_indexer, ref.sparse.dsa): the lightning indexer's conventions as
DeepSeek's reference has them (act_quant's arithmetic, the NeoX pairing, fp8_index's
order of scaling), selection as exact sets with the lower index on ties, k = all
reducing to causal attention, the sparse attention equal to a gather of the selected
keys followed by dense attention, and correct alternatives passing while negative
controls fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.attention.attend import attend as dense_attend
from ref.conformance.adapters import numpy_sparse_dsa as K
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.formats.minifloat import decode, encode
from ref.quant.hadamard import hadamard_matrix
from ref.sparse import dsa, dsa_indexer as di
from ref.sparse.catalog.dsa import indexer_inputs, ints, margin_ok


def _rng(seed=0):
    return np.random.default_rng(seed)


def test_quantize_is_act_quant_per_token_and_block():
    x = np.zeros((2, 256), np.float32)
    x[0, :128], x[0, 128:], x[1] = 448.0, 3.0, 0.0
    values, scales = di.quantize(x)
    assert scales.tolist() == [[1.0, 2.0 ** -7], [2.0 ** -22, 2.0 ** -22]]  # 3/448 -> 2^-7; 1e-4/448 -> 2^-22
    assert values[0, 0] == 448 and values[0, 128] == 3 * 2 ** 7 and (values[1] == 0).all()
    values, scales = di.quantize(x, scale_fmt="float")
    assert scales[0, 0] == np.float32(np.float32(448) * np.float32(1 / 448)) and values[0, 0] == 448
    y = np.array([[1.0, 17.0, 19.0, 500.0]], np.float32)  # 17 and 19 halfway between E4M3 values
    v, s = di.quantize(y, block_size=4, scale_fmt="float")
    ref = decode(encode(np.clip((y / s[0, 0]).astype(np.float32), -448, 448), "float8_e4m3fn"),
                 "float8_e4m3fn")
    assert np.array_equal(v, ref.astype(np.float64))
    assert np.array_equal(K.quantize(y, 4, "float")[0], v) and np.array_equal(K.quantize(x)[1], di.quantize(x)[1])


def test_rotate_is_neox_rope_on_the_first_dims_then_the_orthogonal_hadamard():
    rng = _rng(1)
    x = ints(rng, (1, 2, 1, 16), dtype=np.float64)
    c, s = np.array([[0.0, 1, 1, 1], [1, 1, 1, 1]]), np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]])
    got = di.rotate(x, c, s, rope_dim=8, hadamard=False)
    assert got[0, 0, 0, 0] == -x[0, 0, 0, 4] and got[0, 0, 0, 4] == x[0, 0, 0, 0]  # pair (0, 4) turned 90 degrees
    assert np.array_equal(got[0, 1], x[0, 1]) and np.array_equal(got[..., 8:], x[..., 8:])
    inter = di.rotate(x, c, s, rope_dim=8, pairing="interleaved", hadamard=False)
    assert inter[0, 0, 0, 0] == -x[0, 0, 0, 1]
    h = di.rotate(x, c, s, rope_dim=8)
    assert np.allclose(h, got @ hadamard_matrix(16).T, atol=1e-12)
    q, k = ints(rng, (1, 1, 1, 16)), ints(rng, (1, 1, 1, 16))
    z = np.zeros((1, 0))
    assert math.isclose(float((di.rotate(q, z, z, rope_dim=0) * di.rotate(k, z, z, rope_dim=0)).sum()),
                        float((q * k).sum()), abs_tol=1e-12)


def test_index_scores_weight_after_relu_and_the_reference_scale():
    q = np.array([[[[1.0, 0], [0, 1]]]])  # T = 1, Hi = 2, Di = 2
    k = np.array([[[1.0, 1], [-1, 2]]])  # S = 2
    w = np.array([[[2.0, -1]]])
    got = di.index_scores(q, k, w)
    scale = 2 ** -0.5 * 2 ** -0.5
    assert np.allclose(got, [[[scale * (2 * 1 - 1 * 1), scale * (2 * 0 - 1 * 2)]]])
    assert di.index_scores(q[:, :0], k[:, :0], w[:, :0]).shape == (1, 0, 0)
    two = di.index_scores(np.concatenate([q, q], 1), k, np.concatenate([w, w], 1))
    assert two[0, 0, 1] == -np.inf and np.isfinite(two[0, 1]).all()


def test_select_sets_ties_and_short_rows():
    sc = np.array([[[5, 5, 5, 1], [2, 9, 9, 9]]], np.float64)
    assert di.select(sc, topk=2, causal=False).tolist() == [[[0, 1], [1, 2]]]
    assert di.select(sc, topk=3).tolist() == [[[0, 1, 2], [1, 2, 3]]]  # row 0 sits at key 2
    assert di.select(sc, topk=6).tolist() == [[[0, 1, 2, -1, -1, -1], [0, 1, 2, 3, -1, -1]]]
    sc[0, 1, 1] = -np.inf
    assert di.select(sc, topk=4)[0, 1].tolist() == [0, 2, 3, -1]
    with pytest.raises(ValueError, match="NaN"):
        di.select(np.full((1, 1, 2), np.nan), topk=1)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(0, 4), st.integers(1, 5))
def test_topk_of_all_keys_is_every_visible_key_and_attention_is_causal(seed, t, extra, k):
    rng = _rng(seed)
    s = t + extra
    sc = ints(rng, (1, t, s), -9, 9, np.float64)
    idx = di.select(sc, topk=s)
    vis = np.arange(s)[None] <= np.arange(t)[:, None] + extra
    assert all(set(r[r >= 0].tolist()) == set(np.flatnonzero(v).tolist()) for r, v in zip(idx[0], vis))
    q, kk, v = (ints(rng, sh, step=0.5) for sh in ((1, t, 2, 8), (1, s, 1, 8), (1, s, 1, 8)))
    out, lse = dsa.attend(q, kk, v, idx)
    want, wlse = dense_attend(q, kk, v, causal=True)
    assert np.allclose(out, want, atol=1e-12) and np.allclose(lse, wlse, atol=1e-12)
    assert (di.select(sc, topk=k) >= -1).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 4), st.integers(0, 6), st.integers(1, 6), st.booleans())
def test_attend_equals_a_gather_then_dense_attention(seed, t, extra, slots, causal):
    """The selection as a mask equals attending only the gathered keys, row by row,
    over random index lists (with -1 slots and repeats)."""
    rng = _rng(seed)
    s = t + extra
    q, k, v = ints(rng, (1, t, 4, 8), step=0.5), ints(rng, (1, s, 2, 8), step=0.5), ints(rng, (1, s, 2, 4))
    idx = rng.integers(-1, s, (1, t, slots)) if s else -np.ones((1, t, slots), np.int64)
    out, lse = dsa.attend(q, k, v, idx, causal=causal)
    for i in range(t):
        keys = sorted({j for j in idx[0, i] if j >= 0 and (not causal or j <= i + extra)})
        o, l = dense_attend(q[:, i:i + 1], k[:, keys], v[:, keys])
        assert np.allclose(out[:, i:i + 1], o, atol=1e-12) and np.allclose(lse[:, :, i:i + 1], l, atol=1e-12)


def test_unselected_nan_is_never_read():
    rng = _rng(3)
    q, k, v = ints(rng, (1, 2, 2, 8)), ints(rng, (1, 4, 1, 8)), ints(rng, (1, 4, 1, 8))
    v[0, 3] = np.nan
    out, lse = dsa.attend(q, k, v, np.array([[[0, -1], [1, 2]]]))
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    out, lse = dsa.attend(q, k, v, np.array([[[-1, -1], [1, 2]]]))
    assert (out[0, 0] == 0).all() and (lse[0, :, 0] == -np.inf).all()


def test_indexer_fp8_and_none_agree_on_clear_inputs_and_the_kernel_order_matches():
    rng = _rng(4)
    x = indexer_inputs(rng, 1, 3, 8, 4, 16, 8)
    p = {"topk": 3, "rope_dim": 8, "block_size": 16}
    assert np.array_equal(di.indexer(**x, **p), K.indexer(**x, **p))
    none, fp8 = di.indexer_scores(**x, rope_dim=8, quant="none"), di.indexer_scores(**x, rope_dim=8, block_size=16)
    fin = np.isfinite(none)
    assert np.allclose(none[fin], fp8[fin], atol=0.15 * np.abs(none[fin]).max())  # FP8's 3 mantissa bits
    assert margin_ok(x, {**p, "quant": "none"}) in (True, False)


@pytest.mark.deep
def test_default_kernel_passes_with_examples():
    assert run(Implementation("default dsa", K.OPS, variants=K.VARIANTS), ops=["sparse.dsa.*"], examples=20).ok


def test_alternatives_pass_and_controls_fail():

    def at64(q, k, v, indices, scale=None, causal=True):
        out, lse = dsa.attend(q, k, v, indices, scale=scale, causal=causal)
        return out, lse

    def zeros(q, k, v, indices, scale=None, causal=True):
        out, lse = K.attend(q, k, v, indices, scale, causal)
        return np.zeros_like(out), lse

    def shuffled(scores, topk, causal=True):
        return np.roll(K.select(scores, topk, causal), 1, axis=1)

    op = "sparse.dsa.attend"
    assert run(Implementation("float64 masked dense", {op: at64}), ops=[op], examples=0).ok
    assert not run(Implementation("zeros", {op: zeros}), ops=[op], examples=0).ok
    assert not run(Implementation("rows shuffled", {"sparse.dsa.select": shuffled}), ops=["sparse.dsa.select"],
                   examples=0).ok

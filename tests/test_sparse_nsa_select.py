"""NSA's compression and selection (ref.sparse.nsa_compress, ref.sparse.nsa_select):
the oracles against direct loop definitions, eq. 9's double sum against the overlap
weights, the selection's set properties (exact, forced, causal, top by rank, n = all
reduces to causal attention), the emulations, correct kernels at low precision and
negative controls, and flash-linear-attention's naive NSA (when installed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.attention import attend
from ref.conformance.adapters import numpy_sparse_nsa_select as kernel
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.sparse import nsa_compress as C
from ref.sparse import nsa_select as S
from ref.sparse.catalog.nsa_select import compare_index_sets, grid16


def _loop_compress(x, pe, block, stride, partial):
    b, t, h, d = x.shape
    starts = range(0, t, block) if partial else range(0, t - block + 1, stride)
    out = []
    for s in starts:
        toks = range(s, min(s + block, t))
        acc = sum(x[:, j].astype(np.float64) + (0 if pe is None else pe[j - s]) for j in toks)
        out.append(acc / len(toks))
    return np.stack(out, axis=1) if out else np.zeros((b, 0, h, d))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([(4, 2), (4, 4), (8, 4), (3, 1), (6, 3)]), st.integers(0, 20),
       st.booleans(), st.booleans())
def test_compress_is_the_mean_of_each_block(seed, sizes, t, with_pe, partial):
    rng = np.random.default_rng(seed)
    block, stride = sizes
    stride = block if partial else stride
    x = grid16(rng, (2, t, 2, 3))
    pe = grid16(rng, (block, 2, 3)) if with_pe else None
    got = C.compress(x, pe=pe, block=block, stride=stride, partial=partial)
    assert got.shape[1] == C.num_compressed(t, block=block, stride=stride, partial=partial)
    np.testing.assert_allclose(got, _loop_compress(x, pe, block, stride, partial), rtol=0, atol=1e-12)


def test_num_compressed_counts_complete_blocks():
    assert [C.num_compressed(t) for t in (0, 31, 32, 47, 48, 100)] == [0, 0, 1, 1, 2, 5]  # l = 32, d = 16
    assert C.num_compressed(40, block=16, stride=16, partial=True) == 3  # fla: ceil(40 / 16)
    assert C.num_compressed(40, block=16, stride=16) == 2
    with pytest.raises(ValueError, match="stride"):
        C.num_compressed(40, block=8, stride=4, partial=True)


def test_a_block_is_visible_once_its_last_token_is_in_the_past():
    vis = C.compressed_visible(100, 5)  # l = 32, d = 16, prefill
    first = vis.argmax(axis=0)  # the first query that sees each block
    assert list(first) == [31, 47, 63, 79, 95]
    assert not vis[:31].any()
    decode = C.compressed_visible(1, 5, seq_len=48)
    assert list(decode[0]) == [True, True, False, False, False]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([(4, 2), (4, 4), (2, 1)]), st.integers(0, 14),
       st.integers(1, 2), st.sampled_from([1, 2]))
def test_compressed_attend_is_attend_over_the_visible_blocks(seed, sizes, seq_len, hkv, g):
    rng = np.random.default_rng(seed)
    block, stride = sizes
    tc = C.num_compressed(seq_len, block=block, stride=stride)
    lq = min(seq_len, 3)
    q, k, v = grid16(rng, (1, lq, hkv * g, 4)), grid16(rng, (1, tc, hkv, 4)), grid16(rng, (1, tc, hkv, 4))
    out, lse, p = C.compressed_attend(q, k, v, seq_len=seq_len, block=block, stride=stride)
    vis = C.compressed_visible(lq, tc, seq_len=seq_len, block=block, stride=stride)
    for i in range(lq):  # the gather form: attend over the blocks row i sees
        seen = np.flatnonzero(vis[i])
        o_i, l_i = attend(q[:, i:i + 1], k[:, seen], v[:, seen])
        np.testing.assert_allclose(out[:, i:i + 1], o_i, atol=1e-12)
        np.testing.assert_allclose(lse[:, :, i:i + 1], l_i, atol=1e-12)
    assert (p[:, :, :, ~vis.any(axis=0)] == 0).all()
    sums = p.sum(axis=-1)  # [B, Lq, Hq]: 1 where a block is visible, else 0
    np.testing.assert_allclose(sums, np.broadcast_to(vis.any(axis=1)[None, :, None], sums.shape).astype(float),
                               atol=1e-12)
    heads = np.arange(hkv * g) // g
    logits = np.einsum("bqhd,bchd->bqhc", q.astype(float), k[:, :, heads].astype(float)) / 2  # D = 4
    ref_out = np.einsum("bqhc,bchd->bqhd", p, v[:, :, heads].astype(float))
    np.testing.assert_allclose(out, ref_out, atol=1e-12)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(np.where(vis[None, :, None], np.log(np.where(p > 0, p, 1)), 0),
                                   np.where(vis[None, :, None], logits - lse.transpose(0, 2, 1)[..., None], 0),
                                   atol=1e-12)


def _eq9_one_based(p_cmp, block, stride, block_sel, n_sel):
    """Eq. 9 as printed, p_cmp[(l'/d) J - m - n] with J = j + 1 and 1-based compressed numbers."""
    out = np.zeros(p_cmp.shape[:-1] + (n_sel,))
    for j in range(n_sel):
        for m in range(block_sel // stride):
            for n in range(block // stride):
                i = (block_sel // stride) * (j + 1) - m - n - 1  # the 1-based index, made 0-based
                if 0 <= i < p_cmp.shape[-1]:
                    out[..., j] += p_cmp[..., i]
    return out


@pytest.mark.parametrize("block, stride, block_sel", [(32, 16, 64), (16, 16, 16), (8, 4, 8), (4, 2, 16), (4, 1, 8)])
def test_eq9_is_the_overlap_of_the_blocks(block, stride, block_sel):
    tc, n_sel = C.num_compressed(200, block=block, stride=stride), S.num_selection_blocks(200, block_sel=block_sel)
    w = S.selection_weights(tc, n_sel, block=block, stride=stride, block_sel=block_sel)
    for i in range(tc):
        for j in range(n_sel):
            lo, hi = max(i * stride, j * block_sel), min(i * stride + block, (j + 1) * block_sel)
            assert w[i, j] * stride == max(hi - lo, 0)
    p = np.random.default_rng(0).integers(0, 65, (2, tc)) / 64
    np.testing.assert_array_equal(p @ w, _eq9_one_based(p, block, stride, block_sel, n_sel))
    got = S.importance(p[None, :, None, :], heads_kv=1, block=block, stride=stride, block_sel=block_sel,
                       seq_len=200)[0, :, 0]
    np.testing.assert_array_equal(got, p @ w)


def test_importance_sums_over_the_group_and_fla_averages():
    rng = np.random.default_rng(1)
    p = rng.integers(0, 65, (1, 3, 4, 5)) / 64
    one = S.importance(p, heads_kv=2, block=8, stride=8, block_sel=8, seq_len=40)
    np.testing.assert_array_equal(one, p.reshape(1, 3, 2, 2, 5).sum(axis=3))  # l' = l = d: p_slc = p_cmp
    mean = S.importance(p, heads_kv=2, block=8, stride=8, block_sel=8, seq_len=40, reduce="mean")
    np.testing.assert_array_equal(mean, one / 2)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 4]), st.integers(1, 24), st.integers(0, 8),
       st.integers(0, 2), st.integers(0, 3), st.sampled_from([2, 5, 100]))
def test_selection_is_the_top_n_by_rank(seed, block_sel, seq_len, n, initial, local, top):
    rng = np.random.default_rng(seed)
    lq = min(seq_len, 4)
    n_sel = S.num_selection_blocks(seq_len, block_sel=block_sel)
    imp = rng.integers(0, top, (1, lq, 2, n_sel)).astype(float)
    sel = S.select(imp, seq_len=seq_len, block_sel=block_sel, n=n, initial=initial, local=local)
    ok = S.selectable_blocks(lq, n_sel, seq_len=seq_len, block_sel=block_sel)
    forced = S.forced_blocks(lq, n_sel, seq_len=seq_len, block_sel=block_sel, initial=initial, local=local)
    for i in range(lq):
        for h in range(2):
            row = [int(x) for x in sel[0, i, h] if x >= 0]
            assert row == sorted(set(row)) and list(sel[0, i, h, len(row):]) == [-1] * (n - len(row))
            assert len(row) == min(n, int(ok[i].sum())) and all(ok[i, j] for j in row)
            key = {j: (not forced[i, j], -imp[0, i, h, j], j) for j in np.flatnonzero(ok[i])}
            assert row == sorted(sorted(key, key=key.get)[:n])
            if n >= forced[i].sum():
                assert set(np.flatnonzero(forced[i])) <= set(row)


def test_n_covering_every_block_is_causal_attention():
    """With n >= the number of blocks every selectable block is chosen: attention over
    the selected blocks' tokens (causal) is dense causal attention."""
    rng = np.random.default_rng(2)
    t, bs = 19, 4
    q, k, v = grid16(rng, (1, t, 2, 8)), grid16(rng, (1, t, 1, 8)), grid16(rng, (1, t, 1, 8))
    n_sel = S.num_selection_blocks(t, block_sel=bs)
    sel = S.select(grid16(rng, (1, t, 1, n_sel)), block_sel=bs, n=n_sel)
    mask = np.zeros((t, t), bool)
    for i in range(t):
        for j in sel[0, i, 0][sel[0, i, 0] >= 0]:
            mask[i, j * bs:(j + 1) * bs] = True
    out, lse = attend(q, k, v, mask=mask, causal=True)
    dense, dense_lse = attend(q, k, v, causal=True)
    np.testing.assert_allclose(out, dense, atol=1e-12)
    np.testing.assert_allclose(lse, dense_lse, atol=1e-12)


def test_select_ranks_forced_blocks_above_infinite_importance():
    imp = np.array([[[[1, np.inf, -np.inf, 2, 3, 4, 5, 6]]]])
    assert list(S.select(imp, seq_len=32, block_sel=4, n=4)[0, 0, 0]) == [0, 1, 6, 7]
    assert list(S.select(imp, seq_len=32, block_sel=4, n=8)[0, 0, 0]) == list(range(8))
    with pytest.raises(ValueError, match="NaN"):
        S.select(np.full((1, 1, 1, 2), np.nan), seq_len=8, block_sel=4, n=1)


def test_set_comparator_ignores_order_but_not_repeats():
    e = np.array([[0, 2, 5, -1]], np.int32)
    assert compare_index_sets(e, np.array([[5, 0, -1, 2]], np.int64)).ok
    assert not compare_index_sets(e, np.array([[5, 0, 0, 2]])).ok
    assert not compare_index_sets(e, np.array([[5.0, 0, -1, 2]])).ok


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_emulations_sit_near_the_oracle(precision):
    rng = np.random.default_rng(3)
    x = grid16(rng, (1, 40, 2, 8), scale=64)
    unit = {"float32": 2.0**-20, "float16": 2.0**-9, "bfloat16": 2.0**-6}[precision]
    assert np.abs(C.emulate_compress(precision, x, block=8, stride=4) - C.compress(x, block=8, stride=4)).max() <= unit
    q, kc = grid16(rng, (1, 40, 2, 8)), C.compress(x, block=8, stride=4)
    exact = C.compressed_attend(q, kc, kc, block=8, stride=4)
    low = C.emulate_compressed_attend(precision, q, kc, kc, block=8, stride=4)
    for e, a in zip(exact, low):
        fin = np.isfinite(e)
        assert np.array_equal(fin, np.isfinite(a)) and np.abs(e[fin] - a[fin]).max() <= 8 * unit
    for e, a in zip(exact, C.emulate_compressed_attend("float64", q, kc, kc, block=8, stride=4)):
        np.testing.assert_array_equal(e, a)


def _cast(fn, dtype):
    def low(**kw):
        out = fn(**kw)
        return tuple(np.asarray(o).astype(dtype) for o in out) if isinstance(out, tuple) else out.astype(dtype)
    return low


@pytest.mark.parametrize("dtype", [pytest.param("float32", marks=pytest.mark.deep),
                                   pytest.param("float16", marks=pytest.mark.deep), "bfloat16"])
def test_low_precision_kernels_pass_and_negative_controls_fail(dtype):
    pytest.importorskip("ml_dtypes")  # bfloat16 as a NumPy dtype
    dt = np.dtype(dtype)
    ops = {"sparse.nsa.compress": _cast(kernel.compress, dt),
           "sparse.nsa.compressed_attend": _cast(kernel.compressed_attend, dt)}
    report = run(Implementation(f"default at {dtype}", ops), ops=list(ops), examples=10)
    assert all(r.verdict == "pass" for r in report.ops), [(r.name, r.verdict) for r in report.ops]

    def shuffled(fn):
        def kernel_out(**kw):
            out = fn(**kw)
            return tuple(o[..., ::-1] for o in out) if isinstance(out, tuple) else out[..., ::-1]
        return kernel_out
    bad = run(Implementation("reversed", {k: shuffled(f) for k, f in ops.items()}), ops=list(ops), examples=0)
    assert all(r.verdict == "fail" for r in bad.ops)


def test_fla_naive_nsa_agrees():
    """fla's naive_nsa_compression and naive_nsa_topk (block_size l = d = l', mean over
    the group) on grid inputs without ties and n >= 3: the same outputs and sets."""
    torch = pytest.importorskip("torch")
    naive = pytest.importorskip("fla.ops.nsa.naive")
    for seed in range(12):
        rng = np.random.default_rng(seed)
        bs, t, h, g, n = int(rng.choice([4, 8])), int(rng.integers(1, 40)), int(rng.integers(1, 3)), \
            int(rng.choice([1, 2, 4])), int(rng.integers(3, 7))
        q, k, v = grid16(rng, (1, t, h * g, 8)), grid16(rng, (1, t, h, 8)), grid16(rng, (1, t, h, 8))
        kc, vc = (C.compress(x, block=bs, stride=bs, partial=True) for x in (k, v))
        out, lse, p = C.compressed_attend(q, kc, vc, block=bs, stride=bs)
        tq, tk, tv = (torch.tensor(a, dtype=torch.float64) for a in (q, kc, vc))
        f_out, f_lse = naive.naive_nsa_compression(tq, tk, tv, block_size=bs, scale=8 ** -0.5)
        np.testing.assert_allclose(f_out.numpy(), out, atol=1e-5)
        np.testing.assert_allclose(f_lse.numpy().transpose(0, 2, 1), lse, atol=1e-5)
        imp = S.importance(p, heads_kv=h, block=bs, stride=bs, block_sel=bs, seq_len=t, reduce="mean")
        mine = S.select(imp, block_sel=bs, n=n, initial=1, local=2)
        theirs = naive.naive_nsa_topk(tq, tk, block_counts=n, block_size=bs, scale=8 ** -0.5).numpy()
        assert compare_index_sets(mine, np.where(theirs < 0, -1, theirs)).ok, seed


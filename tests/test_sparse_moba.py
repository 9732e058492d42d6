"""MoBA (ref.sparse.moba): selection exact as sets against a brute-force loop, top_k >= N
reduces to causal attention, the attention equals a per-row gather over the selected
keys, varlen equals its sequences one by one, the partial last chunk's mean is never
read, and correct alternatives (float64 kernel, torch) pass while negative controls fail."""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.attention.attend import attend as dense_attend
from ref.conformance.adapters import numpy_sparse_moba as K
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.sparse import moba
from ref.sparse.catalog.moba import moba_inputs

OPS = ["sparse.moba.gate", "sparse.moba.select", "sparse.moba.attend", "sparse.moba.attend_varlen"]


def _grid(rng, shape):
    return rng.integers(-8, 9, shape) / 8


def _brute_select(s_row, top_k):
    """One row by the definition: the current chunk, then past chunks by score, lower index on ties."""
    n = len(s_row)
    cur = [c for c in range(n) if s_row[c] == math.inf]
    past = sorted((c for c in range(n) if -math.inf < s_row[c] < math.inf), key=lambda c: (-s_row[c], c))
    return sorted((cur + past)[:min(top_k, n)])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 4), st.integers(1, 5))
def test_select_is_the_brute_force_set(seed, lk, chunk, top_k):
    rng = np.random.default_rng(seed)
    lq = int(rng.integers(1, lk + 1))
    q, k = _grid(rng, (1, lq, 2, 4)), _grid(rng, (1, lk, 1, 4))
    s = moba.gate(q, k, chunk_size=chunk)
    got = moba.select(s, top_k=top_k)
    for i in range(lq):
        for h in range(2):
            want = _brute_select(list(s[0, i, h]), top_k)
            row = got[0, i, h]
            assert sorted(row[row >= 0].tolist()) == want and (row[len(want):] == -1).all()
            p = i + lk - lq
            assert p // chunk in want  # the current chunk, always
            assert all(c * chunk <= p for c in want)  # never a future chunk


def test_gate_is_unscaled_dot_with_chunk_means():
    rng = np.random.default_rng(1)
    q, k = _grid(rng, (1, 7, 2, 4)), _grid(rng, (1, 7, 1, 4))
    s = moba.gate(q, k, chunk_size=3)
    means = np.stack([k[0, 0:3, 0].mean(0), k[0, 3:6, 0].mean(0), k[0, 6:7, 0].mean(0)])
    assert np.allclose(s[0, 6, 1, :2], means[:2] @ q[0, 6, 1], rtol=0, atol=1e-15)
    assert s[0, 6, 1, 2] == np.inf and s[0, 2, 0, 1] == -np.inf and s[0, 3, 0, 1] == np.inf


def test_partial_last_chunk_mean_is_never_read():
    """Latitude named in the spec: the last chunk is always current or future, so its mean
    (over its own tokens or the full chunk size) never reaches the gate's output."""
    rng = np.random.default_rng(2)
    q, k = _grid(rng, (1, 3, 1, 4)), _grid(rng, (1, 10, 1, 4))
    s = moba.gate(q, k, chunk_size=4)
    k2 = k.copy()
    k2[0, 8:] *= 5
    assert np.array_equal(s, moba.gate(q, k2, chunk_size=4))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 10), st.integers(1, 4), st.sampled_from([(1, 1), (2, 1), (4, 2)]))
def test_top_k_all_chunks_is_causal_attention(seed, lk, chunk, heads):
    rng = np.random.default_rng(seed)
    lq = int(rng.integers(1, lk + 1))
    hq, hkv = heads
    q, k, v = _grid(rng, (1, lq, hq, 4)), _grid(rng, (1, lk, hkv, 4)), _grid(rng, (1, lk, hkv, 3))
    out, lse = moba.attend(q, k, v, chunk_size=chunk, top_k=moba.n_chunks(lk, chunk))
    o2, l2 = dense_attend(q, k, v, causal=True)
    assert np.allclose(out, o2, rtol=0, atol=1e-13) and np.allclose(lse, l2, rtol=0, atol=1e-13)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 4), st.integers(1, 3))
def test_attend_is_a_gather_of_the_selected_keys(seed, lk, chunk, top_k):
    """Masked dense attend = each row's softmax over only the keys it selected (gathered)."""
    rng = np.random.default_rng(seed)
    lq = int(rng.integers(1, lk + 1))
    q, k, v = _grid(rng, (1, lq, 2, 4)), _grid(rng, (1, lk, 1, 4)), _grid(rng, (1, lk, 1, 4))
    out, lse = moba.attend(q, k, v, chunk_size=chunk, top_k=top_k)
    chosen = moba.select(moba.gate(q, k, chunk_size=chunk), top_k=top_k)
    for i in range(lq):
        p = i + lk - lq
        for h in range(2):
            keys = [j for c in chosen[0, i, h] if c >= 0 for j in range(c * chunk, min((c + 1) * chunk, lk)) if j <= p]
            s = k[0, keys, 0] @ q[0, i, h] / 2.0
            w = np.exp(s - s.max())
            assert np.allclose(out[0, i, h], w @ v[0, keys, 0] / w.sum(), atol=1e-13)
            assert math.isclose(lse[0, h, i], s.max() + math.log(w.sum()), abs_tol=1e-13)


def test_varlen_is_each_sequence_on_its_own():
    rng = np.random.default_rng(3)
    lens = [5, 0, 9, 3]
    q, k, v = _grid(rng, (17, 4, 8)), _grid(rng, (17, 2, 8)), _grid(rng, (17, 2, 8))
    cu = np.cumsum([0, *lens]).astype(np.int32)
    out, lse = moba.attend_varlen(q, k, v, cu, chunk_size=2, top_k=2)
    for s in range(len(lens)):
        r = slice(cu[s], cu[s + 1])
        o, l = moba.attend(q[None, r], k[None, r], v[None, r], chunk_size=2, top_k=2)
        assert np.array_equal(out[r], o[0]) and np.array_equal(lse[:, r], l[0])


def test_unselected_nan_is_never_read_and_empty_rows():
    rng = np.random.default_rng(4)
    x = moba_inputs(rng, 1, 1, 16, 1, 1, 8, chunk_size=4, top_k=2)
    mask = moba.chunk_mask(x["q"], x["k"], chunk_size=4, top_k=2)[0, 0, 0]
    v = x["v"].copy()
    v[0, ~mask, 0, :] = np.nan
    out, _ = moba.attend(x["q"], x["k"], v, chunk_size=4, top_k=2)
    assert np.isfinite(out).all() and mask.sum() == 8  # the current chunk and one past chunk
    out, lse = moba.attend(_grid(rng, (1, 3, 1, 4)), _grid(rng, (1, 1, 1, 4)), _grid(rng, (1, 1, 1, 4)),
                           chunk_size=2, top_k=1)
    assert (out[0, :2] == 0).all() and (lse[0, 0, :2] == -np.inf).all() and np.isfinite(lse[0, 0, 2])


def test_invalid_arguments_raise():
    q = np.zeros((1, 2, 1, 4))
    with pytest.raises(ValueError, match="chunk_size"):
        moba.gate(q, q, chunk_size=0)
    with pytest.raises(ValueError, match="top_k"):
        moba.select(np.zeros((1, 3)), top_k=0)
    with pytest.raises(TypeError, match="top_k"):
        moba.attend(q, q, q, chunk_size=2, top_k=1.0)
    with pytest.raises(ValueError, match="cu_seqlens"):
        moba.attend_varlen(q[0], q[0], q[0], np.array([0, 3]), chunk_size=2, top_k=1)


def test_emulation_at_float64_is_the_oracle():
    x = moba_inputs(np.random.default_rng(5), 1, 6, 6, 2, 1, 8, chunk_size=2, top_k=2)
    qk = {"q": x["q"], "k": x["k"], "chunk_size": 2}
    assert np.array_equal(moba.emulate_gate("float64", **qk), moba.gate(**qk))
    o, l = moba.emulate_attend("float64", **x)
    o2, l2 = moba.attend(**x)
    assert np.array_equal(o, o2) and np.array_equal(l, l2)


def _float64_kernel():
    """The default kernel with float64 inputs kept: another precision, same algorithm."""
    def wide(fn):
        def call(*a, **o):
            saved = K._F32
            K._F32 = np.float64
            try:
                return fn(*a, **o)
            finally:
                K._F32 = saved
        return call
    return Implementation("numpy float64 MoBA", {name: wide(K.OPS[name]) for name in OPS})


def _zero_out(q, k, v, chunk_size, top_k):
    out, lse = K.attend(q, k, v, chunk_size, top_k)
    return np.zeros_like(out), lse


def _shuffled(q, k, v, chunk_size, top_k):
    out, lse = K.attend(q, k, v, chunk_size, top_k)
    return out[:, ::-1].copy(), lse


@pytest.mark.deep
def test_correct_alternatives_pass_and_negative_controls_fail():
    report = run(_float64_kernel(), ops=OPS, examples=0)
    assert all(r.verdict == "pass" for r in report.ops), [(r.name, r.verdict) for r in report.ops]
    for control in (_zero_out, _shuffled):
        bad = run(Implementation("control", {"sparse.moba.attend": control}), ops=["sparse.moba.attend"], examples=0)
        assert bad.ops[0].verdict == "fail"


def _torch_attend(q, k, v, chunk_size, top_k, dtype="float32"):
    """MoBA in torch: inputs at `dtype`, the gate and the logits in float32 from them, the
    selection by a stable sort and scatter, probabilities rounded to `dtype` before P V,
    the output at `dtype` (a FlashAttention-style kernel)."""
    import torch
    dt = getattr(torch, dtype)
    chunk_size, top_k = int(chunk_size), int(top_k)
    if chunk_size < 1 or top_k < 1 or np.shape(v)[:3] != np.shape(k)[:3]:
        raise ValueError(f"chunk_size {chunk_size}, top_k {top_k} or v {np.shape(v)} for k {np.shape(k)}")
    qt, kt, vt = (torch.as_tensor(np.array(x, np.float32)).to(dt).float() for x in (q, k, v))
    b, lq, hq, d = qt.shape
    lk, hkv = kt.shape[1], kt.shape[2]
    if lq == 0 or lk == 0:
        return K.attend(q, k, v, chunk_size, top_k)
    g = hq // hkv
    kr, vr = kt.repeat_interleave(g, dim=2), vt.repeat_interleave(g, dim=2)
    n = -(-lk // chunk_size)
    pad = torch.zeros(b, n * chunk_size - lk, hq, d)
    counts = torch.tensor([min(chunk_size, lk - c * chunk_size) for c in range(n)], dtype=torch.float32)
    means = torch.cat([kr, pad], 1).view(b, n, chunk_size, hq, d).sum(2) / counts[None, :, None, None]
    gate = torch.einsum("bihd,bchd->bhic", qt, means)  # [B, Hq, Lq, N]
    pos = torch.arange(lq) + (lk - lq)
    c = torch.arange(n)
    gate = gate.masked_fill((c[None, :] * chunk_size > pos[:, None]), float("-inf"))
    gate = gate.masked_fill((c[None, :] == pos[:, None] // chunk_size), float("inf"))
    rank = torch.stack([torch.tensor(np.lexsort((-row.numpy(), ))) for row in gate.reshape(-1, n)])
    top = rank[:, :min(top_k, n)].reshape(b, hq, lq, -1)
    sel = torch.zeros(b, hq, lq, n, dtype=torch.bool).scatter_(-1, top, True) & (gate > float("-inf"))
    keys = sel.repeat_interleave(chunk_size, -1)[..., :lk] & (torch.arange(lk)[None, :] <= pos[:, None])
    s = torch.einsum("bihd,bjhd->bhij", qt, kr) / math.sqrt(d)
    s = s.masked_fill(~keys, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.where(keys, torch.exp(s - lse[..., None].clamp(min=-1e30)), torch.zeros(())).to(dt).float()
    terms = p[..., None] * vr.permute(0, 2, 1, 3)[:, :, None]  # [B, Hq, Lq, Lk, Dv]
    out = torch.where(keys[..., None], terms, torch.zeros(())).sum(-2).permute(0, 2, 1, 3)  # unselected: not read
    out = out.to(dt).float().numpy()
    return (out if dtype == "float32" else out.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16),
            lse.numpy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_torch_implementation_passes(dtype):
    pytest.importorskip("torch")
    kernel = functools.partial(_torch_attend, dtype=dtype)
    report = run(Implementation(f"torch MoBA {dtype}", {"sparse.moba.attend": kernel}), ops=["sparse.moba.attend"],
                 examples=5)
    assert report.ops[0].verdict == "pass", report.ops[0].failures[:1]

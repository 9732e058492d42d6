"""Sparse attention (dsa) for the default run, written independently of the oracles
(this module imports nothing from ref), the way DeepSeek-V3.2's reference kernels compute:

- rotate: RoPE as `x * cos + rotate_half(x) * sin` on the first rope_dim dims, then the
  Walsh-Hadamard butterfly in float32 scaled by D^-0.5 (fast_hadamard_transform);
- quantize: act_quant in float32, E4M3 by rounding at each value's binade quantum;
- scores: fp8_index's order: logits of the FP8 values, ReLU, times w * q_scale * scale
  per head, summed over heads, times the key's scale (float32);
- select: a stable sort of the negated scores; attend: a gather of each row's selected
  keys and a float32 softmax over them.

The steps are public so that the bug corpus (tests/corpus/sparse_dsa.py) builds its
wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "NumPy DSA indexer and sparse attention"
VERSION = np.__version__

F32 = np.float32


def as_float(x, name: str, ndim: int | None = None) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{name}: expected float16, float32 or float64, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dims, got {a.shape}")
    return a


# ---------------------------------------------------------------------------- rotate

def pairs(r: int, pairing: str):
    i = np.arange(r // 2)
    if pairing == "neox":
        return i, i + r // 2
    if pairing == "interleaved":
        return 2 * i, 2 * i + 1
    raise ValueError(f"pairing: {pairing!r}")


def rope(x, cos, sin, r, pairing):
    """x [B, L, H, D] float32, cos/sin [L, r/2]."""
    a_idx, b_idx = pairs(r, pairing)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = x.copy()
    a, b = x[..., a_idx], x[..., b_idx]
    out[..., a_idx] = a * c - b * s
    out[..., b_idx] = b * c + a * s
    return out


def hadamard(x):
    """Sylvester-order Walsh-Hadamard along the last axis, float32, times n^-0.5."""
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"x: head dim {n} is not a power of two")
    y = x.astype(F32).copy()
    h = 1
    while h < n:
        y = y.reshape(*x.shape[:-1], n // (2 * h), 2, h)
        y = np.stack([y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]], axis=-2).reshape(x.shape)
        h *= 2
    return (y * F32(n ** -0.5)).astype(F32)


def rotate(x, cos, sin, rope_dim=64, pairing="neox", hadamard_on=True):
    x = as_float(x, "x", 4).astype(F32)
    r = int(rope_dim)
    if r < 0 or r % 2 or r > x.shape[3]:
        raise ValueError(f"rope_dim: {rope_dim}")
    cos, sin = as_float(cos, "cos", 2).astype(F32), as_float(sin, "sin", 2).astype(F32)
    if cos.shape != (x.shape[1], r // 2) or sin.shape != cos.shape:
        raise ValueError(f"cos, sin: {cos.shape} {sin.shape}")
    y = rope(x, cos, sin, r, pairing)
    if hadamard_on and x.shape[3]:
        y = hadamard(y)
    return y


def _rotate_op(x, cos, sin, rope_dim=64, pairing="neox", hadamard=True):
    return rotate(x, cos, sin, rope_dim, pairing, hadamard)


# ---------------------------------------------------------------------------- quantize

def e4m3(y, rnd=np.rint):
    """float32 values already within +-448 to the nearest E4M3FN value (rint: ties to even)."""
    y = y.astype(np.float64)
    mag = np.abs(y)
    e = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    q = np.exp2(np.maximum(e, -6) - 3)  # the quantum of the binade (subnormals: 2^-9)
    return (rnd(y / q) * q).astype(F32)


def block_scales(amax, scale_fmt):
    s = (np.maximum(amax, F32(1e-4)) * F32(1 / 448)).astype(F32)
    if scale_fmt == "ue8m0":
        bits = s.view(np.uint32)
        exp = ((bits >> 23) & 0xFF).astype(np.int64) - 127 + ((bits & 0x7FFFFF) != 0)
        s = np.ldexp(F32(1), exp).astype(F32)
    elif scale_fmt != "float":
        raise ValueError(f"scale_fmt: {scale_fmt!r}")
    return s


def quantize(x, block_size=128, scale_fmt="ue8m0"):
    x = as_float(x, "x")
    bs = int(block_size)
    if x.ndim < 1 or bs < 1 or x.shape[-1] % bs:
        raise ValueError(f"x: last axis {x.shape} not a multiple of {bs}")
    x = x.astype(F32)
    if not np.isfinite(x).all():
        raise ValueError("x: NaN or Inf")
    blk = x.reshape(*x.shape[:-1], x.shape[-1] // bs, bs)
    s = block_scales(np.abs(blk).max(axis=-1, initial=F32(0)), scale_fmt)
    y = e4m3(np.clip((blk / s[..., None]).astype(F32), -448, 448))
    return y.reshape(x.shape), s


# ---------------------------------------------------------------------------- scores

def visible(t, s):
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)


def logits(q, k):
    """q [B, T, H, D], k [B, S, D] -> [B, T, H, S] float32."""
    return np.einsum("bthd,bsd->bths", q.astype(F32), k.astype(F32)).astype(F32)


def relu(x):
    return np.maximum(x, F32(0))


def head_sum(w, act):
    """w [B, T, H] times act [B, T, H, S], summed over heads."""
    return np.einsum("bth,bths->bts", w, act).astype(F32)


def check_scores(q, k, w):
    q, k, w = as_float(q, "q", 4), as_float(k, "k", 3), as_float(w, "w", 3)
    if k.shape[0] != q.shape[0] or k.shape[2] != q.shape[3] or w.shape != q.shape[:3] or k.shape[1] < q.shape[1]:
        raise ValueError(f"shapes q {q.shape} k {k.shape} w {w.shape}")
    return q, k, w


def default_scale(d, h):
    return d ** -0.5 * h ** -0.5 if d else 1.0


def index_scores(q, k, w, scale=None, causal=True, k_scale=None):
    q, k, w = check_scores(q, k, w)
    sc = default_scale(q.shape[3], q.shape[2]) if scale is None else float(scale)
    wq = (w.astype(F32) * F32(sc)).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        out = head_sum(wq, relu(logits(q, k)))
        if k_scale is not None:
            out = (out * k_scale[:, None, :]).astype(F32)
    if causal:
        out = np.where(visible(q.shape[1], k.shape[1]), out, F32(-np.inf))
    return out


def topk_of(scores, k, cand):
    key = np.where(cand, -scores.astype(np.float64), np.inf)
    order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    return np.where(np.take_along_axis(cand, order, axis=-1), order, -1)


def select(scores, topk, causal=True):
    scores = as_float(scores, "scores", 3)
    if isinstance(topk, bool) or int(topk) != topk or topk < 0:
        raise ValueError(f"topk: {topk}")
    k = int(topk)
    b, t, s = scores.shape
    cand = np.broadcast_to((visible(t, s) if causal else np.ones((t, s), bool)), scores.shape) & (scores != -np.inf)
    if np.isnan(scores[cand]).any():
        raise ValueError("scores: NaN at a candidate")
    idx = topk_of(scores, k, cand)
    idx = np.concatenate([idx, np.full((b, t, max(k - s, 0)), -1, idx.dtype)], axis=-1)
    big = np.iinfo(np.int64).max
    srt = np.sort(np.where(idx < 0, big, idx), axis=-1)  # the set: ascending, -1 last
    return np.where(srt == big, -1, srt)


def indexer(q, k, w, cos, sin, topk=1, rope_dim=64, pairing="neox", quant="fp8", scale_fmt="ue8m0",
            block_size=128, scale=None, causal=True):
    q, k, w = check_scores(q, k, w)
    t, s = q.shape[1], k.shape[1]
    cos, sin = as_float(cos, "cos", 2), as_float(sin, "sin", 2)
    if cos.shape[0] != s:
        raise ValueError(f"cos: {cos.shape} for {s} keys")
    if quant not in ("fp8", "none"):
        raise ValueError(f"quant: {quant!r}")
    fp8 = quant == "fp8"
    qr = rotate(q, cos[s - t:], sin[s - t:], rope_dim, pairing, fp8)
    kr = rotate(k[:, :, None], cos, sin, rope_dim, pairing, fp8)[:, :, 0]
    sc = default_scale(q.shape[3], q.shape[2]) if scale is None else float(scale)
    if not fp8:
        return select(index_scores(qr, kr, w, sc, causal), topk, causal)
    qv, qs = quantize(qr, block_size, scale_fmt)  # [B, T, H, D], [B, T, H, D / bs]
    kv, ks = quantize(kr, block_size, scale_fmt)
    bs = int(block_size)
    if qs.shape[-1] == 1:  # fp8_index: q's scale folded into the weights, k's scale after the head sum
        return select(index_scores(qv, kv, w * qs[..., 0], sc, causal, ks[..., 0]), topk, causal)
    qd, kd = qv * np.repeat(qs, bs, axis=-1), kv * np.repeat(ks, bs, axis=-1)
    return select(index_scores(qd, kd, w, sc, causal), topk, causal)


# ---------------------------------------------------------------------------- attend

def selection(indices, t, s, causal=True):
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu" or idx.ndim != 3 or idx.shape[1] != t:
        raise TypeError(f"indices: {idx.dtype} {idx.shape}")
    if ((idx < -1) | (idx >= s)).any():
        raise ValueError("indices: out of range")
    sel = np.zeros((idx.shape[0], t, s + 1), bool)
    np.put_along_axis(sel, np.where(idx < 0, s, idx).astype(np.int64), True, axis=-1)
    sel = sel[..., :s]
    return sel & visible(t, s) if causal else sel


def kv_head_of(h, hkv):
    """Query head i reads KV head i // (H / Hkv): contiguous groups."""
    return np.arange(h) // (h // hkv)


def attend(q, k, v, indices, scale=None, causal=True):
    q, k, v = as_float(q, "q", 4), as_float(k, "k", 4), as_float(v, "v", 4)
    b, t, h, d = q.shape
    s, hkv = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d or v.shape[:3] != k.shape[:3] or hkv == 0 or h % hkv:
        raise ValueError(f"shapes q {q.shape} k {k.shape} v {v.shape}")
    sel = selection(indices, t, s, causal)  # [B, T, S]
    sc = F32(d ** -0.5 if scale is None else scale)
    heads = kv_head_of(h, hkv)
    out = np.zeros((b, t, h, v.shape[3]), F32)
    lse = np.full((b, h, t), -np.inf, F32)
    for bi in range(b):
        for ti in range(t):
            keys = np.flatnonzero(sel[bi, ti])  # the gather: only these rows of k and v are read
            if keys.size == 0:
                continue
            kk, vv = k[bi, keys][:, heads].astype(F32), v[bi, keys][:, heads].astype(F32)  # [n, H, D]
            lg = np.einsum("hd,nhd->hn", q[bi, ti].astype(F32) * sc, kk).astype(F32)
            m = lg.max(axis=-1, keepdims=True)
            p = np.exp(lg - m)
            z = p.sum(axis=-1, keepdims=True)
            out[bi, ti] = np.einsum("hn,nhd->hd", p, vv) / z
            lse[bi, :, ti] = (m + np.log(z))[:, 0]
    return out, lse


OPS = {"sparse.dsa.quantize": quantize, "sparse.dsa.rotate": _rotate_op, "sparse.dsa.index_scores": index_scores,
       "sparse.dsa.select": select, "sparse.dsa.indexer": indexer, "sparse.dsa.attend": attend}
VARIANTS = {"sparse.dsa.quantize": {"scale_fmt": ["ue8m0", "float"]},
            "sparse.dsa.rotate": {"pairing": ["neox", "interleaved"]},
            "sparse.dsa.indexer": {"pairing": ["neox", "interleaved"], "quant": ["fp8", "none"],
                                   "scale_fmt": ["ue8m0", "float"]}}

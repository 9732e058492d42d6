"""NSA's compression and selection for the default run, written independently of the
oracles (this module imports nothing from ref):

- compress: the tokens summed in chunks of d (the stride), each block the sum of its
  l/d chunks plus the position term's column sums, divided by its token count; float32
  (float64 for float64 inputs);
- compressed_attend: per KV group, the group's query rows against the group's
  compressed keys in float32, a row-maximum softmax over the complete blocks, P V;
- importance: the weight of compressed block i in selection block j taken as the
  overlap of the two token intervals divided by d, summed where it is positive, then
  the group's heads added (or averaged);
- select: ranks by three stable argsorts (importance descending, then forced first,
  then selectable first), the first n kept, sorted, -1 for the unselectable.

The steps are public so that the bug corpus (tests/corpus/sparse_nsa_select.py)
builds its wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import math

import numpy as np

NAME = "NumPy NSA compression and selection"
VERSION = np.__version__

FLOATS = (np.float16, np.float32, np.float64)


def as_float(x, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in FLOATS:
        raise TypeError(f"{name}: expected float16, float32 or float64, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got {a.shape}")
    return a


def work_dtype(*arrays) -> type:
    return np.float64 if any(a.dtype == np.float64 for a in arrays) else np.float32


def block_starts(t: int, block: int, stride: int, partial: bool) -> np.ndarray:
    """The first token of each compressed block."""
    if partial:
        return np.arange(0, t, block)
    return np.arange(0, t - block + 1, stride) if t >= block else np.arange(0)


def token_count(starts: np.ndarray, t: int, block: int) -> np.ndarray:
    return np.minimum(starts + block, t) - starts


def compress(x, pe=None, block=32, stride=16, partial=False):
    x = as_float(x, "x", 4)
    if stride > block or block % stride or (partial and stride != block):
        raise ValueError(f"block {block}, stride {stride}: unsupported (partial={partial})")
    dt = work_dtype(x) if pe is None else work_dtype(x, np.asarray(pe))
    b, t, h, d = x.shape
    if pe is not None:
        pe = np.asarray(pe)
        pe = pe[:, None, :] if pe.ndim == 2 else pe
        if pe.ndim != 3 or pe.shape[0] != block or pe.shape[1] not in (1, h) or pe.shape[2] != d:
            raise ValueError(f"pe: expected [{block}, {d}] or [{block}, {h}, {d}], got {np.shape(pe)}")
    starts = block_starts(t, block, stride, partial)
    n_chunks = -(-t // stride)
    padded = np.zeros((b, n_chunks * stride, h, d), dt)
    padded[:, :t] = x
    chunks = padded.reshape(b, n_chunks, stride, h, d).sum(axis=2, dtype=dt)  # [B, chunks, H, D]
    out = np.zeros((b, starts.size, h, d), dt)
    for c in range(block // stride):  # block i = chunks i*s/d .. + l/d - 1 (past the end: zero)
        idx = starts // stride + c
        out += np.where((idx < n_chunks)[None, :, None, None], chunks[:, np.minimum(idx, n_chunks - 1)], 0)
    count = token_count(starts, t, block)
    if pe is not None:
        pe_sums = np.cumsum(pe.astype(dt), axis=0)  # pe_sums[n - 1]: the first n position terms
        out += pe_sums[count - 1][None] if starts.size else 0
    return (out / count[None, :, None, None].astype(dt)).astype(dt)


def visible(lq: int, tc: int, seq_len: int, block: int, stride: int) -> np.ndarray:
    t = np.arange(seq_len - lq, seq_len)[:, None]
    return np.arange(tc)[None, :] * stride + block - 1 <= t


def kv_head_of(hq: int, hkv: int) -> np.ndarray:
    return np.arange(hq) // (hq // hkv)


def softmax(s: np.ndarray, ok: np.ndarray):
    """Probabilities over the visible blocks (0 elsewhere, even in a NaN row), the row
    maximum subtracted (0 for a row that sees none), and the sum of the shifted exps."""
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(invalid="ignore"):
        e = np.where(ok, np.exp(s - m), 0)
    z = e.sum(axis=-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1), np.where(np.isnan(z), np.nan, 0))
    return np.where(ok, p, 0), m, z


def compressed_attend(q, k_cmp, v_cmp, seq_len=None, block=32, stride=16, scale=None):
    q, k, v = as_float(q, "q", 4), as_float(k_cmp, "k_cmp", 4), as_float(v_cmp, "v_cmp", 4)
    b, lq, hq, d = q.shape
    tc, hkv = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d or v.shape[:3] != k.shape[:3] or hkv == 0 or hq % hkv:
        raise ValueError(f"q {q.shape}, k_cmp {k.shape}, v_cmp {v.shape} do not fit together")
    seq_len = lq if seq_len is None else int(seq_len)
    if seq_len < lq or stride > block:
        raise ValueError(f"seq_len {seq_len} < Lq {lq}, or stride {stride} > block {block}")
    dt = work_dtype(q, k, v)
    sc = dt(1 / math.sqrt(d) if scale is None else scale)
    ok = visible(lq, tc, seq_len, block, stride)  # [Lq, Tc]
    heads = kv_head_of(hq, hkv)
    kq, vq = k[:, :, heads].astype(dt), v[:, :, heads].astype(dt)  # [B, Tc, Hq, *]
    s = np.einsum("bqhd,bchd->bhqc", q.astype(dt) * sc, kq)
    p, m, z = softmax(np.where(ok, s, -np.inf), ok)  # [B, Hq, Lq, Tc], shift and sum [B, Hq, Lq, 1]
    out = np.zeros((b, hq, lq, v.shape[3]), dt)
    for c in range(tc):  # only the blocks a row sees: a NaN elsewhere is never read
        out += np.where(ok[None, None, :, c, None], p[..., c, None] * vq[:, c][:, :, None, :], 0)
    with np.errstate(divide="ignore"):
        lse = np.where(z[..., 0] > 0, m[..., 0] + np.log(np.where(z[..., 0] > 0, z[..., 0], 1)), -np.inf)
    lse = np.where(np.isnan(z[..., 0]), np.nan, lse)
    return out.transpose(0, 2, 1, 3).astype(dt), lse.astype(dt), p.transpose(0, 2, 1, 3).astype(dt)


def overlap_weights(tc: int, n_sel: int, block: int, stride: int, block_sel: int) -> np.ndarray:
    """W [Tc, n_sel]: overlap of compressed block i and selection block j, in strides."""
    start = np.arange(tc)[:, None] * stride
    sel = np.arange(n_sel)[None, :] * block_sel
    return np.maximum(np.minimum(start + block, sel + block_sel) - np.maximum(start, sel), 0) // stride


def importance(p_cmp, heads_kv, block=32, stride=16, block_sel=64, seq_len=None, reduce="sum"):
    p = as_float(p_cmp, "p_cmp", 4)
    b, lq, hq, tc = p.shape
    if heads_kv < 1 or hq % heads_kv or block % stride or block_sel % stride or block > block_sel:
        raise ValueError(f"heads_kv {heads_kv} for {hq} heads, or sizes l={block}, d={stride}, l'={block_sel}")
    seq_len = lq if seq_len is None else int(seq_len)
    if seq_len < lq:
        raise ValueError(f"seq_len {seq_len} < Lq {lq}")
    dt = work_dtype(p)
    n_sel = -(-seq_len // block_sel)
    w = overlap_weights(tc, n_sel, block, stride, block_sel).astype(dt)
    terms = np.where(w > 0, p.astype(dt)[..., None] * w, 0)  # [B, Lq, Hq, Tc, n_sel]
    per_head = terms.sum(axis=3)
    group = per_head.reshape(b, lq, heads_kv, hq // heads_kv, n_sel)
    return group.sum(axis=3) if reduce == "sum" else group.sum(axis=3) / dt(hq // heads_kv)


def positions(lq: int, seq_len: int) -> np.ndarray:
    """The token position of each query row: the last Lq of seq_len."""
    return np.arange(seq_len - lq, seq_len)


def forced(t: np.ndarray, n_sel: int, block_sel: int, initial: int, local: int) -> np.ndarray:
    own = t[:, None] // block_sel
    j = np.arange(n_sel)[None, :]
    return (j < initial) | ((own - j >= 0) & (own - j < local))


def selectable(t: np.ndarray, n_sel: int, block_sel: int) -> np.ndarray:
    return np.arange(n_sel)[None, :] * block_sel <= t[:, None]


def rank(imp: np.ndarray, force: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Block order per row: stable sorts, least significant key first."""
    order = np.argsort(-imp, axis=-1, kind="stable")
    for key in (force, ok):
        k = np.take_along_axis(np.broadcast_to(key, imp.shape), order, axis=-1)
        order = np.take_along_axis(order, np.argsort(~k, axis=-1, kind="stable"), axis=-1)
    return order


def select(importance, seq_len=None, block_sel=64, n=16, initial=1, local=2):
    imp = as_float(importance, "importance", 4)
    b, lq, hkv, n_sel = imp.shape
    seq_len = lq if seq_len is None else int(seq_len)
    if n < 0 or seq_len < lq or n_sel < -(-seq_len // block_sel) or np.isnan(imp).any():
        raise ValueError(f"n {n}, seq_len {seq_len}, {n_sel} blocks, or NaN importance")
    t = positions(lq, seq_len)
    ok = selectable(t, n_sel, block_sel)[None, :, None, :]
    force = (forced(t, n_sel, block_sel, initial, local) & ok[0, :, 0])[None, :, None, :]
    top = rank(imp, force, ok)[..., :n]
    keep = np.take_along_axis(np.broadcast_to(ok, imp.shape), top, axis=-1)
    out = np.sort(np.where(keep, top, n_sel), axis=-1)
    out = np.where(out == n_sel, -1, out).astype(np.int32)
    return np.concatenate([out, np.full((b, lq, hkv, n - out.shape[-1]), -1, np.int32)], axis=-1)


OPS = {"sparse.nsa.compress": compress, "sparse.nsa.compressed_attend": compressed_attend,
       "sparse.nsa.importance": importance, "sparse.nsa.select": select}
VARIANTS = {"sparse.nsa.compress": {"partial": [False, True]}, "sparse.nsa.importance": {"reduce": ["sum", "mean"]}}

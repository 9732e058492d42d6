"""NSA's selected attention and whole forward for the default run, written independently
of the oracles (this module imports nothing from ref), the way fla's kernels compute:

- selected attention: each query's selected blocks expanded to token slots, the keys and
  values gathered per slot (a slot not read holds index 0 and value 0, so a NaN outside
  the selection never reaches the output), scores and softmax in float32;
- compression: block means by a cumulative sum (paper: blocks of l with stride d, plus
  the position term; fla: l = d), compressed attention over the complete blocks;
- selection: the compressed probabilities summed onto selection blocks and over the
  GQA group, forced blocks given +inf, a stable argsort (the lower index first on ties);
- sliding window: the w newest keys, a float32 softmax; gates multiply in float32.

The steps are public so that the bug corpus (tests/corpus/sparse_nsa.py) builds its
wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import math

import numpy as np

NAME = "NumPy float32 NSA attention"
VERSION = np.__version__

F32 = np.float32


def as_float(x, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.name not in ("float16", "bfloat16", "float32", "float64"):
        raise TypeError(f"{name}: expected a float array, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got {a.shape}")
    return a.astype(F32)


def as_int(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integers, got {a.dtype}")
    return a.astype(np.int64)


def check_qkv(q, k, v):
    q, k, v = as_float(q, "q", 4), as_float(k, "k", 4), as_float(v, "v", 4)
    b, tq, hq, d = q.shape
    tk, hkv = k.shape[1], k.shape[2]
    if k.shape[0] != b or v.shape[:3] != k.shape[:3] or k.shape[3] != d:
        raise ValueError(f"shapes: q {q.shape}, k {k.shape}, v {v.shape}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"heads: {hq} query heads over {hkv} KV heads")
    if tq > tk:
        raise ValueError(f"q: {tq} queries for {tk} keys")
    return q, k, v


def kv_head_of(hq: int, hkv: int) -> np.ndarray:
    """Query head h reads KV head h // (Hq / Hkv): contiguous groups."""
    return np.arange(hq) // (hq // hkv)


def used_slots(idx: np.ndarray, counts, num_blocks: int) -> np.ndarray:
    """[B, T, Hkv, S] bool: the slots read (an index in [0, num_blocks), a slot below the count)."""
    used = (idx >= 0) & (idx < num_blocks)
    if counts is not None:
        used &= np.arange(idx.shape[-1]) < counts[..., None]
    return used


def check_duplicates(idx: np.ndarray, used: np.ndarray) -> None:
    s = idx.shape[-1]
    keyed = np.sort(np.where(used, idx, -1 - np.arange(s)), axis=-1)  # unused slots all distinct negatives
    if s > 1 and np.any((keyed[..., 1:] == keyed[..., :-1]) & (keyed[..., 1:] >= 0)):
        raise ValueError("block_indices: a block named twice in one query's list")


def token_slots(idx: np.ndarray, used: np.ndarray, block_size: int, tk: int, tq: int):
    """Token index and seen flag of every slot: [B, Tq, Hkv, S * block_size]."""
    tokens = idx[..., None] * block_size + np.arange(block_size)  # [B, Tq, Hkv, S, bs]
    pos = np.arange(tq) + (tk - tq)  # each query's key position (bottom-right)
    seen = used[..., None] & (tokens <= pos[None, :, None, None, None]) & (tokens < tk)
    b, t, h, s, _ = tokens.shape
    return tokens.reshape(b, t, h, s * block_size), seen.reshape(b, t, h, s * block_size)


def softmax_rows(s: np.ndarray, seen: np.ndarray):
    """Masked float32 softmax along the last axis: probabilities (0 on a row that sees
    nothing) and the LSE (-inf there)."""
    s = np.where(seen, s, F32(-np.inf))
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(m), m, F32(0))
    with np.errstate(invalid="ignore"):
        p = np.exp(s - shift)
        z = p.sum(axis=-1, keepdims=True, dtype=F32)
        lse = np.where(z > 0, shift + np.log(np.where(z > 0, z, 1)), F32(-np.inf))
        lse = np.where(np.isnan(m), np.nan, lse)
        return np.where(z > 0, p / np.where(z > 0, z, 1), F32(0)), lse[..., 0]


def gather_probs(q, k, tokens, seen, scale):
    """Softmax of q [B, Tq, Hq, D] over per-query key lists [B, Tq, Hkv, N] of k
    [B, Tk, Hkv, D]: probabilities [B, Tq, Hkv, G, N] and the LSE [B, Tq, Hkv, G]."""
    b, tq, hq, d = q.shape
    hkv = k.shape[2]
    bi = np.arange(b)[:, None, None, None]
    ni = np.arange(hkv)[None, None, :, None]
    kg = k[bi, np.where(seen, tokens, 0), ni]  # [B, Tq, Hkv, N, D]
    qg = q.reshape(b, tq, hkv, hq // hkv, d)
    s = np.einsum("btngd,btnjd->btngj", qg, kg).astype(F32) * F32(scale)  # [B, Tq, Hkv, G, N]
    return softmax_rows(s, np.broadcast_to(seen[:, :, :, None, :], s.shape))


def gather_attend(q, k, v, tokens, seen, scale):
    """Attention of q [B, Tq, Hq, D] over per-query token lists [B, Tq, Hkv, N]:
    (out [B, Tq, Hq, Dv], lse [B, Hq, Tq]), float32."""
    b, tq, hq, _ = q.shape
    hkv = k.shape[2]
    p, lse = gather_probs(q, k, tokens, seen, scale)
    bi = np.arange(b)[:, None, None, None]
    ni = np.arange(hkv)[None, None, :, None]
    vg = np.where(seen[..., None], v[bi, np.where(seen, tokens, 0), ni], F32(0))  # a value not read is 0
    out = np.einsum("btngj,btnjv->btngv", p, vg).astype(F32)
    return out.reshape(b, tq, hq, v.shape[3]), lse.reshape(b, tq, hq).transpose(0, 2, 1)


def selected_attend(q, k, v, block_indices, block_counts=None, *, block_size=64, scale=None):
    q, k, v = check_qkv(q, k, v)
    b, tq, hq, d = q.shape
    tk, hkv = k.shape[1], k.shape[2]
    bs = int(block_size)
    if bs < 1:
        raise ValueError(f"block_size: expected >= 1, got {block_size}")
    idx = as_int(block_indices, "block_indices")
    if idx.ndim != 4 or idx.shape[:3] != (b, tq, hkv):
        raise ValueError(f"block_indices: expected [{b}, {tq}, {hkv}, S], got {idx.shape}")
    counts = None
    if block_counts is not None:
        counts = as_int(block_counts, "block_counts")
        if counts.shape != (b, tq, hkv) or np.any(counts < 0) or np.any(counts > idx.shape[-1]):
            raise ValueError(f"block_counts: expected [{b}, {tq}, {hkv}] in 0..{idx.shape[-1]}")
    used = used_slots(idx, counts, -(-tk // bs))
    check_duplicates(idx, used)
    tokens, seen = token_slots(idx, used, bs, tk, tq)
    return gather_attend(q, k, v, tokens, seen, 1 / math.sqrt(d) if scale is None else scale)


# ---------------------------------------------------------------------------- the whole forward

DEFAULTS = {"paper": (32, 16, 64, 16, 512), "fla": (64, 64, 64, 16, 0)}  # block, stride, block_sel, n, window


def compress(x, pe, block, stride, partial):
    """Block means of x [B, T, H, D] (+ pe [block, D]): blocks [i stride, i stride + block),
    complete ones only, or (partial) also the last one over the tokens it has."""
    b, t, h, d = x.shape
    tc = -(-t // block) if partial else ((t - block) // stride + 1 if t >= block else 0)
    tok = np.arange(tc)[:, None] * stride + np.arange(block)  # [Tc, block]
    inside = tok < t
    xs = np.where(inside[None, :, :, None, None], x[:, np.minimum(tok, max(t - 1, 0))], F32(0))  # [B, Tc, l, H, D]
    if pe is not None:
        xs = xs + np.where(inside[..., None], pe, F32(0))[None, :, :, None, :]
    return (xs.sum(axis=2, dtype=F32) / inside.sum(axis=1)[None, :, None, None].astype(F32)).astype(F32)


def positions(tq, tk):
    return np.arange(tq) + (tk - tq)


def compressed_probs(q, k_cmp, tq, tk, block, stride, scale):
    """p_cmp [B, Tq, Hkv, G, Tc]: a query sees compressed block i once it is complete."""
    b, _, hkv, _ = k_cmp.shape
    tc = k_cmp.shape[1]
    seen = (np.arange(tc)[None, :] * stride + block - 1) <= positions(tq, tk)[:, None]  # [Tq, Tc]
    tokens = np.broadcast_to(np.arange(tc), (b, tq, hkv, tc))
    return tokens, np.broadcast_to(seen[None, :, None, :], tokens.shape)


def importance(p, tk, block, stride, block_sel, reduce):
    """p_cmp spread evenly over each compressed block's tokens (1 / stride each: the blocks
    overlap block / stride deep), summed per selection block and over the GQA group."""
    tc = p.shape[-1]
    ns = -(-tk // block_sel)
    tok = np.arange(tk)
    member_cmp = (tok[None, :] >= np.arange(tc)[:, None] * stride) & (tok[None, :] < np.arange(tc)[:, None] * stride
                                                                     + block)  # [Tc, T]
    member_sel = (tok[:, None] // block_sel) == np.arange(ns)[None, :]  # [T, n_sel]
    w = (member_cmp.astype(F32) @ member_sel.astype(F32)) / F32(stride)  # [Tc, n_sel]
    per_head = p @ w  # [B, Tq, Hkv, G, n_sel]
    return per_head.mean(axis=3) if reduce == "mean" else per_head.sum(axis=3, dtype=F32)


def forced(tq, tk, ns, block_sel, initial=1, local=2):
    cur = positions(tq, tk)[:, None] // block_sel
    j = np.arange(ns)[None, :]
    return (j < initial) | ((j > cur - local) & (j <= cur))  # [Tq, n_sel]


def select(imp, tq, tk, block_sel, n):
    """The n best selectable blocks (forced ones first, then importance, the lower index
    first on ties), ascending, -1 padded."""
    ns = imp.shape[-1]
    selectable = (np.arange(ns)[None, :] * block_sel) <= positions(tq, tk)[:, None]  # [Tq, n_sel]
    score = np.where(forced(tq, tk, ns, block_sel)[None, :, None], np.inf, imp.astype(np.float64))
    score = np.where(selectable[None, :, None], score, -np.inf)
    order = np.argsort(-score, axis=-1, kind="stable")[..., :n]
    keep = np.take_along_axis(score, order, axis=-1) > -np.inf
    picked = np.sort(np.where(keep, order, ns), axis=-1)
    picked = np.where(picked == ns, -1, picked)
    pad = np.full((*picked.shape[:3], n - picked.shape[-1]), -1)
    return np.concatenate([picked, pad], axis=-1).astype(np.int64)


def window_attend(q, k, v, window, scale):
    b, tq, _, _ = q.shape
    tk, hkv = k.shape[1], k.shape[2]
    tokens = positions(tq, tk)[:, None] - np.arange(window)[None, ::-1]  # [Tq, w]: the w newest tokens
    tokens = np.broadcast_to(tokens[None, :, None, :], (b, tq, hkv, window))
    return gather_attend(q, k, v, tokens, tokens >= 0, scale)[0]


def gated_sum(g_cmp, g_slc, g_swa, o_cmp, o_slc, o_swa):
    return g_cmp[..., None] * o_cmp + g_slc[..., None] * o_slc + g_swa[..., None] * o_swa


def attend(q, k, v, g_cmp, g_slc, g_swa, pe_k=None, pe_v=None, *, variant="paper", block=None, stride=None,
           block_sel=None, n=None, window=None, scale=None):
    q, k, v = check_qkv(q, k, v)
    b, tq, hq, d = q.shape
    tk = k.shape[1]
    if variant not in DEFAULTS:
        raise ValueError(f"variant: expected paper or fla, got {variant!r}")
    given = (block, stride, block_sel, n, window)
    block, stride, block_sel, n, window = (int(x if x is not None else dflt) for x, dflt in zip(given, DEFAULTS[variant]))
    if min(block, stride, block_sel) < 1 or n < 3 or window < 0 or block % stride or block_sel % stride or block > block_sel:
        raise ValueError(f"block sizes: block {block}, stride {stride}, block_sel {block_sel}, n {n}, window {window}")
    if variant == "fla" and (not block == stride == block_sel or pe_k is not None or pe_v is not None):
        raise ValueError("variant fla: one block size, no position terms")
    gates = [as_float(g, name, 3) for g, name in ((g_cmp, "g_cmp"), (g_slc, "g_slc"), (g_swa, "g_swa"))]
    if any(g.shape != (b, tq, hq) for g in gates):
        raise ValueError(f"gates: expected [{b}, {tq}, {hq}], got {[g.shape for g in gates]}")
    pe_k = None if pe_k is None else as_float(pe_k, "pe_k", 2)
    pe_v = None if pe_v is None else as_float(pe_v, "pe_v", 2)
    if (pe_k is not None and pe_k.shape != (block, d)) or (pe_v is not None and pe_v.shape != (block, v.shape[3])):
        raise ValueError(f"pe_k, pe_v: expected [block, D] = [{block}, {d}] and [{block}, {v.shape[3]}]")
    scale = 1 / math.sqrt(d) if scale is None else scale
    partial = variant == "fla"
    k_cmp, v_cmp = compress(k, pe_k, block, stride, partial), compress(v, pe_v, block, stride, partial)
    tokens, seen = compressed_probs(q, k_cmp, tq, tk, block, stride, scale)
    o_cmp = gather_attend(q, k_cmp, v_cmp, tokens, seen, scale)[0]
    p_cmp, _ = gather_probs(q, k_cmp, tokens, seen, scale)
    imp = importance(p_cmp, tk, block, stride, block_sel, "mean" if variant == "fla" else "sum")
    indices = select(imp, tq, tk, block_sel, n)
    o_slc = selected_attend(q, k, v, indices, block_size=block_sel, scale=scale)[0]
    o_swa = window_attend(q, k, v, window, scale) if window > 0 else np.zeros_like(o_slc)
    return gated_sum(*gates, o_cmp, o_slc, o_swa).astype(F32)


OPS = {"sparse.nsa.selected_attend": selected_attend, "sparse.nsa.attend": attend}
VARIANTS = {"sparse.nsa.attend": {"variant": ("paper", "fla")}}

"""Sparse attention (moba) for the default run, written independently of the oracles
(this module imports nothing from ref).

MoBA as a kernel computes it, in float32: chunk sums by np.add.reduceat, the gate
q . mean per chunk, the current chunk forced and future chunks dropped, a stable
top-k, then attention gathered row by row over the selected chunks' keys only (a
value at a key no row selects is never read)."""

from __future__ import annotations

import math

import numpy as np

NAME = "NumPy float32 MoBA"
VERSION = np.__version__

_F32 = np.float32


def _floats(x, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise TypeError(f"{name}: expected a float array, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    return arr.astype(_F32)


def _int(x, name: str, lo: int) -> int:
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or int(x) < lo:
        raise ValueError(f"{name}: expected an integer >= {lo}, got {x!r}")
    return int(x)


def _check(q, k, v=None):
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"q {q.shape} and k {k.shape}: batch, head dim or head groups disagree")
    if v is not None and (v.shape[:3] != k.shape[:3]):
        raise ValueError(f"v {v.shape}: expected the batch, length and heads of k {k.shape}")


def kv_head_of(hq: int, hkv: int) -> np.ndarray:
    """Query head h reads KV head h // (hq / hkv)."""
    return np.arange(hq) // (hq // hkv)


def chunk_starts(length: int, chunk_size: int) -> np.ndarray:
    return np.arange(0, length, chunk_size)


def chunk_means(k: np.ndarray, chunk_size: int) -> np.ndarray:
    """[B, Lk, H, D] -> [B, N, H, D]: each chunk's sum over its own token count."""
    lk = k.shape[1]
    starts = chunk_starts(lk, chunk_size)
    if starts.size == 0:
        return np.zeros((k.shape[0], 0, k.shape[2], k.shape[3]), _F32)
    sums = np.add.reduceat(k, starts, axis=1)
    counts = np.diff(np.append(starts, lk)).astype(_F32)
    return sums / counts[None, :, None, None]


def positions(lq: int, lk: int) -> np.ndarray:
    """Query i sits at key position i + lk - lq."""
    return np.arange(lq) + (lk - lq)


def gate_markers(scores: np.ndarray, pos: np.ndarray, chunk_size: int) -> np.ndarray:
    """scores [B, Lq, H, N]: -inf at chunks starting after the query, +inf at its own."""
    starts = np.arange(scores.shape[-1]) * chunk_size
    future = (starts[None, :] > pos[:, None])[None, :, None, :]  # [1, Lq, 1, N]
    own = ((starts[None, :] <= pos[:, None]) & (pos[:, None] < starts[None, :] + chunk_size))[None, :, None, :]
    return np.where(own, _F32(np.inf), np.where(future, _F32(-np.inf), scores))


def gate_scale(d: int) -> float:
    """MoBA's gate is the plain dot product: no 1/sqrt(d)."""
    return 1.0


def gate(q, k, chunk_size):
    q, k = _floats(q, "q", 4), _floats(k, "k", 4)
    _check(q, k)
    cs = _int(chunk_size, "chunk_size", 1)
    means = chunk_means(k, cs)  # [B, N, Hkv, D]
    heads = kv_head_of(q.shape[2], k.shape[2])
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.einsum("blhd,bnhd->blhn", q, means[:, :, heads]) * _F32(gate_scale(q.shape[3]))
    return gate_markers(s.astype(_F32), positions(q.shape[1], k.shape[1]), cs)


def top_chunks(scores: np.ndarray, top_k: int) -> np.ndarray:
    """Indices of the min(top_k, N) best chunks (stable: the lower index wins a tie),
    -inf never taken, ascending, -1 last."""
    n = scores.shape[-1]
    kk = min(top_k, n)
    by_score = np.argsort(np.where(np.isnan(scores), 0, -scores), axis=-1, kind="stable")
    tier = np.where(scores == np.inf, 0, np.where(np.isnan(scores), 1, 2))  # +inf, then NaN, then numbers
    tiers = np.take_along_axis(tier, by_score, axis=-1)
    order = np.take_along_axis(by_score, np.argsort(tiers, axis=-1, kind="stable"), axis=-1)[..., :kk]
    taken = np.take_along_axis(scores, order, axis=-1) > -np.inf
    taken |= np.isnan(np.take_along_axis(scores, order, axis=-1))
    idx = np.sort(np.where(taken, order, n), axis=-1)
    return np.where(idx == n, -1, idx).astype(np.int32)


def select(scores, top_k):
    s = np.asarray(scores)
    if s.ndim < 1 or (s.dtype.kind != "f" and s.dtype.name != "bfloat16"):
        raise ValueError(f"scores: expected a float array [..., N], got {s.dtype} {s.shape}")
    return top_chunks(s.astype(np.float64), _int(top_k, "top_k", 1))


def row_keys(chunks: np.ndarray, p: int, chunk_size: int, lk: int) -> np.ndarray:
    """The key indices of the selected chunks, up to the query's own position."""
    keys = [np.arange(c * chunk_size, min((c + 1) * chunk_size, lk)) for c in chunks if c >= 0]
    keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    return keys[keys <= p]


def attend_row(qv: np.ndarray, kk: np.ndarray, vv: np.ndarray, scale: float):
    """One row over its gathered keys: (out [Dv], lse)."""
    if kk.shape[0] == 0:
        return np.zeros(vv.shape[-1], _F32), _F32(-np.inf)
    s = (kk @ qv) * _F32(scale)
    m = s.max()
    e = np.exp(s - m)
    z = e.sum(dtype=_F32)
    return (e @ vv) / z, _F32(m + np.log(z))


def attend(q, k, v, chunk_size, top_k):
    q, k, v = _floats(q, "q", 4), _floats(k, "k", 4), _floats(v, "v", 4)
    _check(q, k, v)
    cs, tk = _int(chunk_size, "chunk_size", 1), _int(top_k, "top_k", 1)
    b, lq, hq, d = q.shape
    lk = k.shape[1]
    chosen = select(gate(q, k, cs), tk)  # [B, Lq, Hq, K]
    heads = kv_head_of(hq, k.shape[2])
    pos = positions(lq, lk)
    out = np.zeros((b, lq, hq, v.shape[3]), _F32)
    lse = np.full((b, hq, lq), -np.inf, _F32)
    scale = 1.0 / math.sqrt(d) if d else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        for bi in range(b):
            for i in range(lq):
                for h in range(hq):
                    keys = row_keys(chosen[bi, i, h], int(pos[i]), cs, lk)
                    n = heads[h]
                    out[bi, i, h], lse[bi, h, i] = attend_row(q[bi, i, h], k[bi, keys, n], v[bi, keys, n], scale)
    return out, lse


def sequence_bounds(cu: np.ndarray) -> list[tuple[int, int]]:
    return [(int(cu[s]), int(cu[s + 1])) for s in range(cu.size - 1)]


def attend_varlen(q, k, v, cu_seqlens, chunk_size, top_k):
    q, k, v = _floats(q, "q", 3), _floats(k, "k", 3), _floats(v, "v", 3)
    cu = np.asarray(cu_seqlens)
    if cu.dtype.kind not in "iu" or cu.ndim != 1 or cu.size < 1 or cu[0] != 0 or np.any(np.diff(cu) < 0):
        raise ValueError(f"cu_seqlens: expected non-decreasing integer offsets from 0, got {cu!r}")
    if not q.shape[0] == k.shape[0] == v.shape[0] == cu[-1]:
        raise ValueError("cu_seqlens: the last offset must equal the packed lengths of q, k, v")
    _check(q[None], k[None], v[None])
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), _F32)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf, _F32)
    for lo, hi in sequence_bounds(cu):
        o, l = attend(q[None, lo:hi], k[None, lo:hi], v[None, lo:hi], chunk_size, top_k)
        out[lo:hi], lse[:, lo:hi] = o[0], l[0]
    return out, lse


P = "sparse.moba."
OPS: dict = {P + "gate": gate, P + "select": select, P + "attend": attend, P + "attend_varlen": attend_varlen}
VARIANTS: dict = {}

"""QJL key sketches and scores for the default run, written independently of the oracles
(this module imports nothing from ref), the way the reference's CUDA kernels compute:

- the sketch: one float32 product S k per token (exact for the vectors' inputs), the bit
  `> 0`, the norm as float64 root of the float64 sum of squares;
- packing: each byte a dot product of eight 0/1 bits with the weights 1, 2, 4, ..., 128;
- scores: the query sketch S q in float32, each packed or +-1 row turned into a 0/1 mask
  and the dot <S q, s> taken as 2 <S q, mask> - sum(S q) in float32, scaled by
  sqrt(pi/2) / m and the stored norm, float32 out;
- outliers: the group's channel energies sorted with a stable argsort of their negatives.

The steps are public so that the bug corpus (tests/corpus/kv_qjl.py) builds its wrong
kernels from this code with one step changed.
"""

from __future__ import annotations

import math

import numpy as np

NAME = "NumPy float32 QJL sketches and scores"
VERSION = np.__version__

PACK_WEIGHTS = np.array([1, 2, 4, 8, 16, 32, 64, 128], np.uint8)  # row 8i + j in bit j of byte i


def as_float(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{name}: expected float16, float32 or float64, got {a.dtype}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: NaN or Inf")
    return a


def check_projection(k: np.ndarray, S: np.ndarray) -> None:
    if k.ndim != 4:
        raise ValueError(f"k: expected [B, H, T, D], got shape {k.shape}")
    if S.ndim != 2 or S.shape[1] != k.shape[3] or S.shape[0] == 0:
        raise ValueError(f"S: expected [m, {k.shape[3]}], got {S.shape}")


def bit(projected: np.ndarray) -> np.ndarray:
    """The reference's sign bit: +1 where the projection is > 0, else -1."""
    return np.where(projected > 0, np.int8(1), np.int8(-1))


def project(x: np.ndarray, S: np.ndarray) -> np.ndarray:
    return np.matmul(x.astype(np.float32), S.astype(np.float32).T)


def norm(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return np.sqrt(np.einsum("...d,...d->...", x, x))


def sketch(k, S):
    k, S = as_float(k, "k"), as_float(S, "S")
    check_projection(k, S)
    return bit(project(k, S)), norm(k)


def pack(signs):
    s = np.asarray(signs)
    if s.dtype != np.int8 or not np.isin(s, (-1, 1)).all():
        raise ValueError("signs: expected int8 +1 / -1")
    if s.shape[-1] % 8:
        raise ValueError(f"signs: {s.shape[-1]} rows do not pack into bytes")
    ones = (s == 1).astype(np.uint16).reshape(*s.shape[:-1], s.shape[-1] // 8, 8)
    return (ones @ PACK_WEIGHTS.astype(np.uint16)).astype(np.uint8)


def unpack_mask(bytes_) -> np.ndarray:
    """uint8 [..., n] -> 0/1 float32 [..., 8 n]."""
    b = np.asarray(bytes_)[..., None]
    return ((b & PACK_WEIGHTS) != 0).astype(np.float32).reshape(*b.shape[:-2], 8 * b.shape[-2])


def sign_mask(signs, name: str = "signs") -> np.ndarray:
    s = np.asarray(signs)
    if s.dtype == np.uint8:
        return unpack_mask(s)
    if s.dtype != np.int8 or not np.isin(s, (-1, 1)).all():
        raise ValueError(f"{name}: expected int8 +1 / -1 or packed uint8")
    return (s == 1).astype(np.float32)


def kv_head_of(hq: int, h: int) -> np.ndarray:
    if h == 0 or hq % h:
        raise ValueError(f"q: {hq} query heads over {h} KV heads")
    return np.arange(hq) // (hq // h)


def signed_dot(sq: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """<S q, s> for s = 2 mask - 1: sq [B, Hq, Lq, m], mask [B, Hq, T, m] -> [B, Hq, Lq, T]."""
    return 2 * np.matmul(sq, np.swapaxes(mask, -1, -2)) - sq.sum(-1, keepdims=True)


def estimate(dots: np.ndarray, m: int, norms: np.ndarray) -> np.ndarray:
    return np.float32(math.sqrt(math.pi / 2) / m) * dots * norms[:, :, None, :]


def check_norms(norms, shape, name="norms") -> np.ndarray:
    n = as_float(norms, name)
    if n.shape != shape or (n < 0).any():
        raise ValueError(f"{name}: expected non-negative norms of shape {shape}, got {n.shape}")
    return n.astype(np.float32)


def scores(q, S, signs, norms):
    q, S = as_float(q, "q"), as_float(S, "S")
    mask = sign_mask(signs)
    if q.ndim != 4 or mask.ndim != 4 or S.ndim != 2 or mask.shape[-1] != S.shape[0] or q.shape[-1] != S.shape[1] \
            or q.shape[0] != mask.shape[0]:
        raise ValueError(f"shapes: q {q.shape}, S {S.shape}, signs {np.shape(signs)}")
    n = check_norms(norms, mask.shape[:3])
    heads = kv_head_of(q.shape[1], mask.shape[1])
    sq = project(q, S)
    return estimate(signed_dot(sq, mask[:, heads]), S.shape[0], n[:, heads])


def _int(x, name, lo, hi=None) -> int:
    x = np.asarray(x)
    if x.ndim or x.dtype.kind not in "iu" or x < lo or (hi is not None and x > hi):
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}], got {x!r}")
    return int(x)


def outliers(k, group, count):
    k = as_float(k, "k")
    if k.ndim != 4:
        raise ValueError(f"k: expected [B, H, T, D], got {k.shape}")
    b, h, t, d = k.shape
    group, count = _int(group, "group", 1), _int(count, "count", 0, d)
    if t % group:
        raise ValueError(f"group: {group} does not divide T = {t}")
    x = k.astype(np.float64).reshape(b, h, t // group, group, d)
    energy = np.einsum("bhngd,bhngd->bhnd", x, x)
    top = np.argsort(-energy, axis=-1, kind="stable")[..., :count]
    mask = np.zeros(energy.shape, bool)
    np.put_along_axis(mask, top, True, axis=-1)
    return mask


def token_mask(outliers_, shape) -> np.ndarray:
    o = np.asarray(outliers_)
    n = o.shape[2] if o.ndim == 4 else -1
    if o.dtype != bool or o.ndim != 4 or o.shape[:2] != shape[:2] or o.shape[3] != shape[3] or \
            (n == 0) != (shape[2] == 0) or (n and shape[2] % n):
        raise ValueError(f"outliers: expected bool [B, H, groups dividing T, D] for {shape}, got {o.shape}")
    return np.repeat(o, shape[2] // n if n else 1, axis=2)


def sketch_outliers(k, S, outliers, outlier_dim):
    k, S = as_float(k, "k"), as_float(S, "S")
    check_projection(k, S)
    mo = _int(outlier_dim, "outlier_dim", 1, S.shape[0])
    mask = token_mask(outliers, k.shape)
    inner, outer = np.where(mask, 0, k), np.where(mask, k, 0)
    return bit(project(inner, S)), norm(k), bit(project(outer, S[:mo])), norm(outer)


def inlier_norm(norms: np.ndarray, outlier_norms: np.ndarray) -> np.ndarray:
    return np.sqrt(np.maximum(norms * norms - outlier_norms * outlier_norms, 0))


def scores_outliers(q, S, signs, norms, outliers, outlier_signs, outlier_norms):
    q, S = as_float(q, "q"), as_float(S, "S")
    mask, omask = sign_mask(signs), sign_mask(outlier_signs, "outlier_signs")
    if mask.ndim != 4 or mask.shape[-1] != S.shape[0] or q.ndim != 4 or q.shape[-1] != S.shape[1] or \
            omask.shape[:3] != mask.shape[:3] or not 1 <= omask.shape[-1] <= S.shape[0]:
        raise ValueError(f"shapes: q {q.shape}, S {S.shape}, signs {mask.shape}, outlier_signs {omask.shape}")
    n, no = check_norms(norms, mask.shape[:3]), check_norms(outlier_norms, mask.shape[:3], "outlier_norms")
    tm = token_mask(outliers, (*mask.shape[:3], q.shape[-1]))
    heads = kv_head_of(q.shape[1], mask.shape[1])
    S32, mo = S.astype(np.float32), omask.shape[-1]
    sq = project(q, S)  # [B, Hq, Lq, m]
    # per key token t: the query's outlier channels projected, [B, Hq, Lq, T, m]
    q_out = q.astype(np.float32)[:, :, :, None, :] * tm[:, heads][:, :, None, :, :]
    sq_out = q_out @ S32.T
    sq_in = sq[:, :, :, None, :] - sq_out
    dot_in = np.einsum("bhqtm,bhtm->bhqt", sq_in, 2 * mask[:, heads] - 1)
    dot_out = np.einsum("bhqtm,bhtm->bhqt", sq_out[..., :mo], 2 * omask[:, heads] - 1)
    return estimate(dot_in, S.shape[0], inlier_norm(n, no)[:, heads]) + estimate(dot_out, mo, no[:, heads])


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True, initial=-np.inf))
    return e / e.sum(-1, keepdims=True)


def attend(q, S, signs, norms, k_recent, v, outliers=None, outlier_signs=None, outlier_norms=None):
    """Decode attention as the reference runs it: [QJL scores | q . k_recent] / sqrt(D),
    a float32 softmax, then P v in float32."""
    q, r, v = as_float(q, "q"), as_float(k_recent, "k_recent"), as_float(v, "v")
    extra = (outliers, outlier_signs, outlier_norms)
    if any(x is None for x in extra) != all(x is None for x in extra):
        raise ValueError("outliers: all three outlier inputs, or none")
    if outliers is None:
        sketched = scores(q, S, signs, norms)
    else:
        sketched = scores_outliers(q, S, signs, norms, outliers, outlier_signs, outlier_norms)
    b, hq, lq, d = q.shape
    if r.ndim != 4 or r.shape[0] != b or r.shape[3] != d or v.ndim != 4 or v.shape[:2] != r.shape[:2] or \
            v.shape[2] != sketched.shape[3] + r.shape[2]:
        raise ValueError(f"shapes: k_recent {r.shape}, v {v.shape} for {sketched.shape[3]} sketched keys")
    heads = kv_head_of(hq, r.shape[1])
    recent = np.matmul(q.astype(np.float32), np.swapaxes(r.astype(np.float32)[:, heads], -1, -2))
    logits = np.concatenate([sketched.astype(np.float32), recent], axis=-1) / np.float32(math.sqrt(d))
    return np.matmul(softmax_rows(logits), v.astype(np.float32)[:, heads])


OPS = {"kv.qjl.sketch": sketch, "kv.qjl.pack": pack, "kv.qjl.scores": scores, "kv.qjl.outliers": outliers,
       "kv.qjl.sketch_outliers": sketch_outliers, "kv.qjl.scores_outliers": scores_outliers,
       "kv.qjl.attend": attend}
VARIANTS: dict = {}

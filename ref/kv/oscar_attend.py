"""Attention over OSCAR's mixed cache (spec/kv.md#oscar-attend): queries rotated by R_K
attend over [bf16 sink | INT2 middle | bf16 recent] of the rotated keys and values, and
the output is rotated back by R_V^T.

    q [B, Hq, Lq, D], k, v [B, H, T, D], r_k, r_v [D, D] orthogonal (identity when absent)
    K' = k R_K, V' = v R_V, q' = q R_K                       (float64)
    K'_hat = [K'_sink | dequantize(quantize(K'_mid, k_clip)) | K'_recent], V'_hat likewise
    out = attend(q', K'_hat, V'_hat, causal bottom-right, scale 1/sqrt(D)) R_V^T

equal, by definition, to `ref.attention.attend` on the dequantized cache: a kernel that
runs one pass over the bf16 segments and one over the INT2 segment and merges the two
softmax states (the reference's two first-stage kernels) is judged against it (bounded).
`emulate_attend` is the same at a kernel's precision: the rotated rows stored at that
precision (the reference's bf16 cache), the codec in float32 (its definition), the
attention as `ref.attention.emulate.attend` computes it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.attention import emulate
from ref.attention.attend import attend as attend_exact
from ref.kv import oscar

__all__ = ["attend", "emulate_attend"]


def _inputs(q, k, v, r_k, r_v):
    k64, v64 = oscar.check_cache(k, "k"), oscar.check_cache(v, "v")
    q64 = oscar.check_cache(q, "q")
    if v64.shape != k64.shape:
        raise ValueError(f"v: expected the shape of k {k64.shape}, got {v64.shape}")
    b, h, _, d = k64.shape
    if q64.shape[0] != b or q64.shape[3] != d:
        raise ValueError(f"q: expected [{b}, Hq, Lq, {d}], got {q64.shape}")
    if h == 0 or q64.shape[1] % h or q64.shape[1] == 0:
        raise ValueError(f"q: expected a positive multiple of the {h} KV heads, got {q64.shape[1]} query heads")
    rk = np.eye(d) if r_k is None else oscar.check_rotation(r_k, d, "r_k")
    rv = np.eye(d) if r_v is None else oscar.check_rotation(r_v, d, "r_v")
    return q64, k64, v64, rk, rv


def _mixed(rows: NDArray[np.float64], clip_ratio: float, group: int, sink: int, recent: int) -> NDArray[np.float64]:
    """[sink | dequantized middle | recent] of rotated rows [B, H, T, D]."""
    n_sink, n_mid, _ = oscar.windows(rows.shape[2], sink=sink, recent=recent)
    mid = rows[:, :, n_sink:n_sink + n_mid]
    codes, scales, zeros = oscar.quantize(mid, clip_ratio=clip_ratio, group=group)
    out = rows.copy()
    out[:, :, n_sink:n_sink + n_mid] = oscar.dequantize(codes, scales, zeros, group=group)
    return out


def _flash(x: NDArray) -> NDArray:
    return x.transpose(0, 2, 1, 3)  # [B, heads, L, D] <-> [B, L, heads, D] (ref.attention's layout)


def attend(q: ArrayLike, k: ArrayLike, v: ArrayLike, r_k: ArrayLike | None = None, r_v: ArrayLike | None = None, *,
           k_clip: float = 0.96, v_clip: float = 0.92, group: int = 128, sink: int = 64, recent: int = 256,
           scale: float | None = None) -> NDArray[np.float64]:
    """out [B, Hq, Lq, D] float64 (module docstring). Lq <= T: query i is token T - Lq + i."""
    q64, k64, v64, rk, rv = _inputs(q, k, v, r_k, r_v)
    k_hat = _mixed(k64 @ rk, k_clip, group, sink, recent)
    v_hat = _mixed(v64 @ rv, v_clip, group, sink, recent)
    out, _ = attend_exact(_flash(q64 @ rk), _flash(k_hat), _flash(v_hat), causal=True, scale=scale)
    return _flash(out) @ rv.T


def emulate_attend(precision: str, q: ArrayLike, k: ArrayLike, v: ArrayLike, r_k: ArrayLike | None = None,
                   r_v: ArrayLike | None = None, *, k_clip: float = 0.96, v_clip: float = 0.92, group: int = 128,
                   sink: int = 64, recent: int = 256, scale: float | None = None) -> NDArray[np.float64]:
    """`attend` as a kernel at `precision` computes it (float64 values)."""
    q64, k64, v64, rk, rv = _inputs(q, k, v, r_k, r_v)
    rnd = emulate.rounder(precision)
    k_hat = _mixed(rnd(k64 @ rk), k_clip, group, sink, recent)
    v_hat = _mixed(rnd(v64 @ rv), v_clip, group, sink, recent)
    out, _ = emulate.attend(precision, _flash(rnd(q64 @ rk)), _flash(k_hat), _flash(v_hat), causal=True, scale=scale)
    return rnd(_flash(out) @ rv.T)

"""Attention over a QJL key cache, as the reference decodes (spec/kv.md#qjl-attend):
logits over [sketched keys | full-precision recent keys], scaled by 1/sqrt(D), softmax,
then the values (any value cache, given dequantized).

The sketched keys' logits are the QJL scores, which equal <q, k_hat> exactly for the
decoded keys k_hat (`decode_outliers`, or ref.kv.qjl.decode without outliers), so the
oracle is `ref.attention.attend` on the concatenation [k_hat | k_recent]: the attention
oracle reused, not rewritten.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.attention import attend as attention
from ref.attention import emulate
from ref.kv import qjl

__all__ = ["attend", "decode_outliers", "emulate_attend"]


def decode_outliers(S: ArrayLike, signs, norms, outliers, outlier_signs, outlier_norms) -> NDArray[np.float64]:
    """The key estimate [B, H, T, D] whose inner product with any q is
    `qjl.scores_outliers`: (1 - mask) * sqrt(pi/2)/m ||k_in|| S^T signs + mask *
    sqrt(pi/2)/m_out ||k_out|| S_out^T outlier_signs (mask: the token's group's
    outlier channels)."""
    S = np.asarray(S)
    b, h, t, _ = np.shape(signs)
    probe = np.zeros((b, h, 0, S.shape[1]))  # validates every argument as scores_outliers does
    qjl.scores_outliers(probe, S, signs, norms, outliers, outlier_signs, outlier_norms)
    S = S.astype(np.float64)
    s = qjl.unpack_signs(signs) if np.asarray(signs).dtype == np.uint8 else np.asarray(signs)
    so = qjl.unpack_signs(outlier_signs) if np.asarray(outlier_signs).dtype == np.uint8 else np.asarray(outlier_signs)
    m, mo = s.shape[-1], so.shape[-1]
    n, no = np.asarray(norms, np.float64), np.asarray(outlier_norms, np.float64)
    mask = np.asarray(outliers)
    mask = np.repeat(mask, t // mask.shape[2] if mask.shape[2] else 1, axis=2).astype(np.float64)
    n_in = np.sqrt(np.maximum(n * n - no * no, 0.0))
    k_in = qjl.SCALE / m * n_in[..., None] * (s.astype(np.float64) @ S)
    k_out = qjl.SCALE / mo * no[..., None] * (so.astype(np.float64) @ S[:mo])
    return (1 - mask) * k_in + mask * k_out


def _keys(S, signs, norms, k_recent, outliers, outlier_signs, outlier_norms) -> NDArray[np.float64]:
    extra = (outliers, outlier_signs, outlier_norms)
    if any(x is None for x in extra) and not all(x is None for x in extra):
        raise ValueError("outliers: give outliers, outlier_signs and outlier_norms together, or none")
    if outliers is None:
        k_hat = qjl.decode({"signs": signs, "norms": norms}, S)
    else:
        k_hat = decode_outliers(S, signs, norms, outliers, outlier_signs, outlier_norms)
    r = np.asarray(k_recent)
    if r.dtype.kind != "f" or r.ndim != 4 or r.shape[:2] != k_hat.shape[:2] or r.shape[3] != k_hat.shape[3]:
        raise ValueError(f"k_recent: expected float [B, H, R, D] like the sketched keys {k_hat.shape}, got "
                         f"{r.dtype} {r.shape}")
    return np.concatenate([k_hat, r.astype(np.float64)], axis=2)


def _flash(x) -> np.ndarray:
    return np.swapaxes(np.asarray(x), 1, 2)


def attend(q: ArrayLike, S: ArrayLike, signs, norms, k_recent, v, outliers=None, outlier_signs=None,
           outlier_norms=None) -> NDArray[np.float64]:
    """q [B, Hq, Lq, D], S [m, D], signs / norms of T sketched keys (with the outlier
    sketch when `outliers` is given), k_recent [B, H, R, D] full-precision recent keys,
    v [B, H, T + R, Dv] -> out [B, Hq, Lq, Dv], float64: softmax(logits / sqrt(D)) v
    with logits [scores | q . k_recent] (no mask: every cached token is visible)."""
    keys = _keys(S, signs, norms, k_recent, outliers, outlier_signs, outlier_norms)
    v = np.asarray(v)
    if v.ndim != 4 or v.shape[:3] != keys.shape[:3]:
        raise ValueError(f"v: expected [B, H, T + R = {keys.shape[2]}, Dv], got {v.shape}")
    qq = np.asarray(q)
    if qq.ndim != 4 or qq.shape[0] != keys.shape[0] or qq.shape[3] != keys.shape[3]:
        raise ValueError(f"q: expected [B, Hq, Lq, D = {keys.shape[3]}], got {qq.shape}")
    out, _ = attention(_flash(qq), _flash(keys), _flash(v))
    return np.swapaxes(out, 1, 2)


def emulate_attend(precision: str, q, S, signs, norms, k_recent, v, outliers=None, outlier_signs=None,
                   outlier_norms=None) -> NDArray[np.float64]:
    """`attend` at precision P: ref.attention.emulate.attend on [k_hat | k_recent] (the
    decoded keys rounded to P as a kernel's logits are)."""
    keys = _keys(S, signs, norms, k_recent, outliers, outlier_signs, outlier_norms)
    out, _ = emulate.attend(precision, _flash(q), _flash(keys), _flash(v))
    return np.swapaxes(out, 1, 2)

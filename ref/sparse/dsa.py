"""DeepSeek Sparse Attention's attention over the selected tokens (DeepSeek-V3.2,
spec/sparse.md#dsa-attend): each query row attends only the keys its indexer picked.

    A(t) = {s : s in idx[t], s >= 0} AND (s <= t + S - T when causal)
    out, lse = ref.attention.attend(q, k, v, mask=A)

The indices [B, T, K] are shared by every query head (DSA selects per token; MLA's
decode form is MQA, Hkv = 1); -1 marks an unused slot, a repeated index counts once,
an index outside [-1, S) is a ValueError. A row that selects nothing visible: out 0,
lse -inf (attend's rule); values at keys not selected are never read.

Reference: DeepSeek-AI, DeepSeek-V3.2-Exp (inference/model.py MLA.forward: the
index mask -inf off the top-k, added to the causal mask).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer
from ref.attention import emulate
from ref.attention.attend import attend as attention

__all__ = ["attend", "emulate_attend", "selection_mask"]


def selection_mask(indices: ArrayLike, lk: int, *, lq: int | None = None, causal: bool = True) -> NDArray[np.bool_]:
    """indices [B, T, K] integer (-1 unused) -> mask [B, 1, T, S = lk] bool: True at the
    selected keys (AND s <= t + S - T when `causal`)."""
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu" or idx.ndim != 3:
        raise TypeError(f"indices: expected an integer array [B, T, K], got {idx.dtype} of shape {idx.shape}")
    lk = integer(lk, "lk", minimum=0)
    b, t, _ = idx.shape
    if lq is not None and integer(lq, "lq", minimum=0) != t:
        raise ValueError(f"indices: expected T = {lq} rows like q, got shape {idx.shape}")
    idx = idx.astype(np.int64)
    if ((idx < -1) | (idx >= lk)).any():
        raise ValueError(f"indices: expected values in [-1, {lk}) (-1 = unused), got {idx[(idx < -1) | (idx >= lk)][:4]}")
    mask = np.zeros((b, t, lk + 1), bool)  # column lk collects the -1 slots, then is dropped
    np.put_along_axis(mask, np.where(idx < 0, lk, idx), True, axis=-1)
    mask = mask[..., :lk]
    if boolean(causal, "causal"):
        mask &= np.arange(lk)[None, None, :] <= np.arange(t)[None, :, None] + (lk - t)
    return mask[:, None]  # [B, 1, T, S]


def _mask(q, k, indices, causal):
    lq, lk = np.shape(q)[1], np.shape(k)[1]
    if np.ndim(q) != 4 or np.ndim(k) != 4:
        raise ValueError(f"q, k: expected [B, T, H, D] and [B, S, Hkv, D], got {np.shape(q)} and {np.shape(k)}")
    m = selection_mask(indices, lk, lq=lq, causal=causal)
    if m.shape[0] != np.shape(q)[0]:
        raise ValueError(f"indices: expected batch {np.shape(q)[0]} like q, got {m.shape[0]}")
    return m


def attend(q: ArrayLike, k: ArrayLike, v: ArrayLike, indices: ArrayLike, *, scale: float | None = None,
           causal: bool = True) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """q [B, T, H, D], k [B, S, Hkv, D], v [B, S, Hkv, Dv], indices [B, T, K] ->
    out [B, T, H, Dv], lse [B, H, T] float64: `ref.attention.attend` restricted to
    `selection_mask` (scale defaults to 1/sqrt(D))."""
    return attention(q, k, v, mask=_mask(q, k, indices, causal), scale=scale)


def emulate_attend(precision: str, q, k, v, indices, *, scale=None, causal=True):
    """`attend` at `precision`: ref.attention.emulate.attend with the same mask."""
    return emulate.attend(precision, q, k, v, mask=_mask(q, k, indices, causal), scale=scale)

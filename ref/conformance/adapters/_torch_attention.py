"""What the torch-based attention adapters share: their dtypes (all four adapters), the
argument checks the engines do not make in the catalog's terms, since they would
broadcast, and the visible-key mask built with the oracle's `visible_keys` (torch_sdpa
and transformers_attention).

Imports torch: only those adapters import this module."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ref.attention.attend import visible_keys

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
NUMPY_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}


def check_precision(precision: str) -> str:
    if precision not in TORCH_DTYPES:
        raise ValueError(f"precision: expected one of {tuple(TORCH_DTYPES)}, got {precision!r}")
    return precision


def check_qkv(q, k, v, mask, *, sinks=None, softcap=0.0) -> None:
    """q, k, v: [B, L, H, D] floats with KV heads dividing the query heads; a bool mask;
    one sink per query head; softcap >= 0."""
    for name, arr in (("q", q), ("k", k), ("v", v)):
        if arr.dtype.kind != "f":
            raise TypeError(f"{name}: expected floats, got {arr.dtype}")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("q, k, v: expected [B, L, H, D]")
    if k.shape[3] != q.shape[3] or v.shape[:3] != k.shape[:3] or k.shape[0] != q.shape[0]:
        raise ValueError(f"q, k, v: shapes {q.shape}, {k.shape}, {v.shape} do not fit together")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError("k: its KV heads must divide the query heads")
    if mask is not None and np.asarray(mask).dtype != np.bool_:
        raise TypeError("mask: expected bool")
    if sinks is not None and np.shape(sinks) != (q.shape[2],):
        raise ValueError("sinks: expected one per query head")
    if softcap < 0:
        raise ValueError("softcap: expected >= 0")


def check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k):
    """q, k, v: [T, H, D] as arrays and the integer offsets cq, ck from 0 to the packed
    lengths, checked: (q, k, v, cq, ck)."""
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    if cq.dtype.kind not in "iu" or ck.dtype.kind not in "iu":
        raise TypeError("cu_seqlens_q, cu_seqlens_k: expected integer offsets")
    q, k, v = (np.asarray(x) for x in (q, k, v))
    if cq.ndim != 1 or cq.shape != ck.shape or cq.size < 1 or cq[0] != 0 or ck[0] != 0 \
            or np.any(np.diff(cq) < 0) or np.any(np.diff(ck) < 0) or cq[-1] != len(q) or ck[-1] != len(k):
        raise ValueError("cu_seqlens_q, cu_seqlens_k: expected offsets from 0 to the packed lengths")
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError("q, k, v: expected [T, H, D]")
    return q, k, v, cq, ck


def visible(b: int, hq: int, lq: int, lk: int, mask, window) -> np.ndarray:
    """[B, Hq, Lq, Lk] bool: the keys each query sees (window/causal/sink tokens and mask)."""
    see = visible_keys(lq, lk, **window)[None, None]
    if mask is not None:
        m = np.asarray(mask)
        see = see & (m[None, None] if m.ndim == 2 else m)
    return np.array(np.broadcast_to(see, (b, hq, lq, lk)))

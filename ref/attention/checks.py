"""Argument checks the attention oracles share: float arrays of a given rank, the
q/k/v shapes of one batched attention call, explicit masks and packed-sequence
offsets. Each error names the argument and says what was expected (the scalar
and option checks are ref.arguments')."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import real

__all__ = ["FLOATS", "AttentionInputs", "attention_inputs", "floats", "mask_array", "offsets"]

# The dtypes an oracle accepts as real inputs (bfloat16 is ml_dtypes').
FLOATS = ("float16", "bfloat16", "float32", "float64")


def floats(x: ArrayLike, name: str, ndim: int) -> NDArray[np.float64]:
    """`x` as float64, if it is an array of one of FLOATS with `ndim` dimensions."""
    arr = np.asarray(x)
    if arr.dtype.name not in FLOATS:
        raise TypeError(f"{name}: expected one of {FLOATS}, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    return arr.astype(np.float64, copy=False)


class AttentionInputs(NamedTuple):
    """The checked arrays and numbers of one batched call (float64)."""

    q: NDArray[np.float64]  # [B, Lq, Hq, D]
    k: NDArray[np.float64]  # [B, Lk, Hkv, D]
    v: NDArray[np.float64]  # [B, Lk, Hkv, Dv]
    sinks: NDArray[np.float64] | None  # [Hq]
    scale: float
    softcap: float


def attention_inputs(q, k, v, sinks=None, scale=None, softcap=0.0) -> AttentionInputs:
    """Shapes and dtypes of q [B, Lq, Hq, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] and
    sinks [Hq]; Hkv divides Hq. scale defaults to 1/sqrt(D); softcap >= 0 (0: off)."""
    q, k, v = floats(q, "q", 4), floats(k, "k", 4), floats(v, "v", 4)
    b, lq, hq, d = q.shape
    if k.shape[0] != b or v.shape[0] != b:
        raise ValueError(f"k, v: expected batch {b} like q, got k {k.shape} and v {v.shape}")
    if k.shape[3] != d:
        raise ValueError(f"k: expected head dim {d} like q [B, Lq, Hq, D] = {q.shape}, got k {k.shape}")
    if v.shape[1:3] != k.shape[1:3]:
        raise ValueError(f"v: expected [B, Lk, Hkv, Dv] with Lk, Hkv of k {k.shape}, got {v.shape}")
    hkv = k.shape[2]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"k: its {hkv} KV heads must divide the {hq} query heads of q")
    if sinks is not None:
        sinks = floats(sinks, "sinks", 1)
        if sinks.shape != (hq,):
            raise ValueError(f"sinks: expected one logit per query head, shape ({hq},), got {sinks.shape}")
    if d == 0 and scale is None:
        raise ValueError("q: head dim 0 needs an explicit scale")
    scale = 1.0 / math.sqrt(d) if scale is None else real(scale, "scale", positive=False)
    softcap = real(softcap, "softcap", positive=False)
    if softcap < 0:
        raise ValueError(f"softcap: expected 0 (off) or a positive cap, got {softcap}")
    return AttentionInputs(q, k, v, sinks, scale, softcap)


def mask_array(mask, b: int, hq: int, lq: int, lk: int) -> NDArray[np.bool_]:
    """An explicit mask (True = visible) as [B|1, Hq|1, Lq, Lk]; [Lq, Lk] is broadcast."""
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"mask: expected a bool array (True = visible), got {m.dtype}")
    if m.ndim == 2:
        m = m[None, None]
    if m.ndim != 4 or m.shape[2:] != (lq, lk) or m.shape[0] not in (1, b) or m.shape[1] not in (1, hq):
        raise ValueError(f"mask: expected [Lq, Lk] or [B or 1, Hq or 1, Lq, Lk] = [{b}, {hq}, {lq}, {lk}], "
                         f"got {np.shape(mask)}")
    return m


def offsets(cu: ArrayLike, name: str) -> NDArray[np.int64]:
    """Cumulative sequence offsets: integers, 1-D, starting at 0, non-decreasing."""
    arr = np.asarray(cu)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer cumulative offsets, got {arr.dtype}")
    if arr.ndim != 1 or arr.size < 1 or arr[0] != 0 or np.any(np.diff(arr.astype(np.int64)) < 0):
        raise ValueError(f"{name}: expected a non-decreasing 1-D array starting at 0, got {arr.tolist()}")
    return arr.astype(np.int64)

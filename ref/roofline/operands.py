"""Argument checks of the roofline's serving ops (moe, specdec, perf): counts and
real quantities given as arrays, all of one op the same shape (no broadcasting).

    counts(op, experts=..., top_k=...)   int64 arrays: an integer dtype (not bool),
                                         no negative value
    reals(op, alpha=...)                 float64 arrays: a float dtype, no NaN, no
                                         infinity

A wrong dtype is a TypeError, a wrong shape or value a ValueError; each names the op,
the argument, what was expected and what came.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["counts", "reals", "same_shape"]


def counts(op: str, **arrays: ArrayLike) -> list[NDArray[np.int64]]:
    """Each array as int64: an integer dtype (a uint64 past 2^63 - 1 rejected), >= 0."""
    out = []
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{op}: {name}: expected an integer array (int64), got dtype {arr.dtype}")
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{op}: {name}: expected counts below 2^63, got {int(arr.max())}")
        arr = arr.astype(np.int64)
        if arr.size and int(arr.min()) < 0:
            raise ValueError(f"{op}: {name}: expected non-negative counts, got {int(arr.min())}")
        out.append(arr)
    return out


def reals(op: str, **arrays: ArrayLike) -> list[NDArray[np.float64]]:
    """Each array as float64: a float dtype, every element finite."""
    out = []
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype.kind != "f":
            raise TypeError(f"{op}: {name}: expected a float array (float64), got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{op}: {name}: expected finite values, got {arr[~np.isfinite(arr)].flat[0]}")
        out.append(arr)
    return out


def same_shape(op: str, **arrays: NDArray) -> tuple[int, ...]:
    """The common shape of the arrays (the first one's); a ValueError naming the first
    argument that differs."""
    items = list(arrays.items())
    first, shape = items[0][0], np.shape(items[0][1])
    for name, arr in items[1:]:
        if np.shape(arr) != shape:
            raise ValueError(f"{op}: {name}: expected the shape of {first} {shape} (no broadcasting), "
                             f"got {np.shape(arr)}")
    return shape

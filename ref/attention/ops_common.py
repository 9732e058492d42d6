"""Helpers the attention area's catalog declarations share: the bounds, the value grid
exact at bfloat16 and float16, the comparator of (out, lse) pairs."""

from __future__ import annotations

import numpy as np

from ref.formats.minifloat import round_to
from ref.testing.bounded import Bound, compare_bounded_parts

OUT_BOUND = Bound(k=2.0, floor=2.0, scale="relative")
LSE_BOUND = Bound(k=2.0, floor=2.0, scale="log")
BOUNDS = {"out": OUT_BOUND, "lse": LSE_BOUND, "o": OUT_BOUND}


def grid(rng: np.random.Generator, shape, std: float = 1.0) -> np.ndarray:
    """Normal values rounded to bfloat16 and kept within float16's normal range: exact
    at both precisions (float32 storage)."""
    x = round_to(rng.standard_normal(shape) * std, "bfloat16")
    x = np.where(np.abs(x) < 2.0**-14, 0.0, np.clip(x, -60000, 60000))
    return x.astype(np.float32)


def _qkv(rng, b, lq, lk, hq, hkv, d, dv=None, std=1.0):
    dv = d if dv is None else dv
    return {"q": grid(rng, (b, lq, hq, d), std), "k": grid(rng, (b, lk, hkv, d), std),
            "v": grid(rng, (b, lk, hkv, dv))}


def _compare(names):
    def compare(expected, actual, emulated, precision):
        return compare_bounded_parts(expected, emulated, actual, names=names, bounds=BOUNDS, precision=precision)

    return compare


def _format(name, arr):
    return None

"""E8 and D8 nearest points for the default run, written the way a decoder is written
row by row and independently of the oracles (this module imports nothing from ref):
each row's coordinates become exact `fractions.Fraction`s, the half-integer coset is
decoded by rounding x - 1/2 and adding 1/2 back, and distances are sums of squared
Fractions. The steps are public so that the bug corpus (tests/corpus/quant_lattice.py)
builds its wrong decoders from this code with one step changed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

NAME = "numpy lattice"
VERSION = np.__version__

HALF = Fraction(1, 2)


def check(x, name: str = "x") -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.dtype.itemsize > 8:
        raise TypeError(f"{name}: float16/32/64 coordinates expected, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] != 8:
        raise ValueError(f"{name}: the last axis must hold 8 coordinates, got shape {x.shape}")
    x = x.astype(np.float64)
    if not np.isfinite(x).all():
        raise ValueError(f"{name}: NaN or Inf coordinate")
    if x.size and np.abs(x).max() >= 2.0**50:
        raise ValueError(f"{name}: a coordinate of magnitude 2^50 or more")
    return x


def nearest_integer(v: Fraction) -> int:
    """The closest integer; exactly halfway, the one nearer zero."""
    lo = math.floor(v)
    rest = v - lo
    if rest > HALF or (rest == HALF and lo < 0):
        return lo + 1
    return lo


def worst_coordinate(errors: list[Fraction]) -> int:
    """The coordinate farthest from its rounded value; the first of equals."""
    best = 0
    for i, e in enumerate(errors):
        if abs(e) > abs(errors[best]):
            best = i
    return best


def other_way(v: Fraction, f: int) -> int:
    """v rounded to the second-closest integer: up when v sits at or above f."""
    return f + 1 if v >= f else f - 1


def d8_point(v: list[Fraction]) -> list[int]:
    f = [nearest_integer(c) for c in v]
    if sum(f) % 2:
        i = worst_coordinate([c - r for c, r in zip(v, f)])
        f[i] = other_way(v[i], f[i])
    return f


def squared_distance(v: list[Fraction], p: list[Fraction]) -> Fraction:
    return sum(((a - b) ** 2 for a, b in zip(v, p)), Fraction(0))


def prefer_coset(d_int: Fraction, d_half: Fraction) -> bool:
    """The half-integer point wins only when strictly closer."""
    return d_half < d_int


def e8_point(v: list[Fraction]) -> list[Fraction]:
    a = [Fraction(c) for c in d8_point(v)]
    b = [Fraction(c) + HALF for c in d8_point([c - HALF for c in v])]
    return b if prefer_coset(squared_distance(v, a), squared_distance(v, b)) else a


def _rows(x, point) -> np.ndarray:
    x = check(x)
    out = np.zeros(x.shape, np.float64)
    flat, res = x.reshape(-1, 8), out.reshape(-1, 8)
    for r in range(flat.shape[0]):
        res[r] = [float(c) for c in point([Fraction(float(c)) for c in flat[r]])]
    return out


def e8_nearest(x) -> np.ndarray:
    return _rows(x, e8_point)


def d8_nearest(x) -> np.ndarray:
    return _rows(x, d8_point)


OPS = {
    "quant.e8.nearest": e8_nearest,
    "quant.d8.nearest": d8_nearest,
}
VARIANTS: dict = {}

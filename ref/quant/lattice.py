"""The nearest point of the E8 lattice (and of D8) to a vector of 8 reals: Conway and
Sloane's decoder, evaluated exactly.

  D8 = {y in Z^8 : sum(y) even}            E8 = D8 u (D8 + h),  h = (1/2, ..., 1/2)

  f(x)   each coordinate rounded to the nearest integer; a coordinate exactly
         halfway (k + 1/2) goes to the integer of smaller magnitude (toward zero)
  g(x)   f(x) with its worst coordinate (largest |x_i - f(x_i)|, the lowest index
         among equals) rounded the other way: f_i + 1 if x_i >= f_i, else f_i - 1
  D8(x)  f(x) if sum(f(x)) is even, else g(x)
  E8(x)  the closer of a = D8(x) and b = D8(x - h) + h; a when they are equally close

Every decision (the halfway test, the worst coordinate, which of a and b is closer) is
taken on exact values: the inputs are turned into integers in units of 2^-k (k large
enough for every input bit) and the algorithm runs on Python integers, so inputs that
differ from a tie by one float64 ulp are decided as the reals decide them (a float64
sum of squares is not: spec/quant.md#e8-nearest, "near ties").

Inputs: x [..., 8] float16, float32 or float64 (widened exactly), finite, every
coordinate of magnitude below 2^50 (so that the lattice points are float64 numbers).
Output: float64 [..., 8], integers or half-integers.

Reference: Conway and Sloane, "Fast quantizing and decoding algorithms for lattice
quantizers and codes", IEEE Trans. Inf. Theory 28(2), 1982; the same E8 underlies
QuIP#'s codebooks (Tseng et al., arXiv:2402.04396).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["DIM", "LIMIT", "d8_nearest", "e8_nearest", "in_e8"]

DIM = 8
LIMIT = 2.0**50  # largest coordinate magnitude accepted (exclusive)


def _check(x: ArrayLike, name: str = "x") -> NDArray[np.float64]:
    x = np.asarray(x)
    if x.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{name}: expected float16, float32 or float64 coordinates, got dtype {x.dtype}")
    if x.ndim < 1 or x.shape[-1] != DIM:
        raise ValueError(f"{name}: expected shape [..., {DIM}], got {x.shape}")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: coordinates must be finite (NaN or Inf found)")
    if np.any(np.abs(x) >= LIMIT):
        raise ValueError(f"{name}: coordinates must be of magnitude below 2^50, got {np.max(np.abs(x))!r}")
    return x


def _exact(x: NDArray[np.float64]) -> tuple[NDArray, int]:
    """x [n, 8] -> (X, k): Python integers X = x * 2^k, exactly, with k >= 1 (so that 1/2
    is a whole number of units)."""
    m, e = np.frexp(x)  # x = m * 2^e, |m| in [0.5, 1)
    mant = (m * 2.0**53).astype(np.int64)  # exact: 53 significant bits
    shift = e.astype(np.int64) - 53
    k = max(1, int(-shift[mant != 0].min())) if np.any(mant != 0) else 1
    shift = np.where(mant != 0, shift + k, 0)
    return np.left_shift(mant.astype(object), shift.astype(object)), k


def _round_coset(y: NDArray, one: int) -> tuple[NDArray, NDArray]:
    """y [n, 8] in units -> (F, d): F = f(y / one) as integers, d = y - F * one."""
    half = one // 2
    q = y // one  # floor
    r = y - q * one  # in [0, one)
    up = (r > half) | ((r == half) & (q < 0))  # halfway: toward zero
    f = q + up.astype(np.int64).astype(object)
    return f, y - f * one


def _d8(y: NDArray, one: int) -> NDArray:
    """The nearest D8 point to y / one, as integer coordinates [n, 8]: f, or g where the
    coordinate sum of f is odd."""
    f, d = _round_coset(y, one)
    odd = (f.sum(axis=1) % 2).astype(np.int64) == 1
    if np.any(odd):
        worst = np.argmax(np.abs(d[odd]), axis=1)  # the first of equals
        rows = np.flatnonzero(odd)
        step = np.where(d[rows, worst] >= 0, 1, -1).astype(object)
        f[rows, worst] = f[rows, worst] + step
    return f


def _nearest(x: NDArray[np.float64], coset: bool) -> NDArray[np.float64]:
    shape = x.shape
    flat = x.reshape(-1, DIM)
    if flat.shape[0] == 0:
        return np.zeros(shape, np.float64)
    big, k = _exact(flat)
    one = 1 << k
    a = _d8(big, one) * one  # [n, 8] units
    if coset:
        half = one // 2
        b = _d8(big - half, one) * one + half
        da = ((big - a) ** 2).sum(axis=1)
        db = ((big - b) ** 2).sum(axis=1)
        a = np.where((db < da)[:, None], b, a)
    doubled = (a * 2 // one).astype(np.int64)  # exact: every coordinate is a whole number of half-units
    return (doubled.astype(np.float64) / 2).reshape(shape)


def d8_nearest(x: ArrayLike) -> NDArray[np.float64]:
    """x [..., 8] -> the nearest point of D8 (integers of even sum) [..., 8] float64,
    ties as the module docstring states."""
    return _nearest(_check(x), coset=False)


def e8_nearest(x: ArrayLike) -> NDArray[np.float64]:
    """x [..., 8] -> the nearest point of E8 = D8 u (D8 + 1/2) [..., 8] float64, ties as
    the module docstring states (the D8 point when both cosets are equally close)."""
    return _nearest(_check(x), coset=True)


def in_e8(y: ArrayLike) -> NDArray[np.bool_]:
    """y [..., 8] -> whether each row is a point of E8: all coordinates integers or all
    half-integers, with 2y summing to a multiple of 4."""
    y = _check(y, "y")
    two = y * 2
    whole = np.all(two == np.round(two), axis=-1)
    ints = np.round(two).astype(np.int64)
    parity = ints % 2
    same = np.all(parity == parity[..., :1], axis=-1)
    return whole & same & (ints.sum(axis=-1) % 4 == 0)

"""encode written as a search in the table of representable values.

The bit form (`ref.formats.minifloat.encode`) shifts the IEEE bits of x; this form
says the same thing the way the standards do:

  1. list every finite non-negative value of the format with its code, ascending,
     and one more past the top: max + ulp_at_max, the value the next code would have;
  2. place |x| between its neighbours lo <= |x| < hi;
  3. pick lo or hi by the rounding mode: nearest (a tie goes to the even code, or
     away from zero), toward zero, toward +-infinity;
  4. past the top value (hi is the virtual code past max), overflow by the policy;
     then zeros, NaN, the sign, and E8M0's zero and negatives.

2|x| and lo + hi are exact in float64 (lo and hi have at most 12 significant bits and
are neighbours), so the tie test is exact for float16, float32 and float64 inputs.
Tests prove `encode_by_table` equal to `encode` on every code of the small formats,
every tie and its neighbours, and random inputs for the 16-bit formats.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import member
from ref.formats.minifloat import (
    FloatFormat,
    NanEncoding,
    NanPolicy,
    NegativePolicy,
    Overflow,
    Rounding,
    check_options,
    check_source,
    decode,
)

__all__ = ["encode_by_table", "value_table"]


@lru_cache(maxsize=None)
def value_table(fmt: str | FloatFormat) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """(values, codes): the finite non-negative values of `fmt` ascending with their
    magnitude codes, and last the virtual value max + ulp_at_max with code max_code + 1."""
    f = check_options(fmt, None, NanPolicy.MAX, NegativePolicy.NAN)[0]
    codes = np.arange(f.max_code + 1, dtype=np.int64)  # sign bit clear: +0 up to +max
    values = decode(codes.astype(f.code_dtype), f).astype(np.float64)
    return np.append(values, f.max_normal + f.ulp_at_max), np.append(codes, f.max_code + 1)


def encode_by_table(
    x: ArrayLike,
    fmt: str | FloatFormat,
    *,
    rounding: Rounding | str = Rounding.NEAREST_EVEN,
    overflow: Overflow | str | None = None,
    nan: NanPolicy | str = NanPolicy.MAX,
    negative: NegativePolicy | str = NegativePolicy.NAN,
) -> NDArray:
    """The codes `minifloat.encode` gives, by nearest-value search (same options)."""
    rounding = member(rounding, Rounding, "rounding")
    f, overflow, nan, negative = check_options(fmt, overflow, nan, negative)
    x = check_source(x, f)
    with np.errstate(invalid="ignore", over="ignore"):
        ax = np.abs(x.astype(np.float64))
        neg = np.signbit(x) & (negative is NegativePolicy.NAN)  # `magnitude` encodes |x|
        mag = _nearest(ax, neg, f, rounding)
    mag = _overflow(mag, ax, neg, f, rounding, overflow)
    return _specials(mag, x, ax, neg, f, nan, negative).astype(f.code_dtype)


def _nearest(ax: NDArray, neg: NDArray, f: FloatFormat, rounding: Rounding) -> NDArray[np.int64]:
    """Steps 2 and 3: the magnitude code of lo or hi (max_code + 1 past the top)."""
    values, codes = value_table(f)
    finite = np.where(np.isfinite(ax), ax, 0.0)
    i = np.clip(np.searchsorted(values, finite, side="right") - 1, 0, len(values) - 2)
    lo, hi = values[i], values[i + 1]
    twice, mid = 2 * finite, lo + hi
    up = {
        Rounding.NEAREST_EVEN: (twice > mid) | ((twice == mid) & (codes[i] % 2 == 1)),
        Rounding.NEAREST_AWAY: twice >= mid,
        Rounding.TOWARD_ZERO: np.zeros(ax.shape, dtype=bool),
        Rounding.TOWARD_POSITIVE: ~neg,
        Rounding.TOWARD_NEGATIVE: neg,
    }[rounding]
    inexact = (finite != lo) & (finite > values[0])  # below the smallest value (E8M0): that value
    mag = codes[i + (up & inexact)]
    return np.where(finite >= values[-1], codes[-1], mag)  # at or past the virtual top: overflow


def _overflow(mag, ax, neg, f: FloatFormat, rounding: Rounding, overflow: Overflow) -> NDArray[np.int64]:
    """Step 4: a magnitude past max, or Inf, by the overflow policy."""
    inf = np.isinf(ax)
    over = (mag > f.max_code) | inf
    if overflow is Overflow.SATURATE:
        return np.where(over, f.max_code, mag)
    toward_zero = {Rounding.TOWARD_ZERO: np.ones_like(neg), Rounding.TOWARD_POSITIVE: neg,
                   Rounding.TOWARD_NEGATIVE: ~neg}.get(rounding, np.zeros_like(neg))
    big = f.inf_code if f.has_inf else f.nan_code
    return np.where(over, np.where(toward_zero & ~inf, f.max_code, big), mag)  # IEEE 754 7.4


def _specials(mag, x, ax, neg, f: FloatFormat, nan: NanPolicy, negative: NegativePolicy) -> NDArray[np.int64]:
    """Zeros, the sign, NaN, and the unsigned format's zero and negatives."""
    mag = np.where(ax == 0, 0 if f.has_zero else mag, mag)
    sign = np.where(neg & ((mag != 0) | f.has_negative_zero), f.sign_mask, 0)
    codes = sign | mag
    if f.has_nan:
        nan_code = f.nan_code if f.nan is NanEncoding.NEGATIVE_ZERO else sign | f.nan_code
    else:
        nan_code = {NanPolicy.MAX: f.max_code, NanPolicy.ZERO: 0,
                    NanPolicy.ZERO_FLIPPED_SIGN: np.where(neg, 0, f.sign_mask)}[nan]
    codes = np.where(np.isnan(x), nan_code, codes)
    if not f.signed:
        nothing = (ax == 0) if negative is NegativePolicy.NAN else np.zeros(ax.shape, dtype=bool)
        codes = np.where(neg | nothing, f.nan_code, codes)
    return codes

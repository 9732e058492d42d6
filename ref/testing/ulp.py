"""ULP arithmetic on the bit patterns of any format, including FP8, FP4 and bfloat16.

numpy's spacing/nextafter reject bfloat16 and the 8-bit formats, so distances are
computed here from codes: a code's ordinal is its position on the number line
(sign-magnitude folded into a signed integer, +0 and -0 both at 0), and the ULP
distance of two codes is the difference of their ordinals.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.formats.minifloat import FloatFormat, get_format

__all__ = ["bits_to_str", "ordinal", "ulp_distance"]


def ordinal(codes: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.int64]:
    """Signed position of each code on the number line; NaN codes get position 0.

    Adjacent representable values differ by 1; Inf sits one past the max.
    """
    f = get_format(fmt)
    codes = np.asarray(codes).astype(np.uint64)
    mag = (codes & np.uint64(~f.sign_mask & ((1 << f.nbits) - 1))).astype(np.int64)
    negative = (codes & np.uint64(f.sign_mask)) != 0
    pos = np.where(negative, -mag, mag)
    return np.where(f.is_nan_code(codes), 0, pos)


def ulp_distance(a: ArrayLike, b: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """|ordinal(a) - ordinal(b)| per element; 0 when both are NaN, inf when one is."""
    f = get_format(fmt)
    nan_a, nan_b = f.is_nan_code(a), f.is_nan_code(b)
    d = np.abs(ordinal(a, f) - ordinal(b, f)).astype(np.float64)
    d = np.where(nan_a != nan_b, np.inf, d)
    return np.where(nan_a & nan_b, 0.0, d)


def bits_to_str(code: int, fmt: str | FloatFormat) -> str:
    """A code as sign.exponent.mantissa bits, e.g. '0.1111.110' for E4M3FN 448."""
    f = get_format(fmt)
    code = int(code)
    parts = []
    if f.signed:
        parts.append(str(code >> (f.nbits - 1) & 1))
    parts.append(format(code >> f.mbits & ((1 << f.ebits) - 1), f"0{f.ebits}b"))
    if f.mbits:
        parts.append(format(code & ((1 << f.mbits) - 1), f"0{f.mbits}b"))
    return ".".join(parts)

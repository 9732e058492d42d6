"""MX block codecs (OCP Microscaling Formats v1.0): blocks of k elements along an axis
share one E8M0 (power-of-two) scale.

  X      = shared scale exponent of a block, from the float32 bits of its amax
  code_i = element_encode(x_i / 2^X)        divide by the exact power of two,
                                            round to nearest even, saturate
  x_i   ~= element_decode(code_i) * 2^X

Elements: MXFP8 (E4M3, E5M2), MXFP6 (E2M3, E3M2), MXFP4 (E2M1), MXINT8 (8-bit two's
complement with 6 fractional bits, symmetric: -127/64 .. 127/64). Scale rules
(`ScaleRule`), each defined on the float32 bits of amax, with emax the element's
largest exponent (8, 15, 2, 4, 2, 0):

  floor  X = floor(log2 amax) - emax            the OCP spec's rule
  ceil   X = ceil(log2 amax) - emax
  even   X = floor(log2 round(amax)) - emax     amax first rounded to the element's
                                                mantissa width (a carry moves it up)
  rceil  X = log2 of fp32(amax * fp32(1/max)) rounded up to a power of two
                                                (NVIDIA: cvt.rp.satfinite.ue8m0x2.f32)

X is clamped below at -127; the elements of a block at 2^-127 are divided by exactly
2^-127. A block holding NaN gets the NaN scale (0xFF); a block holding Inf, or whose X
would pass 127, gets 0xFF too, or 0xFE under `scale_overflow="satfinite"` (then Inf
saturates to the element max). Element codes of a NaN-scale block are written as 0
and are not part of the contract (engines write anything there). Dequantization is
exact: float64, or a narrower float output that is the exact value rounded once.

References: OCP Microscaling Formats (MX) v1.0, 2023; Rouhani et al.,
"Microscaling Data Formats for Deep Learning", arXiv:2310.10537.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.formats.minifloat import bit_length, decode, encode, get_format

__all__ = ["MX_ELEMENTS", "ScaleOverflow", "ScaleRule", "dequantize", "max_element", "quantize", "scale_exponents"]

# element name -> (emax, mantissa bits) ; INT8 is 1.xxxxxx: emax 0, 6 fraction bits
MX_ELEMENTS = {
    "float8_e4m3fn": (8, 3),
    "float8_e5m2": (15, 2),
    "float6_e2m3fn": (2, 3),
    "float6_e3m2fn": (4, 2),
    "float4_e2m1fn": (2, 1),
    "int8": (0, 6),
}
INT8_MAX = 127  # symmetric: -127..127, in units of 2^-6


class ScaleRule(enum.Enum):
    FLOOR = "floor"
    CEIL = "ceil"
    EVEN = "even"
    RCEIL = "rceil"


class ScaleOverflow(enum.Enum):
    NAN = "nan"  # Inf in the block, or X > 127: scale 0xFF (microxcaling)
    SATFINITE = "satfinite"  # ... scale 0xFE (TransformerEngine, PTX .satfinite)


def _element(elem: str):
    if elem not in MX_ELEMENTS:
        raise ValueError(f"elem: expected one of {sorted(MX_ELEMENTS)}, got {elem!r}")
    return MX_ELEMENTS[elem]


def max_element(elem: str) -> float:
    """A step of the definition: the element's largest magnitude (6 for FP4, 448 for
    E4M3, 127/64 for MXINT8); the rceil rule multiplies amax by f32(1 / max_element)."""
    _element(elem)
    return INT8_MAX / 64 if elem == "int8" else get_format(elem).max_normal


def _log2_parts(amax: NDArray[np.float32]):
    """floor(log2 amax) and the 24-bit significand (leading one at bit 23) of positive
    finite float32 values, from their bits (float32 subnormals included)."""
    bits = amax.view(np.uint32).astype(np.int64)
    field_e, field_m = bits >> 23, bits & 0x7FFFFF
    sub = field_e == 0
    width = bit_length(np.where(sub, field_m, 1).astype(np.uint64))
    floor_log2 = np.where(sub, width - 150, field_e - 127)
    sig = np.where(sub, field_m << np.clip(24 - width, 0, 23), field_m | (1 << 23))
    return floor_log2, sig


def scale_exponents(amax: ArrayLike, elem: str, *, rule: ScaleRule | str = ScaleRule.FLOOR,
                    scale_overflow: ScaleOverflow | str = ScaleOverflow.NAN) -> NDArray[np.uint8]:
    """E8M0 scale codes (X + 127) for block maxima `amax` (float32, >= 0 or NaN/Inf)."""
    emax, mbits = _element(elem)
    rule = member(rule, ScaleRule, "rule")
    scale_overflow = member(scale_overflow, ScaleOverflow, "scale_overflow")
    amax = np.asarray(amax)
    if amax.dtype != np.float32:
        raise TypeError(f"amax: expected float32, got {amax.dtype}")
    if (amax < 0).any():
        raise ValueError("amax: block maxima are magnitudes, >= 0 (or NaN/Inf); got a negative value")
    finite = np.isfinite(amax) & (amax > 0)
    safe = np.where(finite, amax, np.float32(1))
    if rule is ScaleRule.RCEIL:
        # fp32 product, then a power of two at or above it (the .rp conversion).
        s = safe * np.float32(1 / max_element(elem))
        e8m0 = encode(s, "float8_e8m0fnu", rounding="toward_positive", overflow="nonsaturating",
                      negative="magnitude")
        # An underflowed product (0) gives 2^-127; past 2^127 the code is NaN: X = 128.
        x = np.where(e8m0 == 0xFF, 128, e8m0.astype(np.int64) - 127)
    else:
        floor_log2, sig = _log2_parts(safe)
        if rule is ScaleRule.FLOOR:
            x = floor_log2
        elif rule is ScaleRule.CEIL:
            x = floor_log2 + (sig != (1 << 23))
        else:  # EVEN: does rounding the significand to mbits bits carry past all ones?
            x = floor_log2 + ((sig & 0x7FFFFF) + (1 << (22 - mbits)) >= (1 << 23))
        x = x - emax
    x = np.where(finite, np.maximum(x, -127), -127)
    too_big = (x > 127) | np.isinf(amax)
    over = 0xFF if scale_overflow is ScaleOverflow.NAN else 0xFE
    codes = np.where(too_big, over, x + 127)
    return np.where(np.isnan(amax), 0xFF, codes).astype(np.uint8)


def _blocks(a: NDArray, block: int, axis: int, name: str) -> NDArray:
    """[..., n, ...] -> [..., n / block, block] with the blocked axis last."""
    block = integer(block, "block", minimum=1)
    axis = integer(axis, "axis")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: {axis} is out of range for {name} of shape {a.shape}")
    moved = np.moveaxis(a, axis, -1)
    if moved.shape[-1] % block:
        raise ValueError(f"{name}: axis {axis} has length {moved.shape[-1]}, not a multiple of block={block}")
    return moved.reshape(*moved.shape[:-1], moved.shape[-1] // block, block)


def _unblocks(b: NDArray, axis: int) -> NDArray:
    return np.moveaxis(b.reshape(*b.shape[:-2], b.shape[-2] * b.shape[-1]), -1, axis)


def _encode_elements(q: NDArray[np.float32], elem: str) -> NDArray[np.uint8]:
    if elem == "int8":
        k = np.clip(np.rint(q * 64), -INT8_MAX, INT8_MAX)  # rint: round half to even
        return np.where(np.isnan(k), 0, k).astype(np.int8).view(np.uint8)
    return encode(q, elem, rounding="nearest_even", overflow="saturate")


def quantize(
    x: ArrayLike,
    elem: str,
    *,
    block: int = 32,
    axis: int = -1,
    scale_rule: ScaleRule | str = ScaleRule.FLOOR,
    scale_overflow: ScaleOverflow | str = ScaleOverflow.NAN,
) -> tuple[NDArray[np.uint8], NDArray[np.uint8]]:
    """MX-quantize `x` in blocks of `block` along `axis`.

    x: [..., n, ...] float32 or float16, n a multiple of block. Returns (codes, scales):
    codes [..., n, ...] uint8 element codes (MXINT8: the int8 two's complement bits),
    scales [..., n / block, ...] uint8 E8M0 codes.
    """
    x = np.asarray(x)
    if x.dtype not in (np.float16, np.float32):
        raise TypeError(f"x: expected float32 or float16, got {x.dtype}")
    blocks = _blocks(x.astype(np.float32), block, axis, "x")  # [..., nb, block]
    amax = np.max(np.abs(blocks), axis=-1)  # NaN propagates
    scales = scale_exponents(amax, elem, rule=scale_rule, scale_overflow=scale_overflow)
    exponent = scales.astype(np.int64) - 127
    # A power-of-two division, exact in float32 except where the quotient falls below
    # 2^-126, far under every element's smallest subnormal, so it rounds to zero anyway.
    q = blocks * np.ldexp(np.float32(1), -exponent)[..., None].astype(np.float32)
    codes = np.where((scales == 0xFF)[..., None], 0, _encode_elements(q, elem)).astype(np.uint8)
    return _unblocks(codes, axis), np.moveaxis(scales, -1, axis)


def dequantize(
    codes: ArrayLike, scales: ArrayLike, elem: str, *, block: int = 32, axis: int = -1
) -> NDArray[np.float64]:
    """Values element * 2^(scale - 127) as float64 (exact); a NaN scale (0xFF) makes its
    whole block NaN. codes [..., n, ...] uint8, scales [..., n / block, ...] uint8."""
    _element(elem)
    codes, scales = np.asarray(codes), np.asarray(scales)
    for name, a in (("codes", codes), ("scales", scales)):
        if a.dtype != np.uint8:
            raise TypeError(f"{name}: expected uint8, got {a.dtype}")
    blocks = _blocks(codes, block, axis, "codes")
    want = blocks.shape[:-1]
    moved = np.moveaxis(scales, axis, -1)
    if moved.shape != want:
        raise ValueError(f"scales: expected shape {np.moveaxis(np.empty(want), -1, axis).shape}, got {scales.shape}")
    if elem == "int8":
        values = blocks.view(np.int8).astype(np.float64) / 64
    else:
        values = decode(blocks, elem).astype(np.float64)
    out = np.ldexp(values, moved.astype(np.int64)[..., None] - 127)
    out = np.where((moved == 0xFF)[..., None], np.nan, out)
    return _unblocks(out, axis)

"""Stochastic rounding with explicit random bits (`formats.<fmt>.encode_stochastic`)
for the default run: integer arithmetic on the bits of the input, the way a kernel
does it, written independently of the oracles (this module imports nothing from ref
and no cast library).

The input is widened to float64 (exact for float16 and float32) and split into its
sign, binade exponent p and 53-bit significand. The target's quantum at |x| is
2^qe, qe = max(p, emin) - mbits; the significand shifted right by k = qe - e0 bits
(e0: the exponent of its last bit) gives the kept steps n and the discarded bits r.
The discarded bits are aligned to 32 (r << (32 - k), or r >> (k - 32), the bits
below 2^-32 of a step cannot change the carry of an integer sum) and added to the
random bits; a carry out of bit 31 steps the code up by one, which a full mantissa
carries into the exponent, as in hardware:

    code = (max(p, emin) + bias - 1) * 2^mbits + n + carry

Codes past the largest finite one overflow: the largest finite code under
`saturate`, Inf (or NaN where the format has no Inf) under `nonsaturating`.
"""

from __future__ import annotations

from functools import partial

import numpy as np

NAME = "numpy integer stochastic rounding"
VERSION = np.__version__

# name -> (exponent bits, mantissa bits, bias, specials): "ieee" Inf and NaN in the top
# exponent, "fn" no Inf and NaN all ones, "fnuz" no Inf, no -0 and NaN the -0 code,
# "none" finite values only, "e8m0" unsigned exponents with NaN 0xFF and no zero.
FORMATS = {
    "float4_e2m1fn": (2, 1, 1, "none"), "float6_e2m3fn": (2, 3, 1, "none"), "float6_e3m2fn": (3, 2, 3, "none"),
    "float8_e4m3fn": (4, 3, 7, "fn"), "float8_e4m3": (4, 3, 7, "ieee"), "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"), "float8_e5m2fnuz": (5, 2, 16, "fnuz"), "float8_e8m0fnu": (8, 0, 127, "e8m0"),
    "float16": (5, 10, 15, "ieee"), "bfloat16": (8, 7, 127, "ieee"),
}
U64 = np.uint64


def codes_of(fmt: str) -> dict[str, int]:
    """The format's sign mask and its largest finite, Inf and NaN magnitude codes (-1: none)."""
    e, m, _, kind = FORMATS[fmt]
    top = 1 << (e + m)
    if kind == "e8m0":
        return {"sign": 0, "max": 0xFE, "inf": -1, "nan": 0xFF}
    return {"sign": top, "max": {"ieee": ((1 << e) - 1 << m) - 1, "fn": top - 2}.get(kind, top - 1),
            "inf": ((1 << e) - 1 << m) if kind == "ieee" else -1,
            "nan": {"ieee": ((1 << e) - 1 << m) | 1 << max(m - 1, 0), "fn": top - 1, "fnuz": top}.get(kind, -1)}


def split(x: np.ndarray):
    """(negative, binade exponent p, significand, exponent of its last bit) of float64 x."""
    bits = x.view(U64)
    biased = ((bits >> U64(52)) & U64(0x7FF)).astype(np.int64)
    significand = bits & U64((1 << 52) - 1)
    normal = biased != 0
    significand |= normal.astype(U64) << U64(52)
    p = biased - 1023
    if not normal.all():  # zeros and float64 subnormals: p from frexp (exact)
        p = np.where(normal, p, np.frexp(np.abs(x))[1].astype(np.int64) - 1)
    return (bits >> U64(63)) == 1, p, significand, np.maximum(biased, 1) - 1075


def carry(rest: np.ndarray, k: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Whether rest / 2^k + u / 2^32 >= 1 (rest < 2^k, k >= 1; rest < 2^53, so shifting
    it right by 63 leaves nothing)."""
    aligned = np.where(k <= 32, rest << np.clip(32 - k, 0, 32).astype(U64), rest >> np.clip(k - 32, 0, 63).astype(U64))
    return aligned + u >= U64(1 << 32)


def encode_stochastic(x, rbits, *, fmt: str, sr_bits: int = 32, overflow: str | None = None, nan: str = "max",
                      negative: str = "nan", **_):
    x, rbits = np.asarray(x), np.asarray(rbits)
    if x.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"x: expected float16, float32 or float64, got {x.dtype}")
    if rbits.dtype != np.uint32 or rbits.shape != x.shape:
        raise ValueError(f"rbits: expected uint32 of shape {x.shape}, got {rbits.dtype} of shape {rbits.shape}")
    e, m, bias, kind = FORMATS[fmt]
    c = codes_of(fmt)
    if overflow is None:
        overflow = "nonsaturating" if fmt in ("float16", "bfloat16") else "saturate"
    u = (rbits >> np.uint32(32 - sr_bits) << np.uint32(32 - sr_bits)).astype(U64)
    with np.errstate(invalid="ignore"):  # a signalling NaN stays a NaN
        x64 = x.astype(np.float64)
    neg, p, significand, e0 = split(x64)
    emin = -127 if kind == "e8m0" else 1 - bias
    qe = np.maximum(p, emin) - m
    k = np.maximum(qe - e0, 1)  # >= 1 always: a float64 significand is longer than any target's
    shift = np.minimum(k, 63).astype(U64)  # a significand (< 2^53) shifted by 63 is gone
    kept = significand >> shift
    rest = significand & ((U64(1) << shift) - U64(1))
    base = (np.maximum(p, emin) + bias - 1) << m
    mag = base + kept.astype(np.int64) + carry(rest, k, u)
    finite, isnan = np.isfinite(x64), np.isnan(x64)
    mag = np.where(x64 == 0, 0, mag)
    if kind == "e8m0":
        mag = np.where(p < emin, 0, mag)  # below 2^-127 (and zero): the smallest value
    over = ~finite | (mag > c["max"])
    big = c["max"] if overflow == "saturate" else (c["inf"] if c["inf"] >= 0 else c["nan"])
    mag = np.where(over, big, mag)
    sign = np.where(neg, c["sign"], 0)
    if kind == "fnuz":
        sign = np.where(mag == 0, 0, sign)  # no negative zero
    out = sign | mag
    if c["nan"] >= 0:
        nan_code = c["nan"] if kind in ("fnuz", "e8m0") else sign | c["nan"]
    else:
        nan_code = {"max": c["max"], "zero": 0, "zero_flipped_sign": np.where(neg, 0, c["sign"])}[nan]
    out = np.where(isnan, nan_code, out)
    if kind == "e8m0" and negative == "nan":
        out = np.where(neg | (x64 == 0), c["nan"], out)
    return out.astype(np.uint16 if e + m + 1 == 16 else np.uint8)


OPS = {f"formats.{fmt}.encode_stochastic": partial(encode_stochastic, fmt=fmt) for fmt in FORMATS}
_SR = {"sr_bits": [32, 16, 13, 8]}
VARIANTS = {
    "formats.float8_*.encode_stochastic": {**_SR, "overflow": ["saturate", "nonsaturating"]},
    "formats.float16.encode_stochastic": {**_SR, "overflow": ["saturate", "nonsaturating"]},
    "formats.bfloat16.encode_stochastic": {**_SR, "overflow": ["saturate", "nonsaturating"]},
    "formats.float4_e2m1fn.encode_stochastic": {**_SR, "overflow": ["saturate"], "nan": ["max", "zero",
                                                                                      "zero_flipped_sign"]},
    "formats.float6_*.encode_stochastic": {**_SR, "overflow": ["saturate"], "nan": ["max", "zero",
                                                                                 "zero_flipped_sign"]},
    "formats.float8_e8m0fnu.encode_stochastic": {**_SR, "overflow": ["saturate", "nonsaturating"],
                                                 "negative": ["nan", "magnitude"]},
}

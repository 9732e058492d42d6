"""An independent MX codec: scale exponents from float64 frexp, elements through
ml_dtypes' casts of the exactly scaled values. `bugs` switches on one MX kernel bug."""

from __future__ import annotations

import ml_dtypes
import numpy as np

EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float6_e2m3fn": 2, "float6_e3m2fn": 4, "float4_e2m1fn": 2, "int8": 0}
MBITS = {"float8_e4m3fn": 3, "float8_e5m2": 2, "float6_e2m3fn": 3, "float6_e3m2fn": 2, "float4_e2m1fn": 1, "int8": 6}
WIDTH = {"float6_e2m3fn": 6, "float6_e3m2fn": 6, "float4_e2m1fn": 4}  # codes one per byte, bits above are spare


def _as_rows(a, bugs):
    """The 'rank2' bug: a kernel written for [rows, n] views every input as one, and
    returns it that way."""
    return a.reshape(-1, a.shape[-1]) if "rank2" in bugs else a


def _pad(a, bugs):
    """The 'pad_ragged' bug: a ragged last axis padded with zeros to whole blocks of 32."""
    if "pad_ragged" not in bugs or not a.shape[-1] % 32:
        return a
    return np.concatenate([a, np.zeros((*a.shape[:-1], 32 - a.shape[-1] % 32), a.dtype)], axis=-1)


def _max(elem):
    return 127 / 64 if elem == "int8" else float(ml_dtypes.finfo(getattr(ml_dtypes, elem)).max)


def _exponent(amax, elem, rule, bugs):
    """Unclamped shared exponent of finite positive amax (float32), by frexp."""
    a = amax.astype(np.float64)
    m, e = np.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    floor_log2 = e - 1
    if rule == "floor":
        if "log2f" in bugs:
            return np.floor(np.log2(amax)).astype(np.int64) - EMAX[elem]
        return floor_log2 - EMAX[elem]
    if rule == "ceil":
        return floor_log2 + (m != 0.5) - EMAX[elem]
    if rule == "even":
        width = 2 ** (MBITS[elem] + 1)
        carry = np.rint(m * width) == width
        return floor_log2 + carry - EMAX[elem]
    if "rceil_div" in bugs:
        s = (amax / np.float32(_max(elem))).astype(np.float64)
    else:
        s = (amax * np.float32(1 / _max(elem))).astype(np.float64)
    if "rceil_floor" in bugs:
        s = np.where(s > 0, s, 2.0**-127)
        return np.floor(np.log2(s)).astype(np.int64)
    ms, es = np.frexp(s)
    return np.where(s > 0, es - 1 + (ms != 0.5), -127)


def quantize(x, elem, scale_rule="floor", scale_overflow="nan", bugs=()):
    x = np.asarray(x)
    if x.dtype not in ((np.float32,) if "no_float16" in bugs else (np.float32, np.float16)):
        raise TypeError("x: float32 or float16")
    n = x.shape[-1]
    x = _pad(_as_rows(x, bugs), bugs)
    if x.shape[-1] % 32:
        raise ValueError("x: last axis must be a multiple of 32")
    b = x.astype(np.float32).reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
    amax = np.nanmax(np.abs(b), axis=-1) if "nanmax" in bugs else np.max(np.abs(b), axis=-1)
    finite = np.isfinite(amax) & (amax > 0)
    if "inf_exponent_bits" in bugs:  # torchao's FLOOR/CEIL/EVEN: Inf read as 2^128
        finite = finite | np.isinf(amax)
        amax = np.where(np.isinf(amax), np.float32(2.0**127), amax)
    with np.errstate(all="ignore"):
        X = np.where(finite, _exponent(np.where(finite, amax, np.float32(1)), elem, scale_rule, bugs), -127)
    if "inf_exponent_bits" in bugs:
        X = np.where(np.isinf(np.max(np.abs(b), axis=-1)), 128 - EMAX[elem], X)
    if "no_low_clamp" not in bugs:
        X = np.maximum(X, -127)
    big = (X > 127) | np.isinf(amax)
    scales = np.where(big, 0xFE if scale_overflow == "satfinite" else 0xFF, np.clip(X, -127, 127) + 127)
    scales = np.where(np.isnan(amax), 0xFF, scales) & 0xFF
    divisor = 2.0 ** (scales.astype(np.int64) - 127)
    if "smallest_normal" in bugs:  # the scale clamped to float32's smallest normal
        divisor = np.maximum(divisor, 2.0**-126)
    if "unit_at_zero" in bugs:  # scale code 0 read as x1
        divisor = np.where(scales == 0, 1.0, divisor)
    q = b.astype(np.float64) / divisor[..., None]
    top = _max(elem)
    if "no_saturation" not in bugs:
        q = np.clip(q, -top, top)
    with np.errstate(all="ignore"):
        if elem == "int8":
            k = np.round(q * 64) if "half_away" not in bugs else np.sign(q) * np.floor(np.abs(q * 64) + 0.5)
            codes = np.nan_to_num(np.clip(k, -127, 127)).astype(np.int8).view(np.uint8)
        else:
            q32 = q.astype(np.float32)
            if "half_away" in bugs:
                q32 = _ties_away(q32, elem)
            codes = q32.astype(getattr(ml_dtypes, elem)).view(np.uint8)
    codes = np.where((scales == 0xFF)[..., None], 0, codes).astype(np.uint8)
    return codes.reshape(x.shape)[..., :n], scales.astype(np.uint8)


def _ties_away(q32, elem):
    """Move exact ties one float32 ulp away from zero, so the cast rounds them away."""
    vals = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, elem)).astype(np.float32)))
    vals = vals[np.isfinite(vals)]
    tie = np.isin(np.abs(q32), (vals[:-1] + vals[1:]) / 2)
    return np.where(tie, np.nextafter(q32, np.copysign(np.float32(np.inf), q32)), q32)


def dequantize(codes, scales, elem, bugs=()):
    codes, scales = np.asarray(codes), np.asarray(scales)
    if codes.dtype != np.uint8 or scales.dtype != np.uint8:
        raise TypeError("uint8 codes and scales")
    if elem in WIDTH:
        if "mask_dirty" in bugs:
            codes = codes & ((1 << WIDTH[elem]) - 1)
        elif (codes >> WIDTH[elem]).any():
            raise ValueError(f"codes: {elem} codes have bits above bit {WIDTH[elem] - 1} set")
    n = codes.shape[-1]
    codes, scales = _pad(_as_rows(codes, bugs), bugs), _as_rows(scales, bugs)
    if codes.shape[-1] % 32:
        raise ValueError("codes: last axis must be a multiple of 32")
    b = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 32, 32)
    if scales.shape != b.shape[:-1]:
        raise ValueError("scales: wrong shape")
    v = b.view(np.int8) / 64 if elem == "int8" else b.view(getattr(ml_dtypes, elem)).astype(np.float64)
    if "float32" in bugs or "float32_ftz" in bugs:  # a float32 kernel: one rounding of the exact product
        with np.errstate(over="ignore", invalid="ignore"):
            out = v.astype(np.float32) * np.ldexp(np.float32(1), scales.astype(np.int32) - 127)[..., None]
        if "float32_ftz" in bugs:
            out = np.where(np.abs(out) < np.finfo(np.float32).tiny, np.float32(0), out)
    else:
        out = v * 2.0 ** (scales.astype(np.float64) - 127)[..., None]
    out = np.where((scales == 0xFF)[..., None], np.nan, out)
    return out.reshape(codes.shape)[..., :n]

"""The MX bug corpus: the default run's MX codec (ref.conformance.adapters.numpy_blocks:
frexp scales, ml_dtypes element casts), composed from its steps here with one step
swapped for a buggy one when `bugs` names it (or, for "float32", a correct float32
dequantizer). With no bugs it is the product codec."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ref.conformance.adapters import numpy_blocks as nb

EMAX, MBITS, WIDTH = nb.EMAX, nb.MBITS, nb.WIDTH


def _as_rows(a, bugs):
    """The 'rank2' bug: a kernel written for [rows, n] views every input as one, and
    returns it that way."""
    return a.reshape(-1, a.shape[-1]) if "rank2" in bugs else a


def _pad(a, bugs):
    """The 'pad_ragged' bug: a ragged last axis padded with zeros to whole blocks of 32."""
    if "pad_ragged" not in bugs or not a.shape[-1] % 32:
        return a
    return np.concatenate([a, np.zeros((*a.shape[:-1], 32 - a.shape[-1] % 32), a.dtype)], axis=-1)


def _exponent(amax, elem, rule, bugs):
    """Unclamped shared exponent of finite positive amax (float32)."""
    if rule == "floor" and "log2f" in bugs:
        return np.floor(np.log2(amax)).astype(np.int64) - EMAX[elem]
    if rule == "rceil" and "rceil_div" in bugs:
        return nb.ceil_log2((amax / np.float32(nb.element_max(elem))).astype(np.float64))
    if rule == "rceil" and "rceil_floor" in bugs:
        s = (amax * np.float32(1 / nb.element_max(elem))).astype(np.float64)
        return np.floor(np.log2(np.where(s > 0, s, 2.0**-127))).astype(np.int64)
    return nb.mx_exponent(amax, elem, rule)


def _elements(q, elem, bugs):
    """Element codes of the scaled values; 'no_saturation' skips the clip, 'half_away'
    rounds ties away from zero."""
    if "no_saturation" not in bugs and "half_away" not in bugs:
        return nb.mx_elements(q, elem)
    top = nb.element_max(elem)
    if "no_saturation" not in bugs:
        q = np.clip(q, -top, top)
    with np.errstate(all="ignore"):
        if elem == "int8":
            k = np.sign(q) * np.floor(np.abs(q * 64) + 0.5) if "half_away" in bugs else np.round(q * 64)
            return np.nan_to_num(np.clip(k, -127, 127)).astype(np.int8).view(np.uint8)
        q32 = q.astype(np.float32)
        if "half_away" in bugs:
            q32 = _ties_away(q32, elem)
        return q32.astype(getattr(ml_dtypes, elem)).view(np.uint8)


def quantize(x, elem, scale_rule="floor", scale_overflow="nan", bugs=()):
    x = np.asarray(x)
    if "no_float16" in bugs and x.dtype != np.float32:
        raise TypeError("x: this kernel takes float32 only")
    if not bugs:
        return nb.mx_quantize(x, elem=elem, scale_rule=scale_rule, scale_overflow=scale_overflow)
    n = x.shape[-1] if x.ndim else 0
    x = _pad(_as_rows(x, bugs), bugs)
    nb.mx_check_input(x)
    b = x.astype(np.float32).reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
    amax = np.nanmax(np.abs(b), axis=-1) if "nanmax" in bugs else np.max(np.abs(b), axis=-1)
    usable = np.isfinite(amax) & (amax > 0)
    if "inf_exponent_bits" in bugs:  # torchao's FLOOR/CEIL/EVEN: Inf read as 2^128
        usable = usable | np.isinf(amax)
        amax = np.where(np.isinf(amax), np.float32(2.0**127), amax)
    with np.errstate(all="ignore"):
        exponent = np.where(usable, _exponent(np.where(usable, amax, np.float32(1)), elem, scale_rule, bugs), -127)
    if "inf_exponent_bits" in bugs:
        exponent = np.where(np.isinf(np.max(np.abs(b), axis=-1)), 128 - EMAX[elem], exponent)
    scales = nb.mx_scales(amax, exponent, scale_overflow)
    divisor = 2.0 ** (scales.astype(np.int64) - 127)
    if "smallest_normal" in bugs:  # the scale clamped to float32's smallest normal
        divisor = np.maximum(divisor, 2.0**-126)
    if "unit_at_zero" in bugs:  # scale code 0 read as x1
        divisor = np.where(scales == 0, 1.0, divisor)
    codes = _elements(b.astype(np.float64) / divisor[..., None], elem, bugs)
    codes = np.where((scales == 0xFF)[..., None], 0, codes).astype(np.uint8)
    return codes.reshape(x.shape)[..., :n], scales


def _ties_away(q32, elem):
    """Move exact ties one float32 ulp away from zero, so the cast rounds them away."""
    vals = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, elem)).astype(np.float32)))
    vals = vals[np.isfinite(vals)]
    tie = np.isin(np.abs(q32), (vals[:-1] + vals[1:]) / 2)
    return np.where(tie, np.nextafter(q32, np.copysign(np.float32(np.inf), q32)), q32)


def dequantize(codes, scales, elem, bugs=()):
    codes, scales = np.asarray(codes), np.asarray(scales)
    if not bugs:
        return nb.mx_dequantize(codes, scales, elem=elem)
    if "mask_dirty" in bugs and elem in WIDTH and codes.dtype == np.uint8:
        codes = codes & np.uint8((1 << WIDTH[elem]) - 1)
    n = codes.shape[-1] if codes.ndim else 0
    codes, scales = _pad(_as_rows(codes, bugs), bugs), _as_rows(scales, bugs)
    nb.mx_check_codes(codes, scales, elem)
    b = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 32, 32)
    v = nb.mx_values(b, elem)
    if "float32" in bugs or "float32_ftz" in bugs:  # a float32 kernel: one rounding of the exact product
        with np.errstate(over="ignore", invalid="ignore"):
            out = v.astype(np.float32) * np.ldexp(np.float32(1), scales.astype(np.int32) - 127)[..., None]
        if "float32_ftz" in bugs:  # ... flushing subnormal results to zero
            out = np.where(np.abs(out) < np.finfo(np.float32).tiny, np.float32(0), out)
    else:
        out = v * 2.0 ** (scales.astype(np.float64) - 127)[..., None]
    out = np.where((scales == 0xFF)[..., None], np.nan, out)
    return out.reshape(codes.shape)[..., :n]

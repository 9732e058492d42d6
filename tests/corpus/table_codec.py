"""An independent element codec: nearest-neighbour search in the table of values.

No bit arithmetic at all: |x| is placed between its two neighbouring values with
searchsorted and the rounding rule is decided by comparing float64 distances, which
are exact here (neighbours are adjacent format values, so 2|x| and lo + hi are
exact). `bugs` switches on one plausible kernel bug at a time, for the corpus.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ref.formats.minifloat import FORMATS, get_format


@lru_cache(maxsize=None)
def _table(name):
    """Positive finite values (ascending) with their codes, zero first if the format has it."""
    f = get_format(name)
    codes = np.arange(1 << (f.nbits - (1 if f.signed else 0)), dtype=np.int64)
    mags = []
    for c in codes:
        e, m = int(c) >> f.mbits, int(c) & ((1 << f.mbits) - 1)
        if c > f.max_code:
            continue
        if e == 0 and f.has_subnormals:
            mags.append(m / (1 << f.mbits) * 2.0 ** f.emin)
        else:
            mags.append((1 + m / (1 << f.mbits)) * 2.0 ** (e - f.bias))
    return np.array(mags), codes[: len(mags)]


def encode(x, fmt, rounding="nearest_even", overflow=None, nan="max", negative="nan", bugs=()):
    with np.errstate(all="ignore"):
        return _encode(x, fmt, rounding, overflow, nan, None, negative, bugs)


def encode_stochastic(x, rbits, fmt, sr_bits=32, overflow=None, nan="max", negative="nan", bugs=()):
    """Stochastic rounding: up iff (|x| - lo) / (hi - lo) + rbits / 2^32 >= 1, in float64."""
    if np.asarray(rbits).dtype != np.uint32:
        raise ValueError("rbits: uint32 expected")
    drop = 32 - int(sr_bits)
    rbits = np.asarray(rbits) // (1 << drop) * (1 << drop)  # keep the top sr_bits
    with np.errstate(all="ignore"):
        return _encode(x, fmt, "stochastic", overflow, nan, rbits, negative, bugs)


def _encode(x, fmt, rounding, overflow, nan, rbits, negative, bugs):
    f = get_format(fmt)
    x = np.asarray(x)
    if x.dtype.kind != "f":
        raise TypeError(f"x: expected floats, got {x.dtype}")
    if overflow is None:
        overflow = "nonsaturating" if fmt in ("float16", "bfloat16") else "saturate"
    if "double_round" in bugs and x.dtype == np.float64:
        x = x.astype(np.float32)
    vals, codes = _table(f.name)
    ax = np.abs(x.astype(np.float64))
    neg = np.signbit(x) & (negative == "nan")
    if "daz" in bugs:
        ax = np.where(ax < np.finfo(x.dtype).tiny, 0.0, ax)
    finite = np.isfinite(ax)
    axf = np.where(finite, ax, 0.0)
    i = np.clip(np.searchsorted(vals, axf, side="right") - 1, 0, len(vals) - 1)
    lo = vals[i]
    below = axf < vals[0]  # only without zero (E8M0): nothing below
    ulp_top = 2.0 ** (f.emax - f.mbits)
    hi = np.where(i + 1 < len(vals), vals[np.minimum(i + 1, len(vals) - 1)], vals[-1] + ulp_top)
    inexact = (axf != lo) & ~below
    twice, mid = 2 * axf, lo + hi
    lo_odd = (codes[i] & 1) == 1
    tie_up = "half_away" in bugs
    if rounding == "nearest_even":
        up = (twice > mid) | ((twice == mid) & (lo_odd | tie_up))
        if "truncate" in bugs:
            up = np.zeros_like(up)
    elif rounding == "nearest_away":
        up = twice >= mid
    elif rounding == "toward_zero":
        up = np.zeros(ax.shape, bool)
    elif rounding == "toward_positive":
        up = ~neg
        if "e8m0_floor" in bugs:
            up = np.zeros(ax.shape, bool)
    elif rounding == "toward_negative":
        up = neg
    elif rounding == "stochastic":
        if np.shape(rbits) != x.shape and "no_rbits_check" not in bugs:
            raise ValueError("rbits: one uint32 per element of x")
        u = np.broadcast_to(np.asarray(rbits), x.shape).astype(np.float64)
        if "sr_lsb" in bugs:  # 16 random bits placed at the bottom instead of the top
            u = np.floor(u / 2.0**16)
        if "sr_strict" in bugs:
            up = (axf - lo) * 2.0**32 > (2.0**32 - u) * (hi - lo)
        else:
            up = (axf - lo) * 2.0**32 >= (2.0**32 - u) * (hi - lo)
    else:
        raise ValueError(f"rounding: {rounding!r}")
    up = up & inexact
    over_hi = axf >= vals[-1] + ulp_top  # beyond the virtual next value
    code = np.where(up, np.minimum(i + 1, len(vals) - 1), i)
    mag = codes[code]
    overflowed = (up & (i == len(vals) - 1)) | over_hi | np.isinf(ax)
    if "sat_at_max" in bugs:
        overflowed |= axf > vals[-1]
    if below.any():
        mag = np.where(below, codes[0], mag)
    toward_zero = {"toward_zero": np.ones_like(neg), "toward_positive": neg, "toward_negative": ~neg}.get(
        rounding, np.zeros_like(neg))
    if overflow == "saturate" and "overflow_nan" not in bugs:
        over = f.max_code
    else:
        big = f.inf_code if f.has_inf else f.nan_code
        over = np.where(toward_zero & ~np.isinf(ax), f.max_code, big)
        if "inf_to_max" in bugs:
            over = np.where(np.isinf(ax), f.max_code, over)
    mag = np.where(overflowed, over, mag)
    if "dirty_sign" in bugs and f.nbits < 8:  # sign written to bit 7 of the byte
        mag = mag | np.where(neg, 0x80, 0)
    if "ftz" in bugs:
        mag = np.where(mag < (1 << f.mbits), 0, mag)
    sign = np.where(neg, f.sign_mask, 0)
    if not f.has_negative_zero and "fnuz_neg_zero" not in bugs:
        sign = np.where(mag == 0, 0, sign)
    if "lose_neg_zero" in bugs:
        sign = np.where(mag == 0, 0, sign)
    out = (sign if "dirty_sign" not in bugs or f.nbits >= 8 else 0) | mag
    isnan = np.isnan(ax)
    if f.has_nan:
        nan_code = f.nan_code if f.nan.value == "negative_zero" else (sign | f.nan_code)
        if "nan_to_zero" in bugs:
            nan_code = 0
    else:
        nan_code = {"max": f.max_code, "zero": 0, "zero_flipped_sign": np.where(neg, 0, f.sign_mask)}[nan]
    out = np.where(isnan, nan_code, out)
    if not f.has_zero and negative == "nan":
        out = np.where(ax == 0, f.nan_code, out)
    if not f.signed:
        out = np.where(neg, f.nan_code, out)
    return out.astype(f.code_dtype)


def decode(codes, fmt, bugs=()):
    f = get_format(fmt)
    codes = np.asarray(codes)
    if codes.dtype != f.code_dtype:
        raise TypeError(f"codes: expected {f.code_dtype}, got {codes.dtype}")
    if f.nbits < 8 and codes.size and int(codes.max()) >> f.nbits:
        raise ValueError("codes: high bits set")
    c = codes.astype(np.int64)
    mag = c & ~f.sign_mask
    e, m = mag >> f.mbits, mag & ((1 << f.mbits) - 1)
    bias = f.bias - 1 if "bias_off_by_one" in bugs else f.bias
    sub = (e == 0) & f.has_subnormals & ("subnormal_as_normal" not in bugs)
    v = np.where(sub, m / (1 << f.mbits) * 2.0 ** (1 - bias),
                 (1 + m / (1 << f.mbits)) * 2.0 ** (e.astype(np.float64) - bias))
    if f.has_inf:
        v = np.where(mag == f.inf_code, np.inf, v)
    if "nan_as_number" not in bugs:
        v = np.where(f.is_nan_code(c), np.nan, v)
    v = np.where((c & f.sign_mask) != 0, -v, v)
    return v.astype(np.float32)


def pack(codes, order="low_first", bugs=()):
    """FP4 packing by arithmetic on pairs, not shifts of strided views."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError("codes: expected uint8")
    if codes.ndim == 0 or codes.shape[-1] % 2:
        raise ValueError("codes: odd last axis")
    if codes.size and codes.max() > 15 and "no_range_check" not in bugs:
        raise ValueError("codes: above 15")
    pairs = codes.reshape(*codes.shape[:-1], -1, 2).astype(np.int64)
    weights = np.array([1, 16] if (order == "low_first") != ("swap" in bugs) else [16, 1])
    return (pairs @ weights % 256).astype(np.uint8)


def unpack(packed, order="low_first", bugs=()):
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise TypeError("packed: expected uint8")
    low, high = packed % 16, packed // 16
    first, second = (low, high) if (order == "low_first") != ("swap" in bugs) else (high, low)
    return np.stack([first, second], -1).reshape(*packed.shape[:-1], 2 * packed.shape[-1]).astype(np.uint8)


FORMAT_NAMES = tuple(FORMATS)

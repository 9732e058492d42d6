"""The NVFP4 bug corpus on the default run's NVFP4 codec
(ref.conformance.adapters.numpy_blocks: each recipe's float32 steps with ml_dtypes'
casts). With no bugs every function here is the product's; with `bugs` the recipe's
steps are written out below with the named step changed, from the product's pieces
(the E4M3 cast, the Hadamard transform, the E2M1 grid)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ref.conformance.adapters import numpy_blocks as nb

F = np.float32
_e4m3 = nb.e4m3
SIGNS, H16, E2M1_GRID = nb.SIGNS, nb.H16, nb.E2M1_GRID


def hadamard(x, bugs=()):
    return nb.hadamard(x, np.ones(16) if "no_signs" in bugs else nb.SIGNS)


def _as_rows(a, bugs):
    """The 'rank2' bug: every input viewed as [rows, n], and the results left that way."""
    return a.reshape(-1, a.shape[-1]) if "rank2" in bugs else a


def _pad(a, bugs):
    """The 'pad_ragged' bug: a ragged last axis padded with zeros to whole blocks of 16."""
    if "pad_ragged" not in bugs or not a.shape[-1] % 16:
        return a
    return np.concatenate([a, np.zeros((*a.shape[:-1], 16 - a.shape[-1] % 16), a.dtype)], axis=-1)


def stochastic_e2m1(q, rbits, bugs=()):
    """E2M1 codes of q (float32, |q| <= 6) rounded up in magnitude iff the fraction of
    |q| between its grid neighbours plus R / 256 reaches 1, R the top byte of rbits
    (in float64, exact for these values). Bugs: 'sr_all_bits' reads all 32 bits,
    'sr_nearest' ignores the bits."""
    if "sr_all_bits" not in bugs and "sr_nearest" not in bugs:
        return nb.stochastic_e2m1(q, rbits)
    a = np.abs(q.astype(np.float64))
    i = np.clip(np.searchsorted(E2M1_GRID, a, side="right") - 1, 0, 6)
    lo, hi = E2M1_GRID[i], E2M1_GRID[i + 1]
    frac = (a - lo) / (hi - lo)
    if "sr_all_bits" in bugs:
        r = rbits.astype(np.float64) / 2.0**32
    else:
        r = (rbits >> 24).astype(np.float64) / 256
    up = frac + r >= 1
    mag = np.where(a >= 6, 6.0, np.where(up, hi, lo))
    if "sr_nearest" in bugs:
        mag = np.abs(q).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)
    out = np.copysign(mag, q).astype(F)
    return out.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)


def quantize_stochastic(x, rbits, recipe="transformer_engine", tile_2d=False, rht=False, bugs=()):
    """quantize's scales, then the elements rounded by the top byte of each random word."""
    rbits = np.asarray(rbits)
    if rbits.dtype != np.uint32 or rbits.shape != np.shape(x):
        raise ValueError("rbits: uint32, one per element of x")
    return quantize(x, recipe=recipe, tile_2d=tile_2d, rht=rht, bugs=bugs, rbits=rbits)


def quantize(x, recipe="transformer_engine", global_amax=None, tile_2d=False, bugs=(), rht=False, rbits=None):
    x = np.asarray(x)
    if not bugs:
        if rbits is None:
            return nb.nvfp4_quantize(x, recipe=recipe, global_amax=global_amax, tile_2d=tile_2d, rht=rht)
        return nb.nvfp4_quantize_stochastic(x, rbits, recipe=recipe, tile_2d=tile_2d, rht=rht)
    if x.dtype not in ((F,) if "no_float16" in bugs else (F, np.float16)):
        raise TypeError("x: float32 or float16")
    n = x.shape[-1]
    x = _pad(_as_rows(x, bugs), bugs).astype(F)
    if x.shape[-1] % 16:
        raise ValueError("x: last axis must be a multiple of 16")
    if rht:
        x = hadamard(x, bugs)
    if x.shape[-1] % 16:
        raise ValueError("x: last axis must be a multiple of 16")
    amax = F(np.abs(x).max()) if global_amax is None and x.size else F(global_amax or 0)
    b = np.abs(x.reshape(*x.shape[:-1], x.shape[-1] // 16, 16)).max(-1)
    if tile_2d:
        t = b.reshape(*b.shape[:-2], -1, 16, b.shape[-1]).max(-2)
        b = np.repeat(t, 16, axis=-2)
    with np.errstate(all="ignore"):
        if recipe.startswith("torchao"):
            p = amax / F(2688)
            g = p if (p > 0 and np.isfinite(p)) or "raw_global" in bugs else F(1)
            s = (b / F(6)) / g
            s = np.clip(s, F(2.0**-6), F(448)) if "no_clamp" not in bugs else np.minimum(s, F(448))
            sb = _e4m3(s)
            d = (g * sb.astype(F))[..., None]
            blocks = x.reshape(*b.shape, 16)
            if recipe == "torchao_0_13":
                q = blocks * (F(1) / d) if "reciprocal" in bugs else blocks / d
            elif "old_order" in bugs:
                q = blocks / d
            else:
                q = blocks * ((F(1) / g) / sb.astype(F))[..., None]
        else:
            g = F(2688) / amax
            g = min(g, np.finfo(F).max)
            g = g if (amax > 0 and g > 0 and np.isfinite(amax)) else F(1)
            if recipe == "transformer_engine":
                t = g * F(1 / 6) if "no_recip_six" not in bugs else g / F(6)
                t_b = b * t if "clamp_2m6" not in bugs else np.maximum(b * t, F(2.0**-6))
                sb = _e4m3(t_b) if "no_e4m3" not in bugs else t_b
                sbf = sb.astype(F)
                r = np.minimum(F(1) / (sbf * (F(1) / g)), np.finfo(F).max)
            else:
                sb = _e4m3(g * (b * F(1 / 6)))
                d = sb.astype(F) * (F(1) / g)
                r = np.where(d == 0, F(0), F(1) / d)
            q = x.reshape(*b.shape, 16) * F(r)[..., None] if np.ndim(r) == 0 else x.reshape(*b.shape, 16) * r[..., None]
        q = np.clip(q, F(-6), F(6)).reshape(x.shape)
        if rbits is None:
            codes = q.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
        else:
            codes = stochastic_e2m1(q, rbits.reshape(q.shape), bugs)
    sb = np.asarray(sb)
    scales = sb.view(np.uint8) if sb.dtype == ml_dtypes.float8_e4m3fn else _e4m3(sb).view(np.uint8)
    return codes[..., :n], scales, F(g)


def dequantize(codes, scales, global_scale, recipe="transformer_engine", order="exact", bugs=()):
    """e * sb * d: float64 (exact), or float32 with the scales multiplied first
    (torchao); `bugs` swaps one order for the other."""
    codes, scales = np.asarray(codes), np.asarray(scales)
    if not bugs:
        return nb.nvfp4_dequantize(codes, scales, global_scale, recipe=recipe, order=order)
    if "mask_dirty" in bugs and codes.dtype == np.uint8:
        codes = codes & 0xF
    if codes.dtype != np.uint8 or scales.dtype != np.uint8 or (codes.size and codes.max() > 15):
        raise TypeError("codes, scales: uint8 codes (E2M1 in the low 4 bits) and E4M3 scales")
    n = codes.shape[-1]
    codes, scales = _pad(_as_rows(codes, bugs), bugs), _as_rows(scales, bugs)
    g = F(global_scale)
    if not (np.isfinite(g) and g > 0):
        raise ValueError("global_scale: a positive finite float32")
    if scales.shape != (*codes.shape[:-1], codes.shape[-1] // 16) or codes.shape[-1] % 16:
        raise ValueError("scales: one per 16 codes")
    d = g if recipe.startswith("torchao") else F(1) / g
    if not np.isfinite(d):
        raise ValueError("global_scale: 1/g overflows")
    e = codes.view(ml_dtypes.float4_e2m1fn).astype(F).reshape(*scales.shape, 16)
    sb = scales.view(ml_dtypes.float8_e4m3fn).astype(F)[..., None]
    scale_first = (order == "scale_first") != ("swapped_order" in bugs)
    with np.errstate(over="ignore", invalid="ignore"):
        if scale_first:
            out = e * (d * sb)
        elif order == "scale_first":  # the exact product e * sb (6 bits), then one rounding
            out = (e * sb) * d
        else:
            out = e.astype(np.float64) * sb.astype(np.float64) * np.float64(d)
    return out.reshape(codes.shape)[..., :n]

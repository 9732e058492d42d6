"""MX and NVFP4 block codecs for the default run, composed the way a kernel composes
them and written independently of the oracles (this module imports nothing from ref):

- MX: a block's amax, its shared exponent from float64 `frexp` (floor, ceil, even)
  or from the float32 product amax * f32(1/max) rounded up to a power of two
  (rceil), the elements divided by the exact power of two, clipped to the element's
  largest value and cast by ml_dtypes (round to nearest even); MXINT8 by np.round
  of x * 64. Dequantize: the element's value times 2^(scale - 127), in float64.
- NVFP4: each recipe's float32 steps in its own order, E4M3 block scales by
  ml_dtypes' cast after clipping to +-448 (what .satfinite does), E2M1 elements by
  ml_dtypes' cast (it saturates at 6), stochastic E2M1 rounding by a search of the
  eight E2M1 magnitudes and the top byte of each random word, the Hadamard transform
  by Sylvester's construction.

The steps are public functions so that the bug corpus (tests/corpus) composes its
wrong kernels from the same code with one step changed.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

NAME = "numpy+ml_dtypes block codecs"
VERSION = f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}"

F = np.float32

# MX elements: the largest exponent (emax) and mantissa bits of each; MXINT8 is 1.xxxxxx.
EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float6_e2m3fn": 2, "float6_e3m2fn": 4, "float4_e2m1fn": 2, "int8": 0}
MBITS = {"float8_e4m3fn": 3, "float8_e5m2": 2, "float6_e2m3fn": 3, "float6_e3m2fn": 2, "float4_e2m1fn": 1, "int8": 6}
WIDTH = {"float6_e2m3fn": 6, "float6_e3m2fn": 6, "float4_e2m1fn": 4}  # codes one per byte, bits above are spare
MX_NAMES = {"float8_e4m3fn": "mxfp8_e4m3", "float8_e5m2": "mxfp8_e5m2", "float6_e2m3fn": "mxfp6_e2m3",
            "float6_e3m2fn": "mxfp6_e3m2", "float4_e2m1fn": "mxfp4", "int8": "mxint8"}
BLOCK = 32


def element_max(elem: str) -> float:
    """The element's largest magnitude: 127/64 for MXINT8, ml_dtypes' finfo max otherwise."""
    return 127 / 64 if elem == "int8" else float(ml_dtypes.finfo(getattr(ml_dtypes, elem)).max)


def mx_exponent(amax: np.ndarray, elem: str, rule: str) -> np.ndarray:
    """The unclamped shared exponent of finite positive float32 amax."""
    m, e = np.frexp(amax.astype(np.float64))  # amax = m 2^e, m in [0.5, 1)
    floor_log2 = e - 1
    if rule == "floor":
        return floor_log2 - EMAX[elem]
    if rule == "ceil":
        return floor_log2 + (m != 0.5) - EMAX[elem]
    if rule == "even":  # amax rounded to the element's mantissa width first: a carry moves it up
        width = 2 ** (MBITS[elem] + 1)
        return floor_log2 + (np.rint(m * width) == width) - EMAX[elem]
    return ceil_log2((amax * F(1 / element_max(elem))).astype(np.float64))  # rceil: the float32 product


def ceil_log2(s: np.ndarray) -> np.ndarray:
    """The exponent of s >= 0 rounded up to a power of two (-127 for zero)."""
    ms, es = np.frexp(s)
    return np.where(s > 0, es - 1 + (ms != 0.5), -127)


def mx_check_input(x: np.ndarray) -> None:
    if x.dtype not in (F, np.float16):
        raise TypeError(f"x: expected float32 or float16, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] % BLOCK:
        raise ValueError(f"x: the last axis must be a multiple of {BLOCK}, got shape {x.shape}")


def mx_scales(amax: np.ndarray, exponent: np.ndarray, scale_overflow: str) -> np.ndarray:
    """E8M0 scale codes from the blocks' amax and unclamped exponents: clamped below at
    -127; NaN blocks 0xFF; Inf blocks and exponents past 127: 0xFF, or 0xFE (satfinite)."""
    x = np.maximum(exponent, -127)
    big = (x > 127) | np.isinf(amax)
    scales = np.where(big, 0xFE if scale_overflow == "satfinite" else 0xFF, np.clip(x, -127, 127) + 127)
    return (np.where(np.isnan(amax), 0xFF, scales) & 0xFF).astype(np.uint8)


def mx_elements(q: np.ndarray, elem: str) -> np.ndarray:
    """Element codes of the scaled values q (float64), clipped to the element's range."""
    top = element_max(elem)
    q = np.clip(q, -top, top)
    with np.errstate(all="ignore"):
        if elem == "int8":
            return np.nan_to_num(np.clip(np.round(q * 64), -127, 127)).astype(np.int8).view(np.uint8)
        return q.astype(F).astype(getattr(ml_dtypes, elem)).view(np.uint8)


def mx_quantize(x, *, elem: str, scale_rule: str = "floor", scale_overflow: str = "nan", **_):
    """x [..., 32k] float32/float16 -> (element codes [..., 32k] uint8, E8M0 scales [..., k])."""
    x = np.asarray(x)
    mx_check_input(x)
    b = x.astype(F).reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    amax = np.max(np.abs(b), axis=-1)
    usable = np.isfinite(amax) & (amax > 0)
    with np.errstate(all="ignore"):
        exponent = np.where(usable, mx_exponent(np.where(usable, amax, F(1)), elem, scale_rule), -127)
    scales = mx_scales(amax, exponent, scale_overflow)
    divisor = 2.0 ** (scales.astype(np.int64) - 127)
    codes = mx_elements(b.astype(np.float64) / divisor[..., None], elem)
    codes = np.where((scales == 0xFF)[..., None], 0, codes).astype(np.uint8)
    return codes.reshape(x.shape), scales


def mx_check_codes(codes: np.ndarray, scales: np.ndarray, elem: str) -> None:
    if codes.dtype != np.uint8 or scales.dtype != np.uint8:
        raise TypeError(f"codes, scales: expected uint8, got {codes.dtype} and {scales.dtype}")
    if elem in WIDTH and codes.size and int(codes.max()) >> WIDTH[elem]:
        raise ValueError(f"codes: {elem} codes have bits above bit {WIDTH[elem] - 1} set")
    if codes.ndim == 0 or codes.shape[-1] % BLOCK:
        raise ValueError(f"codes: the last axis must be a multiple of {BLOCK}, got shape {codes.shape}")
    want = (*codes.shape[:-1], codes.shape[-1] // BLOCK)
    if scales.shape != want:
        raise ValueError(f"scales: expected one per {BLOCK} codes, shape {want}, got {scales.shape}")


def mx_values(blocks: np.ndarray, elem: str) -> np.ndarray:
    """The elements' values (float64) of uint8 codes."""
    return blocks.view(np.int8) / 64 if elem == "int8" else blocks.view(getattr(ml_dtypes, elem)).astype(np.float64)


def mx_dequantize(codes, scales, *, elem: str, **_):
    """(codes [..., 32k], scales [..., k]) -> float64 values, NaN where the scale is 0xFF."""
    codes, scales = np.asarray(codes), np.asarray(scales)
    mx_check_codes(codes, scales, elem)
    b = codes.reshape(*codes.shape[:-1], codes.shape[-1] // BLOCK, BLOCK)
    out = mx_values(b, elem) * 2.0 ** (scales.astype(np.float64) - 127)[..., None]
    return np.where((scales == 0xFF)[..., None], np.nan, out).reshape(codes.shape)


# ---------------------------------------------------------------- NVFP4

E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
SIGNS = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], np.float64)  # TE's RHT signs
H16 = np.kron(np.kron(np.kron([[1.0, 1.0], [1.0, -1.0]], [[1.0, 1.0], [1.0, -1.0]]), [[1.0, 1.0], [1.0, -1.0]]),
              [[1.0, 1.0], [1.0, -1.0]])  # Sylvester's construction
NV_BLOCK = 16


def e4m3(v) -> np.ndarray:
    """float32 -> E4M3 (ml_dtypes), clipped to +-448 first as .satfinite does."""
    with np.errstate(invalid="ignore"):
        return np.clip(v, F(-448), F(448)).astype(ml_dtypes.float8_e4m3fn)


def hadamard(x: np.ndarray, signs: np.ndarray = SIGNS) -> np.ndarray:
    """Each 16 elements times diag(signs) H16 / 4, in float64, rounded to float32."""
    chunks = x.astype(np.float64).reshape(*x.shape[:-1], x.shape[-1] // NV_BLOCK, NV_BLOCK)
    return ((chunks * signs) @ H16 / 4).reshape(x.shape).astype(F)


def stochastic_e2m1(q: np.ndarray, rbits: np.ndarray) -> np.ndarray:
    """E2M1 codes of q (float32, |q| <= 6), rounded up in magnitude iff the fraction of
    |q| between its grid neighbours plus R / 256 reaches 1, R the top byte of rbits."""
    a = np.abs(q.astype(np.float64))
    i = np.clip(np.searchsorted(E2M1_GRID, a, side="right") - 1, 0, 6)
    lo, hi = E2M1_GRID[i], E2M1_GRID[i + 1]
    up = (a - lo) / (hi - lo) + (rbits >> 24).astype(np.float64) / 256 >= 1
    mag = np.where(a >= 6, 6.0, np.where(up, hi, lo))
    return np.copysign(mag, q).astype(F).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)


def nvfp4_check_input(x: np.ndarray) -> None:
    if x.dtype not in (F, np.float16):
        raise TypeError(f"x: expected float32 or float16, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] % NV_BLOCK:
        raise ValueError(f"x: the last axis must be a multiple of {NV_BLOCK}, got shape {x.shape}")


def block_amax(x: np.ndarray, tile_2d: bool) -> np.ndarray:
    """amax per 16 elements [..., R, k], or per 16x16 tile repeated over its 16 rows."""
    b = np.abs(x.reshape(*x.shape[:-1], x.shape[-1] // NV_BLOCK, NV_BLOCK)).max(-1)
    if tile_2d:
        if b.ndim < 2 or b.shape[-2] % NV_BLOCK:
            raise ValueError(f"x: 16x16 tiles need a row count that is a multiple of 16, got shape {x.shape}")
        b = np.repeat(b.reshape(*b.shape[:-2], -1, NV_BLOCK, b.shape[-1]).max(-2), NV_BLOCK, axis=-2)
    return b


def nvfp4_scaled(x: np.ndarray, recipe: str, global_amax=None, tile_2d: bool = False, rht: bool = False):
    """The scaled elements q (float32, clipped to +-6), E4M3 block scales and global scale."""
    x = x.astype(F)
    if rht:
        x = hadamard(x)
    amax = F(np.abs(x).max()) if global_amax is None and x.size else F(global_amax or 0)
    b = block_amax(x, tile_2d)
    blocks = x.reshape(*b.shape, NV_BLOCK)
    with np.errstate(all="ignore"):
        if recipe.startswith("torchao"):
            p = amax / F(2688)
            g = p if p > 0 and np.isfinite(p) else F(1)
            sb = e4m3(np.clip((b / F(6)) / g, F(2.0**-6), F(448)))
            if recipe == "torchao_0_13":
                q = blocks / (g * sb.astype(F))[..., None]
            else:
                q = blocks * ((F(1) / g) / sb.astype(F))[..., None]
        else:
            g = min(F(2688) / amax, np.finfo(F).max)
            g = g if (amax > 0 and g > 0 and np.isfinite(amax)) else F(1)
            if recipe == "transformer_engine":
                sb = e4m3(b * (g * F(1 / 6)))
                r = np.minimum(F(1) / (sb.astype(F) * (F(1) / g)), np.finfo(F).max)
            else:  # vllm
                sb = e4m3(g * (b * F(1 / 6)))
                d = sb.astype(F) * (F(1) / g)
                r = np.where(d == 0, F(0), F(1) / d)
            q = blocks * np.asarray(r, F)[..., None]
        q = np.clip(q, F(-6), F(6)).reshape(x.shape)
    return q, sb.view(np.uint8), F(g)


def nvfp4_quantize(x, *, recipe: str = "transformer_engine", global_amax=None, tile_2d: bool = False,
                   rht: bool = False, **_):
    """x [..., R, 16k] -> (E2M1 codes uint8, E4M3 scales [..., R, k] uint8, float32 global scale)."""
    x = np.asarray(x)
    nvfp4_check_input(x)
    q, scales, g = nvfp4_scaled(x, recipe, global_amax, tile_2d, rht)
    return q.astype(ml_dtypes.float4_e2m1fn).view(np.uint8), scales, g


def nvfp4_quantize_stochastic(x, rbits, *, recipe: str = "transformer_engine", tile_2d: bool = False,
                              rht: bool = False, **_):
    """quantize's scales; each element rounded stochastically by the top byte of its rbits."""
    x, rbits = np.asarray(x), np.asarray(rbits)
    if rbits.dtype != np.uint32 or rbits.shape != x.shape:
        raise ValueError(f"rbits: expected uint32 of shape {x.shape}, got {rbits.dtype} of shape {rbits.shape}")
    nvfp4_check_input(x)
    q, scales, g = nvfp4_scaled(x, recipe, None, tile_2d, rht)
    return stochastic_e2m1(q, rbits), scales, g


def nvfp4_check_codes(codes: np.ndarray, scales: np.ndarray, global_scale) -> None:
    if codes.dtype != np.uint8 or scales.dtype != np.uint8:
        raise TypeError(f"codes, scales: expected uint8, got {codes.dtype} and {scales.dtype}")
    if codes.size and int(codes.max()) > 15:
        raise ValueError("codes: E2M1 codes are 0..15 (bits above bit 3 set)")
    if codes.ndim == 0 or codes.shape[-1] % NV_BLOCK or scales.shape != (*codes.shape[:-1],
                                                                        codes.shape[-1] // NV_BLOCK):
        raise ValueError(f"scales: expected one per {NV_BLOCK} codes, got codes {codes.shape}, scales {scales.shape}")
    g = np.asarray(global_scale)
    if g.ndim or not (np.isfinite(F(g)) and F(g) > 0):
        raise ValueError(f"global_scale: expected a positive finite float32, got {global_scale!r}")


def nvfp4_dequantize(codes, scales, global_scale, *, recipe: str = "transformer_engine", order: str = "exact", **_):
    """e * sb * d with d = 1/g (TE, vLLM) or g (torchao): exact in float64, or torchao's
    float32 order f32(e * f32(d * sb)) (order="scale_first")."""
    codes, scales = np.asarray(codes), np.asarray(scales)
    nvfp4_check_codes(codes, scales, global_scale)
    g = F(global_scale)
    d = g if recipe.startswith("torchao") else F(1) / g
    if not np.isfinite(d):
        raise ValueError("global_scale: 1 / global_scale overflows float32")
    e = codes.view(ml_dtypes.float4_e2m1fn).astype(F).reshape(*scales.shape, NV_BLOCK)
    sb = scales.view(ml_dtypes.float8_e4m3fn).astype(F)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        if order == "scale_first":
            out = e * (d * sb)
        else:
            out = e.astype(np.float64) * sb.astype(np.float64) * np.float64(d)
    return out.reshape(codes.shape)


def _mx_ops() -> dict:
    ops = {}
    for elem, short in MX_NAMES.items():
        ops[f"formats.{short}.quantize"] = lambda x, elem=elem, **v: mx_quantize(x, elem=elem, **v)
        ops[f"formats.{short}.dequantize"] = lambda codes, scales, elem=elem, **v: mx_dequantize(codes, scales,
                                                                                                 elem=elem)
    return ops


OPS = {**_mx_ops(), "formats.nvfp4.quantize": nvfp4_quantize,
       "formats.nvfp4.quantize_stochastic": nvfp4_quantize_stochastic, "formats.nvfp4.dequantize": nvfp4_dequantize}
_RECIPES = ["transformer_engine", "vllm", "torchao_0_13", "torchao_0_17"]
VARIANTS = {
    "formats.mx*.quantize": {"scale_rule": ["floor", "ceil", "even", "rceil"], "scale_overflow": ["nan", "satfinite"]},
    "formats.nvfp4.quantize*": {"recipe": _RECIPES, "tile_2d": [False, True], "rht": [False, True]},
    "formats.nvfp4.dequantize": {"recipe": _RECIPES, "order": ["exact", "scale_first"]},
}

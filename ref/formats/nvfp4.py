"""NVFP4: E2M1 elements in blocks of 16 along the last axis, an E4M3 block scale,
and an FP32 per-tensor scale, with each engine's recipe in its exact float32 order.

The recipes agree algebraically (block scale ~ block_amax / 6 / global, element ~
x / (block scale * global)) but round differently where an intermediate lands near an
E4M3 or E2M1 tie, so each is spelled out operation by operation (every `f32(...)`
below is one IEEE float32 operation, rounded to nearest even):

  transformer_engine  g   = f32(2688 / amax)  (1 if amax or g is 0; at most FLT_MAX)
                      sb  = e4m3(f32(bamax * f32(g * f32(1/6))))       satfinite
                      r   = min(f32(1 / f32(sb * f32(1/g))), FLT_MAX)
                      q   = f32(x * r)
  vllm                g   = f32(2688 / amax)
                      sb  = e4m3(f32(g * f32(bamax * f32(1/6))))
                      r   = 0 if sb == 0 else f32(1 / f32(sb * f32(1/g)))
                      q   = f32(x * r)
  torchao_0_13        p   = f32(amax / 2688)                 (torchao 0.13 to 0.16)
                      sb  = e4m3(clamp(f32(f32(bamax / 6) / p), 2^-6, 448))
                      q   = f32(x / f32(p * sb))
  torchao_0_17        p   = f32(amax / 2688)                 (torchao 0.17 on)
                      sb  = e4m3(clamp(f32(f32(bamax / 6) / p), 2^-6, 448))
                      r   = f32(f32(1 / p) / sb)
                      q   = f32(x * r)

and codes = e2m1(clamp(q, -6, 6)), round to nearest even (`quantize`), or stochastic
with the random bits as an input (`quantize_stochastic`: up iff the fraction of q
between its two E2M1 neighbours plus R / 2^8 reaches 1, R the top 8 bits of each
uint32, the width of PTX cvt.rs.e2m1x4's random numbers).

The steps are public, so searches for the inputs where recipes part ways call the
definition itself: `tensor_scale` (g or p from the tensor amax), `block_scales`
(the E4M3 block scale codes and the float32 factor the elements are scaled by).

The global scale returned is the recipe's own: TE's and vLLM's encode scale g
(dequantize multiplies by f32(1/g)), torchao's decode scale p. torchao without a
per-tensor scale is either torchao recipe with p = 1 (a tensor whose amax is 2688):
it divides by sb up to 0.17 and multiplies by f32(1 / sb) from 0.18.
A tensor whose amax is 0, NaN or Inf takes g = 1 (p = 1) in every recipe, TE's rule
for 0 extended: the vLLM and torchao code divide by zero there, or spread the NaN to
every block.

Dequantization is e * sb * d with d the decode scale (f32(1/g), or p), exact in
float64 (`order="exact"`; a float32 result of it is that value rounded once), or in
torchao's float32 order (`order="scale_first"`): f32(e * f32(d * sb)), rounded twice.

2D scaling (TE's weights): one block amax per 16x16 tile of the last two axes, its
scale repeated on each of the tile's 16 rows.

Random Hadamard transform (TE's recipe, before scaling; the global amax is taken
after it): each 16 elements of the last axis become y = (x * s) @ H / 4, with H the
16x16 Sylvester Hadamard matrix in natural order, H[i, j] = (-1)^popcount(i & j), and
s TransformerEngine's fixed signs. y is summed in float64 and rounded once to float32:
exact whenever a chunk's 16 inputs span less than 2^29 in magnitude.

References: NVIDIA, "Pretraining Large Language Models with NVFP4",
arXiv:2509.25149; TransformerEngine (NVFP4 recipe), vLLM (scaled_fp4_quant reference),
torchao (NVFP4Tensor); OCP MX v1.0 for E2M1.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, member, positive_float32
from ref.formats.minifloat import decode, encode
from ref.formats.stochastic import encode_stochastic

__all__ = ["BLOCK", "RHT_SIGNS", "SR_BITS", "DequantOrder", "Recipe", "block_scales", "dequantize", "hadamard16",
           "quantize", "quantize_stochastic", "random_hadamard", "tensor_scale"]

BLOCK = 16
F32 = np.float32
FLT_MAX = np.finfo(np.float32).max
E4M3_MAX, E2M1_MAX = F32(448), F32(6)
SR_BITS = 8  # random bits stochastic rounding reads: the top 8 of each uint32 (PTX cvt.rs.e2m1x4)


# TransformerEngine's fixed sign vector for the random Hadamard transform.
RHT_SIGNS = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], dtype=np.float64)


def hadamard16() -> NDArray[np.float64]:
    """The 16x16 Sylvester Hadamard matrix, natural order: H[i, j] = (-1)^popcount(i & j)."""
    i, j = np.indices((BLOCK, BLOCK))
    both = i & j
    popcount = sum((both >> k) & 1 for k in range(4))
    return np.where(popcount % 2 == 0, 1.0, -1.0)


def random_hadamard(x: ArrayLike, *, signs: ArrayLike = RHT_SIGNS) -> NDArray[np.float32]:
    """y = (x * signs) @ H / 4 for each 16 elements of the last axis, rounded once to float32."""
    x = np.asarray(x)
    signs = np.asarray(signs, dtype=np.float64)
    if signs.shape != (BLOCK,) or not np.isin(signs, (-1.0, 1.0)).all():
        raise ValueError(f"signs: expected 16 values of +1 or -1, got {signs!r}")
    if x.ndim < 1 or x.shape[-1] % BLOCK:
        raise ValueError(f"x: the last axis must be a multiple of {BLOCK}, got shape {x.shape}")
    chunks = x.astype(np.float64).reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK) * signs
    y = np.einsum("...i,ij->...j", chunks, hadamard16()) / 4  # [..., k, 16]
    return y.reshape(x.shape).astype(np.float32)


class Recipe(enum.Enum):
    TRANSFORMER_ENGINE = "transformer_engine"
    VLLM = "vllm"
    TORCHAO_0_13 = "torchao_0_13"
    TORCHAO_0_17 = "torchao_0_17"


_TORCHAO = (Recipe.TORCHAO_0_13, Recipe.TORCHAO_0_17)


class DequantOrder(enum.Enum):
    EXACT = "exact"  # e * sb * d, float64
    SCALE_FIRST = "scale_first"  # f32(e * f32(d * sb)): torchao's NVFP4Tensor.dequantize


def _e4m3(v: NDArray[np.float32]) -> NDArray[np.uint8]:
    """The recipes' E4M3 cast: round to nearest even, saturate (cvt.rn.satfinite)."""
    return encode(v, "float8_e4m3fn", overflow="saturate")


def tensor_scale(amax: np.float32, recipe: Recipe | str) -> np.float32:
    """A step of the definition: the recipe's per-tensor (global) scale from the tensor
    amax (float32): TE/vLLM's encode scale g = f32(2688 / amax) (at most FLT_MAX),
    torchao's decode scale p = f32(amax / 2688); 1 when amax is 0, NaN or Inf, or the
    scale is not a positive finite float32."""
    recipe = member(recipe, Recipe, "recipe")
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        amax = np.float32(amax)
        if recipe in _TORCHAO:
            scale = amax / F32(448 * 6)
        else:
            scale = np.minimum(F32(448 * 6) / amax, FLT_MAX)
    usable = np.isfinite(amax) and amax > 0 and np.isfinite(scale) and scale > 0
    return F32(scale) if usable else F32(1)


def _block_amax(x: NDArray[np.float32], tile_2d: bool) -> NDArray[np.float32]:
    """[..., R, n] -> [..., R, n/16] block maxima (2D: per 16x16 tile, repeated on rows)."""
    blocks = np.abs(x.reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK))
    bamax = np.max(blocks, axis=-1)  # [..., R, n/16]
    if not tile_2d:
        return bamax
    rows = bamax.shape[-2]
    tiles = bamax.reshape(*bamax.shape[:-2], rows // BLOCK, BLOCK, bamax.shape[-1]).max(axis=-2)
    return np.repeat(tiles, BLOCK, axis=-2)


def block_scales(bamax: ArrayLike, g: np.float32, recipe: Recipe | str):
    """A step of the definition: from block maxima `bamax` (float32) and the tensor
    scale `g` (`tensor_scale`), the E4M3 block scale codes (uint8) and the float32
    factor the block's elements are multiplied by (for torchao_0_13, divided by),
    line by line as in the module docstring."""
    recipe = member(recipe, Recipe, "recipe")
    bamax, g = np.asarray(bamax, dtype=np.float32), np.float32(g)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if recipe is Recipe.TRANSFORMER_ENGINE:
            sb = _e4m3(bamax * (g * F32(1 / 6)))
            r = np.minimum(F32(1) / (decode(sb, "float8_e4m3fn") * (F32(1) / g)), FLT_MAX)
        elif recipe is Recipe.VLLM:
            sb = _e4m3(g * (bamax * F32(1 / 6)))
            denom = decode(sb, "float8_e4m3fn") * (F32(1) / g)
            r = np.where(denom == 0, F32(0), F32(1) / denom)
        else:
            sb = _e4m3(np.clip((bamax / F32(6)) / g, F32(2.0**-6), E4M3_MAX))
            if recipe is Recipe.TORCHAO_0_13:
                r = g * decode(sb, "float8_e4m3fn")  # a divisor
            else:
                r = (F32(1) / g) / decode(sb, "float8_e4m3fn")
    return sb, r.astype(np.float32)


def _scaled(x, recipe, global_amax, tile_2d, rht):
    """The steps both roundings share: checks, then (q [..., R, n] float32 clamped to
    +-6, E4M3 block scale codes, the tensor scale)."""
    recipe = member(recipe, Recipe, "recipe")
    tile_2d, rht = boolean(tile_2d, "tile_2d"), boolean(rht, "rht")
    if global_amax is not None:
        global_amax = positive_float32(global_amax, "global_amax")
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.dtype.itemsize > 4:
        raise TypeError(f"x: expected float32 or float16, got {x.dtype}")
    x = x.astype(np.float32)
    if x.ndim < 1 or x.shape[-1] % BLOCK:
        raise ValueError(f"x: the last axis must be a multiple of {BLOCK}, got shape {x.shape}")
    if tile_2d and (x.ndim < 2 or x.shape[-2] % BLOCK):
        raise ValueError(f"x: tile_2d needs rows (axis -2) in multiples of {BLOCK}, got shape {x.shape}")
    if rht:
        x = random_hadamard(x)
    if global_amax is None:
        global_amax = F32(np.max(np.abs(x))) if x.size else F32(0)
    g = tensor_scale(global_amax, recipe)
    sb, r = block_scales(_block_amax(x, tile_2d), g, recipe)
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    with np.errstate(over="ignore", invalid="ignore"):
        q = blocks / r[..., None] if recipe is Recipe.TORCHAO_0_13 else blocks * r[..., None]
    return np.clip(q, -E2M1_MAX, E2M1_MAX).reshape(x.shape), sb, g


def quantize(
    x: ArrayLike,
    *,
    recipe: Recipe | str = Recipe.TRANSFORMER_ENGINE,
    global_amax: float | np.floating | None = None,
    tile_2d: bool = False,
    rht: bool = False,
) -> tuple[NDArray[np.uint8], NDArray[np.uint8], np.float32]:
    """NVFP4-quantize `x` [..., R, n] (float32, or float16 widened exactly), elements
    rounded to nearest even.

    Returns (codes [..., R, n] uint8 E2M1 codes, one per byte; scales [..., R, n/16]
    uint8 E4M3FN codes; global scale float32, the recipe's own). n must be a multiple
    of 16 (and R of 16 with `tile_2d`). `global_amax` (a positive finite number)
    defaults to max |x| (after the random Hadamard transform when `rht`).
    """
    q, sb, g = _scaled(x, recipe, global_amax, tile_2d, rht)
    return encode(q, "float4_e2m1fn", overflow="saturate"), sb, g


def quantize_stochastic(
    x: ArrayLike,
    rbits: ArrayLike,
    *,
    recipe: Recipe | str = Recipe.TRANSFORMER_ENGINE,
    global_amax: float | np.floating | None = None,
    tile_2d: bool = False,
    rht: bool = False,
) -> tuple[NDArray[np.uint8], NDArray[np.uint8], np.float32]:
    """`quantize` with the elements rounded stochastically by the given random bits:
    `rbits` uint32, one per element of x (same shape); the top 8 bits R of each are
    read, and q rounds away from zero iff its fraction between the two E2M1 values
    around it plus R / 2^8 reaches 1. Scales and the global scale are `quantize`'s."""
    rbits = np.asarray(rbits)
    if rbits.dtype != np.uint32:
        raise TypeError(f"rbits: expected uint32 random bits, got {rbits.dtype}")
    if rbits.shape != np.shape(x):
        raise ValueError(f"rbits: expected one per element of x, shape {np.shape(x)}, got {rbits.shape}")
    q, sb, g = _scaled(x, recipe, global_amax, tile_2d, rht)
    codes = encode_stochastic(q, "float4_e2m1fn", rbits, sr_bits=SR_BITS, overflow="saturate")
    return codes, sb, g


def dequantize(codes: ArrayLike, scales: ArrayLike, global_scale: float | np.floating, *,
               recipe: Recipe | str = Recipe.TRANSFORMER_ENGINE,
               order: DequantOrder | str = DequantOrder.EXACT) -> NDArray[np.floating]:
    """element * block scale * global decode scale: float64, exact (`order="exact"`),
    or float32 in torchao's order f32(e * f32(d * sb)) (`order="scale_first"`).

    The decode scale d is f32(1/g) for TE and vLLM, p itself for torchao; a NaN
    block scale (0x7F, 0xFF) makes its block NaN."""
    recipe = member(recipe, Recipe, "recipe")
    order = member(order, DequantOrder, "order")
    g = positive_float32(global_scale, "global_scale")
    codes, scales = np.asarray(codes), np.asarray(scales)
    for name, a in (("codes", codes), ("scales", scales)):
        if a.dtype != np.uint8:
            raise TypeError(f"{name}: expected uint8, got {a.dtype}")
    if codes.ndim < 1 or codes.shape[-1] % BLOCK:
        raise ValueError(f"codes: the last axis must be a multiple of {BLOCK}, got shape {codes.shape}")
    if scales.shape != (*codes.shape[:-1], codes.shape[-1] // BLOCK):
        raise ValueError(f"scales: expected shape {(*codes.shape[:-1], codes.shape[-1] // BLOCK)} for codes of "
                         f"shape {codes.shape}, got {scales.shape}")
    with np.errstate(over="ignore"):
        d = g if recipe in _TORCHAO else F32(1) / g
    if not np.isfinite(d):
        raise ValueError(f"global_scale: its reciprocal {g!r} -> 1/g overflows float32")
    e = decode(codes, "float4_e2m1fn").reshape(*scales.shape, BLOCK)
    sb = decode(scales, "float8_e4m3fn")[..., None]
    if order is DequantOrder.SCALE_FIRST:
        with np.errstate(over="ignore"):
            return (e * (d * sb)).reshape(codes.shape)
    out = e.astype(np.float64) * sb.astype(np.float64) * float(d)
    return out.reshape(codes.shape)

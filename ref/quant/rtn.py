"""Round-to-nearest (RTN) weight quantization: a scale and a zero point per group of
weights along the last axis, the codes, and the weights they stand for.

  params (one group = the last axis of w):
      lo = min(min(w), 0), hi = max(max(w), 0)     zero_range "include_zero" (GPTQ)
      lo = min(w),         hi = max(w)             zero_range "minmax"       (AWQ)
      asymmetric:  scale = (hi - lo) / maxq,  zero = clamp(rne(-lo / scale), 0, maxq)
      symmetric:   amax = max(|lo|, hi); lo = -amax where lo < 0;             (GPTQ's)
                   scale = (hi - lo) / maxq,  zero = (maxq + 1) / 2
      asymmetric_compressed_tensors: scale as asymmetric; signed zp = clamp(rne(-2^(b-1)
                   - lo / scale), -2^(b-1), 2^(b-1) - 1) from the scale before its floor
                   (0 / 0: zp 0), zero = zp + 2^(b-1); quantize adds zp before rounding
      symmetric_compressed_tensors:  scale = 2 amax / maxq,  zero = 2^(b-1)
      symmetric_restricted:          scale = amax / (2^(b-1) - 1), zero = 2^(b-1)
      an all-zero group: lo, hi = -1, +1 (asymmetric and GPTQ's symmetric with
      include_zero, as GPTQ does; minmax leaves it to the floors, as AWQ does);
      scale 1 (symmetric_restricted, as ref.formats.intgroup); scale 0 raised to the
      floor (symmetric_compressed_tensors, as compressed-tensors clamps it)
      scale = max(scale, floor): floor = the dtype's smallest normal ("tiny") or its
      epsilon ("eps"); "zero_to_eps" replaces only a scale of 0 (compressed-tensors);
      the range below `span_floor` is raised to it
  quantize:    q = clamp(rne(w / scale) + zero, 0, maxq)       (maxq = 2^bits - 1)
  dequantize:  w' = scale * (q - zero)

rne rounds half to even (torch.round, np.rint); codes are unsigned (offset binary).
Every step is in w's dtype: float32 in, float32 arithmetic (as the libraries run);
float64 in, float64 (float16 is widened to float32 first).

GPTQ's symmetric quantizer moves lo to -amax only where lo < 0: a group of weights
none of which is negative keeps lo = 0, scale hi / maxq and zero (maxq + 1) / 2, so
its upper half clips (the reference code and GPTQModel do this; compressed-tensors'
symmetric scale 2 amax / maxq does not). `symmetric_restricted` is the signed
absmax grid of ref.formats.intgroup and QuaRot (codes -2^(b-1) .. 2^(b-1) - 1).

References: Frantar et al., "GPTQ", arXiv:2210.17323 (IST-DASLab/gptq quant.py);
Lin et al., "AWQ", arXiv:2306.00978.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer, member, real

__all__ = ["BITS", "ScaleFloor", "Scheme", "Search", "ZeroRange", "dequantize", "dequantize_groups", "mse_params", "params",
           "quantize", "quantize_groups"]

BITS = (2, 3, 4, 8)


class Scheme(enum.Enum):
    ASYMMETRIC = "asymmetric"  # min-max with a zero point (GPTQ asym, AWQ)
    ASYMMETRIC_COMPRESSED_TENSORS = "asymmetric_compressed_tensors"  # zero from the raw scale, added before rounding
    SYMMETRIC = "symmetric"  # GPTQ's: (hi - lo) / maxq with lo = -amax where lo < 0, zero (maxq + 1) / 2
    SYMMETRIC_COMPRESSED_TENSORS = "symmetric_compressed_tensors"  # 2 amax / maxq, signed codes + 2^(b-1)
    SYMMETRIC_RESTRICTED = "symmetric_restricted"  # amax / (2^(b-1) - 1) (ref.formats.intgroup, QuaRot)


class ZeroRange(enum.Enum):
    INCLUDE_ZERO = "include_zero"  # lo = min(w, 0), hi = max(w, 0) (GPTQ, compressed-tensors)
    MINMAX = "minmax"  # lo = min(w), hi = max(w), not forced (AWQ)


class Search(enum.Enum):
    MINMAX = "minmax"  # the range itself
    MSE = "mse"  # GPTQ's shrink search (mse_params)


class ScaleFloor(enum.Enum):
    TINY = "tiny"  # the dtype's smallest normal: only a scale that underflows is raised
    EPS = "eps"  # the dtype's epsilon (torchao, ref.formats.intgroup)
    ZERO_TO_EPS = "zero_to_eps"  # only a scale of exactly 0 becomes the epsilon (compressed-tensors)


def _weights(w: ArrayLike, name: str = "w") -> NDArray:
    """w as float32 or float64 (float16 widened exactly), finite, with at least one axis."""
    w = np.asarray(w)
    if w.dtype == np.float16:
        w = w.astype(np.float32)
    if w.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: expected float32, float64 or float16 weights, got {w.dtype}")
    if w.ndim < 1:
        raise ValueError(f"{name}: expected at least one axis (the group), got a scalar")
    if not np.isfinite(w).all():
        raise ValueError(f"{name}: weights must be finite (found NaN or Inf)")
    return w


def _range(w: NDArray, zero_range: ZeroRange) -> tuple[NDArray, NDArray]:
    """(lo, hi) of each group [..., g] -> [...]; an empty group has lo = hi = 0."""
    dt = w.dtype.type
    lo, hi = w.min(axis=-1, initial=np.inf), w.max(axis=-1, initial=-np.inf)
    if zero_range is ZeroRange.INCLUDE_ZERO or w.shape[-1] == 0:
        lo, hi = np.minimum(lo, dt(0)), np.maximum(hi, dt(0))
    return lo.astype(w.dtype), hi.astype(w.dtype)


def _options(bits, scheme, zero_range, scale_floor, span_floor):
    bits = integer(bits, "bits", choices=BITS)
    span_floor = real(span_floor, "span_floor", positive=False)
    if span_floor < 0:
        raise ValueError(f"span_floor: expected a number >= 0, got {span_floor}")
    return (bits, member(scheme, Scheme, "scheme"), member(zero_range, ZeroRange, "zero_range"),
            member(scale_floor, ScaleFloor, "scale_floor"), span_floor)


def _adjusted_range(w: NDArray, scheme: Scheme, zero_range: ZeroRange) -> tuple[NDArray, NDArray]:
    """(lo, hi) [...] of each group after the scheme's adjustments: GPTQ's symmetric
    moves lo to -amax where lo < 0 and hi to amax; with include_zero an all-zero group
    takes -1, +1 (GPTQ)."""
    dt = w.dtype.type
    lo, hi = _range(w, zero_range)
    if scheme is Scheme.SYMMETRIC:
        hi = np.maximum(np.abs(lo), hi).astype(w.dtype)
        lo = np.where(lo < 0, -hi, lo).astype(w.dtype)
    if scheme not in (Scheme.ASYMMETRIC, Scheme.SYMMETRIC) or zero_range is ZeroRange.MINMAX:
        return lo, hi  # AWQ's minmax leaves an all-zero group to the span and scale floors
    empty = (lo == 0) & (hi == 0)
    return np.where(empty, dt(-1), lo).astype(w.dtype), np.where(empty, dt(1), hi).astype(w.dtype)


def _from_range(lo: NDArray, hi: NDArray, bits: int, scheme: Scheme, scale_floor: ScaleFloor,
                span_floor: float) -> tuple[NDArray, NDArray]:
    """(scale, zero) from an adjusted range (lo, hi) [...], in its dtype."""
    dtype = lo.dtype
    dt = dtype.type
    maxq, half = dt((1 << bits) - 1), dt(1 << (bits - 1))
    asymmetric = scheme in (Scheme.ASYMMETRIC, Scheme.ASYMMETRIC_COMPRESSED_TENSORS)
    with np.errstate(over="ignore", invalid="ignore"):
        if asymmetric or scheme is Scheme.SYMMETRIC:
            span = np.maximum((hi - lo).astype(dtype), dt(span_floor))
            scale = (span / maxq).astype(dtype)
        else:
            amax = np.maximum(np.abs(lo), np.abs(hi)).astype(dtype)
            if scheme is Scheme.SYMMETRIC_COMPRESSED_TENSORS:
                scale = (amax / (maxq / dt(2))).astype(dtype)  # amax 0: scale 0, then the floor
            else:
                scale = np.where(amax > 0, amax / (half - dt(1)), dt(1)).astype(dtype)  # amax 0: scale 1
    if not np.isfinite(scale).all():
        raise ValueError("w: a group's range overflows the dtype (its scale would be Inf)")
    if scheme is Scheme.ASYMMETRIC_COMPRESSED_TENSORS:  # signed zp = qmin - lo / scale, before the floor
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            signed = np.clip((-half - (lo / scale).astype(dtype)).astype(dtype), -half, half - dt(1))
        zero = (np.rint(np.nan_to_num(signed, nan=0.0)) + half).astype(dtype)  # 0 / 0: zp 0 (x86's NaN cast)
    info = np.finfo(dtype)
    if scale_floor is ScaleFloor.ZERO_TO_EPS:
        scale = np.where(scale == 0, dt(info.eps), scale).astype(dtype)
    else:
        scale = np.maximum(scale, dt(info.tiny if scale_floor is ScaleFloor.TINY else info.eps)).astype(dtype)
    if scheme is Scheme.ASYMMETRIC:
        with np.errstate(over="ignore"):
            zero = (np.clip(np.rint((-lo / scale).astype(dtype)), dt(0), maxq) + dt(0)).astype(dtype)  # -0 -> +0
    elif scheme is Scheme.SYMMETRIC:
        zero = np.full(scale.shape, (maxq + dt(1)) / dt(2), dtype=dtype)
    elif scheme is not Scheme.ASYMMETRIC_COMPRESSED_TENSORS:
        zero = np.full(scale.shape, half, dtype=dtype)
    return scale, zero


def params(w: ArrayLike, *, bits: int, scheme: Scheme | str = Scheme.ASYMMETRIC,
           zero_range: ZeroRange | str = ZeroRange.INCLUDE_ZERO, scale_floor: ScaleFloor | str = ScaleFloor.TINY,
           span_floor: float = 0.0) -> tuple[NDArray, NDArray]:
    """(scale, zero) of each group: w [..., g] -> scale [...], zero [...] (both in w's
    dtype; zero holds integers in [0, 2^bits - 1]).

    `span_floor` raises the range hi - lo to at least that value before dividing
    (AutoAWQ clamps it at 1e-5); 0 leaves it alone."""
    bits, scheme, zero_range, scale_floor, span_floor = _options(bits, scheme, zero_range, scale_floor, span_floor)
    w = _weights(w)
    lo, hi = _adjusted_range(w, scheme, zero_range)
    return _from_range(lo, hi, bits, scheme, scale_floor, span_floor)


def mse_params(w: ArrayLike, *, bits: int, scheme: Scheme | str = Scheme.ASYMMETRIC,
               zero_range: ZeroRange | str = ZeroRange.INCLUDE_ZERO, scale_floor: ScaleFloor | str = ScaleFloor.TINY,
               grid: int = 100, maxshrink: float = 0.8, norm: float = 2.4) -> tuple[NDArray, NDArray]:
    """GPTQ's MSE range search: for i = 0 .. floor(maxshrink * grid) - 1, the range
    (p lo, p hi) with p = f(1 - i / grid) (f: rounded to w's dtype, as torch multiplies
    a tensor by a Python float) gives (scale_i, zero_i); each group keeps the first
    whose error sum |dequantize(quantize(w)) - w|^norm is the smallest (the reference
    loops over i replacing on a strict <: the earliest of equal errors wins).
    The error is summed in float64 whatever w's dtype (a float32 sum in another
    order can choose another shrink where two errors nearly tie)."""
    bits, scheme, zero_range, scale_floor, _ = _options(bits, scheme, zero_range, scale_floor, 0.0)
    grid = integer(grid, "grid", minimum=1)
    maxshrink, norm = real(maxshrink, "maxshrink"), real(norm, "norm")
    if maxshrink > 1:
        raise ValueError(f"maxshrink: expected a fraction in (0, 1], got {maxshrink}")
    w = _weights(w)
    dt = w.dtype.type
    lo, hi = _adjusted_range(w, scheme, zero_range)  # [...]
    p = np.array([dt(1 - i / grid) for i in range(int(maxshrink * grid))], dtype=w.dtype)  # [P]
    p = p.reshape(-1, *(1,) * lo.ndim)  # [P, 1, ...]: every shrink at once
    scale, zero = _from_range((p * lo).astype(w.dtype), (p * hi).astype(w.dtype), bits, scheme, scale_floor, 0.0)
    before = scheme is Scheme.ASYMMETRIC_COMPRESSED_TENSORS
    fake = scale[..., None] * (_codes(w, scale[..., None], zero[..., None], bits, before) - zero[..., None])
    err = (np.abs(fake.astype(np.float64) - w) ** norm).sum(axis=-1)  # [P, ...]
    first = np.argmin(err, axis=0)[None] if err.size else np.zeros((1, *lo.shape), np.int64)  # first minimum
    return (np.take_along_axis(scale, first, axis=0)[0].astype(w.dtype),
            np.take_along_axis(zero, first, axis=0)[0].astype(w.dtype))


def _per_group(arr: ArrayLike, w: NDArray, name: str) -> NDArray:
    """scale or zero against w: one axis fewer gets the last axis added; as many axes
    broadcast as they are (w[:, j] [rows] with scale [rows]: one per element)."""
    arr = np.asarray(arr)
    if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
        raise TypeError(f"{name}: expected a real array, got {arr.dtype}")
    if arr.ndim == w.ndim - 1:
        arr = arr[..., None]
    try:
        np.broadcast_shapes(arr.shape, w.shape)
    except ValueError:
        raise ValueError(f"{name}: shape {np.shape(arr)} does not broadcast against {w.shape} "
                         "(one axis fewer than the weights, or as many)") from None
    return arr.astype(w.dtype, copy=False)


def quantize(w: ArrayLike, scale: ArrayLike, zero: ArrayLike, *, bits: int,
             zero_before_rounding: bool = False) -> NDArray[np.int64]:
    """Codes clamp(rne(w / scale) + zero, 0, 2^bits - 1) as int64, in w's dtype arithmetic;
    scale and zero broadcast over the last axis (see `_per_group`). With
    `zero_before_rounding` (compressed-tensors), the signed zero point zero - 2^(b-1) is
    added to w / scale before rounding: clamp(rne(w / scale + zero - 2^(b-1)) + 2^(b-1))."""
    bits = integer(bits, "bits", choices=BITS)
    zero_before_rounding = boolean(zero_before_rounding, "zero_before_rounding")
    w = _weights(w)
    dt = w.dtype.type
    maxq = dt((1 << bits) - 1)
    scale, zero = _per_group(scale, w, "scale"), _per_group(zero, w, "zero")
    if not (np.isfinite(scale).all() and (scale > 0).all()):
        raise ValueError("scale: expected positive finite scales")
    if not ((zero == np.rint(zero)).all() and (zero >= 0).all() and (zero <= maxq).all()):
        raise ValueError(f"zero: expected integers in [0, {int(maxq)}]")
    return _codes(w, scale, zero, bits, zero_before_rounding).astype(np.int64)


def _codes(w: NDArray, scale: NDArray, zero: NDArray, bits: int, before: bool = False) -> NDArray:
    """clamp(rne(w / scale) + zero, 0, maxq) in w's dtype (as floats); `before`: the
    signed zero point added before rounding."""
    dt = w.dtype.type
    half = dt(1 << (bits - 1))
    with np.errstate(over="ignore", invalid="ignore"):
        x = (w / scale).astype(w.dtype, copy=False)
        q = np.rint((x + (zero - half)).astype(w.dtype, copy=False)) + half if before else np.rint(x) + zero
        return np.clip(q, dt(0), dt((1 << bits) - 1))


def dequantize(codes: ArrayLike, scale: ArrayLike, zero: ArrayLike, *, bits: int | None = None) -> NDArray:
    """w' = scale * (codes - zero) in scale's dtype (float32 or float64); scale and zero
    broadcast over the last axis of codes. With `bits`, codes above 2^bits - 1 are
    rejected; negative codes always are."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"codes: expected integer codes, got {codes.dtype}")
    if codes.ndim < 1:
        raise ValueError("codes: expected at least one axis, got a scalar")
    scale_arr = np.asarray(scale)
    if scale_arr.dtype not in (np.float32, np.float64):
        raise TypeError(f"scale: expected float32 or float64, got {scale_arr.dtype}")
    if codes.size and int(codes.min()) < 0:
        raise ValueError(f"codes: expected unsigned codes, got {int(codes.min())}")
    if bits is not None:
        bits = integer(bits, "bits", choices=BITS)
        if codes.size and int(codes.max()) >> bits:
            raise ValueError(f"codes: INT{bits} codes are 0..{(1 << bits) - 1}, got {int(codes.max())}")
    like = np.empty(codes.shape, scale_arr.dtype)
    s, z = _per_group(scale_arr, like, "scale"), _per_group(zero, like, "zero")
    return (s * (codes.astype(like.dtype) - z)).astype(like.dtype)


def _grouped(w: NDArray, group: int, name: str) -> NDArray:
    """w [..., n] -> [..., n/g, g]: g consecutive input channels per group; group -1
    is one group per row (per-channel). A group that does not divide n is an error."""
    group = integer(group, "group", minimum=-1)
    if group == 0 or w.ndim < 1:
        raise ValueError(f"group: expected a positive group size or -1 (per-channel), got {group}")
    n = w.shape[-1]
    g = n if group == -1 else group
    if (n % g if g else n):
        raise ValueError(f"group: {group} does not divide the input dimension {n} of {name} {w.shape}")
    return w.reshape(*w.shape[:-1], n // g if g else 0, g)


def quantize_groups(w: ArrayLike, *, bits: int = 4, group: int = 128, scheme: Scheme | str = Scheme.ASYMMETRIC,
                    zero_range: ZeroRange | str = ZeroRange.INCLUDE_ZERO,
                    scale_floor: ScaleFloor | str = ScaleFloor.TINY, search: str = "minmax"):
    """RTN of a weight matrix along its input (last) axis: w [..., n] ->
    (codes [..., n] int64, scales [..., n/g], zeros [..., n/g]) in w's dtype;
    `search` "mse" takes each group's range from `mse_params` (GPTQ's defaults)."""
    search = member(search, Search, "search")
    w = _weights(w)
    g = _grouped(w, group, "w")  # [..., n/g, g]
    if search is Search.MSE:
        scale, zero = mse_params(g, bits=bits, scheme=scheme, zero_range=zero_range, scale_floor=scale_floor)
    else:
        scale, zero = params(g, bits=bits, scheme=scheme, zero_range=zero_range, scale_floor=scale_floor)
    before = member(scheme, Scheme, "scheme") is Scheme.ASYMMETRIC_COMPRESSED_TENSORS
    codes = quantize(g, scale, zero, bits=bits, zero_before_rounding=before)  # [..., n/g, g]
    return codes.reshape(w.shape), scale, zero


def dequantize_groups(codes: ArrayLike, scales: ArrayLike, zeros: ArrayLike, *, group: int = 128,
                      bits: int | None = None) -> NDArray:
    """codes [..., n] with scales, zeros [..., n/g] -> weights [..., n] in scales' dtype."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"codes: expected integer codes, got {codes.dtype}")
    g = _grouped(codes, group, "codes")
    scales, zeros = np.asarray(scales), np.asarray(zeros)
    if scales.shape != g.shape[:-1] or zeros.shape != g.shape[:-1]:
        raise ValueError(f"scales, zeros: expected shape {g.shape[:-1]}, got {scales.shape} and {zeros.shape}")
    return dequantize(g, scales, zeros, bits=bits).reshape(codes.shape)

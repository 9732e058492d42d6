"""Integer group codecs: weight-only INT4/INT8 with one scale (and a zero point) per
group of `group` consecutive elements along the input (last) axis, and the int32
packings GPTQ and AWQ checkpoints use.

  asymmetric (GPTQ's and AWQ's min-max quantizer):
      lo = min(min(w_g), 0), hi = max(max(w_g), 0)   (both 0: lo, hi = -1, +1)
      scale = max(f32(f32(hi - lo) / (2^b - 1)), 2^-23)
      zero = clamp(rne(f32(-lo / scale)), 0, 2^b - 1)
      q = clamp(rne(f32(w / scale)) + zero, 0, 2^b - 1)
  symmetric:
      scale = max(f32(amax / (2^(b-1) - 1)), 2^-23)   (amax 0: scale 1),   zero = 2^(b-1)
      q = clamp(rne(f32(w / scale)), -2^(b-1), 2^(b-1) - 1) + zero
  dequantize: w' = f32(scale * (q - zero))

Degenerate groups. A group of tiny weights (float32 subnormals) has a scale that
underflows to 0, and w / 0 is NaN or Inf: GPTQ's own quantizer then takes its codes
from casting NaN to an integer, which differs by platform. The scale is floored at
SCALE_FLOOR = 2^-23 (float32 epsilon), as compressed-tensors (llm-compressor's
writer) and torchao's `choose_qparams_affine` clamp it, so such a group quantizes
to its zero point and dequantizes to zeros. A group whose range hi - lo overflows
float32 (weights near +-3.4e38) would get an infinite scale: it is rejected.

Zero points are returned as they are (`zero_storage="exact"`, GPTQ v2, AWQ) or as
GPTQ v1 checkpoints store them, minus one modulo 2^b (`"gptq_v1"`; its loader adds
the one back, and a zero point of 0 wraps to 2^b - 1).

rne rounds half to even (torch.round, np.rint). Codes are unsigned (offset binary).

References: Frantar et al., "GPTQ", arXiv:2210.17323; Lin et al., "AWQ",
arXiv:2306.00978; AutoGPTQ and AutoAWQ packing code for the word layouts.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member

__all__ = ["AWQ_ORDER", "BITS", "GROUP_SIZES", "SCALE_FLOOR", "Scheme", "WordOrder", "ZeroStorage",
           "dequantize", "pack_int32", "quantize", "unpack_int32"]


class Scheme(enum.Enum):
    ASYMMETRIC = "asymmetric"  # min-max with a zero point (GPTQ, AWQ)
    SYMMETRIC = "symmetric"  # amax / (2^(b-1) - 1), zero point 2^(b-1)


class ZeroStorage(enum.Enum):
    EXACT = "exact"  # zero points as they are (GPTQ v2, AWQ)
    GPTQ_V1 = "gptq_v1"  # minus one modulo 2^b (GPTQ v1 checkpoints)


class WordOrder(enum.Enum):
    GPTQ = "gptq"  # element i of each 8 in bits 4i..4i+3
    AWQ = "awq"  # nibble i holds element AWQ_ORDER[i]


GROUP_SIZES = (32, 64, 128)
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a word holds element AWQ_ORDER[i] of its 8
BITS = (4, 8)
F32 = np.float32
SCALE_FLOOR = F32(2.0**-23)  # float32 epsilon: compressed-tensors' and torchao's smallest scale


def _groups(w: NDArray, group: int, name: str) -> NDArray:
    """w [..., n] -> [..., n/group, group]; a ragged last group is an error, never padded."""
    if w.ndim < 1 or w.shape[-1] % group:
        raise ValueError(f"{name}: the last axis must be a multiple of group={group}, got shape {w.shape}")
    return w.reshape(*w.shape[:-1], w.shape[-1] // group, group)


def quantize(w: ArrayLike, *, bits: int = 4, group: int = 128, scheme: Scheme | str = Scheme.ASYMMETRIC,
             zero_storage: ZeroStorage | str = ZeroStorage.EXACT):
    """w [..., n] float32/float16 -> (codes [..., n] uint8, scales [..., n/g] float32,
    zeros [..., n/g] uint8, stored as `zero_storage` says)."""
    bits = integer(bits, "bits", choices=BITS)
    group = integer(group, "group", minimum=1)
    scheme = member(scheme, Scheme, "scheme")
    zero_storage = member(zero_storage, ZeroStorage, "zero_storage")
    w = np.asarray(w)
    if w.dtype not in (np.float16, np.float32):
        raise TypeError(f"w: expected float32 or float16, got {w.dtype}")
    g = _groups(w.astype(np.float32), group, "w")  # [..., n/g, g]
    if not np.isfinite(g).all():
        raise ValueError("w: integer group codecs take finite weights (found NaN or Inf)")
    qmax = (1 << bits) - 1
    if scheme is Scheme.ASYMMETRIC:
        lo = np.minimum(g.min(axis=-1, initial=0.0), F32(0))
        hi = np.maximum(g.max(axis=-1, initial=0.0), F32(0))
        empty = (lo == 0) & (hi == 0)
        lo, hi = np.where(empty, F32(-1), lo), np.where(empty, F32(1), hi)
        with np.errstate(over="ignore"):
            span = (hi - lo).astype(np.float32)
        if not np.isfinite(span).all():
            raise ValueError("w: a group's range max - min overflows float32 (its scale would be Inf)")
        scale = np.maximum((span / F32(qmax)).astype(np.float32), SCALE_FLOOR)
        zero = np.clip(np.rint(-lo / scale), 0, qmax)
        q = np.clip(np.rint(g / scale[..., None]) + zero[..., None], 0, qmax)
    else:
        half = 1 << (bits - 1)
        amax = np.abs(g).max(axis=-1, initial=0.0)
        scale = np.where(amax > 0, np.maximum(amax / F32(half - 1), SCALE_FLOOR), F32(1)).astype(np.float32)
        zero = np.full(scale.shape, half, dtype=np.float32)
        q = np.clip(np.rint(g / scale[..., None]), -half, half - 1) + half
    if zero_storage is ZeroStorage.GPTQ_V1:
        zero = (zero - 1) % (qmax + 1)
    return q.reshape(w.shape).astype(np.uint8), scale, zero.astype(np.uint8)


def dequantize(codes: ArrayLike, scales: ArrayLike, zeros: ArrayLike, *, group: int = 128, bits: int = 4,
               zero_storage: ZeroStorage | str = ZeroStorage.EXACT) -> NDArray[np.float32]:
    """f32(scale * (q - zero)) per element: codes [..., n], scales and zeros [..., n/g]
    (GPTQ v1 zeros get their one back, modulo 2^bits).

    Codes and zero points are one per byte; a byte with bits above `bits` set is not
    a code (ValueError), never masked."""
    group = integer(group, "group", minimum=1)
    bits = integer(bits, "bits", choices=BITS)
    zero_storage = member(zero_storage, ZeroStorage, "zero_storage")
    codes, scales, zeros = np.asarray(codes), np.asarray(scales), np.asarray(zeros)
    if codes.dtype != np.uint8 or zeros.dtype != np.uint8 or scales.dtype != np.float32:
        raise TypeError(f"codes, zeros: expected uint8 and scales float32, got {codes.dtype}, {zeros.dtype}, "
                        f"{scales.dtype}")
    for name, arr in (("codes", codes), ("zeros", zeros)):
        if arr.size and int(arr.max()) >> bits:
            raise ValueError(f"{name}: INT{bits} values are 0..{(1 << bits) - 1}, got {int(arr.max())}")
    g = _groups(codes, group, "codes")
    if scales.shape != g.shape[:-1] or zeros.shape != g.shape[:-1]:
        raise ValueError(f"scales, zeros: expected shape {g.shape[:-1]}, got {scales.shape} and {zeros.shape}")
    zero = zeros.astype(np.int64)
    if zero_storage is ZeroStorage.GPTQ_V1:
        zero = (zero + 1) % (1 << bits)
    diff = g.astype(np.float32) - zero.astype(np.float32)[..., None]
    return (scales[..., None] * diff).astype(np.float32).reshape(codes.shape)


def pack_int32(codes: ArrayLike, *, order: WordOrder | str = WordOrder.GPTQ) -> NDArray[np.int32]:
    """Eight INT4 codes per int32 word along the last axis: [..., 8k] -> [..., k].

    gptq: element i of each 8 in bits 4i..4i+3 (AutoGPTQ packs the input axis this way);
    awq: nibble i holds element AWQ_ORDER[i] (AutoAWQ packs the output axis this way).
    GPTQ v1 checkpoints store zero points minus one in the same layout: pack
    (zeros - 1) % 16 yourself; the packing does not change.
    """
    order = member(order, WordOrder, "order")
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"codes: expected uint8 INT4 codes, got {codes.dtype}")
    if codes.ndim < 1 or codes.shape[-1] % 8:
        raise ValueError(f"codes: the last axis must be a multiple of 8, got shape {codes.shape}")
    if codes.size and int(codes.max()) > 15:
        raise ValueError(f"codes: INT4 codes are 0..15, got {int(codes.max())}")
    eights = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 8, 8).astype(np.uint32)
    if order is WordOrder.AWQ:
        eights = eights[..., list(AWQ_ORDER)]
    words = (eights << (4 * np.arange(8, dtype=np.uint32))).sum(axis=-1, dtype=np.uint32)
    return words.view(np.int32)


def unpack_int32(words: ArrayLike, *, order: WordOrder | str = WordOrder.GPTQ) -> NDArray[np.uint8]:
    """The inverse of `pack_int32`: int32 words [..., k] -> INT4 codes [..., 8k]."""
    order = member(order, WordOrder, "order")
    words = np.asarray(words)
    if words.dtype != np.int32:
        raise TypeError(f"words: expected int32, got {words.dtype}")
    if words.ndim < 1:
        raise ValueError("words: expected at least one axis, got a scalar")
    nibbles = (words.view(np.uint32)[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF  # [..., k, 8]
    if order is WordOrder.AWQ:
        nibbles = nibbles[..., list(np.argsort(AWQ_ORDER))]
    return nibbles.reshape(*words.shape[:-1], 8 * words.shape[-1]).astype(np.uint8)

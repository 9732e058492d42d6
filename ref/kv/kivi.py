"""KIVI (arXiv 2402.02750): asymmetric min/max codes for the KV cache, keys per
channel and values per token, packed into int32 words (spec/kv.md#kivi).

For a group of G elements with minimum mn and maximum mx, in the input's float dtype
(the reference, jy-yuan/KIVI@876b4d2 quant/new_pack.py, runs in the model's dtype,
float16 in practice; every step below is one rounding in that dtype):

    scale = (mx - mn) / (2^b - 1)
    code  = round_half_even(clamp((x - mn) / scale, 0, 2^b - 1))    clamp first, then round
    x_hat = code * scale + mn

Keys ("channel" axis): a group is G consecutive tokens of one channel, k [B, H, T, D]
-> scale, mn [B, H, T/G, D]. Values ("token" axis): a group is G consecutive channels
of one token, v [B, H, T, D] -> scale, mn [B, H, T, D/G]. A constant group (scale 0)
gives code 0 (the reference divides 0 by 0 and casts NaN, which CUDA turns into 0) and
decodes to mn exactly. Packing: 32/b codes per int32 word along the token axis for keys
and the channel axis for values, code j of a word in bits [j*b, (j+1)*b).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member

__all__ = ["BITS", "DTYPES", "Axis", "KiviCodes", "bits_per_element", "decode", "dequantize", "encode", "pack",
           "quantize", "unpack"]

BITS = (2, 4, 8)  # the reference's pack_tensor and unpack assert bits in [2, 4, 8]
DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


class Axis(enum.Enum):
    """Which elements share a scale: CHANNEL (keys: G tokens of one channel) or TOKEN
    (values: G channels of one token)."""

    CHANNEL = "channel"
    TOKEN = "token"


def _cache(x: ArrayLike, name: str) -> NDArray:
    """`x` as a float16/32/64 cache tensor [B, H, T, D] with finite entries."""
    x = np.asarray(x)
    if x.dtype not in DTYPES:
        raise TypeError(f"{name}: expected float16, float32 or float64, got {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"{name}: expected a cache tensor [B, H, T, D], got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: NaN or Inf in the cache tensor")
    return x


def _grouped(x: NDArray, axis: Axis, group: int, name: str) -> NDArray:
    """x [B, H, T, D] with its groups on a new axis 3 (CHANNEL: [B, H, T/G, G, D]) or 4
    (TOKEN: [B, H, T, D/G, G])."""
    b, h, t, d = x.shape
    if axis is Axis.CHANNEL:
        if t % group:
            raise ValueError(f"group: {group} does not divide the {t} tokens of {name} (keys group along tokens)")
        return x.reshape(b, h, t // group, group, d)
    if d % group:
        raise ValueError(f"group: {group} does not divide the {d} channels of {name} (values group along channels)")
    return x.reshape(b, h, t, d // group, group)


def quantize(x: ArrayLike, *, axis: Axis | str = "channel", bits: int = 2,
             group: int = 32) -> tuple[NDArray[np.int32], NDArray, NDArray]:
    """x [B, H, T, D] -> (codes int32 [B, H, T, D], scale, mn) in x's dtype; scale and mn
    [B, H, T/G, D] for the channel axis (keys), [B, H, T, D/G] for the token axis (values)."""
    axis = member(axis, Axis, "axis")
    bits = integer(bits, "bits", choices=BITS)
    group = integer(group, "group", minimum=1)
    x = _cache(x, "x")
    dt = x.dtype.type
    xg = _grouped(x, axis, group, "x")
    red = 3 if axis is Axis.CHANNEL else 4
    mn = xg.min(axis=red, keepdims=True)
    mx = xg.max(axis=red, keepdims=True)
    max_int = dt(2**bits - 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = (mx - mn) / max_int
        if not np.all(np.isfinite(scale)):
            raise ValueError(f"x: a group's range max - min overflows {x.dtype}")
        t = (xg - mn) / scale
    t = np.where(scale == 0, dt(0), t)  # constant group: 0/0 cast to code 0
    codes = np.round(np.clip(t, 0, max_int)).astype(np.int32).reshape(x.shape)
    return codes, np.squeeze(scale, red), np.squeeze(mn, red)


def dequantize(codes: ArrayLike, scale: ArrayLike, mn: ArrayLike, *, axis: Axis | str = "channel",
               bits: int = 2, group: int = 32) -> NDArray:
    """(codes [B, H, T, D], scale, mn) -> x_hat = code * scale + mn, two roundings in the
    scale's dtype (the reference casts codes to float16 and multiplies, then adds)."""
    axis = member(axis, Axis, "axis")
    bits = integer(bits, "bits", choices=BITS)
    group = integer(group, "group", minimum=1)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or codes.ndim != 4:
        raise TypeError(f"codes: expected integer codes [B, H, T, D], got {codes.dtype} {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() > 2**bits - 1):
        raise ValueError(f"codes: expected codes in 0 .. {2**bits - 1} for bits={bits}, "
                         f"got {codes.min()} .. {codes.max()}")
    scale, mn = _cache(scale, "scale"), _cache(mn, "mn")
    if mn.dtype != scale.dtype:
        raise TypeError(f"mn: expected the scale's dtype {scale.dtype}, got {mn.dtype}")
    b, h, t, d = codes.shape
    want = (b, h, t // group, d) if axis is Axis.CHANNEL else (b, h, t, d // group)
    cg = _grouped(codes, axis, group, "codes")
    for name, arr in (("scale", scale), ("mn", mn)):
        if arr.shape != want:
            raise ValueError(f"{name}: expected shape {want} for codes {codes.shape}, group {group}, "
                             f"axis {axis.value}, got {arr.shape}")
    red = 3 if axis is Axis.CHANNEL else 4
    s, m = np.expand_dims(scale, red), np.expand_dims(mn, red)
    return (cg.astype(scale.dtype) * s + m).reshape(codes.shape)


def _pack_axis(axis: Axis) -> int:
    return 2 if axis is Axis.CHANNEL else 3  # keys pack along tokens, values along channels


def pack(codes: ArrayLike, *, axis: Axis | str = "channel", bits: int = 2) -> NDArray[np.int32]:
    """codes [B, H, T, D] -> int32 words, 32/b codes each, along tokens for the channel
    axis ([B, H, T*b/32, D]) or channels for the token axis ([B, H, T, D*b/32]); code j
    of a word sits in bits [j*b, (j+1)*b) (two's complement when bit 31 is set)."""
    axis = member(axis, Axis, "axis")
    bits = integer(bits, "bits", choices=BITS)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or codes.ndim != 4:
        raise TypeError(f"codes: expected integer codes [B, H, T, D], got {codes.dtype} {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() > 2**bits - 1):
        raise ValueError(f"codes: expected codes in 0 .. {2**bits - 1}, got {codes.min()} .. {codes.max()}")
    per = 32 // bits
    dim = _pack_axis(axis)
    n = codes.shape[dim]
    if n % per:
        raise ValueError(f"codes: axis {dim} has {n} codes, not a multiple of {per} per int32 word at {bits} bits")
    c = np.moveaxis(codes.astype(np.uint32), dim, -1)
    c = c.reshape(*c.shape[:-1], n // per, per)  # [..., words, per]
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits))
    words = np.bitwise_or.reduce(c << shifts, axis=-1)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), -1, dim)


def unpack(words: ArrayLike, *, axis: Axis | str = "channel", bits: int = 2) -> NDArray[np.int32]:
    """int32 words from `pack` -> codes int32 [B, H, T, D]; every bit of a word is a code bit."""
    axis = member(axis, Axis, "axis")
    bits = integer(bits, "bits", choices=BITS)
    words = np.asarray(words)
    if words.dtype != np.int32 or words.ndim != 4:
        raise TypeError(f"words: expected int32 words of rank 4, got {words.dtype} {words.shape}")
    per = 32 // bits
    dim = _pack_axis(axis)
    w = np.moveaxis(words.view(np.uint32), dim, -1)[..., None]
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits))
    c = (w >> shifts) & np.uint32(2**bits - 1)  # [..., words, per]
    c = c.reshape(*c.shape[:-2], -1).astype(np.int32)
    return np.moveaxis(c, -1, dim)


@dataclass(frozen=True)
class KiviCodes:
    """One encoded tensor: packed int32 words, scale and mn in the input dtype, and how."""

    words: NDArray[np.int32]
    scale: NDArray
    mn: NDArray
    axis: Axis
    bits: int
    group: int


def encode(x: ArrayLike, *, axis: Axis | str = "channel", bits: int = 2, group: int = 32) -> KiviCodes:
    """x [B, H, T, D] -> KiviCodes: `quantize` then `pack` along the reference's axis."""
    axis = member(axis, Axis, "axis")
    codes, scale, mn = quantize(x, axis=axis, bits=bits, group=group)
    return KiviCodes(pack(codes, axis=axis, bits=bits), scale, mn, axis, int(bits), int(group))


def decode(state: KiviCodes) -> NDArray:
    """KiviCodes -> x_hat [B, H, T, D] in the input dtype (`unpack` then `dequantize`)."""
    codes = unpack(state.words, axis=state.axis, bits=state.bits)
    return dequantize(codes, state.scale, state.mn, axis=state.axis, bits=state.bits, group=state.group)


def bits_per_element(t: int, d: int, *, bits: int = 2, group: int = 32, residual: int = 128,
                     part: str = "both", float_bits: int = 16) -> float:
    """Storage bits per cache element after a prefill of t tokens of head dim d (spec/kv.md#kivi-bits).

    Keys: Qk = t - t % R quantized tokens (0 when t < R); values: Qv = max(t - R, 0).
    Each quantized group stores b bits a code plus a scale and an mn of `float_bits`
    (float16 in the reference); full-precision tokens cost `float_bits` an element:
        keys:   Qk*d*b + (Qk/G)*d*2F + (t - Qk)*d*F
        values: Qv*d*b + Qv*(d/G)*2F + (t - Qv)*d*F
    divided by t*d (one part) or 2*t*d (part="both")."""
    t = integer(t, "t", minimum=1)
    d = integer(d, "d", minimum=1)
    bits = integer(bits, "bits", choices=BITS)
    group = integer(group, "group", minimum=1)
    residual = integer(residual, "residual", minimum=group)
    float_bits = integer(float_bits, "float_bits", minimum=1)
    if residual % group or d % group:
        raise ValueError(f"group: {group} must divide residual ({residual}) and d ({d})")
    qk = t - t % residual
    qv = max(t - residual, 0)
    keys = qk * d * bits + (qk // group) * d * 2 * float_bits + (t - qk) * d * float_bits
    values = qv * d * bits + qv * (d // group) * 2 * float_bits + (t - qv) * d * float_bits
    totals = {"keys": (keys, t * d), "values": (values, t * d), "both": (keys + values, 2 * t * d)}
    if part not in totals:
        raise ValueError(f"part: expected one of {tuple(totals)}, got {part!r}")
    num, den = totals[part]
    return num / den

"""OSCAR's INT2 KV codec (spec/kv.md#oscar): per-token clipping at a rank of |x|, INT2
groups with a float zero point and round-half-up, the quarter-row byte packing, and the
cache split [bf16 sink | INT2 middle | bf16 recent].

For one row x of D rotated channels (a token of one KV head; the rotation is
ref.kv.oscar_rotation's), in float32 arithmetic, each operation one rounding:

    tau      = sort(|x|)[min(floor(clip_ratio * D), D - 1)]      (clip_ratio 0: no clipping)
    x        = min(max(x, -tau), tau)
    per group of G consecutive channels:
    scale    = max(max(x) - min(x), 1e-8) / 3
    zero     = -min(x) / scale                                   (a float, not rounded)
    code     = floor(x / scale + zero + 1/2)                     (half up; 0 <= code <= 3)
    x_hat    = (code - zero) * scale

Packing: byte j of a row holds the codes of channels j, j + D/4, j + D/2, j + 3D/4 in
bits 0-1, 2-3, 4-5, 6-7. Cache of T tokens: the first min(T, S0) tokens and the last
min(max(T - S0, 0), W) stay in bfloat16, the rest is INT2.

Reference: Zhou et al., "OSCAR: Offline Spectral Covariance-Aware Rotation for 2-bit KV
Cache Quantization", arXiv 2605.17757; code FutureMLS-Lab/OSCAR@473ff3f (Triton kernels
`_pretransformed_int2_set_kv_clip_grouped_kernel`, `_fused_flush_quant_body`;
`_mixed_window_lengths`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, real

__all__ = ["LEVELS", "OscarCodes", "bits_per_element", "check_cache", "check_rotation", "clip_rows", "decode",
           "dequantize", "encode", "pack", "quantize", "unpack", "windows"]

LEVELS = 3  # 2^2 - 1: the largest INT2 code
_SPAN_FLOOR = np.float32(1e-8)  # the reference's floor on max - min (as a float32 constant)


def _float_rows(x: ArrayLike, name: str) -> NDArray[np.float32]:
    """x as float32 rows [..., D]: float16/32/64 accepted (float64 rounded to nearest),
    at least one axis, every value finite."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name}: expected a float16, float32 or float64 array, got {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{name}: expected at least one axis (channels last), got a 0-d array")
    with np.errstate(over="ignore"):
        x32 = arr.astype(np.float32)
    if not np.isfinite(x32).all():
        raise ValueError(f"{name}: expected finite values (in float32), got NaN or Inf")
    return x32


def _group(group: int, d: int, name: str = "group") -> int:
    g = integer(group, name, minimum=1)
    if d % g:
        raise ValueError(f"{name}: expected a divisor of the head dim {d}, got {g}")
    return g


def _clip_ratio(clip_ratio: float) -> float:
    ratio = real(clip_ratio, "clip_ratio", positive=False)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"clip_ratio: expected a number in [0, 1] (0: no clipping), got {ratio}")
    return ratio


def clip_rows(x: ArrayLike, *, clip_ratio: float = 0.96) -> NDArray[np.float32]:
    """Each row of x [..., D] (float32) clamped to [-tau, tau], tau its |x| of ascending rank
    min(floor(clip_ratio * D), D - 1); clip_ratio 0 leaves x as it is."""
    x32 = _float_rows(x, "x")
    ratio = _clip_ratio(clip_ratio)
    d = x32.shape[-1]
    if ratio == 0.0 or d == 0:
        return x32
    rank = min(int(ratio * d), d - 1)
    tau = np.sort(np.abs(x32), axis=-1)[..., rank:rank + 1]  # [..., 1]
    return np.minimum(np.maximum(x32, -tau), tau)


def quantize(x: ArrayLike, *, clip_ratio: float = 0.96, group: int = 128
             ) -> tuple[NDArray[np.uint8], NDArray[np.float32], NDArray[np.float32]]:
    """x [..., D] -> (codes uint8 [..., D], scales float32 [..., D/G], zeros float32 [..., D/G]).

    The module docstring's steps in float32 (x is first rounded to float32, as the
    reference's kernel loads its bfloat16 rows into float32). A constant group has span
    0, scale 1e-8/3 and codes 0, which decode to its value. A group whose zero point
    -min/scale or span overflows float32 is refused."""
    xc = clip_rows(x, clip_ratio=clip_ratio)  # [..., D]
    d = xc.shape[-1]
    g = _group(group, d)
    grouped = xc.reshape(*xc.shape[:-1], d // g, g)  # [..., D/G, G]
    lo, hi = grouped.min(axis=-1, initial=np.inf), grouped.max(axis=-1, initial=-np.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        span = hi - lo
        scale = np.maximum(span, _SPAN_FLOOR) / np.float32(LEVELS)
        zero = -lo / scale
    if not (np.isfinite(span).all() and np.isfinite(zero).all()):
        raise ValueError("x: a group's range or zero point -min/scale overflows float32")
    steps = (grouped / scale[..., None] + zero[..., None]) + np.float32(0.5)  # [..., D/G, G], >= 1/2
    codes = np.minimum(np.floor(steps), LEVELS).astype(np.uint8)  # floor(.) <= 3 already: see spec
    return codes.reshape(xc.shape), scale.astype(np.float32), zero.astype(np.float32)


def _codes(codes: ArrayLike, name: str = "codes") -> NDArray[np.uint8]:
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer codes, got {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{name}: expected at least one axis, got a 0-d array")
    if arr.size and (arr.min() < 0 or arr.max() > LEVELS):
        raise ValueError(f"{name}: expected INT2 codes 0..3, got values in [{arr.min()}, {arr.max()}]")
    return arr.astype(np.uint8)


def dequantize(codes: ArrayLike, scales: ArrayLike, zeros: ArrayLike, *, group: int = 128) -> NDArray[np.float32]:
    """(codes [..., D], scales, zeros [..., D/G] float32) -> x_hat = (code - zero) * scale, float32."""
    c = _codes(codes)
    d = c.shape[-1]
    g = _group(group, d)
    parts = []
    for name, arr in (("scales", scales), ("zeros", zeros)):
        a = np.asarray(arr)
        if a.dtype != np.float32:
            raise TypeError(f"{name}: expected float32 (the reference's scale store), got {a.dtype}")
        if a.shape != (*c.shape[:-1], d // g):
            raise ValueError(f"{name}: expected shape {(*c.shape[:-1], d // g)}, got {a.shape}")
        parts.append(a[..., None])  # [..., D/G, 1]
    scale, zero = parts
    grouped = c.reshape(*c.shape[:-1], d // g, g).astype(np.float32)  # [..., D/G, G]
    with np.errstate(over="ignore", invalid="ignore"):
        return ((grouped - zero) * scale).reshape(c.shape)


def pack(codes: ArrayLike) -> NDArray[np.uint8]:
    """codes [..., D] (0..3, D a multiple of 4) -> bytes [..., D/4]: byte j = c[j] | c[j+Q] << 2 |
    c[j+2Q] << 4 | c[j+3Q] << 6, Q = D/4 (the reference's quarter-row interleave)."""
    c = _codes(codes)
    d = c.shape[-1]
    if d % 4:
        raise ValueError(f"codes: expected a last axis that is a multiple of 4, got {d}")
    quarters = c.reshape(*c.shape[:-1], 4, d // 4)  # [..., 4, Q]: quarter i of the row
    shifts = np.array([0, 2, 4, 6], np.uint8)[:, None]  # [4, 1]
    return np.bitwise_or.reduce(quarters << shifts, axis=-2).astype(np.uint8)


def unpack(packed: ArrayLike) -> NDArray[np.uint8]:
    """bytes [..., Q] -> codes [..., 4Q], the inverse of `pack`."""
    b = np.asarray(packed)
    if b.dtype != np.uint8:
        raise TypeError(f"packed: expected uint8 bytes, got {b.dtype}")
    if b.ndim < 1:
        raise ValueError("packed: expected at least one axis, got a 0-d array")
    shifts = np.array([0, 2, 4, 6], np.uint8)[:, None]  # [4, 1]
    quarters = (b[..., None, :] >> shifts) & np.uint8(3)  # [..., 4, Q]
    return quarters.reshape(*b.shape[:-1], 4 * b.shape[-1]).astype(np.uint8)


def windows(t: int, *, sink: int = 64, recent: int = 256) -> tuple[int, int, int]:
    """(sink tokens, INT2 tokens, recent tokens) of a cache of t tokens: min(t, S0),
    t - sink - recent, min(max(t - S0, 0), W)."""
    t = integer(t, "t", minimum=0)
    s0 = integer(sink, "sink", minimum=0)
    w = integer(recent, "recent", minimum=0)
    n_sink = min(t, s0)
    n_recent = min(max(t - n_sink, 0), w)
    return n_sink, t - n_sink - n_recent, n_recent


def bits_per_element(t: int, d: int, *, group: int = 128, sink: int = 64, recent: int = 256,
                     scale_bits: int = 16, window_bits: int = 16) -> float:
    """Bits per stored element of K (or V: the same) for a cache of t tokens of head dim d:
    (n * (2 d + 2 scale_bits d / G) + (t - n) d window_bits) / (t d), n the INT2 tokens.
    The paper's 2.28 at t = 131072, d = 128 counts 16-bit scales and zero points; the
    reference's serving store keeps them in float32 (scale_bits 32: 2.53)."""
    t = integer(t, "t", minimum=1)
    d = integer(d, "d", minimum=1)
    g = _group(group, d)
    sb = integer(scale_bits, "scale_bits", minimum=0)
    wb = integer(window_bits, "window_bits", minimum=0)
    n = windows(t, sink=sink, recent=recent)[1]
    return (n * (2 * d + 2 * sb * (d // g)) + (t - n) * d * wb) / (t * d)


@dataclass(frozen=True)
class OscarCodes:
    """One cache tensor (K or V) as OSCAR stores it, rows in the rotated basis:
    sink [B, H, S, D] and recent [B, H, W, D] float64, packed [B, H, N, D/4] uint8,
    scales and zeros [B, H, N, D/G] float32, the rotation r [D, D] and the group."""

    sink: NDArray[np.float64]
    packed: NDArray[np.uint8]
    scales: NDArray[np.float32]
    zeros: NDArray[np.float32]
    recent: NDArray[np.float64]
    r: NDArray[np.float64]
    group: int


def check_rotation(r: ArrayLike, d: int, name: str) -> NDArray[np.float64]:
    """r as a float64 [d, d] orthogonal matrix (|R R^T - I| <= 1e-5), or a ValueError naming `name`."""
    arr = np.asarray(r)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name}: expected a float array, got {arr.dtype}")
    if arr.shape != (d, d):
        raise ValueError(f"{name}: expected shape {(d, d)}, got {arr.shape}")
    r64 = arr.astype(np.float64)
    if not np.isfinite(r64).all():
        raise ValueError(f"{name}: expected finite values, got NaN or Inf")
    err = float(np.abs(r64 @ r64.T - np.eye(d)).max()) if d else 0.0
    if err > 1e-5:  # float32-stored rotations are orthogonal to ~1e-7
        raise ValueError(f"{name}: expected an orthogonal matrix (|R R^T - I| <= 1e-5), got {err:.3g}")
    return r64


def check_cache(x: ArrayLike, name: str, layout: str = "[B, H, T, D]") -> NDArray[np.float64]:
    """x as float64 of rank 4 (`layout`, for the message) with finite values, or an
    error naming `name`."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name}: expected a float array, got {arr.dtype}")
    if arr.ndim != 4:
        raise ValueError(f"{name}: expected {layout}, got shape {arr.shape}")
    x64 = arr.astype(np.float64)
    if not np.isfinite(x64).all():
        raise ValueError(f"{name}: expected finite values, got NaN or Inf")
    return x64


def encode(x: ArrayLike, r: ArrayLike, *, clip_ratio: float = 0.96, group: int = 128, sink: int = 64,
           recent: int = 256) -> OscarCodes:
    """x [B, H, T, D] -> OscarCodes: rows rotated (x @ r, float64), the middle tokens
    rounded to float32, quantized and packed; sink and recent kept."""
    x64 = check_cache(x, "x")
    d = x64.shape[-1]
    r64 = check_rotation(r, d, "r")
    xr = x64 @ r64  # [B, H, T, D]
    n_sink, n_mid, _ = windows(x64.shape[2], sink=sink, recent=recent)
    codes, scales, zeros = quantize(xr[:, :, n_sink:n_sink + n_mid], clip_ratio=clip_ratio, group=group)
    return OscarCodes(xr[:, :, :n_sink], pack(codes), scales, zeros, xr[:, :, n_sink + n_mid:], r64,
                      _group(group, d))


def decode(state: OscarCodes) -> NDArray[np.float64]:
    """OscarCodes -> x_hat [B, H, T, D] in the original basis: [sink | dequantized | recent] @ r^T."""
    if not isinstance(state, OscarCodes):
        raise TypeError(f"state: expected OscarCodes, got {type(state).__name__}")
    mid = dequantize(unpack(state.packed), state.scales, state.zeros, group=state.group)
    rows = np.concatenate([state.sink, mid.astype(np.float64), state.recent], axis=2)  # [B, H, T, D]
    return rows @ state.r.T


"""Quantized GEMMs: y = x @ W^T with one or both operands stored as codes and scales,
defined exactly (float64) as the product of the decoded operands.

  w4a16_gemm  x [M, K] (bfloat16 or float16 activations), codes [N, K] unsigned
              integers in [0, 2^bits - 1], scales [N, G] and zeros [N, G]; channel k
              reads group j = k // (K / G) (G runs of consecutive channels), or
              j = g_idx[k] when g_idx [K] is given (GPTQ's act-order checkpoints):
                  W[n, k] = (codes[n, k] - zeros[n, j]) * scales[n, j]
              zeros are integer codes (`zeros_kind="integer"`: GPTQ, AWQ, Marlin,
              ExLlama, compressed-tensors' asymmetric INT4) or floats in the code
              domain (`zeros_kind="float"`: HQQ, W = (W_q - z) * s). AWQ's GEMM kernel
              computes the same number as codes * s - (z * s) ("scaled zeros"),
              rounded differently (the emulation takes the worse of both forms).
  fp8_gemm    x_codes [M, K] and w_codes [N, K] float8_e4m3fn codes (uint8), x_scales
              [M] per token or [1] per tensor, w_scales [N] per output channel or [1]
              per tensor (float32):
                  y[m, n] = x_scales[m] * w_scales[n] * sum_k e4m3(x[m, k]) e4m3(w[n, k])
  mxfp4_gemm  a_codes [M, K], b_codes [N, K] E2M1 codes (one per byte), a_scales
              [M, K / 32], b_scales [N, K / 32] E8M0 scale codes (ref.formats.mx):
                  y = decode(a) @ decode(b)^T
  nvfp4_gemm  codes as mxfp4_gemm, E4M3 block scales per 16 along K, a per-tensor
              float32 decode scale for each operand (a_global, b_global: the number
              the block scale is multiplied by; TransformerEngine's and vLLM's stored
              encode scale g gives f32(1/g)), ref.formats.nvfp4:
                  y = (decode(a) @ decode(b)^T) * a_global * b_global

Every function returns float64 [M, N]. NaN codes (E4M3 0x7F/0xFF), NaN scales (E8M0
0xFF, E4M3 0x7F/0xFF) and NaN activations make NaN the outputs that read them; an
infinite activation makes Inf (or NaN where it meets a zero weight). M or N may be
0 (an empty output); K must be at least one group. Kernels at a lower precision are
judged by ref.quant.gemm_emulate (spec/quant.md, "Quantized GEMMs").

References: Frantar et al., "GPTQ", arXiv:2210.17323, and Frantar et al., "MARLIN",
arXiv:2408.11743 (W4A16 kernels); Lin et al., "AWQ", arXiv:2306.00978; Micikevicius
et al., "FP8 Formats for Deep Learning", arXiv:2209.05433; OCP Microscaling Formats
v1.0 and Rouhani et al., arXiv:2310.10537; NVIDIA, "Pretraining Large Language
Models with NVFP4", arXiv:2509.25149.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member, positive_float32
from ref.formats import mx, nvfp4
from ref.formats.minifloat import decode

__all__ = ["BITS", "MX_BLOCK", "NV_BLOCK", "ZeroKind", "check_floats", "fp8_gemm", "group_index", "mxfp4_gemm",
           "nvfp4_gemm", "w4a16_gemm", "w4a16_weights"]

BITS = (2, 3, 4, 8)
MX_BLOCK = 32
NV_BLOCK = nvfp4.BLOCK  # 16


class ZeroKind(enum.Enum):
    INTEGER = "integer"  # zero points are codes (GPTQ, AWQ, Marlin, ExLlama)
    FLOAT = "float"  # zero points are floats in the code domain (HQQ)


def check_floats(a: ArrayLike, name: str, ndim: int) -> NDArray[np.float64]:
    """`a` as float64, if it is a float array (ml_dtypes' too) of `ndim` dimensions."""
    arr = np.asarray(a)
    if arr.dtype.kind != "f" and arr.dtype.name not in ("bfloat16", "float16"):
        raise TypeError(f"{name}: expected a float array, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    return arr.astype(np.float64)


def _codes(a: ArrayLike, name: str, top: int) -> NDArray[np.int64]:
    """An integer array [rows, K] whose values lie in [0, top]."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected 2 dimensions [rows, K], got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() > top):
        raise ValueError(f"{name}: expected values in [0, {top}], got [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


def _uint8(a: ArrayLike, name: str, ndim: int) -> NDArray[np.uint8]:
    arr = np.asarray(a)
    if arr.dtype != np.uint8:
        raise TypeError(f"{name}: expected uint8 codes, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    return arr


def _same_k(a_shape, b_shape, a: str, b: str) -> None:
    if a_shape[1] != b_shape[1]:
        raise ValueError(f"{a}, {b}: the reduction lengths differ ({a_shape[1]} and {b_shape[1]})")


def group_index(k: int, groups: int) -> NDArray[np.int64]:
    """The group of each input channel: k // (K / G), G groups of consecutive channels."""
    return np.arange(k) // (k // groups)


# ---------------------------------------------------------------------------- W4A16

def w4a16_weights(codes: ArrayLike, scales: ArrayLike, zeros: ArrayLike, g_idx: ArrayLike | None = None, *,
                  bits: int = 4, zeros_kind: ZeroKind | str = ZeroKind.INTEGER):
    """The checked weight operands: (codes [N, K] int64, scales [N, K] float64, zeros
    [N, K] float64), each channel's group scale and zero in its place."""
    bits = integer(bits, "bits", choices=BITS)
    kind = member(zeros_kind, ZeroKind, "zeros_kind")
    q = _codes(codes, "codes", 2**bits - 1)
    s = check_floats(scales, "scales", 2)
    n, k = q.shape
    if s.shape[0] != n or s.shape[1] < 1 or k == 0 or (g_idx is None and k % s.shape[1]):
        raise ValueError(f"scales: expected [N, G] = [{n}, G] with G >= 1 groups dividing K = {k} "
                         f"(any G with g_idx), got shape {s.shape}")
    if kind is ZeroKind.INTEGER:
        z = _codes(zeros, "zeros", 2**bits - 1).astype(np.float64)
    else:
        z = check_floats(zeros, "zeros", 2)
    if z.shape != s.shape:
        raise ValueError(f"zeros: expected the scales' shape {s.shape}, got {z.shape}")
    if g_idx is None:
        idx = group_index(k, s.shape[1])  # [K]
    else:
        idx = np.asarray(g_idx)
        if idx.dtype.kind not in "iu" or idx.shape != (k,):
            raise TypeError(f"g_idx: expected integers of shape ({k},) (one group per input channel), "
                            f"got {idx.dtype} of shape {idx.shape}")
        if k and (idx.min() < 0 or idx.max() >= s.shape[1]):
            raise ValueError(f"g_idx: expected groups in [0, {s.shape[1] - 1}], got [{idx.min()}, {idx.max()}]")
    return q, s[:, idx], z[:, idx]


def w4a16_gemm(x: ArrayLike, codes: ArrayLike, scales: ArrayLike, zeros: ArrayLike, g_idx: ArrayLike | None = None,
               *, bits: int = 4, zeros_kind: ZeroKind | str = ZeroKind.INTEGER) -> NDArray[np.float64]:
    """y = x @ ((codes - zeros) * scales)^T in float64: [M, K] x [N, K] -> [M, N]; channel
    k reads group g_idx[k] (default k // (K / G))."""
    q, s, z = w4a16_weights(codes, scales, zeros, g_idx, bits=bits, zeros_kind=zeros_kind)
    xf = check_floats(x, "x", 2)
    _same_k(xf.shape, q.shape, "x", "codes")
    w = (q - z) * s  # [N, K]
    with np.errstate(invalid="ignore", over="ignore"):
        return xf @ w.T


# ---------------------------------------------------------------------------- W8A8 FP8

def _channel_scales(a: ArrayLike, name: str, rows: int) -> NDArray[np.float64]:
    """Per-row scales [rows] or one per tensor [1], as float64 [rows]."""
    s = check_floats(a, name, 1)
    if s.shape not in ((rows,), (1,)):
        raise ValueError(f"{name}: expected shape ({rows},) (one per row) or (1,) (per tensor), got {s.shape}")
    return np.broadcast_to(s, (rows,))


def fp8_gemm(x_codes: ArrayLike, x_scales: ArrayLike, w_codes: ArrayLike, w_scales: ArrayLike) -> NDArray[np.float64]:
    """y[m, n] = x_scales[m] w_scales[n] sum_k e4m3(x_codes[m, k]) e4m3(w_codes[n, k])."""
    xq, wq = _uint8(x_codes, "x_codes", 2), _uint8(w_codes, "w_codes", 2)
    _same_k(xq.shape, wq.shape, "x_codes", "w_codes")
    if xq.shape[1] == 0:
        raise ValueError("x_codes: expected K >= 1")
    xs = _channel_scales(x_scales, "x_scales", xq.shape[0])
    ws = _channel_scales(w_scales, "w_scales", wq.shape[0])
    xd = decode(xq, "float8_e4m3fn").astype(np.float64)
    wd = decode(wq, "float8_e4m3fn").astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return (xd @ wd.T) * xs[:, None] * ws[None, :]


# ---------------------------------------------------------------------------- block-scaled FP4

def _block_operands(a_codes, a_scales, b_codes, b_scales, block: int):
    """Checked codes and scales of both operands (scales [rows, K / block])."""
    aq, bq = _uint8(a_codes, "a_codes", 2), _uint8(b_codes, "b_codes", 2)
    asc, bsc = _uint8(a_scales, "a_scales", 2), _uint8(b_scales, "b_scales", 2)
    _same_k(aq.shape, bq.shape, "a_codes", "b_codes")
    k = aq.shape[1]
    if k == 0 or k % block:
        raise ValueError(f"a_codes: K must be a positive multiple of {block}, got {k}")
    for name, c in (("a_codes", aq), ("b_codes", bq)):
        if c.size and c.max() > 15:
            raise ValueError(f"{name}: expected E2M1 codes in [0, 15] (one per byte), got {c.max()}")
    for name, s, rows in (("a_scales", asc, aq.shape[0]), ("b_scales", bsc, bq.shape[0])):
        if s.shape != (rows, k // block):
            raise ValueError(f"{name}: expected shape {(rows, k // block)} (one per {block} along K), got {s.shape}")
    return aq, asc, bq, bsc


def mxfp4_gemm(a_codes: ArrayLike, a_scales: ArrayLike, b_codes: ArrayLike, b_scales: ArrayLike) -> NDArray[np.float64]:
    """y = mx.dequantize(a) @ mx.dequantize(b)^T (MXFP4, E8M0 scales per 32 along K)."""
    aq, asc, bq, bsc = _block_operands(a_codes, a_scales, b_codes, b_scales, MX_BLOCK)
    a = mx.dequantize(aq, asc, "float4_e2m1fn", block=MX_BLOCK)  # [M, K], exact
    b = mx.dequantize(bq, bsc, "float4_e2m1fn", block=MX_BLOCK)  # [N, K]
    with np.errstate(invalid="ignore", over="ignore"):
        return a @ b.T


def nvfp4_gemm(a_codes: ArrayLike, a_scales: ArrayLike, a_global, b_codes: ArrayLike, b_scales: ArrayLike,
               b_global) -> NDArray[np.float64]:
    """y = (decode(a) @ decode(b)^T) * a_global * b_global (NVFP4: E4M3 scales per 16
    along K; a_global, b_global the per-tensor decode scales)."""
    aq, asc, bq, bsc = _block_operands(a_codes, a_scales, b_codes, b_scales, NV_BLOCK)
    # torchao's recipe takes the decode scale itself: element * block scale * a_global, exact
    a = nvfp4.dequantize(aq, asc, positive_float32(a_global, "a_global"), recipe="torchao_0_17")
    b = nvfp4.dequantize(bq, bsc, positive_float32(b_global, "b_global"), recipe="torchao_0_17")
    with np.errstate(invalid="ignore", over="ignore"):
        return a @ b.T



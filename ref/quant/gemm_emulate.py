"""The quantized GEMMs evaluated at a kernel's precision: the yardstick of the
bounded rule (spec/conformance.md, "Bounded comparison"; spec/quant.md, "Quantized
GEMMs").

Each function takes `precision` (P: bfloat16, float16, float32 or float64) first and
then exactly its oracle's arguments (ref.quant.gemm), and evaluates the product as a
tensor-core kernel does, with these roundings and no others:

  w4a16_gemm  x stored at P; scales (and float zeros) stored at P; the weight
              dequantized at P in each of two forms, whichever lands further from
              the oracle (output by output):
                  (q - z) * s           (q - z) stored at P, the product stored at P
                                        (GPTQ/ExLlama, Marlin, HQQ)
                  q * s - z * s         both products stored at P, their difference
                                        at P (AWQ's GEMM kernel: "scaled zeros")
              products x * w in float32 (exact when P is bfloat16 or float16),
              summed in float32 in order k = 0, 1, ..., K - 1; the sum stored at P
  fp8_gemm    products of the E4M3 values (exact in float32), summed in float32 in
              order of k; then f32(f32(sum * w_scale[n]) * x_scale[m]) (vLLM's
              CUTLASS epilogue), stored at P
  mxfp4_gemm  one term per block of 32 along K: the block's exact dot product times
              both block scales, rounded once to float32 (exact unless it leaves
              float32's range: every E2M1 product and block sum is a short binary
              number and the scales are powers of two); the terms summed in float32
              in block order; the sum stored at P
  nvfp4_gemm  the same per block of 16 (the E4M3 scales' product has 8 significant
              bits, the block sum 13: exact in float32), then
              f32(sum * f32(a_global * b_global)) (the GEMM's alpha), stored at P

Sequential float32 summation is the order whose error grows fastest with K (about
K * 2^-24 relative in the worst case); a kernel that sums in tiles, pairwise or in
split-K partitions lands closer. At float64 each returns the oracle itself.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import choice, member, positive_float32
from ref.formats import mx, nvfp4
from ref.formats.minifloat import PRECISIONS, decode, round_to
from ref.quant import gemm

__all__ = ["fp8_gemm", "mxfp4_gemm", "nvfp4_gemm", "sequential_sum", "w4a16_gemm"]

_F32 = np.float32


def sequential_sum(terms: NDArray[np.float32]) -> NDArray[np.float32]:
    """terms [..., K] summed in float32 in order of the last axis: ((t0 + t1) + t2) + ...
    (a ufunc's accumulate is sequential; its reduce would sum pairwise)."""
    if terms.shape[-1] == 0:
        return np.zeros(terms.shape[:-1], _F32)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.add.accumulate(terms.astype(_F32), axis=-1, dtype=_F32)[..., -1]


def _low(precision: str):
    def low(v) -> NDArray[np.float64]:
        with np.errstate(invalid="ignore", over="ignore"):
            return round_to(v, precision)
    return low


def _worse(exact: NDArray[np.float64], *evaluations: NDArray[np.float64]) -> NDArray[np.float64]:
    errors = []
    fin = np.isfinite(exact)
    for ev in evaluations:
        with np.errstate(invalid="ignore"):
            errors.append(np.max(np.abs(ev - exact)[fin], initial=0.0))
    return evaluations[int(np.argmax(errors))]


def _dot_f32(x: NDArray[np.float32], w: NDArray[np.float32]) -> NDArray[np.float32]:
    """x [M, K] . w [N, K] -> [M, N]: float32 products, summed in order of k (rows in
    chunks of about 2^22 products)."""
    out = np.zeros((x.shape[0], w.shape[0]), _F32)
    step = max(1, (1 << 22) // max(1, w.size))
    for r in range(0, x.shape[0], step):
        with np.errstate(invalid="ignore", over="ignore"):
            products = x[r:r + step, None, :] * w[None, :, :]  # [rows, N, K]
        out[r:r + step] = sequential_sum(products)
    return out


def w4a16_gemm(precision: str, x: ArrayLike, codes: ArrayLike, scales: ArrayLike, zeros: ArrayLike,
               g_idx: ArrayLike | None = None, *, bits: int = 4, zeros_kind: str = "integer") -> NDArray[np.float64]:
    """`w4a16_gemm` at `precision` (values returned as float64)."""
    exact = gemm.w4a16_gemm(x, codes, scales, zeros, g_idx, bits=bits, zeros_kind=zeros_kind)  # checks arguments
    if choice(precision, "precision", PRECISIONS) == "float64":
        return exact
    low = _low(precision)
    q, s, z = gemm.w4a16_weights(codes, scales, zeros, g_idx, bits=bits, zeros_kind=zeros_kind)
    s = low(s)
    if member(zeros_kind, gemm.ZeroKind, "zeros_kind") is gemm.ZeroKind.FLOAT:
        z = low(z)
    xl = low(np.asarray(x, np.float64)).astype(_F32)
    forms = (low(low(q - z) * s), low(low(q * s) - low(z * s)))  # (q - z) * s, q * s - z * s
    return _worse(exact, *(low(_dot_f32(xl, w.astype(_F32))) for w in forms))


def fp8_gemm(precision: str, x_codes: ArrayLike, x_scales: ArrayLike, w_codes: ArrayLike,
             w_scales: ArrayLike) -> NDArray[np.float64]:
    """`fp8_gemm` at `precision`: float32 accumulation, scales in the epilogue."""
    exact = gemm.fp8_gemm(x_codes, x_scales, w_codes, w_scales)  # checks every argument
    if choice(precision, "precision", PRECISIONS) == "float64":
        return exact
    xd, wd = decode(np.asarray(x_codes), "float8_e4m3fn"), decode(np.asarray(w_codes), "float8_e4m3fn")
    m, n = xd.shape[0], wd.shape[0]
    xs = np.broadcast_to(np.asarray(x_scales, np.float64).astype(_F32), (m,))
    ws = np.broadcast_to(np.asarray(w_scales, np.float64).astype(_F32), (n,))
    acc = _dot_f32(xd, wd)
    with np.errstate(invalid="ignore", over="ignore"):
        return round_to((acc * ws[None, :]) * xs[:, None], precision)


def _block_terms(a: NDArray[np.float64], b: NDArray[np.float64], block: int) -> NDArray[np.float32]:
    """Decoded operands a [M, K], b [N, K] -> each block's exact dot product rounded
    once to float32, [M, N, K / block]."""
    nb = a.shape[1] // block
    ab = a.reshape(a.shape[0], nb, block)  # [M, K / block, block]
    bb = b.reshape(b.shape[0], nb, block)  # [N, K / block, block]
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        return np.einsum("mbj,nbj->mnb", ab, bb).astype(_F32)


def mxfp4_gemm(precision: str, a_codes: ArrayLike, a_scales: ArrayLike, b_codes: ArrayLike,
               b_scales: ArrayLike) -> NDArray[np.float64]:
    """`mxfp4_gemm` at `precision`: block terms in float32, summed in block order."""
    exact = gemm.mxfp4_gemm(a_codes, a_scales, b_codes, b_scales)  # checks every argument
    if choice(precision, "precision", PRECISIONS) == "float64":
        return exact
    a = mx.dequantize(np.asarray(a_codes), np.asarray(a_scales), "float4_e2m1fn", block=gemm.MX_BLOCK)
    b = mx.dequantize(np.asarray(b_codes), np.asarray(b_scales), "float4_e2m1fn", block=gemm.MX_BLOCK)
    return round_to(sequential_sum(_block_terms(a, b, gemm.MX_BLOCK)), precision)


def nvfp4_gemm(precision: str, a_codes: ArrayLike, a_scales: ArrayLike, a_global, b_codes: ArrayLike,
               b_scales: ArrayLike, b_global) -> NDArray[np.float64]:
    """`nvfp4_gemm` at `precision`: block terms in float32, then alpha."""
    exact = gemm.nvfp4_gemm(a_codes, a_scales, a_global, b_codes, b_scales, b_global)  # checks every argument
    if choice(precision, "precision", PRECISIONS) == "float64":
        return exact
    one = _F32(1)
    a = nvfp4.dequantize(np.asarray(a_codes), np.asarray(a_scales), one, recipe="torchao_0_17")
    b = nvfp4.dequantize(np.asarray(b_codes), np.asarray(b_scales), one, recipe="torchao_0_17")
    acc = sequential_sum(_block_terms(a, b, gemm.NV_BLOCK))
    alpha = positive_float32(a_global, "a_global") * positive_float32(b_global, "b_global")
    with np.errstate(invalid="ignore", over="ignore"):
        return round_to(acc * _F32(alpha), precision)

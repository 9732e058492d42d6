"""The quantized-GEMM bug corpus: kernels that go wrong the ways real W4A16, FP8 and
block-scaled FP4 kernels do, each one step changed from a plain correct kernel written
here (decode both operands in float64, round them to the kernel's precision, one
float32 matrix product, the output rounded to the precision; for MXFP4 and NVFP4 each
block's products with both scales rounded once to float32, the blocks summed in
float32, as block-scaled MMA applies the scales).

GEMM_BUGS: name -> (op, flag, bugs). `bug(name)` is the Implementation with those
bugs (at bfloat16); `correct(precision)` is the plain kernel at `precision`, which
passes. Every kernel first runs the default kernel on its inputs, so that invalid
inputs are refused as the product refuses them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ref.conformance.adapters import numpy_quant_gemm as product
from ref.conformance.implementation import Implementation
from ref.formats.minifloat import decode, round_to

_F32 = np.float32
_NARROW = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
W4A16, FP8, MXFP4, NVFP4 = "quant.w4a16_gemm", "quant.fp8_gemm", "quant.mxfp4_gemm", "quant.nvfp4_gemm"

GEMM_BUGS = {
    # The example: a W4A16 kernel whose accumulator is bfloat16 (every partial sum rounded).
    "W4A16 accumulating in bfloat16": (W4A16, "GemmAccumulation", {"accumulate bfloat16"}),
    "W4A16 accumulating in float16": (W4A16, "GemmAccumulation", {"accumulate float16"}),
    # AWQ-style scaled zeros written wrong: q * s - z, the zero not scaled.
    "W4A16 zero subtracted after scaling": (W4A16, "GemmZeroPoint", {"zero after scaling"}),
    # A symmetric kernel run on an asymmetric checkpoint: zero 2^(bits-1) assumed.
    "W4A16 zero points ignored (2^(bits-1) assumed)": (W4A16, "GemmZeroPoint", {"zero ignored"}),
    # HQQ's float zero points read as integer codes (rounded).
    "W4A16 float zeros rounded to integers": (W4A16, "GemmZeroPoint", {"zero rounded"}),
    "W4A16 group index off by one ((k + 1) // g)": (W4A16, "GemmGroupIndex", {"group off by one"}),
    "W4A16 group index interleaved (k % G)": (W4A16, "GemmGroupIndex", {"group interleaved"}),
    # An act-order checkpoint run by a kernel without g_idx support (k // g for every channel).
    "W4A16 g_idx ignored": (W4A16, "GemmGroupIndex", {"g_idx ignored"}),
    # A 4-bit kernel's nibble mask applied to 8-bit codes.
    "W4A16 codes masked to 4 bits": (W4A16, "GemmCodeBits", {"mask 4 bits"}),
    # The example: the per-token activation scale applied per output column.
    "FP8 activation scale per column": (FP8, "GemmActivationScale", {"x scale per column"}),
    "FP8 activation scale per tensor (the first token's)": (FP8, "GemmActivationScale", {"x scale first"}),
    "FP8 weight scale per row": (FP8, "GemmWeightScale", {"w scale per row"}),
    "FP8 accumulating in bfloat16": (FP8, "GemmAccumulation", {"accumulate bfloat16"}),
    "MXFP4 scales read per 16 (NVFP4's block)": (MXFP4, "GemmBlockScale", {"block 16"}),
    "MXFP4 scale of the next block": (MXFP4, "GemmBlockScale", {"next block"}),
    "MXFP4 accumulating in float16": (MXFP4, "GemmAccumulation", {"accumulate float16"}),
    "NVFP4 global scale missing": (NVFP4, "GemmGlobalScale", {"no global"}),
    "NVFP4 only a's global scale": (NVFP4, "GemmGlobalScale", {"a global only"}),
    "NVFP4 global scale inverted (the encode scale read as decode)": (NVFP4, "GemmGlobalScale", {"inverse global"}),
    "NVFP4 scales read per 32 (MX's block)": (NVFP4, "GemmBlockScale", {"block 32"}),
    "NVFP4 accumulating in bfloat16": (NVFP4, "GemmAccumulation", {"accumulate bfloat16"}),
    # Issue 14's adversary review (gemm): bugs the first vectors let through.
    # Split-K with 2 or 4 slices whose partial sums are rounded to bfloat16 (caught where the output cancels).
    "W4A16 split-K partials in bfloat16": (W4A16, "GemmRounding", {"split-k bfloat16"}),
    "FP8 split-K partials in bfloat16": (FP8, "GemmRounding", {"split-k bfloat16"}),
    "NVFP4 split-K partials in bfloat16": (NVFP4, "GemmRounding", {"split-k bfloat16"}),
    # FP8 products summed in float16 (8 slices): the accumulator overflows though the output is in range.
    "FP8 accumulating in float16": (FP8, "GemmAccumulation", {"accumulate float16"}),
    # bfloat16 conversion by truncation (round toward zero), of float32 activations or of the weights.
    "W4A16 activations truncated to bfloat16": (W4A16, "GemmRounding", {"truncate x"}),
    "W4A16 weights truncated to bfloat16": (W4A16, "GemmRounding", {"truncate w"}),
    # exllama-style half scales under a bfloat16 output.
    "W4A16 scales held in float16": (W4A16, "GemmScalePrecision", {"scales float16"}),
    # A negative g_idx taken Python-style (the last group) instead of refused.
    "W4A16 negative g_idx wraps": (W4A16, "GemmGroupIndex", {"g_idx wraps"}),
    # Each MXFP4 operand dequantized to float32 apart: 6 * 2^127 overflows.
    "MXFP4 operands scaled apart in float32": (MXFP4, "GemmScaleDecode", {"operands float32"}),
    # E8M0 built as float32 bits (s << 23), or FTZ: the scale 2^-127 becomes 0.
    "MXFP4 subnormal scale flushed to zero": (MXFP4, "GemmScaleDecode", {"scale ftz"}),
    # E8M0 0xFF decoded as 2^128 (Inf) instead of NaN.
    "MXFP4 scale 0xFF read as Inf": (MXFP4, "NaN", {"ff inf"}),
    # NVFP4 block scales read as unsigned E4M3 (UE4M3): the sign bit dropped.
    "NVFP4 block scale read unsigned": (NVFP4, "GemmScaleDecode", {"unsigned scale"}),
}


def _trunc_bf16(v):
    """v rounded to bfloat16 toward zero (via float32), as float64."""
    f = np.ascontiguousarray(v, _F32)
    return (f.view(np.uint32) & np.uint32(0xFFFF0000)).view(_F32).astype(np.float64)


def _matmul(a, b, bugs, precision):
    """a [M, K] @ b [N, K]^T: float32 (BLAS order), or a narrow accumulator, or split-K
    halves whose partial sums are rounded to bfloat16 (and added in bfloat16)."""
    narrow = next((b_[len("accumulate "):] for b_ in bugs if b_.startswith("accumulate ")), None)
    with np.errstate(invalid="ignore", over="ignore"):
        if "split-k bfloat16" in bugs:
            half = a.shape[1] // 2
            parts = [round_to(a[:, s].astype(_F32) @ b[:, s].astype(_F32).T, "bfloat16")
                     for s in (slice(0, half), slice(half, None))]
            return round_to(round_to(parts[0] + parts[1], "bfloat16"), precision)
        if narrow is None:
            return round_to(a.astype(_F32) @ b.astype(_F32).T, precision)
        products = round_to(a[:, None, :] * b[None, :, :], narrow).astype(_NARROW[narrow])  # [M, N, K]
        if products.shape[-1] == 0:
            return np.zeros(products.shape[:-1])
        return np.add.accumulate(products, axis=-1)[..., -1].astype(np.float64)  # rounded at every step


def _w4a16(bugs, precision):
    def kernel(x, codes, scales, zeros, g_idx=None, bits=4, zeros_kind="integer"):
        if "g_idx wraps" in bugs and g_idx is not None:
            g_idx = np.asarray(g_idx) % np.shape(scales)[1]  # -1 becomes the last group, then checked
        product.w4a16_gemm(x, codes, scales, zeros, g_idx, bits=bits, zeros_kind=zeros_kind)  # the product's checks
        q = np.asarray(codes, np.int64)
        if "mask 4 bits" in bugs:
            q = q & 0xF
        s, z = np.asarray(scales, np.float64), np.asarray(zeros, np.float64)
        if "scales float16" in bugs:
            s = round_to(s, "float16")
        if "zero rounded" in bugs and zeros_kind == "float":
            z = np.rint(z)
        k, groups = q.shape[1], s.shape[1]
        g = max(1, k // groups)
        idx = np.arange(k) // g
        if "group off by one" in bugs:
            idx = np.minimum((np.arange(k) + 1) // g, groups - 1)
        if "group interleaved" in bugs:
            idx = np.arange(k) % groups
        if g_idx is not None and "g_idx ignored" not in bugs:
            idx = np.asarray(g_idx)
        s, z = s[:, idx], z[:, idx]
        if "zero ignored" in bugs:
            z = np.full_like(z, 2 ** (bits - 1))
        w = q * s - z if "zero after scaling" in bugs else (q - z) * s
        xs = np.asarray(x, np.float64)
        xs = _trunc_bf16(xs) if "truncate x" in bugs else round_to(xs, precision)
        w = _trunc_bf16(w) if "truncate w" in bugs else round_to(w, precision)
        return _matmul(xs, w, bugs, precision).astype(_F32)
    return kernel


def _fp8(bugs, precision):
    def kernel(x_codes, x_scales, w_codes, w_scales):
        product.fp8_gemm(x_codes, x_scales, w_codes, w_scales)
        xd = decode(np.asarray(x_codes), "float8_e4m3fn").astype(np.float64)
        wd = decode(np.asarray(w_codes), "float8_e4m3fn").astype(np.float64)
        xs, ws = np.asarray(x_scales, np.float64), np.asarray(w_scales, np.float64)
        acc = _matmul(xd, wd, bugs, "float32")
        with np.errstate(invalid="ignore", over="ignore"):
            if "x scale per column" in bugs:
                acc = acc * xs[None, :]
            elif "x scale first" in bugs:
                acc = acc * xs[0]
            else:
                acc = acc * xs[:, None]
            acc = acc * (ws[:, None] if "w scale per row" in bugs else ws[None, :])
        return round_to(acc, precision).astype(_F32)
    return kernel


def _fp4(codes, scales, block, read_block, mx, next_block, bugs=frozenset()):
    """An E2M1 operand [rows, K] times its block scales (float64), the scale of element
    k read from block min(k // read_block (+ 1), K / block - 1)."""
    q, s = np.asarray(codes), np.asarray(scales)
    k = q.shape[1]
    idx = np.minimum(np.arange(k) // read_block + next_block, k // block - 1)
    if mx:
        factor = np.where(s == 0xFF, np.inf if "ff inf" in bugs else np.nan, np.ldexp(1.0, s.astype(np.int64) - 127))
        if "scale ftz" in bugs:
            factor = np.where(factor < 2.0**-126, 0.0, factor)
    else:
        factor = decode(s & 0x7F if "unsigned scale" in bugs else s, "float8_e4m3fn").astype(np.float64)
    return decode(q, "float4_e2m1fn").astype(np.float64) * factor[:, idx]


def _block_dot(a, b, block):
    """a [M, K] @ b [N, K]^T as block-scaled MMA computes it: each block's products
    with both scales (float64, exact here) rounded once to float32, the blocks summed
    in float32."""
    m, k = a.shape
    with np.errstate(invalid="ignore", over="ignore"):
        terms = (a[:, None, :] * b[None, :, :]).reshape(m, b.shape[0], k // block, block).sum(-1).astype(_F32)
        return np.add.reduce(terms, axis=-1, dtype=_F32).astype(np.float64)


def _block(bugs, precision, nv):
    block = 16 if nv else 32
    read = 16 if "block 16" in bugs else 32 if "block 32" in bugs else block
    nxt = int("next block" in bugs)

    # the operands scaled apart in float32, then one product (the accumulator bugs' path too)
    apart = any(b_.startswith(("accumulate ", "split-k ")) for b_ in bugs) or "operands float32" in bugs

    def operands(ac, as_, bc, bs):
        return _fp4(ac, as_, block, read, not nv, nxt, bugs), _fp4(bc, bs, block, read, not nv, nxt, bugs)

    def product_(a, b, at):
        return _matmul(a, b, bugs, at) if apart else round_to(_block_dot(a, b, block), at)

    def mx_kernel(a_codes, a_scales, b_codes, b_scales):
        product.mxfp4_gemm(a_codes, a_scales, b_codes, b_scales)
        return product_(*operands(a_codes, a_scales, b_codes, b_scales), precision).astype(_F32)

    def nv_kernel(a_codes, a_scales, a_global, b_codes, b_scales, b_global):
        product.nvfp4_gemm(a_codes, a_scales, a_global, b_codes, b_scales, b_global)
        acc = product_(*operands(a_codes, a_scales, b_codes, b_scales), "float32")
        ga, gb = float(a_global), float(b_global)
        alpha = 1.0 if "no global" in bugs else ga if "a global only" in bugs else 1 / (ga * gb) \
            if "inverse global" in bugs else ga * gb
        with np.errstate(invalid="ignore", over="ignore"):
            return round_to(acc * float(_F32(alpha)), precision).astype(_F32)

    return nv_kernel if nv else mx_kernel


def _kernels(bugs: frozenset[str], precision: str) -> dict:
    return {W4A16: _w4a16(bugs, precision), FP8: _fp8(bugs, precision), MXFP4: _block(bugs, precision, False),
            NVFP4: _block(bugs, precision, True)}


_W4A16_VARIANTS = {"bits": [2, 3, 4, 8], "zeros_kind": ["integer", "float"]}


def bug(name: str) -> Implementation:
    op, _, bugs = GEMM_BUGS[name]
    return Implementation(f"quantized GEMM: {name}", {op: _kernels(frozenset(bugs), "bfloat16")[op]},
                          variants={W4A16: _W4A16_VARIANTS} if op == W4A16 else {}, precision={op: "bfloat16"})


def correct(precision: str = "bfloat16") -> Implementation:
    return Implementation(f"plain quantized GEMMs at {precision}", _kernels(frozenset(), precision),
                          variants={W4A16: _W4A16_VARIANTS}, precision={"quant.*": precision})

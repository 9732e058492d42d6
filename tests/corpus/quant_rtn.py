"""The round-to-nearest and packing bug corpus: wrong kernels written the way
quantizers and checkpoint packers go wrong, each one step changed from the default
run's (ref.conformance.adapters.numpy_quant_codecs and numpy_quant_packing).

RTN_BUGS, PACK_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation
of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_quant_codecs as K
from ref.conformance.implementation import Implementation

Q, DQ = "quant.rtn.quantize", "quant.rtn.dequantize"


def _scale_zero_then(change):
    """scale_zero with its outputs changed for the asymmetric scheme: (lo, scale, zero) -> zero."""
    def replacement(original):
        def scale_zero(lo, hi, bits, scheme, floor):
            scale, zero = original(lo, hi, bits, scheme, floor)
            if scheme == "asymmetric":
                zero = change(lo, scale, zero, bits).astype(lo.dtype)
            return scale, zero
        return scale_zero
    return replacement


def _zero_plus_one(lo, scale, zero, bits):
    return np.minimum(zero + 1, 2**bits - 1)


def _zero_truncated(lo, scale, zero, bits):
    return np.minimum(np.maximum(np.trunc(-lo / scale), 0), 2**bits - 1) + 0


def _zero_half_away(lo, scale, zero, bits):
    x = -lo / scale
    return np.minimum(np.maximum(np.sign(x) * np.floor(np.abs(x) + 0.5), 0), 2**bits - 1) + 0


def _range_forced(include):
    def replacement(original):
        return lambda r, include_zero: original(r, include)
    return replacement


def _half_away_codes(original):
    def codes(r, scale, zero, bits):
        x = r / scale[:, None]
        q = np.sign(x) * np.floor(np.abs(x) + 0.5) + zero[:, None]
        return np.clip(q, 0, 2**bits - 1).astype(np.int64)
    return codes


def _output_axis_groups(w, **kw):
    """Groups of g consecutive OUTPUT channels (the weight read transposed)."""
    w = np.asarray(w)
    if w.ndim != 2 or kw.get("group", 128) in (-1,):
        return K.quantize(w, **kw)
    c, s, z = K.quantize(np.ascontiguousarray(w.T), **kw)
    n = w.shape[1] // kw.get("group", 128) if w.shape[1] % kw.get("group", 128) == 0 else s.shape[0]
    return c.T.copy(), s.reshape(-1)[: w.shape[0] * n].reshape(w.shape[0], n), \
        z.reshape(-1)[: w.shape[0] * n].reshape(w.shape[0], n)


def _symmetric_as(other):
    def replacement(original):
        def scale_zero(lo, hi, bits, scheme, floor):
            return original(lo, hi, bits, other if scheme == "symmetric" else scheme, floor)
        return scale_zero
    return replacement


def _gptq_symmetric_ct_scale(original):
    """GPTQ's symmetric lo = -amax applied to every group, also a non-negative one."""
    def adjust(lo, hi, scheme):
        if scheme == "symmetric":
            hi = np.maximum(-lo, hi)
            lo = -hi
        return original(lo, hi, "asymmetric" if scheme == "symmetric" else scheme)
    return adjust


def _restricted_power_of_two(original):
    def scale_zero(lo, hi, bits, scheme, floor):
        scale, zero = original(lo, hi, bits, scheme, floor)
        if scheme == "symmetric_restricted":
            amax = np.maximum(np.abs(lo), np.abs(hi))
            scale = np.where(amax == 0, scale, amax / lo.dtype.type(2 ** (bits - 1))).astype(lo.dtype)
        return scale, zero
    return scale_zero


def _no_dead_fix(original):
    def adjust(lo, hi, scheme):
        if scheme == "symmetric":
            hi = np.maximum(-lo, hi)
            lo = np.where(lo < 0, -hi, lo)
        return lo, hi
    return adjust


def _no_floor(original):
    def scale_zero(lo, hi, bits, scheme, floor):
        with np.errstate(all="ignore"):
            if scheme in ("asymmetric", "symmetric"):
                scale = ((hi - lo) / lo.dtype.type(2**bits - 1)).astype(lo.dtype)
            else:
                return original(lo, hi, bits, scheme, floor)
            _, zero = original(lo, hi, bits, scheme, floor)
            if scheme == "asymmetric":
                zero = np.clip(np.nan_to_num(-np.rint(lo / scale)), 0, 2**bits - 1) + lo.dtype.type(0)
        return scale, zero.astype(lo.dtype)
    return scale_zero


def _float64_arithmetic(w, **kw):
    w = np.asarray(w)
    if w.dtype != np.float32:
        return K.quantize(w, **kw)
    c, s, z = K.quantize(w.astype(np.float64), **kw)
    return c, s.astype(np.float32), z.astype(np.float32)


def _mse_with(norm=2.4, first=0, strict=True):
    def mse_search(r, lo, hi, bits, scheme, floor):
        t = r.dtype.type
        best = np.full(r.shape[0], np.inf)
        scale, zero = K.scale_zero(lo, hi, bits, scheme, floor)
        for i in range(first, 80):
            p = t(1 - i / 100)
            s, z = K.scale_zero(p * lo, p * hi, bits, scheme, floor)
            err = np.sum(np.abs(K.fake(r, s, z, bits).astype(np.float64) - r) ** norm, axis=1)
            won = err < best if strict else err <= best
            best[won] = err[won]
            scale[won], zero[won] = s[won], z[won]
        return scale, zero
    return lambda original: mse_search


def _dequantize_scaled_zero(codes, scales, zeros, *, group=128):
    """scale * q - zero: the zero point subtracted after scaling."""
    ones = np.zeros_like(np.asarray(zeros))
    out = K.dequantize(codes, scales, ones, group=group)
    z = np.asarray(zeros).astype(out.dtype)
    r = K.rows(out, group)
    return (r - z.reshape(-1)[:, None]).astype(out.dtype).reshape(out.shape) if r.size else out


RTN_BUGS = {
    "zero point off by one": (Q, "ZeroPointRounding", patched(K.quantize, K, "scale_zero",
                                                              _scale_zero_then(_zero_plus_one))),
    "zero point truncated toward zero": (Q, "ZeroPointRounding", patched(K.quantize, K, "scale_zero",
                                                                         _scale_zero_then(_zero_truncated))),
    "zero point rounded half away from zero": (Q, "ZeroPointRounding", patched(
        K.quantize, K, "scale_zero", _scale_zero_then(_zero_half_away))),
    "range never forced to include zero": (Q, "IncludeZero", patched(K.quantize, K, "value_range",
                                                                     _range_forced(False))),
    "range always forced to include zero (AWQ's minmax ignored)": (Q, "IncludeZero", patched(
        K.quantize, K, "value_range", _range_forced(True))),
    "codes rounded half away from zero": (Q, "RoundingTies", patched(K.quantize, K, "codes", _half_away_codes)),
    "groups along the output axis": (Q, "GroupAxis", _output_axis_groups),
    "GPTQ's symmetric computed as compressed-tensors'": (Q, "SymmetricConvention", patched(
        K.quantize, K, "scale_zero", _symmetric_as("symmetric_compressed_tensors"))),
    "GPTQ's symmetric: lo = -amax also for a non-negative group": (Q, "SymmetricConvention", patched(
        K.quantize, K, "adjust", _gptq_symmetric_ct_scale)),
    "restricted symmetric divides amax by 2^(b-1)": (Q, "SymmetricConvention", patched(
        K.quantize, K, "scale_zero", _restricted_power_of_two)),
    "all-zero group left at range 0": (Q, "AllZeroGroup", patched(K.quantize, K, "adjust", _no_dead_fix)),
    "scale not floored (divides by zero)": (Q, "DegenerateScale", patched(K.quantize, K, "scale_zero", _no_floor)),
    "float32 weights quantized in float64": (Q, "ArithmeticDtype", _float64_arithmetic),
    "MSE search with norm 2": (Q, "MseSearch", patched(K.quantize, K, "mse_search", _mse_with(norm=2.0))),
    "MSE search skips the unshrunk range (i from 1)": (Q, "MseSearch", patched(K.quantize, K, "mse_search",
                                                                               _mse_with(first=1))),
    "MSE search ties keep the later shrink": (Q, "MseSearch", patched(K.quantize, K, "mse_search",
                                                                      _mse_with(strict=False))),
    "dequantize subtracts the zero point after scaling": (DQ, "ZeroPointRounding", _dequantize_scaled_zero),
}

PACK_BUGS = {}


# The entries the issue names: the corpus rule runs them in the default profile, the rest in `-m deep`.
DEFAULT_PROFILE = {"zero point off by one", "range never forced to include zero"}


def bug(name: str) -> Implementation:
    op, _, kernel = {**RTN_BUGS, **PACK_BUGS}[name]
    variants = {**K.VARIANTS}
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: variants[op]})

"""Round-to-nearest weight quantization for the default run, written independently of
the oracles (this module imports nothing from ref): every group is a row of a
[rows, g] matrix, each step one NumPy operation on a column of per-row scalars in
the weights' own dtype.

- the range: row minimum and maximum, clamped through zero for GPTQ's convention;
- the scale: (hi - lo) / maxq for the min-max and GPTQ-symmetric schemes,
  2 amax / maxq for compressed-tensors' symmetric, amax / (2^(b-1) - 1) for the
  restricted one; the zero point -rint(lo / scale) (rint is odd, so this equals
  rint(-lo / scale));
- the MSE search: one pass per shrink factor over all rows, keeping the first
  strictly smallest float64 error per row.

The steps are public so that the bug corpus (tests/corpus/quant_rtn.py) builds its
wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy round-to-nearest codecs"
VERSION = np.__version__

SCHEMES = ["asymmetric", "asymmetric_compressed_tensors", "symmetric", "symmetric_compressed_tensors",
           "symmetric_restricted"]
CT_ASYM = "asymmetric_compressed_tensors"
GROUPS = [128, 64, 32, 16, 1, -1]


def as_weights(w) -> np.ndarray:
    w = np.asarray(w)
    if w.dtype == np.float16:
        w = w.astype(np.float32)
    if w.dtype not in (np.float32, np.float64):
        raise TypeError(f"w: expected floating-point weights, got {w.dtype}")
    if w.ndim == 0:
        raise ValueError("w: expected an array with an input axis, got a scalar")
    if np.isnan(w).any() or np.isinf(w).any():
        raise ValueError("w: NaN or Inf weights cannot be quantized")
    return w


def group_count(w: np.ndarray, group: int) -> int:
    n = w.shape[-1]
    size = n if group == -1 else group
    if group == 0 or group < -1 or (size and n % size):
        raise ValueError(f"group: {group} does not split an input axis of {n}")
    return n // size if size else 0


def rows(w: np.ndarray, group: int) -> np.ndarray:
    """[..., n] -> [rows, g], g consecutive input channels per row."""
    count = group_count(w, group)
    lead = int(np.prod(w.shape[:-1], dtype=np.int64))
    return w.reshape(lead * count, w.shape[-1] // count if count else 0)


def value_range(r: np.ndarray, include_zero: bool) -> tuple[np.ndarray, np.ndarray]:
    t = r.dtype.type
    if r.shape[1] == 0:
        z = np.zeros(r.shape[0], r.dtype)
        return z, z.copy()
    lo, hi = r.min(axis=1), r.max(axis=1)
    if include_zero:
        lo, hi = np.minimum(lo, t(0)), np.maximum(hi, t(0))
    return lo, hi


def adjust(lo, hi, scheme: str, include_zero: bool = True):
    """GPTQ's symmetric range and the -1, +1 range of an all-zero row (GPTQ's min-max only)."""
    t = lo.dtype.type
    if scheme == "symmetric":
        hi = np.maximum(-lo, hi)
        lo = np.where(lo < 0, -hi, lo)
    if scheme in ("asymmetric", "symmetric") and include_zero:
        dead = (lo == 0) & (hi == 0)
        lo, hi = np.where(dead, t(-1), lo), np.where(dead, t(1), hi)
    return lo, hi


def scale_zero(lo, hi, bits: int, scheme: str, floor: str):
    t = lo.dtype.type
    maxq = t(2**bits - 1)
    half = t(2 ** (bits - 1))
    signed = None
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if scheme in ("asymmetric", "symmetric", CT_ASYM):
            scale = (hi - lo) / maxq
        else:
            amax = np.maximum(np.abs(lo), np.abs(hi))
            if scheme == "symmetric_compressed_tensors":
                scale = (amax / maxq) * t(2)  # doubling is exact: equal to 2 amax / maxq
            else:
                scale = np.where(amax == 0, t(1), amax / (half - t(1)))
        if scheme == CT_ASYM:  # compressed-tensors: qmin - lo / scale, clamped, rounded; NaN (0/0) -> 0
            signed = -half - lo / scale
            signed = np.where(np.isnan(signed), t(0), np.rint(np.minimum(np.maximum(signed, -half), half - 1)))
    if np.isinf(scale).any():
        raise ValueError("w: the weights' range overflows")
    if floor == "zero_to_eps":
        scale = np.where(scale == 0, t(np.finfo(lo.dtype).eps), scale).astype(lo.dtype)
    else:
        smallest = np.finfo(lo.dtype).tiny if floor == "tiny" else np.finfo(lo.dtype).eps
        scale = np.where(scale < smallest, t(smallest), scale).astype(lo.dtype)
    if scheme == "asymmetric":
        with np.errstate(over="ignore"):
            zero = -np.rint(lo / scale)
        zero = np.minimum(np.maximum(zero, t(0)), maxq) + t(0)
    elif scheme == CT_ASYM:
        zero = signed + half
    elif scheme == "symmetric":
        zero = np.full_like(scale, (maxq + 1) / 2)
    else:
        zero = np.full_like(scale, half)
    return scale, zero.astype(lo.dtype)


def codes(r, scale, zero, bits: int, signed_zero: bool = False):
    """Round, then add the zero point; compressed-tensors adds its signed zero point first."""
    t = r.dtype.type
    half = t(2 ** (bits - 1))
    with np.errstate(over="ignore", invalid="ignore"):
        if signed_zero:
            q = np.rint(r / scale[:, None] + (zero[:, None] - half)) + half
        else:
            q = np.rint(r / scale[:, None]) + zero[:, None]
    return np.minimum(np.maximum(q, t(0)), t(2**bits - 1)).astype(np.int64)


def fake(r, scale, zero, bits: int, signed_zero: bool = False):
    return scale[:, None] * (codes(r, scale, zero, bits, signed_zero).astype(r.dtype) - zero[:, None])


def mse_search(r, lo, hi, bits: int, scheme: str, floor: str):
    """GPTQ's shrink search, every shrink at once: p = 1 - i/100 for i < 80 along a
    first axis, the error sum |.|^2.4 in float64 per (p, row), and the first minimum
    along p (np.argmin: the earliest of equal errors, as a strict < in a loop keeps)."""
    t = r.dtype.type
    p = np.array([t(1 - i / 100) for i in range(80)], dtype=r.dtype)[:, None]  # [80, 1]
    s, z = scale_zero(p * lo[None, :], p * hi[None, :], bits, scheme, floor)  # [80, rows]
    with np.errstate(over="ignore", invalid="ignore"):
        if scheme == CT_ASYM:
            q = np.rint(r[None] / s[..., None] + (z[..., None] - t(2 ** (bits - 1)))) + t(2 ** (bits - 1))
        else:
            q = np.rint(r[None] / s[..., None]) + z[..., None]  # [80, rows, g]
    q = np.minimum(np.maximum(q, t(0)), t(2**bits - 1))
    back = s[..., None] * (q - z[..., None])
    err = np.sum(np.abs(back.astype(np.float64) - r[None]) ** 2.4, axis=-1)  # [80, rows]
    pick = np.argmin(err, axis=0) if r.shape[0] else np.zeros(0, np.int64)
    rows_ = np.arange(r.shape[0])
    return s[pick, rows_], z[pick, rows_]


def quantize(w, *, bits=4, group=128, scheme="asymmetric", zero_range="include_zero", scale_floor="tiny",
             search="minmax"):
    if bits not in (2, 3, 4, 8):
        raise ValueError(f"bits: expected 2, 3, 4 or 8, got {bits}")
    w = as_weights(w)
    r = rows(w, group)
    include = zero_range == "include_zero"
    lo, hi = adjust(*value_range(r, include), scheme, include)
    if search == "mse":
        scale, zero = mse_search(r, lo, hi, bits, scheme, scale_floor)
    else:
        scale, zero = scale_zero(lo, hi, bits, scheme, scale_floor)
    head = w.shape[:-1] + (group_count(w, group),)
    return codes(r, scale, zero, bits, scheme == CT_ASYM).reshape(w.shape), scale.reshape(head), zero.reshape(head)


def dequantize(codes, scales, zeros, *, group=128):
    codes, scales, zeros = np.asarray(codes), np.asarray(scales), np.asarray(zeros)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"codes: expected integers, got {codes.dtype}")
    if scales.dtype not in (np.float32, np.float64):
        raise TypeError(f"scales: expected float32 or float64, got {scales.dtype}")
    if codes.size and codes.min() < 0:
        raise ValueError("codes: negative codes")
    r = rows(codes, group)
    expected = codes.shape[:-1] + (group_count(codes, group),)
    if scales.shape != expected or zeros.shape != expected:
        raise ValueError(f"scales, zeros: expected shape {expected}, got {scales.shape}, {zeros.shape}")
    t = scales.dtype
    out = scales.reshape(-1)[:, None] * (r.astype(t) - zeros.astype(t).reshape(-1)[:, None])
    return out.astype(t).reshape(codes.shape)


OPS = {"quant.rtn.quantize": quantize, "quant.rtn.dequantize": dequantize}
VARIANTS = {
    "quant.rtn.quantize": {"bits": [2, 3, 4, 8], "group": GROUPS, "scheme": SCHEMES,
                           "zero_range": ["include_zero", "minmax"], "scale_floor": ["tiny", "eps", "zero_to_eps"],
                           "search": ["minmax", "mse"]},
    "quant.rtn.dequantize": {"group": GROUPS},
}

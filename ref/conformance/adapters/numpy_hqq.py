"""HQQ for the default run, written independently of the oracle (this module imports
nothing from ref): float32 arithmetic as hqq 0.2.8 runs on CPU, every group turned
into a row of a [groups, G] matrix first (axis 0's columns transposed), the zero
point solved with one float32 scalar per group, the early stop on a float32 mean of
the whole tensor; bit packing by a loop over the fields of each word.

The steps are public functions so that the bug corpus (tests/corpus/quant_hqq.py)
makes its wrong kernels from this code with one step swapped.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy hqq (float32, groups as rows)"
VERSION = np.__version__

F = np.float32
LAYOUTS = {"8bit_u8": (8, 1, np.uint8), "4bit_u8": (4, 2, np.uint8), "3bit_32": (3, 10, np.int32),
           "2bit_u8": (2, 4, np.uint8), "1bit_u8": (1, 8, np.uint8)}  # bits per field, fields per word


def rows_of_groups(w: np.ndarray, group: int, axis: int) -> np.ndarray:
    """[groups, G] float32: axis 1 cuts the flat weight into runs of G; axis 0 makes
    G runs of numel/G and a group takes the j-th element of each run."""
    flat = np.ascontiguousarray(w, dtype=F).ravel()
    if flat.size == 0 or flat.size % group:
        raise ValueError(f"group: {flat.size} elements do not split into groups of {group}")
    if axis == 1:
        return flat.reshape(flat.size // group, group)
    return flat.reshape(group, flat.size // group).T


def back(rows: np.ndarray, axis: int) -> np.ndarray:
    """[groups, G] -> hqq's grouped layout."""
    return rows if axis == 1 else rows.T


def shrink(x: np.ndarray, beta: F, p: F) -> np.ndarray:
    """sign(x) * relu(|x| - |x|^(p-1) / beta) in float32; 0 at x = 0 (|0|^(p-1) = Inf)."""
    a = np.abs(x)
    with np.errstate(divide="ignore"):
        return np.copysign(np.maximum(a - a ** F(p - 1) / beta, F(0)), x)


def betas(beta: float, kappa: float, iters: int, schedule: str) -> list:
    if schedule == "kappa":
        out, b = [], F(beta)
        for _ in range(iters):
            out.append(b)
            b = F(b * F(kappa))
        return out
    return [F(beta)] * iters


def solve_zero(rows, s, z, qmax, beta_of_step, p, iters):
    """The proximal zero-point loop on [groups, G] float32 rows (s, z: [groups, 1] float32)."""
    best = F(np.inf)
    for i in range(iters):
        q = np.clip(np.rint(rows * s + z), 0, qmax)
        x = rows - (q - z) / s  # the error of the dequantized weights
        e = shrink(x, beta_of_step[i], p)
        z = np.mean(q - (rows - e) * s, axis=1, keepdims=True, dtype=F)
        err = np.mean(np.abs(x), dtype=F)
        if err < best:
            best = err
        else:
            break
    return z


def min_max(rows: np.ndarray, bits: int, round_zero: bool, flat_floor: bool = True):
    lo, hi = rows.min(axis=1, keepdims=True), rows.max(axis=1, keepdims=True)
    span = (hi - lo).astype(F)
    flat = np.abs(span) <= F(1e-4)
    if flat_floor:
        s = np.where(flat, F(1), F((1 << bits) - 1) / np.where(flat, F(1), span)).astype(F)
    else:  # hqq <= 0.2.6: a zero range divides to Inf, which the clamp takes to 2e4
        with np.errstate(divide="ignore"):
            s = (F((1 << bits) - 1) / span).astype(F)
    s = np.minimum(s, F(2e4))
    z = (-lo * s).astype(F)
    return s, (np.rint(z) if round_zero else z)


def quantize(w, *, bits=4, group=64, axis=0, optimize=True, round_zero=False, beta_schedule="constant",
             flat_floor=True):
    w = np.asarray(w)
    if w.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"w: expected floating-point weights, got {w.dtype}")
    if bits not in (1, 2, 3, 4, 5, 6, 8):
        raise ValueError(f"bits: expected one of 1, 2, 3, 4, 5, 6, 8, got {bits}")
    if axis not in (0, 1):
        raise ValueError(f"axis: expected 0 or 1, got {axis}")
    if not np.isfinite(w).all():
        raise ValueError("w: NaN or Inf weights")
    rows = rows_of_groups(w, group, axis)
    qmax = (1 << bits) - 1
    s, z = min_max(rows, bits, round_zero, flat_floor)
    if optimize:
        z = solve_zero(rows, s, z, qmax, betas(10.0, 1.01, 20, beta_schedule), F(0.7), 20)
    q = np.clip(np.rint(rows * s + z), 0, qmax).astype(np.uint8)
    scale = (F(1) / s).astype(F)
    return back(q, axis).copy(), back(scale, axis).copy(), back(z, axis).copy()


def dequantize(codes, scale, zero):
    codes, scale, zero = np.asarray(codes), np.asarray(scale), np.asarray(zero)
    if codes.dtype != np.uint8 or scale.dtype != F or zero.dtype != F:
        raise TypeError("codes uint8, scale and zero float32")
    if codes.ndim != 2 or scale.shape != zero.shape or scale.shape not in ((1, codes.shape[1]),
                                                                           (codes.shape[0], 1)):
        raise ValueError(f"scale, zero: no group axis of codes {codes.shape} matches {scale.shape}, {zero.shape}")
    return ((codes.astype(F) - zero) * scale).astype(F)


def check_layout(layout: str, arr: np.ndarray, want) -> tuple[int, int]:
    if layout not in LAYOUTS:
        raise ValueError(f"layout: unknown {layout!r}")
    if arr.dtype != want:
        raise TypeError(f"expected {np.dtype(want).name}, got {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"expected [rows, columns], got shape {arr.shape}")
    return LAYOUTS[layout][:2]


def pack(codes, *, layout="4bit_u8"):
    codes = np.asarray(codes)
    bits, k = check_layout(layout, codes, np.uint8)
    if codes.size and codes.max() >= (1 << bits):
        raise ValueError(f"codes: above {(1 << bits) - 1}")
    if layout == "3bit_32":
        pad = (10 - codes.shape[0] % 10) % 10
        codes = np.vstack([codes, np.zeros((pad, codes.shape[1]), np.uint8)])
    if codes.shape[0] % k:
        raise ValueError(f"codes: {codes.shape[0]} rows do not split into {k} slices")
    n = codes.shape[0] // k
    word = np.zeros((n, codes.shape[1]), np.int64)
    for j in range(k):  # slice j goes to the j-th field from the top of the word
        word |= codes[j * n:(j + 1) * n].astype(np.int64) << (bits * (k - 1 - j))
    return word.astype(np.int32) if layout == "3bit_32" else word.astype(np.uint8)


def unpack(packed, *, layout="4bit_u8"):
    packed = np.asarray(packed)
    bits, k = check_layout(layout, packed, LAYOUTS.get(layout, (0, 0, np.uint8))[2])
    words = packed.astype(np.int64) & 0xFFFFFFFF
    return np.vstack([(words >> (bits * (k - 1 - j))) & ((1 << bits) - 1) for j in range(k)]).astype(np.uint8)


OPS = {"quant.hqq.quantize": quantize, "quant.hqq.dequantize": dequantize, "quant.hqq.pack": pack,
       "quant.hqq.unpack": unpack}
VARIANTS = {"quant.hqq.quantize": {"bits": [1, 2, 3, 4, 5, 6, 8], "group": [8, 16, 32, 64, 128], "axis": [0, 1],
                                   "optimize": [True, False], "round_zero": [False, True],
                                   "beta_schedule": ["constant", "kappa"], "flat_floor": [True, False]},
            "quant.hqq.pack": {"layout": list(LAYOUTS)}, "quant.hqq.unpack": {"layout": list(LAYOUTS)}}

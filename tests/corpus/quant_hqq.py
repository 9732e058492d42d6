"""The HQQ bug corpus: wrong kernels made from the default run's HQQ kernel
(ref.conformance.adapters.numpy_hqq) by swapping one of its steps, written the way
HQQ ports go wrong (the beta schedule of another hqq version, the early stop moved,
the l_p shrink simplified, axis 0's strided groups made consecutive, the stored scale
left inverted, the packed slices interleaved).

HQQ_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_hqq as K
from ref.conformance.implementation import Implementation

F = np.float32
Q, PACK, UNPACK = "quant.hqq.quantize", "quant.hqq.pack", "quant.hqq.unpack"


def _swap(name, replacement, fn=K.quantize):
    return patched(fn, K, name, lambda original: replacement(original))


def _kappa_always(original):
    return lambda beta, kappa, iters, schedule: original(beta, kappa, iters, "kappa")


def _kappa_early(original):
    """beta * kappa^(i+1) at step i: the multiply moved before the step that should use beta."""
    return lambda beta, kappa, iters, schedule: original(beta, kappa, iters + 1, schedule)[1:]


def _solver(*, stop: str):
    """The zero-point loop with its early stop changed: "none" runs every step; "before"
    checks the error before the update (returns the best step's zero)."""
    def solve(rows, s, z, qmax, beta_of_step, p, iters):
        best = F(np.inf)
        for i in range(iters):
            q = np.clip(np.rint(rows * s + z), 0, qmax).astype(F)
            r = ((q - z) / s).astype(F)
            err = np.mean(np.abs(rows - r), dtype=F)
            if stop == "before":
                if not err < best:
                    break
                best = err
            e = K.shrink((rows - r).astype(F), beta_of_step[i], p)
            z = np.mean((q - (rows - e) * s).astype(F), axis=1, keepdims=True, dtype=F)
        return z
    return lambda original: solve


def _soft_threshold(original):
    return lambda x, beta, p: original(x, beta, F(1))


def _power_p(original):
    """|x|^p / beta as the threshold: p - 1 read as p."""
    def shrink(x, beta, p):
        a = np.abs(x)
        return (np.sign(x) * np.maximum(a - a ** F(p) / beta, F(0))).astype(F)
    return shrink


def _no_solver(original):
    return lambda rows, s, z, qmax, beta_of_step, p, iters: z


def _consecutive_axis0(original):
    """Axis 0's groups taken as runs of G consecutive elements (axis 1's rows), then laid out
    as hqq's [G, numel/G]."""
    return lambda w, group, axis: original(w, group, 1)


def _inverse_scale(w, **params):
    codes, scale, zero = K.quantize(w, **params)
    return codes, (F(1) / scale).astype(F), zero


def _round_zero_ignored(w, **params):
    return K.quantize(w, **{**params, "round_zero": False})


def _no_flat_rule(original):
    """The inverse scale (2^b - 1) / (max - min) everywhere: no 1e-4 floor (0 -> Inf, clamped at 2e4)."""
    def min_max(rows, bits, round_zero, flat_floor=True):
        lo, hi = rows.min(axis=1, keepdims=True), rows.max(axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            s = np.minimum(F((1 << bits) - 1) / (hi - lo).astype(F), F(2e4)).astype(F)
        z = (-lo * s).astype(F)
        return s, (np.rint(z) if round_zero else z)
    return min_max


def _no_clamp(original):
    """(2^b - 1) / (max - min) unclamped: a narrow group's inverse scale past 2e4."""
    def min_max(rows, bits, round_zero, flat_floor=True):
        lo, hi = rows.min(axis=1, keepdims=True), rows.max(axis=1, keepdims=True)
        span = (hi - lo).astype(F)
        flat = np.abs(span) <= F(1e-4)
        s = np.where(flat, F(1), F((1 << bits) - 1) / np.where(flat, F(1), span)).astype(F)
        z = (-lo * s).astype(F)
        return s, (np.rint(z) if round_zero else z)
    return min_max


def _float32_only(w, **params):
    if np.asarray(w).dtype != F:
        raise TypeError("w: float32 weights only")
    return K.quantize(w, **params)


def _interleaved(codes, layout="4bit_u8"):
    """Rows 2i and 2i + 1 in one byte (a common nibble packing) instead of rows i and i + R/2."""
    codes = np.asarray(codes)
    if layout != "4bit_u8":
        return K.pack(codes, layout=layout)
    return K.pack(np.concatenate([codes[0::2], codes[1::2]]), layout=layout)


def _low_first(codes, layout="4bit_u8"):
    """The first slice in the lowest field (the slices' order reversed)."""
    codes = np.asarray(codes)
    _, k, _ = K.LAYOUTS[layout]
    if k == 1:
        return K.pack(codes, layout=layout)
    n = codes.shape[0] // k if layout != "3bit_32" else -(-codes.shape[0] // 10)
    if layout == "3bit_32":
        codes = np.vstack([codes, np.zeros((10 * n - codes.shape[0], codes.shape[1]), np.uint8)])
    return K.pack(np.concatenate([codes[j * n:(j + 1) * n] for j in reversed(range(k))]), layout=layout)


def _unpadded(codes, layout="4bit_u8"):
    """3-bit rows cut to a multiple of 10 instead of padded."""
    codes = np.asarray(codes)
    if layout == "3bit_32":
        codes = codes[:codes.shape[0] // 10 * 10]
    return K.pack(codes, layout=layout)


def _unmasked(packed, layout="4bit_u8"):
    """3-bit fields read by an arithmetic shift of the int32 with no mask on the top field."""
    packed = np.asarray(packed)
    if layout != "3bit_32":
        return K.unpack(packed, layout=layout)
    top = (packed >> 27).astype(np.uint8)
    out = K.unpack(packed, layout=layout)
    out[:packed.shape[0]] = top
    return out


HQQ_BUGS = {
    "beta times kappa after each step where hqq 0.2.7+ keeps it constant": (
        Q, "HqqBetaSchedule", _swap("betas", _kappa_always)),
    "kappa applied before the step that should use beta": (Q, "HqqBetaSchedule", _swap("betas", _kappa_early)),
    "no early stop: every iteration runs": (Q, "HqqEarlyStop", _swap("solve_zero", _solver(stop="none"))),
    "early stop checked before the update (the best step's zero returned)": (
        Q, "HqqEarlyStop", _swap("solve_zero", _solver(stop="before"))),
    "shrink as a soft threshold 1/beta (p = 1)": (Q, "HqqShrink", _swap("shrink", _soft_threshold)),
    "shrink threshold |x|^p / beta instead of |x|^(p-1) / beta": (Q, "HqqShrink", _swap("shrink", _power_p)),
    "zero point never updated (the solver skipped)": (Q, "HqqZeroUpdate", _swap("solve_zero", _no_solver)),
    "axis 0 groups as runs of G consecutive elements": (Q, "HqqGroupAxis",
                                                        _swap("rows_of_groups", _consecutive_axis0)),
    "the inverse scale s stored instead of 1/s": (Q, "HqqInverseScale", _inverse_scale),
    "round_zero ignored": (Q, "HqqRoundZero", _round_zero_ignored),
    "no 1e-4 floor where hqq 0.2.7+'s is declared: constant groups get the 2e4 clamp": (Q, "HqqFlatGroup",
                                                                      _swap("min_max", _no_flat_rule)),
    "no 2e4 clamp on the inverse scale": (Q, "HqqFlatGroup", _swap("min_max", _no_clamp)),
    "float16 and float64 weights refused": (Q, "HqqWeightShape", _float32_only),
    "4bit_u8 packs rows 2i and 2i+1 together": (PACK, "HqqHalves", _interleaved),
    "the first slice packed into the lowest field": (PACK, "HqqHalves", _low_first),
    "3bit_32 rows cut to a multiple of 10 instead of padded": (PACK, "HqqPad3", _unpadded),
    "3bit_32 top field read by an arithmetic shift with no mask": (UNPACK, "HqqPad3", _unmasked),
}


def bug(name: str) -> Implementation:
    op, _, kernel = HQQ_BUGS[name]
    return Implementation(name, {op: kernel}, variants={op: K.VARIANTS[op]})

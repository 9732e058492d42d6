"""AWQ's scale and clip searches for the default run, written the way AutoAWQ runs them
and independently of the oracle (this module imports nothing from ref): float32
throughout (the activation sums accumulated in float32, as AutoAWQ's chunked x_sum),
the loss as the engines take it (the float output minus the quantized one, squared,
summed, divided by the count), Q(W s) / s computed as a weight, groups by reshape,
the clip search one output block at a time. The steps are public so that the bug
corpus (tests/corpus/quant_awq.py) builds its wrong kernels from this code with one
step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy awq"
VERSION = np.__version__

F32 = np.float32
BITS = (2, 3, 4, 8)
RANGE_FLOOR = F32(1e-5)  # AutoAWQ's clamp of max - min
ROW_BLOCK = 64  # output rows per block of the clip search (AutoAWQ: 256 or 64)


def as_matrix(a, name: str, ndim: int | None = None) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{name} must be float16, float32 or float64, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} has shape {a.shape}, expected {ndim} dimensions")
    with np.errstate(over="ignore"):
        narrow = a.astype(F32)
    if not np.all(np.isfinite(narrow)):
        raise ValueError(f"{name} has NaN or Inf, or values beyond float32")
    return narrow


def check_w(w, bits, group):
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or int(bits) not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an integer, got {group!r}")
    w = as_matrix(w, "w", 2)
    g = w.shape[1] if group == -1 else int(group)
    if g <= 0 or not w.shape[1] or w.shape[1] % g:
        raise ValueError(f"group {group} does not divide {w.shape[1]}")
    return w, g


def check(x, w, bits, group):
    w, g = check_w(w, bits, group)
    x = as_matrix(x, "x")
    if x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has shape {x.shape}, expected a last axis of {w.shape[1]}")
    x = x.reshape(-1, w.shape[1])
    if not x.shape[0] or not w.shape[0]:
        raise ValueError("x and w need a token and a row")
    return x, w, g


def group_range(v: np.ndarray):
    """(min, max) of each group row of v [groups, g]."""
    return v.min(axis=1, keepdims=True), v.max(axis=1, keepdims=True)


def zero_point(lo: np.ndarray, scales: np.ndarray, qmax) -> np.ndarray:
    return np.clip(-np.round(lo / scales), F32(0), qmax)


def rounded(v: np.ndarray) -> np.ndarray:
    return np.round(v)


def qparams(v: np.ndarray, bits: int, span=None, zero=None):
    """Scales and zero points of the group rows of v [groups, g], float32."""
    lo, hi = (span or group_range)(v)
    qmax = F32((1 << bits) - 1)
    scales = np.maximum(hi - lo, RANGE_FLOOR) / qmax
    return scales, (zero or zero_point)(lo, scales, qmax)


def codes_of(v: np.ndarray, bits: int, **steps):
    """AutoAWQ's pseudo_quantize_tensor at float32 on group rows v [groups, g]: (codes, scales, zeros)."""
    scales, zeros = qparams(v, bits, **steps)
    qmax = F32((1 << bits) - 1)
    return np.clip(rounded(v / scales) + zeros, F32(0), qmax), scales, zeros


def pseudo_quantize(w: np.ndarray, bits: int, g: int) -> np.ndarray:
    """Q(w): groups of g along the last axis, quantized and dequantized in float32."""
    codes, scales, zeros = codes_of(w.reshape(-1, g), bits)
    return ((codes - zeros) * scales).reshape(w.shape).astype(F32)


def quantize(w, *, bits=4, group=128, **steps):
    """w [out, in] -> (codes int64, scales float32 [out, in/g], zeros float32 [out, in/g])."""
    w, g = check_w(w, bits, group)
    with np.errstate(over="ignore", invalid="ignore"):
        codes, scales, zeros = codes_of(w.reshape(-1, g), int(bits), **steps)
    if not np.all(np.isfinite(scales)):
        raise ValueError("a group's range overflows float32")
    per_row = (w.shape[0], w.shape[1] // g)
    return codes.reshape(w.shape).astype(np.int64), scales.reshape(per_row), zeros.reshape(per_row)


def x_mean(x: np.ndarray) -> np.ndarray:
    total = np.zeros(x.shape[1], F32)
    for start in range(0, x.shape[0], 1024):  # chunked float32 sums
        total += np.abs(x[start:start + 1024]).sum(axis=0, dtype=F32)
    return total / F32(x.shape[0])


def w_mean(w: np.ndarray, g: int) -> np.ndarray:
    v = np.abs(w).reshape(-1, g)
    v = v / (v.max(axis=1, keepdims=True) + F32(1e-6))
    return v.reshape(w.shape).mean(axis=0, dtype=F32)


def grid(n_grid: int, duo: bool, kind: str) -> list:
    if kind == "awq":
        return [(i / n_grid, duo) for i in range(n_grid)]
    if not duo:
        return [(i / (n_grid - 1), False) for i in range(n_grid)]
    return [(0.0, False)] + [(i / (n_grid - 2), True) for i in range(n_grid - 1)]


def scales_for(xm: np.ndarray, wm: np.ndarray, ratio: float, duo: bool) -> np.ndarray:
    r = F32(ratio)
    if duo:
        s = np.maximum(xm ** r / (wm ** (F32(1) - r) + F32(1e-4)), F32(1e-4))
    else:
        s = np.maximum(xm ** r, F32(1e-4))
    s = s / np.sqrt(s.max() * s.min())
    s[~np.isfinite(s)] = 1
    return s.astype(F32)


def scaled_weight(w: np.ndarray, s: np.ndarray, bits: int, g: int) -> np.ndarray:
    """Q(W s) / s: the weight the quantized layer multiplies the original input with."""
    return pseudo_quantize(w * s[None, :], bits, g) / s[None, :]


def loss(reference: np.ndarray, x: np.ndarray, q: np.ndarray) -> float:
    out = x @ q.T
    d = (reference - out).astype(np.float64)
    return float(np.sum(d * d) / d.size)


def pick(losses: list) -> int:
    best, best_error = -1, float("inf")
    for i, e in enumerate(losses):
        if e < best_error:
            best, best_error = i, e
    return best


def search_scales(x, w, *, bits=4, group=128, duo_scaling=False, grid_kind="awq", n_grid=20,
                  scales=None, weight=None, error=None, choose=None, points=None, mean_w=None):
    x, w, g = check(x, w, bits, group)
    scales, weight, error = scales or scales_for, weight or scaled_weight, error or loss
    choose, points = choose or pick, points or grid
    xm, wm = x_mean(x), (mean_w or w_mean)(w, g)
    reference = x @ w.T
    tried = [scales(xm, wm, ratio, duo) for ratio, duo in points(n_grid, duo_scaling, grid_kind)]
    losses = [error(reference, x, weight(w, s, int(bits), g)) for s in tried]
    best = choose(losses)
    if best < 0:
        raise ValueError("no finite loss")
    return tried[best], np.int64(best), np.array(losses, np.float64)


def group_amax(wb: np.ndarray) -> np.ndarray:
    """wb [rows, 1, groups, g] -> each group's largest magnitude [rows, 1, groups, 1]."""
    return np.abs(wb).max(axis=-1, keepdims=True)


def clip_search(x, w, *, bits=4, group=128, n_sample_token=512, n_grid=20, max_shrink=0.5, sample=None,
                clamp=None, amax_of=None, shrinks=None, better=None, error_start=F32(1e9),
                over_tokens=None):
    x, w, g = check(x, w, bits, group)
    if isinstance(n_sample_token, bool) or not isinstance(n_sample_token, (int, np.integer)) or n_sample_token < 1:
        raise ValueError(f"n_sample_token must be a positive integer, got {n_sample_token!r}")
    xs = (sample or (lambda a, n: a[::max(1, a.shape[0] // n)]))(x, n_sample_token)
    xg = xs.reshape(1, xs.shape[0], -1, g)  # [1, t, groups, g]
    clamp = clamp or (lambda v, m: np.clip(v, -m, m))
    out = []
    for start in range(0, w.shape[0], ROW_BLOCK):
        wb = w[start:start + ROW_BLOCK].reshape(-1, 1, w.shape[1] // g, g)  # [rows, 1, groups, g]
        amax = (amax_of or group_amax)(wb)
        best, best_err = amax.copy(), np.full(amax.shape, error_start)
        reference = (xg * wb).sum(axis=-1)  # [rows, t, groups]
        for i in (shrinks or range)(int(max_shrink * n_grid)):
            m = amax * F32(1 - i / n_grid)
            q = pseudo_quantize(clamp(wb, m), int(bits), g)
            err = ((q * xg).sum(axis=-1) - reference) ** 2
            err = (over_tokens or (lambda e: e.mean(axis=1)))(err).reshape(best_err.shape)
            kept = (better or np.less)(err, best_err)  # strict: the first of equal errors stays
            best_err[kept], best[kept] = err[kept], m[kept]
        out.append(best[:, 0, :, 0])
    return np.concatenate(out, axis=0).astype(np.float64)


def _search_scales_op(x, w, bits=4, group=128, duo_scaling=False, grid="awq"):
    return search_scales(x, w, bits=bits, group=group, duo_scaling=duo_scaling, grid_kind=grid)


def _search_clip_op(x, w, bits=4, group=128):
    return clip_search(x, w, bits=bits, group=group)


def _quantize_op(w, bits=4, group=128):
    return quantize(w, bits=bits, group=group)


OPS = {"quant.awq.search_scales": _search_scales_op, "quant.awq.search_clip": _search_clip_op,
       "quant.awq.quantize": _quantize_op}
VARIANTS = {"quant.awq.search_scales": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128],
                                        "duo_scaling": [False, True], "grid": ["awq", "llmcompressor"]},
            "quant.awq.search_clip": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128]},
            "quant.awq.quantize": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128]}}

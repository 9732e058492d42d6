"""GPTQ for the default run, written independently of the oracle (this module imports
nothing from ref): float32 arithmetic throughout, as the libraries run it, and the
paper's unblocked form: after each column, the whole remaining weight is updated at
once (a rank-1 update), so the lazy block size, which only regroups those updates,
is not needed (block_start groups, the reference code's rule, read a copy of the
weights taken every `blocksize` columns). The inverse Hessian's upper Cholesky factor
is the transpose of the lower Cholesky factor of H^-1, H^-1 from float32 solves.

Its outputs differ from the float64 oracle where float32 rounding moves a weight
across a rounding boundary: the op judges them by ref.quant.catalog.agreement's rule.

The steps are public functions so that the bug corpus (tests/corpus) composes its
wrong kernels from the same code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy GPTQ (float32, unblocked)"
VERSION = np.__version__

F = np.float32


def adjusted_range(w: np.ndarray, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (lo, hi) of w [..., n], widened to include 0; GPTQ's symmetric makes it
    [-amax, amax] where lo < 0; an all-zero row of the first two schemes gets [-1, 1]."""
    lo = np.minimum(w.min(axis=-1), F(0))
    hi = np.maximum(w.max(axis=-1), F(0))
    if scheme == "symmetric":
        hi = np.maximum(-lo, hi)
        lo = np.where(lo < 0, -hi, lo)
    if scheme in ("asymmetric", "symmetric"):  # not compressed-tensors' schemes
        flat = (lo == 0) & (hi == 0)
        lo, hi = np.where(flat, F(-1), lo), np.where(flat, F(1), hi)
    return lo.astype(F), hi.astype(F)


def range_params(lo: np.ndarray, hi: np.ndarray, bits: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """float32 (scale, zero) from a range, each scheme's own formula."""
    maxq = F((1 << bits) - 1)
    half = F(1 << (bits - 1))
    amax = np.maximum(-lo, hi)
    if scheme == "asymmetric_compressed_tensors":  # the signed zero point from the raw scale, 0 / 0 -> 0
        raw = ((hi - lo) / maxq).astype(F)
        with np.errstate(divide="ignore", invalid="ignore"):
            signed = np.clip((-half - (lo / raw).astype(F)).astype(F), -half, half - F(1))
        zero = np.rint(np.where(np.isnan(signed), F(0), signed)) + half
        return np.maximum(raw, np.finfo(F).tiny).astype(F), zero.astype(F)
    if scheme in ("asymmetric", "symmetric"):
        scale = ((hi - lo) / maxq).astype(F)
    elif scheme == "symmetric_compressed_tensors":
        scale = (amax / (maxq / F(2))).astype(F)
    else:
        scale = np.where(amax > 0, amax / (half - F(1)), F(1)).astype(F)
    scale = np.maximum(scale, np.finfo(F).tiny).astype(F)
    if scheme == "asymmetric":
        return scale, np.clip(np.rint((-lo / scale).astype(F)), F(0), maxq) + F(0)
    return scale, np.full_like(scale, (maxq + F(1)) / F(2) if scheme == "symmetric" else half)


def minmax_params(w: np.ndarray, bits: int, scheme: str, search: str = "minmax") -> tuple[np.ndarray, np.ndarray]:
    """Per-row float32 (scale, zero) of w [rows, n]; "mse": the first of the shrunk ranges
    p * (lo, hi), p = 1 - i/100 for i < 80, with the least sum |dequant - w|^2.4."""
    lo, hi = adjusted_range(w, scheme)
    if search == "minmax":
        return range_params(lo, hi, bits, scheme)
    best = np.full(w.shape[0], np.inf)
    scale, zero = range_params(lo, hi, bits, scheme)
    for i in range(80):
        p = F(1 - i / 100)
        s1, z1 = range_params((p * lo).astype(F), (p * hi).astype(F), bits, scheme)
        _, fake = round_column(w, s1[:, None], z1[:, None], bits, scheme)
        err = (np.abs(fake.astype(np.float64) - w) ** 2.4).sum(axis=1)
        better = err < best
        best[better], scale[better], zero[better] = err[better], s1[better], z1[better]
    return scale, zero


def round_column(w: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int,
                 scheme: str = "asymmetric") -> tuple[np.ndarray, np.ndarray]:
    """(codes, dequantized values) of one column w [rows]; compressed-tensors' asymmetric
    scheme adds its signed zero point before rounding."""
    x = (w / scale).astype(F)
    if scheme == "asymmetric_compressed_tensors":
        half = F(1 << (bits - 1))
        code = np.clip(np.rint((x + (zero - half)).astype(F)) + half, 0, (1 << bits) - 1)
    else:
        code = np.clip(np.rint(x) + zero, 0, (1 << bits) - 1)
    return code.astype(np.int64), (scale * (code - zero)).astype(F)


def damped(h: np.ndarray, percdamp: float) -> np.ndarray:
    """H (dead diagonal already 1) plus percdamp times its mean diagonal."""
    n = h.shape[0]
    return h + F(percdamp) * np.mean(np.diag(h), dtype=F) * np.eye(n, dtype=F)


def upper_inverse_factor(h: np.ndarray) -> np.ndarray:
    """U with H^-1 = U^T U, in float32."""
    lower = np.linalg.cholesky(h)  # H = L L^T
    linv = np.linalg.solve(lower, np.eye(h.shape[0], dtype=F)).astype(F)  # L^-1
    hinv = (linv.T @ linv).astype(F)  # H^-1
    return np.linalg.cholesky((hinv + hinv.T) / F(2)).T.astype(F)


def visit_order(h: np.ndarray, act_order: bool) -> np.ndarray:
    return np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(h.shape[0])


def drop_dead(w: np.ndarray, h: np.ndarray) -> None:
    """Dead columns (H_ii = 0, never activated): their weights zeroed, H_ii set to 1."""
    dead = np.diag(h) == 0
    w[:, dead] = 0
    h[dead, dead] = 1


def group_index(position: np.ndarray, dynamic: bool, g: int) -> np.ndarray:
    """Each original column's group: its visiting position's run for dynamic groups,
    its own index's otherwise (static groups are fixed before the visit)."""
    return (position if dynamic else np.arange(position.size)) // g


def column_loss(w: np.ndarray, q: np.ndarray, d: np.float32) -> np.ndarray:
    """(w - q)^2 / d^2 / 2 per row."""
    err = (w - q) / d
    return err * err / F(2)


def feedback(w: np.ndarray, err: np.ndarray, u_row: np.ndarray, j: int) -> None:
    """The error of column j carried into every later column."""
    w[:, j + 1:] -= np.outer(err, u_row[j + 1:]).astype(F)


def check(w: np.ndarray, h: np.ndarray, percdamp, bits, group, blocksize) -> None:
    """Refuse what GPTQ cannot run on (ValueError)."""
    if w.ndim != 2 or w.dtype.kind != "f" or h.dtype.kind != "f" or h.shape != (w.shape[1],) * 2:
        raise ValueError(f"w [rows, cols] and hessian [cols, cols] floats expected, got {w.shape}, {h.shape}")
    if not (np.isfinite(w).all() and np.isfinite(h).all()) or (h != h.T).any() or (np.diag(h) < 0).any():
        raise ValueError("w and hessian must be finite, hessian symmetric with a non-negative diagonal")
    if bits not in (2, 3, 4, 8) or blocksize < 1 or percdamp < 0:
        raise ValueError(f"bits {bits}, blocksize {blocksize} or percdamp {percdamp} out of range")
    if group == 0 or group < -1 or (group > 0 and w.shape[1] % group):
        raise ValueError(f"group {group} does not divide {w.shape[1]} columns")


def gptq(w, hessian, *, percdamp=0.01, bits=4, group=-1, scheme="asymmetric", search="minmax", blocksize=128,
         act_order=False, group_params="dynamic"):
    w, h, percdamp = np.asarray(w), np.asarray(hessian), float(percdamp)
    check(w, h, percdamp, bits, group, blocksize)
    w, h = w.astype(F), h.astype(F)
    rows, cols = w.shape
    g = cols if group == -1 else group
    ngroups = cols // g
    scales = np.zeros((rows, ngroups), F)
    zeros = np.zeros((rows, ngroups), F)
    if group == -1:
        scales[:, 0], zeros[:, 0] = minmax_params(w, bits, scheme, search)
    drop_dead(w, h)
    if group != -1 and group_params == "static":
        for k in range(ngroups):
            scales[:, k], zeros[:, k] = minmax_params(w[:, k * g:(k + 1) * g], bits, scheme, search)
    perm = visit_order(h, act_order)
    if group != -1 and group_params == "static_permuted":  # fixed first, on groups of visited columns
        for k in range(ngroups):
            scales[:, k], zeros[:, k] = minmax_params(w[:, perm[k * g:(k + 1) * g]], bits, scheme, search)
    dynamic = group != -1 and group_params in ("dynamic", "block_start")
    position = np.argsort(perm)
    g_idx = group_index(position, group != -1 and group_params != "static", g)
    w = w[:, perm]
    u = upper_inverse_factor(damped(h[np.ix_(perm, perm)], percdamp))
    codes = np.zeros((rows, cols), np.int64)
    losses = np.zeros(rows, F)
    snapshot = w
    for j in range(cols):
        if j % blocksize == 0 and group_params == "block_start":
            snapshot = w.copy()  # the weights as a lazy block starting here finds them
        if dynamic and j % g == 0:
            current = snapshot[:, j:j + g] if group_params == "block_start" else w[:, j:j + g]
            scales[:, j // g], zeros[:, j // g] = minmax_params(current, bits, scheme, search)
        k = g_idx[perm[j]]
        codes[:, j], q = round_column(w[:, j], scales[:, k], zeros[:, k], bits, scheme)
        losses += column_loss(w[:, j], q, u[j, j])
        feedback(w, (w[:, j] - q) / u[j, j], u[j], j)
    return (codes[:, position], scales, zeros.astype(np.int64), g_idx.astype(np.int64), losses)


OPS = {"quant.gptq": gptq}
VARIANTS = {"quant.gptq": {"bits": [2, 3, 4, 8], "group": [-1, 128, 64, 32, 16, 8],
                           "scheme": ["asymmetric", "asymmetric_compressed_tensors", "symmetric",
                                      "symmetric_compressed_tensors", "symmetric_restricted"],
                           "search": ["minmax", "mse"], "act_order": [False, True],
                           "group_params": ["dynamic", "static", "block_start", "static_permuted"], "blocksize": [128, 64, 32, 16, 8, 1]}}

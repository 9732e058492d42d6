"""GPTQ for the default run, written independently of the oracle (this module imports
nothing from ref): float32 arithmetic throughout, as the libraries run it, and the
paper's unblocked form: after each column, the whole remaining weight is updated at
once (a rank-1 update), so the lazy block size, which only regroups those updates,
is not needed. The inverse Hessian's upper Cholesky factor is the transpose of the
lower Cholesky factor of H^-1, H^-1 from float32 triangular solves.

Its outputs differ from the float64 oracle where float32 rounding moves a weight
across a rounding boundary: the op judges them by ref.quant.agreement's rule.

The steps are public functions so that the bug corpus (tests/corpus) composes its
wrong kernels from the same code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy GPTQ (float32, unblocked)"
VERSION = np.__version__

F = np.float32


def minmax_params(w: np.ndarray, bits: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-row float32 (scale, zero) of w [rows, n], the range widened to include 0."""
    maxq = F((1 << bits) - 1)
    lo = np.minimum(w.min(axis=1), F(0))
    hi = np.maximum(w.max(axis=1), F(0))
    if scheme == "symmetric":
        hi = np.maximum(-lo, hi)
        lo = np.where(lo < 0, -hi, lo)
    flat = (lo == 0) & (hi == 0)
    lo, hi = np.where(flat, F(-1), lo), np.where(flat, F(1), hi)
    scale = ((hi - lo) / maxq).astype(F)
    if scheme == "symmetric":
        return scale, np.full_like(scale, (maxq + 1) / 2)
    return scale, np.rint(-lo / scale).astype(F)


def round_column(w: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, dequantized values) of one column w [rows]."""
    code = np.clip(np.rint(w / scale) + zero, 0, (1 << bits) - 1)
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


def feedback(w: np.ndarray, err: np.ndarray, u_row: np.ndarray, j: int) -> None:
    """The error of column j carried into every later column."""
    w[:, j + 1:] -= np.outer(err, u_row[j + 1:]).astype(F)


def gptq(w, hessian, *, bits=4, group=-1, scheme="asymmetric", percdamp=0.01, blocksize=128, act_order=False,
         group_params="dynamic"):
    w = np.array(w, dtype=F)
    h = np.array(hessian, dtype=F)
    rows, cols = w.shape
    g = cols if group == -1 else group
    ngroups = cols // g
    scales = np.zeros((rows, ngroups), F)
    zeros = np.zeros((rows, ngroups), F)
    if group == -1:
        scales[:, 0], zeros[:, 0] = minmax_params(w, bits, scheme)
    dead = np.diag(h) == 0
    w[:, dead] = 0
    h[dead, dead] = 1
    if group != -1 and group_params == "static":
        for k in range(ngroups):
            scales[:, k], zeros[:, k] = minmax_params(w[:, k * g:(k + 1) * g], bits, scheme)
    perm = visit_order(h, act_order)
    dynamic = group != -1 and group_params == "dynamic"
    position = np.argsort(perm)
    g_idx = (position if dynamic else np.arange(cols)) // g
    w = w[:, perm]
    u = upper_inverse_factor(damped(h[np.ix_(perm, perm)], percdamp))
    codes = np.zeros((rows, cols), np.int64)
    losses = np.zeros(rows, F)
    for j in range(cols):
        if dynamic and j % g == 0:
            scales[:, j // g], zeros[:, j // g] = minmax_params(w[:, j:j + g], bits, scheme)
        k = g_idx[perm[j]]
        codes[:, j], q = round_column(w[:, j], scales[:, k], zeros[:, k], bits)
        err = (w[:, j] - q) / u[j, j]
        losses += err * err / F(2)
        feedback(w, err, u[j], j)
    return (codes[:, position], scales, zeros.astype(np.int64), g_idx.astype(np.int64), losses)


OPS = {"quant.gptq": gptq}

"""GPTQ (Frantar et al., arXiv:2210.17323): quantize a linear layer's weight column by
column, each column's rounding error fed back into the columns not yet quantized
through the inverse Hessian of the layer's quadratic objective.

    objective    ||W X - Q X||^2 over calibration inputs X [cols, n]
    hessian      H = (2/n) X X^T                     (the reference's convention)
    dead         H_ii = 0: W[:, i] = 0 and H_ii = 1
    dampening    H += percdamp * mean(diag H) * I    (relative; default 0.01)
    Hinv         U upper triangular with H^-1 = U^T U (the upper Cholesky factor of H^-1)
    per column j (in order, or in act-order: diag H descending):
        q_j   = dequant(quant(w_j))                  (group params: see below)
        err_j = (w_j - q_j) / U_jj
        w_k  -= err_j * U_jk   for k > j             (lazily: inside the block of
                                                      `blocksize` columns at once, the
                                                      trailing columns at block end)
        loss += (w_j - q_j)^2 / U_jj^2 / 2
    act-order: the columns permuted by argsort(diag H, descending; ties by ascending
    index), the permutation undone on the codes.

The quantizer is the float32 RTN codec of ref.quant.rtn (GPTQ's min-max range forced
to include zero; `scheme` asymmetric, GPTQ's symmetric, or another rtn scheme; `search`
minmax, or "mse", rtn.mse_params, the reference's --mse option), applied to the
current weights rounded to float32, as every library runs it: scales and zero points
are float32 numbers, the feedback algebra around them float64.

Group parameters over `group` consecutive input channels (`group=-1`: one group per
row, found on the weights before dead columns are zeroed, as the reference does):
"dynamic" (default) computes a group's scale and zero point when its first column is
reached, from the group's weights as the feedback has updated them by then, so the
lazy block size changes nothing; in act-order the groups are runs of `group` permuted
columns and g_idx[perm[j]] = j // group (GPTQModel's and auto-gptq's desc_act). The
reference code (and GPTQModel) take those weights from the block's start, missing the
updates of the block's own earlier columns: "block_start", the same as "dynamic" when
`group` is a multiple of `blocksize` (the defaults 128 and 128). "static" (the
reference's static_groups) computes them from the weights before any update, after dead
columns are zeroed, in the original column order (g_idx[i] = i // group); act-order
then only changes the order the columns are visited in.

The outputs are codes [rows, cols] (original column order), scales and zero points
[rows, groups], g_idx [cols] and losses [rows] (each row's accumulated loss, which
equals (w - q) H (w - q)^T / 2 with the damped H and the dead-zeroed w). Losses are
returned rounded to float32, so that their last bits do not depend on the LAPACK
doing the Cholesky factorizations.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from scipy.linalg import lapack

from ref.arguments import boolean, integer, member, real
from ref.quant import rtn

__all__ = ["BITS", "GroupParams", "dampen", "gptq", "hessian", "inverse_cholesky", "order", "prepare"]

BITS = (2, 3, 4, 8)
F64 = np.float64
SUB_BLOCK = 16  # columns per rank-1 run inside a lazy block (a GEMM at each one's end): speed only


class GroupParams(enum.Enum):
    DYNAMIC = "dynamic"  # at each group's first column, from the updated weights (reference default)
    STATIC = "static"  # from the weights before GPTQ, original column order (static_groups)
    STATIC_PERMUTED = "static_permuted"  # before GPTQ, groups of visited columns (llm-compressor actorder=group)
    BLOCK_START = "block_start"  # the reference code: from the weights as the lazy block found them


def hessian(x: ArrayLike) -> NDArray[np.float64]:
    """H = (2/n) X X^T from calibration inputs x [n, cols] (one row per token), in
    float64: the reference's convention (llm-compressor accumulates the same 2 X^T X / n)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype.kind != "f":
        raise ValueError(f"x: expected float calibration inputs [tokens, cols], got {x.dtype} {x.shape}")
    if x.shape[0] == 0:
        raise ValueError("x: at least one calibration token is needed")
    if not np.isfinite(x).all():
        raise ValueError("x: calibration inputs must be finite (found NaN or Inf)")
    x = x.astype(F64)
    return (2.0 / x.shape[0]) * (x.T @ x)  # [cols, cols]


def prepare(w: NDArray, h: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """(W with dead columns zeroed, H with their diagonal set to 1, the dead mask)."""
    dead = np.diag(h) == 0  # [cols]
    w, h = w.copy(), h.copy()
    w[:, dead] = 0.0
    h[dead, dead] = 1.0
    return w, h, dead


def dampen(h: NDArray, percdamp: float) -> NDArray:
    """H + percdamp * mean(diag H) * I."""
    return h + percdamp * np.mean(np.diag(h)) * np.eye(h.shape[0])


def inverse_cholesky(h: NDArray) -> NDArray:
    """U upper triangular with H^-1 = U^T U (ValueError if H is not positive definite),
    from one Cholesky factorization and one triangular inverse: with J the reversal,
    J H J = M M^T (M lower), and U = J M^-1 J, since U^T U = J M^-T M^-1 J = (J M M^T J)^-1.
    The same U as the reference's cholesky, cholesky_inverse and upper cholesky (the
    factor is unique), at a third of the LAPACK work."""
    m, info = lapack.dpotrf(np.ascontiguousarray(h[::-1, ::-1]), lower=1, clean=1)  # J H J = M M^T
    if info != 0:  # LAPACK's potrf (numpy's cholesky runs several times slower on this machine)
        raise ValueError(f"hessian: not positive definite after dampening (LAPACK potrf info {info})")
    minv, _ = lapack.dtrtri(m, lower=1)  # M^-1, lower triangular
    return np.ascontiguousarray(minv[::-1, ::-1])  # J M^-1 J: upper


def order(h: NDArray, act_order: bool) -> NDArray[np.int64]:
    """The column visiting order: identity, or diag H descending (ties: ascending index)."""
    if not act_order:
        return np.arange(h.shape[0])
    return np.argsort(-np.diag(h), kind="stable")


def _check(w, h, bits, group, scheme, search, percdamp, blocksize, act_order, group_params):
    w, h = np.asarray(w), np.asarray(h)
    if w.ndim != 2 or w.dtype.kind != "f":
        raise ValueError(f"w: expected a float weight [rows, cols], got {w.dtype} {w.shape}")
    if h.dtype.kind != "f" or h.shape != (w.shape[1], w.shape[1]):
        raise ValueError(f"hessian: expected a float [cols, cols] = [{w.shape[1]}, {w.shape[1]}] matrix, "
                         f"got {h.dtype} {h.shape}")
    if w.size == 0:
        raise ValueError(f"w: expected at least one row and one column, got {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("w: weights must be finite (found NaN or Inf)")
    if not np.isfinite(h).all():
        raise ValueError("hessian: must be finite (found NaN or Inf)")
    if not np.array_equal(h, h.T):
        raise ValueError("hessian: must be symmetric (H == H^T exactly)")
    if (np.diag(h) < 0).any():
        raise ValueError("hessian: a negative diagonal entry (not positive semidefinite)")
    bits = integer(bits, "bits", choices=BITS)
    group = integer(group, "group", minimum=-1)
    if group == 0 or (group > 0 and w.shape[1] % group):
        raise ValueError(f"group: expected -1 or a positive divisor of cols={w.shape[1]}, got {group}")
    if isinstance(percdamp, np.ndarray) and percdamp.ndim == 0:
        percdamp = percdamp[()]  # golden files store scalars as 0-d arrays
    percdamp = real(percdamp, "percdamp", positive=False)
    if percdamp < 0:
        raise ValueError(f"percdamp: expected a dampening fraction >= 0, got {percdamp}")
    blocksize = integer(blocksize, "blocksize", minimum=1)
    act_order = boolean(act_order, "act_order")
    group_params = member(group_params, GroupParams, "group_params")
    scheme = member(scheme, rtn.Scheme, "scheme")
    search = member(search, rtn.Search, "search")
    return (w.astype(F64), h.astype(F64), bits, group, scheme, search, percdamp, blocksize, act_order, group_params)


def gptq(w: ArrayLike, hessian: ArrayLike, *, bits: int = 4, group: int = -1,
         scheme: rtn.Scheme | str = rtn.Scheme.ASYMMETRIC, search: rtn.Search | str = rtn.Search.MINMAX,
         percdamp: float = 0.01, blocksize: int = 128, act_order: bool = False,
         group_params: GroupParams | str = GroupParams.DYNAMIC):
    """GPTQ of w [rows, cols] given the layer Hessian [cols, cols] (see `hessian`) ->
    (codes [rows, cols] int64, scales [rows, groups] float32, zeros [rows, groups] int64,
    g_idx [cols] int64, losses [rows] float32)."""
    w, h, bits, group, scheme, search, percdamp, blocksize, act_order, group_params = _check(
        w, hessian, bits, group, scheme, search, percdamp, blocksize, act_order, group_params)
    rows, cols = w.shape
    g = cols if group == -1 else group
    ngroups = cols // g
    quant = dict(bits=bits, scheme=scheme, zero_range=rtn.ZeroRange.INCLUDE_ZERO, search=search)
    scales = np.zeros((rows, ngroups), np.float32)  # [rows, groups]
    zeros = np.zeros((rows, ngroups), np.float32)  # [rows, groups]
    if group == -1:
        scales[:, 0], zeros[:, 0] = _params(w, quant)  # before dead columns are zeroed
    w, h, _ = prepare(w, h)
    if group_params is GroupParams.STATIC and group != -1:
        scales[:], zeros[:] = _params(w.reshape(rows, ngroups, g), quant)
    perm = order(h, act_order)  # [cols]: permuted column j is original column perm[j]
    if group_params is GroupParams.STATIC_PERMUTED and group != -1:
        scales[:], zeros[:] = _params(w[:, perm].reshape(rows, ngroups, g), quant)
    dynamic = group != -1 and group_params not in (GroupParams.STATIC, GroupParams.STATIC_PERMUTED)
    visited_groups = group != -1 and group_params is not GroupParams.STATIC
    g_idx = (np.argsort(perm) if visited_groups else np.arange(cols)) // g  # [cols], original order
    col_group = g_idx[perm]  # [cols]: the group of permuted column j
    wt = np.ascontiguousarray(w[:, perm].T)  # [cols, rows]: visited column j is row j
    u = inverse_cholesky(dampen(h[np.ix_(perm, perm)], percdamp))  # [cols, cols] upper
    codes = np.zeros((cols, rows), dtype=np.int64)  # visiting order
    losses = np.zeros(rows)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        err = np.zeros((i2 - i1, rows))  # [b, rows]: the block's errors (w - q) / d
        start = wt[i1:i2 + g].copy() if dynamic and group_params is GroupParams.BLOCK_START else None
        for k1, k2 in _sub_blocks(i1, i2, g if dynamic else cols):
            for j in range(k1, k2):
                if dynamic and j % g == 0:
                    current = start[j - i1:j - i1 + g] if start is not None else \
                        _current(wt, err, u, i1, i2, j, j + g)  # [g, rows]
                    scales[:, j // g], zeros[:, j // g] = _params(np.ascontiguousarray(current.T), quant)
                k = col_group[j]
                codes[j], q = _round(wt[j], scales[:, k], zeros[:, k], bits, scheme)  # [rows] each
                d = u[j, j]
                err[j - i1] = (wt[j] - q) / d
                losses += (wt[j] - q) ** 2 / d**2 / 2
                wt[j + 1:k2] -= np.outer(u[j, j + 1:k2], err[j - i1])  # inside the sub-block
            wt[k2:i2] -= u[k1:k2, k2:i2].T @ err[k1 - i1:k2 - i1]  # the rest of the block
        wt[i2:] -= u[i1:i2, i2:].T @ err  # the lazy update of the trailing columns
    codes = codes.T
    codes = codes[:, np.argsort(perm)]
    return codes, scales, zeros.astype(np.int64), g_idx.astype(np.int64), losses.astype(np.float32)


def _params(w: NDArray, quant: dict) -> tuple[NDArray, NDArray]:
    """A group's (scale, zero point) on the float32 grid: rtn.params of the weights
    rounded to float32, in float32 arithmetic, as every library computes them."""
    quant = dict(quant)
    find = rtn.mse_params if quant.pop("search") is rtn.Search.MSE else rtn.params
    return find(w.astype(np.float32), **quant)


def _round(w: NDArray, scale: NDArray, zero: NDArray, bits: int, scheme: rtn.Scheme) -> tuple[NDArray, NDArray]:
    """(codes, dequantized weights in float64) of one column w [rows]: the float32 RTN
    codec applied to the current weights rounded to float32 (compressed-tensors'
    asymmetric scheme adds its zero point before rounding, as llm-compressor does)."""
    before = scheme is rtn.Scheme.ASYMMETRIC_COMPRESSED_TENSORS
    codes = rtn.quantize(w.astype(np.float32)[:, None], scale[:, None], zero[:, None], bits=bits,
                         zero_before_rounding=before)  # [rows, 1]
    return codes[:, 0], rtn.dequantize(codes, scale[:, None], zero[:, None])[:, 0].astype(F64)


def _sub_blocks(i1: int, i2: int, g: int) -> list[tuple[int, int]]:
    """The block's runs of at most SUB_BLOCK columns, cut also where a group starts (so
    its first column sees every update before it)."""
    runs, k1 = [], i1
    while k1 < i2:
        k2 = min(k1 + SUB_BLOCK, i2, (k1 // g + 1) * g)
        runs.append((k1, k2))
        k1 = k2
    return runs


def _current(wt, err, u, i1, i2, c1, c2) -> NDArray:
    """Visited columns c1..c2 [g, rows] as the feedback has updated them so far: inside
    the block they are (c1 starts a sub-block), past it the block's pending updates are
    applied, so the lazy block sizes do not change a group's parameters."""
    if c2 <= i2:
        return wt[c1:c2]
    beyond = wt[i2:c2] - u[i1:c1, i2:c2].T @ err[:c1 - i1]  # [c2 - i2, rows]
    return np.concatenate([wt[c1:i2], beyond])

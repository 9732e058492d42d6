"""The GPTQ bug corpus: wrong kernels written the way GPTQ implementations go wrong,
each one step changed from the default run's (ref.conformance.adapters.numpy_gptq).

GPTQ_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_gptq as K
from ref.conformance.implementation import Implementation

OP = "quant.gptq"
F = np.float32


def _no_feedback(original):
    return lambda w, err, u_row, j: None


def _feedback_added(original):
    def feedback(w, err, u_row, j):
        w[:, j + 1:] += np.outer(err, u_row[j + 1:]).astype(F)
    return feedback


def _absolute_damp(original):
    return lambda h, percdamp: h + F(percdamp) * np.eye(h.shape[0], dtype=F)


def _factor_of_h(original):
    return lambda h: np.linalg.cholesky(h).T.astype(F)  # H = U^T U: the factor of H, not of H^-1


def _reversed_factorization(original):
    def factor(h):
        hinv = np.linalg.inv(h).astype(F)
        flipped = np.linalg.cholesky(hinv[::-1, ::-1])  # H^-1 = U U^T with U upper (the "UL" factorization)
        return np.ascontiguousarray(flipped[::-1, ::-1]).astype(F)
    return factor


def _ascending(original):
    return lambda h, act_order: np.argsort(np.diag(h), kind="stable") if act_order else np.arange(h.shape[0])


def _g_idx_permuted(original):
    return lambda position, dynamic, g: position // g


def _g_idx_original(original):
    return lambda position, dynamic, g: np.arange(position.size) // g


def _loss_without_half(original):
    return lambda w, q, d: original(w, q, d) * F(2)


def _loss_without_d(original):
    return lambda w, q, d: (w - q) * (w - q) / F(2)


def _dead_kept(original):
    def drop_dead(w, h):
        dead = np.diag(h) == 0
        h[dead, dead] = 1
    return drop_dead


def _dead_diag_left(original):
    def drop_dead(w, h):
        w[:, np.diag(h) == 0] = 0
    return drop_dead


def _not_undone(w, hessian, **kw):
    codes, *rest = K.gptq(w, hessian, **kw)
    if kw.get("act_order"):
        h = np.array(hessian, dtype=F)
        K.drop_dead(np.zeros((0, h.shape[0]), F), h)
        codes = codes[:, K.visit_order(h, True)]  # left in visiting order
    return (codes, *rest)


def _with_group_params(declared, used):
    def kernel(w, hessian, **kw):
        if kw.get("group_params", "dynamic") == declared:
            kw["group_params"] = used
        return K.gptq(w, hessian, **kw)
    return kernel


def _block_only(w, hessian, *, blocksize=128, **kw):
    def inside(original):
        def feedback(w, err, u_row, j):
            end = (j // blocksize + 1) * blocksize  # the block's end: the trailing columns never updated
            w[:, j + 1:end] -= np.outer(err, u_row[j + 1:end]).astype(F)
        return feedback
    return patched(K.gptq, K, "feedback", inside)(w, hessian, blocksize=blocksize, **kw)


def _round_half_up(schemes):
    def replace(original):
        def round_column(w, scale, zero, bits, scheme="asymmetric"):
            if scheme not in schemes:
                return original(w, scale, zero, bits, scheme)
            x = (w / scale).astype(F)
            if scheme == "asymmetric_compressed_tensors":
                half = F(1 << (bits - 1))
                code = np.floor((x + (zero - half)).astype(F) + F(0.5)) + half
            else:
                code = np.floor(x + F(0.5)) + zero
            code = np.clip(code, 0, (1 << bits) - 1)
            return code.astype(np.int64), (scale * (code - zero)).astype(F)
        return round_column
    return replace


def _zero_half_up(original):
    def range_params(lo, hi, bits, scheme):
        scale, zero = original(lo, hi, bits, scheme)
        if scheme == "asymmetric":
            zero = np.clip(np.floor((-lo / scale).astype(F) + F(0.5)), F(0), F((1 << bits) - 1)).astype(F)
        return scale, zero
    return range_params


def _symmetric_always_negative(original):
    def adjusted_range(w, scheme):
        lo, hi = original(w, scheme)
        if scheme == "symmetric":
            lo = -np.maximum(-lo, hi)  # lo = -amax even where no weight is negative
        return lo.astype(F), hi.astype(F)
    return adjusted_range


def _flat_widened_everywhere(original):
    def adjusted_range(w, scheme):
        lo, hi = original(w, scheme)
        flat = (lo == 0) & (hi == 0)
        return np.where(flat, F(-1), lo).astype(F), np.where(flat, F(1), hi).astype(F)
    return adjusted_range


def _eps_floor(original):
    def range_params(lo, hi, bits, scheme):
        scale, zero = original(lo, hi, bits, scheme)
        return np.maximum(scale, np.finfo(F).eps).astype(F), zero
    return range_params


def _mse_norm2(original):
    def minmax_params(w, bits, scheme, search="minmax"):
        if search == "minmax":
            return original(w, bits, scheme, search)
        lo, hi = K.adjusted_range(w, scheme)
        best = np.full(w.shape[0], np.inf)
        scale, zero = K.range_params(lo, hi, bits, scheme)
        for i in range(80):
            p = F(1 - i / 100)
            s1, z1 = K.range_params((p * lo).astype(F), (p * hi).astype(F), bits, scheme)
            _, fake = K.round_column(w, s1[:, None], z1[:, None], bits, scheme)
            err = (np.abs(fake.astype(np.float64) - w) ** 2).sum(axis=1)  # norm 2, not 2.4
            better = err < best
            best[better], scale[better], zero[better] = err[better], s1[better], z1[better]
        return scale, zero
    return minmax_params


def _dead_threshold(original):
    def drop_dead(w, h):
        dead = np.diag(h) < 1e-6  # a tiny live diagonal taken for dead
        w[:, dead] = 0
        h[dead, dead] = 1
    return drop_dead


def _damp_over_raw_diagonal(w, hessian, **kw):
    raw = np.diag(np.asarray(hessian, F)).copy()

    def replace(original):
        def damped(h, percdamp):
            n = h.shape[0]
            return h + F(percdamp) * np.mean(raw, dtype=F) * np.eye(n, dtype=F)
        return damped
    return patched(K.gptq, K, "damped", replace)(w, hessian, **kw)


def _order_from_raw_diagonal(w, hessian, **kw):
    raw = np.diag(np.asarray(hessian, F)).copy()

    def replace(original):
        return lambda h, act_order: np.argsort(-raw, kind="stable") if act_order else np.arange(h.shape[0])
    return patched(K.gptq, K, "visit_order", replace)(w, hessian, **kw)


def _per_channel_after_dead(w, hessian, **kw):
    w = np.array(w, F)
    if kw.get("group", -1) == -1:
        w[:, np.diag(np.asarray(hessian)) == 0] = 0  # the range read after the dead columns are zeroed
    return K.gptq(w, hessian, **kw)


def _ties_last_first(original):
    def visit_order(h, act_order):
        n = h.shape[0]
        return np.lexsort((-np.arange(n), -np.diag(h))) if act_order else np.arange(n)
    return visit_order


def _feedback_f16(original):
    def feedback(w, err, u_row, j):
        w[:, j + 1:] -= np.outer(err.astype(np.float16), u_row[j + 1:].astype(np.float16)).astype(F)
    return feedback


def _factor_f16(original):
    return lambda h: original(h).astype(np.float16).astype(F)


def _no_diagonal_check(original):
    def check(w, h, percdamp, bits, group, blocksize):
        original(w, np.where(np.eye(h.shape[0], dtype=bool), np.abs(h), h) if h.ndim == 2 and
                 h.shape[0] == h.shape[-1] else h, percdamp, bits, group, blocksize)
    return check


GPTQ_BUGS = {
    "no error feedback (plain RTN)": (OP, "ErrorFeedback", patched(K.gptq, K, "feedback", _no_feedback)),
    "error fed back with the wrong sign": (OP, "ErrorFeedback", patched(K.gptq, K, "feedback", _feedback_added)),
    "dampening absolute instead of relative": (OP, "Dampening", patched(K.gptq, K, "damped", _absolute_damp)),
    "Cholesky factor of H instead of H^-1": (OP, "InverseFactor", patched(K.gptq, K, "upper_inverse_factor",
                                                                            _factor_of_h)),
    "H^-1 = U U^T (lower-upper order) instead of U^T U": (OP, "InverseFactor", patched(
        K.gptq, K, "upper_inverse_factor", _reversed_factorization)),
    "act-order permutation not undone": (OP, "ActOrder", _not_undone),
    "act-order ascending": (OP, "ActOrder", patched(K.gptq, K, "visit_order", _ascending)),
    "g_idx of static groups in permuted order": (OP, "GIdx", patched(K.gptq, K, "group_index", _g_idx_permuted)),
    "g_idx of act-order dynamic groups in original order": (OP, "GIdx", patched(K.gptq, K, "group_index",
                                                                                  _g_idx_original)),
    "static group params where dynamic are declared": (OP, "GroupParams", _with_group_params("dynamic", "static")),
    "dynamic group params where static are declared": (OP, "GroupParams", _with_group_params("static", "dynamic")),
    "static groups in original order where groups of visited columns are declared": (OP, "GroupParams", _with_group_params(
        "static_permuted", "static")),
    "the reference's block-start params where dynamic are declared": (OP, "GroupParams", _with_group_params(
        "dynamic", "block_start")),
    "feedback only inside the lazy block (no trailing update)": (OP, "BlockUpdate", _block_only),
    "loss without the 1/2": (OP, "Loss", patched(K.gptq, K, "column_loss", _loss_without_half)),
    "loss without the division by d^2": (OP, "Loss", patched(K.gptq, K, "column_loss", _loss_without_d)),
    "dead columns not zeroed": (OP, "DeadColumns", patched(K.gptq, K, "drop_dead", _dead_kept)),
    "dead columns' diagonal left at 0": (OP, "DeadColumns", patched(K.gptq, K, "drop_dead", _dead_diag_left)),
    "codes rounded half up": (OP, "RoundingTies", patched(K.gptq, K, "round_column", _round_half_up({"asymmetric"}))),
    "zero point rounded half up": (OP, "ZeroPointRounding", patched(K.gptq, K, "range_params", _zero_half_up)),
    "compressed-tensors' asymmetric codes rounded half up": (OP, "RoundingTies", patched(
        K.gptq, K, "round_column", _round_half_up({"asymmetric_compressed_tensors"}))),
    "GPTQ's symmetric lo = -amax on non-negative rows": (OP, "SymmetricConvention", patched(
        K.gptq, K, "adjusted_range", _symmetric_always_negative)),
    "all-zero rows widened to [-1, 1] in compressed-tensors' schemes too": (OP, "AllZeroGroup", patched(
        K.gptq, K, "adjusted_range", _flat_widened_everywhere)),
    "scale floor float32's eps instead of tiny": (OP, "DegenerateScale", patched(K.gptq, K, "range_params",
                                                                                 _eps_floor)),
    "MSE search with norm 2 instead of 2.4": (OP, "MseSearch", patched(K.gptq, K, "minmax_params", _mse_norm2)),
    "dampening mean over the raw diagonal (dead columns 0)": (OP, "Dampening", _damp_over_raw_diagonal),
    "dead columns by H_ii < 1e-6 instead of H_ii = 0": (OP, "DeadColumns", patched(K.gptq, K, "drop_dead",
                                                                                    _dead_threshold)),
    "act-order from the diagonal before dead columns get 1": (OP, "ActOrder", _order_from_raw_diagonal),
    "per-channel range read after the dead columns are zeroed": (OP, "DeadColumns", _per_channel_after_dead),
    "act-order ties broken by the later column": (OP, "ActOrder", patched(K.gptq, K, "visit_order",
                                                                         _ties_last_first)),
    "feedback product in float16": (OP, "HalfPrecision", patched(K.gptq, K, "feedback", _feedback_f16)),
    "inverse factor rounded to float16": (OP, "HalfPrecision", patched(K.gptq, K, "upper_inverse_factor",
                                                                      _factor_f16)),
    "a negative Hessian diagonal accepted": (OP, "InvalidInput", patched(K.gptq, K, "check", _no_diagonal_check)),
}


def bug(name: str) -> Implementation:
    op, _, kernel = GPTQ_BUGS[name]
    return Implementation(f"gptq bug: {name}", {op: kernel}, variants=K.VARIANTS)

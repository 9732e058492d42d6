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
}


def bug(name: str) -> Implementation:
    op, _, kernel = GPTQ_BUGS[name]
    return Implementation(f"gptq bug: {name}", {op: kernel}, variants=K.VARIANTS)

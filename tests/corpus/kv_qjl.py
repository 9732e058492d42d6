"""The QJL bug corpus: wrong kernels written the way sign sketches and their score
kernels go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_kv_qjl).

QJL_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import math

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_kv_qjl as K
from ref.conformance.implementation import Implementation

P = "kv.qjl."


def _no_sqrt_half_pi(original):
    return lambda dots, m, norms: original(dots, m, norms) / np.float32(math.sqrt(math.pi / 2))


def _norm_dropped(original):
    return lambda dots, m, norms: original(dots, m, np.ones_like(norms))


def _one_over_d(q, S, signs, norms):
    """1/D (the head dim) where the estimator divides by m."""
    return K.scores(q, S, signs, norms) * np.float32(np.shape(S)[0] / np.shape(S)[1])


def _query_other_projection(original):
    """S kept [D, m] for the keys' kernel and read back as [m, D] for the query."""
    return lambda x, S: original(x, np.ascontiguousarray(np.asarray(S).T).reshape(np.shape(S)))


def _zero_is_plus(original):
    return lambda projected: np.where(projected >= 0, np.int8(1), np.int8(-1))


def _msb_first(original):
    return original[::-1].copy()


def _interleaved_heads(original):
    def kv_head_of(hq, h):
        original(hq, h)
        return np.arange(hq) % h
    return kv_head_of


def _outliers_kept_in(k, S, outliers, outlier_dim):
    signs, norms, osigns, onorms = K.sketch_outliers(k, S, outliers, outlier_dim)
    kk, SS = np.asarray(k), np.asarray(S)
    return K.bit(K.project(kk, SS)), norms, osigns, onorms


def _inlier_norm_whole(original):
    return lambda norms, outlier_norms: norms


def _per_token_outliers(k, group, count):
    """Each token's own top channels, OR-ed over the group (not the group's norms)."""
    mask = K.outliers(k, 1, count)
    b, h, t, d = mask.shape
    g = int(group)
    return mask.reshape(b, h, t // g, g, d).any(axis=3) if t % g == 0 else K.outliers(k, group, count)


def _max_abs_outliers(k, group, count):
    """Channels ranked by max |k| over the group instead of their norm."""
    k = np.asarray(k)
    b, h, t, d = k.shape
    g = int(group)
    if t % g:
        return K.outliers(k, group, count)
    peak = np.abs(k.astype(np.float64)).reshape(b, h, t // g, g, d).max(axis=3, initial=0)
    # ranking by peak^2 as if it were the energy: same count, other channels
    top = np.argsort(-peak, axis=-1, kind="stable")[..., :int(count)]
    mask = np.zeros(peak.shape, bool)
    np.put_along_axis(mask, top, True, axis=-1)
    return mask


def _ties_high(k, group, count):
    """Ties broken toward the higher channel index (the channel axis reversed before a stable sort)."""
    return K.outliers(np.asarray(k)[..., ::-1], group, count)[..., ::-1]


def _outlier_scale_m(original):
    """The outlier estimate divided by m instead of m_out (one constant for both sketches)."""
    state = {}

    def estimate(dots, m, norms):
        state.setdefault("m", m)  # the first call is the inlier one, with m
        return original(dots, state["m"], norms)

    def scores_outliers(*args):
        state.clear()
        return patched(K.scores_outliers, K, "estimate", lambda _: estimate)(*args)
    return scores_outliers


def _recent_dropped(q, S, signs, norms, k_recent, v, *outlier_parts):
    """Attention over the sketched keys alone (the recent full-precision keys forgotten)."""
    r, v = np.asarray(k_recent), np.asarray(v)
    t = v.shape[2] - r.shape[2]
    if t == 0:
        return K.attend(q, S, signs, norms, k_recent, v, *outlier_parts)
    return K.attend(q, S, signs, norms, r[:, :, :0], v[:, :, :t], *outlier_parts)


def _recent_unscaled(q, S, signs, norms, k_recent, v, *outlier_parts):
    """The recent keys' logits not divided by sqrt(D) (scaled up front to cancel the kernel's division)."""
    d = np.shape(q)[-1]
    return K.attend(q, S, signs, norms, np.asarray(k_recent) * np.float32(math.sqrt(d)), v, *outlier_parts)


QJL_BUGS = {
    "scores without sqrt(pi/2)": (P + "scores", "QjlScale", patched(K.scores, K, "estimate", _no_sqrt_half_pi)),
    "scores divided by D instead of m": (P + "scores", "QjlScale", _one_over_d),
    "key norm dropped from the score": (P + "scores", "QjlNorm", patched(K.scores, K, "estimate", _norm_dropped)),
    "query projected with S read transposed": (P + "scores", "QjlProjection",
                                               patched(K.scores, K, "project", _query_other_projection)),
    "GQA heads interleaved (h % H)": (P + "scores", "QjlHeads", patched(K.scores, K, "kv_head_of", _interleaved_heads)),
    "packed signs read most significant bit first": (P + "scores", "QjlBitOrder",
                                                     patched(K.scores, K, "PACK_WEIGHTS", _msb_first)),
    "sign(0) = +1 in the sketch": (P + "sketch", "QjlSignZero", patched(K.sketch, K, "bit", _zero_is_plus)),
    "signs packed most significant bit first": (P + "pack", "QjlBitOrder",
                                                patched(K.pack, K, "PACK_WEIGHTS", _msb_first)),
    "outliers not excluded from the inlier sketch": (P + "sketch_outliers", "QjlOutliers", _outliers_kept_in),
    "sign(0) = +1 in the outlier sketch": (P + "sketch_outliers", "QjlSignZero",
                                           patched(K.sketch_outliers, K, "bit", _zero_is_plus)),
    "inlier norm taken as ||k||": (P + "scores_outliers", "QjlOutliers",
                                   patched(K.scores_outliers, K, "inlier_norm", _inlier_norm_whole)),
    "outlier estimate scaled by 1/m": (P + "scores_outliers", "QjlOutliers", _outlier_scale_m(K.estimate)),
    "attention without the recent full-precision keys": (P + "attend", "QjlRecent", _recent_dropped),
    "recent keys' logits not scaled by 1/sqrt(D)": (P + "attend", "QjlRecent", _recent_unscaled),
    "attention logits without sqrt(pi/2)": (P + "attend", "QjlScale",
                                            patched(K.attend, K, "estimate", _no_sqrt_half_pi)),
    "outliers chosen per token": (P + "outliers", "QjlOutlierSelection", _per_token_outliers),
    "outliers ranked by max |k|": (P + "outliers", "QjlOutlierSelection", _max_abs_outliers),
    "outlier ties to the higher index": (P + "outliers", "QjlOutlierSelection", _ties_high),
}

def bug(name: str) -> Implementation:
    op, _, kernel = QJL_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel})

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


# ---------------------------------------------------------------------------- issue 15 (adversary qjl)

def _f32_norm(original):
    """The norm as the float32 root of a float32 sum of squares."""
    def norm(x):
        x = np.asarray(x).astype(np.float32)
        return np.sqrt(np.einsum("...d,...d->...", x, x))
    return norm


def _f16_via_f32_norm(original):
    """The norm stored as float16 by way of float32 (rounded twice)."""
    return lambda x: original(x).astype(np.float32).astype(np.float16)


def _half_keys(k, S):
    """The keys cast to float16 before the (float32) projection and norm."""
    return K.sketch(np.asarray(k).astype(np.float16), S)


def _m0_accepted(original):
    def check(k, S):
        if S.ndim == 2 and S.shape[0] == 0 and k.ndim == 4 and S.shape[1] == k.shape[3]:
            return
        original(k, S)
    return check


def _rank_unchecked(original):
    def check(k, S):
        if k.ndim > 4 and S.ndim == 2 and S.shape[1] == k.shape[3]:
            return
        original(k, S)
    return check


def _any_int_pack(signs):
    """Any integer dtype of +-1 packed (int32 signs accepted)."""
    s = np.asarray(signs)
    return K.pack(s.astype(np.int8) if s.dtype.kind in "iu" and np.isin(s, (-1, 1)).all() else s)


def _half_query_sketch(original):
    """The query sketch S q kept in float16."""
    return lambda x, S: original(x, S).astype(np.float16).astype(np.float32)


def _half_query(q, S, signs, norms):
    """The query cast to float16 before projecting."""
    return K.scores(np.asarray(q).astype(np.float16), S, signs, norms)


def _batch_broadcast(q, S, signs, norms):
    """A query of batch 1 broadcast over the cache's batch instead of refused."""
    q, b = np.asarray(q), np.shape(norms)[0] if np.ndim(norms) else 1
    if q.ndim == 4 and q.shape[0] == 1 and b > 1:
        q = np.broadcast_to(q, (b, *q.shape[1:]))
    return K.scores(q, S, signs, norms)


def _ranked(k, group, count, *, energy="l2", kind="stable", grouping="consecutive"):
    """K.outliers with one step changed: the energy (l2, l1, float16 l2), the sort, or the grouping
    (consecutive, strided, per tensor, per layer)."""
    k = K.as_float(k, "k")
    b, h, t, d = k.shape
    g, c = int(group), int(count)
    if g < 1 or t % g or not 0 <= c <= d:
        return K.outliers(k, group, count)
    n = t // g
    x = k.astype(np.float16 if energy == "f16" else np.float64)
    if grouping == "strided":
        x = np.swapaxes(x.reshape(b, h, g, n, d), 2, 3)
    else:
        x = x.reshape(b, h, n, g, d)
    e = np.abs(x).sum(3) if energy == "l1" else (x * x).sum(3, dtype=x.dtype)
    if grouping == "tensor":
        e = np.broadcast_to(e.sum(2, keepdims=True), e.shape)
    elif grouping == "layer":
        e = np.broadcast_to(e.sum(1, keepdims=True), e.shape)
    top = np.argsort(-e.astype(np.float64), axis=-1, kind=kind)[..., :c]
    mask = np.zeros(e.shape, bool)
    np.put_along_axis(mask, top, True, axis=-1)
    return mask


def _tiled(original):
    """The group mask expanded to tokens with np.tile (token t reads group t mod N)."""
    def token_mask(o, shape):
        rep = original(o, shape)
        n = np.shape(o)[2]
        return np.tile(np.asarray(o), (1, 1, shape[2] // n, 1)) if n else rep
    return token_mask


def _head0_mask(original):
    """KV head 0's outlier mask applied to every head."""
    def token_mask(o, shape):
        rep = original(o, shape)
        return np.broadcast_to(rep[:, :1], rep.shape)
    return token_mask


def _dim0_accepted(original):
    def as_int(x, name, lo, hi=None):
        return original(x, name, 0 if name == "outlier_dim" else lo, hi)
    return as_int


def _dim0_sketch(k, S, outliers, outlier_dim):
    """outlier_dim 0 accepted (an empty outlier sketch)."""
    return patched(K.sketch_outliers, K, "_int", _dim0_accepted)(k, S, outliers, outlier_dim)


def _no_clamp(original):
    return lambda norms, outlier_norms: np.sqrt(norms * norms - outlier_norms * outlier_norms)


def _mask_heads_modulo(q, S, signs, norms, outliers, outlier_signs, outlier_norms):
    """GQA: the outlier mask read by query head h % H (the signs and norms by h // g)."""
    o = np.asarray(outliers)
    hq, h = np.shape(q)[1], np.shape(signs)[1]
    if o.ndim != 4 or h == 0 or hq % h or hq == h:
        return K.scores_outliers(q, S, signs, norms, outliers, outlier_signs, outlier_norms)
    g = hq // h
    out = []
    for j in range(hq):  # query head j: its own signs (j // g), the mask of KV head j % h
        sel = [j // g]
        mask = o[:, [j % h]]
        out.append(K.scores_outliers(np.asarray(q)[:, [j]], S, np.asarray(signs)[:, sel], np.asarray(norms)[:, sel],
                                     mask, np.asarray(outlier_signs)[:, sel], np.asarray(outlier_norms)[:, sel]))
    return np.concatenate(out, axis=1)


def _half_values(q, S, signs, norms, k_recent, v, *outlier_parts):
    """The values stored in float16 (then a float32 matmul)."""
    return K.attend(q, S, signs, norms, k_recent, np.asarray(v).astype(np.float16), *outlier_parts)


def _half_recent(q, S, signs, norms, k_recent, v, *outlier_parts):
    """The recent keys stored in float16."""
    return K.attend(q, S, signs, norms, np.asarray(k_recent).astype(np.float16), v, *outlier_parts)


def _recent_heads_unchecked(q, S, signs, norms, k_recent, v, *outlier_parts):
    """k_recent (and v) of 1 KV head broadcast over the sketched keys' heads instead of refused."""
    r, vv, h = np.asarray(k_recent), np.asarray(v), np.shape(signs)[1]
    if r.ndim == 4 and r.shape[1] == 1 and h > 1:
        r = np.broadcast_to(r, (r.shape[0], h, *r.shape[2:]))
        if vv.ndim == 4 and vv.shape[1] == 1:
            vv = np.broadcast_to(vv, (vv.shape[0], h, *vv.shape[2:]))
    return K.attend(q, S, signs, norms, r, vv, *outlier_parts)


def _no_max(original):
    def softmax_rows(logits):
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(logits)
            return e / e.sum(-1, keepdims=True)
    return softmax_rows


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
    # issue 15 (adversary qjl)
    "norm from a float32 sum of squares": (P + "sketch", "QjlPrecision", patched(K.sketch, K, "norm", _f32_norm)),
    "norm stored float16 through float32": (P + "sketch", "QjlPrecision",
                                            patched(K.sketch, K, "norm", _f16_via_f32_norm)),
    "keys cast to float16 before the sketch": (P + "sketch", "QjlPrecision", _half_keys),
    "S with m = 0 rows accepted": (P + "sketch", "InvalidInput",
                                   patched(K.sketch, K, "check_projection", _m0_accepted)),
    "keys of rank 5 accepted": (P + "sketch", "InvalidInput",
                                patched(K.sketch, K, "check_projection", _rank_unchecked)),
    "int32 signs packed": (P + "pack", "InvalidInput", _any_int_pack),
    "query sketch S q kept in float16": (P + "scores", "QjlPrecision",
                                         patched(K.scores, K, "project", _half_query_sketch)),
    "query cast to float16": (P + "scores", "QjlPrecision", _half_query),
    "query batch broadcast over the cache's": (P + "scores", "InvalidInput", _batch_broadcast),
    "outlier energies summed in float16": (P + "outliers", "QjlOutlierSelection",
                                           lambda k, g, c: _ranked(k, g, c, energy="f16")),
    "outliers by an unstable sort": (P + "outliers", "QjlOutlierSelection",
                                     lambda k, g, c: _ranked(k, g, c, kind="quicksort")),
    "outliers ranked by the L1 sum": (P + "outliers", "QjlOutlierSelection",
                                      lambda k, g, c: _ranked(k, g, c, energy="l1")),
    "outliers chosen per tensor": (P + "outliers", "QjlOutlierSelection",
                                   lambda k, g, c: _ranked(k, g, c, grouping="tensor")),
    "outliers chosen per layer (all heads)": (P + "outliers", "QjlOutlierSelection",
                                              lambda k, g, c: _ranked(k, g, c, grouping="layer")),
    "outlier groups strided": (P + "outliers", "QjlOutlierSelection",
                               lambda k, g, c: _ranked(k, g, c, grouping="strided")),
    "outlier mask tiled over the tokens": (P + "sketch_outliers", "QjlOutliers",
                                           patched(K.sketch_outliers, K, "token_mask", _tiled)),
    "KV head 0's outlier mask for every head": (P + "sketch_outliers", "QjlOutliers",
                                                patched(K.sketch_outliers, K, "token_mask", _head0_mask)),
    "outlier_dim 0 accepted": (P + "sketch_outliers", "InvalidInput", _dim0_sketch),
    "inlier norm without the clamp at 0": (P + "scores_outliers", "QjlOutliers",
                                           patched(K.scores_outliers, K, "inlier_norm", _no_clamp)),
    "outlier mask read by query head % H": (P + "scores_outliers", "QjlHeads", _mask_heads_modulo),
    "values stored float16": (P + "attend", "QjlPrecision", _half_values),
    "recent keys stored float16": (P + "attend", "QjlPrecision", _half_recent),
    "k_recent's head count unchecked": (P + "attend", "InvalidInput", _recent_heads_unchecked),
    "softmax without the row maximum": (P + "attend", "QjlLargeLogits", patched(K.attend, K, "softmax_rows", _no_max)),
}

def bug(name: str) -> Implementation:
    op, _, kernel = QJL_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel})

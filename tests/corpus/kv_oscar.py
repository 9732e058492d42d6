"""The OSCAR bug corpus: wrong kernels written the way INT2 KV codecs and their
calibration go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_kv_oscar).

OSCAR_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_kv_oscar as K
from ref.conformance.implementation import Implementation

Q, DQ, PK, UPK = "kv.oscar.quantize", "kv.oscar.dequantize", "kv.oscar.pack", "kv.oscar.unpack"
COV, ROT, ATT = "kv.oscar.covariances", "kv.oscar.rotation", "kv.oscar.attend"


def _keys_not_rotated(q, k, v, r_k=None, r_v=None, **kw):
    k = np.asarray(k, np.float64)
    if r_k is not None:
        k = k @ np.asarray(r_k, np.float64).T  # the kernel's own k @ r_k undoes it: keys stay unrotated
    return K.attend(q, k, v, r_k, r_v, **kw)


def _half_even(original):
    return lambda steps: np.round(steps)


def _sequential_pack(codes):
    c = np.asarray(codes)
    K.pack(c)  # the same checks
    quads = c.astype(np.uint32).reshape(*c.shape[:-1], -1, 4)
    return sum(quads[..., i] * 4**i for i in range(4)).astype(np.uint8)


def _sequential_unpack(packed):
    b = np.asarray(packed)
    K.unpack(b)
    parts = np.stack([(b.astype(np.int64) // 4**i) % 4 for i in range(4)], axis=-1)
    return parts.reshape(*b.shape[:-1], -1).astype(np.uint8)


def _sink_longer(original):
    return lambda t, sink, recent: original(t, sink + 1, recent)


def _recent_shorter(original):
    return lambda t, sink, recent: original(t, sink, max(recent - 1, 0))


def _per_tensor_clip(original):
    def clip_threshold(rows, ratio):
        flat = np.abs(rows).reshape(-1)
        rank = min(int(ratio * flat.size), flat.size - 1)
        return np.full((rows.shape[0], 1), np.partition(flat, rank)[rank], np.float32)
    return clip_threshold


def _rank_rounded(original):
    def clip_threshold(rows, ratio):
        d = rows.shape[1]
        rank = min(int(round(ratio * d)), d - 1)
        return np.partition(np.abs(rows), rank, axis=1)[:, rank:rank + 1]
    return clip_threshold


def _integer_zero(original):
    def scale_zero(lo, hi):
        scale, zero = original(lo, hi)
        return scale, np.round(zero).astype(np.float32)
    return scale_zero


def _span_unfloored(original):
    def scale_zero(lo, hi):
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = (hi - lo) / np.float32(3)
            return scale, -lo / scale
    return scale_zero


def _float64_codec(x, **kw):
    x = np.asarray(x)
    if x.dtype.kind == "f" and x.ndim:
        codes, scale, zero = K.quantize(x, **kw)
        x64 = x.astype(np.float32).astype(np.float64)
        d, g = x64.shape[-1], kw.get("group", 128)
        rows = K.clip(x64.reshape(-1, d), float(kw.get("clip_ratio", 0.96))).reshape(-1, g)
        lo, hi = rows.min(axis=1, initial=np.inf), rows.max(axis=1, initial=-np.inf)
        s64 = np.maximum(hi - lo, 1e-8) / 3
        steps = rows / s64[:, None] - lo[:, None] / s64[:, None]
        return np.clip(np.floor(steps + 0.5), 0, 3).astype(np.uint8).reshape(x.shape), scale, zero
    return K.quantize(x, **kw)


def _dequantize_integer_zero(codes, scales, zeros, **kw):
    return K.dequantize(codes, scales, np.round(np.asarray(zeros)).astype(np.asarray(zeros).dtype), **kw)


def _no_value_weights(q, k, v):
    c_k, _ = K.covariances(q, k, v)
    _, c_v = K.covariances(q, np.ones_like(np.asarray(k, np.float64)), v)  # every weight equal: plain E[v v^T]
    return c_k, c_v


def _interleaved_groups(q, k, v):
    q = np.asarray(q)
    h = np.asarray(k).shape[1]
    g = q.shape[1] // h if h else 1
    order = np.arange(q.shape[1]).reshape(g, h).T.reshape(-1) if h and q.shape[1] % h == 0 else np.arange(
        q.shape[1])
    return K.covariances(q[:, order], k, v)  # group h reads query heads h, h + H, ...


def _no_bit_reversal(original):
    return lambda d: np.arange(d)


def _ascending(c, *, composition="r_h_pbr"):
    r = K.rotation(c, composition="r_h" if composition == "r_h_pbr" else composition)
    if composition != "r_h_pbr":
        return r
    d = r.shape[0]
    perm = np.empty(d, dtype=np.int64)
    perm[K.bit_reversed(d)] = np.arange(d)  # rank taken ascending
    return r[:, perm]


def _clips_swapped(q, k, v, r_k=None, r_v=None, *, k_clip=0.96, v_clip=0.92, **kw):
    return K.attend(q, k, v, r_k, r_v, k_clip=v_clip, v_clip=k_clip, **kw)


OSCAR_BUGS = {
    "rotation applied to queries but not keys": (ATT, "OscarQueryOnlyRotation", _keys_not_rotated),
    "round half to even where the reference rounds half up": (Q, "OscarHalfUp",
                                                            patched(K.quantize, K, "round_half_up", _half_even)),
    "bit-reversal missing (eigenvalue order kept)": (ROT, "OscarBitReversal",
                                                     patched(K.rotation, K, "bit_reversed", _no_bit_reversal)),
    "eigenvalues ranked ascending": (ROT, "OscarEigenOrder", _ascending),
    "quarter-row interleave replaced by sequential packing": (PK, "OscarQuarterInterleave", _sequential_pack),
    "unpack reads sequential codes": (UPK, "OscarQuarterInterleave", _sequential_unpack),
    "sink window one token too long": (ATT, "OscarWindowEdge", patched(K.attend, K, "windows", _sink_longer)),
    "recent window one token too short": (ATT, "OscarWindowEdge", patched(K.attend, K, "windows", _recent_shorter)),
    "clip threshold per tensor instead of per token": (Q, "OscarClipScope",
                                                       patched(K.quantize, K, "clip_threshold", _per_tensor_clip)),
    "clip rank round(ratio D) instead of floor": (Q, "OscarClipRank",
                                                  patched(K.quantize, K, "clip_threshold", _rank_rounded)),
    "integer zero point where it is float": (Q, "OscarFloatZeroPoint",
                                             patched(K.quantize, K, "scale_zero", _integer_zero)),
    "dequantize with the zero point rounded": (DQ, "OscarFloatZeroPoint", _dequantize_integer_zero),
    "span of a constant group not floored": (Q, "OscarSpanFloor",
                                             patched(K.quantize, K, "scale_zero", _span_unfloored)),
    "codec steps in float64": (Q, "OscarFloat32Codec", _float64_codec),
    "value covariance without attention weights": (COV, "OscarValueWeights", _no_value_weights),
    "query groups interleaved": (COV, "OscarQueryGroups", _interleaved_groups),
    "K and V clip ratios swapped": (ATT, "OscarClipSwap", _clips_swapped),
}

# The entries the issue names (and two more cheap ones) run in the default profile, the rest in `-m deep`.
DEFAULT_PROFILE = {"rotation applied to queries but not keys",
                   "round half to even where the reference rounds half up",
                   "bit-reversal missing (eigenvalue order kept)",
                   "quarter-row interleave replaced by sequential packing"}


def bug(name: str) -> Implementation:
    op, _, kernel = OSCAR_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: K.VARIANTS[op]} if op in K.VARIANTS else {})

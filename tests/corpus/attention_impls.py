"""Attention kernels for the suite to judge: independent correct ones (a naive
per-head loop at float32, bfloat16 and float16; the tiled online-softmax algorithm
at other tile sizes; split-KV with other split counts; PyTorch's SDPA) and plausible
wrong ones, each one bug a real kernel has had.

The naive kernel is written here from the definition, not from `ref.attention`:
positions compared directly, one head at a time, float32 arithmetic, output rounded
to the declared precision. A bug is a switch in it, so each wrong kernel differs
from a correct one by exactly that bug.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ref.attention.flash import attend_split, attend_tiled
from ref.conformance.implementation import Implementation
from ref.formats.minifloat import round_to

_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32, "float64": np.float64}


def _lowp(x, precision):
    return round_to(np.asarray(x, np.float64), precision).astype(np.float32)


def _validate(q, k, v, sinks, mask, causal, window_right, softcap):
    for name, arr in (("q", q), ("k", k), ("v", v)):
        if np.asarray(arr).dtype.kind != "f":
            raise TypeError(f"{name} must be float")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("head dims differ")
    if k.shape[-2] == 0 or q.shape[-2] % k.shape[-2]:
        raise ValueError("query heads must be a multiple of KV heads")
    if causal and window_right > 0:
        raise ValueError("causal with a right window")
    if mask is not None and np.asarray(mask).dtype != np.bool_:
        raise TypeError("mask must be bool")
    if sinks is not None and np.shape(sinks) != (q.shape[-2],):
        raise ValueError("one sink per head")
    if softcap < 0:
        raise ValueError("softcap")


def naive(q, k, v, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
          sink_tokens=0, softcap=0.0, sink_in_lse="included", *, bugs=frozenset(), precision="float32"):
    """Attention one (batch, head) at a time in float32; `bugs` switches faults on."""
    _validate(q, k, v, sinks, mask, causal, window_right, softcap)
    q, k, v = (_lowp(x, precision) for x in (q, k, v))
    b_, lq, hq, d = q.shape
    lk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    group = hq // hkv
    if scale is None:
        scale = 1.0 / d if "scale 1/d" in bugs else 1.0 / math.sqrt(d)
    scale = np.float32(scale)
    qpos = np.arange(lq)[:, None] + (0 if "top-left causal" in bugs else lk - lq)
    kpos = np.arange(lk)[None, :]
    see = np.ones((lq, lk), bool)
    if causal:
        see &= (kpos <= qpos) | ((kpos < sink_tokens) if "sink tokens ignore causality" in bugs else False)
    if window_right >= 0 and not causal:
        see &= kpos <= qpos + window_right
    if window_left >= 0:
        reach = window_left + (1 if "window one key too wide" in bugs else 0)
        see &= (kpos >= qpos - reach) | (kpos < sink_tokens)
    out = np.zeros((b_, lq, hq, dv), np.float32)
    lse = np.zeros((b_, hq, lq), np.float32)
    masks = None if mask is None else np.asarray(mask).reshape((1, 1) * (np.ndim(mask) == 2) + np.shape(mask))
    with np.errstate(all="ignore"):
        for b in range(b_):
            for h in range(hq):
                kv = h % hkv if "GQA interleaved" in bugs else h // group
                s = (q[b, :, h] @ k[b, :, kv].T) * scale
                vis = see.copy()
                if masks is not None:
                    hm = masks.shape[1] - 1 - min(h, masks.shape[1] - 1) if "mask heads reversed" in bugs else \
                        min(h, masks.shape[1] - 1)
                    vis &= masks[min(b, masks.shape[0] - 1), hm]
                cap = np.float32(softcap)
                if softcap > 0 and "softcap after mask" not in bugs:
                    s = cap * np.tanh(s / cap)
                s = np.where(vis, s, np.float32(-np.inf))
                if softcap > 0 and "softcap after mask" in bugs:
                    s = cap * np.tanh(s / cap)
                    vis = np.ones_like(vis)
                sink = None
                if sinks is not None:
                    sink = np.float32(sinks[h]) * (scale if "sink scaled" in bugs else np.float32(1))
                if "no max subtraction" in bugs:
                    mx = np.zeros(lq, np.float32)
                elif "global max" in bugs:
                    mx = np.full(lq, s.max(initial=-np.inf), np.float32)
                else:
                    mx = s.max(axis=1, initial=-np.inf)
                if sink is not None and "no max subtraction" not in bugs:
                    mx = np.maximum(mx, sink)
                shift = np.where(np.isinf(mx) & (mx < 0) & ("empty row NaN" not in bugs), 0, mx).astype(np.float32)
                e = np.where(vis, np.exp(s - shift[:, None]), 0).astype(np.float32)
                keys = e.sum(axis=1)
                z = keys.copy()
                if sink is not None and "sink not in normalizer" not in bugs:
                    z = z + np.exp(sink - shift)
                p = e if precision == "float32" else _lowp(e, precision)
                o = p @ v[b, :, kv]
                if "empty row NaN" in bugs:
                    o = o / z[:, None]
                elif "empty row uniform" in bugs:
                    mean = v[b, :, kv].mean(axis=0) if lk else np.zeros(dv, np.float32)
                    o = np.where(z[:, None] == 0, mean, o / np.where(z == 0, 1, z)[:, None])
                else:
                    o = np.where(z[:, None] == 0, 0, o / np.where(z == 0, 1, z)[:, None])
                out[b, :, h] = o
                with_sink = sink_in_lse == "included"
                if "sink LSE swapped" in bugs:
                    with_sink = not with_sink
                total = z if (sink is not None and with_sink) else keys
                lse[b, h] = np.where(total == 0, -np.inf, shift + np.log(np.where(total == 0, 1, total)))
    return round_to(out, precision).astype(_DTYPES[precision]), lse


def naive_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, *, bugs=frozenset(), precision="float32",
                 **options):
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    if cq.dtype.kind not in "iu" or cq[0] != 0 or ck[0] != 0 or np.any(np.diff(cq) < 0) or np.any(np.diff(ck) < 0):
        raise ValueError("bad offsets")
    if cq[-1] != q.shape[0] or ck[-1] != k.shape[0]:
        raise ValueError("offsets do not match the packed lengths")
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), _DTYPES[precision])
    lse = np.zeros((q.shape[1], q.shape[0]), np.float32)
    for s in range(len(cq) - 1):
        start = 0 if "keys from the batch start" in bugs else ck[s]
        rows, keys = slice(cq[s], cq[s + 1]), slice(start, ck[s + 1])
        o, l = naive(q[None, rows], k[None, keys], v[None, keys], sinks, bugs=bugs, precision=precision, **options)
        out[rows], lse[:, rows] = o[0], l[0]
    return out, lse


def naive_merge(o_a, lse_a, o_b, lse_b, *, bugs=frozenset(), precision="float32"):
    if np.shape(o_a)[:-1] != np.shape(lse_a) or np.shape(o_b)[:-1] != np.shape(lse_b):
        raise ValueError("shapes")
    if np.any(np.asarray(lse_a) == np.inf) or np.any(np.asarray(lse_b) == np.inf):
        raise ValueError("+inf lse")
    oa, ob = _lowp(o_a, precision), _lowp(o_b, precision)
    la, lb = np.asarray(lse_a, np.float32), np.asarray(lse_b, np.float32)
    with np.errstate(all="ignore"):
        if "merge without max shift" in bugs:
            wa, wb = np.exp(la), np.exp(lb)
            m = np.zeros_like(la)
        else:
            m = np.maximum(la, lb)
            if "empty partial NaN" not in bugs:
                m = np.where(np.isneginf(m), 0, m)
            wa, wb = np.exp(la - m), np.exp(lb - m)
        tot = wa + wb
        o = (wa[..., None] * oa + wb[..., None] * ob) / np.where(tot == 0, 1, tot)[..., None]
        if "empty partial NaN" in bugs:
            o = (wa[..., None] * oa + wb[..., None] * ob) / tot[..., None]
        lse = np.where(tot == 0, -np.inf, m + np.log(np.where(tot == 0, 1, tot)))
        if "empty partial NaN" in bugs:
            lse = m + np.log(tot)
    return round_to(o, precision).astype(_DTYPES[precision]), lse.astype(np.float32)


ALL = {"sink_in_lse": ["included", "excluded"]}


def naive_impl(precision="float32", bugs=frozenset(), name=None):
    bugs = frozenset(bugs)
    return Implementation(
        name or f"naive {precision}" + (f" with {', '.join(sorted(bugs))}" if bugs else ""),
        {"attention.attend": lambda **kw: naive(**kw, bugs=bugs, precision=precision),
         "attention.attend_varlen": lambda **kw: naive_varlen(**kw, bugs=bugs, precision=precision),
         "attention.merge_states": lambda **kw: naive_merge(**kw, bugs=bugs, precision=precision)},
        variants={"attention.attend*": ALL})


def tiled_impl(precision, block_q, block_k):
    def attend(**kw):
        o, lse = attend_tiled(**kw, block_q=block_q, block_k=block_k, precision=precision)
        return o.astype(_DTYPES[precision]), lse.astype(np.float32 if precision != "float64" else np.float64)

    return Implementation(f"tiled {precision} {block_q}x{block_k}", {"attention.attend": attend},
                          variants={"attention.attend": ALL})


def split_impl(splits):
    return Implementation(f"split-KV float64, {splits} splits",
                          {"attention.attend": lambda **kw: attend_split(**kw, splits=splits)},
                          variants={"attention.attend": ALL})


# name -> (bugs switched on, precision, the flag of a vector that must catch it)
BUGS = {
    "top-left causal alignment": ({"top-left causal"}, "bfloat16", "CausalAlignment"),
    "softmax without the row maximum": ({"no max subtraction"}, "bfloat16", "LargeLogits"),
    "GQA mapped interleaved": ({"GQA interleaved"}, "bfloat16", "GroupMapping"),
    "scale 1/D": ({"scale 1/d"}, "bfloat16", "Scale"),
    "soft-cap after masking": ({"softcap after mask"}, "bfloat16", "Softcap"),
    "sink in the LSE swapped": ({"sink LSE swapped"}, "float32", "SinkInLse"),
    "sink logit scaled": ({"sink scaled"}, "bfloat16", "LearnableSink"),
    "sink left out of the normalizer": ({"sink not in normalizer"}, "bfloat16", "LearnableSink"),
    "window one key too wide": ({"window one key too wide"}, "bfloat16", "Window"),
    "sink tokens exempt from causality": ({"sink tokens ignore causality"}, "bfloat16", "SinkTokens"),
    "empty row divides 0 by 0": ({"empty row NaN"}, "bfloat16", "EmptyRow"),
    "empty row gets the mean of V": ({"empty row uniform"}, "bfloat16", "EmptyRow"),
    "per-head mask applied to the wrong heads": ({"mask heads reversed"}, "bfloat16", "ExplicitMask"),
    "one maximum for the whole tile": ({"global max"}, "float32", "NaN"),
    "varlen keys from the batch start": ({"keys from the batch start"}, "bfloat16", "Varlen"),
    "merge without the max shift": ({"merge without max shift"}, "bfloat16", "MergeShift"),
    "empty partial merged to NaN": ({"empty partial NaN"}, "bfloat16", "EmptyPartial"),
}

CORRECT = {
    "naive float32": lambda: naive_impl("float32"),
    "naive bfloat16": lambda: naive_impl("bfloat16"),
    "naive float16": lambda: naive_impl("float16"),
    "tiled bfloat16 16x16": lambda: tiled_impl("bfloat16", 16, 16),
    "tiled bfloat16 3x5": lambda: tiled_impl("bfloat16", 3, 5),
    "tiled float16 8x4": lambda: tiled_impl("float16", 8, 4),
    "tiled float32 2x64": lambda: tiled_impl("float32", 2, 64),
    "split-KV 1": lambda: split_impl(1),
    "split-KV 3": lambda: split_impl(3),
    "split-KV 7": lambda: split_impl(7),
}


def negative_control(kind: str, precision: str) -> Implementation:
    """A correct kernel's output spoiled the way the bounded rule must notice at any
    precision: all zeros, rows shuffled, or the neighbouring head's output."""
    def attend(**kw):
        o, lse = naive(**kw, precision=precision)
        o = np.asarray(o)
        if kind == "zeros":
            o = np.zeros_like(o)
        elif kind == "shuffled rows" and o.shape[1] > 1:
            o = np.roll(o, 1, axis=1)
        elif kind == "neighbouring head" and o.shape[2] > 1:
            o = np.roll(o, 1, axis=2)
        return o, lse

    return Implementation(f"{kind} at {precision}", {"attention.attend": attend},
                          variants={"attention.attend": ALL})

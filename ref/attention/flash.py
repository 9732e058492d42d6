"""The FlashAttention algorithm and split-KV merging, proven equal to `attend`.

Online softmax (FlashAttention, arXiv 2205.14135; FlashAttention-2, 2307.08691):
per query row, keys arrive in blocks; the row keeps a running maximum m, a running
sum l and an unnormalized output acc. For each key block with scaled, capped and
masked logits s:

    m'  = max(m, max_j s_j)
    l   = exp(m - m') l + sum_j exp(s_j - m')
    acc = exp(m - m') acc + sum_j exp(s_j - m') v_j
    m   = m'

and at the end o = acc / l, lse = m + log l. A learnable sink starts the row at
m = sink, l = 1, acc = 0. A row with no visible key keeps m = -inf, l = 0: o = 0.

Split-KV (Flash-Decoding; FlashInfer's cascade): the keys are cut into ranges, each
range gives a partial (o_i, lse_i), and `merge_states` combines two partials:

    m   = max(lse_a, lse_b)
    w_x = exp(lse_x - m)
    o   = (w_a o_a + w_b o_b) / (w_a + w_b),   lse = m + log(w_a + w_b)

An empty partial has lse = -inf and contributes nothing; merging two empty ones
gives o = 0, lse = -inf (the formula alone gives NaN). Merging is commutative and
associative up to rounding, so any split and any merge order give `attend`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.attention import attend as _attend
from ref.formats.minifloat import PRECISIONS, round_to

__all__ = ["attend_split", "attend_tiled", "merge_states", "merge_states_many", "split_partials"]


def _options(sinks, mask, scale, causal, window_left, window_right, sink_tokens, softcap, sink_in_lse, lse_base,
             masked_lse):
    return dict(sinks=sinks, mask=mask, scale=scale, causal=causal, window_left=window_left,
                window_right=window_right, sink_tokens=sink_tokens, softcap=softcap, sink_in_lse=sink_in_lse,
                lse_base=lse_base, masked_lse=masked_lse)


def _block(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive integer block size, got {value!r}")
    return int(value)


def attend_tiled(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    block_q: int = 64,
    block_k: int = 64,
    precision: str = "float64",
    sinks=None,
    mask=None,
    scale=None,
    causal=False,
    window_left=-1,
    window_right=-1,
    sink_tokens=0,
    softcap=0.0,
    sink_in_lse="included",
    lse_base="e",
    masked_lse="-inf",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` by the online-softmax recurrence over block_q x block_k tiles.

    At `precision` float64 it equals `attend` to rounding. At float32, float16 or
    bfloat16 it is a kernel at that precision: inputs rounded to it, float32
    running state, each probability tile rounded to it before the product with V,
    the output rounded to it (FlashAttention-2's roundings, tile by tile).
    """
    block_q, block_k = _block(block_q, "block_q"), _block(block_k, "block_k")
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    opts = _options(sinks, mask, scale, causal, window_left, window_right, sink_tokens, softcap, sink_in_lse,
                    lse_base, masked_lse)
    q, k, v, sinks, scale, softcap, visible = _attend._setup(q, k, v, **opts)
    work = np.float64 if precision == "float64" else np.float32
    rnd = (lambda x: x) if precision == "float64" else partial(round_to, precision=precision)
    q, k, v = (rnd(x).astype(work) for x in (q, k, v))
    b, lq, hq, d = q.shape
    lk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    g = hq // hkv
    qh = q.transpose(0, 2, 1, 3)  # [B, Hq, Lq, D]
    kh = np.repeat(k.transpose(0, 2, 1, 3), g, axis=1)  # [B, Hq, Lk, D], head h reads KV head h // g
    vh = np.repeat(v.transpose(0, 2, 1, 3), g, axis=1)
    out = np.zeros((b, hq, lq, dv))
    lse = np.zeros((b, hq, lq))
    sink = None if sinks is None else rnd(sinks).astype(work)[None, :, None]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for r0 in range(0, lq, block_q):
            rows = slice(r0, min(r0 + block_q, lq))
            n = rows.stop - rows.start
            m = np.full((b, hq, n), -np.inf, dtype=work)
            l = np.zeros((b, hq, n), dtype=work)
            m_keys = np.full((b, hq, n), -np.inf, dtype=work)  # for the LSE without the sink
            l_keys = np.zeros((b, hq, n), dtype=work)
            acc = np.zeros((b, hq, n, dv), dtype=work)
            if sink is not None:
                m = np.broadcast_to(sink, m.shape).astype(work)
                l = np.ones_like(l)
            for c0 in range(0, lk, block_k):
                cols = slice(c0, min(c0 + block_k, lk))
                s = (qh[:, :, rows] @ kh[:, :, cols].swapaxes(-1, -2)) * work(scale)
                if softcap > 0:
                    s = work(softcap) * np.tanh(s / work(softcap))
                vis = visible[:, :, rows, cols]
                s = np.where(vis, s, -np.inf).astype(work)
                m_new = np.maximum(m, s.max(axis=-1, initial=-np.inf))
                alpha = np.where(m_new == -np.inf, 1, np.exp(m - m_new)).astype(work)
                shift = np.where(m_new == -np.inf, 0, m_new).astype(work)[..., None]
                p = np.where(vis, np.exp(s - shift), 0).astype(work)
                l = alpha * l + p.sum(axis=-1, dtype=work)
                pv = _attend._weighted_values(rnd(p).astype(work), vh[:, :, cols].transpose(0, 2, 1, 3), vis, 1)
                acc = alpha[..., None] * acc + pv
                m = m_new
                mk_new = np.maximum(m_keys, s.max(axis=-1, initial=-np.inf))
                beta = np.where(mk_new == -np.inf, 1, np.exp(m_keys - mk_new)).astype(work)
                l_keys = beta * l_keys + np.where(vis, np.exp(s - np.where(mk_new == -np.inf, 0, mk_new)[..., None]),
                                                  0).sum(axis=-1, dtype=work)
                m_keys = mk_new
            o = np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1)[..., None], 0 * acc)
            out[:, :, rows] = rnd(o)
            key_lse = np.where(l_keys > 0, m_keys + np.log(np.where(l_keys > 0, l_keys, 1)), -np.inf)
            key_lse = np.where(np.isnan(m_keys), np.nan, key_lse)
            if sink is not None and sink_in_lse == "included":
                key_lse = np.logaddexp(key_lse, sink)
            lse[:, :, rows] = key_lse
    out = np.ascontiguousarray(out.transpose(0, 2, 1, 3))
    return out, _attend._finish_lse(lse, lse_base=lse_base, masked_lse=masked_lse)


def _check_state(o, lse, name: str):
    o, lse = np.asarray(o), np.asarray(lse)
    for arr, what in ((o, f"o_{name}"), (lse, f"lse_{name}")):
        if arr.dtype.name not in ("float16", "bfloat16", "float32", "float64"):
            raise TypeError(f"{what}: expected a float array, got {arr.dtype}")
    if o.ndim < 1 or o.shape[:-1] != lse.shape:
        raise ValueError(f"o_{name}, lse_{name}: expected o [..., Dv] and lse [...] with the same leading shape, "
                         f"got {o.shape} and {lse.shape}")
    lse = lse.astype(np.float64)
    if np.any(lse == np.inf):
        raise ValueError(f"lse_{name}: +inf is not a log-sum-exp (an empty partial is -inf; "
                         "map FlashAttention-2's +inf first)")
    return o.astype(np.float64), lse


def merge_states(
    o_a: ArrayLike, lse_a: ArrayLike, o_b: ArrayLike, lse_b: ArrayLike, *, lse_base: str = "e"
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Combine two attention partials over disjoint key sets (float64).

    o_* [..., Dv], lse_* [...] (natural log; `lse_base="2"` takes and returns
    FlashInfer's base-2 values). Returns (o, lse) of the union of the key sets.
    """
    _attend._choice(lse_base, "lse_base", _attend.LSE_BASES)
    o_a, lse_a = _check_state(o_a, lse_a, "a")
    o_b, lse_b = _check_state(o_b, lse_b, "b")
    if o_a.shape != o_b.shape:
        raise ValueError(f"o_b: expected shape {o_a.shape} like o_a, got {o_b.shape}")
    if lse_base == "2":
        lse_a, lse_b = _attend.lse_from_base2(lse_a), _attend.lse_from_base2(lse_b)
    with np.errstate(invalid="ignore"):
        m = np.maximum(lse_a, lse_b)
        shift = np.where(m == -np.inf, 0.0, m)
        w_a, w_b = np.exp(lse_a - shift), np.exp(lse_b - shift)
        total = w_a + w_b
        safe = np.where(total > 0, total, 1.0)
        o = np.where(total[..., None] > 0, (w_a[..., None] * o_a + w_b[..., None] * o_b) / safe[..., None], 0.0)
        o = np.where(np.isnan(total)[..., None], np.nan, o)
        lse = np.where(total > 0, shift + np.log(safe), -np.inf)
        lse = np.where(np.isnan(total), np.nan, lse)
    if lse_base == "2":
        lse = _attend.lse_to_base2(lse)
    return o, lse


def merge_states_many(os: Sequence[ArrayLike], lses: Sequence[ArrayLike], *, lse_base: str = "e"):
    """Fold `merge_states` over a list of partials, left to right (none: an error)."""
    if len(os) != len(lses) or not os:
        raise ValueError(f"os, lses: expected equally many partials, at least one; got {len(os)} and {len(lses)}")
    o, lse = _check_state(os[0], lses[0], "a")
    for o_i, lse_i in zip(os[1:], lses[1:]):
        o, lse = merge_states(o, lse, o_i, lse_i, lse_base=lse_base)
    return o, lse


def _bounds(splits, lk: int) -> list[tuple[int, int]]:
    """Key ranges from a split count (near-equal ranges, as Flash-Decoding) or from
    explicit interior boundaries."""
    if isinstance(splits, (int, np.integer)) and not isinstance(splits, bool):
        if splits < 1:
            raise ValueError(f"splits: expected a positive count, got {splits}")
        edges = [round(i * lk / splits) for i in range(splits + 1)]
    else:
        inner = [int(x) for x in splits]
        edges = [0, *inner, lk]
        if any(b < a for a, b in zip(edges, edges[1:])):
            raise ValueError(f"splits: expected non-decreasing boundaries within [0, {lk}], got {inner}")
    return list(zip(edges, edges[1:]))


def split_partials(q, k, v, *, splits=2, **options) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """The partial (o, lse) of each key range (a learnable sink is a partial of its
    own: o = 0, lse = sink). Every mask keeps the key positions of the whole call;
    lse layout [B, Lq, Hq] (row-aligned with o [B, Lq, Hq, Dv], for merging)."""
    opts = {**_options(None, None, None, False, -1, -1, 0, 0.0, "included", "e", "-inf"), **options}
    q64, k64, v64, sinks, scale, softcap, visible = _attend._setup(q, k, v, **opts)
    parts = []
    for a, b in _bounds(splits, k64.shape[1]):
        o, lse = _attend._attention(q64, k64[:, a:b], v64[:, a:b], None, visible[..., a:b], scale, softcap,
                                    "included")
        parts.append((o, lse.transpose(0, 2, 1)))
    if sinks is not None:
        b_, lq, hq, _ = q64.shape
        parts.append((np.zeros((b_, lq, hq, v64.shape[3])), np.broadcast_to(sinks, (b_, lq, hq)).copy()))
    return parts


def attend_split(q, k, v, *, splits=2, **options) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` computed as split-KV partials merged by `merge_states` (float64).
    The LSE variants apply to the merged result; `sink_in_lse="excluded"` merges
    the key partials alone for the LSE."""
    sink_in_lse = options.get("sink_in_lse", "included")
    lse_base, masked_lse = options.get("lse_base", "e"), options.get("masked_lse", "-inf")
    parts = split_partials(q, k, v, splits=splits, **options)
    o, lse = merge_states_many([p[0] for p in parts], [p[1] for p in parts])
    if options.get("sinks") is not None and sink_in_lse == "excluded":
        _, lse = merge_states_many([p[0] for p in parts[:-1]], [p[1] for p in parts[:-1]])
    lse = np.ascontiguousarray(lse.transpose(0, 2, 1))
    return o, _attend._finish_lse(lse, lse_base=lse_base, masked_lse=masked_lse)

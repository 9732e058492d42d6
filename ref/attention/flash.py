"""The FlashAttention algorithm: `attend` by the online-softmax recurrence over
tiles, proven equal to `attend`.

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
Split-KV merging of partial results is in `ref.attention.split_kv`.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.attention.attend import SinkInLse, lse_variants, prepare, seen_values
from ref.formats.minifloat import PRECISIONS, round_to

__all__ = ["attend_tiled"]


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
    block_q, block_k = integer(block_q, "block_q", minimum=1), integer(block_k, "block_k", minimum=1)
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    sink_in_lse = member(sink_in_lse, SinkInLse, "sink_in_lse")
    lse_variants(np.zeros(0), lse_base=lse_base, masked_lse=masked_lse)  # checks both before any work
    q, k, v, sinks, scale, softcap, visible = prepare(
        q, k, v, sinks=sinks, mask=mask, scale=scale, causal=causal, window_left=window_left,
        window_right=window_right, sink_tokens=sink_tokens, softcap=softcap)
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
                pv = seen_values(rnd(p).astype(work), vh[:, :, cols].transpose(0, 2, 1, 3), vis)
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
            if sink is not None and sink_in_lse is SinkInLse.INCLUDED:
                key_lse = np.logaddexp(key_lse, sink)
            lse[:, :, rows] = key_lse
    out = np.ascontiguousarray(out.transpose(0, 2, 1, 3))
    return out, lse_variants(lse, lse_base=lse_base, masked_lse=masked_lse)



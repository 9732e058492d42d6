"""`attend` as the definition reads: a loop over batches, heads, query rows and keys
in Python floats, with no tensor algebra, no grouping of heads and no in-place
tricks. It is slow and meant to be read, and to check `ref.attention.attend.attend`,
which tests prove equal to it on random cases (GQA, causal with Lq != Lk, windows,
sink tokens, soft-capping, learnable sinks, explicit masks, rows that see no key).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer, member
from ref.attention.attend import LseBase, MaskedLse, SinkInLse
from ref.attention.checks import attention_inputs, mask_array

__all__ = ["attend_naive"]


def attend_naive(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, sinks=None, mask=None, scale=None, causal=False,
                 window_left=-1, window_right=-1, sink_tokens=0, softcap=0.0, sink_in_lse="included",
                 lse_base="e", masked_lse="-inf") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend`'s arguments and results, row by row and key by key."""
    q, k, v, sinks, scale, softcap = attention_inputs(q, k, v, sinks, scale, softcap)
    causal, sink_tokens = boolean(causal, "causal"), integer(sink_tokens, "sink_tokens", minimum=0)
    left, right = integer(window_left, "window_left", minimum=-1), integer(window_right, "window_right", minimum=-1)
    if causal and right > 0:
        raise ValueError(f"window_right: causal attention has right edge 0, got window_right={right}")
    included = member(sink_in_lse, SinkInLse, "sink_in_lse") is SinkInLse.INCLUDED
    base2 = member(lse_base, LseBase, "lse_base") is LseBase.TWO
    fa2 = member(masked_lse, MaskedLse, "masked_lse") is MaskedLse.POS_INF
    nb, lq, hq, _ = q.shape
    lk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    explicit = None if mask is None else mask_array(mask, nb, hq, lq, lk)
    out, lse = np.zeros((nb, lq, hq, dv)), np.zeros((nb, hq, lq))
    for b in range(nb):
        for h in range(hq):
            kv = h // (hq // hkv)  # the KV head of query head h
            for i in range(lq):
                pos = i + lk - lq  # bottom-right: row i sits at key position pos
                logits, values = [], []
                for j in range(lk):
                    seen = not (causal and j > pos)
                    seen &= not (right >= 0 and j > pos + right)
                    seen &= not (left >= 0 and j < pos - left and j >= sink_tokens)
                    if explicit is not None:
                        seen &= bool(explicit[min(b, explicit.shape[0] - 1), min(h, explicit.shape[1] - 1), i, j])
                    if not seen:
                        continue
                    s = scale * math.fsum(float(a) * float(c) for a, c in zip(q[b, i, h], k[b, j, kv]))
                    if softcap > 0:
                        s = softcap * math.tanh(s / softcap)
                    logits.append(s)
                    values.append(v[b, j, kv])
                sink = [] if sinks is None else [float(sinks[h])]
                out[b, i, h], lse[b, h, i] = _row(logits, values, sink, included, dv)
    if fa2:
        lse[lse == -math.inf] = math.inf
    return out, lse / math.log(2.0) if base2 else lse


def _row(logits, values, sink, included, dv):
    """One row's output and LSE from its visible logits, their values and the sink."""
    if any(math.isnan(s) for s in logits):
        return np.full(dv, math.nan), math.nan
    top = max(logits + sink, default=-math.inf)
    if top == -math.inf:  # no key and no sink
        return np.zeros(dv), -math.inf
    weights = [math.exp(s - top) for s in logits]
    z = math.fsum(weights) + sum(math.exp(x - top) for x in sink)
    o = sum((w * val for w, val in zip(weights, values)), np.zeros(dv)) / z
    if not logits:
        key_lse = -math.inf
    else:  # the keys' own LSE, at their own maximum
        mk = max(logits)
        key_lse = mk + math.log(math.fsum(math.exp(s - mk) for s in logits))
    if sink and included:
        return o, float(np.logaddexp(key_lse, sink[0]))
    return o, key_lse

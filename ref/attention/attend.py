"""Scaled dot-product attention, the definition: float64, one softmax per query row.

For query row i of a sequence with Lq queries and Lk keys, head h, and the keys the
row may see, A(i) (see `visible_keys`):

    s_j   = scale * (q_i . k_j)                     the scaled logit
    s_j   = cap * tanh(s_j / cap)                   if softcap > 0, before masking
    Z     = sum_{j in A(i)} exp(s_j) [+ exp(sink_h)] a learnable sink adds to Z only
    o_i   = sum_{j in A(i)} exp(s_j) v_j / Z
    lse_i = log Z                                   natural log ("e"), or log2 ("2")

Heads: query head h reads KV head h // G, G = Hq / Hkv: contiguous groups (GQA; MQA
is Hkv = 1, MHA is Hkv = Hq), as FlashAttention, vLLM, FlashInfer and gpt-oss do.

Masks combine by AND. Positions are aligned to the bottom-right corner: query i sits
at key position d_i = i + Lk - Lq (FlashAttention >= 2.1; PyTorch's SDPA
`is_causal` aligns top-left, which is d_i = i). Then key j is visible when

    causal                 j <= d_i
    window (left, right)   d_i - left <= j <= d_i + right   (-1: unbounded side)
    sink_tokens n          j < n waives the left edge only
    mask[i, j]             an explicit boolean mask, True = visible

Defined results: a row that sees no key has o_i = 0 and lse_i = -inf (or `sink_h`
when a learnable sink counts in the LSE); Lq = 0 or Lk = 0 are valid. A NaN in q_i,
or in k_j or v_j for a visible j, makes row i NaN; values at keys a row does not see
are never read (selection, not multiplication by zero).

Variants (enums; their string values are accepted too, as the catalog passes them):
    sink_in_lse  SinkInLse "included" (flash-attn, vLLM, FlashInfer) | "excluded":
                 log of the key terms alone
    lse_base     LseBase "e" (flash-attn, vLLM) | "2" (FlashInfer: log2 Z)
    masked_lse   MaskedLse "-inf" (FA3, vLLM) | "+inf" (FA2's lse for a row with no key)

`attend_naive` (ref.attention.attend_naive) is the same definition as a loop over
rows and keys in Python floats; tests prove the two equal.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.attention.checks import attention_inputs, floats, mask_array, offsets

__all__ = [
    "LseBase",
    "MaskedLse",
    "Prepared",
    "SinkInLse",
    "attend",
    "attend_varlen",
    "lse_from_base2",
    "lse_to_base2",
    "lse_variants",
    "prepare",
    "seen_values",
    "visible_keys",
]


class SinkInLse(Enum):
    """Whether the learnable sink's term is part of the returned LSE."""

    INCLUDED = "included"
    EXCLUDED = "excluded"


class LseBase(Enum):
    """The LSE's logarithm: natural (flash-attn, vLLM) or base 2 (FlashInfer)."""

    E = "e"
    TWO = "2"


class MaskedLse(Enum):
    """The LSE of a row that sees no key: -inf (FA3, vLLM) or FA2's +inf."""

    NEG_INF = "-inf"
    POS_INF = "+inf"


_LOG2E = 1.0 / math.log(2.0)


def lse_to_base2(lse: ArrayLike) -> NDArray[np.float64]:
    """Natural-log LSE to FlashInfer's base 2: log2 Z = ln Z / ln 2 (infinities kept)."""
    return np.asarray(lse, dtype=np.float64) * _LOG2E


def lse_from_base2(lse2: ArrayLike) -> NDArray[np.float64]:
    """Base-2 LSE (FlashInfer) to the natural log: ln Z = log2 Z * ln 2."""
    return np.asarray(lse2, dtype=np.float64) * math.log(2.0)


def visible_keys(lq: int, lk: int, *, causal: bool = False, window_left: int = -1, window_right: int = -1,
                 sink_tokens: int = 0) -> NDArray[np.bool_]:
    """[lq, lk] boolean: which keys each query row may see, bottom-right aligned.

    `causal` is the window's right edge at 0; `causal` with `window_right` > 0 is a
    contradiction and raises. `sink_tokens` = n exempts keys 0..n-1 from the left edge
    (StreamingLLM's attention sinks); they still obey the right edge and causality.
    """
    lq, lk = integer(lq, "lq", minimum=0), integer(lk, "lk", minimum=0)
    left, right = integer(window_left, "window_left", minimum=-1), integer(window_right, "window_right", minimum=-1)
    sink_tokens = integer(sink_tokens, "sink_tokens", minimum=0)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__} {causal!r}")
    if causal:
        if right > 0:
            raise ValueError(f"window_right: causal attention has right edge 0, got window_right={right}")
        right = 0
    diag = np.arange(lq)[:, None] + (lk - lq)  # the key position of each query row
    j = np.arange(lk)[None, :]
    ok = np.ones((lq, lk), dtype=bool)
    if right >= 0:
        ok &= j <= diag + right
    if left >= 0:
        ok &= (j >= diag - left) | (j < sink_tokens)
    return ok


class Prepared(NamedTuple):
    """One checked call: float64 arrays, the numbers, and which keys each row sees."""

    q: NDArray[np.float64]  # [B, Lq, Hq, D]
    k: NDArray[np.float64]  # [B, Lk, Hkv, D]
    v: NDArray[np.float64]  # [B, Lk, Hkv, Dv]
    sinks: NDArray[np.float64] | None  # [Hq]
    scale: float
    softcap: float
    visible: NDArray[np.bool_]  # [B, Hq, Lq, Lk]


def prepare(q, k, v, *, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
            sink_tokens=0, softcap=0.0) -> Prepared:
    """Check the arguments of `attend` and build A(i) for every row: `visible_keys`
    AND the explicit mask, broadcast to [B, Hq, Lq, Lk]."""
    x = attention_inputs(q, k, v, sinks, scale, softcap)
    b, lq, hq, _ = x.q.shape
    lk = x.k.shape[1]
    visible = visible_keys(lq, lk, causal=causal, window_left=window_left, window_right=window_right,
                           sink_tokens=sink_tokens)[None, None]
    if mask is not None:
        visible = visible & mask_array(mask, b, hq, lq, lk)
    return Prepared(*x, np.broadcast_to(visible, (b, hq, lq, lk)))


def lse_variants(lse: ArrayLike, *, lse_base="e", masked_lse="-inf") -> NDArray[np.float64]:
    """The LSE as a variant returns it: +inf for a row with no key (FA2), base 2
    (FlashInfer)."""
    lse_base, masked_lse = member(lse_base, LseBase, "lse_base"), member(masked_lse, MaskedLse, "masked_lse")
    lse = np.asarray(lse, np.float64)
    if masked_lse is MaskedLse.POS_INF:
        lse = np.where(lse == -np.inf, np.inf, lse)
    return lse * _LOG2E if lse_base is LseBase.TWO else lse


def seen_values(p: NDArray, v: NDArray, visible: NDArray[np.bool_]) -> NDArray:
    """o_i = sum_{j in A(i)} p_ij v_j, in p's dtype: a NaN or Inf in v at a key the row
    does not see is never read (a plain product would give 0 * NaN = NaN there).

    p [B, Hq, Lq, Lk] (0 at keys not seen), v [B, Lk, Hkv, Dv], visible [B, Hq, Lq, Lk];
    query head h reads KV head h // G. Returns [B, Hq, Lq, Dv]."""
    b, hq, lq, lk = p.shape
    hkv, dv = v.shape[2], v.shape[3]
    g = hq // hkv
    v = v.astype(p.dtype, copy=False)
    finite = np.isfinite(v)
    vt = np.where(finite, v, 0).transpose(0, 2, 1, 3)  # [B, Hkv, Lk, Dv]: the finite values
    out = (p.reshape(b, hkv, g * lq, lk) @ vt).reshape(b, hq, lq, dv)  # one product per KV head
    bad = np.flatnonzero(~finite.all(axis=(0, 2, 3)))  # keys holding a NaN or Inf
    if bad.size:  # their IEEE products p_ij v_j, at the rows that see them only
        nonfinite = np.where(finite[:, bad], 0, v[:, bad]).transpose(0, 2, 1, 3)[:, :, None, None]
        seen = visible[..., bad].reshape(b, hkv, g, lq, bad.size, 1)
        pw = p[..., bad].reshape(b, hkv, g, lq, bad.size, 1)
        out = out + np.where(seen, pw * nonfinite, 0).sum(axis=-2, dtype=p.dtype).reshape(b, hq, lq, dv)
    return out


def attend(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    sinks: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    scale: float | None = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    sink_tokens: int = 0,
    softcap: float = 0.0,
    sink_in_lse: SinkInLse | str = "included",
    lse_base: LseBase | str = "e",
    masked_lse: MaskedLse | str = "-inf",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Attention output and log-sum-exp, in float64 (the module docstring's equations).

    q [B, Lq, Hq, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] (float16, bfloat16,
    float32 or float64); sinks [Hq] learnable sink logits (not scaled, no value);
    mask [Lq, Lk] or [B|1, Hq|1, Lq, Lk] bool. scale defaults to 1/sqrt(D).
    Returns out [B, Lq, Hq, Dv] and lse [B, Hq, Lq] (flash-attn's layouts).
    """
    sink_in_lse = member(sink_in_lse, SinkInLse, "sink_in_lse")
    lse_variants(np.zeros(0), lse_base=lse_base, masked_lse=masked_lse)  # checks both before any work
    # 1. the visible keys A(i) of every row (and every argument checked)
    q, k, v, sinks, scale, softcap, visible = prepare(
        q, k, v, sinks=sinks, mask=mask, scale=scale, causal=causal, window_left=window_left,
        window_right=window_right, sink_tokens=sink_tokens, softcap=softcap)
    b, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv  # query heads per KV head: head h = n * G + r reads KV head n = h // G
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        # 2. scores s_ij = scale * q_i . k_j, by KV head n and its G query heads
        qg = q.reshape(b, lq, hkv, g, d)  # [B, Lq, Hkv, G, D]
        s = scale * np.einsum("binrd,bjnd->bnrij", qg, k).reshape(b, hq, lq, lk)  # [B, Hq, Lq, Lk]
        # 3. soft-capping, before the mask
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        # 4. masked softmax with the sink: exp(s_ij - m) over A(i); the sink adds to Z only
        s = np.where(visible, s, -np.inf)  # [B, Hq, Lq, Lk]: keys not seen weigh exp(-inf) = 0
        sink = None if sinks is None else sinks[None, :, None]  # [1, Hq, 1]
        m_keys = s.max(axis=-1, initial=-np.inf)  # [B, Hq, Lq]; a NaN row stays NaN
        m = m_keys if sink is None else np.maximum(m_keys, sink)
        shift = np.where(np.isfinite(m), m, 0)  # a row with no key (and no sink) shifts by 0
        p = np.exp(s - shift[..., None])  # [B, Hq, Lq, Lk]
        z = p.sum(axis=-1) + (0 if sink is None else np.exp(sink - shift))  # [B, Hq, Lq]
        # 5. output o_i = sum_j p_ij v_j / Z (0 for a row with Z = 0) and the LSE
        o = seen_values(p, v, visible)  # [B, Hq, Lq, Dv]
        o = np.where(z[..., None] > 0, o / np.where(z > 0, z, 1)[..., None], 0 * o)
        shift_k = np.where(np.isfinite(m_keys), m_keys, 0)  # the keys' own LSE: a large sink
        z_keys = np.exp(s - shift_k[..., None]).sum(axis=-1)  # cannot underflow it
        lse = np.where(z_keys > 0, shift_k + np.log(np.where(z_keys > 0, z_keys, 1)), -np.inf)
        lse = np.where(np.isnan(m_keys), np.nan, lse)  # [B, Hq, Lq]
        if sink is not None and sink_in_lse is SinkInLse.INCLUDED:
            lse = np.logaddexp(lse, sink)  # log(Z_keys + e^sink)
    out = np.ascontiguousarray(o.transpose(0, 2, 1, 3))  # [B, Lq, Hq, Dv]
    return out, lse_variants(lse, lse_base=lse_base, masked_lse=masked_lse)


def attend_varlen(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    cu_seqlens_q: ArrayLike,
    cu_seqlens_k: ArrayLike,
    *,
    sinks: ArrayLike | None = None,
    **options,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` over a packed batch of variable-length sequences.

    q [Tq, Hq, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv]; sequence s owns query rows
    cu_seqlens_q[s]:cu_seqlens_q[s+1] and keys cu_seqlens_k[s]:cu_seqlens_k[s+1]
    (flash-attn's varlen convention; each sequence is aligned bottom-right on its
    own).
    Options are `attend`'s, except `mask`. Returns out [Tq, Hq, Dv], lse [Hq, Tq].
    """
    if "mask" in options:
        raise TypeError("mask: attend_varlen takes no explicit mask; use attend per sequence")
    q, k, v = floats(q, "q", 3), floats(k, "k", 3), floats(v, "v", 3)
    cq, ck = offsets(cu_seqlens_q, "cu_seqlens_q"), offsets(cu_seqlens_k, "cu_seqlens_k")
    if cq.size != ck.size:
        raise ValueError(f"cu_seqlens_k: expected {cq.size} offsets like cu_seqlens_q, got {ck.size}")
    if cq[-1] != q.shape[0] or ck[-1] != k.shape[0]:
        raise ValueError(f"cu_seqlens_q, cu_seqlens_k: the last offsets ({cq[-1]}, {ck[-1]}) must equal "
                         f"the packed lengths of q ({q.shape[0]}) and k ({k.shape[0]})")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"v: expected {k.shape[0]} packed keys like k, got shape {v.shape}")
    hq, dv = q.shape[1], v.shape[2]
    out = np.zeros((q.shape[0], hq, dv))
    lse = np.zeros((hq, q.shape[0]))
    if cq.size == 1:  # no sequences: still check the shapes and options
        attend(q[None], k[None], v[None], sinks=sinks, **options)
    for s in range(cq.size - 1):
        rows, keys = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        o, l = attend(q[None, rows], k[None, keys], v[None, keys], sinks=sinks, **options)
        out[rows], lse[:, rows] = o[0], l[0]
    return out, lse

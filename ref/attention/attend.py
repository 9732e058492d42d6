"""Scaled dot-product attention, the definition: float64, one softmax per query row.

For query row i of a sequence with Lq queries and Lk keys, head h, and the keys the
row may see, A(i) (see `visible_keys`):

    s_j   = scale * (q_i . k_j)                     the scaled logit
    s_j   = cap * tanh(s_j / cap)                   if softcap > 0, before masking
    Z     = sum_{j in A(i)} exp(s_j) [+ exp(sink_h)] a learnable sink adds to Z only
    o_i   = sum_{j in A(i)} exp(s_j) v_j / Z
    lse_i = log Z                                   natural log ("e"), or log2 ("2")

Heads: query head h reads KV head h // (Hq / Hkv): contiguous groups (GQA; MQA is
Hkv = 1, MHA is Hkv = Hq), as FlashAttention, vLLM, FlashInfer and gpt-oss do.

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

Variants (strings, as everywhere in the catalog):
    sink_in_lse  "included" (flash-attn, vLLM, FlashInfer) | "excluded": log of the
                 key terms alone
    lse_base     "e" (flash-attn, vLLM) | "2" (FlashInfer: log2 Z)
    masked_lse   "-inf" (FA3, vLLM) | "+inf" (FA2's lse for a row with no key)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer

__all__ = [
    "LSE_BASES",
    "MASKED_LSE",
    "SINK_IN_LSE",
    "attend",
    "attend_varlen",
    "lse_to_base2",
    "lse_from_base2",
    "visible_keys",
]

SINK_IN_LSE = ("included", "excluded")
LSE_BASES = ("e", "2")
MASKED_LSE = ("-inf", "+inf")
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_LOG2E = 1.0 / math.log(2.0)


def lse_to_base2(lse: ArrayLike) -> NDArray[np.float64]:
    """Natural-log LSE to FlashInfer's base 2: log2 Z = ln Z / ln 2 (infinities kept)."""
    return np.asarray(lse, dtype=np.float64) * _LOG2E


def lse_from_base2(lse2: ArrayLike) -> NDArray[np.float64]:
    """Base-2 LSE (FlashInfer) to the natural log: ln Z = log2 Z * ln 2."""
    return np.asarray(lse2, dtype=np.float64) * math.log(2.0)


def visible_keys(
    lq: int,
    lk: int,
    *,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    sink_tokens: int = 0,
) -> NDArray[np.bool_]:
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


def _floats(x, name: str, ndim: int) -> NDArray[np.float64]:
    arr = np.asarray(x)
    if arr.dtype.name not in _FLOATS:
        raise TypeError(f"{name}: expected one of {_FLOATS}, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    return arr.astype(np.float64, copy=False)


def _scalar(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value}")
    return value


def _choice(value, name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {tuple(choices)}, got {value!r}")
    return value


def _check(q, k, v, sinks, scale, softcap):
    """Shapes and dtypes of a batched call; returns float64 arrays and the scale."""
    q, k, v = _floats(q, "q", 4), _floats(k, "k", 4), _floats(v, "v", 4)
    b, lq, hq, d = q.shape
    if k.shape[0] != b or v.shape[0] != b:
        raise ValueError(f"k, v: expected batch {b} like q, got k {k.shape} and v {v.shape}")
    if k.shape[3] != d:
        raise ValueError(f"k: expected head dim {d} like q [B, Lq, Hq, D] = {q.shape}, got k {k.shape}")
    if v.shape[1:3] != k.shape[1:3]:
        raise ValueError(f"v: expected [B, Lk, Hkv, Dv] with Lk, Hkv of k {k.shape}, got {v.shape}")
    hkv = k.shape[2]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"k: its {hkv} KV heads must divide the {hq} query heads of q")
    if sinks is not None:
        sinks = _floats(sinks, "sinks", 1)
        if sinks.shape != (hq,):
            raise ValueError(f"sinks: expected one logit per query head, shape ({hq},), got {sinks.shape}")
    if d == 0 and scale is None:
        raise ValueError("q: head dim 0 needs an explicit scale")
    scale = 1.0 / math.sqrt(d) if scale is None else _scalar(scale, "scale")
    softcap = _scalar(softcap, "softcap")
    if softcap < 0:
        raise ValueError(f"softcap: expected 0 (off) or a positive cap, got {softcap}")
    return q, k, v, sinks, scale, softcap


def _mask(mask, b: int, hq: int, lq: int, lk: int) -> NDArray[np.bool_]:
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"mask: expected a bool array (True = visible), got {m.dtype}")
    if m.ndim == 2:
        m = m[None, None]
    if m.ndim != 4 or m.shape[2:] != (lq, lk) or m.shape[0] not in (1, b) or m.shape[1] not in (1, hq):
        raise ValueError(f"mask: expected [Lq, Lk] or [B or 1, Hq or 1, Lq, Lk] = [{b}, {hq}, {lq}, {lk}], "
                         f"got {np.shape(mask)}")
    return m


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
    sink_in_lse: str = "included",
    lse_base: str = "e",
    masked_lse: str = "-inf",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Attention output and log-sum-exp, in float64.

    q [B, Lq, Hq, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] (float16, bfloat16,
    float32 or float64); sinks [Hq] learnable sink logits (not scaled, no value);
    mask [Lq, Lk] or [B|1, Hq|1, Lq, Lk] bool. scale defaults to 1/sqrt(D).
    Returns out [B, Lq, Hq, Dv] and lse [B, Hq, Lq] (flash-attn's layouts).
    """
    return _run(q, k, v, sinks=sinks, mask=mask, scale=scale, causal=causal, window_left=window_left,
                window_right=window_right, sink_tokens=sink_tokens, softcap=softcap, sink_in_lse=sink_in_lse,
                lse_base=lse_base, masked_lse=masked_lse)


def _setup(q, k, v, *, sinks, mask, scale, causal, window_left, window_right, sink_tokens, softcap, sink_in_lse,
           lse_base, masked_lse):
    """Check every argument; returns float64 q, k, v, sinks, the scale, the cap and
    the visible-key mask [B, Hq, Lq, Lk]."""
    q, k, v, sinks, scale, softcap = _check(q, k, v, sinks, scale, softcap)
    _choice(sink_in_lse, "sink_in_lse", SINK_IN_LSE)
    _choice(lse_base, "lse_base", LSE_BASES)
    _choice(masked_lse, "masked_lse", MASKED_LSE)
    b, lq, hq, _ = q.shape
    lk = k.shape[1]
    visible = visible_keys(lq, lk, causal=causal, window_left=window_left, window_right=window_right,
                           sink_tokens=sink_tokens)[None, None]
    if mask is not None:
        visible = visible & _mask(mask, b, hq, lq, lk)
    return q, k, v, sinks, scale, softcap, np.broadcast_to(visible, (b, hq, lq, lk))


def _finish_lse(lse, *, lse_base, masked_lse):
    """The LSE variants: +inf for a row with no key (FA2), base 2 (FlashInfer)."""
    if masked_lse == "+inf":
        lse = np.where(lse == -np.inf, np.inf, lse)
    if lse_base == "2":
        lse = lse * _LOG2E
    return lse


def _run(q, k, v, *, work=np.float64, rnd=None, scale_first=True, **options):
    """Check the arguments, build the visible-key mask and compute (see `_attention`);
    `rnd` also rounds q, k, v and the sinks first."""
    q, k, v, sinks, scale, softcap, visible = _setup(q, k, v, **options)
    if rnd is not None:
        q, k, v = rnd(q), rnd(k), rnd(v)
        sinks = None if sinks is None else rnd(sinks)
    out, lse = _attention(q, k, v, sinks, visible, scale, softcap, options["sink_in_lse"], work=work, rnd=rnd,
                          scale_first=scale_first)
    return out, _finish_lse(lse, lse_base=options["lse_base"], masked_lse=options["masked_lse"])


def _attention(q, k, v, sinks, visible, scale, softcap, sink_in_lse, *, work=np.float64, rnd=None,
               scale_first=True):
    """The computation of `attend` in the working dtype `work`; `rnd`, when given,
    rounds every stored tensor (the scaled query, the logits, each soft-capping step,
    the probabilities before the product with V, the output) to a storage precision
    (see `ref.attention.emulate`)."""
    b, lq, hq, _ = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    q, k, v = (x.astype(work, copy=False) for x in (q, k, v))
    sinks = None if sinks is None else sinks.astype(work)
    g = hq // hkv
    d = q.shape[3]
    # Rows of one KV head: its G query heads' Lq queries, so K and V are read once per KV head.
    qg = q.reshape(b, lq, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b, hkv, g * lq, d)
    kt = k.transpose(0, 2, 3, 1)  # [B, Hkv, D, Lk]
    if rnd is None:
        s = (qg @ kt).reshape(b, hq, lq, lk)
        s *= work(scale)
        if softcap > 0:
            cap = work(softcap)
            s /= cap
            np.tanh(s, out=s)
            s *= cap
    else:  # FlashAttention's reference at low precision: every tensor stored at P
        def low(x):
            return rnd(x).astype(work)

        if scale_first:  # q / sqrt(d) stored, then the scores (FlashAttention's reference)
            s = low(low(qg * work(scale)) @ kt).reshape(b, hq, lq, lk)
        else:  # the scores stored, then scaled (Hugging Face's eager attention)
            s = low(low(qg @ kt) * work(scale)).reshape(b, hq, lq, lk)
        if softcap > 0:
            s = low(low(np.tanh(low(s / work(softcap)))) * work(softcap))

    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        keys = s  # [B, Hq, Lq, Lk], in place from here: masked logits are -inf
        np.copyto(keys, -np.inf, where=~visible)
        m_keys = keys.max(axis=-1, initial=-np.inf)  # NaN propagates: a NaN row stays NaN
        m = m_keys if sinks is None else np.maximum(m_keys, sinks[None, :, None])
        shift = np.where(np.isfinite(m), m, 0).astype(work)[..., None]
        p = np.subtract(keys, shift)  # exp(-inf - finite) = 0: masked keys weigh nothing
        np.exp(p, out=p)
        z = p.sum(axis=-1, dtype=work)
        if sinks is not None:
            z = z + np.exp(sinks[None, :, None] - shift[..., 0])
        pv = p if rnd is None else rnd(p).astype(work)
        out = _weighted_values(pv, v, visible, g)  # [B, Hq, Lq, Dv]
        out = np.where(z[..., None] > 0, out / np.where(z > 0, z, 1)[..., None], 0 * out)

        # The LSE of the keys alone, shifted by their own maximum so that a large sink
        # cannot underflow it; the sink joins by logaddexp.
        if sinks is None:  # the same shift and sum as the output's
            shift_k, zk = shift[..., 0], z
        else:
            shift_k = np.where(np.isfinite(m_keys), m_keys, 0).astype(work)
            zk = np.where(visible, np.exp(keys - shift_k[..., None]), 0).sum(axis=-1, dtype=work)
        lse = np.where(zk > 0, shift_k + np.log(np.where(zk > 0, zk, 1)), -np.inf).astype(work)
        lse = np.where(np.isnan(m_keys), np.nan, lse)
        if sinks is not None and sink_in_lse == "included":
            lse = np.logaddexp(lse, sinks[None, :, None])
    out = out.transpose(0, 2, 1, 3)
    if rnd is not None:
        out = rnd(out)
    return np.ascontiguousarray(out, dtype=np.float64), lse.astype(np.float64)


def _weighted_values(p, v, visible, g):
    """sum_j p_ij v_j over visible j, per query head; non-finite v at keys a row does
    not see is not read (a plain matrix product would give 0 * NaN = NaN).

    p [B, Hq, Lq, Lk], v [B, Lk, Hkv, Dv], Hq = Hkv * g. Returns [B, Hq, Lq, Dv]."""
    b, hq, lq, lk = p.shape
    hkv, dv = v.shape[2], v.shape[3]
    v = v.astype(p.dtype, copy=False)
    bad = np.flatnonzero(~np.isfinite(v).all(axis=(0, 2, 3)))  # keys holding a NaN or Inf
    clean = v
    if bad.size:
        clean = v.copy()
        clean[:, bad] = np.where(np.isfinite(v[:, bad]), v[:, bad], 0)
    vt = clean.transpose(0, 2, 1, 3)  # [B, Hkv, Lk, Dv]
    out = (p.reshape(b, hkv, g * lq, lk) @ vt).reshape(b, hq, lq, dv)
    if bad.size:  # IEEE products at the visible ones among those keys only
        vb = v[:, bad]
        nonfinite = np.where(np.isfinite(vb), 0, vb).transpose(0, 2, 1, 3)[:, :, None, None]  # [B,Hkv,1,1,nb,Dv]
        vis = visible[..., bad].reshape(b, hkv, g, lq, bad.size)[..., None]
        pw = p[..., bad].reshape(b, hkv, g, lq, bad.size)[..., None]
        extra = np.where(vis, pw * nonfinite, 0).sum(axis=-2, dtype=p.dtype)
        out = out + extra.reshape(b, hq, lq, dv)
    return out


def _offsets(cu, name: str) -> NDArray[np.int64]:
    arr = np.asarray(cu)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer cumulative offsets, got {arr.dtype}")
    if arr.ndim != 1 or arr.size < 1 or arr[0] != 0 or np.any(np.diff(arr.astype(np.int64)) < 0):
        raise ValueError(f"{name}: expected a non-decreasing 1-D array starting at 0, got {arr.tolist()}")
    return arr.astype(np.int64)


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
    q, k, v = _floats(q, "q", 3), _floats(k, "k", 3), _floats(v, "v", 3)
    cq, ck = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
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

"""A float32 NumPy attention kernel set, bundled so that `python -m ref conform` judges
the bounded ops too: the FlashAttention-2 loop (`attend_tiled` at float32, 32 x 32
tiles), MLA in its absorbed form over that loop, merging by the logistic form of the
weights, and RoPE with cos and sin taken from a float64 angle.

Each rounds differently from the float64 oracle and from the float32 yardstick of the
bounded rule (other loop orders, other formulas), which is the point: the report shows
how much of the tolerance a correct float32 kernel uses.
"""

from __future__ import annotations

import numpy as np

from ref.attention import mla
from ref.attention.flash import attend_tiled
from ref.attention.rope import rope_frequencies

NAME = "NumPy float32 FlashAttention-2 loop"
VERSION = np.__version__

_F32 = np.float32
_BLOCK = 32


def _attend(q, k, v, **options):
    o, lse = attend_tiled(q, k, v, block_q=_BLOCK, block_k=_BLOCK, precision="float32", **options)
    return o.astype(_F32), lse.astype(_F32)


def _attend_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, **options):
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    if cq.dtype.kind not in "iu" or ck.dtype.kind not in "iu":
        raise TypeError("cu_seqlens_q, cu_seqlens_k: expected integer offsets")
    if cq.ndim != 1 or cq.shape != ck.shape or cq[0] != 0 or ck[0] != 0 or np.any(np.diff(cq) < 0) \
            or np.any(np.diff(ck) < 0) or cq[-1] != len(q) or ck[-1] != len(k):
        raise ValueError("cu_seqlens_q, cu_seqlens_k: expected offsets from 0 to the packed lengths")
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), _F32)
    lse = np.zeros((q.shape[1], q.shape[0]), _F32)
    for s in range(cq.size - 1):
        rows, keys = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        o, l = _attend(q[None, rows], k[None, keys], v[None, keys], sinks=sinks, **options)
        out[rows], lse[:, rows] = o[0], l[0]
    return out, lse


def _merge(o_a, lse_a, o_b, lse_b):
    """o = sigma(lse_a - lse_b) o_a + sigma(lse_b - lse_a) o_b, lse = max + log1p(e^-|d|)."""
    o_a, o_b = np.asarray(o_a, _F32), np.asarray(o_b, _F32)
    la, lb = np.asarray(lse_a, _F32), np.asarray(lse_b, _F32)
    if o_a.shape[:-1] != la.shape or o_b.shape != o_a.shape or lb.shape != la.shape:
        raise ValueError("o_a, lse_a, o_b, lse_b: expected o [..., Dv] and lse [...] of one shape")
    if np.any(la == np.inf) or np.any(lb == np.inf):
        raise ValueError("lse: +inf is not a log-sum-exp")
    with np.errstate(invalid="ignore", over="ignore"):
        both_empty = (la == -np.inf) & (lb == -np.inf)
        d = np.where(both_empty, _F32(0), la - lb)
        wa = _F32(1) / (_F32(1) + np.exp(-d))
        o = np.where(both_empty[..., None], _F32(0), wa[..., None] * o_a + (_F32(1) - wa)[..., None] * o_b)
        lse = np.where(both_empty, -np.inf, np.maximum(la, lb) + np.log1p(np.exp(-np.abs(d))))
    return o.astype(_F32), lse.astype(_F32)


def _rope(x, positions, rotary_dim=None, base=None, style="neox", scaling=None, attention_factor="cos_sin",
          mscale_keys="transformers"):
    x = np.asarray(x)
    pos = np.asarray(positions)
    if x.dtype.kind != "f" or pos.dtype.kind not in "iu":
        raise TypeError("x: expected floats; positions: expected integers")
    d = x.shape[-1]
    fraction = (scaling or {}).get("partial_rotary_factor")  # transformers 5 rope_parameters
    r = rotary_dim if rotary_dim is not None else d if fraction is None else int(d * fraction)
    if isinstance(r, bool) or r < 0 or r > d or r % 2 or (pos.size and pos.min() < 0):
        raise ValueError("rotary_dim, positions: expected an even rotary_dim <= D and positions >= 0")
    pos = np.broadcast_to(pos, x.shape[:-2])
    inv_freq, factor = rope_frequencies(r, base=base, scaling=scaling, mscale_keys=mscale_keys)
    angle = pos[..., None].astype(np.float64) * inv_freq  # float64 angle, then float32 cos and sin
    gain = factor if attention_factor == "cos_sin" else 1.0
    cos, sin = (np.cos(angle) * gain).astype(_F32)[..., None, :], (np.sin(angle) * gain).astype(_F32)[..., None, :]
    half = r // 2
    ia = np.arange(half) if style == "neox" else 2 * np.arange(half)
    ib = ia + half if style == "neox" else ia + 1
    out = x.astype(_F32)
    a, b = out[..., ia], out[..., ib]
    out[..., ia], out[..., ib] = a * cos - b * sin, b * cos + a * sin
    return out


def _mla(q_nope, q_pe, c_kv, k_pe, w_kv_b, causal=False, scale=None, rope_base=None, rope_scaling=None,
         rope_style="gptj"):
    """The absorbed form: the query meets the latent cache, W_UV comes after."""
    lq, lk = np.shape(q_nope)[1], np.shape(c_kv)[1]
    rope = dict(rope_base=rope_base, rope_scaling=rope_scaling, rope_style=rope_style)
    q = mla.absorb_query(q_nope, q_pe, w_kv_b, np.arange(lq) + (lk - lq), **rope).astype(_F32)
    kv = mla.latent_cache(c_kv, k_pe, np.arange(lk), **rope).astype(_F32)
    if lq > lk:
        raise ValueError("q_nope: more queries than positions")
    if scale is None:
        scale = mla.deepseek_softmax_scale(np.shape(q_nope)[3] + np.shape(q_pe)[3], rope_scaling)
    r = np.shape(c_kv)[2]
    o_lat, lse = _attend(q, kv, kv[..., :r], scale=scale, causal=causal)
    dv = np.shape(w_kv_b)[0] // np.shape(q_nope)[2] - np.shape(q_nope)[3]
    return mla.unabsorb_output(o_lat, w_kv_b, v_head_dim=dv).astype(_F32), lse


OPS = {
    "attention.attend": _attend,
    "attention.attend_varlen": _attend_varlen,
    "attention.merge_states": _merge,
    "attention.rope": _rope,
    "attention.mla": _mla,
}
VARIANTS = {
    "attention.attend*": {"sink_in_lse": ["included", "excluded"]},
    "attention.rope": {"style": ["neox", "gptj"], "attention_factor": ["cos_sin", "none"]},
    "attention.mla": {"rope_style": ["gptj", "neox"]},
}

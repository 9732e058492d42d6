"""Every attention oracle evaluated at a kernel's precision: the yardstick of the
bounded rule, in one place.

A kernel at precision P (bfloat16, float16, float32) is judged by how far a
same-precision evaluation of the definition lands from the float64 oracle
(spec/conformance.md, "Bounded comparison"). Each function here takes `precision`
first and then exactly its oracle's arguments, and is that evaluation, written out
step by step with the roundings a kernel makes and no others. At P = float64 each
returns the oracle itself.

attend (a FlashAttention-style kernel):
    inputs (q, k, v, sink logits)     rounded to P
    q * scale, then (q * scale) k^T   each stored at P (float32 accumulation), or
    q k^T, then (q k^T) * scale       each stored at P: whichever lands further
                                      from the oracle, output by output
    s / cap, tanh, * cap (softcap)    each stored at P
    softmax: max, exp, sum            float32
    probabilities before P V          rounded to P
    P V                               float32 accumulation, divided by the float32 sum
    output                            rounded to P; the LSE stays float32

The first order is FlashAttention's own test reference at the kernel's dtype
(`attention_ref(..., upcast=False)` in flash-attn's tests: q / sqrt(d) and the
einsum's scores in bf16, soft-capping in bf16, the softmax cast to bf16); the second
is Hugging Face's eager attention (`matmul(q, k^T) * scaling` in the activation
dtype). With k = 2 the rule is FlashAttention's; a kernel in either order is judged
by what its order can do. Fused kernels keep the logits in float32 and land well
inside. `attend_varlen` is `attend` per sequence.

merge_states: partial outputs at P, LSEs and all arithmetic in float32, output at P.

rope: x at P; inv_freq in float32 (the float64 one rounded once, or computed in
float32 as reference code does: whichever lands further); angle, cos and sin in
float32, then cos and sin stored at P; a cos, b sin and their difference or sum each
stored at P (no FMA), as Hugging Face's eager `x * cos + rotate_half(x) * sin`.

mla: the worst, output by output, of the naive form (K and V up-projected and stored
at P) and the absorbed form (the latent query and the latent output stored at P),
each with every stored tensor rounded to nearest, up and down; products accumulate
in float32, RoPE and attention as `rope` and `attend_rounded`.

`rounding` (in `rounder`, `attend_rounded`) picks the rounding of every stored
tensor: to nearest (the kernels' own, and attention's yardstick), or IEEE 754's
directed `up` (toward +inf) and `down` (toward -inf). One round-to-nearest
evaluation's error at an output is a single draw: where the exact logit lies near
the P grid its stored logit lands on it, and an output with few elements (one
query, one head) can be judged against an error near zero. MLA's yardstick (few
outputs, logits magnified by YaRN's mscale^2) therefore also evaluates under both
directed roundings, whose every rounding costs its full size (spec/attention.md,
"Tolerance").
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import member
from ref.attention import mla as latent
from ref.attention import rope as rotary
from ref.attention import split_kv
from ref.attention.attend import LseBase, SinkInLse, lse_variants, prepare, seen_values
from ref.attention.attend import attend as attend_exact
from ref.attention.attend import attend_varlen as attend_varlen_exact
from ref.formats.minifloat import PRECISIONS, Rounding, decode, encode, round_to

__all__ = ["ROUNDINGS", "attend", "attend_rounded", "attend_varlen", "merge_states", "mla", "mla_rounded",
           "rope", "rounder", "worse"]

# IEEE 754's round-to-nearest and its two directed rounding attributes.
ROUNDINGS = ("nearest", "up", "down")
_DIRECTED = {"up": Rounding.TOWARD_POSITIVE, "down": Rounding.TOWARD_NEGATIVE}
_F32 = np.float32


def _precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    return precision


def rounder(precision: str, rounding: str = "nearest") -> Callable[[ArrayLike], NDArray[np.float64]]:
    """x -> x stored at `precision` (float64 values), rounded to nearest-even or
    directed (`up` toward +inf, `down` toward -inf), overflowing as IEEE 754 says."""
    precision = _precision(precision)
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding: expected one of {ROUNDINGS}, got {rounding!r}")
    if rounding == "nearest" or precision == "float64":
        return partial(round_to, precision=precision)

    def rnd(x):
        codes = encode(np.asarray(x, np.float64), precision, rounding=_DIRECTED[rounding], overflow="nonsaturating")
        return decode(codes, precision).astype(np.float64)

    return rnd


def worse(exact, *evaluations):
    """Per output, the evaluation furthest from `exact` (largest error where exact is
    finite): the yardstick when an op has several standard low-precision forms."""
    picked = []
    for i, e in enumerate(exact):
        fin = np.isfinite(e)
        with np.errstate(invalid="ignore"):
            errors = [np.max(np.abs(ev[i] - e)[fin], initial=0.0) for ev in evaluations]
        picked.append(evaluations[int(np.argmax(errors))][i])
    return tuple(picked)


# ---------------------------------------------------------------------------- attend

def attend(precision: str, q, k, v, *, sinks=None, mask=None, scale=None, causal=False, window_left=-1,
           window_right=-1, sink_tokens=0, softcap=0.0, sink_in_lse="included", lse_base="e",
           masked_lse="-inf") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` as a kernel at `precision` computes it (values returned as float64)."""
    return attend_rounded(precision, "nearest", q, k, v, sinks=sinks, mask=mask, scale=scale, causal=causal,
                          window_left=window_left, window_right=window_right, sink_tokens=sink_tokens,
                          softcap=softcap, sink_in_lse=sink_in_lse, lse_base=lse_base, masked_lse=masked_lse)


def attend_rounded(precision: str, rounding: str, q, k, v, **options) -> tuple[NDArray[np.float64], ...]:
    """`attend` at `precision`, every stored tensor rounded by `rounding` (one of
    ROUNDINGS): the worse of the two orders of scaling, output by output."""
    exact = attend_exact(q, k, v, **options)  # checks every argument
    if _precision(precision) == "float64":
        return exact
    rnd = rounder(precision, rounding)
    return worse(exact, *(_attend_once(rnd, q, k, v, scale_first=first, **options) for first in (True, False)))


def _attend_once(rnd, q, k, v, *, scale_first, sink_in_lse="included", lse_base="e", masked_lse="-inf",
                 **options):
    """One evaluation: stored tensors through `rnd`, arithmetic in float32."""
    q, k, v, sinks, scale, softcap, visible = prepare(q, k, v, **options)

    def low(x):  # a tensor stored at P, held in float32 registers
        return rnd(x).astype(_F32)

    # 1. inputs stored at P
    q, k, v = low(q), low(k), low(v)
    sink = None if sinks is None else low(sinks)[None, :, None]  # [1, Hq, 1]
    b, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    qg = q.reshape(b, lq, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b, hkv, g * lq, d)  # rows of KV head h // G
    kt = k.transpose(0, 2, 3, 1)  # [B, Hkv, D, Lk]
    # 2. scores, float32 products stored at P, in the kernel's order of scaling
    if scale_first:  # q * scale stored, then the scores (FlashAttention's reference)
        s = low(low(qg * _F32(scale)) @ kt)
    else:  # the scores stored, then scaled (Hugging Face's eager attention)
        s = low(low(qg @ kt) * _F32(scale))
    s = s.reshape(b, hq, lq, lk)
    # 3. soft-capping, each step stored at P
    if softcap > 0:
        s = low(low(np.tanh(low(s / _F32(softcap)))) * _F32(softcap))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        # 4. masked softmax in float32
        s = np.where(visible, s, _F32(-np.inf))
        m_keys = s.max(axis=-1, initial=-np.inf)  # [B, Hq, Lq]
        m = m_keys if sink is None else np.maximum(m_keys, sink)
        shift = np.where(np.isfinite(m), m, 0).astype(_F32)
        p = np.exp(s - shift[..., None])
        z = p.sum(axis=-1, dtype=_F32) + (0 if sink is None else np.exp(sink - shift))
        # 5. probabilities stored at P, P V accumulated in float32, the output stored at P
        o = seen_values(low(p), v, visible)  # [B, Hq, Lq, Dv]
        o = np.where(z[..., None] > 0, o / np.where(z > 0, z, 1)[..., None], 0 * o)
        # 6. the LSE in float32: the keys' own, then the sink by logaddexp
        shift_k = np.where(np.isfinite(m_keys), m_keys, 0).astype(_F32)
        z_keys = np.exp(s - shift_k[..., None]).sum(axis=-1, dtype=_F32)
        lse = np.where(z_keys > 0, shift_k + np.log(np.where(z_keys > 0, z_keys, 1)), -np.inf).astype(_F32)
        lse = np.where(np.isnan(m_keys), np.nan, lse)
        if sink is not None and member(sink_in_lse, SinkInLse, "sink_in_lse") is SinkInLse.INCLUDED:
            lse = np.logaddexp(lse, sink)
    out = rnd(o.transpose(0, 2, 1, 3))
    return np.ascontiguousarray(out, dtype=np.float64), lse_variants(lse, lse_base=lse_base, masked_lse=masked_lse)


def attend_varlen(precision: str, q, k, v, cu_seqlens_q, cu_seqlens_k, *, sinks=None, **options):
    """`attend_varlen` at `precision`: the emulated `attend` per sequence, packed."""
    out, lse = attend_varlen_exact(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=sinks, **options)  # checks
    cq, ck = np.asarray(cu_seqlens_q, np.int64), np.asarray(cu_seqlens_k, np.int64)
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    for s in range(cq.size - 1):
        rows, keys = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        o, l = attend(precision, q[None, rows], k[None, keys], v[None, keys], sinks=sinks, **options)
        out[rows], lse[:, rows] = o[0], l[0]
    return out, lse


# ---------------------------------------------------------------------------- merge_states

def merge_states(precision: str, o_a, lse_a, o_b, lse_b, *, lse_base="e"):
    """`merge_states` at `precision`: partial outputs at P, LSEs and arithmetic in
    float32, the merged output at P."""
    exact = split_kv.merge_states(o_a, lse_a, o_b, lse_b, lse_base=lse_base)  # checks every argument
    if _precision(precision) == "float64":
        return exact
    base2 = member(lse_base, LseBase, "lse_base") is LseBase.TWO
    oa, ob = (round_to(x, precision).astype(_F32) for x in (o_a, o_b))
    la, lb = (np.asarray(x, np.float64).astype(_F32) for x in (lse_a, lse_b))
    if base2:  # to the natural log, in float32
        la, lb = la * _F32(np.log(2.0)), lb * _F32(np.log(2.0))
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.maximum(la, lb)
        shift = np.where(m == -np.inf, _F32(0), m)
        wa, wb = np.exp(la - shift), np.exp(lb - shift)
        total = wa + wb
        safe = np.where(total > 0, total, _F32(1))
        o = np.where(total[..., None] > 0, (wa[..., None] * oa + wb[..., None] * ob) / safe[..., None], _F32(0))
        o = np.where(np.isnan(total)[..., None], np.nan, o)
        lse = np.where(total > 0, shift + np.log(safe), -np.inf)
        lse = np.where(np.isnan(total), np.nan, lse).astype(_F32)
        if base2:
            lse = lse / _F32(np.log(2.0))
    return round_to(o, precision), lse.astype(np.float64)


# ---------------------------------------------------------------------------- rope

def rope(precision: str, x, positions, *, rotary_dim=None, base=None, style="neox", scaling=None,
         attention_factor="cos_sin", mscale_keys="transformers") -> NDArray[np.float64]:
    """`apply_rope` at `precision` (values returned as float64): the worse of the two
    float32 frequency computations (see the module docstring)."""
    options = dict(rotary_dim=rotary_dim, base=base, style=style, scaling=scaling, attention_factor=attention_factor,
                   mscale_keys=mscale_keys)
    exact = rotary.apply_rope(x, positions, **options)  # checks every argument
    if _precision(precision) == "float64":
        return exact
    xf, pos, r, style, attention_factor = rotary.prepare(x, positions, rotary_dim=rotary_dim, style=style,
                                                         attention_factor=attention_factor, scaling=scaling)
    tries = [_rope_once(precision, xf, pos, r, style, attention_factor, *rotary.rope_frequencies(
        r, base=base, scaling=scaling, dtype=dtype, mscale_keys=mscale_keys)) for dtype in ("float64", "float32")]
    errors = [np.max(np.abs(t - exact), initial=0.0, where=np.isfinite(exact)) for t in tries]
    return tries[int(np.argmax(errors))]


def _rope_once(precision, xf, pos, r, style, attention_factor, inv_freq, factor):
    """One evaluation of the rotation at `precision`, given the frequencies."""
    def f32(v):
        return round_to(v, "float32")

    def low(v):  # a tensor stored at P, from float32 registers (no-op after f32 at float32)
        return round_to(f32(v), precision)

    # 1. the angle, cos and sin in float32 (times the attention factor under "cos_sin"), stored at P
    theta = f32(f32(pos.astype(np.float64))[..., None] * f32(inv_freq))  # [*S, r/2]
    cos, sin = f32(np.cos(theta))[..., None, :], f32(np.sin(theta))[..., None, :]  # [*S, 1, r/2]
    if attention_factor is rotary.AttentionFactor.COS_SIN:
        cos, sin = f32(cos * f32(factor)), f32(sin * f32(factor))
    cos, sin = low(cos), low(sin)
    # 2. each product, then the difference or sum, stored at P (no FMA). float64 holds the
    #    product of two float32 values exactly, and a float64 sum of two float32 values
    #    rounded to float32 is their float32 sum (53 >= 2 * 24 + 2 bits).
    xr = round_to(xf, precision)
    ia, ib = rotary.pair_dims(r, style)
    a, b = xr[..., ia], xr[..., ib]
    out = xr.copy()
    with np.errstate(invalid="ignore"):
        out[..., ia] = low(low(a * cos) - low(b * sin))
        out[..., ib] = low(low(b * cos) + low(a * sin))
    return out


# ---------------------------------------------------------------------------- mla

def mla(precision: str, q_nope, q_pe, c_kv, k_pe, w_kv_b, *, causal=False, scale=None, rope_base=None,
        rope_scaling=None, rope_style="gptj") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`mla_naive` at `precision`: the worst of the naive and absorbed forms under every
    rounding of `ROUNDINGS`."""
    return mla_rounded(precision, ROUNDINGS, q_nope, q_pe, c_kv, k_pe, w_kv_b, causal=causal, scale=scale,
                       rope_base=rope_base, rope_scaling=rope_scaling, rope_style=rope_style)


def mla_rounded(precision: str, roundings, q_nope, q_pe, c_kv, k_pe, w_kv_b, *, causal=False, scale=None,
                rope_base=None, rope_scaling=None, rope_style="gptj"):
    """`mla` with the roundings narrowed to `roundings` (tests show what
    round-to-nearest alone would judge)."""
    exact = latent.mla_naive(q_nope, q_pe, c_kv, k_pe, w_kv_b, causal=causal, scale=scale, rope_base=rope_base,
                             rope_scaling=rope_scaling, rope_style=rope_style)  # checks every argument
    if precision == "float64":
        return exact
    q_nope, q_pe, c_kv, k_pe = (np.asarray(x) for x in (q_nope, q_pe, c_kv, k_pe))
    lq, lk = q_nope.shape[1], c_kv.shape[1]
    # 1. RoPE at P on the rope parts (query i at position i + Lk - Lq, key j at j)
    rope_opts = dict(base=rope_base, style=rope_style, scaling=rope_scaling, attention_factor="none")
    q_rot = rope(precision, q_pe, np.arange(lq) + (lk - lq), **rope_opts)  # [B, Lq, H, dr]
    k_rot = rope(precision, k_pe[:, :, None], np.arange(lk), **rope_opts)  # [B, Lk, 1, dr]
    if scale is None:
        scale = latent.deepseek_softmax_scale(q_nope.shape[3] + q_pe.shape[3], rope_scaling)
    forms = [form for rounding in roundings
             for form in _mla_forms(precision, rounding, q_nope, q_rot, c_kv, k_rot, w_kv_b, scale=scale, causal=causal)]
    return worse(exact, *forms)


def _mla_forms(precision, rounding, q_nope, q_rot, c_kv, k_rot, w_kv_b, *, scale, causal):
    """The naive and absorbed forms at `precision` under one rounding, from the
    rotated RoPE parts."""
    rnd = rounder(precision, rounding)
    qn, ckv, w = rnd(q_nope), rnd(c_kv), rnd(w_kv_b)
    b, lq, h, dn = qn.shape
    lk, dr = ckv.shape[1], q_rot.shape[3]
    w_uk, w_uv = (x.astype(_F32) for x in latent.split_kv_b(w, h, dn))  # [H, dn, r], [H, dv, r]
    c32 = ckv.astype(_F32)
    # 2. naive: K and V up-projected per head, stored at P, then attention at P
    k_nope = rnd(np.einsum("blr,hdr->blhd", c32, w_uk))  # [B, Lk, H, dn]
    v = rnd(np.einsum("blr,hvr->blhv", c32, w_uv))  # [B, Lk, H, dv]
    k = np.concatenate([k_nope, np.broadcast_to(k_rot, (b, lk, h, dr))], axis=-1)
    naive = attend_rounded(precision, rounding, np.concatenate([qn, q_rot], -1), k, v, scale=scale,
                                   causal=causal)
    # 3. absorbed: the latent query stored at P, MQA over the latent, W_UV after
    q_lat = rnd(np.einsum("bqhd,hdr->bqhr", qn.astype(_F32), w_uk))  # [B, Lq, H, r]
    kv = np.concatenate([ckv[:, :, None], k_rot], axis=-1)  # [B, Lk, 1, r + dr]
    o_lat, lse = attend_rounded(precision, rounding, np.concatenate([q_lat, q_rot], -1), kv,
                                        ckv[:, :, None], scale=scale, causal=causal)
    absorbed = (rnd(np.einsum("bqhr,hvr->bqhv", o_lat.astype(_F32), w_uv)), lse)
    return naive, absorbed

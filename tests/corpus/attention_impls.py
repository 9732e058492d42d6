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

from ref.attention.flash import attend_tiled
from ref.attention.split_kv import attend_split
from ref.attention.rope import rope_frequencies, yarn_mscale
from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation
from ref.formats.minifloat import round_to

ACCEPTED_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32, "float64": np.float64}


def lowp(x, precision):
    return round_to(np.asarray(x, np.float64), precision).astype(np.float32)


def _running_sum(terms, precision):
    """Sum over the last axis but one, key by key, every partial sum stored at
    `precision` (an accumulator register of that type)."""
    acc = np.zeros(terms.shape[:-2] + terms.shape[-1:], np.float32)
    for j in range(terms.shape[-2]):
        acc = lowp(acc + terms[..., j, :], precision)
    return acc


def validate_qkv(q, k, v, sinks, mask, causal, window_right, softcap):
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
    validate_qkv(q, k, v, sinks, mask, causal, window_right, softcap)
    q, k, v = (lowp(x, precision) for x in (q, k, v))
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
                m_keys = mx
                if sink is not None and not {"no max subtraction", "sink shifted by the key maximum"} & bugs:
                    mx = np.maximum(mx, sink)
                shift = np.where(np.isinf(mx) & (mx < 0) & ("empty row NaN" not in bugs), 0, mx).astype(np.float32)
                e = np.where(vis, np.exp(s - shift[:, None]), 0).astype(np.float32)
                keys = e.sum(axis=1)
                if "denominator in bfloat16" in bugs:
                    keys = _running_sum(e[:, :, None], "bfloat16")[:, 0]
                z = keys.copy()
                if sink is not None and "sink not in normalizer" not in bugs:
                    z = z + np.exp(sink - shift)
                p = e if precision == "float32" else lowp(e, precision)
                o = p @ v[b, :, kv]
                if "P.V in float16" in bugs:
                    o = _running_sum(p[:, :, None] * v[b, None, :, kv], "float16")
                if "empty row NaN" in bugs:
                    o = o / z[:, None]
                elif "empty row uniform" in bugs:
                    mean = v[b, :, kv].mean(axis=0) if lk else np.zeros(dv, np.float32)
                    o = np.where(z[:, None] == 0, mean, o / np.where(z == 0, 1, z)[:, None])
                else:
                    o = np.where(z[:, None] == 0, 0, o / np.where(z == 0, 1, z)[:, None])
                out[b, :, h] = o
                with_sink = sink_in_lse == "included" and "sink excluded from the LSE" not in bugs
                if "sink LSE swapped" in bugs:
                    with_sink = not with_sink
                total = z if (sink is not None and with_sink) else keys
                if sink is not None and not with_sink and "keys' LSE under the sink's shift" not in bugs:
                    # the keys alone, shifted by their own maximum: a dominant sink (exp(s - 100))
                    # would underflow them
                    shift = np.where(np.isneginf(m_keys), 0, m_keys).astype(np.float32)
                    total = np.where(vis, np.exp(s - shift[:, None]), 0).astype(np.float32).sum(axis=1)
                lse[b, h] = np.where(total == 0, -np.inf, shift + np.log(np.where(total == 0, 1, total)))
    return round_to(out, precision).astype(ACCEPTED_DTYPES[precision]), lse


def hf_eager(q, k, v, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
             sink_tokens=0, softcap=0.0, sink_in_lse="included", *, precision="bfloat16"):
    """Hugging Face's eager attention in the activation dtype: scores = matmul(q, k^T)
    stored, times the scale stored, soft-capping step by step in the dtype, softmax
    in float32 (the sink logit as one more column, dropped after), the normalized
    probabilities cast to the dtype, matmul with V. The LSE, which eager attention
    does not return, is the float32 log-sum-exp of the stored scores."""
    validate_qkv(q, k, v, sinks, mask, causal, window_right, softcap)
    low = lambda x: lowp(x, precision)  # noqa: E731
    q, k, v = low(q), low(k), low(v)
    b_, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    scale = np.float32(1 / math.sqrt(d) if scale is None else scale)
    kk = np.repeat(k, hq // hkv, axis=2).transpose(0, 2, 3, 1)  # [B, Hq, D, Lk]
    vv = np.repeat(v, hq // hkv, axis=2).transpose(0, 2, 1, 3)  # [B, Hq, Lk, Dv]
    s = low(low(q.transpose(0, 2, 1, 3) @ kk) * scale)
    if softcap > 0:
        cap = np.float32(softcap)
        s = low(low(np.tanh(low(s / cap))) * cap)
    i, j = np.arange(lq)[:, None] + lk - lq, np.arange(lk)[None, :]
    see = np.ones((lq, lk), bool)
    if causal:
        see &= j <= i
    if window_right >= 0:
        see &= j <= i + window_right
    if window_left >= 0:
        see &= (j >= i - window_left) | (j < sink_tokens)
    if mask is not None:
        see = see & np.asarray(mask)
    s = np.where(see, s, np.float32(-np.inf))
    cols = [s] if sinks is None else [s, np.broadcast_to(low(sinks)[None, :, None, None], (*s.shape[:3], 1))]
    full = np.concatenate(cols, axis=-1).astype(np.float32)
    with np.errstate(all="ignore"):
        m = full.max(axis=-1, keepdims=True, initial=-np.inf)
        e = np.exp(full - np.where(np.isneginf(m), 0, m))
        z = e.sum(axis=-1, keepdims=True)
        p = np.where(z == 0, 0, e / np.where(z == 0, 1, z))[..., :lk]
        m_k = s.max(axis=-1, keepdims=True, initial=-np.inf)
        z_k = np.exp(s - np.where(np.isneginf(m_k), 0, m_k)).sum(axis=-1, keepdims=True)
        lse_k = np.where(z_k == 0, -np.inf, m_k + np.log(np.where(z_k == 0, 1, z_k)))[..., 0]
        lse = np.logaddexp(lse_k, low(sinks)[None, :, None]) if sinks is not None and sink_in_lse == "included" \
            else lse_k
    out = low(low(p) @ vv).transpose(0, 2, 1, 3)
    return round_to(out, precision).astype(ACCEPTED_DTYPES[precision]), lse.astype(np.float32)


def naive_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, *, bugs=frozenset(), precision="float32",
                 **options):
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    if cq.dtype.kind not in "iu" or cq[0] != 0 or ck[0] != 0 or np.any(np.diff(cq) < 0) or np.any(np.diff(ck) < 0):
        raise ValueError("bad offsets")
    if cq[-1] != q.shape[0] or ck[-1] != k.shape[0]:
        raise ValueError("offsets do not match the packed lengths")
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), ACCEPTED_DTYPES[precision])
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
    oa, ob = lowp(o_a, precision), lowp(o_b, precision)
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
    return round_to(o, precision).astype(ACCEPTED_DTYPES[precision]), lse.astype(np.float32)


def naive_rope(x, positions, rotary_dim=None, base=None, style="neox", scaling=None, attention_factor="cos_sin",
               mscale_keys="transformers", *, bugs=frozenset(), precision="float32"):
    """RoPE as a float32 kernel: angles in float32, each pair rotated by index
    arithmetic; frequencies from the config (`rope_frequencies`)."""
    x = np.asarray(x)
    pos = np.asarray(positions)
    if x.dtype.kind != "f" or pos.dtype.kind not in "iu":
        raise TypeError("x float, positions integers")
    d = x.shape[-1]
    fraction = (scaling or {}).get("partial_rotary_factor")
    r = rotary_dim if rotary_dim is not None else d if fraction is None else int(d * fraction)
    if r % 2 or r > d or r < 0 or (pos.size and pos.min() < 0):
        raise ValueError("bad rotary_dim or positions")
    theta = (scaling or {}).get("rope_theta")
    if base is not None and theta is not None and base != theta:
        raise ValueError("base and rope_theta disagree")
    if "mscale keys swapped" in bugs:
        mscale_keys = {"transformers": "vllm_deepseek", "vllm_deepseek": "transformers"}[mscale_keys]
    frequencies = dict(base=base, scaling=scaling, mscale_keys=mscale_keys)
    pos = np.broadcast_to(pos, x.shape[:-2])
    xs = lowp(x, precision)
    if "exponent over the head dim" in bugs and r != d:
        inv_full, factor = rope_frequencies(d, **frequencies)
        inv = inv_full[: r // 2]
    else:
        inv, factor = rope_frequencies(r, **frequencies)
    if "positions ignored" in bugs:
        pos = np.broadcast_to(np.arange(pos.shape[-1]) if pos.ndim else pos, pos.shape)
    angle = pos[..., None].astype(np.float32) * inv.astype(np.float32)
    if "angles in bfloat16" in bugs:
        angle = lowp(angle, "bfloat16")
    cos, sin = np.cos(angle)[..., None, :], np.sin(angle)[..., None, :]
    if attention_factor == "cos_sin" and "attention factor dropped" not in bugs:
        cos, sin = cos * np.float32(factor), sin * np.float32(factor)
    pairing = style if "pairing swapped" not in bugs else {"neox": "gptj", "gptj": "neox"}[style]
    half = r // 2
    ia = np.arange(half) if pairing == "neox" else 2 * np.arange(half)
    ib = ia + half if pairing == "neox" else ia + 1
    a, b = xs[..., ia], xs[..., ib]
    sign = np.float32(-1 if "rotation reversed" in bugs else 1)
    out = xs.copy()
    out[..., ia] = a * cos - sign * b * sin
    out[..., ib] = b * cos + sign * a * sin
    return round_to(out, precision).astype(ACCEPTED_DTYPES[precision])


def hf_rope_bf16(x, positions, rotary_dim=None, base=None, style="neox", scaling=None, attention_factor="cos_sin",
                 mscale_keys="transformers"):
    """Hugging Face's eager path at bfloat16: cos and sin cast to bfloat16, then
    x * cos + rotate_half(x) * sin in bfloat16 arithmetic (every product and sum rounded)."""
    if style != "neox":
        raise NotImplementedError("rotate-half only")
    x = np.asarray(x)
    pos = np.broadcast_to(np.asarray(positions), x.shape[:-2])
    d = x.shape[-1]
    fraction = (scaling or {}).get("partial_rotary_factor")
    r = rotary_dim if rotary_dim is not None else d if fraction is None else int(d * fraction)
    if r % 2 or r > d or (pos.size and pos.min() < 0) or np.asarray(positions).dtype.kind not in "iu":
        raise ValueError("bad arguments")
    bf = lambda v: round_to(v, "bfloat16")  # noqa: E731
    inv, factor = rope_frequencies(r, base=base, scaling=scaling, mscale_keys=mscale_keys)
    emb = np.concatenate([inv, inv]).astype(np.float32)
    angle = pos[..., None].astype(np.float32) * emb
    cos, sin = np.cos(angle), np.sin(angle)
    if attention_factor == "cos_sin":
        cos, sin = cos * np.float32(factor), sin * np.float32(factor)
    cos, sin = bf(cos)[..., None, :], bf(sin)[..., None, :]
    xr = bf(x[..., :r])
    rot = np.concatenate([-xr[..., r // 2:], xr[..., : r // 2]], axis=-1)
    out = np.asarray(x, np.float64).copy()
    out[..., :r] = bf(bf(xr * cos) + bf(rot * sin))
    return out.astype(ml_dtypes.bfloat16)


def naive_mla(q_nope, q_pe, c_kv, k_pe, w_kv_b, causal=False, scale=None, rope_base=None, rope_scaling=None,
              rope_style="gptj", *, bugs=frozenset(), precision="float32"):
    """The absorbed form, as FlashMLA-style serving runs it: query projected into the
    latent, one shared KV head of [latent, rotated rope part], values the latent,
    W_UV applied to the output. Intermediates stored at `precision`."""
    b, lq, h, dn = q_nope.shape
    lk, r = c_kv.shape[1], c_kv.shape[2]
    dr = q_pe.shape[3]
    if lq > lk or dr % 2 or w_kv_b.shape[1] != r or w_kv_b.shape[0] % h:
        raise ValueError("bad MLA shapes")
    dv = w_kv_b.shape[0] // h - dn
    w = lowp(w_kv_b, precision).reshape(h, dn + dv, r)
    w_uk, w_uv = (w[:, dv:], w[:, :dv]) if "value rows first" in bugs else (w[:, :dn], w[:, dn:])
    if "W_UK transposed" in bugs:
        q_lat = np.einsum("bqhd,hrd->bqhr", lowp(q_nope, precision), w_uk)
    else:
        q_lat = np.einsum("bqhd,hdr->bqhr", lowp(q_nope, precision), w_uk)
    q_lat = lowp(q_lat, precision)
    rope = dict(base=rope_base, style=rope_style, scaling=rope_scaling, attention_factor="none",
                precision=precision)
    q_rot = np.asarray(naive_rope(q_pe, np.arange(lq) + lk - lq, **rope), np.float32)
    if "RoPE on the latent" in bugs:  # the whole cache entry rotated, latent included
        entry = np.concatenate([c_kv, k_pe], axis=-1)[:, :, None]
        kv = np.asarray(naive_rope(entry, np.arange(lk), **rope), np.float32)
    else:
        k_rot = np.asarray(naive_rope(k_pe[:, :, None], np.arange(lk), **rope), np.float32)
        kv = np.concatenate([lowp(c_kv, precision)[:, :, None], k_rot], axis=-1)
    if scale is None:
        m = 1.0
        if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) == "yarn":
            m = yarn_mscale(rope_scaling["factor"], rope_scaling.get("mscale_all_dim") or 0.0) \
                if rope_scaling.get("mscale_all_dim") else 1.0
        width = r + dr if "scale over the latent width" in bugs else dn + dr
        scale = width**-0.5 * (m if "mscale once" in bugs else m * m)
    o_lat, lse = naive(np.concatenate([q_lat, q_rot], -1), kv, lowp(c_kv, precision)[:, :, None], scale=scale,
                       causal=causal, precision=precision)
    out = np.einsum("bqhr,hvr->bqhv", np.asarray(o_lat, np.float32), w_uv)
    return round_to(out, precision).astype(ACCEPTED_DTYPES[precision]), lse


ALL = {"sink_in_lse": ["included", "excluded"]}


def naive_impl(precision="float32", bugs=frozenset(), name=None):
    bugs = frozenset(bugs)
    return Implementation(
        name or f"naive {precision}" + (f" with {', '.join(sorted(bugs))}" if bugs else ""),
        {"attention.attend": lambda **kw: naive(**kw, bugs=bugs, precision=precision),
         "attention.attend_varlen": lambda **kw: naive_varlen(**kw, bugs=bugs, precision=precision),
         "attention.merge_states": lambda **kw: naive_merge(**kw, bugs=bugs, precision=precision),
         "attention.rope": lambda **kw: naive_rope(**kw, bugs=bugs, precision=precision),
         "attention.mla": lambda **kw: naive_mla(**kw, bugs=bugs, precision=precision)},
        variants={"attention.attend*": ALL, "attention.rope": {"style": ["neox", "gptj"],
                                                              "attention_factor": ["cos_sin", "none"],
                                                              "mscale_keys": ["transformers", "vllm_deepseek"]},
                  "attention.mla": {"rope_style": ["gptj", "neox"]}})


def tiled_impl(precision, block_q, block_k):
    def attend(**kw):
        o, lse = attend_tiled(**kw, block_q=block_q, block_k=block_k, precision=precision)
        return o.astype(ACCEPTED_DTYPES[precision]), lse.astype(np.float32 if precision != "float64" else np.float64)

    return Implementation(f"tiled {precision} {block_q}x{block_k}", {"attention.attend": attend},
                          variants={"attention.attend": ALL})


def split_impl(splits):
    return Implementation(f"split-KV float64, {splits} splits",
                          {"attention.attend": lambda **kw: attend_split(**kw, splits=splits)},
                          variants={"attention.attend": ALL})


# name -> (bugs switched on, precision, the flag of a vector that must catch it, the op it breaks)
BUGS = {
    "top-left causal alignment": ({"top-left causal"}, "bfloat16", "CausalAlignment", "attention.attend"),
    "softmax without the row maximum": ({"no max subtraction"}, "bfloat16", "LargeLogits", "attention.attend"),
    "GQA mapped interleaved": ({"GQA interleaved"}, "bfloat16", "GroupMapping", "attention.attend"),
    "scale 1/D": ({"scale 1/d"}, "bfloat16", "Scale", "attention.attend"),
    "soft-cap after masking": ({"softcap after mask"}, "bfloat16", "Softcap", "attention.attend"),
    "sink in the LSE swapped": ({"sink LSE swapped"}, "float32", "SinkInLse", "attention.attend"),
    "sink excluded from the LSE": ({"sink excluded from the LSE"}, "float32", "SinkInLse", "attention.attend"),
    "keys' LSE under the sink's shift":
        ({"keys' LSE under the sink's shift"}, "float32", "SinkInLse", "attention.attend"),
    "sink shifted by the key maximum":
        ({"sink shifted by the key maximum"}, "float32", "LearnableSink", "attention.attend"),
    "softmax denominator accumulated in bfloat16":
        ({"denominator in bfloat16"}, "bfloat16", "Accumulation", "attention.attend"),
    "P.V accumulated in float16": ({"P.V in float16"}, "float16", "Accumulation", "attention.attend"),
    "sink logit scaled": ({"sink scaled"}, "bfloat16", "LearnableSink", "attention.attend"),
    "sink left out of the normalizer": ({"sink not in normalizer"}, "bfloat16", "LearnableSink", "attention.attend"),
    "window one key too wide": ({"window one key too wide"}, "bfloat16", "Window", "attention.attend"),
    "sink tokens exempt from causality":
        ({"sink tokens ignore causality"}, "bfloat16", "SinkTokens", "attention.attend"),
    "empty row divides 0 by 0": ({"empty row NaN"}, "bfloat16", "EmptyRow", "attention.attend"),
    "empty row gets the mean of V": ({"empty row uniform"}, "bfloat16", "EmptyRow", "attention.attend"),
    "per-head mask applied to the wrong heads":
        ({"mask heads reversed"}, "bfloat16", "ExplicitMask", "attention.attend"),
    "one maximum for the whole tile": ({"global max"}, "float32", "NaN", "attention.attend"),
    "varlen keys from the batch start":
        ({"keys from the batch start"}, "bfloat16", "Varlen", "attention.attend_varlen"),
    "merge without the max shift": ({"merge without max shift"}, "bfloat16", "MergeShift", "attention.merge_states"),
    "empty partial merged to NaN": ({"empty partial NaN"}, "bfloat16", "EmptyPartial", "attention.merge_states"),
    "RoPE pairing swapped": ({"pairing swapped"}, "bfloat16", "RopePairing", "attention.rope"),
    "RoPE rotating the other way": ({"rotation reversed"}, "bfloat16", "RopePairing", "attention.rope"),
    "RoPE exponent over the head dim":
        ({"exponent over the head dim"}, "bfloat16", "RopeFrequencies", "attention.rope"),
    "RoPE positions ignored": ({"positions ignored"}, "bfloat16", "RopePositions", "attention.rope"),
    "RoPE angles in bfloat16": ({"angles in bfloat16"}, "float32", "RopePositions", "attention.rope"),
    "YaRN attention factor dropped": ({"attention factor dropped"}, "bfloat16", "RopeScaling", "attention.rope"),
    "YaRN mscale keys read as the other engine does":
        ({"mscale keys swapped"}, "bfloat16", "MscaleKeys", "attention.rope"),
    "MLA absorbed with W_UK transposed": ({"W_UK transposed"}, "bfloat16", "MlaWeights", "attention.mla"),
    "MLA value rows taken first": ({"value rows first"}, "bfloat16", "MlaWeights", "attention.mla"),
    "RoPE applied to the latent": ({"RoPE on the latent"}, "bfloat16", "MlaRope", "attention.mla"),
    "MLA scale over the 576-d width": ({"scale over the latent width"}, "bfloat16", "MlaScale", "attention.mla"),
    "MLA mscale applied once": ({"mscale once"}, "bfloat16", "MlaScale", "attention.mla"),
}

CORRECT = {
    "naive float32": lambda: naive_impl("float32"),
    "naive bfloat16": lambda: naive_impl("bfloat16"),
    "naive float16": lambda: naive_impl("float16"),
    "tiled bfloat16 16x16": lambda: tiled_impl("bfloat16", 16, 16),
    "tiled bfloat16 3x5": lambda: tiled_impl("bfloat16", 3, 5),
    "tiled float16 8x4": lambda: tiled_impl("float16", 8, 4),
    "tiled float32 2x64": lambda: tiled_impl("float32", 2, 64),
    "the oracles themselves (float64)": lambda: Implementation(
        "oracles", {name: op.oracle for name, op in discover().items() if name.startswith("attention.")},
        variants={name: op.variant_values for name, op in discover().items() if name.startswith("attention.")}),
    "split-KV 1": lambda: split_impl(1),
    "split-KV 3": lambda: split_impl(3),
    "split-KV 7": lambda: split_impl(7),
    "Hugging Face eager attention at bfloat16": lambda: Implementation(
        "HF eager bf16", {"attention.attend": lambda **kw: hf_eager(**kw, precision="bfloat16")},
        variants={"attention.attend": ALL}),
    "Hugging Face eager attention at float16": lambda: Implementation(
        "HF eager fp16", {"attention.attend": lambda **kw: hf_eager(**kw, precision="float16")},
        variants={"attention.attend": ALL}),
    "Hugging Face RoPE at bfloat16": lambda: Implementation(
        "HF eager RoPE bf16", {"attention.rope": hf_rope_bf16},
        variants={"attention.rope": {"style": ["neox"], "attention_factor": ["cos_sin", "none"]}}),
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

"""A float32 NumPy attention kernel set, bundled so that `python -m ref conform` judges
the bounded attention ops too. Written for this purpose, independently of the oracles
in ref.attention (it imports nothing from them), as an engine would write it:

  attend          FlashAttention-2's online softmax in float32: per batch and KV head,
                  the G query heads' rows together, keys in blocks of 64, a running
                  maximum, sum and unnormalized output; scores scaled after the
                  product; a learnable sink joins the normalizer at the end
  attend_varlen   attend per packed sequence
  merge_states    the logistic form of the merge weights: sigma(lse_a - lse_b)
  rope            frequencies and angles in float64, cos and sin rounded to float32,
                  the rotation in float32
  mla             the absorbed form: the query meets the latent cache through W_UK,
                  MQA by the kernel above, W_UV after

Each rounds differently from the float64 oracle and from the same-precision
yardstick of the bounded rule (other loop orders, other formulas), which is the
point: the report shows how much of the tolerance a correct float32 kernel uses.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

NAME = "NumPy float32 attention kernels (online softmax)"
VERSION = np.__version__

_F32 = np.float32
_BLOCK = 64
_FLOATS = ("float16", "bfloat16", "float32", "float64")


# ---------------------------------------------------------------------------- argument checks

def _array(x, name, ndim):
    x = np.asarray(x)
    if x.dtype.name not in _FLOATS:
        raise TypeError(f"{name}: expected a float array, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {x.shape}")
    return x.astype(_F32)


def _int(value, name, minimum):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _number(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------- attend

def _visibility(mask, b, hq, lq, lk, causal, left, right, sink_tokens):
    """[B|1, Hq|1, Lq, Lk] bool: query i at key position i + Lk - Lq (bottom-right)."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected a bool, got {causal!r}")
    if causal and right > 0:
        raise ValueError("causal, window_right: a causal window has right edge 0")
    row = np.arange(lq)[:, None] + (lk - lq)
    col = np.arange(lk)[None, :]
    ok = np.ones((lq, lk), bool)
    if causal:
        ok &= col <= row
    if right >= 0:
        ok &= col <= row + right
    if left >= 0:
        ok &= (col >= row - left) | (col < sink_tokens)
    ok = ok[None, None]
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask: expected bool, got {mask.dtype}")
        if mask.ndim == 2:
            mask = mask[None, None]
        if mask.ndim != 4 or mask.shape[2:] != (lq, lk) or mask.shape[0] not in (1, b) \
                or mask.shape[1] not in (1, hq):
            raise ValueError(f"mask: shape {mask.shape} does not fit [B, Hq, Lq, Lk] = {(b, hq, lq, lk)}")
        ok = ok & mask
    return ok


def _attend(q, k, v, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
            sink_tokens=0, softcap=0.0, sink_in_lse="included"):
    q, k, v = _array(q, "q", 4), _array(k, "k", 4), _array(v, "v", 4)
    b, lq, hq, d = q.shape
    lk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    if k.shape[0] != b or v.shape[:3] != k.shape[:3] or k.shape[3] != d:
        raise ValueError(f"q, k, v: shapes {q.shape}, {k.shape}, {v.shape} do not fit [B, L, H, D]")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"k: {hkv} KV heads do not divide {hq} query heads")
    if sinks is not None:
        sinks = _array(sinks, "sinks", 1)
        if sinks.shape != (hq,):
            raise ValueError(f"sinks: expected shape ({hq},), got {sinks.shape}")
    scale = _F32(1 / math.sqrt(d) if scale is None else _number(scale, "scale"))
    cap = _number(softcap, "softcap")
    if cap < 0:
        raise ValueError(f"softcap: expected >= 0, got {cap}")
    if sink_in_lse not in ("included", "excluded"):
        raise ValueError(f"sink_in_lse: expected 'included' or 'excluded', got {sink_in_lse!r}")
    left, right = _int(window_left, "window_left", -1), _int(window_right, "window_right", -1)
    visible = _visibility(mask, b, hq, lq, lk, causal, left, right, _int(sink_tokens, "sink_tokens", 0))
    g = hq // hkv
    out = np.zeros((b, lq, hq, dv), _F32)
    lse = np.zeros((b, hq, lq), _F32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for bi in range(b):
            for n in range(hkv):
                heads = slice(n * g, (n + 1) * g)  # the query heads reading KV head n
                rows = q[bi, :, heads].transpose(1, 0, 2).reshape(g * lq, d)  # head-major rows
                vis = np.broadcast_to(visible[min(bi, visible.shape[0] - 1)], (hq, lq, lk))[heads]
                sink = None if sinks is None else np.repeat(sinks[heads], lq)  # per row
                o, (m, l), (mk, lk_) = _online_softmax(rows, k[bi, :, n], v[bi, :, n], vis.reshape(g * lq, lk),
                                                       scale, cap, sink)
                o = o / np.where(l > 0, l, 1)[:, None]
                if sink is None or sink_in_lse == "excluded":
                    m, l = mk, lk_
                row_lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf).astype(_F32)
                row_lse = np.where(np.isnan(m) | np.isnan(l), np.nan, row_lse)
                out[bi, :, heads] = o.reshape(g, lq, dv).transpose(1, 0, 2)
                lse[bi, heads] = row_lse.reshape(g, lq)
    return out, lse


def _online_softmax(rows, keys, values, vis, scale, cap, sink):
    """rows [R, D] against keys [Lk, D], values [Lk, Dv] in blocks of keys, float32.
    Returns the unnormalized output [R, Dv], the running (maximum, sum) with the sink
    [R] (which starts each row at m = sink, l = 1) and the same of the keys alone."""
    r, dv = rows.shape[0], values.shape[1]
    mk = np.full(r, -np.inf, _F32)  # the keys alone
    lk = np.zeros(r, _F32)
    m = mk.copy() if sink is None else sink.astype(_F32)  # with the sink
    l = lk.copy() if sink is None else np.ones(r, _F32)
    acc = np.zeros((r, dv), _F32)
    for c in range(0, keys.shape[0], _BLOCK):
        kb, vb, ok = keys[c:c + _BLOCK], values[c:c + _BLOCK], vis[:, c:c + _BLOCK]
        s = (rows @ kb.T) * scale  # [R, block]
        if cap > 0:
            s = _F32(cap) * np.tanh(s / _F32(cap))
        s = np.where(ok, s, _F32(-np.inf))
        block_max = s.max(axis=1)
        m_new = np.maximum(m, block_max)
        base = np.where(m_new == -np.inf, _F32(0), m_new)
        alpha = np.exp(m - base)  # rescales what was summed so far
        p = np.exp(s - base[:, None])  # 0 at keys a row does not see
        if np.isfinite(vb).all():
            pv = p @ vb
        else:  # a NaN or Inf value reaches only the rows that see its key
            pv = np.where(ok[:, :, None], p[:, :, None] * vb[None], _F32(0)).sum(axis=1, dtype=_F32)
        l = alpha * l + p.sum(axis=1, dtype=_F32)
        acc = alpha[:, None] * acc + pv
        m = m_new
        if sink is not None:  # the keys' own running state, for an LSE without the sink
            mk_new = np.maximum(mk, block_max)
            base_k = np.where(mk_new == -np.inf, _F32(0), mk_new)
            lk = np.exp(mk - base_k) * lk + np.exp(s - base_k[:, None]).sum(axis=1, dtype=_F32)
            mk = mk_new
    return acc, (m, l), ((m, l) if sink is None else (mk, lk))


def _attend_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, **options):
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    if cq.dtype.kind not in "iu" or ck.dtype.kind not in "iu":
        raise TypeError("cu_seqlens_q, cu_seqlens_k: expected integer offsets")
    q, k, v = _array(q, "q", 3), _array(k, "k", 3), _array(v, "v", 3)
    if cq.ndim != 1 or cq.shape != ck.shape or cq[0] != 0 or ck[0] != 0 or np.any(np.diff(cq) < 0) \
            or np.any(np.diff(ck) < 0) or cq[-1] != len(q) or ck[-1] != len(k):
        raise ValueError("cu_seqlens_q, cu_seqlens_k: expected offsets from 0 to the packed lengths")
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), _F32)
    lse = np.zeros((q.shape[1], q.shape[0]), _F32)
    for s in range(cq.size - 1):
        rows, keys = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        o, l = _attend(q[None, rows], k[None, keys], v[None, keys], sinks=sinks, **options)
        out[rows], lse[:, rows] = o[0], l[0]
    return out, lse


# ---------------------------------------------------------------------------- merge_states

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


# ---------------------------------------------------------------------------- rope

def _yarn_mscale(factor, mscale=1.0):
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _frequencies(r, base, cfg, mscale_keys):
    """inv_freq [r/2] (float64) and the attention factor, by the rope_type of `cfg`."""
    kind = cfg.get("rope_type", cfg.get("type", "default"))
    inv = 1.0 / base ** (np.arange(0, r, 2) / r)
    if kind == "default":
        return inv, 1.0
    factor = float(cfg["factor"])
    if kind == "linear":
        return inv / factor, 1.0
    orig = float(cfg["original_max_position_embeddings"])
    if kind == "llama3":
        low, high = float(cfg["low_freq_factor"]), float(cfg["high_freq_factor"])
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / factor + smooth * inv
        return np.where(wavelen < orig / high, inv, np.where(wavelen > orig / low, inv / factor, mid)), 1.0
    if kind != "yarn":
        raise ValueError(f"scaling: unknown rope_type {kind!r}")

    def turns_dim(turns):  # the pair index that turns `turns` times over the original context
        return r * math.log(orig / (turns * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = turns_dim(float(cfg.get("beta_fast", 32))), turns_dim(float(cfg.get("beta_slow", 1)))
    if cfg.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, r - 1)
    hi = hi + 0.001 if lo == hi else hi
    ramp = np.clip((np.arange(r // 2) - lo) / (hi - lo), 0, 1)  # 1: interpolated
    inv = inv / factor * ramp + inv * (1 - ramp)
    if mscale_keys == "vllm_deepseek":
        return inv, _yarn_mscale(factor, cfg.get("mscale", 1.0)) / _yarn_mscale(factor, cfg.get("mscale_all_dim", 0.0))
    if "attention_factor" in cfg:
        return inv, float(cfg["attention_factor"])
    if cfg.get("mscale") and cfg.get("mscale_all_dim"):
        return inv, _yarn_mscale(factor, cfg["mscale"]) / _yarn_mscale(factor, cfg["mscale_all_dim"])
    return inv, _yarn_mscale(factor)


def _rope(x, positions, rotary_dim=None, base=None, style="neox", scaling=None, attention_factor="cos_sin",
          mscale_keys="transformers"):
    x = np.asarray(x)
    pos = np.asarray(positions)
    if x.dtype.name not in _FLOATS or pos.dtype.kind not in "iu":
        raise TypeError("x: expected floats; positions: expected integers")
    if x.ndim < 2 or (pos.size and pos.min() < 0):
        raise ValueError("x, positions: expected x [*S, H, D] and positions >= 0")
    cfg = {key: val for key, val in (scaling or {}).items() if val is not None}
    theta = cfg.get("rope_theta")
    if base is not None and theta is not None and float(base) != float(theta):
        raise ValueError(f"base, rope_theta: {base} and {theta} disagree")
    base = float(base if base is not None else theta if theta is not None else 10000.0)
    d = x.shape[-1]
    fraction = cfg.get("partial_rotary_factor")
    r = rotary_dim if rotary_dim is not None else d if fraction is None else int(d * fraction)
    if isinstance(r, bool) or r < 0 or r > d or r % 2:
        raise ValueError(f"rotary_dim: expected an even number <= D = {d}, got {r}")
    pos = np.broadcast_to(pos, x.shape[:-2])
    inv_freq, factor = _frequencies(r, base, cfg, mscale_keys)
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


# ---------------------------------------------------------------------------- mla

def _mla(q_nope, q_pe, c_kv, k_pe, w_kv_b, causal=False, scale=None, rope_base=None, rope_scaling=None,
         rope_style="gptj"):
    """The absorbed form: the query meets the latent cache, W_UV comes after."""
    q_nope, q_pe = _array(q_nope, "q_nope", 4), _array(q_pe, "q_pe", 4)
    c_kv, k_pe, w = _array(c_kv, "c_kv", 3), _array(k_pe, "k_pe", 3), _array(w_kv_b, "w_kv_b", 2)
    b, lq, h, dn = q_nope.shape
    lk, r, dr = c_kv.shape[1], c_kv.shape[2], q_pe.shape[3]
    if lq > lk or dr == 0 or dr % 2 or q_pe.shape[:3] != (b, lq, h) or k_pe.shape != (b, lk, dr):
        raise ValueError("q_nope, q_pe, c_kv, k_pe: expected Lq <= Lk and an even rope dim shared by q_pe, k_pe")
    if w.shape[1] != r or w.shape[0] % h or w.shape[0] // h <= dn:
        raise ValueError(f"w_kv_b: expected [H * (dn + dv), r = {r}], got {w.shape}")
    per_head = w.reshape(h, w.shape[0] // h, r)
    w_uk, w_uv = per_head[:, :dn], per_head[:, dn:]  # [H, dn, r], [H, dv, r]
    rope = dict(base=rope_base, style=rope_style, scaling=rope_scaling, attention_factor="none")
    q_rot = _rope(q_pe, np.arange(lq) + (lk - lq), **rope)  # [B, Lq, H, dr]
    k_rot = _rope(k_pe[:, :, None], np.arange(lk), **rope)  # [B, Lk, 1, dr]
    q = np.concatenate([np.einsum("bqhd,hdr->bqhr", q_nope, w_uk), q_rot], axis=-1)  # [B, Lq, H, r + dr]
    kv = np.concatenate([c_kv[:, :, None], k_rot], axis=-1)  # [B, Lk, 1, r + dr]
    if scale is None:  # DeepSeek's: (dn + dr)^-1/2, times mscale^2 under YaRN
        scale = (dn + dr) ** -0.5
        cfg = rope_scaling or {}
        if cfg.get("rope_type", cfg.get("type")) == "yarn" and cfg.get("mscale_all_dim"):
            scale *= _yarn_mscale(float(cfg["factor"]), float(cfg["mscale_all_dim"])) ** 2
    o_lat, lse = _attend(q, kv, kv[..., :r], scale=scale, causal=causal)
    return np.einsum("bqhr,hvr->bqhv", o_lat, w_uv).astype(_F32), lse


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

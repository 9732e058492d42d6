"""Multi-head Latent Attention (MLA), DeepSeek-V2 (arXiv 2405.04434) and V3 (arXiv 2412.19437).

Per token j a layer caches one latent c_j (r = kv_lora_rank values, already RMS-normed)
and one RoPE key k^R_j (dr values, shared by all heads). Head h of query token i has a
position-free part q^C_{i,h} (dn values) and a RoPE part q^R_{i,h} (dr values). With the
per-head up-projections W^UK_h [dn, r] and W^UV_h [dv, r]:

    naive      k_{j,h} = [W^UK_h c_j ; R_j k^R_j]      v_{j,h} = W^UV_h c_j
               o_{i,h} = softmax_j(scale * [q^C_{i,h} ; R_i q^R_{i,h}] . k_{j,h}) v_{j,h}
    absorbed   (q^C)^T W^UK_h c = ((W^UK_h)^T q^C)^T c, so with q^L = (W^UK_h)^T q^C [r]:
               s_{ij,h} = scale * (q^L_{i,h} . c_j + R_i q^R_{i,h} . R_j k^R_j)
               o^L_{i,h} = softmax_j(s_{ij,h}) c_j,   o_{i,h} = W^UV_h o^L_{i,h}

R_p is the rotation of RoPE at position p (DeepSeek: interleaved pairs, "gptj"). The two
forms are the same function in exact arithmetic; the absorbed one is multi-query
attention over one KV "head" of r + dr key values and r value values, so a decode step
reads r + dr = 576 cached values per token instead of H * (dn + dr + dv).

Layout of w_kv_b (DeepSeek's `wkv_b`, HF's `kv_b_proj.weight`) [H * (dn + dv), r]: head h
owns rows h*(dn+dv) ... (h+1)*(dn+dv) - 1, its dn rows of W^UK_h first, then its dv rows
of W^UV_h (DeepSeek-V3 inference/model.py: `wkv_b.view(n_heads, -1, kv_lora_rank)`,
`[:, :qk_nope_head_dim]` and `[:, -v_head_dim:]`; vLLM splits it the same way).

Positions are aligned bottom-right, as in decode: key j sits at position j and query i
at i + Lk - Lq (so Lq <= Lk); `causal` masks keys after each query's position.
The default scale is DeepSeek's: 1/sqrt(dn + dr), times mscale^2 under YaRN
(`deepseek_softmax_scale`); RoPE's own attention factor is not applied to cos/sin.

FlashMLA's convention (`absorb_query`, `latent_cache`, `flashmla_attend`,
`unabsorb_output`): q [B, Lq, H, 576] = [q^L ; R q^R], cache [B, Lk, 1, 576] = [c ; R k^R],
and the value of key j is the first dv = 512 values of its cache entry (c_j).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import member
from ref.attention.attend import attend
from ref.attention.checks import floats
from ref.attention.rope import AttentionFactor, RopeStyle, apply_rope, yarn_mscale

__all__ = [
    "absorb_query",
    "deepseek_softmax_scale",
    "flashmla_attend",
    "kv_cache_values_per_token",
    "latent_cache",
    "mla_absorbed",
    "mla_naive",
    "split_kv_b",
    "unabsorb_output",
]



def _positive_int(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {value}")
    return int(value)


def _rope_type(scaling: Mapping | None) -> str | None:
    """HF configs spell it `rope_type`; DeepSeek's own config.json still says `type`."""
    if scaling is None:
        return None
    if not isinstance(scaling, Mapping):
        raise TypeError(f"rope_scaling: expected None or a dict, got {type(scaling).__name__}")
    return scaling.get("rope_type", scaling.get("type"))


def deepseek_softmax_scale(qk_head_dim: int, rope_scaling: Mapping | None = None) -> float:
    """DeepSeek's softmax scale: qk_head_dim^-1/2, times mscale^2 under YaRN.

    mscale = 0.1 * mscale_all_dim * ln(factor) + 1 when factor > 1, else 1 (DeepSeek-V3
    inference/model.py: `softmax_scale *= mscale ** 2`; HF modeling_deepseek reads
    `mscale_all_dim` and skips the factor when it is 0 or absent). qk_head_dim is
    dn + dr = 192 for V2/V3, not the 576 of the absorbed query. Scaling types other
    than "yarn" leave the scale alone. DeepSeek-V3 (factor 40, mscale_all_dim 1):
    192^-1/2 * 1.36889^2 = 0.135234.
    """
    d = _positive_int(qk_head_dim, "qk_head_dim")
    scale = d**-0.5
    if _rope_type(rope_scaling) == "yarn":
        factor = rope_scaling.get("factor")
        if isinstance(factor, bool) or not isinstance(factor, (int, float, np.integer, np.floating)) or not factor > 0:
            raise ValueError(f"rope_scaling: a yarn scaling needs a positive 'factor', got {factor!r}")
        mscale_all_dim = rope_scaling.get("mscale_all_dim")
        if mscale_all_dim is not None:  # a string or a negative value is refused, not read as a number
            if isinstance(mscale_all_dim, bool) or not isinstance(mscale_all_dim, (int, float, np.integer,
                                                                                  np.floating)):
                raise TypeError(f"mscale_all_dim: expected a number, got {type(mscale_all_dim).__name__} "
                                f"{mscale_all_dim!r}")
            if not mscale_all_dim >= 0:
                raise ValueError(f"mscale_all_dim: expected a number >= 0, got {mscale_all_dim}")
        if mscale_all_dim:
            scale *= yarn_mscale(float(factor), float(mscale_all_dim)) ** 2
    return scale


def split_kv_b(w_kv_b: ArrayLike, n_heads: int, qk_nope_head_dim: int) -> tuple[NDArray, NDArray]:
    """w_kv_b [H * (dn + dv), r] -> W^UK [H, dn, r], W^UV [H, dv, r] (DeepSeek's row layout)."""
    w = floats(w_kv_b, "w_kv_b", 2)
    h, dn = _positive_int(n_heads, "n_heads"), _positive_int(qk_nope_head_dim, "qk_nope_head_dim")
    rows = w.shape[0]
    if rows % h or rows // h <= dn:
        raise ValueError(f"w_kv_b: expected [H * (dn + dv), r] with H = {h}, dn = {dn}, dv >= 1, "
                         f"got shape {w.shape}")
    per_head = w.reshape(h, rows // h, w.shape[1])  # [H, dn + dv, r]
    return per_head[:, :dn], per_head[:, dn:]


def _rotate(x, positions, style, base, scaling):
    style = member(style, RopeStyle, "rope_style")
    _rope_type(scaling)  # a type error here names rope_scaling
    return apply_rope(x, positions, base=base, style=style, scaling=scaling, attention_factor=AttentionFactor.NONE)


def _check(q_nope, q_pe, c_kv, k_pe, w_kv_b):
    """Shapes of an MLA call; returns float64 arrays and (W^UK, W^UV)."""
    q_nope, q_pe = floats(q_nope, "q_nope", 4), floats(q_pe, "q_pe", 4)
    c_kv, k_pe = floats(c_kv, "c_kv", 3), floats(k_pe, "k_pe", 3)
    b, lq, h, dn = q_nope.shape
    if q_pe.shape[:3] != (b, lq, h):
        raise ValueError(f"q_pe: expected [B, Lq, H, dr] with B, Lq, H of q_nope {q_nope.shape}, got {q_pe.shape}")
    dr = q_pe.shape[3]
    if dr == 0 or dr % 2:
        raise ValueError(f"q_pe: expected an even RoPE dim dr >= 2, got shape {q_pe.shape}")
    if c_kv.shape[0] != b:
        raise ValueError(f"c_kv: expected [B, Lk, r] with B = {b} like q_nope, got {c_kv.shape}")
    lk, r = c_kv.shape[1], c_kv.shape[2]
    if k_pe.shape != (b, lk, dr):
        raise ValueError(f"k_pe: expected [B, Lk, dr] = {(b, lk, dr)} (c_kv {c_kv.shape}, q_pe {q_pe.shape}), "
                         f"got {k_pe.shape}")
    if lq > lk:
        raise ValueError(f"q_nope: the Lq = {lq} queries are the last of the Lk = {lk} positions, "
                         f"so Lq <= Lk; got q_nope {q_nope.shape} and c_kv {c_kv.shape}")
    w = np.asarray(w_kv_b)
    if w.ndim == 2 and w.shape[1] != r:
        raise ValueError(f"w_kv_b: expected [H * (dn + dv), r] with r = {r} like c_kv, got shape {w.shape}")
    return q_nope, q_pe, c_kv, k_pe, split_kv_b(w_kv_b, h, dn)


def _positions(lq: int, lk: int):
    return np.arange(lq) + (lk - lq), np.arange(lk)


def mla_naive(q_nope: ArrayLike, q_pe: ArrayLike, c_kv: ArrayLike, k_pe: ArrayLike, w_kv_b: ArrayLike, *,
              causal: bool = False, scale: float | None = None,
              rope_base: float | None = None, rope_scaling: Mapping | None = None,
              rope_style: RopeStyle | str = "gptj") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """MLA with keys and values decompressed per head (DeepSeek's `attn_impl="naive"`).

    q_nope [B, Lq, H, dn], q_pe [B, Lq, H, dr] (before RoPE), c_kv [B, Lk, r] (the
    normed latent), k_pe [B, Lk, dr] (before RoPE, one for all heads), w_kv_b
    [H * (dn + dv), r]. scale defaults to deepseek_softmax_scale(dn + dr, rope_scaling).
    Returns out [B, Lq, H, dv] and lse [B, H, Lq] (natural log).
    """
    q_nope, q_pe, c_kv, k_pe, (w_uk, w_uv) = _check(q_nope, q_pe, c_kv, k_pe, w_kv_b)
    b, lq, h, dn = q_nope.shape
    lk = c_kv.shape[1]
    pos_q, pos_k = _positions(lq, lk)
    k_nope = np.einsum("blr,hdr->blhd", c_kv, w_uk)  # [B, Lk, H, dn]
    v = np.einsum("blr,hvr->blhv", c_kv, w_uv)  # [B, Lk, H, dv]
    k_rot = _rotate(k_pe[:, :, None, :], pos_k, rope_style, rope_base, rope_scaling)  # [B, Lk, 1, dr]
    k = np.concatenate([k_nope, np.broadcast_to(k_rot, (b, lk, h, k_rot.shape[3]))], axis=-1)
    q = np.concatenate([q_nope, _rotate(q_pe, pos_q, rope_style, rope_base, rope_scaling)], axis=-1)
    if scale is None:
        scale = deepseek_softmax_scale(dn + q_pe.shape[3], rope_scaling)
    return attend(q, k, v, scale=scale, causal=causal)


def mla_absorbed(q_nope: ArrayLike, q_pe: ArrayLike, c_kv: ArrayLike, k_pe: ArrayLike, w_kv_b: ArrayLike, *,
                 causal: bool = False, scale: float | None = None,
                 rope_base: float | None = None, rope_scaling: Mapping | None = None,
                 rope_style: RopeStyle | str = "gptj") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """MLA with W^UK folded into the query and W^UV applied after attention
    (DeepSeek's `attn_impl="absorb"`): multi-query attention over the latent.

    Same arguments and result as `mla_naive`.
    """
    q_nope, q_pe, c_kv, k_pe, (w_uk, w_uv) = _check(q_nope, q_pe, c_kv, k_pe, w_kv_b)
    lq, dn, lk = q_nope.shape[1], q_nope.shape[3], c_kv.shape[1]
    pos_q, pos_k = _positions(lq, lk)
    q_latent = np.einsum("bqhd,hdr->bqhr", q_nope, w_uk)  # [B, Lq, H, r]
    q = np.concatenate([q_latent, _rotate(q_pe, pos_q, rope_style, rope_base, rope_scaling)], axis=-1)
    k_rot = _rotate(k_pe[:, :, None, :], pos_k, rope_style, rope_base, rope_scaling)  # [B, Lk, 1, dr]
    k = np.concatenate([c_kv[:, :, None, :], k_rot], axis=-1)  # [B, Lk, 1, r + dr]: one KV head
    if scale is None:
        scale = deepseek_softmax_scale(dn + q_pe.shape[3], rope_scaling)
    o_latent, lse = attend(q, k, c_kv[:, :, None, :], scale=scale, causal=causal)  # [B, Lq, H, r]
    return np.einsum("bqhr,hvr->bqhv", o_latent, w_uv), lse


def absorb_query(q_nope: ArrayLike, q_pe: ArrayLike, w_kv_b: ArrayLike, positions: ArrayLike, *,
                 rope_base: float | None = None, rope_scaling: Mapping | None = None,
                 rope_style: RopeStyle | str = "gptj") -> NDArray[np.float64]:
    """FlashMLA's query: [(W^UK_h)^T q^C ; R_p q^R] -> [B, Lq, H, r + dr] (576 for DeepSeek).

    q_nope [B, Lq, H, dn], q_pe [B, Lq, H, dr] (before RoPE), w_kv_b [H * (dn + dv), r],
    positions: integers broadcastable to [B, Lq].
    """
    q_nope, q_pe = floats(q_nope, "q_nope", 4), floats(q_pe, "q_pe", 4)
    if q_pe.shape[:3] != q_nope.shape[:3]:
        raise ValueError(f"q_pe: expected [B, Lq, H, dr] with B, Lq, H of q_nope {q_nope.shape}, got {q_pe.shape}")
    w_uk, _ = split_kv_b(w_kv_b, q_nope.shape[2], q_nope.shape[3])
    q_latent = np.einsum("bqhd,hdr->bqhr", q_nope, w_uk)
    return np.concatenate([q_latent, _rotate(q_pe, positions, rope_style, rope_base, rope_scaling)], axis=-1)


def latent_cache(c_kv: ArrayLike, k_pe: ArrayLike, positions: ArrayLike, *, rope_base: float | None = None,
                 rope_scaling: Mapping | None = None, rope_style: RopeStyle | str = "gptj") -> NDArray[np.float64]:
    """FlashMLA's cache entries [c ; R_p k^R] -> [B, Lk, 1, r + dr] (one KV head).

    c_kv [B, Lk, r], k_pe [B, Lk, dr] (before RoPE), positions broadcastable to [B, Lk].
    """
    c_kv, k_pe = floats(c_kv, "c_kv", 3), floats(k_pe, "k_pe", 3)
    if k_pe.shape[:2] != c_kv.shape[:2]:
        raise ValueError(f"k_pe: expected [B, Lk, dr] with B, Lk of c_kv {c_kv.shape}, got {k_pe.shape}")
    k_rot = _rotate(k_pe[:, :, None, :], positions, rope_style, rope_base, rope_scaling)
    return np.concatenate([c_kv[:, :, None, :], k_rot], axis=-1)


def flashmla_attend(q: ArrayLike, kv: ArrayLike, *, dv: int = 512, scale: float | None = None,
                    causal: bool = False) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """FlashMLA's decode attention: keys are the cache entries, values their first dv values.

    q [B, Lq, H, D], kv [B, Lk, Hkv, D] (D = 576, Hkv = 1 for DeepSeek); scale defaults to
    FlashMLA's D^-1/2 (DeepSeek passes `deepseek_softmax_scale(192, ...)` instead).
    Returns o [B, Lq, H, dv] (still latent: see `unabsorb_output`) and lse [B, H, Lq].
    """
    kv = floats(kv, "kv", 4)
    dv = _positive_int(dv, "dv")
    if dv > kv.shape[3]:
        raise ValueError(f"dv: expected at most the cache entry width {kv.shape[3]} of kv {kv.shape}, got {dv}")
    return attend(q, kv, kv[..., :dv], scale=scale, causal=causal)


def unabsorb_output(o_latent: ArrayLike, w_kv_b: ArrayLike, *, v_head_dim: int) -> NDArray[np.float64]:
    """o_{i,h} = W^UV_h o^L_{i,h}: o_latent [B, Lq, H, r] -> [B, Lq, H, dv]."""
    o_latent = floats(o_latent, "o_latent", 4)
    h, r = o_latent.shape[2], o_latent.shape[3]
    w = np.asarray(w_kv_b)
    dv = _positive_int(v_head_dim, "v_head_dim")
    if w.ndim != 2 or w.shape[1] != r or w.shape[0] % h or w.shape[0] // h <= dv:
        raise ValueError(f"w_kv_b: expected [H * (dn + dv), r] with H = {h}, r = {r}, dv = {dv}, dn >= 1, "
                         f"got shape {w.shape}")
    _, w_uv = split_kv_b(w, h, w.shape[0] // h - dv)
    return np.einsum("bqhr,hvr->bqhv", o_latent, w_uv)


def kv_cache_values_per_token(*, n_heads: int = 128, kv_lora_rank: int = 512, qk_nope_head_dim: int = 128,
                              qk_rope_head_dim: int = 64, v_head_dim: int = 128) -> dict[str, int]:
    """Values one token adds to one layer's KV cache (defaults: DeepSeek-V3's config).

    mla               r + dr: the latent and the shared RoPE key (576)
    mha               2 * H * dv: an MHA of H heads with keys as wide as values
                      (the d_h baseline of DeepSeek-V2's Table 1; 32768, 57x)
    mha_decompressed  H * (dn + dr + dv): DeepSeek's own naive path, whose keys
                      are 192 wide (40960, 71x)
    """
    h = _positive_int(n_heads, "n_heads")
    r, dn = _positive_int(kv_lora_rank, "kv_lora_rank"), _positive_int(qk_nope_head_dim, "qk_nope_head_dim")
    dr, dv = _positive_int(qk_rope_head_dim, "qk_rope_head_dim"), _positive_int(v_head_dim, "v_head_dim")
    return {"mla": r + dr, "mha": 2 * h * dv, "mha_decompressed": h * (dn + dr + dv)}

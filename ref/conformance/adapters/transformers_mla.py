"""Hugging Face transformers' `DeepseekV3Attention` (models.deepseek_v3) as `attention.mla`,
at bfloat16 (this module's OPS; `implementation(precision)` for float16 and float32).

transformers and torch are imported when this module is: `python -m ref conform
--impl ref.conformance.adapters.transformers_mla` loads it; nothing in `ref` imports it.

The module runs its own forward (projections, RoPE, `expand_kv`, eager attention,
o_proj) on weights that carry the op's inputs through unchanged:
- one hidden state per key position t = 0..Lk-1 holds [q_t ; c_t ; k^R_t] (the
  query part zero where no query sits: the Lq queries are the last Lq positions);
  `q_proj` and `kv_a_proj_with_mqa` are 0/1 selections of those parts, so the query
  [q^C ; q^R] and the compressed [c ; k^R] reach the module exactly;
- `kv_b_proj.weight` is the op's w_kv_b (the same [H * (dn + dv), r] layout);
- `kv_a_layernorm` is replaced by the identity: the op's c_kv is the normed latent;
- `o_proj` selects the attention output [B, L, H * dv];
- cos and sin from `DeepseekV3RotaryEmbedding` with rope_parameters {rope_type,
  rope_theta = rope_base, the scaling keys}; `rope_interleave` = (rope_style == "gptj");
- the mask is transformers' eager mask for the case: additive, finfo.min where a key
  is after the query's position (causal) and 0 elsewhere;
- `scaling` is the module's own (qk_head_dim^-1/2, times mscale^2 under YaRN) unless
  the case gives `scale`.
The module returns no LSE: the adapter registers an attention function that runs
deepseek_v3's `eager_attention_forward` and takes the float32 log-sum-exp of the
scores it is given, so the LSE is of transformers' own query and key states.

Documented divergence (spec/attention.md, "Engines"): transformers multiplies cos and
sin by YaRN's attention factor mscale(mscale) / mscale(mscale_all_dim); DeepSeek's
reference code (and the op) do not. Every published DeepSeek config has mscale ==
mscale_all_dim (factor 1), so no vector meets it.

With no tokens (Lk = 0, which only random examples draw) the module raises (a view
with -1 of an empty tensor); the adapter declines those cases (NotImplementedError),
since attention.mla names no flag for them that an xfail could cover.
"""

from __future__ import annotations

import numpy as np
import torch
import transformers
from transformers import AttentionInterface, DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
    eager_attention_forward,
)

from ref.arguments import member
from ref.attention.rope import RopeStyle
from ref.conformance.adapters._torch_attention import NUMPY_DTYPES, TORCH_DTYPES, check_precision
from ref.conformance.implementation import Implementation

NAME = f"transformers {transformers.__version__} DeepseekV3Attention (bfloat16)"
VERSION = transformers.__version__

_VARIANTS = {"rope_style": ["gptj", "neox"]}
_CAPTURE = "ref_lse_capture"
_captured: list[torch.Tensor] = []


def _eager_with_lse(module, query, key, value, attention_mask, scaling, **kwargs):
    """deepseek_v3's eager attention, also recording the float32 LSE of its scores."""
    scores = torch.matmul(query.float(), key.float().transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores.masked_fill(attention_mask < 0, float("-inf"))
    _captured.append(torch.logsumexp(scores, dim=-1))
    return eager_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


AttentionInterface.register(_CAPTURE, _eager_with_lse)


def _check(q_nope, q_pe, c_kv, k_pe, w_kv_b):
    arrays = dict(q_nope=q_nope, q_pe=q_pe, c_kv=c_kv, k_pe=k_pe, w_kv_b=w_kv_b)
    for name, arr in arrays.items():
        if arr.dtype.kind != "f":
            raise TypeError(f"{name}: expected floats, got {arr.dtype}")
    if q_nope.ndim != 4 or q_pe.ndim != 4 or c_kv.ndim != 3 or k_pe.ndim != 3 or w_kv_b.ndim != 2:
        raise ValueError("q_nope, q_pe [B, Lq, H, *], c_kv, k_pe [B, Lk, *], w_kv_b [H * (dn + dv), r]")
    b, lq, h, dn = q_nope.shape
    lk, r, dr = c_kv.shape[1], c_kv.shape[2], q_pe.shape[3]
    if q_pe.shape[:3] != (b, lq, h) or k_pe.shape != (b, lk, dr) or c_kv.shape[0] != b:
        raise ValueError("q_pe, c_kv, k_pe: shapes do not fit q_nope")
    if dr == 0 or dr % 2:
        raise ValueError("q_pe: expected an even rope dim")
    if lq > lk:
        raise ValueError("q_nope: more queries than positions")
    if w_kv_b.shape[1] != r or w_kv_b.shape[0] % h or w_kv_b.shape[0] // h <= dn:
        raise ValueError("w_kv_b: expected [H * (dn + dv), r]")


def _rope_parameters(rope_base, rope_scaling) -> dict:
    params = {k: v for k, v in (rope_scaling or {}).items() if v is not None}
    kind = params.pop("rope_type", params.pop("type", "default"))
    theta = params.pop("rope_theta", None)
    if rope_base is not None and theta is not None and float(rope_base) != float(theta):
        raise ValueError("rope_base, rope_theta: they disagree")
    base = rope_base if rope_base is not None else theta if theta is not None else 10000.0
    return {"rope_type": kind, "rope_theta": float(base), **params}


def _selection(rows: int, cols: int, start: int) -> torch.Tensor:
    """A Linear weight [rows, cols] picking inputs start..start+rows-1."""
    w = torch.zeros(rows, cols)
    w[torch.arange(rows), start + torch.arange(rows)] = 1
    return w


def mla(q_nope, q_pe, c_kv, k_pe, w_kv_b, causal=False, scale=None, rope_base=None, rope_scaling=None,
        rope_style="gptj", *, precision: str = "bfloat16"):
    """One `attention.mla` call through DeepseekV3Attention at `precision` -> (out, lse)."""
    q_nope, q_pe, c_kv, k_pe, w_kv_b = (np.asarray(x) for x in (q_nope, q_pe, c_kv, k_pe, w_kv_b))
    _check(q_nope, q_pe, c_kv, k_pe, w_kv_b)
    rope_style = member(rope_style, RopeStyle, "rope_style")
    b, lq, h, dn = q_nope.shape
    lk, r, dr = c_kv.shape[1], c_kv.shape[2], q_pe.shape[3]
    dv = w_kv_b.shape[0] // h - dn
    dtype = TORCH_DTYPES[precision]
    if lk == 0:  # the module's view(batch, seq, -1, ...) raises on zero tokens
        raise NotImplementedError("DeepseekV3Attention needs at least one token")
    q_width = h * (dn + dr)
    hidden = max(q_width + r + dr, h * dv)
    rope_parameters = _rope_parameters(rope_base, rope_scaling)
    config = DeepseekV3Config(
        hidden_size=hidden, num_attention_heads=h, num_key_value_heads=h, q_lora_rank=None, kv_lora_rank=r,
        qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv, head_dim=dr, attention_bias=False,
        rope_interleave=rope_style is RopeStyle.GPTJ, rope_parameters=rope_parameters,
        max_position_embeddings=max(lk, int(rope_parameters.get("factor", 1) *
                                            rope_parameters.get("original_max_position_embeddings", lk))))
    config._attn_implementation = _CAPTURE
    module = DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        module.q_proj.weight.copy_(_selection(q_width, hidden, 0))
        module.kv_a_proj_with_mqa.weight.copy_(_selection(r + dr, hidden, q_width))
        module.kv_b_proj.weight.copy_(torch.from_numpy(np.array(w_kv_b, np.float32)))
        module.o_proj.weight.copy_(_selection(h * dv, hidden, 0).T)
        module.kv_a_layernorm = torch.nn.Identity()
        if scale is not None:
            module.scaling = float(scale)
    module = module.to(dtype)

    x = np.zeros((b, lk, hidden), np.float32)
    x[:, lk - lq:, :q_width] = np.concatenate([q_nope, q_pe], axis=-1).reshape(b, lq, q_width)
    x[:, :, q_width:q_width + r] = c_kv
    x[:, :, q_width + r:q_width + r + dr] = k_pe
    hidden_states = torch.from_numpy(x).to(dtype)
    positions = torch.arange(lk)[None].expand(b, lk)
    cos, sin = DeepseekV3RotaryEmbedding(config)(hidden_states, positions)
    mask = torch.zeros(b, 1, lk, lk, dtype=dtype)
    if causal:
        mask = mask.masked_fill(torch.ones(lk, lk, dtype=torch.bool).triu(1), torch.finfo(dtype).min)
    _captured.clear()
    with torch.no_grad():
        out, _ = module(hidden_states, (cos, sin), mask)
    lse = _captured.pop()[:, :, lk - lq:]  # [B, H, Lq]
    out = out[:, lk - lq:, :h * dv].reshape(b, lq, h, dv)
    return out.float().numpy().astype(NUMPY_DTYPES[precision]), lse.numpy().astype(np.float32)


def implementation(precision: str) -> Implementation:
    """DeepseekV3Attention at `precision` as an implementation."""
    check_precision(precision)
    return Implementation(
        f"transformers {transformers.__version__} DeepseekV3Attention ({precision})",
        {"attention.mla": lambda **kw: mla(**kw, precision=precision)},
        variants={"attention.mla": _VARIANTS}, version=transformers.__version__,
        precision={"attention.mla": precision}, source=f"{__name__}:implementation({precision!r})")


OPS = implementation("bfloat16").ops
VARIANTS = {"attention.mla": _VARIANTS}
PRECISION = {"attention.mla": "bfloat16"}

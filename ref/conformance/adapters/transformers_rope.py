"""Hugging Face transformers' RoPE as `attention.rope`, at bfloat16 (this module's OPS;
`implementation(precision)` for float16 and float32).

transformers and torch are imported when this module is: `python -m ref conform
--impl ref.conformance.adapters.transformers_rope` loads it; nothing in `ref` imports it.

The case's configuration becomes a transformers 5 `rope_parameters` mapping (rope_type,
rope_theta = base, partial_rotary_factor = rotary_dim / D, and the scaling keys) of a
GPTNeoXConfig; the frequencies and the attention factor come from transformers' own
initializers (`GPTNeoXRotaryEmbedding`: its default, which reads partial_rotary_factor,
or ROPE_INIT_FUNCTIONS["linear" | "llama3" | "yarn"]), cos and sin from that module's
forward (float32 angles, cast to the activation dtype), and the rotation from
  neox  models.gpt_neox.modeling_gpt_neox.apply_rotary_pos_emb (rotate-half, partial)
  gptj  models.deepseek_v3.modeling_deepseek_v3.apply_rotary_pos_emb_interleave on the
        rotary dims; it returns the pairs de-interleaved (a_0..a_{r/2-1}, b_0..), as
        DeepSeek-V3's attention consumes them, so the adapter puts a_i, b_i back at
        dims 2i, 2i + 1.
transformers always multiplies cos and sin by the attention factor and reads YaRN's
keys its own way: the declared variants are attention_factor "cos_sin" and
mscale_keys "transformers" (vectors with other values are skipped).
"""

from __future__ import annotations

import numpy as np
import torch
import transformers
from transformers import GPTNeoXConfig
from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding, apply_rotary_pos_emb

from ref.arguments import member
from ref.attention.rope import AttentionFactor, MscaleKeys, RopeStyle
from ref.conformance.adapters._torch_attention import NUMPY_DTYPES, TORCH_DTYPES, check_precision
from ref.conformance.implementation import Implementation

NAME = f"transformers {transformers.__version__} RoPE initializers and apply_rotary_pos_emb (bfloat16)"
VERSION = transformers.__version__

_VARIANTS = {"style": ["neox", "gptj"], "attention_factor": ["cos_sin"], "mscale_keys": ["transformers"]}
_DEFAULT_BASE = 10000.0


def _checked(x, positions, rotary_dim, scaling):
    """x, positions broadcast to its tokens, and the rotary dim, checked in the catalog's terms."""
    x, pos = np.asarray(x), np.asarray(positions)
    if x.dtype.kind != "f":
        raise TypeError(f"x: expected floats, got {x.dtype}")
    if pos.dtype.kind not in "iu":
        raise TypeError(f"positions: expected integers, got {pos.dtype}")
    if x.ndim < 2:
        raise ValueError("x: expected [*S, H, D]")
    pos = np.broadcast_to(pos, x.shape[:-2])  # raises ValueError when it does not fit
    if pos.size and pos.min() < 0:
        raise ValueError("positions: expected >= 0")
    d = x.shape[-1]
    fraction = (scaling or {}).get("partial_rotary_factor")
    r = rotary_dim if rotary_dim is not None else d if fraction is None else int(d * fraction)
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0 or r > d or r % 2:
        raise ValueError(f"rotary_dim: expected an even integer in [0, {d}], got {r!r}")
    if fraction is not None and int(d * fraction) != r:
        raise ValueError("rotary_dim, partial_rotary_factor: they disagree")
    return x, pos, d, int(r)


def _rope_parameters(d, r, base, scaling) -> dict:
    params = {k: v for k, v in (scaling or {}).items() if v is not None}
    kind = params.pop("rope_type", params.pop("type", "default"))
    theta = params.pop("rope_theta", None)
    if base is not None and theta is not None and float(base) != float(theta):
        raise ValueError("base, rope_theta: they disagree")
    params.pop("partial_rotary_factor", None)
    return {"rope_type": kind, "rope_theta": float(theta if base is None else base) if (base or theta)
            else _DEFAULT_BASE, "partial_rotary_factor": r / d, **params}


def rope(x, positions, rotary_dim=None, base=None, style="neox", scaling=None, attention_factor="cos_sin",
         mscale_keys="transformers", *, precision: str = "bfloat16"):
    """One `attention.rope` call through transformers at `precision`."""
    style = member(style, RopeStyle, "style")
    if (member(attention_factor, AttentionFactor, "attention_factor") is not AttentionFactor.COS_SIN
            or member(mscale_keys, MscaleKeys, "mscale_keys") is not MscaleKeys.TRANSFORMERS):
        raise NotImplementedError("transformers applies the attention factor to cos and sin, read its own way")
    x, pos, d, r = _checked(x, positions, rotary_dim, scaling)
    heads = x.shape[-2]
    params = _rope_parameters(d, r, base, scaling)
    # The context a scaled config declares (factor times the original): transformers
    # warns when the two disagree, and reads only the explicit factor either way.
    context = int(params.get("factor", 1) * params.get("original_max_position_embeddings", 1))
    config = GPTNeoXConfig(hidden_size=heads * d, num_attention_heads=heads, head_dim=d,
                           max_position_embeddings=max(int(pos.max(initial=0)) + 1, 2, context),
                           rope_parameters=params)
    embedding = GPTNeoXRotaryEmbedding(config)
    dtype = TORCH_DTYPES[precision]
    t = torch.from_numpy(np.array(x, np.float32).reshape(1, -1, heads, d)).to(dtype).transpose(1, 2)  # [1, H, N, D]
    ids = torch.from_numpy(np.array(pos, np.int64).reshape(1, -1))
    cos, sin = embedding(t, ids)  # [1, N, r], in the activation dtype
    if style is RopeStyle.NEOX:
        out, _ = apply_rotary_pos_emb(t, t, cos, sin)
    else:
        rot, _ = apply_rotary_pos_emb_interleave(t[..., :r], t[..., :r], cos, sin)
        rot = torch.stack([rot[..., : r // 2], rot[..., r // 2:]], dim=-1).flatten(-2)  # pairs back at 2i, 2i + 1
        out = torch.cat([rot, t[..., r:]], dim=-1)
    out = out.transpose(1, 2).float().numpy().reshape(x.shape)
    return out.astype(NUMPY_DTYPES[precision])


def implementation(precision: str) -> Implementation:
    """transformers' RoPE at `precision` as an implementation."""
    check_precision(precision)
    return Implementation(
        f"transformers {transformers.__version__} RoPE ({precision})",
        {"attention.rope": lambda **kw: rope(**kw, precision=precision)},
        variants={"attention.rope": _VARIANTS}, version=transformers.__version__,
        precision={"attention.rope": precision}, source=f"{__name__}:implementation({precision!r})")


OPS = implementation("bfloat16").ops
VARIANTS = {"attention.rope": _VARIANTS}
PRECISION = {"attention.rope": "bfloat16"}

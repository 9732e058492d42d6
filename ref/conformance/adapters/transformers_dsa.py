"""Hugging Face transformers' `DeepseekV32Indexer` (models.deepseek_v32) as
`sparse.dsa.indexer` with quant "none" (its bfloat16-style path: no Hadamard, no FP8),
run in float32.

transformers and torch are imported when this module is: `python -m ref conform
--impl ref.conformance.adapters.transformers_dsa` loads it; nothing in `ref` imports it.

The module runs its own forward on weights that carry the op's inputs through unchanged:
- one hidden state per key position s = 0..S-1 holds [k_s ; w_s] (Di + Hi wide), and
  q_resid holds q_s flattened [Hi * Di] (zero at the S - T positions where no query
  sits: the T queries are the last T positions, and their rows are the ones read back);
- `wq_b` is the identity (q_lora_rank = Hi * Di), `wk` selects k, `weights_proj`
  selects w (times scale / (Di Hi)^-1/2 when the case gives `scale`: the module's own
  scale is head_dim^-1/2 * n_heads^-1/2, the op's default);
- `k_norm` (a LayerNorm) is replaced by the identity: the op's k is the normed key;
- cos and sin are the op's tables, each repeated over the two halves (NeoX's
  rotate_half layout, which the module always uses: pairing "interleaved" is declined);
- attention_mask is the causal bool mask [B, S, S] (all True when causal is off).
The module returns int32 indices [B, S, min(index_topk, S)] from torch.topk; the
adapter keeps the last T rows and pads each to topk with -1. Rows with fewer
candidates than topk keep the masked indices torch.topk returns (a documented
divergence: DsaShortRow in transformers_dsa.xfails). Declined (NotImplementedError):
quant "fp8", pairing "interleaved", T = 0 or S = 0 (the module's views fail).
"""

from __future__ import annotations

import numpy as np
import torch
import transformers
from transformers import DeepseekV32Config
from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Indexer

NAME = f"transformers {transformers.__version__} DeepseekV32Indexer (float32)"
VERSION = transformers.__version__


def _module(hi: int, di: int, rope_dim: int, topk: int, w_gain: float) -> DeepseekV32Indexer:
    cfg = DeepseekV32Config(hidden_size=di + hi, q_lora_rank=hi * di, index_n_heads=hi, index_head_dim=di,
                            qk_rope_head_dim=rope_dim, index_topk=topk, num_attention_heads=1, num_key_value_heads=1,
                            num_hidden_layers=1, vocab_size=8)
    m = DeepseekV32Indexer(cfg, 0).to(torch.float32).eval()
    with torch.no_grad():
        m.wq_b.weight.copy_(torch.eye(hi * di))
        m.wk.weight.copy_(torch.cat([torch.eye(di), torch.zeros(di, hi)], dim=1))
        m.weights_proj.weight.copy_(torch.cat([torch.zeros(hi, di), torch.eye(hi) * w_gain], dim=1))
    m.k_norm = torch.nn.Identity()
    return m


def indexer(q, k, w, cos, sin, topk=1, rope_dim=64, pairing="neox", quant="fp8", scale_fmt="ue8m0",
            block_size=128, scale=None, causal=True):
    if quant != "none" or pairing != "neox":
        raise NotImplementedError("DeepseekV32Indexer: quant none and the NeoX pairing only")
    q, k, w = (np.asarray(a, np.float64) for a in (q, k, w))
    b, t, hi, di = q.shape
    s = k.shape[1]
    if t == 0 or s == 0:
        raise NotImplementedError("DeepseekV32Indexer: no queries or no keys")
    if k.ndim != 3 or k.shape[0] != b or k.shape[2] != di or w.shape != (b, t, hi) or s < t:
        raise ValueError(f"shapes q {q.shape} k {k.shape} w {w.shape}")
    cos, sin = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    if cos.shape != (s, rope_dim // 2) or sin.shape != cos.shape or rope_dim % 2 or rope_dim > di:
        raise ValueError(f"cos, sin {cos.shape} for S = {s}, rope_dim {rope_dim}")
    gain = 1.0 if scale is None else float(scale) / ((di * hi) ** -0.5)
    m = _module(hi, di, rope_dim, int(topk), gain)
    w_all = np.zeros((b, s, hi))
    w_all[:, s - t:] = w
    q_all = np.zeros((b, s, hi * di))
    q_all[:, s - t:] = q.reshape(b, t, hi * di)
    hidden = torch.tensor(np.concatenate([k, w_all], axis=-1), dtype=torch.float32)
    c = torch.tensor(np.concatenate([cos, cos], axis=-1), dtype=torch.float32)[None].expand(b, s, rope_dim)
    sn = torch.tensor(np.concatenate([sin, sin], axis=-1), dtype=torch.float32)[None].expand(b, s, rope_dim)
    mask = torch.ones(s, s, dtype=torch.bool)
    if causal:
        mask = torch.tril(mask)
    with torch.no_grad():
        idx = m(hidden, torch.tensor(q_all, dtype=torch.float32), (c, sn), mask[None].expand(b, s, s),
                torch.arange(s)[None].expand(b, s)).numpy().astype(np.int64)[:, s - t:]
    if int(topk) == 0:
        return np.zeros((b, t, 0), np.int64)
    return np.concatenate([idx, np.full((b, t, int(topk) - idx.shape[2]), -1, np.int64)], axis=-1)


OPS = {"sparse.dsa.indexer": indexer}
VARIANTS = {"sparse.dsa.indexer": {"pairing": ["neox"], "quant": ["none"], "scale_fmt": ["ue8m0", "float"]}}

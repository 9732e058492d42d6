"""Hugging Face transformers' own parameter counts as `roofline.params.decoder`.

transformers and torch are imported when this module is: `python -m ref conform
--impl ref.conformance.adapters.transformers_params` loads it; nothing in `ref`
imports it.

Each element of the inputs is a decoder configuration; the adapter builds the causal
LM transformers builds for it, on the meta device (no memory, no weights), and counts:
- total: `model.num_parameters()` (tied weights once);
- active: total less the routed experts one token does not reach: the parameters
  under `...experts.` (transformers 5 keeps each layer's experts fused) times
  (experts - top_k) / experts, an exact integer.
The family follows the inputs: experts == 0: Llama (no qk_norm, no bias), Qwen2 (bias:
q/k/v biases), Qwen3 (qk_norm); Mistral, Llama's layout, where hidden is not a
multiple of heads (LlamaConfig refuses that, though head_dim is given); experts > 0:
Qwen3-MoE (qk_norm, no shared expert, no bias), Qwen2-MoE (shared_gate: Qwen2-MoE
always gates its shared expert; qkv_bias = bias). No family has q/k/v biases with
q/k norms (Qwen3's attention_bias also puts one on o_proj), nor a shared expert
without its gate, nor Qwen2-MoE's layout with q/k norms: those cases are declined
(NotImplementedError), as is an odd head_dim (every config refuses it: RoPE rotates
pairs of dimensions).

Layers: a model of L identical layers is built with 1 and with 2 layers, and the
count is n1 + (L - 1) * (n2 - n1) (exact Python ints), so a 1,000,003-layer vector
costs two small builds; every per-layer and outer term still comes from transformers.
The argument checks (dtypes, shapes, negative counts, kv_heads dividing heads, the
dense/MoE consistency, results past int64) are the oracle's
(`ref.roofline.params.decoder_params`, called on the same inputs before counting):
transformers would build some of those configurations without complaint.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import transformers

from ref.roofline.params import decoder_params

NAME = f"transformers {transformers.__version__} num_parameters (meta device)"
VERSION = transformers.__version__

_FIELDS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "experts", "top_k",
           "expert_intermediate", "shared_intermediate", "vocab", "tied", "qk_norm", "bias", "shared_gate")


def _config(layers, hidden, heads, kv_heads, head_dim, intermediate, experts, top_k, expert_intermediate,
            shared_intermediate, vocab, tied, qk_norm, bias, shared_gate):
    common = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, head_dim=head_dim, vocab_size=vocab, tie_word_embeddings=tied,
                  pad_token_id=None, bos_token_id=None, eos_token_id=None)
    if head_dim % 2:
        raise NotImplementedError("transformers' configs refuse an odd head_dim (RoPE rotates pairs)")
    if experts == 0:
        if qk_norm and bias:
            raise NotImplementedError("no transformers family has q/k/v biases with q/k norms and no o_proj bias")
        llama = "LlamaConfig" if hidden % heads == 0 else "MistralConfig"  # module docstring
        kind = "Qwen3Config" if qk_norm else "Qwen2Config" if bias else llama
        return getattr(transformers, kind)(intermediate_size=intermediate, **common)
    moe = dict(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=expert_intermediate,
               intermediate_size=1, decoder_sparse_step=1, mlp_only_layers=[])  # intermediate_size: unused
    if qk_norm and not bias and not shared_gate and shared_intermediate == 0:
        return transformers.Qwen3MoeConfig(**moe, **common)
    if shared_gate and not qk_norm:
        return transformers.Qwen2MoeConfig(**moe, shared_expert_intermediate_size=shared_intermediate,
                                           qkv_bias=bias, **common)
    raise NotImplementedError("no transformers MoE family has this combination of qk_norm, bias, shared expert "
                              "and shared gate")


def _counts(config) -> tuple[int, int]:
    """(all parameters, routed-expert parameters) of the meta-device model."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return model.num_parameters(), experts


@lru_cache(maxsize=4096)
def _one(row: tuple) -> tuple[int, int]:
    fields = dict(zip(_FIELDS, row))
    layers = fields.pop("layers")
    one_total, one_experts = _counts(_config(1, **fields))
    two_total, two_experts = _counts(_config(2, **fields))
    total = one_total + (layers - 1) * (two_total - one_total)
    experts = one_experts + (layers - 1) * (two_experts - one_experts)
    e, k = fields["experts"], fields["top_k"]
    inactive = experts * (e - k) // e if e else 0
    return total, total - inactive


def decoder(layers, hidden, heads, kv_heads, head_dim, intermediate, experts, top_k, expert_intermediate,
            shared_intermediate, vocab, tied, qk_norm, bias, shared_gate):
    """`roofline.params.decoder` counted by transformers, element by element."""
    arrays = dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                  intermediate=intermediate, experts=experts, top_k=top_k, expert_intermediate=expert_intermediate,
                  shared_intermediate=shared_intermediate, vocab=vocab, tied=tied, qk_norm=qk_norm, bias=bias,
                  shared_gate=shared_gate)
    decoder_params(**arrays)  # the argument checks (module docstring)
    shape = np.shape(layers)
    columns = [np.asarray(arrays[f]).reshape(-1).tolist() for f in _FIELDS]
    results = [_one(tuple(row)) for row in zip(*columns)]
    total = np.array([t for t, _ in results], dtype=np.int64).reshape(shape)
    active = np.array([a for _, a in results], dtype=np.int64).reshape(shape)
    return total, active


OPS = {"roofline.params.decoder": decoder}
VARIANTS: dict = {}

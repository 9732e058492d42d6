"""torch's FlopCounterMode (torch.utils.flop_counter) around a Hugging Face transformers
forward, as `roofline.flops.forward`: the FLOPs a real engine's counter reports.

transformers and torch are imported when this module is: `python -m ref conform
--impl ref.conformance.adapters.torch_flops` loads it; nothing in `ref` imports it.

Per element of the inputs the adapter builds, on the meta device (shapes only, no
memory, no arithmetic: the counter reads shapes):
- a dense model (experts 0) as Qwen3ForCausalLM (q/k norms add no matmul);
- a MoE without shared expert as Qwen3MoeForCausalLM (every layer sparse);
- a MoE with a shared expert as Qwen2MoeForCausalLM (q/k/v biases: addmm counts as mm);
with attn_implementation "eager" and experts_implementation "batched_mm" (each token's
top_k experts gathered and multiplied: exactly top_k per token). A cache of `context`
tokens is filled with meta keys and values, then one forward of `tokens` new tokens
runs inside FlopCounterMode; logits_to_keep=1 is lm_head "last", 0 (every position)
"all", and the base model without its head is "none".

What the counter counts, and what this adapter declares (VARIANTS):
- causal "full" only: eager attention multiplies Q K^T and P V over every key of the
  masked square (the mask is added after the product);
- the shared expert's sigmoid gate (Qwen2-MoE's shared_expert_gate, a 1 x hidden
  matrix: 2 * hidden FLOPs per token and layer) is a matmul the op does not define;
  the adapter subtracts that module's count (tests/test_roofline_torch.py checks it is
  exactly 2 * tokens * hidden * layers).
Divergences found, not met here because the adapter avoids them (tests assert them):
- transformers 5.24's default experts_implementation, "grouped_mm", calls
  torch's grouped_mm, for which FlopCounterMode has no formula: routed experts count 0;
- the default attention on CPU, SDPA, runs aten._scaled_dot_product_flash_attention_for_cpu,
  which has no formula either: attention's products count 0 (the CUDA flash and
  efficient kernels have a registered formula, the full square; not measured here).
Declined (NotImplementedError, counted as skipped): tokens 0 (transformers cannot run
an empty sequence), more than 128 layers (seconds of module building each), and shapes
whose attention scores would pass 2^62 elements (torch's numel limit).
"""

from __future__ import annotations

import numpy as np
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import (DynamicCache, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

NAME = f"torch {torch.__version__} FlopCounterMode on transformers {transformers.__version__} (meta device)"
VERSION = f"{torch.__version__}+{transformers.__version__}"

INPUTS = ("tokens", "context", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "experts",
          "top_k", "expert_intermediate", "shared_intermediate", "vocab")
MAX_LAYERS = 128


def _arrays(inputs: dict) -> dict[str, np.ndarray]:
    """The inputs checked as the op's contract says: integer arrays, one shape, >= 0, a
    consistent GQA decoder, dense or MoE."""
    out, shape = {}, None
    for name in INPUTS:
        arr = np.asarray(inputs[name])
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected an integer array, got {arr.dtype}")
        if shape is not None and arr.shape != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
        shape = arr.shape
        if (arr < 0).any():
            raise ValueError(f"{name}: negative count")
        out[name] = arr
    return out


def _check_element(c: dict[str, int]) -> None:
    if c["kv_heads"] < 1 or c["heads"] % c["kv_heads"]:
        raise ValueError("kv_heads: must be >= 1 and divide heads")
    if c["experts"]:
        if c["intermediate"] or not 1 <= c["top_k"] <= c["experts"]:
            raise ValueError("a MoE model needs intermediate 0 and 1 <= top_k <= experts")
    elif c["top_k"] or c["expert_intermediate"] or c["shared_intermediate"]:
        raise ValueError("a dense model has no top_k, expert_intermediate or shared_intermediate")


def build(c: dict[str, int]) -> torch.nn.Module:
    """The transformers model of one config, on the meta device."""
    common = dict(hidden_size=c["hidden"], num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                  num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"], vocab_size=c["vocab"],
                  tie_word_embeddings=False, max_position_embeddings=c["context"] + c["tokens"])
    if not c["experts"]:
        config, cls = Qwen3Config(intermediate_size=c["intermediate"], **common), Qwen3ForCausalLM
    elif not c["shared_intermediate"]:
        config, cls = Qwen3MoeConfig(num_experts=c["experts"], num_experts_per_tok=c["top_k"],
                                     moe_intermediate_size=c["expert_intermediate"], decoder_sparse_step=1,
                                     mlp_only_layers=[], intermediate_size=1, **common), Qwen3MoeForCausalLM
    else:
        config, cls = Qwen2MoeConfig(num_experts=c["experts"], num_experts_per_tok=c["top_k"],
                                     moe_intermediate_size=c["expert_intermediate"],
                                     shared_expert_intermediate_size=c["shared_intermediate"], decoder_sparse_step=1,
                                     mlp_only_layers=[], intermediate_size=1, **common), Qwen2MoeForCausalLM
    config._attn_implementation = "eager"
    config._experts_implementation = "batched_mm"
    with torch.device("meta"):
        return cls(config).eval()


def _cache(model, c: dict[str, int]) -> DynamicCache:
    """A cache holding `context` tokens of meta keys and values in every layer (empty for
    context 0: without a cache transformers reads position values, impossible on meta)."""
    cache = DynamicCache(config=model.config)
    shape = (1, c["kv_heads"], c["context"], c["head_dim"])
    for layer in range(c["layers"] if c["context"] else 0):
        cache.update(torch.empty(shape, device="meta"), torch.empty(shape, device="meta"), layer)
    return cache


def measure(c: dict[str, int], lm_head: str = "all") -> dict[str, int]:
    """FlopCounterMode's counts of one forward: {"total", module path: flops, ...}."""
    model = build(c)
    ids = torch.zeros(1, c["tokens"], dtype=torch.long, device="meta")
    cache = _cache(model, c)
    # positions follow from the cache's length (explicit position_ids without a cache make transformers
    # look for packed sequences, which reads values)
    kwargs = dict(input_ids=ids, cache=cache, use_cache=True)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        if lm_head == "none":
            model.model(**kwargs)
        else:
            model(**kwargs, logits_to_keep=1 if lm_head == "last" else 0)
    counts = {path: sum(ops.values()) for path, ops in counter.get_flop_counts().items()}
    return {"total": counter.get_total_flops(), **counts}


def forward(*, causal: str = "full", lm_head: str = "last", **inputs) -> np.ndarray:
    """roofline.flops.forward as FlopCounterMode measures it (causal "full")."""
    if causal != "full":
        raise NotImplementedError(f"causal={causal!r}: eager attention computes the full square")
    if lm_head not in ("last", "all", "none"):
        raise ValueError(f"lm_head: expected last, all or none, got {lm_head!r}")
    arrays = _arrays(inputs)
    shape = arrays["tokens"].shape
    flat = {k: v.reshape(-1) for k, v in arrays.items()}
    out = np.zeros(int(np.prod(shape, dtype=np.int64)), np.int64)
    for i in range(out.size):
        c = {k: int(v[i]) for k, v in flat.items()}
        _check_element(c)
        if c["tokens"] == 0:
            raise NotImplementedError("transformers cannot run a forward of no tokens")
        if c["layers"] > MAX_LAYERS:
            raise NotImplementedError(f"more than {MAX_LAYERS} layers")
        if c["heads"] * c["tokens"] * (c["context"] + c["tokens"]) > 1 << 62:
            raise NotImplementedError("attention scores past torch's numel limit")
        counts = measure(c, lm_head)
        gate = sum(v for path, v in counts.items() if path.endswith("shared_expert_gate"))
        total = counts["total"] - gate
        if total >= 1 << 63:
            raise ValueError("the FLOPs do not fit int64")
        out[i] = total
    return out.reshape(shape)


OPS = {"roofline.flops.forward": forward}
VARIANTS = {"roofline.flops.forward": {"causal": ["full"], "lm_head": ["last", "all", "none"]}}

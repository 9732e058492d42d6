"""What a sequence keeps between decode steps: the KV cache of attention layers (MHA,
GQA, MLA, KIVI-style quantized) and the fixed state of recurrent layers (Mamba-2,
Gated DeltaNet). Bytes are ceil(total bits / 8), once, over the whole quantity.

Catalog oracles (int64 arrays in, int64 bytes out, exact; spec/roofline.md):
  kv_attention_bytes(tokens, layers, kv_heads, head_dim, v_head_dim, element_bits)
      ceil(tokens * layers * kv_heads * (head_dim + v_head_dim) * element_bits / 8)
  kv_mla_bytes(tokens, layers, kv_lora_rank, qk_rope_head_dim, element_bits)
      ceil(tokens * layers * (kv_lora_rank + qk_rope_head_dim) * element_bits / 8)
  kv_quantized_bytes(tokens, layers, kv_heads, head_dim, bits, group, residual)    KIVI
  mamba2_state_bytes(layers, heads, head_dim, d_state, groups, conv_kernel, state_bits, conv_bits)
  gated_delta_state_bytes(layers, key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel,
                          state_bits, conv_bits)
Model level (Python ints):
  kv_bytes(model, tokens, element_bits=16)      every attention / MLA layer's cache
  state_bytes(model, state_bits=32, conv_bits=16)   every recurrent layer's state
"""

from __future__ import annotations

import numpy as np

from ref.arguments import integer
from ref.roofline.config import MLA, Attention, GatedDeltaNet, Mamba2, Model
from ref.roofline.counting import at_least, ceil_div, checked_model, counts, to_int64

__all__ = ["gated_delta_state_bytes", "kv_attention_bytes", "kv_bits", "kv_bytes", "kv_mla_bytes", "kv_quantized_bytes",
           "mamba2_state_bytes", "state_bytes"]


def kv_attention_bytes(tokens, layers, kv_heads, head_dim, v_head_dim, element_bits) -> np.ndarray:
    """KV cache bytes of MHA/GQA/MQA layers: a key of head_dim and a value of v_head_dim
    elements per token, KV head and layer, each element_bits wide.

    tokens = 1 is the per-token figure (Qwen3-8B: 36 * 8 * (128 + 128) * 16 / 8 = 147,456).
    GQA caches kv_heads heads, not the query heads: that is its whole saving.
    """
    op = "roofline.kv_bytes.attention"
    v = counts(op, tokens=tokens, layers=layers, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim,
               element_bits=element_bits)
    bits = v["tokens"] * v["layers"] * v["kv_heads"] * (v["head_dim"] + v["v_head_dim"]) * v["element_bits"]
    return to_int64(ceil_div(bits, 8), op, v)


def kv_mla_bytes(tokens, layers, kv_lora_rank, qk_rope_head_dim, element_bits) -> np.ndarray:
    """KV cache bytes of multi-head latent attention (DeepSeek-V2, arXiv 2405.04434):
    one latent c_kv of kv_lora_rank and one decoupled RoPE key k_pe of qk_rope_head_dim
    per token and layer, shared by every head (vLLM caches them as one "head" of
    kv_lora_rank + qk_rope_head_dim: 576 for DeepSeek-V3)."""
    op = "roofline.kv_bytes.mla"
    v = counts(op, tokens=tokens, layers=layers, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
               element_bits=element_bits)
    bits = v["tokens"] * v["layers"] * (v["kv_lora_rank"] + v["qk_rope_head_dim"]) * v["element_bits"]
    return to_int64(ceil_div(bits, 8), op, v)


def kv_quantized_bytes(tokens, layers, kv_heads, head_dim, bits, group, residual) -> np.ndarray:
    """KIVI-style quantized KV cache bytes (Liu et al., arXiv 2402.02750).

    The newest tokens stay at 16 bits until a whole group of `group` tokens beyond the
    `residual` window has formed; those q tokens are quantized:
        q = group * floor(max(tokens - residual, 0) / group),   f = tokens - q
    Per layer and KV head (bits):
        keys, per channel over groups of `group` tokens:  q*head_dim*bits + (q/group)*head_dim*32
        values, per token over groups of `group` channels: q*head_dim*bits + q*ceil(head_dim/group)*32
        full-precision tail:                              f * 2 * head_dim * 16
    (a scale and a zero point, float16 each, per group: 32 bits). group >= 1.
    """
    op = "roofline.kv_bytes.quantized"
    v = counts(op, tokens=tokens, layers=layers, kv_heads=kv_heads, head_dim=head_dim, bits=bits, group=group,
               residual=residual)
    at_least(op, 1, group=v["group"])  # tokens or channels per scale
    t, d, g = v["tokens"], v["head_dim"], v["group"]
    aged = t - v["residual"]
    aged = aged * (aged > 0)  # max(tokens - residual, 0)
    q = g * (aged // g)
    f = t - q
    keys = q * d * v["bits"] + (q // g) * d * 32
    values = q * d * v["bits"] + q * ceil_div(d, g) * 32
    tail = f * 2 * d * 16
    total = v["layers"] * v["kv_heads"] * (keys + values + tail)
    return to_int64(ceil_div(total, 8), op, v)


def mamba2_state_bytes(layers, heads, head_dim, d_state, groups, conv_kernel, state_bits, conv_bits) -> np.ndarray:
    """A sequence's Mamba-2 state bytes (arXiv 2405.21060), as vLLM shapes it per layer:
    ssm state [heads, head_dim, d_state] of state_bits, conv state [conv_dim, conv_kernel - 1]
    of conv_bits with conv_dim = heads * head_dim + 2 * groups * d_state (the conv runs
    over x, B and C). Fixed: it does not grow with the tokens. conv_kernel >= 1."""
    op = "roofline.state_bytes.mamba2"
    v = counts(op, layers=layers, heads=heads, head_dim=head_dim, d_state=d_state, groups=groups,
               conv_kernel=conv_kernel, state_bits=state_bits, conv_bits=conv_bits)
    at_least(op, 1, conv_kernel=v["conv_kernel"])  # taps of the causal conv1d
    bits = _mamba2_bits(v["heads"], v["head_dim"], v["d_state"], v["groups"], v["conv_kernel"], v["state_bits"],
                        v["conv_bits"])
    return to_int64(ceil_div(v["layers"] * bits, 8), op, v)


def _mamba2_bits(heads, head_dim, d_state, groups, conv_kernel, state_bits, conv_bits):
    """One Mamba-2 layer's state bits (ints or object arrays; conv_kernel >= 1)."""
    conv_dim = heads * head_dim + 2 * groups * d_state
    return heads * head_dim * d_state * state_bits + conv_dim * (conv_kernel - 1) * conv_bits


def gated_delta_state_bytes(layers, key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel, state_bits,
                            conv_bits) -> np.ndarray:
    """A sequence's Gated DeltaNet state bytes (arXiv 2412.06464; Qwen3-Next's linear
    attention): per layer a state [value_heads, key_head_dim, value_head_dim] of
    state_bits and a conv state [2*key_heads*key_head_dim + value_heads*value_head_dim,
    conv_kernel - 1] of conv_bits (the conv runs over q, k and v). conv_kernel >= 1."""
    op = "roofline.state_bytes.gated_delta"
    v = counts(op, layers=layers, key_heads=key_heads, value_heads=value_heads, key_head_dim=key_head_dim,
               value_head_dim=value_head_dim, conv_kernel=conv_kernel, state_bits=state_bits, conv_bits=conv_bits)
    at_least(op, 1, conv_kernel=v["conv_kernel"])  # taps of the causal conv1d
    bits = _gated_delta_bits(v["key_heads"], v["value_heads"], v["key_head_dim"], v["value_head_dim"],
                             v["conv_kernel"], v["state_bits"], v["conv_bits"])
    return to_int64(ceil_div(v["layers"] * bits, 8), op, v)


def _gated_delta_bits(key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel, state_bits, conv_bits):
    """One Gated DeltaNet layer's state bits (ints or object arrays; conv_kernel >= 1)."""
    conv_dim = 2 * key_heads * key_head_dim + value_heads * value_head_dim
    return value_heads * key_head_dim * value_head_dim * state_bits + conv_dim * (conv_kernel - 1) * conv_bits


def kv_bits(model: Model, tokens: int, element_bits: int = 16) -> int:
    """The bits behind `kv_bytes` (exact; before the one rounding to bytes)."""
    model = checked_model(model)
    tokens = integer(tokens, "tokens", minimum=0)
    element_bits = integer(element_bits, "element_bits", minimum=0)
    bits = 0
    for block in model.blocks:
        m = block.mixer
        if isinstance(m, Attention):
            stored = tokens if m.window is None else min(tokens, m.window)
            bits += stored * block.count * m.kv_heads * (m.head_dim + m.dv) * element_bits
        elif isinstance(m, MLA):
            bits += tokens * block.count * (m.kv_lora_rank + m.qk_rope_head_dim) * element_bits
    return bits


def kv_bytes(model: Model, tokens: int, element_bits: int = 16) -> int:
    """KV cache bytes of one sequence of `tokens` tokens: every Attention layer's keys and
    values (a sliding-window layer keeps min(tokens, window) tokens, the keys its next
    query can see) and every MLA layer's latent + RoPE key, element_bits each, rounded up
    to bytes once. Recurrent layers keep no KV: see `state_bytes`."""
    return ceil_div(kv_bits(model, tokens, element_bits), 8)


def state_bytes(model: Model, state_bits: int = 32, conv_bits: int = 16) -> int:
    """Fixed recurrent state bytes of one sequence: every Mamba2 and GatedDeltaNet layer's
    state and conv window, rounded up to bytes once.

    Defaults: the recurrent state in float32, the conv window in bfloat16: what
    transformers 5.24 keeps for a bfloat16 Qwen3-Next or Nemotron-H (its conv window has
    conv_kernel columns, one more than vLLM's conv_kernel - 1, which this counts).
    vLLM's mamba_ssm_cache_dtype picks the SSM state's dtype (the model dtype by default).
    Give the bits your engine uses."""
    model = checked_model(model)
    state_bits = integer(state_bits, "state_bits", minimum=0)
    conv_bits = integer(conv_bits, "conv_bits", minimum=0)
    bits = 0
    for block in model.blocks:
        m = block.mixer
        if isinstance(m, Mamba2):  # the config keeps conv_kernel >= 1
            bits += block.count * _mamba2_bits(m.heads, m.head_dim, m.d_state, m.groups, m.conv_kernel, state_bits,
                                               conv_bits)
        elif isinstance(m, GatedDeltaNet):
            bits += block.count * _gated_delta_bits(m.key_heads, m.value_heads, m.key_head_dim, m.value_head_dim,
                                                    m.conv_kernel, state_bits, conv_bits)
    return ceil_div(bits, 8)

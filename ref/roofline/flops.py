"""FLOPs of a forward pass over `tokens` new tokens after `context` cached ones (prefill:
context 0; a decode step: tokens 1), counting only weight-matrix multiply-adds (2 FLOPs
each) and attention's two products (Q K^T and P V). Not counted: norms, biases,
activations, softmax, RoPE, the router's softmax/top-k, residual adds; the embedding is
a lookup (0 FLOPs).

Per layer, with P the (query, key) pairs attention computes:
    2 * tokens * (q, k, v, o projection params) + 2 * heads * (head_dim + head_dim) * P
    + FFN: dense 2 * tokens * 3 * hidden * intermediate
           MoE   2 * tokens * (hidden * experts + top_k * 3 * hidden * expert_intermediate
                               + 3 * hidden * shared_intermediate)
plus the LM head 2 * hidden * vocab per position whose logits are computed.

causal, how P is counted (variant, default "exact"):
    exact  tokens * context + tokens * (tokens + 1) / 2   each query sees its own key
    half   tokens * context + tokens^2 / 2                FlashAttention's benchmarks' convention
    full   tokens * (context + tokens)                    the masked square (torch's FlopCounterMode
                                                          on eager attention, which multiplies the
                                                          masked half too)
lm_head, whose logits (variant, default "last"): last (1 position if tokens > 0: generation),
    all (every position: a training forward, and transformers without logits_to_keep), none.

forward_flops_decoder is the catalog oracle (a GQA/MoE decoder, int64 arrays, exact);
forward_flops(model, ...) covers every mixer of ref.roofline.config (Python ints).
"""

from __future__ import annotations

import enum

import numpy as np

from ref.arguments import integer, member
from ref.roofline.config import MLA, MLP, Attention, GatedDeltaNet, Mamba2, Model, MoE
from ref.roofline.counting import checked_model, counts, decoder_config, to_int64

__all__ = ["Causal", "LmHead", "MlaForm", "attention_pairs", "forward_flops", "forward_flops_decoder"]


class Causal(enum.Enum):
    """How the (query, key) pairs of causal attention are counted."""

    EXACT = "exact"
    HALF = "half"
    FULL = "full"


class LmHead(enum.Enum):
    """Which positions' logits the forward computes."""

    LAST = "last"
    ALL = "all"
    NONE = "none"


class MlaForm(enum.Enum):
    """How MLA's attention is computed (DeepSeek-V2, arXiv 2405.04434, section 2.1.3)."""

    NAIVE = "naive"  # every cached latent decompressed per head (kv_b_proj) at each step (transformers, vLLM prefill)
    ABSORBED = "absorbed"  # W_UK folded into the query, W_UV after attention: attend over the latent (vLLM decode)


def _pairs_x2(tokens, context, causal: Causal):
    """Twice the (query, key) pairs (twice, so "half"'s tokens^2 / 2 stays an integer)."""
    if causal is Causal.EXACT:
        return 2 * tokens * context + tokens * (tokens + 1)
    if causal is Causal.HALF:
        return 2 * tokens * context + tokens * tokens
    return 2 * tokens * (context + tokens)


def attention_pairs(tokens: int, context: int, causal: str = "exact", window: int | None = None) -> float:
    """The (query, key) pairs of one head (a float: "half" of odd tokens is a half-integer).
    A sliding window of w (keys a query sees, itself included) gives the exact band
    sum of min(position + 1, w) under "exact" and "half" (a band is no triangle), and the
    masked square under "full"."""
    tokens = integer(tokens, "tokens", minimum=0)
    context = integer(context, "context", minimum=0)
    causal = member(causal, Causal, "causal")
    if window is not None and causal is not Causal.FULL:
        return _band(tokens, context, integer(window, "window", minimum=1))
    return _pairs_x2(tokens, context, causal) / 2


def _band(tokens: int, context: int, window: int) -> int:
    """sum over positions p = context .. context + tokens - 1 of min(p + 1, window)."""
    def prefix(n):  # sum_{p=0}^{n-1} min(p + 1, window)
        k = min(n, window)
        return k * (k + 1) // 2 + (n - k) * window
    return prefix(context + tokens) - prefix(context)


def _lm_positions(tokens, lm_head: LmHead):
    if lm_head is LmHead.ALL:
        return tokens
    if lm_head is LmHead.LAST:
        return np.minimum(tokens, 1) if isinstance(tokens, np.ndarray) else min(tokens, 1)
    return 0 * tokens


def forward_flops_decoder(tokens, context, layers, hidden, heads, kv_heads, head_dim, intermediate, experts, top_k,
                          expert_intermediate, shared_intermediate, vocab, *, causal: str = "exact",
                          lm_head: str = "last") -> np.ndarray:
    """FLOPs of a GQA decoder's forward (dense when experts == 0, MoE otherwise), exact,
    as int64: see the module docstring. Checks: kv_heads >= 1 and heads a multiple of it;
    a dense model has top_k, expert_intermediate and shared_intermediate 0; a MoE model
    (experts > 0) has intermediate 0 and 1 <= top_k <= experts."""
    op = "roofline.flops.forward"
    causal = member(causal, Causal, "causal")
    lm_head = member(lm_head, LmHead, "lm_head")
    v = counts(op, tokens=tokens, context=context, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
               head_dim=head_dim, intermediate=intermediate, experts=experts, top_k=top_k,
               expert_intermediate=expert_intermediate, shared_intermediate=shared_intermediate, vocab=vocab)
    decoder_config(op, v)
    t, h, d = v["tokens"], v["hidden"], v["head_dim"]
    projections = h * v["heads"] * d * 2 + h * v["kv_heads"] * d * 2  # q, o; k, v
    attention_x2 = 2 * v["heads"] * (d + d) * _pairs_x2(t, v["context"], causal)
    ffn = (3 * h * v["intermediate"] + h * v["experts"] + v["top_k"] * 3 * h * v["expert_intermediate"]
           + 3 * h * v["shared_intermediate"])
    per_layer = 2 * t * (projections + ffn) + attention_x2 // 2  # even: exact
    total = v["layers"] * per_layer + 2 * h * v["vocab"] * _lm_positions(t, lm_head)
    return to_int64(total, op, v)


def _mixer_flops(m, hidden: int, tokens: int, context: int, causal: Causal, mla: MlaForm) -> int:
    """One layer's mixer FLOPs for `tokens` new tokens after `context`."""
    t = tokens
    if isinstance(m, Attention):
        q_out = m.heads * m.head_dim * (2 if m.output_gate else 1)  # the gate rides on q_proj
        params = hidden * (q_out + m.kv_heads * (m.head_dim + m.dv)) + m.heads * m.dv * hidden
        pairs_x2 = (2 * _band(t, context, m.window) if m.window is not None and causal is not Causal.FULL
                    else _pairs_x2(t, context, causal))
        return 2 * t * params + m.heads * (m.head_dim + m.dv) * pairs_x2  # 2 * heads * (d + dv) * pairs
    if isinstance(m, MLA):
        dq = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (hidden * m.q_lora_rank + m.q_lora_rank * m.heads * dq) if m.q_lora_rank else hidden * m.heads * dq
        kv_a = hidden * (m.kv_lora_rank + m.qk_rope_head_dim)
        o = m.heads * m.v_head_dim * hidden
        pairs_x2 = _pairs_x2(t, context, causal)
        if mla is MlaForm.NAIVE:  # kv_b_proj on every key's latent (cached and new); attend over dq and v_head_dim
            kv_b = m.kv_lora_rank * m.heads * (m.qk_nope_head_dim + m.v_head_dim)
            return 2 * t * (q + kv_a + o) + 2 * (context + t) * kv_b + m.heads * (dq + m.v_head_dim) * pairs_x2
        absorb = m.heads * m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim)  # q_nope -> latent; latent -> v
        return 2 * t * (q + kv_a + absorb + o) + m.heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * pairs_x2
    if isinstance(m, Mamba2):
        inner = m.heads * m.head_dim
        conv_dim = inner + 2 * m.groups * m.d_state
        in_proj = hidden * (2 * inner + 2 * m.groups * m.d_state + m.heads)  # z, x, B, C, dt
        # the recurrent form: h = a h + dt x B^T and y = C h, a multiply-add per state element each
        return 2 * t * (in_proj + conv_dim * m.conv_kernel + 2 * inner * m.d_state + inner * hidden)
    if isinstance(m, GatedDeltaNet):
        k_dim, v_dim = m.key_heads * m.key_head_dim, m.value_heads * m.value_head_dim
        in_proj = hidden * (2 * k_dim + 2 * v_dim + 2 * m.value_heads)  # q, k, v, z; b, a
        conv_dim = 2 * k_dim + v_dim
        # the delta rule per value head: S^T k, the rank-1 update, S^T q (dk x dv each)
        state = 3 * m.value_heads * m.key_head_dim * m.value_head_dim
        return 2 * t * (in_proj + conv_dim * m.conv_kernel + state + v_dim * hidden)
    return 0


def _ffn_flops(f, hidden: int, tokens: int) -> int:
    if isinstance(f, MLP):
        return 2 * tokens * (3 if f.gated else 2) * hidden * f.intermediate
    if isinstance(f, MoE):
        mats = 3 if f.gated else 2
        per_token = (hidden * f.experts + f.top_k * mats * hidden * f.expert_intermediate
                     + mats * hidden * f.shared_intermediate + hidden * f.shared_gate)
        return 2 * tokens * per_token
    return 0


def forward_flops(model: Model, tokens: int, context: int = 0, causal: str = "exact", lm_head: str = "last", *,
                  mla: str = "naive") -> int:
    """FLOPs of `model`'s forward over `tokens` new tokens after `context` cached ones, for
    every mixer and FFN kind (the module docstring's rules), as a Python int.

    Attention: projections (q_proj twice as wide with Qwen3-Next's output gate) and
    2 * heads * (head_dim + v_head_dim) per pair; a sliding window counts its band.
    MLA: q (through q_lora_rank when > 0), kv_a, o, and either `mla="naive"` (the cache holds
    latents; kv_b_proj decompresses every key's latent, the context's and the new tokens',
    at each forward: 2 * (context + tokens) * kv_lora_rank * heads * (qk_nope + v_head_dim),
    then attention over qk_nope + qk_rope and v_head_dim per head: transformers 5.24, and
    vLLM's prefill) or "absorbed" (W_UK folded into the query and W_UV applied after
    attention: per new token 2 * heads * kv_lora_rank * (qk_nope + v_head_dim), and
    attention over the kv_lora_rank + qk_rope latent per head: vLLM's decode).
    Mamba-2 and Gated DeltaNet: projections, the depthwise conv (2 * conv_dim * conv_kernel
    per token) and the recurrent form's state products per token (Mamba-2: 4 * heads *
    head_dim * d_state; Gated DeltaNet: 6 * value_heads * key_head_dim * value_head_dim);
    a chunked prefill kernel does more arithmetic than this (intra-chunk products), not counted.
    MoE: the router, top_k routed experts, shared experts and their gate (1 x hidden).
    """
    checked_model(model)
    tokens = integer(tokens, "tokens", minimum=0)
    context = integer(context, "context", minimum=0)
    causal = member(causal, Causal, "causal")
    lm = member(lm_head, LmHead, "lm_head")
    form = member(mla, MlaForm, "mla")
    total = 0
    for block in model.blocks:
        total += block.count * (_mixer_flops(block.mixer, model.hidden, tokens, context, causal, form)
                                + _ffn_flops(block.ffn, model.hidden, tokens))
    return total + 2 * model.hidden * model.vocab * _lm_positions(tokens, lm)

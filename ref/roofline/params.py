"""Parameter counts of a decoder-only model, as Hugging Face transformers builds it.

Two views of one count:

  decoder_params(layers, hidden, heads, kv_heads, ...) -> (total, active)
      the closed form for a GQA decoder (Llama, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE),
      over int64 arrays: the catalog op `roofline.params.decoder`;
  tensors(model) -> every weight tensor of a `Model` with its shape and how many
      copies exist (count) and are read per token (active); param_counts(model) sums
      them for any mixer and FFN kind (attention, MLA, Mamba-2, Gated DeltaNet; dense
      MLP, MoE).

Counted: every parameter transformers registers (`model.num_parameters()`), the
embedding and the LM head included (the LM head only when not tied). Not counted:
buffers (RoPE frequencies; DeepSeek-V3's e_score_correction_bias, a buffer in
transformers though the checkpoint stores it: `MoE.router_bias` adds it to the
checkpoint's bytes, not to the parameters) and layers transformers does not build
(DeepSeek-V3's multi-token-prediction layer).

Active parameters: those one token's forward reads: everything but the routed
experts it is not sent to (top_k of experts per MoE layer); the embedding and the
LM head are included, as Qwen3-30B-A3B's published 3.3B active counts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ref.roofline.config import MLA, MLP, Attention, Block, GatedDeltaNet, Mamba2, Model, MoE
from ref.roofline.counting import checked_model, counts, decoder_config, flags, same_shape, to_int64

__all__ = ["ParamCounts", "Tensor", "decoder_params", "param_counts", "tensors"]


def decoder_params(layers, hidden, heads, kv_heads, head_dim, intermediate, experts, top_k, expert_intermediate,
                   shared_intermediate, vocab, tied, qk_norm, bias, shared_gate) -> tuple[np.ndarray, np.ndarray]:
    """(total, active) parameters of a GQA decoder, elementwise over int64 arrays.

    embedding vocab*hidden; LM head vocab*hidden unless tied; final norm hidden; per layer
      attention  q hidden*heads*head_dim, k and v hidden*kv_heads*head_dim each,
                 o heads*head_dim*hidden, (heads + 2*kv_heads)*head_dim biases if bias
                 (Qwen2's q/k/v biases), 2*head_dim if qk_norm (Qwen3's q and k norms);
      norms      2*hidden (before attention, before the FFN);
      FFN        dense (experts == 0): 3*hidden*intermediate (SwiGLU: gate, up, down);
                 MoE (experts > 0, intermediate 0): router hidden*experts,
                 experts*3*hidden*expert_intermediate, shared expert
                 3*hidden*shared_intermediate, its sigmoid gate hidden if shared_gate.
    active: total with top_k experts in place of experts.

    kv_heads >= 1 divides heads; a dense model has top_k, expert_intermediate,
    shared_intermediate 0 and shared_gate False; an MoE model 1 <= top_k <= experts."""
    op = "roofline.params.decoder"
    v = counts(op, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
               intermediate=intermediate, experts=experts, top_k=top_k, expert_intermediate=expert_intermediate,
               shared_intermediate=shared_intermediate, vocab=vocab)
    f = flags(op, tied=tied, qk_norm=qk_norm, bias=bias, shared_gate=shared_gate)
    same_shape(op, **v, **f)
    v.update((name, arr.astype(np.int64).astype(object)) for name, arr in f.items())  # 0 and 1 in the sums
    decoder_config(op, v)
    h, hd = v["hidden"], v["head_dim"]
    attention = (h * (v["heads"] + v["kv_heads"]) * hd * 2 + v["bias"] * (v["heads"] + 2 * v["kv_heads"]) * hd
                 + v["qk_norm"] * 2 * hd)
    moe = v["experts"] > 0
    shared = (h * v["experts"] + 3 * h * v["shared_intermediate"] + v["shared_gate"] * h) * moe
    dense = 3 * h * v["intermediate"]
    routed_total = v["experts"] * 3 * h * v["expert_intermediate"]
    routed_active = v["top_k"] * 3 * h * v["expert_intermediate"]
    outer = v["vocab"] * h * (2 - v["tied"]) + h
    per_layer = attention + 2 * h + dense + shared
    total = outer + v["layers"] * (per_layer + routed_total)
    active = outer + v["layers"] * (per_layer + routed_active)
    return to_int64(total, op, v), to_int64(active, op, v)


@dataclass(frozen=True)
class Tensor:
    """One weight tensor: rows x cols (a Linear's [out, in]: blocks run along cols, the
    reduction axis; a vector is 1 x n), `count` copies in the model, `active` of them
    read per token (a routed expert's matrices: top_k per layer, not experts)."""

    name: str
    component: str
    rows: int
    cols: int
    count: int
    active: int

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count


COMPONENTS = ("embedding", "lm_head", "norm", "attention", "bias", "mamba", "gated_delta", "conv", "state", "mlp",
              "router", "experts", "shared_experts")


def _t(name: str, component: str, rows: int, cols: int, count: int = 1, active: int | None = None) -> Tensor:
    return Tensor(name, component, rows, cols, count, count if active is None else active)


def _attention(m: Attention, h: int) -> list[Tensor]:
    q = m.heads * m.head_dim
    gate = m.heads * m.dv if m.output_gate else 0
    kv = m.kv_heads * m.head_dim
    out = [_t("q_proj", "attention", q + gate, h), _t("k_proj", "attention", kv, h),
           _t("v_proj", "attention", m.kv_heads * m.dv, h), _t("o_proj", "attention", h, m.heads * m.dv)]
    if m.bias:
        out += [_t("q_proj.bias", "bias", 1, q + gate), _t("k_proj.bias", "bias", 1, kv),
                _t("v_proj.bias", "bias", 1, m.kv_heads * m.dv)]
    if m.out_bias:
        out.append(_t("o_proj.bias", "bias", 1, h))
    if m.qk_norm:
        out += [_t("q_norm", "norm", 1, m.head_dim), _t("k_norm", "norm", 1, m.head_dim)]
    return out


def _mla(m: MLA, h: int) -> list[Tensor]:
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        q = [_t("q_a_proj", "attention", m.q_lora_rank, h), _t("q_a_layernorm", "norm", 1, m.q_lora_rank),
             _t("q_b_proj", "attention", m.heads * qk, m.q_lora_rank)]
    else:
        q = [_t("q_proj", "attention", m.heads * qk, h)]
    return q + [_t("kv_a_proj_with_mqa", "attention", m.kv_lora_rank + m.qk_rope_head_dim, h),
                _t("kv_a_layernorm", "norm", 1, m.kv_lora_rank),
                _t("kv_b_proj", "attention", m.heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
                _t("o_proj", "attention", h, m.heads * m.v_head_dim)]


def _mamba2(m: Mamba2, h: int) -> list[Tensor]:
    inner = m.heads * m.head_dim
    conv_dim = inner + 2 * m.groups * m.d_state
    out = [_t("in_proj", "mamba", inner + conv_dim + m.heads, h),  # z, (x, B, C), dt
           _t("conv1d", "conv", conv_dim, m.conv_kernel)]
    if m.conv_bias:
        out.append(_t("conv1d.bias", "conv", 1, conv_dim))
    return out + [_t(name, "state", 1, m.heads) for name in ("dt_bias", "A_log", "D")] + [
        _t("norm", "norm", 1, inner), _t("out_proj", "mamba", h, inner)]


def _gated_delta(m: GatedDeltaNet, h: int) -> list[Tensor]:
    key, value = m.key_heads * m.key_head_dim, m.value_heads * m.value_head_dim
    return [_t("in_proj_qkvz", "gated_delta", 2 * key + 2 * value, h),
            _t("in_proj_ba", "gated_delta", 2 * m.value_heads, h),
            _t("conv1d", "conv", 2 * key + value, m.conv_kernel),
            _t("dt_bias", "state", 1, m.value_heads), _t("A_log", "state", 1, m.value_heads),
            _t("norm", "norm", 1, m.value_head_dim),  # one gated RMSNorm shared by the heads
            _t("out_proj", "gated_delta", h, value)]


def _mlp(width: int, gated: bool, h: int, component: str, count: int = 1, active: int | None = None
         ) -> list[Tensor]:
    names = ("gate_proj", "up_proj") if gated else ("up_proj",)
    return [_t(n, component, width, h, count, active) for n in names] + [
        _t("down_proj", component, h, width, count, active)]


def _moe(m: MoE, h: int) -> list[Tensor]:
    out = [_t("router", "router", m.experts, h)]
    out += _mlp(m.expert_intermediate, m.gated, h, "experts", m.experts, m.top_k)
    if m.shared_intermediate:
        out += _mlp(m.shared_intermediate, m.gated, h, "shared_experts")
    if m.shared_gate:
        out.append(_t("shared_expert_gate", "router", 1, h))
    return out


MIXERS = {Attention: _attention, MLA: _mla, Mamba2: _mamba2, GatedDeltaNet: _gated_delta}


def _block(block: Block, h: int) -> list[Tensor]:
    parts = []
    if block.mixer is not None:
        parts += [_t("mixer_norm", "norm", 1, h)] + MIXERS[type(block.mixer)](block.mixer, h)
    if isinstance(block.ffn, MLP):
        parts += [_t("ffn_norm", "norm", 1, h)] + _mlp(block.ffn.intermediate, block.ffn.gated, h, "mlp")
    elif isinstance(block.ffn, MoE):
        parts += [_t("ffn_norm", "norm", 1, h)] + _moe(block.ffn, h)
    return [Tensor(t.name, t.component, t.rows, t.cols, t.count * block.count, t.active * block.count)
            for t in parts]


def tensors(model: Model) -> list[Tensor]:
    """Every weight tensor of `model` (embedding, the blocks' in layer order, final norm,
    LM head unless tied), each with its copies over the block's layers."""
    checked_model(model)
    h = model.hidden
    out = [_t("embed_tokens", "embedding", model.vocab, h)]
    for i, block in enumerate(model.blocks):
        out += [Tensor(f"blocks.{i}.{t.name}", t.component, t.rows, t.cols, t.count, t.active)
                for t in _block(block, h)]
    out.append(_t("norm", "norm", 1, h))
    if not model.tied_embeddings:
        out.append(_t("lm_head", "lm_head", model.vocab, h))
    return out


@dataclass(frozen=True)
class ParamCounts:
    """A model's parameters: total, active per token, the embedding's and the LM head's
    (0 when tied), and the total by component (COMPONENTS)."""

    total: int
    active: int
    embedding: int
    lm_head: int
    by_component: dict = field(default_factory=dict)


def param_counts(model: Model) -> ParamCounts:
    """The parameter counts of `model` (module docstring: what is counted)."""
    ts = tensors(model)
    by = {c: 0 for c in COMPONENTS}
    for t in ts:
        by[t.component] += t.params
    return ParamCounts(total=sum(t.params for t in ts), active=sum(t.rows * t.cols * t.active for t in ts),
                       embedding=by["embedding"], lm_head=by["lm_head"], by_component=by)

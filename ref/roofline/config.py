"""What a model is, for the accounting: a stack of blocks, each a sequence mixer
(attention of some kind, or a recurrent layer) and a feed-forward network, repeated.

    Model(name, hidden, vocab, blocks=(Block(count, mixer, ffn), ...), tied_embeddings)

Every field is a count from the model's configuration (config.json): nothing here
is derived, so a table entry is checkable against its source line by line. The
accounting functions (params, kv, flops) read these; `ref.roofline.hf.from_hf_config`
builds one from a Hugging Face config.json; users build their own the same way.

Mixers:
  Attention      multi-head / grouped-query attention (MHA when kv_heads == heads)
  MLA            multi-head latent attention (DeepSeek-V2/V3): caches a latent + a RoPE key
  Mamba2         Mamba-2's SSD layer: a fixed state [heads, head_dim, d_state] per sequence
  GatedDeltaNet  gated delta-rule linear attention (Qwen3-Next): state [v_heads, k_dim, v_dim]
FFNs:
  MLP            dense: gated (SwiGLU, three matrices) or not (two matrices)
  MoE            routed experts (top_k of experts active per token) plus shared experts
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

__all__ = ["MLA", "MLP", "Attention", "Block", "GatedDeltaNet", "Mamba2", "Model", "MoE", "Source"]


@dataclass(frozen=True)
class Source:
    """Where a figure comes from: a document (URL), its title, and the words that state
    it (quoted, or the config.json keys read), so a reader can check the entry."""

    url: str
    title: str
    quote: str = ""


def _positive(owner: str, **counts: int) -> None:
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{owner}.{name}: expected a non-negative int, got {value!r}")


@dataclass(frozen=True)
class Attention:
    """MHA/GQA/MQA: q [heads, head_dim], k [kv_heads, head_dim], v [kv_heads, v_head_dim].

    qk_norm: an RMSNorm of head_dim on q and k (Qwen3); bias: q/k/v projection biases
    (Qwen2); output_gate: q_proj also produces a sigmoid gate of heads * v_head_dim
    (Qwen3-Next's gated attention); out_bias: an o_proj bias too (Llama's and Qwen3's
    attention_bias puts a bias on all four projections; Qwen2's only on q, k and v)."""

    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int | None = None  # None: head_dim
    qk_norm: bool = False
    bias: bool = False
    output_gate: bool = False
    window: int | None = None  # sliding window (tokens a query sees, itself included); None: full
    out_bias: bool = False

    def __post_init__(self):
        _positive("Attention", heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim)
        if self.kv_heads == 0 or self.heads % self.kv_heads:
            raise ValueError(f"Attention: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    @property
    def dv(self) -> int:
        return self.head_dim if self.v_head_dim is None else self.v_head_dim


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434): the cache holds
    c_kv [kv_lora_rank] and k_pe [qk_rope_head_dim] per token, shared by all heads.
    q_lora_rank 0: queries projected directly (no low-rank query)."""

    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self):
        _positive("MLA", heads=self.heads, q_lora_rank=self.q_lora_rank, kv_lora_rank=self.kv_lora_rank,
                  qk_nope_head_dim=self.qk_nope_head_dim, qk_rope_head_dim=self.qk_rope_head_dim,
                  v_head_dim=self.v_head_dim)


@dataclass(frozen=True)
class Mamba2:
    """Mamba-2 (arXiv 2405.21060): d_inner = heads * head_dim, B and C of d_state per
    group, a causal conv1d of conv_kernel taps over x, B and C (conv_bias: with a bias
    per channel, as Mamba-2 and Nemotron-H have by default)."""

    heads: int
    head_dim: int
    d_state: int
    groups: int
    conv_kernel: int
    conv_bias: bool = True

    def __post_init__(self):
        _positive("Mamba2", heads=self.heads, head_dim=self.head_dim, d_state=self.d_state, groups=self.groups,
                  conv_kernel=self.conv_kernel)


@dataclass(frozen=True)
class GatedDeltaNet:
    """Gated DeltaNet (arXiv 2412.06464) as Qwen3-Next uses it: k heads of key_head_dim,
    v heads of value_head_dim, a causal conv1d of conv_kernel taps over q, k and v."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    def __post_init__(self):
        _positive("GatedDeltaNet", key_heads=self.key_heads, value_heads=self.value_heads,
                  key_head_dim=self.key_head_dim, value_head_dim=self.value_head_dim, conv_kernel=self.conv_kernel)


@dataclass(frozen=True)
class MLP:
    """A dense feed-forward network: gated (SwiGLU: gate, up, down) or plain (up, down)."""

    intermediate: int
    gated: bool = True

    def __post_init__(self):
        _positive("MLP", intermediate=self.intermediate)


@dataclass(frozen=True)
class MoE:
    """Routed experts, each an MLP of expert_intermediate; top_k of them per token; plus
    shared experts (one MLP of shared_intermediate, always active; 0 for none).
    shared_gate: a sigmoid gate of 1 x hidden on the shared expert (Qwen3-Next);
    router_bias: a per-expert routing bias (DeepSeek-V3's e_score_correction_bias)."""

    experts: int
    top_k: int
    expert_intermediate: int
    shared_intermediate: int = 0
    gated: bool = True
    shared_gate: bool = False
    router_bias: bool = False

    def __post_init__(self):
        _positive("MoE", experts=self.experts, top_k=self.top_k, expert_intermediate=self.expert_intermediate,
                  shared_intermediate=self.shared_intermediate)
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"MoE: expected 1 <= top_k <= experts, got top_k={self.top_k}, experts={self.experts}")


Mixer = Union[Attention, MLA, Mamba2, GatedDeltaNet, None]
FFN = Union[MLP, MoE, None]


@dataclass(frozen=True)
class Block:
    """`count` identical layers, each a mixer then an FFN (either may be None: Nemotron-H
    interleaves mixer-only and FFN-only layers). Blocks are listed in layer order only
    where it matters to the reader; the accounting sums over them."""

    count: int
    mixer: Mixer
    ffn: FFN

    def __post_init__(self):
        _positive("Block", count=self.count)
        if self.mixer is None and self.ffn is None:
            raise ValueError("Block: a layer needs a mixer or an FFN")


@dataclass(frozen=True)
class Model:
    """A decoder-only language model: embedding [vocab, hidden], the blocks, a final
    norm, and an LM head [vocab, hidden] (the embedding itself when tied_embeddings)."""

    name: str
    hidden: int
    vocab: int
    blocks: tuple[Block, ...]
    tied_embeddings: bool = False
    source: Source | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # anything else the source states

    def __post_init__(self):
        _positive("Model", hidden=self.hidden, vocab=self.vocab)
        if not self.blocks:
            raise ValueError(f"Model {self.name}: expected at least one block")
        object.__setattr__(self, "blocks", tuple(self.blocks))

    @property
    def layers(self) -> int:
        return sum(b.count for b in self.blocks)

"""KV-cache compressions stacked: bytes stored and bytes read per decode step for one
sequence, each row adding one technique to the row above (the tutorial's Qwen3-8B at
1M tokens: GQA 147 GB, + MHA2MLA 46, + 4-bit 11.5, + sparse reads ~1.2 GB read).

Rows of `stacked_kv(model, tokens)` (model: its attention layers are GQA, one shape):
  GQA                   kv_bytes: 2 * kv_heads * head_dim elements per layer-token, 16 bits
  + MHA2MLA             a latent of `latent` elements plus the kept RoPE keys, `rope_dims`
                        elements, per layer-token, 16 bits (Ji et al., arXiv 2502.14837:
                        the converted layer caches the latent c_kv [r] and, per KV head,
                        the 2p dims of its p kept RoPE frequency pairs; Qwen3-8B's 128 is
                        8 KV heads x 2 x 8 pairs; with r = 512: 640 elements, where GQA caches 2048)
  + 4-bit               the same elements at `bits` bits, no scales (the tutorial's figure)
  + 4-bit with scales   plus a float16 scale and a float16 zero point per group of `group`
                        elements of a token (KIVI's per-token grouping of values, arXiv
                        2402.02750; the latent has no per-channel key half to group
                        across tokens)
  + sparse reads        stored as above; read: `read_fraction` of it per decode step
                        (the tutorial's ~1.2 GB is 10%)
  + NSA reads           NSA's published configuration (Yuan et al., arXiv 2502.11089,
                        section 4.1: compression blocks l = 32 with stride d = 16,
                        n = 16 selected blocks of l' = 64, a window of w = 512): a query
                        reads floor((T - l) / d) + 1 compressed entries, n l' selected
                        tokens and w window tokens (counted apart, as NSA's kernels load
                        them); the compressed entries are stored
                        too. NSA gives each branch its own keys and values; here all
                        three read the one stacked cache (a lower bound on NSA's bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ref.arguments import integer, real
from ref.roofline.config import Attention, Model
from ref.roofline.kv import kv_bytes, kv_mla_bytes

__all__ = ["NSA", "Row", "nsa_read_tokens", "stacked_kv"]


@dataclass(frozen=True)
class Row:
    name: str
    stored: float  # bytes kept for the sequence
    read: float  # bytes one decode step reads
    note: str = ""


@dataclass(frozen=True)
class NSA:
    """NSA's sparsity configuration (arXiv 2502.11089, section 4.1)."""

    block: int = 32  # l: tokens per compression block
    stride: int = 16  # d: between compression blocks
    selected: int = 16  # n: selected blocks (the initial one and two local ones included)
    selection_block: int = 64  # l'
    window: int = 512  # w


def nsa_read_tokens(tokens: int, nsa: NSA = NSA()) -> tuple[int, int]:
    """(compressed entries, original tokens) one NSA query at position `tokens` reads."""
    tokens = integer(tokens, "tokens", minimum=0)
    compressed = (tokens - nsa.block) // nsa.stride + 1 if tokens >= nsa.block else 0
    original = min(tokens, nsa.selected * nsa.selection_block) + min(tokens, nsa.window)
    return compressed, original


def _attention_layers(model: Model) -> int:
    shapes = {(b.mixer.kv_heads, b.mixer.head_dim, b.mixer.dv) for b in model.blocks if isinstance(b.mixer, Attention)}
    if len(shapes) != 1:
        raise ValueError(f"model: expected attention layers of one GQA shape, {model.name} has {sorted(shapes)}")
    return sum(b.count for b in model.blocks if isinstance(b.mixer, Attention))


def stacked_kv(model: Model, tokens: int = 1_000_000, *, latent: int = 512, rope_dims: int = 128, bits: int = 4,
               group: int = 32, read_fraction: float = 0.1, nsa: NSA = NSA()) -> list[Row]:
    """The stacked table for one sequence of `tokens` tokens (see the module docstring)."""
    tokens = integer(tokens, "tokens", minimum=0)
    group = integer(group, "group", minimum=1)
    read_fraction = real(read_fraction, "read_fraction")
    if read_fraction > 1:
        raise ValueError(f"read_fraction: expected a fraction in (0, 1], got {read_fraction}")
    layers = _attention_layers(model)
    gqa = kv_bytes(model, tokens)

    def latent_bytes(n: int, element_bits: int) -> int:
        return int(kv_mla_bytes(n, layers, latent, rope_dims, element_bits))

    mla16, mla4 = latent_bytes(tokens, 16), latent_bytes(tokens, bits)
    scales = -(-tokens * layers * -(-(latent + rope_dims) // group) * 32 // 8)
    compressed, original = nsa_read_tokens(tokens, nsa)
    per_entry = latent_bytes(1, bits)
    nsa_stored = mla4 + compressed * per_entry
    nsa_read = (compressed + original) * per_entry
    width = latent + rope_dims
    return [
        Row("GQA, bf16", gqa, gqa),
        Row("+ MHA2MLA (latent + RoPE keys), bf16", mla16, mla16, f"{width} elements per layer-token"),
        Row(f"+ {bits}-bit", mla4, mla4, "codes only"),
        Row(f"+ {bits}-bit with scales", mla4 + scales, mla4 + scales,
            f"fp16 scale and zero per {group} elements of a token"),
        Row(f"+ sparse reads ({read_fraction:.0%})", mla4, mla4 * read_fraction, "codes only, as the tutorial"),
        Row("+ NSA reads (l 32, d 16, 16 x 64 selected, window 512)", nsa_stored, nsa_read,
            f"{compressed} compressed + {original} tokens read: {nsa_read / max(nsa_stored, 1):.1%} of the stored"),
    ]

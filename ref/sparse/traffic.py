"""Bytes one decode step reads from the KV cache, for dense attention and each sparse
method (spec/sparse.md#traffic): one new token of one sequence, one attention layer
(multiply by the layers and the batch), as exact integers.

`tokens` L is the number of keys the decoding query attends, its own included (the
cache length after the new token is appended): L >= 1. Every count is an integer
array of one shape (ref.roofline.counting: any integer dtype, not bool, 0-d allowed,
no broadcasting), computed in Python ints; bits are summed over the whole step and
rounded up to bytes once, ceil(bits / 8), as the roofline area counts bytes
(spec/roofline.md). A result past 2^63 - 1 is a ValueError, never wrapped.

  dense_bytes   L * Hkv * (D + Dv) * bits                       (MLA: Hkv 1, D 576, Dv 0)
  block_bytes   the selected blocks' tokens (the query's own, partial, last block among
                them), plus the block list read: its indices and its count (or indptr)
  nsa_bytes     NSA (Yuan et al., arXiv 2502.11089): Tc compressed entries, n selected
                blocks of l', the window w; overlaps read twice ("reread") or once ("union")
  moba_bytes    MoBA (Lu et al., arXiv 2502.13189): top-k chunks (the current one
                counted), plus the gating's keys (recomputed means) or cached chunk means
  dsa_bytes     DeepSeek-V3.2's sparse attention: the lightning indexer's FP8 keys and
                scales for all L tokens, plus the top-k tokens' MLA latent and RoPE key

`table` and `render` build the comparison the spec page prints.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ref.arguments import integer, member
from ref.roofline.counting import at_least, ceil_div, counts, to_int64

__all__ = ["Gating", "Last", "Layout", "Overlap", "Row", "TABLE_CONTEXTS", "block_bytes", "dense_bytes", "dsa_bytes",
           "moba_bytes", "nsa_bytes", "nsa_tokens", "render", "table"]


class Last(enum.Enum):
    """Whether the block holding the query (the last, possibly partial one) is selected."""

    SELECTED = "selected"  # decode: every method forces the query's own block (local, current chunk)
    UNSELECTED = "unselected"  # the selection holds full blocks only


class Layout(enum.Enum):
    """How a block list is stored, which sets the entries read besides the indices."""

    LISTS = "lists"  # kv_indices plus kv_num_blocks (FlashAttention, torch flex): one count
    CSR = "csr"  # indices plus indptr[r], indptr[r + 1] (FlashInfer's BSR): two entries


class Overlap(enum.Enum):
    """How NSA's selected and window tokens that coincide are counted."""

    REREAD = "reread"  # each branch reads its own (the paper's separate kernels and per-branch K/V)
    UNION = "union"  # a fused kernel over shared K/V reads each token once


class Gating(enum.Enum):
    """What MoBA's gate reads to score the chunks."""

    RECOMPUTE = "recompute"  # the reference: every chunk's mean from K at every step (all L keys)
    CACHED = "cached"  # one mean key cached per complete past chunk


def _selected_tokens(tokens, size, picked):
    """Tokens in `picked` of the ceil(L / size) blocks, the last (partial) one among them
    (picked clipped to [1, blocks])."""
    blocks = ceil_div(tokens, size)
    picked = np.minimum(picked, blocks)
    return (picked - 1) * size + tokens - (blocks - 1) * size


def dense_bytes(tokens, kv_heads, head_dim, v_head_dim, element_bits) -> np.ndarray:
    """Dense attention reads every key and value: ceil(L * Hkv * (D + Dv) * bits / 8).

    MLA (absorbed, as decode runs it) is one KV head of kv_lora_rank + qk_rope_head_dim
    elements with v_head_dim 0: the value is the latent, read once with the key."""
    op = "sparse.traffic.dense"
    v = counts(op, tokens=tokens, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim,
               element_bits=element_bits)
    at_least(op, 1, tokens=v["tokens"])
    bits = v["tokens"] * v["kv_heads"] * (v["head_dim"] + v["v_head_dim"]) * v["element_bits"]
    return to_int64(ceil_div(bits, 8), op, v)


def block_bytes(tokens, block_size, blocks, kv_heads, head_dim, v_head_dim, element_bits, index_bits, *,
                last: str = "selected", layout: str = "lists") -> np.ndarray:
    """Block-sparse attention with one list of `blocks` key blocks per KV head.

    nb = ceil(L / block_size) blocks, the last partial when block_size does not divide L.
    last "selected": b = min(blocks, nb) blocks read, the query's own among them:
        tokens = (b - 1) * block_size + (L - (nb - 1) * block_size)
    last "unselected": b = min(blocks, nb - 1) full blocks, tokens = b * block_size.
    Per KV head: tokens * (D + Dv) elements of element_bits, and the list: b indices plus
    one count ("lists") or two indptr entries ("csr"), index_bits each.
    """
    op = "sparse.traffic.block"
    last, layout = member(last, Last, "last"), member(layout, Layout, "layout")
    v = counts(op, tokens=tokens, block_size=block_size, blocks=blocks, kv_heads=kv_heads, head_dim=head_dim,
               v_head_dim=v_head_dim, element_bits=element_bits, index_bits=index_bits)
    at_least(op, 1, tokens=v["tokens"], block_size=v["block_size"], blocks=v["blocks"])
    t, size = v["tokens"], v["block_size"]
    if last is Last.SELECTED:
        picked = np.minimum(v["blocks"], ceil_div(t, size))
        read = _selected_tokens(t, size, picked)
    else:
        picked = np.minimum(v["blocks"], ceil_div(t, size) - 1)
        read = picked * size
    entries = picked + (1 if layout is Layout.LISTS else 2)
    bits = v["kv_heads"] * (read * (v["head_dim"] + v["v_head_dim"]) * v["element_bits"] + entries * v["index_bits"])
    return to_int64(ceil_div(bits, 8), op, v)


def _nsa_entries(t, l, d, l_sel, n, local, w, overlap: Overlap):
    """Entries (compressed + original tokens) one KV head reads; Python ints or object arrays."""
    compressed = np.where(t >= l, (t - l) // d + 1, 0)  # complete compression blocks only
    selected = _selected_tokens(t, l_sel, n)
    window = np.minimum(w, t)
    if overlap is Overlap.REREAD:
        return compressed + selected + window
    local_tokens = _selected_tokens(t, l_sel, np.minimum(local, n))  # the forced local blocks: a suffix
    return compressed + np.minimum(t, selected + window - np.minimum(local_tokens, window))


def nsa_bytes(tokens, cmp_block, cmp_stride, sel_block, selected, local, window, kv_heads, head_dim, v_head_dim,
              element_bits, *, overlap: str = "reread") -> np.ndarray:
    """NSA's three branches (arXiv 2502.11089, section 3.3; decoding, section 5.2).

    compressed  Tc = floor((L - l) / d) + 1 entries if L >= l, else 0: only complete
                blocks of l tokens with stride d exist (l = cmp_block, d = cmp_stride)
    selected    n = selected blocks of l' = sel_block tokens, the query's own (local,
                forced: the last `local` blocks) among them: block_bytes' count
    window      min(w, L) tokens
    overlap "reread": Tc + selected + window entries; "union": each original token once,
    Tc + min(L, selected + window - min(local tokens, window)): the forced local blocks
    lie in the window, the other picks outside it (the most a fused kernel reads).
    Each entry is a key of D and a value of Dv elements per KV head.
    """
    op = "sparse.traffic.nsa"
    overlap = member(overlap, Overlap, "overlap")
    v = counts(op, tokens=tokens, cmp_block=cmp_block, cmp_stride=cmp_stride, sel_block=sel_block,
               selected=selected, local=local, window=window, kv_heads=kv_heads, head_dim=head_dim,
               v_head_dim=v_head_dim, element_bits=element_bits)
    at_least(op, 1, tokens=v["tokens"], cmp_block=v["cmp_block"], cmp_stride=v["cmp_stride"],
             sel_block=v["sel_block"], selected=v["selected"], local=v["local"])
    if np.any(v["local"] > v["selected"]):
        raise ValueError(f"{op}: local: expected local <= selected (the forced blocks are among the n selected)")
    entries = _nsa_entries(v["tokens"], v["cmp_block"], v["cmp_stride"], v["sel_block"], v["selected"], v["local"],
                           v["window"], overlap)
    bits = v["kv_heads"] * entries * (v["head_dim"] + v["v_head_dim"]) * v["element_bits"]
    return to_int64(ceil_div(bits, 8), op, v)


def nsa_tokens(tokens: int, *, cmp_block: int = 32, cmp_stride: int = 16, sel_block: int = 64, selected: int = 16,
               local: int = 2, window: int = 512, overlap: str = "reread") -> int:
    """Entries (compressed + original tokens) one NSA query reads per KV head at context
    `tokens`; defaults: the paper's configuration (section 4.1). The paper's Table 4
    counts L / d compressed tokens, one more than the Tc complete blocks at l = 2d."""
    args = {name: integer(value, name, minimum=1) for name, value in dict(
        tokens=tokens, cmp_block=cmp_block, cmp_stride=cmp_stride, sel_block=sel_block, selected=selected,
        local=local).items()}
    window = integer(window, "window", minimum=0)
    if args["local"] > args["selected"]:
        raise ValueError("local: expected local <= selected")
    exact = {k: np.asarray(v, dtype=object) for k, v in args.items()}  # Python ints: no int64 wrap
    return int(_nsa_entries(exact["tokens"], exact["cmp_block"], exact["cmp_stride"], exact["sel_block"],
                            exact["selected"], exact["local"], np.asarray(window, dtype=object),
                            member(overlap, Overlap, "overlap")))


def moba_bytes(tokens, chunk_size, top_k, kv_heads, head_dim, v_head_dim, element_bits, *,
               gating: str = "recompute") -> np.ndarray:
    """MoBA (arXiv 2502.13189): nc = ceil(L / B) chunks of B = chunk_size tokens, the
    last partial; c = min(top_k, nc) chunks attended, the current one (always selected)
    counted in top_k: (c - 1) * B + (L - (nc - 1) * B) tokens of K and V per KV head.
    The gate s = q . mean(K_chunk) reads, per KV head, keys of D elements:
      "recompute"  all L keys (the reference recomputes every chunk's mean each step)
      "cached"     the nc - 1 past chunks' mean keys (the current chunk needs no gate)
    """
    op = "sparse.traffic.moba"
    gating = member(gating, Gating, "gating")
    v = counts(op, tokens=tokens, chunk_size=chunk_size, top_k=top_k, kv_heads=kv_heads, head_dim=head_dim,
               v_head_dim=v_head_dim, element_bits=element_bits)
    at_least(op, 1, tokens=v["tokens"], chunk_size=v["chunk_size"], top_k=v["top_k"])
    t, size, d = v["tokens"], v["chunk_size"], v["head_dim"]
    attended = _selected_tokens(t, size, v["top_k"])
    gate_keys = t if gating is Gating.RECOMPUTE else ceil_div(t, size) - 1
    bits = v["kv_heads"] * (attended * (d + v["v_head_dim"]) + gate_keys * d) * v["element_bits"]
    return to_int64(ceil_div(bits, 8), op, v)


def dsa_bytes(tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim, index_bits, index_group,
              index_scale_bits) -> np.ndarray:
    """DeepSeek Sparse Attention (DeepSeek-V3.2-Exp): the lightning indexer scores every
    token from its cache of one key of Di = index_head_dim elements, index_bits each
    (FP8: 8), with one scale of index_scale_bits per index_group elements (float32 per
    128: 132 bytes a token in V3.2); the attention then reads min(top_k, L) tokens' MLA
    entries (kv_lora_rank latent + qk_rope_head_dim RoPE key, element_bits each, read
    once as key and value):
        L * (Di * index_bits + ceil(Di / index_group) * index_scale_bits)
          + min(top_k, L) * (kv_lora_rank + qk_rope_head_dim) * element_bits   bits
    """
    op = "sparse.traffic.dsa"
    v = counts(op, tokens=tokens, top_k=top_k, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
               element_bits=element_bits, index_head_dim=index_head_dim, index_bits=index_bits,
               index_group=index_group, index_scale_bits=index_scale_bits)
    at_least(op, 1, tokens=v["tokens"], top_k=v["top_k"], index_group=v["index_group"])
    t, di = v["tokens"], v["index_head_dim"]
    indexer = t * (di * v["index_bits"] + ceil_div(di, v["index_group"]) * v["index_scale_bits"])
    attended = np.minimum(v["top_k"], t) * (v["kv_lora_rank"] + v["qk_rope_head_dim"]) * v["element_bits"]
    return to_int64(ceil_div(indexer + attended, 8), op, v)


# ---------------------------------------------------------------------------- the spec's table

TABLE_CONTEXTS = (8192, 32768, 131072)
GQA = dict(kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16)  # Qwen3-8B's attention layer, bf16
MLA = dict(kv_heads=1, head_dim=576, v_head_dim=0, element_bits=16)  # DeepSeek-V3.2's MLA entry, bf16
NSA = dict(cmp_block=32, cmp_stride=16, sel_block=64, selected=16, local=2, window=512)  # the paper, section 4.1
MOBA = dict(chunk_size=4096, top_k=12)  # MoBA's examples/llama.py defaults (commit 61e456b)
DSA = dict(top_k=2048, kv_lora_rank=512, qk_rope_head_dim=64, element_bits=16, index_head_dim=128, index_bits=8,
           index_group=128, index_scale_bits=32)  # DeepSeek-V3.2-Exp config.json and inference/model.py


@dataclass(frozen=True)
class Row:
    """One method's bytes per decode step at each context, and its dense baseline's."""

    method: str
    config: str
    read: tuple[int, ...]
    dense: tuple[int, ...]


def _block_row(t: int) -> int:
    blocks = max(ceil_div(t, 64) // 16, 1)  # a sixteenth of the blocks of 64
    return int(block_bytes(t, 64, blocks, index_bits=32, **GQA))


def table(contexts: tuple[int, ...] = TABLE_CONTEXTS) -> list[Row]:
    """Every method at each context (one layer, one sequence), against dense attention
    over the same cache: GQA rows against Qwen3-8B's layer, DSA against dense MLA."""
    contexts = tuple(integer(t, "contexts", minimum=1) for t in contexts)

    def row(method: str, config: str, fn, base) -> Row:
        return Row(method, config, tuple(int(fn(t)) for t in contexts),
                   tuple(int(dense_bytes(t, **base)) for t in contexts))
    return [
        row("dense", "GQA: 8 KV heads x (128 + 128), bf16", lambda t: dense_bytes(t, **GQA), GQA),
        row("block-sparse", "blocks of 64, 1/16 of them, int32 lists", _block_row, GQA),
        row("NSA, reread", "l 32, d 16, 16 x 64 selected, window 512", lambda t: nsa_bytes(t, **NSA, **GQA), GQA),
        row("NSA, union", "the same, shared K/V read once",
            lambda t: nsa_bytes(t, **NSA, **GQA, overlap="union"), GQA),
        row("MoBA, recompute", "chunks of 4096, top-12, means from K", lambda t: moba_bytes(t, **MOBA, **GQA), GQA),
        row("MoBA, cached", "the same, chunk means cached",
            lambda t: moba_bytes(t, **MOBA, **GQA, gating="cached"), GQA),
        row("dense MLA", "DeepSeek-V3.2: 512 + 64, bf16", lambda t: dense_bytes(t, **MLA), MLA),
        row("DSA", "top-2048, indexer 128 FP8 + fp32 scale", lambda t: dsa_bytes(t, **DSA), MLA),
    ]


def render(rows: list[Row], contexts: tuple[int, ...] = TABLE_CONTEXTS) -> str:
    """The markdown table: bytes per layer and sequence, and the fraction of dense."""
    head = "| method | configuration | " + " | ".join(f"{t:,} tokens" for t in contexts) + " |"
    lines = [head, "|---|---|" + "---|" * len(contexts)]
    for r in rows:
        cells = [f"{b:,} ({b / d:.1%})" for b, d in zip(r.read, r.dense)]
        lines.append(f"| {r.method} | {r.config} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

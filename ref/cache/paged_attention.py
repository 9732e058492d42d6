"""Paged attention: attention whose keys and values are read through block tables.

A paged KV cache stores each sequence's keys and values in fixed-size blocks of B
token slots, anywhere in a pool of blocks; sequence s's block table lists its
blocks in order. Token position p of sequence s lives at

    block  = block_tables[s, p // B]
    offset = p % B

and only its first seq_lens[s] positions hold keys (the rest of its last block, and
the table entries past ceil(seq_lens[s] / B), are never read). Sequence s's queries
are the last n_s = cu_seqlens_q[s+1] - cu_seqlens_q[s] positions of the sequence:
one for decode, several for a prefill chunk, aligned to the bottom-right corner when
causal (query i of the chunk sits at key position seq_lens[s] - n_s + i).

    paged_attention(q, K, V, tables, seq_lens, cu_seqlens_q)
        = attend_varlen(q, gather(K), gather(V), cu_seqlens_q, cumsum([0, *seq_lens]))

`gather_kv` builds the packed contiguous keys and values; the attention itself is
`ref.attention.attend_varlen` (spec/attention.md), whose definition (GQA by
contiguous groups, the LSE in natural log, a row that sees no key: output 0 and
LSE -inf) this op inherits. Shapes:

    q            [T, Hq, D]             float: T = cu_seqlens_q[-1] packed query rows
    key_cache    [blocks, B, Hkv, D]    float: vLLM's layout, keys and values separate
    value_cache  [blocks, B, Hkv, Dv]   float
    block_tables [S, M]                 int: entries past a sequence's blocks are free
    seq_lens     [S]                    int: keys per sequence, 0 <= seq_lens[s] <= M * B
    cu_seqlens_q [S + 1]                int: packed query offsets, starting at 0
    -> out [T, Hq, Dv], lse [Hq, T]     float64

Several sequences may list the same block (a shared prefix); blocks no table lists,
and slots past a sequence's length, may hold anything, NaN included.

References: Kwon et al., "Efficient Memory Management for Large Language Model
Serving with PagedAttention", SOSP 2023 (arXiv:2309.06180); vLLM's
paged_attention_v1/v2 and FlashInfer's BatchDecode/BatchPrefill with paged KV.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.attention.attend import attend_varlen
from ref.attention.checks import floats, offsets

__all__ = ["GatheredKV", "gather_kv", "paged_attention", "token_blocks"]


class GatheredKV(NamedTuple):
    """The keys and values of every sequence, packed contiguously."""

    k: NDArray[np.float64]  # [sum(seq_lens), Hkv, D]
    v: NDArray[np.float64]  # [sum(seq_lens), Hkv, Dv]
    cu_seqlens_k: NDArray[np.int64]  # [S + 1]


def _caches(key_cache: ArrayLike, value_cache: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    k, v = floats(key_cache, "key_cache", 4), floats(value_cache, "value_cache", 4)
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"value_cache: expected [blocks, B, Hkv, Dv] with blocks, B, Hkv of key_cache {k.shape}, "
                         f"got {v.shape}")
    if k.shape[1] == 0:
        raise ValueError(f"key_cache: the block size (axis 1) must be at least 1, got shape {k.shape}")
    return k, v


def _lengths(block_tables: ArrayLike, seq_lens: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    tables, lens = np.asarray(block_tables), np.asarray(seq_lens)
    if tables.dtype.kind not in "iu":
        raise TypeError(f"block_tables: expected integer block ids, got {tables.dtype}")
    if lens.dtype.kind not in "iu":
        raise TypeError(f"seq_lens: expected integer lengths, got {lens.dtype}")
    if tables.ndim != 2:
        raise ValueError(f"block_tables: expected [S, M], got shape {tables.shape}")
    if lens.shape != (tables.shape[0],):
        raise ValueError(f"seq_lens: expected one length per block table row, shape ({tables.shape[0]},), "
                         f"got {lens.shape}")
    if np.any(lens < 0):
        raise ValueError(f"seq_lens: expected lengths >= 0, got {lens.tolist()}")
    return tables.astype(np.int64), lens.astype(np.int64)


def token_blocks(block_tables: ArrayLike, seq_lens: ArrayLike, block_size: int,
                 num_blocks: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(block [N], offset [N]) of every token of every sequence, in packed order
    (N = sum(seq_lens)): position p of sequence s is at block_tables[s, p // B],
    slot p % B. Every block a token needs must be listed and lie in [0, num_blocks)."""
    tables, lens = _lengths(block_tables, seq_lens)
    width = tables.shape[1]
    if np.any(lens > width * block_size):
        raise ValueError(f"seq_lens: {lens.tolist()} exceed the {width} blocks of {block_size} slots "
                         f"that block_tables' rows hold ({width * block_size} tokens)")
    seq = np.repeat(np.arange(lens.size), lens)  # [N] each token's sequence
    pos = np.arange(seq.size) - np.repeat(np.cumsum(lens) - lens, lens)  # [N] its position in the sequence
    block = tables[seq, pos // block_size]  # [N]
    bad = (block < 0) | (block >= num_blocks)
    if np.any(bad):
        s, p = int(seq[bad][0]), int(pos[bad][0])
        raise ValueError(f"block_tables: sequence {s} position {p} lies in block {int(block[bad][0])}, "
                         f"outside the cache's {num_blocks} blocks")
    return block, pos % block_size


def gather_kv(key_cache: ArrayLike, value_cache: ArrayLike, block_tables: ArrayLike,
              seq_lens: ArrayLike) -> GatheredKV:
    """Each sequence's seq_lens[s] keys and values read through its block table,
    packed in sequence order, with their offsets cumsum([0, *seq_lens])."""
    k_cache, v_cache = _caches(key_cache, value_cache)
    blocks, size = k_cache.shape[:2]
    block, offset = token_blocks(block_tables, seq_lens, size, blocks)
    lens = np.asarray(seq_lens, np.int64)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return GatheredKV(k_cache[block, offset], v_cache[block, offset], cu)


def paged_attention(q: ArrayLike, key_cache: ArrayLike, value_cache: ArrayLike, block_tables: ArrayLike,
                    seq_lens: ArrayLike, cu_seqlens_q: ArrayLike, *, scale: float | None = None,
                    causal: bool = True) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Attention of each sequence's queries over its keys in the paged cache:
    `attend_varlen` on the gathered keys and values (module docstring).
    Returns out [T, Hq, Dv] and lse [Hq, T] (natural log)."""
    q = floats(q, "q", 3)
    kv = gather_kv(key_cache, value_cache, block_tables, seq_lens)
    cq = offsets(cu_seqlens_q, "cu_seqlens_q")
    if cq.size != kv.cu_seqlens_k.size:
        raise ValueError(f"cu_seqlens_q: expected one offset per sequence and one more ({kv.cu_seqlens_k.size}), "
                         f"got {cq.size}")
    if q.shape[1] % max(kv.k.shape[1], 1) or kv.k.shape[1] == 0:
        raise ValueError(f"key_cache: its {kv.k.shape[1]} KV heads must divide the {q.shape[1]} query heads of q")
    if q.shape[2] != kv.k.shape[2]:
        raise ValueError(f"key_cache: expected head dim {q.shape[2]} like q [T, Hq, D] = {q.shape}, "
                         f"got key_cache {np.shape(key_cache)}")
    return attend_varlen(q, kv.k, kv.v, cq, kv.cu_seqlens_k, scale=scale, causal=causal)

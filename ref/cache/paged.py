"""Paged KV storage: where each token's K and V live in a cache of fixed-size blocks.

A sequence's cache is a list of blocks of `B` tokens (its block table); token `pos`
of sequence `s` lives in block `block_tables[s, pos // B]`, at offset `pos % B`, so
its flat **slot** is

    slot = block_tables[s, pos // B] * B + pos % B

Three operations, all exact (integer arithmetic and bit copies):

  slot_mapping(block_tables, seq_ids, positions, block_size)  -> slots [T] int64
  reshape_and_cache(key, value, slots, ..., layout)           -> (key_cache, value_cache)
  paged_kv_indices(block_tables, seq_lens, block_size)        -> FlashInfer's CSR page table

Slots are int64: a cache past 2^31 slots (2^27 blocks of 16 tokens) overflows int32
slot arithmetic, a bug engines have had. The layouts are vLLM's ([blocks, B, Hkv, D]
for K and V separately, or stacked (2, blocks, B, Hkv, D)) and FlashInfer's paged
caches ([pages, 2, B, Hkv, D] "NHD", [pages, 2, Hkv, B, D] "HND").

References: Kwon et al., "Efficient Memory Management for Large Language Model
Serving with PagedAttention" (arXiv:2309.06180); vLLM's `reshape_and_cache` and
`reshape_and_cache_flash` kernels; FlashInfer's paged KV cache documentation
(https://docs.flashinfer.ai/tutorials/kv_layout.html).
"""

from __future__ import annotations

import enum

import numpy as np

from ref.arguments import choice, integer

__all__ = ["PAD", "Layout", "paged_kv_indices", "reshape_and_cache", "slot_mapping"]

PAD = -1  # a padding token's sequence id, and its slot


class Layout(enum.Enum):
    """Where a block's K and V live (the cache arrays a kernel writes)."""

    VLLM = "vllm"  # key_cache, value_cache: [blocks, B, Hkv, D] each
    VLLM_STACKED = "vllm_stacked"  # kv_cache: (2, blocks, B, Hkv, D), K at [0], V at [1]
    FLASHINFER_NHD = "flashinfer_nhd"  # kv_cache: [pages, 2, B, Hkv, D]
    FLASHINFER_HND = "flashinfer_hnd"  # kv_cache: [pages, 2, Hkv, B, D]


def _int_array(x, name: str, ndim: int) -> np.ndarray:
    """`x` as an integer array of `ndim` axes (bool and float refused), widened to int64."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} axes, got shape {a.shape}")
    if a.dtype == np.uint64 and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: values past int64")
    return a.astype(np.int64)


def _block_of_each_token(block_tables: np.ndarray, seq_ids: np.ndarray, positions: np.ndarray,
                         block_size: int) -> np.ndarray:
    """block_tables[seq, pos // B] for each real token (T,), after checking that the
    sequence, the table column and the block exist."""
    num_seqs, width = block_tables.shape
    if np.any((seq_ids < 0) | (seq_ids >= num_seqs)):
        raise ValueError(f"seq_ids: expected -1 (padding) or a row of block_tables (0..{num_seqs - 1}), "
                         f"got {seq_ids[(seq_ids < 0) | (seq_ids >= num_seqs)][0]}")
    if np.any(positions < 0):
        raise ValueError(f"positions: a real token's position is negative ({positions[positions < 0][0]})")
    column = positions // block_size
    if np.any(column >= width):
        raise ValueError(f"positions: position {positions[column >= width][0]} is past the block table "
                         f"({width} blocks of {block_size} tokens)")
    blocks = block_tables[seq_ids, column]
    if np.any(blocks < 0):
        raise ValueError("block_tables: a real token's block is -1 (unallocated)")
    return blocks


def slot_mapping(block_tables, seq_ids, positions, *, block_size: int) -> np.ndarray:
    """The cache slot of each token: table[seq, pos // B] * B + pos % B, int64; a
    padding token (seq id -1) gets slot -1, whatever its position.

    # block_tables: [S, M] block ids (-1: unallocated); seq_ids, positions: [T]
    """
    block_size = integer(block_size, "block_size", minimum=1)
    block_tables = _int_array(block_tables, "block_tables", 2)
    seq_ids = _int_array(seq_ids, "seq_ids", 1)
    positions = _int_array(positions, "positions", 1)
    if seq_ids.shape != positions.shape:
        raise ValueError(f"positions: expected one per token, shape {seq_ids.shape}, got {positions.shape}")
    if np.any(seq_ids < PAD):
        raise ValueError(f"seq_ids: expected -1 (padding) or a sequence row, got {seq_ids.min()}")
    real = seq_ids != PAD
    slots = np.full(seq_ids.shape, PAD, np.int64)  # [T]
    blocks = _block_of_each_token(block_tables, seq_ids[real], positions[real], block_size)
    slots[real] = blocks * block_size + positions[real] % block_size
    return slots


def _float_array(x, name: str) -> np.ndarray:
    """A cache or K/V array: float16, float32, or bfloat16 as its uint16 bits."""
    a = np.asarray(x)
    if a.dtype not in (np.float16, np.float32, np.uint16):
        raise TypeError(f"{name}: expected float16, float32 or uint16 (bfloat16 bits), got {a.dtype}")
    return a


def _token_views(key_cache: np.ndarray, value_cache: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Views of the K and V caches as [blocks, B, Hkv, D], whatever the layout (HND's
    head and token axes swapped back), so that writing through them writes the caches."""
    if layout is Layout.FLASHINFER_HND:
        return key_cache.swapaxes(1, 2), value_cache.swapaxes(1, 2)
    return key_cache, value_cache


def _split(kv_cache, key_cache, value_cache, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Copies of the K and V caches, each [blocks, B, Hkv, D] or [pages, Hkv, B, D] (HND)."""
    if layout is Layout.VLLM:
        if kv_cache is not None or key_cache is None or value_cache is None:
            raise ValueError("key_cache, value_cache: layout 'vllm' takes the two caches (and no kv_cache)")
        k, v = _float_array(key_cache, "key_cache").copy(), _float_array(value_cache, "value_cache").copy()
        if k.ndim != 4 or v.ndim != 4 or k.shape[:3] != v.shape[:3] or k.dtype != v.dtype:
            raise ValueError(f"value_cache: expected [blocks, B, Hkv, Dv] of key_cache's dtype beside key_cache "
                             f"{k.shape} {k.dtype}, got {v.shape} {v.dtype}")
        return k, v
    if kv_cache is None or key_cache is not None or value_cache is not None:
        raise ValueError(f"kv_cache: layout {layout.value!r} takes one kv_cache (and no key_cache, value_cache)")
    kv = _float_array(kv_cache, "kv_cache").copy()
    if kv.ndim != 5:
        raise ValueError(f"kv_cache: expected 5 axes for layout {layout.value!r}, got shape {kv.shape}")
    if layout is Layout.VLLM_STACKED:
        if kv.shape[0] != 2:
            raise ValueError(f"kv_cache: expected (2, blocks, B, Hkv, D), got {kv.shape}")
        return kv[0], kv[1]
    if kv.shape[1] != 2:
        raise ValueError(f"kv_cache: expected [pages, 2, ...] for layout {layout.value!r}, got {kv.shape}")
    return kv[:, 0], kv[:, 1]


def _check_slots(slots: np.ndarray, num_slots: int, tokens: int) -> np.ndarray:
    if slots.shape != (tokens,):
        raise ValueError(f"slots: expected one per token ({tokens},), got {slots.shape}")
    real = slots[slots != PAD]
    outside = real[(real < 0) | (real >= num_slots)]
    if outside.size:
        raise ValueError(f"slots: expected -1 (skip) or 0..{num_slots - 1}, got {outside[0]}")
    if np.unique(real).size != real.size:
        raise ValueError("slots: a slot is written twice in one call (duplicate slots)")
    return slots != PAD


def reshape_and_cache(key, value, slots, key_cache=None, value_cache=None, kv_cache=None, *,
                      layout: str = "vllm") -> tuple[np.ndarray, np.ndarray]:
    """The caches with each token's K and V copied, bit for bit, into its slot; slot -1
    is skipped and every other slot keeps its bits. Functional: inputs are not modified.

    Returns (key_cache, value_cache) as the layout holds them: "vllm" the two caches;
    "vllm_stacked" kv_cache[0] and kv_cache[1]; FlashInfer's kv_cache[:, 0] and
    kv_cache[:, 1] ([pages, B, Hkv, D] for NHD, [pages, Hkv, B, D] for HND).

    # key: [T, Hkv, D]; value: [T, Hkv, Dv]; slots: [T] int (-1: skip)
    # layout "vllm": key_cache [blocks, B, Hkv, D], value_cache [blocks, B, Hkv, Dv]
    # the others: kv_cache only (Dv == D), shaped as Layout says
    """
    layout = Layout(choice(layout, "layout", [m.value for m in Layout]))
    k_cache, v_cache = _split(kv_cache, key_cache, value_cache, layout)
    k_tok, v_tok = _token_views(k_cache, v_cache, layout)  # [blocks, B, Hkv, D] views
    key, value = _float_array(key, "key"), _float_array(value, "value")
    if key.dtype != k_cache.dtype or value.dtype != k_cache.dtype:
        raise TypeError(f"key, value: expected the cache's dtype {k_cache.dtype}, got {key.dtype}, {value.dtype}")
    if key.ndim != 3 or key.shape[1:] != k_tok.shape[2:]:
        raise ValueError(f"key: expected [T, {k_tok.shape[2]}, {k_tok.shape[3]}], got {key.shape}")
    if value.shape != (key.shape[0], *v_tok.shape[2:]):
        raise ValueError(f"value: expected [{key.shape[0]}, {v_tok.shape[2]}, {v_tok.shape[3]}], got {value.shape}")
    slots = _int_array(slots, "slots", 1)
    num_blocks, block_size = k_tok.shape[:2]
    real = _check_slots(slots, num_blocks * block_size, key.shape[0])
    block, offset = np.divmod(slots[real], block_size)
    k_tok[block, offset] = key[real]
    v_tok[block, offset] = value[real]
    return k_cache, v_cache


def paged_kv_indices(block_tables, seq_lens, *, block_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FlashInfer's CSR page table of a batch: (indptr [S+1], indices [nnz],
    last_page_len [S]), int64. Sequence s holds ceil(seq_lens[s] / B) pages,
    block_tables[s, :pages], listed in indices[indptr[s]:indptr[s+1]]; its last page
    holds seq_lens[s] - (pages - 1) * B tokens (0 for an empty sequence).

    # block_tables: [S, M] block ids (-1: unallocated); seq_lens: [S]
    """
    block_size = integer(block_size, "block_size", minimum=1)
    block_tables = _int_array(block_tables, "block_tables", 2)
    seq_lens = _int_array(seq_lens, "seq_lens", 1)
    if seq_lens.shape[0] != block_tables.shape[0]:
        raise ValueError(f"seq_lens: expected one per block_tables row ({block_tables.shape[0]}), got {seq_lens.shape}")
    if np.any(seq_lens < 0):
        raise ValueError(f"seq_lens: negative length {seq_lens.min()}")
    pages = -(-seq_lens // block_size)  # [S]
    if np.any(pages > block_tables.shape[1]):
        raise ValueError(f"seq_lens: a sequence of {seq_lens[pages > block_tables.shape[1]][0]} tokens needs more "
                         f"than the table's {block_tables.shape[1]} blocks")
    used = np.arange(block_tables.shape[1]) < pages[:, None]  # [S, M]
    indices = block_tables[used]  # row-major: each sequence's pages in order
    if np.any(indices < 0):
        raise ValueError("block_tables: a page holding tokens is -1 (unallocated)")
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int64)
    last_page_len = np.where(pages > 0, seq_lens - (pages - 1) * block_size, 0).astype(np.int64)
    return indptr, indices.astype(np.int64), last_page_len

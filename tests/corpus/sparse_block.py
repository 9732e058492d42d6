"""The block-sparse bug corpus: wrong kernels written the way block-sparse attention
kernels go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_sparse_block).

BLOCK_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_sparse_block as K
from ref.conformance.implementation import Implementation

P = "sparse.block."


def _counts_ignored(original):
    """Every slot holding an index in range read, the count never consulted."""
    return lambda idx, counts, nb: (idx >= 0) & (idx < nb)


def _minus_one_read(original):
    """-1 slots inside the count read like any other (their index then wraps or clamps)."""
    def read_slots(idx, counts, nb):
        read = original(idx, counts, nb)
        inside = np.ones(idx.shape, bool) if counts is None else np.arange(idx.shape[3]) < np.asarray(counts)[..., None]
        return read | (inside & (idx == -1))
    return read_slots


def _block_zero(original):
    """A -1 slot's block taken as block 0 (the index clamped at 0)."""
    return lambda j, read, bk, lk: original(np.maximum(j, 0), read, bk, lk)


def _mask_minus_one_block_zero(block_indices, counts=None, lq=None, lk=None, block_size_q=1, block_size_k=64,
                               causal=False):
    """A row with a -1 slot inside its count also sees block 0."""
    mask = K._mask(block_indices, counts, lq=lq, lk=lk, block_size_q=block_size_q, block_size_k=block_size_k,
                   causal=causal)
    idx = np.asarray(block_indices)
    inside = np.ones(idx.shape, bool) if counts is None else np.arange(idx.shape[3]) < np.asarray(counts)[..., None]
    has = ((idx == -1) & inside).any(axis=-1)  # [B, H, R]
    extra = has[:, :, K.row_block(lq, block_size_q)][..., None] & (np.arange(lk) < block_size_k)
    if causal:
        extra = extra & K.causal_visible(np.arange(lq)[:, None], np.arange(lk)[None, :], lq, lk)
    return mask | extra


def _one_slot_past(original):
    """The count read as the last slot's index (s <= count): one slot too many."""
    def read_slots(idx, counts, nb):
        if counts is None:
            return original(idx, counts, nb)
        return original(idx, np.minimum(np.asarray(counts) + 1, idx.shape[3]), nb)
    return read_slots


def _diagonal_excluded(original):
    return lambda query, key, lq, lk: key < query + (lk - lq)


def _top_left(original):
    return lambda query, key, lq, lk: key <= query


def _floor_blocks(original):
    """Lk // C key blocks: the partial last block refused as out of range."""
    return lambda lk, bk: lk // bk


def _clamped(original):
    """Positions past Lk clamped to the last key instead of masked."""
    def block_keys(j, read, bk, lk):
        pos = j[..., None] * bk + np.arange(bk)
        ok = np.broadcast_to(read[..., None], pos.shape)
        return np.where(ok, np.minimum(pos, max(lk - 1, 0)), 0), ok
    return block_keys


def _rows_rounded_up(original):
    def row_block(lq, bq):
        return np.minimum(-(-np.arange(lq) // bq), max(-(-lq // bq) - 1, 0))
    return row_block


def _rows_from_bottom(original):
    """Row blocks aligned to the last query row (the first block is the partial one)."""
    def row_block(lq, bq):
        return (np.arange(lq) + (-(-lq // bq) * bq - lq)) // bq
    return row_block


def _list_heads_modulo(original):
    return lambda hq, h: np.arange(hq) % h


def _kv_heads_modulo(original):
    return lambda hq, hkv: np.arange(hq) % hkv


def _empty_rows_nan(q, k, v, block_indices, counts=None, **params):
    """An empty row's output as 0 / 0."""
    out, lse = K._attend(q, k, v, block_indices, counts, **params)
    return np.where(np.isneginf(lse).transpose(0, 2, 1)[..., None], np.float32(np.nan), out), lse


def _empty_rows_lse_zero(q, k, v, block_indices, counts=None, **params):
    """An empty row's LSE as log(1) = 0 (the sum started at 1)."""
    out, lse = K._attend(q, k, v, block_indices, counts, **params)
    return out, np.where(np.isneginf(lse), np.float32(0), lse)


def _times_zero(original):
    """p_ij v_j over the whole block, p = 0 at keys the row does not see."""
    return lambda p, values, visible: (p[..., None] * values[..., None, :, :]).sum(axis=-2, dtype=np.float32)


def _csr_shifted(original):
    """Row block m read from indptr[m + 1] to indptr[m + 2] (the last row block reads nothing)."""
    def csr_rows(indptr, indices):
        lists, counts = original(indptr, indices)
        return np.concatenate([lists[1:], np.full((min(1, len(lists)), lists.shape[1]), -1)]), \
            np.concatenate([counts[1:], np.zeros(min(1, len(counts)), counts.dtype)])
    return csr_rows


def _csr_negative(q, k, v, indptr, indices, block_size_q=1, block_size_k=64, causal=False, scale=None):
    """CSR indices not checked for sign: a -1 wraps to the last block."""
    ind = np.asarray(indices)
    nb = K.num_key_blocks(np.shape(k)[0], block_size_k)
    if ind.dtype.kind in "iu" and nb and (ind < 0).any():
        ind = ind % nb
    return K._attend_csr(q, k, v, indptr, ind, block_size_q, block_size_k, causal, scale)


def _sorted_csr(block_indices, counts=None):
    """Each CSR row sorted ascending (FlashInfer does not need it; the contract keeps list order)."""
    indptr, indices = K._to_csr(block_indices, counts)
    out = indices.copy()
    for row in range(indptr.size - 1):
        out[indptr[row]:indptr[row + 1]] = np.sort(indices[indptr[row]:indptr[row + 1]])
    return indptr, out


def _repeats_allowed(original):
    def read_slots(idx, counts, nb):
        s = idx.shape[3]
        read = np.ones(idx.shape, bool) if counts is None else np.arange(s) < np.asarray(counts)[..., None]
        if ((idx < -1) | (idx >= nb))[read].any():
            raise ValueError("block_indices: out of range")
        return read & (idx >= 0)
    return read_slots


BLOCK_BUGS = {
    "slots past the count read": (P + "attend", "BlockCount", patched(K._attend, K, "read_slots", _counts_ignored)),
    "mask: slots past the count read": (P + "mask", "BlockCount", patched(K._mask, K, "read_slots", _counts_ignored)),
    "to_csr: slots past the count kept": (P + "to_csr", "BlockCount",
                                          patched(K._to_csr, K, "read_slots", _counts_ignored)),
    "-1 read as the last block (negative indexing)": (P + "attend", "BlockUnused",
                                                      patched(K._attend, K, "read_slots", _minus_one_read)),
    "-1 read as block 0": (P + "attend", "BlockUnused",
                           patched(patched(K._attend, K, "read_slots", _minus_one_read), K, "block_keys", _block_zero)),
    "mask: -1 read as the last block": (P + "mask", "BlockUnused", patched(K._mask, K, "read_slots", _minus_one_read)),
    "mask: -1 read as block 0": (P + "mask", "BlockUnused", _mask_minus_one_block_zero),
    "causal mask aligned top-left": (P + "attend", "BlockCausal", patched(K._attend, K, "causal_visible", _top_left)),
    "mask: causal aligned top-left": (P + "mask", "BlockCausal", patched(K._mask, K, "causal_visible", _top_left)),
    "partial last block refused (Lk // C blocks)": (P + "attend", "BlockPartial",
                                                    patched(K._attend, K, "num_key_blocks", _floor_blocks)),
    "partial last block's tail clamped to the last key": (P + "attend", "BlockPartial",
                                                          patched(K._attend, K, "block_keys", _clamped)),
    "mask: partial last block refused": (P + "mask", "BlockPartial",
                                         patched(K._mask, K, "num_key_blocks", _floor_blocks)),
    "row blocks by a rounded-up division": (P + "mask", "BlockRows", patched(K._mask, K, "row_block", _rows_rounded_up)),
    "row blocks aligned to the last row": (P + "mask", "BlockRows", patched(K._mask, K, "row_block", _rows_from_bottom)),
    "per-KV-head lists read by query head h % H": (P + "attend", "BlockHeads",
                                                   patched(K._attend, K, "list_head_of", _list_heads_modulo)),
    "KV heads interleaved (h % Hkv)": (P + "attend", "BlockHeads",
                                       patched(K._attend, K, "kv_head_of", _kv_heads_modulo)),
    "empty row 0 / 0": (P + "attend", "BlockEmptyRow", _empty_rows_nan),
    "empty row's LSE 0": (P + "attend", "BlockEmptyRow", _empty_rows_lse_zero),
    "unselected values multiplied by a zero weight": (P + "attend", "BlockUnread",
                                                      patched(K._attend, K, "weighted", _times_zero)),
    "CSR rows read from indptr[m + 1]": (P + "attend_csr", "BlockCsr",
                                         patched(K._attend_csr, K, "csr_rows", _csr_shifted)),
    "CSR rows sorted": (P + "to_csr", "BlockCsr", _sorted_csr),
    "a block named twice accepted": (P + "attend", "InvalidInput", patched(K._attend, K, "read_slots", _repeats_allowed)),
    "mask: a block named twice accepted": (P + "mask", "InvalidInput",
                                           patched(K._mask, K, "read_slots", _repeats_allowed)),
    "CSR: a negative index accepted": (P + "attend_csr", "InvalidInput", _csr_negative),
    # the adversary pass (issue 16): one slot past the count, the diagonal masked
    "one slot past the count read (s <= count)": (P + "attend", "BlockCount",
                                                  patched(K._attend, K, "read_slots", _one_slot_past)),
    "causal mask excluding the diagonal": (P + "attend", "BlockCausal",
                                           patched(K._attend, K, "causal_visible", _diagonal_excluded)),
}
DEFAULT_PROFILE = {"slots past the count read", "-1 read as the last block (negative indexing)",
                   "causal mask aligned top-left", "partial last block's tail clamped to the last key",
                   "per-KV-head lists read by query head h % H", "CSR rows read from indptr[m + 1]"}


def bug(name: str) -> Implementation:
    op, _, kernel = BLOCK_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel})

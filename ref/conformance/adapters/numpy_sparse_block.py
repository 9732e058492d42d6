"""Block-sparse attention for the default run, written independently of the oracles
(this module imports nothing from ref), the way a block-sparse FlashAttention kernel
computes:

- mask: each read slot's block marked in a [rows, key blocks] table, then every key
  looks up its block (j // C) and every query row its row block (i // block_size_q);
- attend: the rows of a row block together, a loop over the slots in list order,
  each step gathering one key block for every (batch, head, row block) at once and
  folding it into a float32 online softmax (running maximum, sum, output);
- to_csr: the read slots counted per row, a prefix sum, the slots taken in order;
- attend_csr: the CSR rows read back into per-row lists with counts, then attend.

The steps are public so that the bug corpus (tests/corpus/sparse_block.py) builds its
wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

NAME = "NumPy float32 block-sparse attention"
VERSION = np.__version__

_F32 = np.float32
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def floats(x, name, ndim):
    x = np.asarray(x)
    if x.dtype.name not in _FLOATS:
        raise TypeError(f"{name}: expected a float array, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {x.shape}")
    return x.astype(_F32, copy=False)


def ints(x, name, ndim):
    x = np.asarray(x)
    if x.dtype.kind not in "iu" or x.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d integer array, got {x.dtype} {x.shape}")
    return x.astype(np.int64)


def whole(value, name, minimum):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def ceil_div(a, b):
    return -(-a // b)


def read_slots(idx, counts, num_blocks):
    """bool [B, H, R, S]: the slots a kernel reads (before the count, not -1), checked."""
    s = idx.shape[3]
    read = np.ones(idx.shape, bool)
    if counts is not None:
        n = ints(counts, "counts", 3)
        if n.shape != idx.shape[:3] or (n < 0).any() or (n > s).any():
            raise ValueError(f"counts: expected [B, H, R] = {idx.shape[:3]} in [0, {s}], got {n.shape}")
        read = np.arange(s) < n[..., None]
    if ((idx < -1) | (idx >= num_blocks))[read].any():
        raise ValueError(f"block_indices: an index read is outside [-1, {num_blocks})")
    read = read & (idx >= 0)
    times = np.zeros((*idx.shape[:3], num_blocks + 1), np.int64)  # how often each row names each block
    b, h, r = np.indices(idx.shape[:3])
    for slot in range(s):
        np.add.at(times, (b, h, r, np.where(read[..., slot], idx[..., slot], num_blocks)), 1)
    if (times[..., :num_blocks] > 1).any():
        raise ValueError("block_indices: a row names a block twice")
    return read


def row_block(lq, block_size_q):
    """The list row of each query row."""
    return np.arange(lq) // block_size_q


def key_block(lk, block_size_k):
    """The block of each key."""
    return np.arange(lk) // block_size_k


def list_head_of(hq, h):
    return np.arange(hq) // (hq // h)


def kv_head_of(hq, hkv):
    return np.arange(hq) // (hq // hkv)


def num_key_blocks(lk, block_size_k):
    return ceil_div(lk, block_size_k)


def block_keys(j, read, block_size_k, lk):
    """The key positions [..., C] of blocks j and which of them are keys a read slot
    names (a partial block's tail is not)."""
    pos = j[..., None] * block_size_k + np.arange(block_size_k)
    ok = read[..., None] & (pos < lk)
    return np.where(ok, pos, 0), ok


def weighted(p, values, visible):
    """p_ij v_j summed over a block's keys, at the keys a row sees only (a NaN value
    elsewhere is never multiplied): p [..., bq, C], values [..., C, Dv]."""
    return np.where(visible[..., None], p[..., None] * values[..., None, :, :], 0).sum(axis=-2, dtype=_F32)


def causal_visible(query, key, lq, lk):
    """Bottom-right aligned: key j visible to query i when j <= i + Lk - Lq."""
    return key <= query + (lk - lq)


def _lists(block_indices, lq, lk, block_size_q, block_size_k):
    bq, bk = whole(block_size_q, "block_size_q", 1), whole(block_size_k, "block_size_k", 1)
    idx = ints(block_indices, "block_indices", 4)
    if idx.shape[2] != ceil_div(lq, bq):
        raise ValueError(f"block_indices: expected {ceil_div(lq, bq)} rows, got {idx.shape}")
    return idx, bq, bk, num_key_blocks(lk, bk)


def _mask(block_indices, counts=None, lq=None, lk=None, block_size_q=1, block_size_k=64, causal=False):
    lq, lk = whole(lq, "lq", 0), whole(lk, "lk", 0)
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal: expected a bool, got {causal!r}")
    idx, bq, bk, nb = _lists(block_indices, lq, lk, block_size_q, block_size_k)
    read = read_slots(idx, counts, nb)
    b, h, r, s = idx.shape
    table = np.zeros((b, h, r, nb), bool)  # [B, H, R, NB]: the blocks each row reads
    for slot in range(s):
        where = np.nonzero(read[..., slot])
        table[(*where, idx[..., slot][where])] = True
    mask = table[..., key_block(lk, bk)][:, :, row_block(lq, bq)]  # [B, H, Lq, Lk]
    if causal:
        mask = mask & causal_visible(np.arange(lq)[:, None], np.arange(lk)[None, :], lq, lk)
    return mask


def _attend(q, k, v, block_indices, counts=None, block_size_q=1, block_size_k=64, causal=False, scale=None):
    q, k, v = floats(q, "q", 4), floats(k, "k", 4), floats(v, "v", 4)
    b, lq, hq, d = q.shape
    lk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    if k.shape[0] != b or v.shape[:3] != k.shape[:3] or k.shape[3] != d:
        raise ValueError(f"q, k, v: shapes {q.shape}, {k.shape}, {v.shape} do not fit [B, L, H, D]")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal: expected a bool, got {causal!r}")
    idx, bq, bk, nb = _lists(block_indices, lq, lk, block_size_q, block_size_k)
    h, r, s = idx.shape[1:]
    if hkv == 0 or hq % hkv or idx.shape[0] != b or h == 0 or hq % h:
        raise ValueError(f"heads: {hq} query heads, {hkv} KV heads, lists {idx.shape}")
    if scale is None and d == 0:
        raise ValueError("q: head dim 0 needs a scale")
    sc = _F32(1 / math.sqrt(d) if scale is None else scale)
    read = read_slots(idx, counts, nb)
    heads = list_head_of(hq, h)
    read, idx = read[:, heads], idx[:, heads]  # [B, Hq, R, S]
    query = np.arange(r * bq).reshape(r, bq)  # [R, bq]: the query rows of each row block
    qp = np.zeros((b, r * bq, hq, d), _F32)
    qp[:, :lq] = q
    qb = qp.reshape(b, r, bq, hq, d).transpose(0, 3, 1, 2, 4)  # [B, Hq, R, bq, D]
    m = np.full((b, hq, r, bq), -np.inf, _F32)
    total = np.zeros((b, hq, r, bq), _F32)
    acc = np.zeros((b, hq, r, bq, dv), _F32)
    bi, hi = np.arange(b)[:, None, None, None], kv_head_of(hq, hkv)[None, :, None, None]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for slot in range(s if lk else 0):
            j = np.where(read[..., slot], idx[..., slot], 0)  # [B, Hq, R]: this slot's block per row block
            pos, ok = block_keys(j, read[..., slot], bk, lk)  # [B, Hq, R, C]
            kb, vb = k[bi, pos, hi], v[bi, pos, hi]  # [B, Hq, R, C, D]: this slot's block
            vis = ok[:, :, :, None, :] & (query[None, None, :, :, None] < lq)  # [B, Hq, R, bq, C]
            if causal:
                vis = vis & causal_visible(query[None, None, :, :, None], pos[:, :, :, None, :], lq, lk)
            x = np.where(vis, np.einsum("bhrqd,bhrcd->bhrqc", qb, kb) * sc, -np.inf)
            m_new = np.maximum(m, x.max(axis=-1, initial=-np.inf))
            shift = np.where(np.isfinite(m_new), m_new, 0)
            alpha = np.exp(m - shift)
            p = np.exp(x - shift[..., None])  # [B, Hq, R, bq, C]
            total = total * alpha + p.sum(axis=-1, dtype=_F32)
            acc = acc * alpha[..., None] + weighted(p, vb, vis)
            m = m_new
        out = np.where(total[..., None] > 0, acc / np.where(total > 0, total, 1)[..., None], 0 * acc)
        lse = np.where(total > 0, m + np.log(np.where(total > 0, total, 1)), -np.inf)
        lse = np.where(np.isnan(m) | np.isnan(total), np.nan, lse)
    out = out.reshape(b, hq, r * bq, dv)[:, :, :lq].transpose(0, 2, 1, 3)
    return np.ascontiguousarray(out, _F32), np.ascontiguousarray(lse.reshape(b, hq, r * bq)[:, :, :lq], _F32)


def _to_csr(block_indices, counts=None):
    idx = ints(block_indices, "block_indices", 4)
    read = read_slots(idx, counts, int(idx.max(initial=-1)) + 1)
    per_row = read.sum(axis=-1).reshape(-1)
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    return indptr, idx[read].astype(np.int32)


def csr_rows(indptr, indices):
    """CSR -> (lists [MB, S] padded with -1, counts [MB])."""
    ptr, ind = ints(indptr, "indptr", 1), ints(indices, "indices", 1)
    if ptr.size == 0 or ptr[0] != 0 or (np.diff(ptr) < 0).any() or ptr[-1] != ind.size or (ind < 0).any():
        raise ValueError(f"indptr, indices: not a CSR pattern ({ptr.tolist()}, {ind.size} indices)")
    counts = np.diff(ptr)
    lists = np.full((counts.size, int(counts.max(initial=0))), -1, np.int64)
    for row in range(counts.size):
        lists[row, :counts[row]] = ind[ptr[row]:ptr[row + 1]]
    return lists, counts


def _attend_csr(q, k, v, indptr, indices, block_size_q=1, block_size_k=64, causal=False, scale=None):
    q, k, v = floats(q, "q", 3), floats(k, "k", 3), floats(v, "v", 3)
    lists, counts = csr_rows(indptr, indices)
    out, lse = _attend(q[None], k[None], v[None], lists[None, None], counts[None, None], block_size_q,
                       block_size_k, causal, scale)
    return out[0], lse[0]


OPS = {
    "sparse.block.mask": _mask,
    "sparse.block.attend": _attend,
    "sparse.block.to_csr": _to_csr,
    "sparse.block.attend_csr": _attend_csr,
}
VARIANTS: dict = {}

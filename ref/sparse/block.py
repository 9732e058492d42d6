"""Block-sparse attention: attention restricted to given key blocks per query row or per
query block, equal to masked dense attention (`ref.attention.attend`).

The index layout kernels take (FlashAttention's block-sparse kernels, torch flex
attention's BlockMask, NSA's selected-block kernels), "per-row block lists":

    block_indices [B, H, R, S]   row r of list head h names up to S key blocks
    counts        [B, H, R]      optional: the number of slots read (flex's kv_num_blocks)

Key block j covers keys [j C, min((j + 1) C, Lk)), C = block_size_k, the last block
partial; there are NB = ceil(Lk / C) blocks. Query row i reads list row
r = i // block_size_q (row blocks counted from query 0, as flex and FlashInfer do), so
R = ceil(Lq / block_size_q). Query head h reads list head h // (Hq / H) (H = Hkv: one
list per GQA group; H = Hq: one per query head; H = 1: shared) and KV head
h // (Hq / Hkv). Then key j is visible to row i of head h when

    j // C = block_indices[b, h', r, s] for a slot s that is read, and
    j <= i + Lk - Lq                       if causal (bottom-right aligned, as attend)

A slot s is read when s < counts[b, h', r] (every slot without counts) and its index
is not -1 (unused). A slot past the count is never read, whatever it holds. Among the
read slots an index < -1 or >= NB, and a block named twice (a kernel would read it
twice), are invalid input (ValueError).

`attend` is defined as a gather of the selected keys followed by attend on them (the
values at keys not selected are never touched); tests prove it equal to
attend(q, k, v, mask=block_mask(...), causal=causal). A row that sees no key has
out 0 and LSE -inf.

CSR (FlashInfer's BlockSparseAttentionWrapper, one sequence, one pattern for every
head): indptr [MB + 1], indices [nnz], row block m naming blocks
indices[indptr[m]:indptr[m + 1]] (no unused marker); `to_csr` turns per-row lists into
it, rows in (b, h, r) order and each row's read slots in list order.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer
from ref.attention import emulate
from ref.attention.attend import attend as attend_dense
from ref.attention.attend import visible_keys
from ref.attention.checks import FLOATS

__all__ = ["attend", "attend_csr", "block_mask", "csr_lists", "emulate_attend", "emulate_attend_csr",
           "gathered", "to_csr", "valid_slots"]


def _ints(x: ArrayLike, name: str, ndim: int) -> NDArray[np.int64]:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return a.astype(np.int64)


def valid_slots(block_indices: ArrayLike, counts: ArrayLike | None = None, *, num_blocks: int) -> NDArray[np.bool_]:
    """bool [B, H, R, S]: the slots read (before the count, index not -1), after
    checking them: a read index in [-1, num_blocks), no block named twice in a row."""
    num_blocks = integer(num_blocks, "num_blocks", minimum=0)
    idx = _ints(block_indices, "block_indices", 4)  # [B, H, R, S]
    s = idx.shape[3]
    read = np.ones(idx.shape, bool)
    if counts is not None:
        n = _ints(counts, "counts", 3)  # [B, H, R]
        if n.shape != idx.shape[:3]:
            raise ValueError(f"counts: expected [B, H, R] = {list(idx.shape[:3])}, got {list(n.shape)}")
        if ((n < 0) | (n > s)).any():
            raise ValueError(f"counts: expected counts in [0, S = {s}], got {n.min()}..{n.max()}")
        read = np.arange(s) < n[..., None]  # slots past the count are never read
    if (read & ((idx < -1) | (idx >= num_blocks))).any():
        bad = idx[read & ((idx < -1) | (idx >= num_blocks))]
        raise ValueError(f"block_indices: expected -1 or a block in [0, {num_blocks}) in every slot read, "
                         f"got {bad[:4].tolist()}")
    used = read & (idx >= 0)
    named = np.sort(np.where(used, idx, -1 - np.arange(s)), axis=-1)  # unused slots: distinct negatives
    if (named[..., 1:] == named[..., :-1]).any():
        raise ValueError("block_indices: a row names the same block twice in the slots read")
    return used


def _sizes(lq, lk, block_size_q, block_size_k, causal):
    return (integer(lq, "lq", minimum=0), integer(lk, "lk", minimum=0),
            integer(block_size_q, "block_size_q", minimum=1), integer(block_size_k, "block_size_k", minimum=1),
            boolean(causal, "causal"))


def _rows(idx_shape, lq: int, block_size_q: int) -> None:
    rows = -(-lq // block_size_q)
    if idx_shape[2] != rows:
        raise ValueError(f"block_indices: expected R = ceil(Lq / block_size_q) = ceil({lq} / {block_size_q}) = "
                         f"{rows} rows, got shape {list(idx_shape)}")


def block_mask(block_indices: ArrayLike, counts: ArrayLike | None = None, *, lq: int, lk: int,
               block_size_q: int = 1, block_size_k: int = 64, causal: bool = False) -> NDArray[np.bool_]:
    """bool [B, H, Lq, Lk]: which keys each query row of each list head sees (the
    module docstring's rule), for Lq queries over Lk keys."""
    lq, lk, bq, bk, causal = _sizes(lq, lk, block_size_q, block_size_k, causal)
    idx = _ints(block_indices, "block_indices", 4)  # [B, H, R, S]
    _rows(idx.shape, lq, bq)
    nb = -(-lk // bk)
    used = valid_slots(idx, counts, num_blocks=nb)
    b, h, r, _ = idx.shape
    chosen = np.zeros((b, h, r, nb + 1), bool)  # column NB collects the slots not read
    np.put_along_axis(chosen, np.where(used, idx, nb), True, axis=-1)
    keys = np.repeat(chosen[..., :nb], bk, axis=-1)[..., :lk]  # [B, H, R, Lk]: each block's keys
    mask = keys[:, :, np.arange(lq) // bq]  # [B, H, Lq, Lk]: row i reads list row i // block_size_q
    if causal:
        mask = mask & visible_keys(lq, lk, causal=True)
    return mask


def _float_shape(x: ArrayLike, name: str, ndim: int) -> np.ndarray:
    """`x` as an array of one of attend's dtypes and rank, not converted (the cache is
    only read where selected)."""
    a = np.asarray(x)
    if a.dtype.name not in FLOATS:
        raise TypeError(f"{name}: expected one of {FLOATS}, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return a


def gathered(q, k, v, block_indices, counts=None, *, block_size_q: int = 1, block_size_k: int = 64,
             causal: bool = False) -> dict[str, np.ndarray]:
    """The selected keys gathered, as one attend call per (batch, head unit, row block).
    A head unit is U consecutive query heads that read the same list head and the same
    KV head, U = gcd(Hq / H, Hq / Hkv) (a GQA group, when the lists are per KV head):
    q [N, bq, U, D], k [N, S C, 1, D], v [N, S C, 1, Dv] and mask [N, 1, bq, S C],
    N = B (Hq / U) R (query rows past Lq padded with zeros and masked). Only the
    selected blocks of k and v are read."""
    q, k, v = _float_shape(q, "q", 4), _float_shape(k, "k", 4), _float_shape(v, "v", 4)
    b, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    _, _, bq, bk, causal = _sizes(lq, lk, block_size_q, block_size_k, causal)
    if k.shape[0] != b or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k, v: expected [B = {b}, Lk, Hkv, D] with the same B, Lk, Hkv, got {k.shape}, {v.shape}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"k: its {hkv} KV heads must divide the {hq} query heads of q")
    idx = _ints(block_indices, "block_indices", 4)  # [B, H, R, S]
    h, s = idx.shape[1], idx.shape[3]
    if idx.shape[0] != b or h == 0 or hq % h:
        raise ValueError(f"block_indices: expected [B = {b}, H, R, S] with H dividing Hq = {hq}, got {idx.shape}")
    _rows(idx.shape, lq, bq)
    r = idx.shape[2]
    used = valid_slots(idx, counts, num_blocks=-(-lk // bk))
    u = math.gcd(hq // h, hq // hkv)  # query heads per unit
    first = np.arange(0, hq, u)  # the first query head of each unit
    heads = first // (hq // h)  # the list head of each unit
    used, idx = used[:, heads], np.where(used, idx, 0)[:, heads]  # [B, Hq/U, R, S]
    pos = idx[..., None] * bk + np.arange(bk)  # [B, Hq/U, R, S, C]: the key positions of each slot
    units, sc = first.size, s * bk
    ok = (used[..., None] & (pos < lk)).reshape(b, units, r, sc)  # a partial block's tail is not a key
    pos = np.where(ok, pos.reshape(b, units, r, sc), 0)  # [B, Hq/U, R, S C]
    kv_head = (first // (hq // hkv))[None, :, None, None]  # GQA: query head h reads KV head h // G
    bi = np.arange(b)[:, None, None, None]
    if lk == 0:  # nothing to read: one zero key stands in for the gather, masked everywhere
        k, v = np.zeros((b, 1, hkv, d), k.dtype), np.zeros((b, 1, hkv, v.shape[3]), v.dtype)
    kg, vg = k[bi, pos, kv_head], v[bi, pos, kv_head]  # [B, Hq/U, R, S C, D]: the gather
    qp = np.zeros((b, r * bq, hq, d), q.dtype)
    qp[:, :lq] = q
    qg = qp.reshape(b, r, bq, units, u, d).transpose(0, 3, 1, 2, 4, 5)  # [B, Hq/U, R, bq, U, D]
    row = np.arange(r * bq).reshape(r, bq)[None, None, :, :, None]  # [1, 1, R, bq, 1]: query index i
    mask = ok[:, :, :, None, :] & (row < lq)  # [B, Hq/U, R, bq, S C]
    if causal:
        mask = mask & (pos[:, :, :, None, :] <= row + (lk - lq))
    n = b * units * r
    return {"q": qg.reshape(n, bq, u, d), "k": kg.reshape(n, sc, 1, d), "v": vg.reshape(n, sc, 1, v.shape[3]),
            "mask": mask.reshape(n, 1, bq, sc)}


def _scatter(out, lse, q, block_size_q):
    """attend's results over the gathered calls back to [B, Lq, Hq, Dv] and [B, Hq, Lq]."""
    b, lq, hq, _ = np.shape(q)
    u = out.shape[2]
    r = -(-lq // block_size_q)
    rows = r * block_size_q  # Lq padded to whole row blocks
    out = out.reshape(b, hq // u, r, block_size_q, u, out.shape[-1]).transpose(0, 2, 3, 1, 4, 5)
    lse = lse.reshape(b, hq // u, r, u, block_size_q).transpose(0, 1, 3, 2, 4)  # [B, Hq/U, U, R, bq]
    return (np.ascontiguousarray(out.reshape(b, rows, hq, out.shape[-1])[:, :lq]),
            np.ascontiguousarray(lse.reshape(b, hq, rows)[:, :, :lq]))


def attend(q: ArrayLike, k: ArrayLike, v: ArrayLike, block_indices: ArrayLike, counts: ArrayLike | None = None, *,
           block_size_q: int = 1, block_size_k: int = 64, causal: bool = False,
           scale: float | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Block-sparse attention, float64: q [B, Lq, Hq, D], k [B, Lk, Hkv, D],
    v [B, Lk, Hkv, Dv], block_indices [B, H, R, S] (counts [B, H, R]) ->
    out [B, Lq, Hq, Dv], lse [B, Hq, Lq]: `ref.attention.attend` over the gathered
    selected keys (scale defaults to 1/sqrt(D))."""
    g = gathered(q, k, v, block_indices, counts, block_size_q=block_size_q, block_size_k=block_size_k,
                 causal=causal)
    out, lse = attend_dense(g["q"], g["k"], g["v"], mask=g["mask"], scale=_scale(q, scale))
    return _scatter(out, lse, q, block_size_q)


def _scale(q, scale):
    d = np.shape(q)[-1]
    if scale is None and d == 0:
        raise ValueError("q: head dim 0 needs an explicit scale")
    return 1.0 / math.sqrt(d) if scale is None else scale


def emulate_attend(precision: str, q, k, v, block_indices, counts=None, *, block_size_q=1, block_size_k=64,
                   causal=False, scale=None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` as a kernel at `precision` computes it: ref.attention.emulate.attend over
    the gathered keys (a masked key weighs exactly 0 in both, so the gathered and the
    dense evaluations differ only in summation order)."""
    g = gathered(q, k, v, block_indices, counts, block_size_q=block_size_q, block_size_k=block_size_k,
                 causal=causal)
    out, lse = emulate.attend(precision, g["q"], g["k"], g["v"], mask=g["mask"], scale=_scale(q, scale))
    return _scatter(out, lse, q, block_size_q)


def to_csr(block_indices: ArrayLike, counts: ArrayLike | None = None) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """Per-row lists [B, H, R, S] (counts [B, H, R]) -> CSR: indptr int32 [B H R + 1] and
    indices int32 [nnz], rows in (b, h, r) order, each row's read slots in list order
    (-1 and slots past the count dropped). The lists are checked as `valid_slots` does,
    against no upper bound (the number of key blocks is not an argument)."""
    idx = _ints(block_indices, "block_indices", 4)
    used = valid_slots(idx, counts, num_blocks=int(idx.max(initial=-1)) + 1)
    if (idx[used] > np.iinfo(np.int32).max).any():
        raise ValueError("block_indices: a block index past int32")
    per_row = used.sum(axis=-1).reshape(-1)  # [B H R]
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    return indptr, idx[used].astype(np.int32)  # boolean indexing keeps C order: rows, then slots


def csr_lists(indptr: ArrayLike, indices: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """CSR -> per-row lists: block_indices [MB, S] (-1 padded, S the longest row) and
    counts [MB]. indptr starts at 0, does not decrease and ends at nnz; every index
    is >= 0 (CSR has no unused marker)."""
    ptr, ind = _ints(indptr, "indptr", 1), _ints(indices, "indices", 1)
    if ptr.size < 1 or ptr[0] != 0 or (np.diff(ptr) < 0).any() or ptr[-1] != ind.size:
        raise ValueError(f"indptr: expected a non-decreasing array from 0 to nnz = {ind.size}, got {ptr.tolist()}")
    if (ind < 0).any():
        raise ValueError(f"indices: expected block indices >= 0, got {ind[ind < 0][:4].tolist()}")
    counts = np.diff(ptr)  # [MB]
    s = int(counts.max(initial=0))
    slot = np.arange(s)
    lists = np.full((counts.size, s), -1, np.int64)
    take = slot < counts[:, None]  # [MB, S]
    lists[take] = ind[(ptr[:-1, None] + slot)[take]]
    return lists, counts


def _csr_call(q, k, v, indptr, indices, block_size_q):
    q, k, v = _float_shape(q, "q", 3), _float_shape(k, "k", 3), _float_shape(v, "v", 3)
    lists, counts = csr_lists(indptr, indices)
    bq = integer(block_size_q, "block_size_q", minimum=1)
    if lists.shape[0] != -(-q.shape[0] // bq):
        raise ValueError(f"indptr: expected ceil(Lq / block_size_q) + 1 = {-(-q.shape[0] // bq) + 1} offsets, "
                         f"got {np.size(indptr)}")
    return q[None], k[None], v[None], lists[None, None], counts[None, None]


def attend_csr(q: ArrayLike, k: ArrayLike, v: ArrayLike, indptr: ArrayLike, indices: ArrayLike, *,
               block_size_q: int = 1, block_size_k: int = 64, causal: bool = False,
               scale: float | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Block-sparse attention in FlashInfer's BSR layout, float64: q [Lq, Hq, D],
    k [Lk, Hkv, D], v [Lk, Hkv, Dv], indptr [ceil(Lq / R) + 1], indices [nnz]
    (R = block_size_q, C = block_size_k, one pattern for every head) ->
    out [Lq, Hq, Dv], lse [Hq, Lq]: `attend` on the lists `csr_lists` reads."""
    out, lse = attend(*_csr_call(q, k, v, indptr, indices, block_size_q), block_size_q=block_size_q,
                      block_size_k=block_size_k, causal=causal, scale=scale)
    return out[0], lse[0]


def emulate_attend_csr(precision: str, q, k, v, indptr, indices, *, block_size_q=1, block_size_k=64, causal=False,
                       scale=None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend_csr` at `precision`: `emulate_attend` on the lists."""
    out, lse = emulate_attend(precision, *_csr_call(q, k, v, indptr, indices, block_size_q),
                              block_size_q=block_size_q, block_size_k=block_size_k, causal=causal, scale=scale)
    return out[0], lse[0]

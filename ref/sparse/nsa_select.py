"""NSA's token selection (Native Sparse Attention, arXiv 2502.11089, section 3.3.2): which
key blocks of length l' (`block_sel`) each query reads, from the compression branch's
probabilities p_cmp (ref.sparse.nsa_compress.compressed_attend).

Importance of selection block j (eq. 9; compressed blocks of length l at stride d,
d | l, d | l', l <= l'):

    p_slc[j] = sum_{m=0}^{l'/d - 1} sum_{n=0}^{l/d - 1} p_cmp[(l'/d)(j + 1) - 1 - m - n]

terms outside 0 .. Tc-1 absent. This is the paper's p_cmp[(l'/d) j - m - n] with block
numbers counted from 1 (selection block j and compressed block i 1-based): compressed
block i then counts toward selection block j once per d-token chunk they share, so the
weight is their overlap / d (`selection_weights`). Read with 0-based numbers as printed,
the formula credits block j with the blocks of block j - 1 (a bug: NsaSelMap). With
l' = l = d it is p_slc = p_cmp.

GQA (eq. 10): p_slc' = sum over the G = Hq / Hkv query heads of a KV group (contiguous
heads, as ref.attention.attend); fla's naive_nsa_topk averages them (`reduce="mean"`,
the same ranking).

Top-n (eq. 11), for the query at position t (queries are the last Lq of `seq_len`
tokens):

    selectable  block j holds a token <= t:  j l' <= t
    forced      j < initial, and the `local` blocks ending at t's own block:
                t // l' - local < j <= t // l'       (paper: 1 initial, 2 local)
    ranking     forced blocks first, then importance descending, ties the lower index
                first; the n best selectable blocks (n counts the forced ones)

The result is a set: each row sorted ascending, -1 after the indices when fewer than n
blocks are selectable. fla's naive_nsa_topk forces block 0, the current and the
previous block (initial 1, local 2), ranks by mean probability with forced blocks at
1.0 and keeps the top block_counts with torch.topk.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.attention.checks import floats

__all__ = ["Reduce", "forced_blocks", "importance", "num_selection_blocks", "select", "selectable_blocks",
           "selection_weights"]


class Reduce(Enum):
    """How the query heads of a KV group combine their importances."""

    SUM = "sum"  # the paper's eq. 10
    MEAN = "mean"  # fla's naive_nsa_topk


def num_selection_blocks(seq_len: int, *, block_sel: int = 64) -> int:
    """ceil(seq_len / l'): the selection blocks of a sequence, the last one partial."""
    seq_len = integer(seq_len, "seq_len", minimum=0)
    return -(-seq_len // integer(block_sel, "block_sel", minimum=1))


def _sizes(block, stride, block_sel) -> tuple[int, int, int]:
    block, stride = integer(block, "block", minimum=1), integer(stride, "stride", minimum=1)
    block_sel = integer(block_sel, "block_sel", minimum=1)
    if block % stride or block_sel % stride or block > block_sel:
        raise ValueError(f"block, stride, block_sel: eq. 9 needs d | l, d | l' and l <= l', got l={block}, "
                         f"d={stride}, l'={block_sel}")
    return block, stride, block_sel


def _sources(tc: int, n_sel: int, block: int, stride: int, block_sel: int) -> NDArray[np.int64]:
    """[n_sel, (l'/d)(l/d)]: the compressed block of each term of eq. 9 (1-based reading)."""
    r, c = block_sel // stride, block // stride
    m, n = np.meshgrid(np.arange(r), np.arange(c), indexing="ij")
    return (r * (np.arange(n_sel)[:, None] + 1) - 1 - (m + n).reshape(1, -1))


def selection_weights(tc: int, n_sel: int, *, block: int = 32, stride: int = 16,
                      block_sel: int = 64) -> NDArray[np.int64]:
    """W [Tc, n_sel]: how many times eq. 9 counts compressed block i toward selection
    block j, = |[i d, i d + l) & [j l', (j + 1) l')| / d."""
    tc, n_sel = integer(tc, "tc", minimum=0), integer(n_sel, "n_sel", minimum=0)
    src = _sources(tc, n_sel, *_sizes(block, stride, block_sel))
    w = np.zeros((tc + 1, n_sel), np.int64)  # row tc collects the absent terms
    np.add.at(w, (np.where((src >= 0) & (src < tc), src, tc), np.arange(n_sel)[:, None]), 1)
    return w[:tc]


def importance(p_cmp: ArrayLike, *, heads_kv: int, block: int = 32, stride: int = 16, block_sel: int = 64,
               seq_len: int | None = None, reduce: Reduce | str = "sum") -> NDArray[np.float64]:
    """p_cmp [B, Lq, Hq, Tc] -> p_slc' [B, Lq, Hkv, n_sel] (n_sel = ceil(seq_len / l')):
    eq. 9's sum over the compressed blocks overlapping each selection block, then eq.
    10's sum (or mean) over each KV group's query heads. A NaN reaches only the
    selection blocks its compressed block overlaps."""
    p = floats(p_cmp, "p_cmp", 4)
    b, lq, hq, tc = p.shape
    hkv = integer(heads_kv, "heads_kv", minimum=1)
    if hq % hkv:
        raise ValueError(f"heads_kv: {hq} query heads do not split into groups of {hkv} KV heads")
    seq_len = lq if seq_len is None else integer(seq_len, "seq_len", minimum=lq)
    reduce = member(reduce, Reduce, "reduce")
    block, stride, block_sel = _sizes(block, stride, block_sel)
    n_sel = num_selection_blocks(seq_len, block_sel=block_sel)
    src = _sources(tc, n_sel, block, stride, block_sel)  # [n_sel, terms]
    padded = np.concatenate([p, np.zeros((b, lq, hq, 1))], axis=3)  # index tc: an absent term, 0
    terms = padded[..., np.where((src >= 0) & (src < tc), src, tc)]  # [B, Lq, Hq, n_sel, terms]
    p_slc = terms.sum(axis=-1)  # eq. 9
    grouped = p_slc.reshape(b, lq, hkv, hq // hkv, n_sel)  # query head h in group h // G
    return grouped.sum(axis=3) if reduce is Reduce.SUM else grouped.mean(axis=3)  # eq. 10


def _positions(lq: int, seq_len: int | None) -> NDArray[np.int64]:
    lq = integer(lq, "lq", minimum=0)
    seq_len = lq if seq_len is None else integer(seq_len, "seq_len", minimum=lq)
    return np.arange(lq) + (seq_len - lq)


def selectable_blocks(lq: int, n_sel: int, *, seq_len: int | None = None, block_sel: int = 64) -> NDArray[np.bool_]:
    """[Lq, n_sel]: block j holds a token at or before the query's position t (j l' <= t)."""
    t = _positions(lq, seq_len)[:, None]
    n_sel, block_sel = integer(n_sel, "n_sel", minimum=0), integer(block_sel, "block_sel", minimum=1)
    return np.arange(n_sel)[None, :] * block_sel <= t


def forced_blocks(lq: int, n_sel: int, *, seq_len: int | None = None, block_sel: int = 64, initial: int = 1,
                  local: int = 2) -> NDArray[np.bool_]:
    """[Lq, n_sel]: the blocks always selected, the `initial` first ones and the `local`
    ones ending at the query's own block t // l' (only those that are selectable)."""
    t = _positions(lq, seq_len)[:, None]
    initial, local = integer(initial, "initial", minimum=0), integer(local, "local", minimum=0)
    n_sel, block_sel = integer(n_sel, "n_sel", minimum=0), integer(block_sel, "block_sel", minimum=1)
    j = np.arange(n_sel)[None, :]
    own = t // block_sel
    forced = (j < initial) | ((j <= own) & (j > own - local))
    return forced & selectable_blocks(lq, n_sel, seq_len=seq_len, block_sel=block_sel)


def select(importance: ArrayLike, *, seq_len: int | None = None, block_sel: int = 64, n: int = 16, initial: int = 1,
           local: int = 2) -> NDArray[np.int32]:
    """importance [B, Lq, Hkv, n_sel] -> block indices int32 [B, Lq, Hkv, n]: the n
    highest-ranked selectable blocks (forced first, then importance descending, ties
    the lower index first), sorted ascending, -1 padded. n_sel must cover the
    sequence (>= ceil(seq_len / l')); NaN importance raises."""
    imp = floats(importance, "importance", 4)
    b, lq, hkv, n_sel = imp.shape
    n = integer(n, "n", minimum=0)
    need = num_selection_blocks(lq if seq_len is None else seq_len, block_sel=block_sel)
    if n_sel < need:
        raise ValueError(f"importance: expected at least ceil(seq_len / block_sel) = {need} blocks, got {n_sel}")
    if np.isnan(imp).any():
        raise ValueError("importance: NaN has no rank (the selection of a NaN score is undefined)")
    ok = selectable_blocks(lq, n_sel, seq_len=seq_len, block_sel=block_sel)[None, :, None, :]
    forced = forced_blocks(lq, n_sel, seq_len=seq_len, block_sel=block_sel, initial=initial, local=local)
    # rank keys, most significant last for lexsort: not selectable, not forced, -importance, index
    index = np.broadcast_to(np.arange(n_sel), imp.shape)
    order = np.lexsort((index, -imp, ~np.broadcast_to(forced[None, :, None, :], imp.shape),
                        ~np.broadcast_to(ok, imp.shape)), axis=-1)
    top = order[..., :n]  # [B, Lq, Hkv, min(n, n_sel)]
    chosen = np.take_along_axis(np.broadcast_to(ok, imp.shape), top, axis=-1)
    picked = np.sort(np.where(chosen, top, n_sel), axis=-1)  # unselectable slots sort last
    out = np.full((b, lq, hkv, n), -1, np.int32)
    out[..., :picked.shape[-1]] = np.where(picked < n_sel, picked, -1)
    return out

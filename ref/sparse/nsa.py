"""NSA, Native Sparse Attention (Yuan et al., arXiv 2502.11089): the selected-attention
branch and the whole gated forward.

Selected attention (fla's `naive_nsa_selection` contract). Query t of KV head n reads the
tokens of its selected blocks that are not after it:

    A_slc(t, n) = { j : j in [b l', (b + 1) l') for a used slot b of block_indices[t, n],
                        j <= t + Tk - Tq }                              (bottom-right causal)
    o_slc, lse_slc = attend(q, k, v, mask = A_slc)                      (ref.attention.attend)

block_indices [B, Tq, Hkv, S]: a slot holding an index < 0 or >= ceil(Tk / l') is unused
(fla skips a block whose start is negative or after the query, so an index past the last
block is never read), and with block_counts [B, Tq, Hkv] the slots s >= count are never
read whatever they hold. A block named twice among the used slots is invalid (a kernel
would read it twice). Query head h reads KV head h // (Hq / Hkv) and its list. The
attention over the selection is ref.sparse.block's gather of the selected blocks.

The whole forward (paper eq. 5, section 3.3):

    o_t = g_cmp o_cmp + g_slc o_slc + g_swa o_swa                       gates [B, T, Hq], inputs

    k_cmp, v_cmp = phi(k), phi(v)               blocks of l tokens, stride d (ref.sparse.nsa_compress)
    o_cmp, p_cmp = attention over the complete compressed blocks (i d + l - 1 <= t)
    p_slc        = p_cmp mapped onto blocks of l' tokens (eq. 9), summed over the GQA group (eq. 10)
    indices      = top-n of p_slc with the initial and local blocks forced (eq. 11)
    o_slc        = selected attention over those blocks (above)
    o_swa        = attend(q, k, v, causal, window_left = w - 1)         the w newest tokens, t's own included

Variants (`Variant`): "paper" (l = 32, d = 16, l' = 64, n = 16, w = 512, phi = mean of
k + pe over each block) and "fla" (flash-linear-attention's `naive_nsa`: one block size
l = d = l' = block_size, non-overlapping mean pooling without position terms, the first,
current and previous blocks forced; window 0 = no sliding branch). The selection is
exact; the three attentions round as their kernels do.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.attention.attend import attend as dense
from ref.attention import emulate
from ref.attention.checks import floats
from ref.sparse import block
from ref.sparse import nsa_compress, nsa_select

__all__ = ["Variant", "attend", "branches", "emulate_attend", "emulate_selected_attend", "selected_attend",
           "selection_slots"]


class Variant(Enum):
    """Whose NSA: the paper's three block sizes and forced blocks, or fla's one block size."""

    PAPER = "paper"
    FLA = "fla"


# ---------------------------------------------------------------------------- selected attention

def selection_slots(block_indices: ArrayLike, block_counts: ArrayLike | None, *, b: int, tq: int, hkv: int,
                    num_blocks: int) -> tuple[NDArray[np.int64], NDArray[np.int64] | None]:
    """fla's [B, Tq, Hkv, S] slots as ref.sparse.block's per-row lists [B, Hkv, Tq, S]
    (and counts [B, Hkv, Tq]): every index outside [0, num_blocks) becomes -1 (unused)."""
    idx = np.asarray(block_indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"block_indices: expected integers, got {idx.dtype}")
    if idx.ndim != 4 or idx.shape[:3] != (b, tq, hkv):
        raise ValueError(f"block_indices: expected [B, Tq, Hkv, S] = [{b}, {tq}, {hkv}, S], got {idx.shape}")
    idx = idx.astype(np.int64)
    idx = np.where((idx >= 0) & (idx < num_blocks), idx, -1).transpose(0, 2, 1, 3)  # [B, Hkv, Tq, S]
    if block_counts is None:
        return idx, None
    counts = np.asarray(block_counts)
    if counts.dtype.kind not in "iu":
        raise TypeError(f"block_counts: expected integers, got {counts.dtype}")
    if counts.shape != (b, tq, hkv):
        raise ValueError(f"block_counts: expected [B, Tq, Hkv] = [{b}, {tq}, {hkv}], got {counts.shape}")
    if np.any(counts < 0) or np.any(counts > idx.shape[-1]):
        raise ValueError(f"block_counts: expected 0 <= count <= S = {idx.shape[-1]}, got {counts.min()}.."
                         f"{counts.max()}")
    return idx, counts.astype(np.int64).transpose(0, 2, 1)  # [B, Hkv, Tq]


def _selected_args(q, k, v, block_indices, block_counts, block_size):
    block_size = integer(block_size, "block_size", minimum=1)
    qf, kf = floats(q, "q", 4), floats(k, "k", 4)
    floats(v, "v", 4)
    b, tq, _, _ = qf.shape
    tk, hkv = kf.shape[1], kf.shape[2]
    if tq > tk:
        raise ValueError(f"q: expected Tq <= Tk = {tk} (queries are the last Tq tokens), got Tq = {tq}")
    idx, counts = selection_slots(block_indices, block_counts, b=b, tq=tq, hkv=hkv,
                                  num_blocks=-(-tk // block_size))
    return idx, counts, block_size


def selected_attend(q: ArrayLike, k: ArrayLike, v: ArrayLike, block_indices: ArrayLike,
                    block_counts: ArrayLike | None = None, *, block_size: int = 64,
                    scale: float | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """NSA's selected branch: each query attends the tokens of its selected blocks not
    after it. q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv], block_indices
    [B, Tq, Hkv, S] int, block_counts [B, Tq, Hkv] int or None. Returns out
    [B, Tq, Hq, Dv] and lse [B, Hq, Tq] (a query with no token: 0 and -inf)."""
    idx, counts, block_size = _selected_args(q, k, v, block_indices, block_counts, block_size)
    return block.attend(q, k, v, idx, counts, block_size_q=1, block_size_k=block_size, causal=True, scale=scale)


def emulate_selected_attend(precision: str, q, k, v, block_indices, block_counts=None, *, block_size=64,
                            scale=None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`selected_attend` at `precision`: ref.sparse.block's emulated gather attention."""
    idx, counts, block_size = _selected_args(q, k, v, block_indices, block_counts, block_size)
    return block.emulate_attend(precision, q, k, v, idx, counts, block_size_q=1, block_size_k=block_size,
                                causal=True, scale=scale)


# ---------------------------------------------------------------------------- the whole forward

_DEFAULTS = {Variant.PAPER: {"block": 32, "stride": 16, "block_sel": 64, "n": 16, "window": 512},
             Variant.FLA: {"block": 64, "stride": 64, "block_sel": 64, "n": 16, "window": 0}}


def _config(variant, block, stride, block_sel, n, window, pe_k, pe_v) -> dict:
    """The variant's block sizes, count and window, each given one checked."""
    variant = member(variant, Variant, "variant")
    given = {"block": block, "stride": stride, "block_sel": block_sel, "n": n, "window": window}
    c = {name: integer(_DEFAULTS[variant][name] if x is None else x, name, minimum=0 if name == "window" else 1)
         for name, x in given.items()}
    if c["n"] < 3:
        raise ValueError(f"n: expected >= 3 (n counts the initial block and the 2 local blocks, which are always "
                         f"selected), got {c['n']}")
    if c["block"] % c["stride"] or c["block_sel"] % c["stride"] or c["block"] > c["block_sel"]:
        raise ValueError(f"block, stride, block_sel: eq. 9 needs stride | block, stride | block_sel and block <= "
                         f"block_sel, got {c['block']}, {c['stride']}, {c['block_sel']}")
    if variant is Variant.FLA and not c["block"] == c["stride"] == c["block_sel"]:
        raise ValueError(f"variant fla: one block size (block = stride = block_sel), got {c['block']}, "
                         f"{c['stride']}, {c['block_sel']}")
    if variant is Variant.FLA and (pe_k is not None or pe_v is not None):
        raise ValueError("variant fla: mean pooling without position terms (pe_k, pe_v must be None)")
    return {**c, "variant": variant}


def _gates(g, name: str, shape) -> NDArray[np.float64]:
    arr = floats(g, name, 3)
    if arr.shape != shape:
        raise ValueError(f"{name}: expected [B, T, Hq] = {list(shape)}, got {arr.shape}")
    return arr


def branches(q: ArrayLike, k: ArrayLike, v: ArrayLike, pe_k: ArrayLike | None = None, pe_v: ArrayLike | None = None,
             *, variant: Variant | str = "paper", block: int | None = None, stride: int | None = None,
             block_sel: int | None = None, n: int | None = None, window: int | None = None,
             scale: float | None = None) -> dict:
    """The three branches of NSA before the gates, and what the selection saw:
    k_cmp, v_cmp [B, Tc, Hkv, D]; o_cmp [B, Tq, Hq, Dv], p_cmp [B, Tq, Hq, Tc]; importance
    [B, Tq, Hkv, n_sel]; indices [B, Tq, Hkv, n] (-1 padded); o_slc, o_swa [B, Tq, Hq, Dv]
    (o_swa 0 when window = 0); and the block sizes, n and window used. Queries are the last
    Tq of the Tk tokens."""
    c = _config(variant, block, stride, block_sel, n, window, pe_k, pe_v)
    qf, kf = floats(q, "q", 4), floats(k, "k", 4)
    floats(v, "v", 4)
    tq, tk, hkv = qf.shape[1], kf.shape[1], kf.shape[2]
    if tq > tk:
        raise ValueError(f"q: expected Tq <= Tk = {tk} (queries are the last Tq tokens), got Tq = {tq}")
    fla = c["variant"] is Variant.FLA
    pool = {"block": c["block"], "stride": c["stride"], "partial": fla}
    k_cmp = nsa_compress.compress(k, pe=pe_k, **pool)  # [B, Tc, Hkv, D]: block i over [i d, i d + l)
    v_cmp = nsa_compress.compress(v, pe=pe_v, **pool)
    o_cmp, _, p_cmp = nsa_compress.compressed_attend(q, k_cmp, v_cmp, seq_len=tk, block=c["block"],
                                                     stride=c["stride"], scale=scale)
    imp = nsa_select.importance(p_cmp, heads_kv=hkv, block=c["block"], stride=c["stride"],
                                block_sel=c["block_sel"], seq_len=tk, reduce="mean" if fla else "sum")
    indices = nsa_select.select(imp, seq_len=tk, block_sel=c["block_sel"], n=c["n"])  # [B, Tq, Hkv, n]
    o_slc, _ = selected_attend(q, k, v, indices, block_size=c["block_sel"], scale=scale)
    o_swa = np.zeros_like(o_slc)
    if c["window"] > 0:  # the w newest tokens, the query's own included (flash_attn's window (w - 1, 0))
        o_swa, _ = dense(q, k, v, causal=True, window_left=c["window"] - 1, scale=scale)
    return {"k_cmp": k_cmp, "v_cmp": v_cmp, "o_cmp": o_cmp, "p_cmp": p_cmp, "importance": imp, "indices": indices,
            "o_slc": o_slc, "o_swa": o_swa, **{name: c[name] for name in ("block", "stride", "block_sel", "n", "window")}}


def attend(q: ArrayLike, k: ArrayLike, v: ArrayLike, g_cmp: ArrayLike, g_slc: ArrayLike, g_swa: ArrayLike,
           pe_k: ArrayLike | None = None, pe_v: ArrayLike | None = None, *, variant: Variant | str = "paper",
           block: int | None = None, stride: int | None = None, block_sel: int | None = None, n: int | None = None,
           window: int | None = None, scale: float | None = None) -> NDArray[np.float64]:
    """NSA's output o = g_cmp o_cmp + g_slc o_slc + g_swa o_swa (eq. 5). q [B, Tq, Hq, D],
    k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv], gates [B, Tq, Hq] (already through the sigmoid),
    pe_k, pe_v [block, D] / [block, Dv] the intra-block position terms (paper only). Block
    sizes, n and the window default to the variant's (paper: 32, 16, 64, 16, 512; fla: 64,
    64, 64, 16, 0). Returns out [B, Tq, Hq, Dv]."""
    br = branches(q, k, v, pe_k, pe_v, variant=variant, block=block, stride=stride, block_sel=block_sel, n=n,
                  window=window, scale=scale)
    shape = br["o_slc"].shape[:3]
    g = [_gates(x, name, shape)[..., None] for x, name in ((g_cmp, "g_cmp"), (g_slc, "g_slc"), (g_swa, "g_swa"))]
    return g[0] * br["o_cmp"] + g[1] * br["o_slc"] + g[2] * br["o_swa"]


def emulate_attend(precision: str, q, k, v, g_cmp, g_slc, g_swa, pe_k=None, pe_v=None, *, variant="paper",
                   block=None, stride=None, block_sel=None, n=None, window=None, scale=None) -> NDArray[np.float64]:
    """`attend` at `precision`: the compression, the compressed, selected and window
    attentions each emulated (their own emulations), the selection the oracle's (exact: the
    vectors keep its margins clear), gates at P, the gated sum in float32, the output at P."""
    exact = attend(q, k, v, g_cmp, g_slc, g_swa, pe_k, pe_v, variant=variant, block=block, stride=stride,
                   block_sel=block_sel, n=n, window=window, scale=scale)  # checks every argument
    if precision == "float64":
        return exact
    c = _config(variant, block, stride, block_sel, n, window, pe_k, pe_v)
    br = branches(q, k, v, pe_k, pe_v, variant=variant, block=block, stride=stride, block_sel=block_sel, n=n,
                  window=window, scale=scale)
    tk = np.shape(k)[1]
    pool = {"block": c["block"], "stride": c["stride"], "partial": c["variant"] is Variant.FLA}
    k_cmp = nsa_compress.emulate_compress(precision, k, pe=pe_k, **pool)
    v_cmp = nsa_compress.emulate_compress(precision, v, pe=pe_v, **pool)
    o_cmp = nsa_compress.emulate_compressed_attend(precision, q, k_cmp, v_cmp, seq_len=tk, block=c["block"],
                                                   stride=c["stride"], scale=scale)[0]
    o_slc, _ = emulate_selected_attend(precision, q, k, v, br["indices"], block_size=c["block_sel"], scale=scale)
    o_swa = np.zeros_like(o_slc)
    if c["window"] > 0:
        o_swa, _ = emulate.attend(precision, q, k, v, causal=True, window_left=c["window"] - 1, scale=scale)
    rnd = emulate.rounder(precision)
    f32 = [rnd(x).astype(np.float32) for x in (o_cmp, o_slc, o_swa)]
    gates = [rnd(np.asarray(g, np.float64)).astype(np.float32)[..., None] for g in (g_cmp, g_slc, g_swa)]
    return rnd(gates[0] * f32[0] + gates[1] * f32[1] + gates[2] * f32[2])

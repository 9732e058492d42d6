"""NSA's compression branch (Native Sparse Attention, arXiv 2502.11089, section 3.3.1):
keys and values pooled into block representations, and the attention of each query
over the compressed blocks it may see.

Compression (eq. 7), block length l (`block`), stride d (`stride`), tokens 0-based:

    K_cmp[i] = phi(k[i d : i d + l])      i = 0 .. floor((T - l) / d)
    phi(x)   = mean over the block's tokens of (x_j + pe_j)

Only complete blocks exist (Tc = floor((T - l)/d) + 1 for T >= l, else 0). The paper's
phi is a learnable MLP with an intra-block position encoding; the oracle's phi is its
default here, mean pooling of the tokens plus a position term pe [l, D] (or [l, H, D])
given as an input, zero when absent. flash-linear-attention's simplified NSA
(fla.ops.nsa) pools non-overlapping blocks (d = l) with fla.ops.utils.mean_pooling, which
also pools the trailing partial block over the tokens it has: `partial=True`.

Compressed attention (eq. 5 with the compressed keys; eq. 8's probabilities):

    query at position t sees block i  iff  i d + l - 1 <= t   (the block is complete)
    (out, lse) = ref.attention.attend(q, K_cmp, V_cmp, mask=visible, scale=scale)
    p_cmp[t, i] = exp(scale q_t . K_cmp[i] - lse_t) at visible blocks, 0 elsewhere

The paper's K_cmp_t lists blocks 0 .. floor((t - l)/d) for 1-based t, which is the same
rule; fla's naive_nsa_compression allows block c iff (c + 1) l - 1 <= t, the same rule
with d = l. Queries are the last Lq tokens of a sequence of `seq_len` tokens (query i
at position seq_len - Lq + i; seq_len None: Lq). A row that sees no block: out 0,
lse -inf, p_cmp 0 (attend's rule).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer
from ref.attention import attend, emulate
from ref.attention.checks import floats

__all__ = ["compress", "compressed_attend", "compressed_visible", "emulate_compress",
           "emulate_compressed_attend", "num_compressed"]


def _sizes(block, stride) -> tuple[int, int]:
    block = integer(block, "block", minimum=1)
    stride = integer(stride, "stride", minimum=1)
    if stride > block:
        raise ValueError(f"stride: expected a stride d <= block l = {block} (no token skipped), got {stride}")
    return block, stride


def num_compressed(seq_len: int, *, block: int = 32, stride: int = 16, partial: bool = False) -> int:
    """Tc, the number of compressed blocks of `seq_len` tokens: the complete ones,
    floor((T - l)/d) + 1 (0 when T < l); with `partial` (fla's mean pooling, d = l)
    ceil(T / l), the trailing partial block included."""
    t = integer(seq_len, "seq_len", minimum=0)
    block, stride = _sizes(block, stride)
    if boolean(partial, "partial"):
        if stride != block:
            raise ValueError(f"partial: a partial trailing block is fla's non-overlapping pooling (stride = block),"
                             f" got block={block}, stride={stride}")
        return -(-t // block)
    return (t - block) // stride + 1 if t >= block else 0


def _pooling(t: int, block: int, stride: int, partial: bool) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Token index [Tc, l] of each block's slots and which slots hold a token."""
    tc = num_compressed(t, block=block, stride=stride, partial=partial)
    idx = np.arange(tc)[:, None] * stride + np.arange(block)[None, :]  # [Tc, l]
    return np.minimum(idx, max(t - 1, 0)), idx < t


def _position_term(pe, block: int, h: int, d: int) -> NDArray[np.float64]:
    if pe is None:
        return np.zeros((block, 1, d))
    arr = np.asarray(pe)
    if arr.ndim == 2:
        arr = arr[:, None, :]
    pe = floats(arr, "pe", 3)
    if pe.shape[0] != block or pe.shape[1] not in (1, h) or pe.shape[2] != d:
        raise ValueError(f"pe: expected the position term [l = {block}, D = {d}] or [l, H = {h}, D], "
                         f"got {np.shape(arr)}")
    return pe  # [l, 1 or H, D]


def _compress_parts(x, pe, block, stride, partial):
    x = floats(x, "x", 4)  # [B, T, H, D]
    block, stride = _sizes(block, stride)
    partial = boolean(partial, "partial")
    b, t, h, d = x.shape
    idx, present = _pooling(t, block, stride, partial)
    term = _position_term(pe, block, h, d)  # [l, 1 or H, D]
    return x, term, idx, present


def compress(x: ArrayLike, *, pe: ArrayLike | None = None, block: int = 32, stride: int = 16,
             partial: bool = False) -> NDArray[np.float64]:
    """x [B, T, H, D] (keys or values) -> [B, Tc, H, D]: block i the mean of x_j + pe[j - i d]
    over its tokens j in [i d, i d + l) (eq. 7 with mean pooling). A NaN reaches only
    the blocks holding its token."""
    x, term, idx, present = _compress_parts(x, pe, block, stride, partial)
    windows = x[:, idx] + term[None, None]  # [B, Tc, l, H, D]: gathered, so other blocks never read a token
    keep = present[None, :, :, None, None]
    total = np.where(keep, windows, 0.0).sum(axis=2)  # [B, Tc, H, D]
    count = present.sum(axis=1)[None, :, None, None]  # tokens per block: l, or fewer in fla's partial block
    return total / np.maximum(count, 1)


def emulate_compress(precision: str, x, *, pe=None, block=32, stride=16, partial=False) -> NDArray[np.float64]:
    """`compress` as a kernel at `precision`: x and pe stored at P, each x + pe stored at
    P, the block sum accumulated in float32 in token order, divided in float32, the mean
    stored at P."""
    rnd = emulate.rounder(precision)
    x, term, idx, present = _compress_parts(x, pe, block, stride, partial)
    if precision == "float64":
        return compress(x, pe=pe, block=block, stride=stride, partial=partial)
    windows = rnd(rnd(x)[:, idx] + rnd(term)[None, None]).astype(np.float32)  # [B, Tc, l, H, D]
    total = np.zeros(windows.shape[:2] + windows.shape[3:], np.float32)
    for j in range(windows.shape[2]):  # a float32 running sum over the l slots
        total = np.where(present[None, :, j, None, None], total + windows[:, :, j], total)
    count = np.maximum(present.sum(axis=1), 1).astype(np.float32)[None, :, None, None]
    return rnd(total / count)


def compressed_visible(lq: int, tc: int, *, seq_len: int | None = None, block: int = 32,
                       stride: int = 16) -> NDArray[np.bool_]:
    """[Lq, Tc]: query i (position t = seq_len - Lq + i) sees compressed block c iff the
    block is complete at t: c d + l - 1 <= t."""
    lq, tc = integer(lq, "lq", minimum=0), integer(tc, "tc", minimum=0)
    seq_len = lq if seq_len is None else integer(seq_len, "seq_len", minimum=lq)
    block, stride = _sizes(block, stride)
    t = np.arange(lq)[:, None] + (seq_len - lq)  # [Lq, 1]: the query's token position
    return np.arange(tc)[None, :] * stride + block - 1 <= t


def _attend_args(q, k_cmp, v_cmp, seq_len, block, stride, scale):
    qq, kk = np.asarray(q), np.asarray(k_cmp)
    if qq.ndim != 4 or kk.ndim != 4:
        raise ValueError(f"q, k_cmp: expected [B, Lq, Hq, D] and [B, Tc, Hkv, D], got {qq.shape} and {kk.shape}")
    visible = compressed_visible(qq.shape[1], kk.shape[1], seq_len=seq_len, block=block, stride=stride)
    return {"mask": visible, "scale": scale}, visible


def _probabilities(logits, lse, visible) -> NDArray[np.float64]:
    """p_cmp [B, Lq, Hq, Tc] from logits [B, Hq, Lq, Tc] and lse [B, Hq, Lq]."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.where(visible[None, None], np.exp(logits - np.where(np.isfinite(lse), lse, 0)[..., None]), 0.0)
    p = np.where(np.isnan(lse)[..., None] & visible[None, None], np.nan, p)
    return np.ascontiguousarray(p.transpose(0, 2, 1, 3))


def _logits(q, k, scale) -> NDArray[np.float64]:
    """scale * q . k per query head and block: [B, Hq, Lq, Tc], KV head h // G."""
    b, lq, hq, d = q.shape
    g = hq // k.shape[2]
    kk = np.repeat(k, g, axis=2)  # [B, Tc, Hq, D]
    with np.errstate(invalid="ignore", over="ignore"):
        return np.einsum("bqhd,bchd->bhqc", q, kk) * scale


def compressed_attend(q: ArrayLike, k_cmp: ArrayLike, v_cmp: ArrayLike, *, seq_len: int | None = None,
                      block: int = 32, stride: int = 16, scale: float | None = None
                      ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """q [B, Lq, Hq, D] over the compressed keys k_cmp [B, Tc, Hkv, D] and values v_cmp
    [B, Tc, Hkv, Dv] -> (out [B, Lq, Hq, Dv], lse [B, Hq, Lq], p_cmp [B, Lq, Hq, Tc]):
    ref.attention.attend with the complete-block mask, and the softmax probabilities."""
    options, visible = _attend_args(q, k_cmp, v_cmp, seq_len, block, stride, scale)
    out, lse = attend(q, k_cmp, v_cmp, **options)  # checks q, k_cmp, v_cmp and the scale
    qf, kf = floats(q, "q", 4), floats(k_cmp, "k_cmp", 4)
    s = 1.0 / math.sqrt(qf.shape[3]) if scale is None else float(scale)
    return out, lse, _probabilities(_logits(qf, kf, s), lse, visible)


def emulate_compressed_attend(precision: str, q, k_cmp, v_cmp, *, seq_len=None, block=32, stride=16, scale=None):
    """`compressed_attend` at `precision`: (out, lse) as ref.attention.emulate.attend
    (inputs and logits stored at P, softmax in float32); p_cmp from the logits stored at
    P (q * scale then the product, or the product then the scale: whichever lands
    further), exp(s - lse) in float32, stored at P."""
    options, visible = _attend_args(q, k_cmp, v_cmp, seq_len, block, stride, scale)
    out, lse = emulate.attend(precision, q, k_cmp, v_cmp, **options)
    exact = compressed_attend(q, k_cmp, v_cmp, seq_len=seq_len, block=block, stride=stride, scale=scale)
    if precision == "float64":
        return exact
    rnd = emulate.rounder(precision)
    qf, kf = rnd(floats(q, "q", 4)), rnd(floats(k_cmp, "k_cmp", 4))
    s = np.float32(1.0 / math.sqrt(qf.shape[3]) if scale is None else scale)
    forms = []
    for logits in (rnd(_logits(rnd(qf * s), kf, 1.0)), rnd(_logits(qf, kf, 1.0) * s)):
        logits = logits.astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            masked = np.where(visible[None, None], logits, -np.inf)
            m = masked.max(axis=-1, initial=-np.inf)
            z = np.exp(masked - np.where(np.isfinite(m), m, 0)[..., None]).sum(axis=-1, dtype=np.float32)
            lse32 = np.where(z > 0, np.where(np.isfinite(m), m, 0) + np.log(np.where(z > 0, z, 1)), -np.inf)
        forms.append((out, lse, rnd(_probabilities(logits.astype(np.float64), lse32.astype(np.float32), visible))))
    return emulate.worse(exact, *forms)

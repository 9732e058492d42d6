"""MoBA, Mixture of Block Attention: each query attends the key chunks its gate picks.

The keys of a sequence are cut into N = ceil(Lk / B) chunks of B = chunk_size tokens
from position 0 (the last chunk partial when B does not divide Lk). For query i at key
position p = i + Lk - Lq (bottom-right, as `ref.attention.attend`; MoBA's prefill has
Lq = Lk, so p = i) and query head h (KV head n = h // G, G = Hq / Hkv):

    mean_c   = (1 / |c|) sum_{j in c} k_j          |c| the chunk's own token count
    s_c      = q_i . mean_c                         no 1/sqrt(D): MoBA's gate is unscaled
    s_c      = -inf  if c * B > p                   a future chunk is never selected
    s_c      = +inf  if c = floor(p / B)            the current chunk is always selected
    I(i, h)  = the K = min(top_k, N) largest s_c, -inf excluded (top_k counts the current
               chunk); ties: the lower chunk index first
    A(i, h)  = {j in the chunks of I(i, h) : j <= p}   token-level causal mask: the
               current chunk sees only its keys up to p
    out, lse = attend(q, k, v, mask=A), scale 1/sqrt(D)

With top_k >= N every past chunk is selected and `attend` is full causal attention.
`attend_varlen` is MoBA's packed layout (q, k, v [S, H, D] and cu_seqlens): chunks and
positions restart at each sequence's first token.

Reference: Lu et al., "MoBA: Mixture of Block Attention for Long-Context LLMs",
arXiv 2502.13189 (eqs. 3-6); the reference code `moba_attn_varlen_naive` of
github.com/MoonshotAI/MoBA (spec/sparse.md#moba, "Differences").
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer
from ref.attention import emulate
from ref.attention.attend import attend as dense_attend
from ref.attention.checks import attention_inputs, floats, offsets

__all__ = ["attend", "attend_varlen", "chunk_mask", "chunk_means", "emulate_attend", "emulate_attend_varlen",
           "emulate_gate", "gate", "n_chunks", "select"]


def n_chunks(length: int, chunk_size: int) -> int:
    """N = ceil(length / chunk_size): the chunks of `length` keys, the last partial."""
    length, chunk_size = integer(length, "length", minimum=0), integer(chunk_size, "chunk_size", minimum=1)
    return -(-length // chunk_size)


def _qk(q, k):
    q, k = floats(q, "q", 4), floats(k, "k", 4)
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"k: expected [B, Lk, Hkv, D] with B, D of q {q.shape}, got {k.shape}")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"k: its {k.shape[2]} KV heads must divide the {q.shape[2]} query heads of q")
    return q, k


def _sums(k: NDArray, chunk_size: int) -> tuple[NDArray, NDArray]:
    """Each chunk's key sum [B, N, Hkv, D] and token count [N]."""
    b, lk, hkv, d = k.shape
    n = n_chunks(lk, chunk_size)
    padded = np.zeros((b, n * chunk_size, hkv, d), k.dtype)
    padded[:, :lk] = k
    counts = np.minimum(chunk_size, lk - chunk_size * np.arange(n))  # [N]: the last may be partial
    return padded.reshape(b, n, chunk_size, hkv, d).sum(axis=2), counts


def chunk_means(k: ArrayLike, *, chunk_size: int) -> NDArray[np.float64]:
    """mean_c: the mean of each chunk's keys [B, N, Hkv, D], k [B, Lk, Hkv, D]; the
    partial last chunk is the mean of its own tokens."""
    k = floats(k, "k", 4)
    chunk_size = integer(chunk_size, "chunk_size", minimum=1)
    sums, counts = _sums(k, chunk_size)
    return sums / counts[None, :, None, None]


def _markers(scores: NDArray, lq: int, lk: int, chunk_size: int) -> NDArray:
    """-inf at future chunks (c * B > p), +inf at the current one (c = p // B);
    scores [B, Lq, Hq, N]."""
    p = np.arange(lq) + (lk - lq)  # [Lq]: each query's key position
    c = np.arange(scores.shape[-1])  # [N]
    future = (c[None, :] * chunk_size > p[:, None])[None, :, None, :]
    current = (c[None, :] == p[:, None] // chunk_size)[None, :, None, :] & (p[:, None] >= 0)[None, :, None, :]
    return np.where(future, -np.inf, np.where(current, np.inf, scores))


def gate(q: ArrayLike, k: ArrayLike, *, chunk_size: int) -> NDArray[np.float64]:
    """The gate scores s [B, Lq, Hq, N] = q . mean_c (unscaled), -inf at future chunks
    and +inf at the current one; q [B, Lq, Hq, D], k [B, Lk, Hkv, D]."""
    q, k = _qk(q, k)
    b, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    means = chunk_means(k, chunk_size=chunk_size)  # [B, N, Hkv, D]
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.einsum("bingd,bcnd->bingc", q.reshape(b, lq, hkv, hq // hkv, d), means)
    return _markers(s.reshape(b, lq, hq, means.shape[1]), lq, lk, chunk_size)


def select(scores: ArrayLike, *, top_k: int) -> NDArray[np.int32]:
    """I: the K = min(top_k, N) best chunks of each row of scores [..., N], -inf never
    selected, as int32 [..., K] sorted ascending with -1 pads last.

    Rank: +inf (the current chunk) first, then NaN (ranked above every number, as
    torch.topk does, but below the current chunk), then finite scores descending;
    equal scores: the lower index first."""
    if np.ndim(scores) < 1:
        raise ValueError(f"scores: expected [..., N] with at least 1 dimension, got shape {np.shape(scores)}")
    s = floats(scores, "scores", np.ndim(scores))
    top_k = integer(top_k, "top_k", minimum=1)
    n = s.shape[-1]
    kk = min(top_k, n)
    rank = np.select([s == np.inf, np.isnan(s), s == -np.inf], [0, 1, 3], 2)  # [..., N]
    order = np.lexsort((np.where(rank == 2, -s, 0.0), rank), axis=-1)[..., :kk]  # stable: lower index first
    picked = np.take_along_axis(rank, order, axis=-1) < 3
    chosen = np.where(picked, order, n)
    return np.where(np.sort(chosen, axis=-1) == n, -1, np.sort(chosen, axis=-1)).astype(np.int32)


def _selected_keys(chosen: NDArray, n: int, lq: int, lk: int, chunk_size: int) -> NDArray[np.bool_]:
    """A: chosen [B, Lq, Hq, K] chunk indices -> the mask [B, Hq, Lq, Lk], causal."""
    b, _, hq, _ = chosen.shape
    hit = np.zeros((b, lq, hq, n + 1), bool)  # column n takes the -1 pads
    np.put_along_axis(hit, np.where(chosen < 0, n, chosen).astype(np.int64), True, axis=-1)
    keys = np.repeat(hit[..., :n], chunk_size, axis=-1)[..., :lk]  # [B, Lq, Hq, Lk]
    causal = np.arange(lk)[None, :] <= (np.arange(lq) + (lk - lq))[:, None]  # [Lq, Lk]: j <= p
    return np.ascontiguousarray((keys & causal[None, :, None, :]).transpose(0, 2, 1, 3))


def chunk_mask(q: ArrayLike, k: ArrayLike, *, chunk_size: int, top_k: int) -> NDArray[np.bool_]:
    """A(i, h) as `attend`'s mask [B, Hq, Lq, Lk]: the keys of the selected chunks up
    to the query's position."""
    s = gate(q, k, chunk_size=chunk_size)  # [B, Lq, Hq, N]
    lq, lk = np.shape(q)[1], np.shape(k)[1]
    return _selected_keys(select(s, top_k=top_k), s.shape[-1], lq, lk, chunk_size)


def attend(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, chunk_size: int, top_k: int
           ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """MoBA attention: out [B, Lq, Hq, Dv] and lse [B, Hq, Lq] of `attend` over
    A(i, h), scale 1/sqrt(D); q [B, Lq, Hq, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv]."""
    return dense_attend(q, k, v, mask=chunk_mask(q, k, chunk_size=chunk_size, top_k=top_k))


def _packed(q, k, v, cu_seqlens):
    q, k, v = floats(q, "q", 3), floats(k, "k", 3), floats(v, "v", 3)
    cu = offsets(cu_seqlens, "cu_seqlens")
    if not q.shape[0] == k.shape[0] == v.shape[0] == cu[-1]:
        raise ValueError(f"cu_seqlens: its last offset {cu[-1]} must equal the packed lengths of q, k, v "
                         f"({q.shape[0]}, {k.shape[0]}, {v.shape[0]})")
    return q, k, v, cu


def _per_sequence(fn, q, k, v, cu_seqlens, chunk_size, top_k):
    q, k, v, cu = _packed(q, k, v, cu_seqlens)
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]))  # [S, Hq, Dv]
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)  # [Hq, S]
    attention_inputs(q[None], k[None], v[None])  # heads and dims, empty batches too
    for s in range(cu.size - 1):
        rows = slice(cu[s], cu[s + 1])
        o, l = fn(q[None, rows], k[None, rows], v[None, rows], chunk_size=chunk_size, top_k=top_k)
        out[rows], lse[:, rows] = o[0], l[0]
    return out, lse


def attend_varlen(q: ArrayLike, k: ArrayLike, v: ArrayLike, cu_seqlens: ArrayLike, *, chunk_size: int,
                  top_k: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """MoBA over a packed batch (self-attention, Lq = Lk per sequence): q [S, Hq, D],
    k [S, Hkv, D], v [S, Hkv, Dv], cu_seqlens [n + 1] -> out [S, Hq, Dv], lse [Hq, S];
    each sequence's chunks start at its own first token."""
    chunk_size, top_k = integer(chunk_size, "chunk_size", minimum=1), integer(top_k, "top_k", minimum=1)
    return _per_sequence(attend, q, k, v, cu_seqlens, chunk_size, top_k)


def emulate_gate(precision: str, q, k, *, chunk_size: int) -> NDArray[np.float64]:
    """`gate` at precision P: q and k at P, each chunk's sum in float32 divided by its
    count in float32 and stored at P (MoBA's reference keeps the means in k's dtype),
    then q . mean accumulated in float32."""
    exact = gate(q, k, chunk_size=chunk_size)  # checks every argument
    if precision == "float64":
        return exact
    rnd = emulate.rounder(precision)
    qp, kp = _qk(rnd(q), rnd(k))
    b, lq, hq, d = qp.shape
    hkv = kp.shape[2]
    sums, counts = _sums(kp.astype(np.float32), int(chunk_size))
    means = rnd(sums / counts.astype(np.float32)[None, :, None, None]).astype(np.float32)  # [B, N, Hkv, D]
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.einsum("bingd,bcnd->bingc", qp.astype(np.float32).reshape(b, lq, hkv, hq // hkv, d), means)
    return _markers(s.reshape(b, lq, hq, means.shape[1]).astype(np.float64), lq, kp.shape[1], int(chunk_size))


def emulate_attend(precision: str, q, k, v, *, chunk_size: int, top_k: int):
    """`attend` at precision P: the float64 selection, then ref.attention.emulate.attend
    at P over it (the vectors keep every selection margin clear of P's rounding)."""
    mask = chunk_mask(q, k, chunk_size=chunk_size, top_k=top_k)
    return emulate.attend(precision, q, k, v, mask=mask)


def emulate_attend_varlen(precision: str, q, k, v, cu_seqlens, *, chunk_size: int, top_k: int):
    """`attend_varlen` at precision P: `emulate_attend` per sequence."""
    chunk_size, top_k = integer(chunk_size, "chunk_size", minimum=1), integer(top_k, "top_k", minimum=1)
    return _per_sequence(lambda *a, **o: emulate_attend(precision, *a, **o), q, k, v, cu_seqlens, chunk_size,
                         top_k)

"""The MoBA bug corpus: wrong kernels written the way chunk-gated attention goes wrong,
each one step changed from the default run's (ref.conformance.adapters.numpy_sparse_moba).

MOBA_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import math

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_sparse_moba as K
from ref.conformance.implementation import Implementation

P = "sparse.moba."
_F32 = np.float32


def _no_causal(original):
    """The selected chunks read whole: the current chunk's keys after the query too."""
    def row_keys(chunks, p, chunk_size, lk):
        return original(chunks, lk, chunk_size, lk)
    return row_keys


def _causal_strict(original):
    """Causal inside the current chunk as j < p: the query's own key dropped."""
    def row_keys(chunks, p, chunk_size, lk):
        return original(chunks, p - 1, chunk_size, lk)
    return row_keys


def _future_open(original):
    """Future chunks keep their scores (only the current chunk is forced)."""
    def markers(scores, pos, chunk_size):
        forced = original(scores, pos, chunk_size)
        return np.where(forced == np.inf, forced, scores)
    return markers


def _own_short(original):
    """The current chunk's last token not counted as inside it (pos < start + B - 1)."""
    def markers(scores, pos, chunk_size):
        starts = np.arange(scores.shape[-1]) * chunk_size
        future = (starts[None, :] > pos[:, None])[None, :, None, :]
        own = ((starts[None, :] <= pos[:, None]) & (pos[:, None] < starts[None, :] + chunk_size - 1))[None, :, None, :]
        return np.where(own, _F32(np.inf), np.where(future, _F32(-np.inf), scores))
    return markers


def _scaled_gate(original):
    return lambda d: 1.0 / math.sqrt(d)


def _chunk_sums(original):
    """The gate over each chunk's key sum, not its mean."""
    def sums(k, chunk_size):
        lk = k.shape[1]
        starts = K.chunk_starts(lk, chunk_size)
        return np.add.reduceat(k, starts, axis=1) if starts.size else original(k, chunk_size)
    return sums


def _k_plus_current(original):
    """top_k past chunks plus the current one: k not counting the current chunk."""
    return lambda scores, top_k: original(scores, top_k + 1)


def _fill_future(scores, top_k):
    """torch.topk's raw pick: -inf (future) chunks fill the slots when fewer are visible."""
    s = np.asarray(scores).astype(np.float64)
    n = s.shape[-1]
    kk = min(int(top_k), n)
    order = np.argsort(np.where(np.isnan(s), -np.inf, -s), axis=-1, kind="stable")[..., :kk]
    return np.sort(order, axis=-1).astype(np.int32)


def _ties_high(original):
    """Equal scores: the higher chunk index first (the stable sort run on the reversed row)."""
    def top(scores, top_k):
        n = scores.shape[-1]
        picked = original(scores[..., ::-1], top_k)
        idx = np.sort(np.where(picked >= 0, n - 1 - picked, n), axis=-1)
        return np.where(idx == n, -1, idx).astype(np.int32)
    return top


def _nan_last(scores, top_k):
    """NumPy's sort order: NaN scores rank below every number."""
    s = np.asarray(scores).astype(np.float64)
    return K.top_chunks(np.where(np.isnan(s), np.float64(-1e300), s), int(top_k))


def _interleaved(original):
    return lambda hq, hkv: np.arange(hq) % hkv


def _top_left(original):
    return lambda lq, lk: np.arange(lq)


def _multiply_mask(q, k, v, chunk_size, top_k):
    """Dense scores with unselected keys' probabilities multiplied by 0: 0 * NaN reaches out."""
    q, k, v = (np.asarray(x, _F32) for x in (q, k, v))
    b, lq, hq, d = q.shape
    lk = k.shape[1]
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or v.shape[:3] != k.shape[:3] or lq == 0 or lk == 0:
        return K.attend(q, k, v, chunk_size, top_k)
    chosen = K.select(K.gate(q, k, chunk_size), top_k)  # [B, Lq, Hq, K]
    heads = K.kv_head_of(hq, k.shape[2])
    pos = K.positions(lq, lk)
    keep = np.zeros((b, lq, hq, lk), bool)
    for c in range(-(-lk // int(chunk_size))):
        sel = (chosen == c).any(-1)[..., None]
        cols = (np.arange(lk) >= c * chunk_size) & (np.arange(lk) < (c + 1) * chunk_size)
        keep |= sel & cols[None, None, None, :]
    keep &= (np.arange(lk)[None, :] <= pos[:, None])[None, :, None, :]
    kh, vh = k[:, :, heads], v[:, :, heads]  # [B, Lk, Hq, D]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = np.einsum("bihd,bjhd->bihj", q, kh) / _F32(math.sqrt(d))
        m = np.where(keep, s, -np.inf).max(-1, keepdims=True)
        p = np.exp(np.where(keep, s - np.where(np.isfinite(m), m, 0), -np.inf)) * keep
        z = p.sum(-1)
        out = np.einsum("bihj,bjhd->bihd", p, vh) / np.where(z > 0, z, 1)[..., None]
        lse = np.where(z > 0, np.squeeze(m, -1) + np.log(np.where(z > 0, z, 1)), -np.inf)
    return out.astype(_F32), lse.transpose(0, 2, 1).astype(_F32)


def _no_row_max(original):
    """exp(s) summed as it is: no row maximum subtracted."""
    def row(qv, kk, vv, scale):
        if kk.shape[0] == 0:
            return original(qv, kk, vv, scale)
        e = np.exp((kk @ qv) * _F32(scale))
        z = e.sum(dtype=_F32)
        return (e @ vv) / z, _F32(np.log(z))
    return row


def _empty_row_zero_lse(q, k, v, chunk_size, top_k):
    """A row that sees no key returns lse 0 (log of an empty sum taken as log 1)."""
    out, lse = K.attend(q, k, v, chunk_size, top_k)
    return out, np.where(np.isneginf(lse), _F32(0), lse)


def _packed_chunks(q, k, v, cu_seqlens, chunk_size, top_k):
    """Chunks cut on the packed index (j // B over the whole batch), not from each
    sequence's first token: a sequence starting mid-chunk gets a short first chunk."""
    out, lse = K.attend_varlen(q, k, v, cu_seqlens, chunk_size, top_k)  # checks, and the right shapes
    qf, kf, vf = (np.asarray(x, _F32) for x in (q, k, v))
    cs, heads = int(chunk_size), K.kv_head_of(qf.shape[1], kf.shape[1])
    for lo, hi in K.sequence_bounds(np.asarray(cu_seqlens)):
        if hi == lo:
            continue
        cid = np.arange(lo, hi) // cs - lo // cs  # [n]: chunk of each token on the packed grid
        nc = int(cid[-1]) + 1
        first = np.array([np.flatnonzero(cid == c)[0] for c in range(nc)])
        means = np.stack([kf[lo:hi][cid == c].mean(0) for c in range(nc)])  # [nc, Hkv, D]
        s = np.einsum("ihd,chd->ihc", qf[lo:hi], means[:, heads])  # [n, Hq, nc]
        i = np.arange(hi - lo)
        s = np.where((first[None, :] > i[:, None])[:, None, :], -np.inf, s)
        s = np.where((np.arange(nc)[None, :] == cid[:, None])[:, None, :], np.inf, s)
        chosen = K.top_chunks(s, int(top_k))  # [n, Hq, K]
        for r in range(hi - lo):
            for h in range(qf.shape[1]):
                keys = np.flatnonzero(np.isin(cid, chosen[r, h][chosen[r, h] >= 0]) & (i <= r))
                o, l = K.attend_row(qf[lo + r, h], kf[lo + keys, heads[h]], vf[lo + keys, heads[h]],
                                    1.0 / math.sqrt(qf.shape[2]))
                out[lo + r, h], lse[h, lo + r] = o, l
    return out, lse


MOBA_BUGS = {
    "current chunk not causally masked": (P + "attend", "MobaCausal", patched(K.attend, K, "row_keys", _no_causal)),
    "current chunk causal mask excluding the query's own key": (
        P + "attend", "MobaCausal", patched(K.attend, K, "row_keys", _causal_strict)),
    "a future chunk selectable (gate not -inf there)": (
        P + "attend", "MobaFuture", patched(K.attend, K, "gate_markers", _future_open)),
    "future chunks left in the gate scores": (P + "gate", "MobaFuture",
                                              patched(K.gate, K, "gate_markers", _future_open)),
    "top-k slots filled with future (-inf) chunks": (P + "select", "MobaFuture", _fill_future),
    "the current chunk's last token counted outside it": (
        P + "attend", "MobaFuture", patched(K.attend, K, "gate_markers", _own_short)),
    "gate scaled by 1/sqrt(D)": (P + "gate", "MobaGateScale", patched(K.gate, K, "gate_scale", _scaled_gate)),
    "gate over chunk sums instead of means": (P + "gate", "MobaMean", patched(K.gate, K, "chunk_means", _chunk_sums)),
    "top_k not counting the current chunk": (P + "select", "MobaTopK",
                                             patched(K.select, K, "top_chunks", _k_plus_current)),
    "attention with top_k not counting the current chunk": (
        P + "attend", "MobaTopK", patched(K.attend, K, "top_chunks", _k_plus_current)),
    "ties broken toward the higher chunk index": (P + "select", "MobaTie",
                                                  patched(K.select, K, "top_chunks", _ties_high)),
    "attention with ties broken toward the higher index": (
        P + "attend", "MobaTie", patched(K.attend, K, "top_chunks", _ties_high)),
    "NaN scores ranked below every number": (P + "select", "NaN", _nan_last),
    "GQA heads interleaved (h % Hkv)": (P + "attend", "MobaHeads", patched(K.attend, K, "kv_head_of", _interleaved)),
    "gate with GQA heads interleaved": (P + "gate", "MobaHeads", patched(K.gate, K, "kv_head_of", _interleaved)),
    "query positions aligned top-left": (P + "attend", "MobaAlign", patched(K.attend, K, "positions", _top_left)),
    "gate positions aligned top-left": (P + "gate", "MobaAlign", patched(K.gate, K, "positions", _top_left)),
    "unselected keys multiplied by a zero probability": (P + "attend", "MobaUnread", _multiply_mask),
    "softmax without the row maximum": (P + "attend", "MobaLargeLogits",
                                        patched(K.attend, K, "attend_row", _no_row_max)),
    "lse 0 for a row that sees no key": (P + "attend", "MobaEmptyRow", _empty_row_zero_lse),
    "varlen chunk boundaries from the packed start": (P + "attend_varlen", "MobaVarlen", _packed_chunks),
}

DEFAULT_PROFILE = {"current chunk not causally masked", "a future chunk selectable (gate not -inf there)",
                   "top_k not counting the current chunk", "varlen chunk boundaries from the packed start"}


def bug(name: str) -> Implementation:
    op, _, kernel = MOBA_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel})

"""The NSA compression and selection bug corpus: wrong kernels written the way NSA's
compression, importance and top-n kernels go wrong, each one step changed from the
default run's (ref.conformance.adapters.numpy_sparse_nsa_select).

NSA_SELECT_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_sparse_nsa_select as K
from ref.conformance.implementation import Implementation

P = "sparse.nsa."


def _visible_at_start(original):
    """A block visible once its first token is in the past (i*d <= t)."""
    def visible(lq, tc, seq_len, block, stride):
        t = np.arange(seq_len - lq, seq_len)[:, None]
        return np.arange(tc)[None, :] * stride <= t
    return visible


def _visible_by_stride(original):
    """fla's rule (c + 1) * block - 1 <= t with the stride in place of the block length."""
    return lambda lq, tc, seq_len, block, stride: original(lq, tc, seq_len, stride, stride)


def _top_left(original):
    """Query i taken at position i (seq_len ignored)."""
    return lambda lq, tc, seq_len, block, stride: original(lq, tc, lq, block, stride)


def _interleaved(original):
    return lambda hq, hkv: np.arange(hq) % hkv


def _head_zero_only(p_cmp, heads_kv, block=32, stride=16, block_sel=64, seq_len=None, reduce="sum"):
    """Each group's importance from its first query head alone (not summed over the group)."""
    p = np.asarray(p_cmp)
    hq = p.shape[2]
    if heads_kv >= 1 and hq % heads_kv == 0:
        p = p[:, :, ::hq // heads_kv]  # one head per group: the "sum" over a group of one
    return K.importance(p, heads_kv, block, stride, block_sel, seq_len, reduce)


def _grouped_interleaved(p_cmp, heads_kv, block=32, stride=16, block_sel=64, seq_len=None, reduce="sum"):
    """Query head h counted in group h % Hkv."""
    p = np.asarray(p_cmp)
    b, lq, hq, tc = p.shape
    if heads_kv >= 1 and hq % heads_kv == 0:
        g = hq // heads_kv
        order = np.arange(hq).reshape(g, heads_kv).T.reshape(-1)  # heads of group h % Hkv made contiguous
        p = p[:, :, order]
    return K.importance(p, heads_kv, block, stride, block_sel, seq_len, reduce)


def _zero_based_eq9(original):
    """Eq. 9 read with 0-based block numbers: selection block j credited with the
    compressed blocks overlapping block j - 1 (and the one straddling into j)."""
    def weights(tc, n_sel, block, stride, block_sel):
        w = original(tc, n_sel + 1, block, stride, block_sel)
        return np.concatenate([np.zeros_like(w[:, :1]), w[:, :-2]], axis=1) if n_sel else w[:, :0]
    return weights


def _mean_instead_of_sum(p_cmp, heads_kv, block=32, stride=16, block_sel=64, seq_len=None, reduce="sum"):
    return K.importance(p_cmp, heads_kv, block, stride, block_sel, seq_len, "mean")


def _no_initial(original):
    return lambda t, n_sel, block_sel, initial, local: original(t, n_sel, block_sel, 0, local)


def _no_local(original):
    return lambda t, n_sel, block_sel, initial, local: original(t, n_sel, block_sel, initial, 0)


def _local_from_next(original):
    """The own block taken as (t + 1) // l'."""
    return lambda t, n_sel, block_sel, initial, local: original(t + 1, n_sel, block_sel, initial, local)


def _all_selectable(original):
    return lambda t, n_sel, block_sel: np.ones((t.size, n_sel), bool)


def _strictly_before(original):
    """Block j selectable only when j * l' < t: the query's own block missed at its first token."""
    return lambda t, n_sel, block_sel: np.arange(n_sel)[None, :] * block_sel < t[:, None]


def _rows_from_zero(original):
    """Query i taken at position i (seq_len ignored)."""
    return lambda lq, seq_len: original(lq, lq)


def _ties_high(original):
    def rank(imp, force, ok):
        flipped = original(imp[..., ::-1], force[..., ::-1], ok[..., ::-1])
        return imp.shape[-1] - 1 - flipped
    return rank


def _half_importance(importance, *args, **kwargs):
    return K.select(np.asarray(importance).astype(np.float16), *args, **kwargs)


def _pad_with_block_zero(importance, *args, **kwargs):
    out = K.select(importance, *args, **kwargs)
    return np.where(out < 0, 0, out)


def _mean_over_fewer(compress):
    """Each block's sum divided by l - 1 tokens."""
    def count(starts, t, block):
        return np.maximum(compress(starts, t, block) - 1, 1)
    return count


def _divide_by_stride(x, pe=None, block=32, stride=16, partial=False):
    out = K.compress(x, pe, block, stride, partial)
    return out * out.dtype.type(block / stride) if out.size else out


def _partial_compressed(original):
    """The trailing partial block pooled in the paper's scheme too."""
    def starts(t, block, stride, partial):
        s = original(t, block, stride, partial)
        nxt = (s[-1] + stride) if s.size else 0
        return np.append(s, nxt) if (not partial and nxt < t and t >= block) else s
    return starts


def _non_overlapping(original):
    return lambda t, block, stride, partial: original(t, block, block, partial)


def _no_position(x, pe=None, block=32, stride=16, partial=False):
    return K.compress(x, None, block, stride, partial)


def _input_dtype(original):
    """Sums kept in the input's dtype (float16 inputs accumulate in float16)."""
    return lambda *arrays: arrays[0].dtype.type


def _no_row_max(original):
    """exp(s) / sum exp(s) without subtracting the row maximum."""
    return lambda s, ok: _unshifted(s, ok)


def _unshifted(s, ok):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.where(ok, np.exp(s), 0)
        z = e.sum(axis=-1, keepdims=True)
        return e / np.where(z > 0, z, 1), np.zeros_like(z), z


def _uniform_empty(q, k_cmp, v_cmp, seq_len=None, block=32, stride=16, scale=None):
    """A row that sees no block spreads uniform weight over every block."""
    out, lse, p = K.compressed_attend(q, k_cmp, v_cmp, seq_len, block, stride, scale)
    tc = p.shape[-1]
    if tc:
        empty = ~(p > 0).any(axis=-1)  # [B, Lq, Hq]
        p = np.where(empty[..., None], p.dtype.type(1 / tc), p)
    return out, lse, p


# ---------------------------------------------------------------------------- found by the adversary pass

def _fla_partial_over_l(original):
    """fla's partial block divided by the full block length."""
    return lambda starts, t, block: np.full_like(starts, block)


def _group_mean_over_hq(p_cmp, heads_kv, block=32, stride=16, block_sel=64, seq_len=None, reduce="sum"):
    """fla's mean taken over all Hq query heads instead of the group's G."""
    out = K.importance(p_cmp, heads_kv, block, stride, block_sel, seq_len, "sum")
    return out if reduce == "sum" else out / out.dtype.type(np.shape(p_cmp)[2])


def _eq9_wrapping(p_cmp, heads_kv, block=32, stride=16, block_sel=64, seq_len=None, reduce="sum"):
    """Eq. 9's gather p_cmp[(l'/d)(j + 1) - 1 - m - n] without masking negative indices:
    Python wraps them to the last compressed blocks."""
    p = np.asarray(p_cmp)
    b, lq, hq, tc = p.shape
    sl = lq if seq_len is None else seq_len
    r, c, n_sel = block_sel // stride, block // stride, -(-sl // block_sel)
    src = r * (np.arange(n_sel)[:, None] + 1) - 1 - (np.arange(r)[:, None] + np.arange(c)[None, :]).reshape(1, -1)
    if tc == 0 or hq % heads_kv:
        return K.importance(p_cmp, heads_kv, block, stride, block_sel, seq_len, reduce)
    padded = np.concatenate([p.astype(K.work_dtype(p)), np.zeros(p.shape[:3] + (1,), K.work_dtype(p))], axis=-1)
    src = np.where(src >= tc, tc, src)  # past the end: the zero column; below 0: wraps to the last blocks
    terms = padded[..., np.where(src < 0, src - 1, src)].sum(axis=-1)
    g = terms.reshape(b, lq, heads_kv, hq // heads_kv, n_sel)
    return g.sum(axis=3) if reduce == "sum" else g.mean(axis=3)


def _dense_importance(p_cmp, heads_kv, block=32, stride=16, block_sel=64, seq_len=None, reduce="sum"):
    """p_cmp @ W as one product: 0 * NaN spreads a NaN to every selection block."""
    p = np.asarray(p_cmp)
    b, lq, hq, tc = p.shape
    sl = lq if seq_len is None else seq_len
    n_sel = -(-sl // block_sel)
    if hq % heads_kv:
        return K.importance(p_cmp, heads_kv, block, stride, block_sel, seq_len, reduce)
    w = K.overlap_weights(tc, n_sel, block, stride, block_sel).astype(K.work_dtype(p))
    with np.errstate(invalid="ignore"):
        per_head = p.astype(w.dtype) @ w
    g = per_head.reshape(b, lq, heads_kv, hq // heads_kv, n_sel)
    return g.sum(axis=3) if reduce == "sum" else g.mean(axis=3)


def _dense_pv(q, k_cmp, v_cmp, seq_len=None, block=32, stride=16, scale=None):
    """P V as one product over every block: 0 * NaN reads the values of blocks not yet visible."""
    out, lse, p = K.compressed_attend(q, k_cmp, v_cmp, seq_len, block, stride, scale)
    v = np.asarray(v_cmp)
    vq = v[:, :, K.kv_head_of(np.shape(q)[2], v.shape[2])].astype(out.dtype)
    with np.errstate(invalid="ignore"):
        return np.einsum("bqhc,bchd->bqhd", p, vq).astype(out.dtype), lse, p


def _n_beside_forced(importance, seq_len=None, block_sel=64, n=16, initial=1, local=2):
    """n blocks chosen besides the forced ones (n not counting them)."""
    if n < 0:
        return K.select(importance, seq_len, block_sel, n, initial, local)
    return K.select(importance, seq_len, block_sel, n + initial + local, initial, local)[..., :n]


def _minus_inf_unselectable(importance, seq_len=None, block_sel=64, n=16, initial=1, local=2):
    """A block scored -inf treated as masked out (never selected)."""
    out = K.select(importance, seq_len, block_sel, n, initial, local)
    imp = np.asarray(importance)
    dropped = np.take_along_axis(np.isneginf(imp), np.maximum(out, 0), axis=-1) & (out >= 0)
    return np.where(dropped, -1, out)


def _cumulative_sums(x, pe=None, block=32, stride=16, partial=False):
    """Block sums as differences of one float32 running sum over the tokens."""
    xs = np.asarray(x)
    if xs.dtype not in K.FLOATS or xs.ndim != 4 or stride > block or block % stride or (partial and stride != block):
        return K.compress(x, pe, block, stride, partial)
    starts = K.block_starts(xs.shape[1], block, stride, partial)
    dt = K.work_dtype(xs)
    running = np.concatenate([np.zeros_like(xs[:, :1], dt), np.cumsum(xs.astype(dt), axis=1)], axis=1)
    ends = np.minimum(starts + block, xs.shape[1])
    out = (running[:, ends] - running[:, starts]) / (ends - starts)[None, :, None, None].astype(dt)
    return out if pe is None else out + K.compress(np.zeros_like(xs), pe, block, stride, partial)


NSA_SELECT_BUGS = {
    "a compressed block visible at its first token (i*d <= t)": (
        P + "compressed_attend", "NsaCmpVisible", patched(K.compressed_attend, K, "visible", _visible_at_start)),
    "a compressed block visible once its first stride is complete ((i+1)*d - 1 <= t)": (
        P + "compressed_attend", "NsaCmpVisible", patched(K.compressed_attend, K, "visible", _visible_by_stride)),
    "compressed attention's queries aligned top-left (seq_len ignored)": (
        P + "compressed_attend", "NsaCmpDecode", patched(K.compressed_attend, K, "visible", _top_left)),
    "compressed attention's GQA heads interleaved (h % Hkv)": (
        P + "compressed_attend", "NsaCmpHeads", patched(K.compressed_attend, K, "kv_head_of", _interleaved)),
    "a row that sees no compressed block gets uniform probabilities": (
        P + "compressed_attend", "NsaCmpEmpty", _uniform_empty),
    "importance not summed over the group (its first head only)": (P + "importance", "NsaSelGroup", _head_zero_only),
    "importance groups interleaved (head h in group h % Hkv)": (P + "importance", "NsaSelGroup", _grouped_interleaved),
    "importance averaged over the group where the paper sums": (P + "importance", "NsaSelReduce", _mean_instead_of_sum),
    "eq. 9 read with 0-based block numbers (offset off by one)": (
        P + "importance", "NsaSelMap", patched(K.importance, K, "overlap_weights", _zero_based_eq9)),
    "initial block not forced": (P + "select", "NsaSelForced", patched(K.select, K, "forced", _no_initial)),
    "local blocks not forced": (P + "select", "NsaSelForced", patched(K.select, K, "forced", _no_local)),
    "local blocks counted from (t + 1) // l'": (P + "select", "NsaSelLocal",
                                                patched(K.select, K, "forced", _local_from_next)),
    "future selection blocks selectable": (P + "select", "NsaSelCausal",
                                           patched(K.select, K, "selectable", _all_selectable)),
    "the query's own block selectable only after its first token (j*l' < t)": (
        P + "select", "NsaSelCausal", patched(K.select, K, "selectable", _strictly_before)),
    "top-n rows aligned top-left (seq_len ignored)": (P + "select", "NsaSelDecode",
                                                      patched(K.select, K, "positions", _rows_from_zero)),
    "ties broken toward the higher block index": (P + "select", "NsaSelTies", patched(K.select, K, "rank", _ties_high)),
    "importance rounded to float16 before the top-n": (P + "select", "NsaSelPrecision", _half_importance),
    "unfilled slots padded with block 0 instead of -1": (P + "select", "NsaSelPad", _pad_with_block_zero),
    "mean pooling over l - 1 tokens": (P + "compress", "NsaCmpMean",
                                      patched(K.compress, K, "token_count", _mean_over_fewer)),
    "block sum divided by the stride d instead of l": (P + "compress", "NsaCmpMean", _divide_by_stride),
    "the partial last block compressed (paper scheme)": (
        P + "compress", "NsaCmpPartial", patched(K.compress, K, "block_starts", _partial_compressed)),
    "compressed blocks non-overlapping (stride l instead of d)": (
        P + "compress", "NsaCmpStride", patched(K.compress, K, "block_starts", _non_overlapping)),
    "intra-block position term ignored": (P + "compress", "NsaCmpPosition", _no_position),
    "block sums accumulated in the input's dtype (float16)": (
        P + "compress", "NsaCmpAccumulation", patched(K.compress, K, "work_dtype", _input_dtype)),
    "p_cmp without the row maximum": (P + "compressed_attend", "NsaCmpLargeLogits",
                                      patched(K.compressed_attend, K, "softmax", _no_row_max)),
    "fla's partial block divided by l": (P + "compress", "NsaCmpPartial",
                                         patched(K.compress, K, "token_count", _fla_partial_over_l)),
    "fla's group mean divided by Hq instead of G": (P + "importance", "NsaSelReduce", _group_mean_over_hq),
    "eq. 9 gathered with negative indices wrapping to the last blocks": (P + "importance", "NsaSelMap", _eq9_wrapping),
    "importance as one dense product (a NaN spreads to every block)": (P + "importance", "NaN", _dense_importance),
    "P V as one dense product (values of unseen blocks read)": (P + "compressed_attend", "NaN", _dense_pv),
    "n counted besides the forced blocks": (P + "select", "NsaSelForced", _n_beside_forced),
    "-inf importance never selected": (P + "select", "NsaSelPad", _minus_inf_unselectable),
    "block sums from a float32 running sum (a NaN spreads to later blocks)": (P + "compress", "NaN", _cumulative_sums),
}

# the variant values a wrong kernel declares (the default: the catalog's default only)
VARIANTS = {"fla's partial block divided by l": {P + "compress": {"partial": [False, True]}},
            "fla's group mean divided by Hq instead of G": {P + "importance": {"reduce": ["sum", "mean"]}}}

DEFAULT_PROFILE = {
    "a compressed block visible at its first token (i*d <= t)",
    "importance not summed over the group (its first head only)",
    "eq. 9 read with 0-based block numbers (offset off by one)",
    "local blocks not forced",
    "future selection blocks selectable",
    "the partial last block compressed (paper scheme)",
}


def bug(name: str) -> Implementation:
    op, _, kernel = NSA_SELECT_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants=VARIANTS.get(name, {}))

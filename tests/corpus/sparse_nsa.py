"""The NSA attention bug corpus: wrong kernels written the way NSA's selected-attention
and forward kernels go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_sparse_nsa).

NSA_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_sparse_nsa as K
from ref.conformance.implementation import Implementation

SLC, FWD = "sparse.nsa.selected_attend", "sparse.nsa.attend"


def _not_causal(original):
    """Every token of a selected block read: no mask inside the query's own block."""
    def token_slots(idx, used, block_size, tk, tq):
        tokens, _ = original(idx, used, block_size, tk, tq)
        seen = np.repeat(used, block_size, axis=-1) & (tokens < tk)
        return tokens, seen
    return token_slots


def _top_left(original):
    """The causal corner at the top left: query i at key position i, not i + Tk - Tq."""
    def token_slots(idx, used, block_size, tk, tq):
        return original(idx, used, block_size, tq, tq) if tq < tk else original(idx, used, block_size, tk, tq)
    return token_slots


def _interleaved(kernel, lse_axis):
    """Query head h reads KV head h % Hkv (and its block list) instead of h // G."""
    def run(q, k, v, *args, **kwargs):
        hq, hkv = np.shape(q)[2], np.shape(k)[2]
        if hkv == 0 or hq % hkv:
            return kernel(q, k, v, *args, **kwargs)
        order = np.argsort(np.arange(hq) % hkv, kind="stable")  # KV head n's heads: n, n + Hkv, ...
        per_head = [np.asarray(a)[:, :, order] if np.ndim(a) == 3 and np.shape(a)[2] == hq else a for a in args]
        got = kernel(np.asarray(q)[:, :, order], k, v, *per_head, **kwargs)
        inverse = np.argsort(order)
        if lse_axis is None:
            return got[:, :, inverse]
        return got[0][:, :, inverse], np.take(got[1], inverse, axis=lse_axis)
    return run


def _minus_one_last(original):
    """-1 read as the last block (Python's negative indexing)."""
    return lambda idx, counts, num_blocks: original(np.where(idx == -1, num_blocks - 1, idx), counts, num_blocks)


def _negative_to_zero(original):
    """An unused (negative) slot clamped to block 0, as fla's gather clamps, without the mask."""
    return lambda idx, counts, num_blocks: original(np.maximum(idx, 0), counts, num_blocks)


def _past_end_clamped(q, k, v, block_indices, block_counts=None, *, block_size=64, scale=None):
    """An index past the last block clamped to the last block."""
    last = max(-(-np.shape(k)[1] // max(int(block_size), 1)) - 1, 0)
    idx = np.asarray(block_indices)
    return K.selected_attend(q, k, v, np.minimum(idx, last) if idx.dtype.kind in "iu" else idx, block_counts,
                             block_size=block_size, scale=scale)


def _counts_ignored(original):
    return lambda idx, counts, num_blocks: original(idx, None, num_blocks)


def _partial_dropped(original):
    """floor(T / block_size) blocks: the partial last block out of range, never read."""
    def used_slots(idx, counts, num_blocks):
        partial = bool(_STATE.get("partial"))
        return original(idx, counts, num_blocks - 1 if partial else num_blocks)
    return used_slots


_STATE: dict = {}


def _floor_blocks(q, k, v, block_indices, block_counts=None, *, block_size=64, scale=None):
    _STATE["partial"] = np.shape(k)[1] % int(block_size) != 0 if int(block_size) > 0 else False
    try:
        return patched(K.selected_attend, K, "used_slots", _partial_dropped)(
            q, k, v, block_indices, block_counts, block_size=block_size, scale=scale)
    finally:
        _STATE.clear()


def _no_max(original):
    def softmax_rows(s, seen):
        s = np.where(seen, s, np.float32(-np.inf))
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.exp(s)
            z = e.sum(axis=-1, keepdims=True, dtype=np.float32)
            return np.where(z > 0, e / np.where(z > 0, z, 1), np.float32(0)), np.log(z)[..., 0]
    return softmax_rows


def _nan_leak(q, k, v, tokens, seen, scale):
    """Values at the slots not read kept (p = 0 times NaN is NaN)."""
    b, tq, hq, _ = q.shape
    hkv = k.shape[2]
    p, lse = K.gather_probs(q, k, tokens, seen, scale)
    vg = v[np.arange(b)[:, None, None, None], tokens.clip(0, k.shape[1] - 1), np.arange(hkv)[None, None, :, None]]
    out = np.einsum("btngj,btnjv->btngv", p, vg).astype(np.float32)
    return out.reshape(b, tq, hq, v.shape[3]), lse.reshape(b, tq, hq).transpose(0, 2, 1)


def _duplicates_accepted(original):
    return lambda idx, used: None


# ---------------------------------------------------------------------------- the forward

def _gates_swapped(original):
    return lambda g_cmp, g_slc, g_swa, o_cmp, o_slc, o_swa: original(g_slc, g_cmp, g_swa, o_cmp, o_slc, o_swa)


def _no_gates(original):
    return lambda g_cmp, g_slc, g_swa, o_cmp, o_slc, o_swa: o_cmp + o_slc + o_swa


def _window_wider(original):
    return lambda q, k, v, window, scale: original(q, k, v, window + 1, scale)


def _window_narrower(original):
    return lambda q, k, v, window, scale: original(q, k, v, window - 1, scale) if window > 1 else original(
        q, k, v, window, scale) * 0


def _deduplicated(q, k, v, g_cmp, g_slc, g_swa, pe_k=None, pe_v=None, **params):
    """The window reads only the tokens no selected block holds (the overlap counted once)."""
    state = {}

    def select(original):
        def run(imp, tq, tk, block_sel, n):
            state["idx"], state["bs"] = original(imp, tq, tk, block_sel, n), block_sel
            return state["idx"]
        return run

    def window_attend(original):
        def run(q, k, v, window, scale):
            b, tq, _, _ = q.shape
            tk, hkv = k.shape[1], k.shape[2]
            tokens = K.positions(tq, tk)[:, None] - np.arange(window)[None, ::-1]
            tokens = np.broadcast_to(tokens[None, :, None, :], (b, tq, hkv, window))
            blocks = np.where(tokens >= 0, tokens // state["bs"], -2)
            in_selected = (blocks[..., None] == state["idx"][:, :, :, None, :]).any(-1)
            return K.gather_attend(q, k, v, tokens, (tokens >= 0) & ~in_selected, scale)[0]
        return run

    kernel = patched(patched(K.attend, K, "select", select), K, "window_attend", window_attend)
    return kernel(q, k, v, g_cmp, g_slc, g_swa, pe_k, pe_v, **params)


def _pe_on_values(q, k, v, g_cmp, g_slc, g_swa, pe_k=None, pe_v=None, **params):
    return K.attend(q, k, v, g_cmp, g_slc, g_swa, pe_k, pe_k if pe_k is not None and np.shape(pe_k)[1] ==
                    np.shape(v)[3] else pe_v, **params)


def _stride_is_block(original):
    """The paper's overlapping compression blocks pooled without overlap (stride = block)."""
    def compress(x, pe, block, stride, partial):
        return original(x, pe, block, block, partial)
    return compress


def _local_dropped(original):
    return lambda tq, tk, ns, block_sel, initial=1, local=2: original(tq, tk, ns, block_sel, initial, 0)


def _one_head_importance(original):
    """The importance of the group's first query head only (not summed over the group)."""
    return lambda p, tk, block, stride, block_sel, reduce: original(p[:, :, :, :1], tk, block, stride, block_sel,
                                                                     reduce)


def _forward_not_causal(*args, **kwargs):
    slc = patched(K.selected_attend, K, "token_slots", _not_causal)
    return patched(K.attend, K, "selected_attend", lambda _: slc)(*args, **kwargs)


NSA_BUGS = {
    "selected blocks not causally masked inside the query's block": (SLC, "NsaSlcCausal",
                                                                     patched(K.selected_attend, K, "token_slots",
                                                                             _not_causal)),
    "selected attention's causal corner top-left (Tq < Tk)": (SLC, "NsaSlcCausal",
                                                              patched(K.selected_attend, K, "token_slots",
                                                                      _top_left)),
    "block lists and heads interleaved (h % Hkv)": (SLC, "NsaSlcGroups", _interleaved(K.selected_attend, 1)),
    "-1 read as the last block": (SLC, "NsaSlcUnused", patched(K.selected_attend, K, "used_slots", _minus_one_last)),
    "negative slots clamped to block 0": (SLC, "NsaSlcUnused",
                                          patched(K.selected_attend, K, "used_slots", _negative_to_zero)),
    "indices past the last block clamped to it": (SLC, "NsaSlcUnused", _past_end_clamped),
    "block_counts ignored": (SLC, "NsaSlcCounts", patched(K.selected_attend, K, "used_slots", _counts_ignored)),
    "the partial last block dropped (floor(T / block) blocks)": (SLC, "NsaSlcPartial", _floor_blocks),
    "softmax without the row maximum": (SLC, "NsaSlcLargeLogits",
                                        patched(K.selected_attend, K, "softmax_rows", _no_max)),
    "NaN values at unread slots multiplied by 0": (SLC, "NaN",
                                                   patched(K.selected_attend, K, "gather_attend",
                                                           lambda _: _nan_leak)),
    "a block named twice accepted": (SLC, "InvalidInput",
                                     patched(K.selected_attend, K, "check_duplicates", _duplicates_accepted)),
    "gates g_cmp and g_slc swapped": (FWD, "NsaGates", patched(K.attend, K, "gated_sum", _gates_swapped)),
    "branches summed without their gates": (FWD, "NsaGates", patched(K.attend, K, "gated_sum", _no_gates)),
    "window of w + 1 tokens": (FWD, "NsaWindow", patched(K.attend, K, "window_attend", _window_wider)),
    "window of w - 1 tokens": (FWD, "NsaWindow", patched(K.attend, K, "window_attend", _window_narrower)),
    "forward's heads interleaved (h % Hkv)": (FWD, "NsaGroups", _interleaved(K.attend, None)),
    "window and selected blocks deduplicated": (FWD, "NsaOverlap", _deduplicated),
    "pe_k added to the values": (FWD, "NsaPositionTerms", _pe_on_values),
    "forward's selected blocks not causally masked": (FWD, "NsaSlcCausal", _forward_not_causal),
    "paper's compression blocks without overlap": (FWD, "NsaVariant", patched(K.attend, K, "compress",
                                                                               _stride_is_block)),
    "forced local blocks dropped": (FWD, "NsaSelection", patched(K.attend, K, "forced", _local_dropped)),
    "importance of one head, not the group's sum": (FWD, "NsaSelection",
                                                    patched(K.attend, K, "importance", _one_head_importance)),
}


DEFAULT_PROFILE = {
    "selected blocks not causally masked inside the query's block", "block lists and heads interleaved (h % Hkv)",
    "-1 read as the last block", "block_counts ignored", "the partial last block dropped (floor(T / block) blocks)",
    "NaN values at unread slots multiplied by 0", "gates g_cmp and g_slc swapped", "window of w + 1 tokens",
}


def bug(name: str) -> Implementation:
    op, _, kernel = NSA_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel})

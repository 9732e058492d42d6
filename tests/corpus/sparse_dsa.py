"""The DSA bug corpus: wrong indexers and sparse attentions written the way DeepSeek
Sparse Attention's ports go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_sparse_dsa).

DSA_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import math

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_sparse_dsa as K
from ref.conformance.implementation import Implementation

P = "sparse.dsa."


def _pairing_swapped(original):
    return lambda r, pairing: original(r, "interleaved" if pairing == "neox" else "neox")


def _rope_last_dims(original):
    """RoPE on the last rope_dim dims (MLA's [nope | rope] layout) instead of the first."""
    def rope(x, cos, sin, r, pairing):
        return np.roll(original(np.roll(x, r, axis=-1), cos, sin, r, pairing), -r, axis=-1)
    return rope


def _hadamard_unnormalized(original):
    return lambda x: (original(x) * np.float32(math.sqrt(x.shape[-1]))).astype(np.float32)


def _no_relu(original):
    return lambda x: x


def _weights_inside_relu(q, k, w, scale=None, causal=True):
    """ReLU(w * q . k): the weight (any sign) multiplied before the ReLU."""
    q, k, w = K.check_scores(q, k, w)
    sc = K.default_scale(q.shape[3], q.shape[2]) if scale is None else float(scale)
    act = K.relu(K.logits(q, k) * (w.astype(np.float32) * np.float32(sc))[..., None])
    out = act.sum(axis=2, dtype=np.float32)
    return np.where(K.visible(q.shape[1], k.shape[1]), out, np.float32(-np.inf)) if causal else out


def _head0_weight(original):
    return lambda w, act: original(np.broadcast_to(w[..., :1], w.shape), act)


def _mean_weight(original):
    return lambda w, act: original(np.broadcast_to(w.mean(-1, keepdims=True), w.shape).astype(np.float32), act)


def _no_head_scale(original):
    return lambda d, h: d ** -0.5 if d else 1.0


def _top_left(original):
    return lambda t, s: np.arange(s)[None, :] <= np.arange(t)[:, None]


def _all_visible(original):
    return lambda t, s: np.ones((t, s), bool)


def _ties_high(original):
    def topk_of(scores, k, cand):
        s = scores.shape[-1]
        flipped = original(scores[..., ::-1], k, cand[..., ::-1])
        return np.where(flipped < 0, -1, s - 1 - flipped)
    return topk_of


def _short_rows_masked(original):
    """transformers' and the reference's topk over the masked scores: past the visible
    keys it returns masked (future or -inf) indices instead of -1."""
    return lambda scores, k, cand: np.argsort(np.where(cand, -scores.astype(np.float64), np.inf), axis=-1,
                                              kind="stable")[..., :k]


def _per_tensor(original):
    return lambda amax, fmt: original(np.broadcast_to(amax.max(initial=np.float32(0)), amax.shape), fmt)


def _ue8m0_down(original):
    def block_scales(amax, fmt):
        s = original(amax, fmt)
        if fmt != "ue8m0":
            return s
        raw = (np.maximum(amax, np.float32(1e-4)) * np.float32(1 / 448)).astype(np.float32)
        return np.where(s > raw, s / 2, s).astype(np.float32)  # 2^floor(log2 s): values past 448 clamp
    return block_scales


def _minus_one_is_last(indices, t, s, causal=True):
    """The slots scattered as they are: -1 writes the last key (negative indexing)."""
    idx = np.asarray(indices)
    sel = K.selection(np.where(idx < 0, s - 1, idx) if s else idx, t, s, causal=False)
    return sel & K.visible(t, s) if causal else sel


def _no_causal_attend(original):
    return lambda indices, t, s, causal=True: original(indices, t, s, False)


def _ties_away(original):
    return lambda y: original(y, lambda z: np.sign(z) * np.floor(np.abs(z) + 0.5))


def _half_logits(original):
    return lambda q, k: original(q, k).astype(np.float16).astype(np.float32)


def _interleaved_heads(original):
    return lambda h, hkv: np.arange(h) % hkv


def _selection_by(fn):
    return patched(K.attend, K, "selection", lambda _: fn)


DSA_BUGS = {
    # the four
    "RoPE pairs interleaved where NeoX's half split is meant (indexer)": (
        P + "indexer", "DsaRopePairing", patched(K.indexer, K, "pairs", _pairing_swapped)),
    "ReLU missing from the index scores": (P + "index_scores", "DsaRelu",
                                           patched(K.index_scores, K, "relu", _no_relu)),
    "top-k including future tokens": (P + "select", "DsaCausal", patched(K.select, K, "visible", _all_visible)),
    "-1 slots read as the last token": (P + "attend", "DsaPadIndex", _selection_by(_minus_one_is_last)),
    # rotation
    "RoPE pairs swapped in the rotation": (P + "rotate", "DsaRopePairing",
                                           patched(K._rotate_op, K, "pairs", _pairing_swapped)),
    "RoPE on the last rope_dim dims": (P + "rotate", "DsaRopeDims", patched(K._rotate_op, K, "rope", _rope_last_dims)),
    "Hadamard without 1/sqrt(Di)": (P + "rotate", "DsaHadamard",
                                    patched(K._rotate_op, K, "hadamard", _hadamard_unnormalized)),
    # scores
    "head weights inside the ReLU": (P + "index_scores", "DsaRelu", _weights_inside_relu),
    "head 0's weight for every head": (P + "index_scores", "DsaHeadWeights",
                                       patched(K.index_scores, K, "head_sum", _head0_weight)),
    "the mean head weight for every head": (P + "index_scores", "DsaHeadWeights",
                                            patched(K.index_scores, K, "head_sum", _mean_weight)),
    "n_heads^-0.5 dropped from the scale": (P + "index_scores", "DsaScale",
                                            patched(K.index_scores, K, "default_scale", _no_head_scale)),
    "causal mask aligned top-left": (P + "index_scores", "DsaCausal",
                                     patched(K.index_scores, K, "visible", _top_left)),
    "ReLU missing (indexer)": (P + "indexer", "DsaRelu", patched(K.indexer, K, "relu", _no_relu)),
    # selection
    "ties broken toward the higher index": (P + "select", "DsaTies", patched(K.select, K, "topk_of", _ties_high)),
    "short rows return masked indices": (P + "select", "DsaShortRow",
                                         patched(K.select, K, "topk_of", _short_rows_masked)),
    "future tokens selectable (indexer)": (P + "indexer", "DsaCausal", patched(K.indexer, K, "visible", _all_visible)),
    # FP8
    "FP8 scale per tensor, not per token": (P + "quantize", "DsaQuantScale",
                                            patched(K.quantize, K, "block_scales", _per_tensor)),
    "ue8m0 scale rounded down": (P + "quantize", "DsaUe8m0", patched(K.quantize, K, "block_scales", _ue8m0_down)),
    "E4M3 ties rounded away from zero": (P + "quantize", "DsaE4m3", patched(K.quantize, K, "e4m3", _ties_away)),
    "float16 logits": (P + "index_scores", "DsaLogitPrecision", patched(K.index_scores, K, "logits", _half_logits)),
    # attention
    "GQA heads interleaved (h % Hkv)": (P + "attend", "DsaGqa", patched(K.attend, K, "kv_head_of", _interleaved_heads)),
    "selection not causally masked": (P + "attend", "DsaCausal", patched(K.attend, K, "selection", _no_causal_attend)),
}

DEFAULT_PROFILE = {
    "RoPE pairs interleaved where NeoX's half split is meant (indexer)", "ReLU missing from the index scores",
    "top-k including future tokens", "-1 slots read as the last token",
}


def bug(name: str) -> Implementation:
    op, _, kernel = DSA_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: K.VARIANTS[op]} if op in K.VARIANTS else {})

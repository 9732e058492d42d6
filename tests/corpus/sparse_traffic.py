"""The read-traffic bug corpus: wrong byte counts written the way capacity planners and
kernel authors count sparse reads wrongly, each one step changed from the default run's
(ref.conformance.adapters.numpy_sparse_traffic).

TRAFFIC_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_sparse_traffic as K
from ref.conformance.implementation import Implementation

P = "sparse.traffic."


def _with(fn, name: str, replacement):
    """`fn` with the kernel's helper `name` replaced by `replacement` (the original ignored)."""
    return patched(fn, K, name, lambda original: replacement)


def _full_blocks(tokens, size, picked):
    """Every selected block counted as a full block, the query's partial one too."""
    return min(picked, -(-tokens // size)) * size


def _partial_dropped(tokens, size, picked):
    """The query's partial block dropped: only the full ones counted."""
    return min(picked, tokens // size) * size


def _per_head_bytes(tokens, kv_heads, head_dim, v_head_dim, element_bits):
    """Bytes rounded up per KV head, then summed."""
    one = K.dense(tokens, np.ones_like(np.asarray(kv_heads)), head_dim, v_head_dim, element_bits)
    return one * np.asarray(kv_heads, dtype=np.int64)


def _int64_dense(tokens, kv_heads, head_dim, v_head_dim, element_bits):
    """The count in int64 arithmetic (wraps past 2^63 bits)."""
    K.dense(tokens, kv_heads, head_dim, v_head_dim, element_bits)  # the checks
    a = [np.asarray(x).astype(np.int64) for x in (tokens, kv_heads, head_dim, v_head_dim, element_bits)]
    with np.errstate(over="ignore"):
        return (a[0] * a[1] * (a[2] + a[3]) * a[4] + 7) // 8


def _values_as_keys(tokens, kv_heads, head_dim, v_head_dim, element_bits):
    """Values sized by head_dim: MLA's latent (v_head_dim 0) read a second time as the value."""
    return K.dense(tokens, kv_heads, head_dim, np.where(np.asarray(v_head_dim) == 0, head_dim, v_head_dim),
                   element_bits)


def _union_as_reread(**inputs):
    """The union's overlap counted twice (union computed as reread)."""
    return K.nsa(**{**inputs, "overlap": "reread"})


def _per_tensor_scale(tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim, index_bits,
                      index_group, index_scale_bits):
    """One FP8 scale for the whole indexer cache instead of one per token and group."""
    rows, shape = K.rows_of(P + "dsa", tokens=tokens, top_k=top_k, kv_lora_rank=kv_lora_rank,
                            qk_rope_head_dim=qk_rope_head_dim, element_bits=element_bits,
                            index_head_dim=index_head_dim, index_bits=index_bits, index_group=index_group,
                            index_scale_bits=index_scale_bits)
    K.dsa(tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim, index_bits, index_group,
          index_scale_bits)  # the checks
    bits = [r["tokens"] * r["index_head_dim"] * r["index_bits"] + r["index_scale_bits"]
            + min(r["top_k"], r["tokens"]) * (r["kv_lora_rank"] + r["qk_rope_head_dim"]) * r["element_bits"]
            for r in rows]
    return K.to_bytes(P + "dsa", bits, shape)


def _indexer_at_element_bits(tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim, index_bits,
                             index_group, index_scale_bits):
    """The indexer's keys counted at the attention cache's width (bf16), not index_bits."""
    return K.dsa(tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim, element_bits,
                 index_group, index_scale_bits)


TRAFFIC_BUGS = {
    "the query's partial block counted as a full block": (P + "block", "TrafficPartialBlock",
                                                           _with(K.block, "read_tokens", _full_blocks)),
    "the query's partial block dropped": (P + "block", "TrafficPartialBlock",
                                          _with(K.block, "read_tokens", _partial_dropped)),
    "blocks past the context counted as read": (P + "block", "TrafficClip",
                                                _with(K.block, "picked_blocks", lambda n, available: n)),
    "the block list's count left out": (P + "block", "TrafficIndexReads",
                                        _with(K.block, "list_entries", lambda picked, layout: picked)),
    "CSR read as one count, not two indptr entries": (
        P + "block", "TrafficIndexReads", _with(K.block, "list_entries", lambda picked, layout: picked + 1)),
    "the window counted as w before the context is that long": (P + "nsa", "TrafficWindow",
                                                                _with(K.nsa, "window_tokens", lambda w, t: w)),
    "compressed entries counted as floor((L - l) / d) (the paper's text)": (
        P + "nsa", "TrafficCompressedCount",
        _with(K.nsa, "compressed_count", lambda t, b, s: max(t - b, 0) // s)),
    "the incomplete compression block counted (ceil(L / d))": (
        P + "nsa", "TrafficCompressedCount", _with(K.nsa, "compressed_count", lambda t, b, s: -(-t // s))),
    "NSA's selection block partial counted full": (P + "nsa", "TrafficPartialBlock",
                                                  _with(K.nsa, "read_tokens", _full_blocks)),
    "union counted as reread (the overlap read twice)": (P + "nsa", "TrafficOverlap", _union_as_reread),
    "union without the cap at L": (P + "nsa", "TrafficOverlap",
                                   _with(K.nsa, "union_tokens", lambda t, c, n, f: c + n - min(f, n))),
    "MoBA's top-k read besides the current chunk": (
        P + "moba", "TrafficCurrentChunk",
        patched(K.moba, K, "read_tokens", lambda original: lambda t, size, k: original(t, size, k + 1))),
    "MoBA's partial current chunk counted full": (P + "moba", "TrafficPartialBlock",
                                                 _with(K.moba, "read_tokens", _full_blocks)),
    "MoBA's gate reads left out": (P + "moba", "TrafficGating", _with(K.moba, "gate_keys", lambda t, size, g: 0)),
    "MoBA's cached means counted for the current chunk too": (
        P + "moba", "TrafficGating",
        _with(K.moba, "gate_keys", lambda t, size, g: t if g == "recompute" else -(-t // size))),
    "MoBA's gate reads values too": (P + "moba", "TrafficGating",
                                     _with(K.moba, "gate_elements", lambda d, dv: d + dv)),
    "DSA's indexer keys counted at bf16, not FP8": (P + "dsa", "TrafficIndexerBits", _indexer_at_element_bits),
    "DSA's FP8 scales counted per element": (P + "dsa", "TrafficScaleGroups",
                                             _with(K.dsa, "scale_count", lambda d, g: d)),
    "DSA's scale groups floored": (P + "dsa", "TrafficScaleGroups", _with(K.dsa, "scale_count", lambda d, g: d // g)),
    "DSA's FP8 scale per tensor, not per token": (P + "dsa", "TrafficScaleGroups", _per_tensor_scale),
    "MLA's latent counted as key and again as value": (
        P + "dsa", "TrafficMlaTwice", _with(K.dsa, "mla_elements", lambda r, p: 2 * r + p)),
    "DSA's top-k counted past a short context": (P + "dsa", "TrafficClip",
                                                 _with(K.dsa, "top_k_tokens", lambda k, t: k)),
    "dense values sized as keys (MLA's latent twice)": (P + "dense", "TrafficMlaTwice", _values_as_keys),
    "bytes rounded per KV head": (P + "dense", "CeilOnce", _per_head_bytes),
    "int64 arithmetic": (P + "dense", "Int64", _int64_dense),
}

DEFAULT_PROFILE = set(TRAFFIC_BUGS)  # each 0.02-0.05 s: the vectors are few and stacked


def bug(name: str) -> Implementation:
    op, _, kernel = TRAFFIC_BUGS[name]
    variants = {op: K.VARIANTS[op]} if op in K.VARIANTS else {}
    return Implementation(f"bug: {name}", {op: kernel}, variants=variants)

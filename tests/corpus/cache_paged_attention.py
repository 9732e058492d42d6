"""The paged-attention bug corpus: kernels that read keys through block tables the
ways real paged kernels go wrong, each one step changed from a plain correct kernel
written here (gather each sequence's keys through its table, then a float32 softmax
with the row maximum subtracted).

PAGED_ATTENTION_BUGS: name -> (flag, bugs). `bug(name)` is the Implementation of
cache.paged_attention with those bugs; `correct(precision)` is the plain kernel with
its inputs and outputs rounded to `precision` (a correct alternative, which passes).
Every kernel first runs the default kernel on its inputs, so that invalid inputs are
refused as the product refuses them.
"""

from __future__ import annotations

import math

import numpy as np

from ref.conformance.adapters import numpy_paged_attention as product
from ref.conformance.implementation import Implementation
from ref.formats.minifloat import round_to

OP = "cache.paged_attention"
_F32 = np.float32

PAGED_ATTENTION_BUGS = {
    # The kernel takes ceil(seq_len / B) * B as the length: the tail of the last block
    # (stale keys in an engine, NaN in the vectors) joins the softmax.
    "reads the whole last block": ("PagedLength", {"whole last block"}),
    # Logical block p // B + 1: every token read from the next table entry.
    "block index off by one": ("BlockTable", {"block off by one"}),
    # The length taken from the table's width (M * B), as a kernel that never reads seq_lens.
    "ignores seq_lens (uses the table width)": ("PagedLength", {"table width"}),
    # Query i of a chunk at key position i (top-left), not seq_len - n + i.
    "chunk aligned top-left": ("CausalAlignment", {"top-left"}),
    # A decode kernel run on a chunk: every query at the last position, seeing all keys.
    "every query of a chunk at the last position": ("CausalAlignment", {"decode positions"}),
    # Query head h reads KV head h % Hkv instead of h // (Hq / Hkv).
    "GQA head mapping interleaved": ("GroupMapping", {"interleaved"}),
    # adv12 #28: the default scale from the value head dim, 1/sqrt(Dv) (the same as 1/sqrt(D) when Dv == D).
    "default scale 1/sqrt(Dv)": ("Scale", {"scale from Dv"}),
    # adv12 #29: block id -1 where a token lives not refused: NumPy reads the pool's last block.
    "block -1 read as the last block": ("InvalidInput", {"negative block wraps"}),
    # adv12 #30: K and V cached by block id within a call, as many keys as the first sequence reading it used: a
    # block that is one sequence's partial last block and another's full block loses the second's keys.
    "K/V cached per block id within a call": ("BlockTable", {"block memo"}),
}


def _kernel(bugs: frozenset[str], precision: str = "float32"):
    def kernel(q, key_cache, value_cache, block_tables, seq_lens, cu_seqlens_q, scale=None, causal=True):
        checked = block_tables
        if "negative block wraps" in bugs:
            checked = np.asarray(block_tables) % np.asarray(key_cache).shape[0]
        product.paged_attention(q, key_cache, value_cache, checked, seq_lens, cu_seqlens_q,
                                scale=scale, causal=causal)  # the product's checks
        low = (lambda x: round_to(np.asarray(x, np.float64), precision).astype(_F32))
        q, kc, vc = low(q), low(key_cache), low(value_cache)
        tables, lens, cq = (np.asarray(x, np.int64) for x in (block_tables, seq_lens, cu_seqlens_q))
        size, hkv, d = kc.shape[1:]
        hq = q.shape[1]
        g = hq // hkv
        default = vc.shape[3] if "scale from Dv" in bugs else d
        scale = _F32(1 / math.sqrt(default) if scale is None else scale)
        memo = {}  # block id -> keys read from it by the first sequence reading it
        out = np.zeros((q.shape[0], hq, vc.shape[3]), _F32)
        lse = np.zeros((hq, q.shape[0]), _F32)
        for s in range(lens.size):
            n, a, b = int(lens[s]), int(cq[s]), int(cq[s + 1])
            if "whole last block" in bugs:
                n = -(-n // size) * size
            if "table width" in bugs:
                n = tables.shape[1] * size
            pos = np.arange(n)
            if "block memo" in bugs:
                pos = np.concatenate([j * size + np.arange(min(memo.setdefault(int(tables[s, j]), m), m))
                                      for j, m in enumerate(np.minimum(n - size * np.arange(-(-n // size)), size))]
                                     or [np.zeros(0, np.int64)])
            entry = np.minimum(pos // size + ("block off by one" in bugs), tables.shape[1] - 1)
            blocks = tables[s, entry]
            k, v = kc[blocks, pos % size], vc[blocks, pos % size]  # [n, Hkv, D], [n, Hkv, Dv]
            nq = b - a
            qpos = n - nq + np.arange(nq)
            if "top-left" in bugs:
                qpos = np.arange(nq)
            if "decode positions" in bugs:
                qpos = np.full(nq, n - 1)
            ok = (pos[None, :] <= qpos[:, None]) if causal else np.ones((nq, pos.size), bool)  # [nq, n]
            for h in range(hq):
                kv = h % hkv if "interleaved" in bugs else h // g
                with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                    logits = np.where(ok, (q[a:b, h] @ k[:, kv].T) * scale, -np.inf)  # [nq, n]
                    m = logits.max(axis=1, initial=-np.inf)
                    shift = np.where(np.isfinite(m), m, 0)
                    p = np.exp(logits - shift[:, None])
                    z = p.sum(axis=1)
                    out[a:b, h] = np.where(z[:, None] > 0, (p @ v[:, kv]) / np.where(z > 0, z, 1)[:, None], 0)
                    out[a:b, h] = np.where(np.isnan(z)[:, None], np.nan, out[a:b, h])
                    lse[h, a:b] = np.where(z > 0, shift + np.log(np.where(z > 0, z, 1)),
                                           np.where(np.isnan(z), np.nan, -np.inf))
        return round_to(out, precision).astype(_F32), lse.astype(_F32)
    return kernel


def bug(name: str) -> Implementation:
    return Implementation(f"paged attention: {name}", {OP: _kernel(frozenset(PAGED_ATTENTION_BUGS[name][1]))})


def correct(precision: str = "float32") -> Implementation:
    return Implementation(f"plain paged attention at {precision}", {OP: _kernel(frozenset(), precision)},
                          precision={OP: precision})

"""A FlashAttention-2-style kernel with a real tile loop, and the bugs that live only
in tile loops: each is right within one key tile and wrong past it.

Per (batch, head): query tiles of `bq` rows, key tiles of `bk` keys, tiles wholly
outside the causal or window band skipped, the online-softmax state in float32, the
probability tile rounded to the kernel's precision before P V.
"""

from __future__ import annotations

import math

import numpy as np

from corpus.attention_impls import ACCEPTED_DTYPES, lowp, validate_qkv
from ref.conformance.implementation import Implementation
from ref.formats.minifloat import round_to


def tiled(q, k, v, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
          sink_tokens=0, softcap=0.0, sink_in_lse="included", *, bugs=frozenset(), precision="bfloat16",
          bq=32, bk=16):
    validate_qkv(q, k, v, sinks, mask, causal, window_right, softcap)
    if mask is not None:
        raise NotImplementedError("no explicit masks")
    if sink_in_lse != "included":
        raise ValueError("sink_in_lse: this kernel's LSE includes the sink")
    q, k, v = (lowp(x, precision) for x in (q, k, v))
    b_, lq, hq, d = q.shape
    lk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    scale = np.float32(1 / math.sqrt(d) if scale is None else scale)
    offset = lk - lq
    right = 0 if causal else window_right
    out = np.zeros((b_, lq, hq, dv), np.float32)
    lse = np.zeros((b_, hq, lq), np.float32)
    tiles = -(-lk // bk)
    with np.errstate(all="ignore"):
        for b in range(b_):
            for h in range(hq):
                kv = h // (hq // hkv)
                for r0 in range(0, lq, bq):
                    rows = np.arange(r0, min(r0 + bq, lq))
                    pos = rows + offset
                    hi = tiles
                    if right >= 0:  # skip tiles right of the band
                        last = rows[-1] + (0 if "tile skip top-left" in bugs else offset) + right
                        hi = min(tiles, max(0, last // bk + 1))
                    lo = 0
                    if window_left >= 0 and (sink_tokens == 0 or "tile skip ignores sink tokens" in bugs):
                        first = rows[-1] if "window start from the last row" in bugs else rows[0]
                        lo = max(0, (first + offset - window_left) // bk)
                    m = np.full(len(rows), -np.inf, np.float32)
                    l = np.zeros(len(rows), np.float32)
                    acc = np.zeros((len(rows), dv), np.float32)
                    if sinks is not None:
                        m[:], l[:] = np.float32(lowp(sinks, precision)[h]), 1
                    lse_tile = None
                    for n, t in enumerate(range(lo, hi)):
                        cols = np.arange(t * bk, min(t * bk + bk, lk))
                        s = (q[b, rows, h] @ k[b, cols, kv].T) * scale
                        if softcap > 0:
                            s = np.float32(softcap) * np.tanh(s / np.float32(softcap))
                        if not ("mask the first tile only" in bugs and n > 0):
                            see = np.ones(s.shape, bool)
                            if right >= 0:
                                see &= cols[None, :] <= pos[:, None] + right
                            if window_left >= 0:
                                see &= (cols[None, :] >= pos[:, None] - window_left) | (cols[None, :] < sink_tokens)
                            s = np.where(see, s, np.float32(-np.inf))
                        m_new = np.maximum(m, s.max(axis=1, initial=-np.inf))
                        shift = np.where(np.isneginf(m_new), 0, m_new).astype(np.float32)
                        alpha = np.where(np.isneginf(m), 0, np.exp(m - shift)).astype(np.float32)
                        p = np.exp(s - shift[:, None]).astype(np.float32)
                        l = alpha * l + p.sum(axis=1)
                        if "output not rescaled" not in bugs:
                            acc = alpha[:, None] * acc
                        pv = lowp(p, precision) @ v[b, cols, kv]
                        if "P V accumulated at the kernel's precision" in bugs:
                            for j in range(len(cols)):
                                acc = lowp(acc + lowp(p[:, j:j + 1], precision) * v[b, cols[j], kv], precision)
                        else:
                            acc = acc + pv
                        m = m_new
                        lse_tile = np.where(p.sum(axis=1) > 0, shift + np.log(p.sum(axis=1)), -np.inf)
                    o = np.where(l[:, None] == 0, 0, acc / np.where(l == 0, 1, l)[:, None])
                    row_lse = np.where(l == 0, -np.inf, np.where(np.isneginf(m), 0, m) + np.log(np.where(l == 0, 1, l)))
                    if "LSE of the last tile" in bugs and lse_tile is not None:
                        row_lse = lse_tile
                    if "LSE stored at the kernel's precision" in bugs:
                        row_lse = lowp(row_lse, precision)
                    out[b, rows, h], lse[b, h, rows] = o, row_lse
    return round_to(out, precision).astype(ACCEPTED_DTYPES[precision]), lse


def tiled_impl(bugs=frozenset(), precision="bfloat16", **tiles):
    bugs = frozenset(bugs)
    return Implementation(f"tile loop {precision}" + (f" with {', '.join(sorted(bugs))}" if bugs else ""),
                          {"attention.attend": lambda **kw: tiled(**kw, bugs=bugs, precision=precision, **tiles)},
                          variants={"attention.attend": {"sink_in_lse": ["included"]}})


# name -> (bugs, precision, the flag of a vector that must catch it)
TILE_BUGS = {
    "causal mask on the first key tile only": ({"mask the first tile only"}, "bfloat16", "TileLoop"),
    "tile-skip bound aligned top-left": ({"tile skip top-left"}, "bfloat16", "TileLoop"),
    "window's first tile taken from the tile's last row": ({"window start from the last row"}, "bfloat16",
                                                            "TileLoop"),
    "window tile skipping ignores sink tokens": ({"tile skip ignores sink tokens"}, "bfloat16", "SinkTokens"),
    "LSE of the last key tile only": ({"LSE of the last tile"}, "bfloat16", "TileLoop"),
    "running output not rescaled when the maximum rises": ({"output not rescaled"}, "bfloat16", "TileLoop"),
    "P V accumulated in bfloat16": ({"P V accumulated at the kernel's precision"}, "bfloat16", "TileLoop"),
    "LSE stored in bfloat16": ({"LSE stored at the kernel's precision"}, "bfloat16", "LargeLogits"),
}

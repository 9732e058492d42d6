"""attention.attend: scaled dot-product attention (GQA, masks, sinks, softcap) -> (out, lse).

  q [B, Lq, Hq, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] [, sinks [Hq], mask]
  -> (out [B, Lq, Hq, Dv], lse [B, Hq, Lq])

Configuration that is a number or a switch (scale, causal, window edges, sink tokens,
softcap) travels in a vector's params beside the variant axis, so every language reads
it from the JSON. Inputs hold values exact at bfloat16 and float16
(`ref.testing.attention_cases.grid`).
"""

from __future__ import annotations

import math

import numpy as np

from ref.attention import emulate
from ref.attention.attend import attend
from ref.attention.catalog.common import ATTENTION, OUT_LSE, SINK_IN_LSE, Vectors
from ref.formats.minifloat import round_to
from ref.testing.attention_cases import attend_case_flags, attend_cases, grid, qkv
from ref.testing.catalog_types import Flag, seed_for

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "CausalAlignment": Flag("causal mask aligned top-left when Lq != Lk (PyTorch SDPA's is_causal)",
                            "a decode or chunked-prefill query sees too few keys: wrong output on every row"),
    "LargeLogits": Flag("softmax without subtracting the row maximum",
                        "exp overflows at large logits: Inf or NaN outputs"),
    "GroupMapping": Flag("GQA query head h mapped to KV head h % Hkv (interleaved) instead of h // (Hq/Hkv)",
                         "query heads read another head's keys and values"),
    "Scale": Flag("softmax scale 1/D instead of 1/sqrt(D), or the scale applied twice or not at all",
                  "attention too flat or too sharp on every row"),
    "Softcap": Flag("soft-capping applied after masking, or cap*tanh(s) without dividing by the cap",
                    "masked keys get weight exp(-cap): future tokens leak into the output"),
    "LearnableSink": Flag("the per-head sink logit scaled, given a value, or left out of the normalizer",
                          "rows are normalized to 1 although the sink should absorb probability"),
    "SinkInLse": Flag("the sink counted in the LSE where the declared variant excludes it, or the reverse",
                      "merging partials or the backward pass uses a normalizer off by the sink's mass"),
    "Accumulation": Flag("the softmax denominator or P.V accumulated in bfloat16 or float16",
                         "a sum stalls once it is 2^8 (bfloat16) or 2^11 (float16) times its terms: rows of "
                         "thousands of keys lose most of their mass"),
    "EmptyRow": Flag("a query row that sees no key divides 0 by 0 or spreads uniform weight",
                     "NaN or a mean of all values where the defined output is 0 and the LSE -inf"),
    "Window": Flag("a sliding-window edge off by one (W keys versus W+1) or aligned top-left",
                   "one key too many or too few at the edge of every row's window"),
    "SinkTokens": Flag("attention-sink tokens exempted from causality or the right edge too, or not at all",
                       "rows see future sink tokens, or lose the first tokens a streaming model needs"),
    "ExplicitMask": Flag("an explicit boolean mask inverted, broadcast over the wrong axis, or ignored",
                         "rows attend exactly the keys they should not"),
    "TileLoop": Flag("a tile loop that is right within one key tile only: masks applied to the first tile, "
                     "tile-skip bounds aligned top-left or from the wrong row, the LSE or the running "
                     "maximum of the last tile, the output not rescaled when the maximum rises",
                     "every sequence longer than one tile (16-128 keys) gets wrong rows"),
    "HeadDim": Flag("head dims other than 64/128 (192, 256, 576, Dv != D) mishandled",
                    "MLA-sized or large heads read out of bounds or drop the tail dimensions"),
}


def _attend_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("attention.attend"))
    v = Vectors()
    add = v.add

    add("MHA, no mask: the plain definition", ["Scale"], qkv(rng, 2, 5, 7, 3, 3, 16))
    add("causal, Lq == Lk", ["CausalAlignment"], qkv(rng, 1, 9, 9, 2, 2, 16), causal=True)
    add("causal decode, Lq = 1 < Lk: the query sees every key (bottom-right)", ["CausalAlignment"],
        qkv(rng, 2, 1, 13, 4, 2, 32), causal=True)
    add("causal chunked prefill, Lq = 5 < Lk = 12: row i sees keys 0..i+7", ["CausalAlignment"],
        qkv(rng, 1, 5, 12, 4, 1, 16), causal=True)
    add("causal with Lq > Lk: the first Lq - Lk rows see no key (output 0, LSE -inf)",
        ["CausalAlignment", "EmptyRow"], qkv(rng, 1, 8, 5, 2, 2, 16), causal=True)
    add("GQA 8/2: query heads 0-3 read KV head 0, 4-7 read KV head 1", ["GroupMapping"],
        qkv(rng, 1, 6, 9, 8, 2, 16), causal=True)
    add("GQA 6/3 with distinct KV heads, no mask", ["GroupMapping"], qkv(rng, 2, 4, 4, 6, 3, 8))
    add("MQA: 4 query heads share one KV head", ["GroupMapping"], qkv(rng, 1, 3, 10, 4, 1, 16))
    big = qkv(rng, 1, 4, 6, 2, 2, 16, std=24.0)
    add("logits up to +-1000: exp overflows (even float64's) without the row maximum subtracted",
        ["LargeLogits"], big)
    add("the same keys negated: exp underflows to 0 without the row maximum", ["LargeLogits"],
        {**big, "k": -big["k"]})
    add("explicit scale 0.5 instead of 1/sqrt(D)", ["Scale"], qkv(rng, 1, 4, 5, 2, 2, 16), scale=0.5)
    add("soft-cap 1.0 with a causal mask: masked keys must stay at weight 0", ["Softcap", "CausalAlignment"],
        qkv(rng, 1, 6, 6, 2, 2, 16, std=2.0), causal=True, softcap=1.0)
    add("soft-cap 2.0 on large logits (Gemma-2 style cap * tanh(s / cap))", ["Softcap", "LargeLogits"],
        qkv(rng, 1, 5, 8, 2, 1, 16, std=4.0), softcap=2.0)
    add("soft-cap 50 (Gemma-2's attention cap) with a window", ["Softcap", "Window"],
        qkv(rng, 1, 7, 7, 2, 2, 16, std=2.0), causal=True, window_left=3, softcap=50.0)
    sinks = grid(rng, (4,), 1.0)
    add("learnable sinks (gpt-oss): in the normalizer, no value, not scaled", ["LearnableSink", "SinkInLse"],
        {**qkv(rng, 1, 5, 5, 4, 2, 16), "sinks": sinks}, causal=True)
    add("learnable sinks dominating the row (sink logits 6..8): the LSE variant shows",
        ["LearnableSink", "SinkInLse"],
        {**qkv(rng, 1, 3, 6, 4, 2, 16), "sinks": np.array([6, 7, 7.5, 8], dtype=np.float32)})
    add("learnable sinks, causal with Lq > Lk emptying rows: output 0, LSE = sink (or -inf excluded)",
        ["LearnableSink", "EmptyRow", "SinkInLse"],
        {**qkv(rng, 1, 6, 3, 2, 2, 8), "sinks": np.array([0.5, -1], dtype=np.float32)}, causal=True)
    add("sliding window (3, 0): each row sees its key and the 3 before it", ["Window"],
        qkv(rng, 1, 10, 10, 2, 2, 16), causal=True, window_left=3)
    add("sliding window (2, 1) without causal: one key to the right", ["Window"],
        qkv(rng, 1, 8, 8, 2, 1, 16), window_left=2, window_right=1)
    add("window (0, 0): each row sees its own key only", ["Window"], qkv(rng, 1, 6, 6, 2, 2, 8),
        window_left=0, window_right=0)
    add("window with Lq < Lk (decode): edges bottom-right aligned", ["Window", "CausalAlignment"],
        qkv(rng, 2, 2, 11, 2, 2, 16), causal=True, window_left=4)
    add("right-only window (-1, 2): unbounded left", ["Window"], qkv(rng, 1, 7, 7, 1, 1, 8), window_right=2)
    add("2 sink tokens with window 3: keys 0 and 1 always visible, still causal", ["SinkTokens", "Window"],
        qkv(rng, 1, 12, 12, 2, 2, 16), causal=True, window_left=3, sink_tokens=2)
    add("window shorter than the sinks: 4 sink tokens, window 1", ["SinkTokens", "Window"],
        qkv(rng, 1, 10, 10, 2, 1, 8), causal=True, window_left=1, sink_tokens=4)
    add("sink tokens in decode (Lq = 2, Lk = 16)", ["SinkTokens", "CausalAlignment"],
        qkv(rng, 1, 2, 16, 2, 2, 16), causal=True, window_left=5, sink_tokens=1)
    masked = qkv(rng, 2, 5, 6, 4, 2, 8)
    per_head = rng.random((2, 4, 5, 6)) < 0.6
    per_head[0, 1, 2] = False  # one row masked entirely
    add("explicit mask per batch and head, one row fully masked", ["ExplicitMask", "EmptyRow"],
        {**masked, "mask": per_head})
    add("explicit [Lq, Lk] mask broadcast over batch and heads, combined with causal (a row emptied)",
        ["ExplicitMask", "EmptyRow"],
        {**qkv(rng, 2, 6, 6, 2, 2, 8), "mask": rng.random((6, 6)) < 0.7}, causal=True)
    add("explicit mask [1, Hq, Lq, Lk]: one mask per head (rows emptied)", ["ExplicitMask", "EmptyRow"],
        {**qkv(rng, 2, 4, 5, 3, 1, 8), "mask": rng.random((1, 3, 4, 5)) < 0.5})
    add("all keys masked: every row output 0, LSE -inf", ["EmptyRow"],
        {**qkv(rng, 1, 3, 4, 2, 2, 8), "mask": np.zeros((3, 4), dtype=bool)})
    add("no queries (Lq = 0)", ["EmptyInput"], qkv(rng, 1, 0, 5, 2, 2, 8))
    add("no keys (Lk = 0): output 0, LSE -inf", ["EmptyInput", "EmptyRow"], qkv(rng, 2, 3, 0, 2, 1, 8))
    for d, dv in ((64, 64), (128, 128), (192, 128), (256, 256), (576, 512)):
        add(f"head dim {d}, value dim {dv}", ["HeadDim"], qkv(rng, 1, 3, 9, 2, 1, d, dv), causal=True)
    mla = qkv(rng, 1, 2, 8, 4, 1, 576)
    mla["v"] = np.ascontiguousarray(mla["k"][..., :512])
    add("FlashMLA convention: MQA over a 576-d latent cache, V = its first 512 dims", ["HeadDim"], mla,
        causal=True, scale=1 / math.sqrt(192))
    nan = qkv(rng, 1, 4, 5, 4, 2, 8)
    nan["q"][0, 2, 1, 3] = np.nan
    add("NaN in one query row of head 1: that row is NaN; head 0, which shares its KV head, is not", ["NaN"],
        nan, causal=True)
    for choice in SINK_IN_LSE.values:
        add(f"sink_in_lse={choice}: a sink near the keys' mass, rows emptied by the mask",
            ["SinkInLse", "LearnableSink", "EmptyRow"],
            {**qkv(rng, 1, 5, 3, 2, 2, 8), "sinks": np.array([1.5, 0.25], np.float32)}, causal=True,
            sink_in_lse=choice)
    add("one key per row and D = 1", ["EmptyInput"], qkv(rng, 3, 1, 1, 1, 1, 1))
    large_sinks = {**qkv(rng, 1, 3, 5, 2, 1, 8, std=0.5), "sinks": np.array([30, 100], np.float32)}
    for choice in SINK_IN_LSE.values:
        add(f"sink logits 30 and 100 over logits near 0, sink_in_lse={choice}: the LSE is the sink (30, 100) "
            "or log of the key terms (about 1.6); exp(100) overflows float32 unless shifted by the sink",
            ["LearnableSink", "SinkInLse", "LargeLogits"], large_sinks, sink_in_lse=choice)
    long_row = qkv(rng, 1, 2, 4096, 1, 1, 2, std=0.5)
    long_row["v"] = round_to(2.0 + 0.5 * rng.standard_normal((1, 4096, 1, 4)), "bfloat16").astype(np.float32)
    add("4096 keys of nearly equal weight, values near 2: sums of P and P.V stall in a bfloat16 or float16 "
        "accumulator", ["Accumulation", "TileLoop"], long_row)
    # Long rows: a kernel's tile loop (FlashAttention's 64- or 128-key tiles; 16 in
    # small kernels) only shows its bugs past one tile: masks applied to the first tile
    # only, tile-skip bounds aligned top-left, a window's first tile taken from the
    # wrong row, the LSE of the last tile, the running output not rescaled.
    add("long causal prefill, Lq = Lk = 80: masks across key tiles", ["TileLoop", "CausalAlignment"],
        qkv(rng, 1, 80, 80, 2, 1, 16), causal=True)
    add("long chunked prefill, Lq = 24 < Lk = 150", ["TileLoop", "CausalAlignment"],
        qkv(rng, 1, 24, 150, 2, 1, 16), causal=True)
    add("long causal with Lq = 100 > Lk = 70: 30 empty rows, then masks across tiles",
        ["TileLoop", "CausalAlignment", "EmptyRow"], qkv(rng, 1, 100, 70, 1, 1, 16), causal=True)
    late = qkv(rng, 1, 1, 300, 4, 2, 16)
    late["k"][:, 290] = late["q"][:, 0, ::2] * 4  # each KV head's top logit sits in the last tile
    add("decode over 300 keys, the row maximum in the last tile", ["TileLoop", "CausalAlignment"], late,
        causal=True)
    add("speculative verification: 4 queries over 257 keys", ["TileLoop", "CausalAlignment"],
        qkv(rng, 1, 4, 257, 4, 1, 16), causal=True)
    rising = qkv(rng, 1, 6, 200, 2, 1, 16)
    rising["k"] *= np.linspace(0.1, 2.0, 200, dtype=np.float32)[None, :, None, None]
    rising["k"] = round_to(rising["k"], "bfloat16").astype(np.float32)
    add("logits growing key by key: the running maximum rises in every tile", ["TileLoop", "LargeLogits"],
        rising, causal=True, scale=0.5)
    add("long sliding window 40 with 4 sink tokens, L = 130", ["TileLoop", "Window", "SinkTokens"],
        qkv(rng, 1, 130, 130, 2, 1, 16), causal=True, window_left=40, sink_tokens=4)
    add("long prefill with window 20, no sink tokens: each query tile starts at its own first row",
        ["TileLoop", "Window"], qkv(rng, 1, 100, 100, 1, 1, 16), causal=True, window_left=20)
    add("long decode window: 3 queries, window 50, over 200 keys", ["TileLoop", "Window"],
        qkv(rng, 1, 3, 200, 2, 2, 16), causal=True, window_left=50)
    add("long rows with learnable sinks and soft-cap 30", ["TileLoop", "LearnableSink", "Softcap"],
        {**qkv(rng, 1, 70, 100, 2, 1, 16, std=2.0), "sinks": grid(rng, (2,), 2.0)}, causal=True, softcap=30.0)
    nan_v = qkv(rng, 1, 3, 6, 4, 2, 8)
    nan_v["v"][0, 4, 1, 2] = np.nan
    add("NaN in a V row every query sees: KV head 1's query heads are NaN in one column, KV head 0's are not",
        ["NaN"], nan_v)
    nan_k = qkv(rng, 1, 3, 6, 4, 2, 8)
    nan_k["k"][0, 2, 0, 5] = np.nan
    add("NaN in a K row every query sees: KV head 0's query heads are NaN, KV head 1's are not", ["NaN"], nan_k)
    add("explicit mask [B, 1, Lq, Lk]: one mask per batch element, shared by the heads", ["ExplicitMask"],
        {**qkv(rng, 3, 4, 6, 4, 2, 8), "mask": rng.random((3, 1, 4, 6)) < 0.6})
    add("random: GQA 4/2, causal, window, soft-cap, sinks", ["Random"],
        {**qkv(rng, 2, 7, 11, 4, 2, 32), "sinks": grid(rng, (4,))}, causal=True, window_left=5, softcap=20.0)

    bad = qkv(rng, 1, 2, 3, 3, 2, 8)
    add("3 query heads over 2 KV heads", ["InvalidInput"], bad, result="invalid")
    add("q and k head dims differ", ["InvalidInput"],
        {**qkv(rng, 1, 2, 3, 2, 2, 8), "k": grid(rng, (1, 3, 2, 4))}, result="invalid")
    add("causal with window_right = 2 contradict", ["InvalidInput"], qkv(rng, 1, 2, 3, 2, 2, 8), result="invalid",
        causal=True, window_right=2)
    add("a float mask instead of bool", ["InvalidInput"],
        {**qkv(rng, 1, 2, 3, 2, 2, 8), "mask": np.ones((2, 3), dtype=np.float32)}, result="invalid")
    add("integer q", ["InvalidInput"], {**qkv(rng, 1, 2, 3, 2, 2, 8), "q": np.ones((1, 2, 2, 8), np.int32)},
        result="invalid")
    add("sinks of the wrong length", ["InvalidInput"],
        {**qkv(rng, 1, 2, 3, 2, 2, 8), "sinks": np.zeros(3, np.float32)}, result="invalid")
    add("negative soft-cap", ["InvalidInput"], qkv(rng, 1, 2, 3, 2, 2, 8), result="invalid", softcap=-1.0)
    return v


OPERATIONS = [
    ATTENTION.bounded(
        "attend", attend, anchor="attend",
        summary="scaled dot-product attention (GQA, masks, sinks, softcap) -> (out, lse)",
        variants=(SINK_IN_LSE,), vectors=_attend_vectors, examples=attend_cases, outputs=("out", "lse"),
        emulate=emulate.attend, bounds=OUT_LSE, case_flags=attend_case_flags),
]

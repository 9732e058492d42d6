"""Catalog declarations of the attention area (all of the bounded kind).

  attention.attend          q [B,Lq,Hq,D], k [B,Lk,Hkv,D], v [B,Lk,Hkv,Dv] [, sinks [Hq], mask]
                            -> (out [B,Lq,Hq,Dv], lse [B,Hq,Lq])
  attention.attend_varlen   q [Tq,Hq,D], k [Tk,Hkv,D], v [Tk,Hkv,Dv], cu_seqlens_q, cu_seqlens_k [, sinks]
                            -> (out [Tq,Hq,Dv], lse [Hq,Tq])
  attention.merge_states    (o_a [N,H,Dv], lse_a [N,H], o_b, lse_b) -> (o, lse)
  attention.rope            x [*S,H,D], positions (integers broadcastable to S) -> x rotated
  attention.mla             q_nope, q_pe, c_kv, k_pe, w_kv_b (RoPE inside) -> (out [B,Lq,H,dv], lse)

Configuration that is a number or a switch (scale, causal, window edges, sink
tokens, softcap) travels in a vector's params beside the variant axes, so every
language reads it from the JSON. Vector inputs hold values exact in both bfloat16
and float16 (stored as float32): a kernel at either precision sees the same
numbers, and the bounded rule measures its arithmetic, not a conversion.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ref.attention import attend as _attend
from ref.attention import emulate, rope, split_kv
from ref.attention.attend import visible_keys
from ref.attention.ops_common import BOUNDS, LSE_BOUND, OUT_BOUND, _compare, _format, _qkv, grid
from ref.attention.ops_rope_mla import (
    MLA_VARIANTS,
    ROPE_VARIANTS,
    _mla_case,
    _mla_emulated,
    _mla_oracle,
    _mla_vectors,
    _rope_case,
    _rope_compare,
    _rope_emulated,
    _rope_vectors,
)
from ref.formats.minifloat import round_to
from ref.testing.golden import Case, VectorSpec
from ref.testing.operations import Flag, Kind, Op, Variant, seed_for

_SPEC = "spec/attention.md"

__all__ = ["BOUNDS", "FLAGS", "LSE_BOUND", "OPERATIONS", "OUT_BOUND", "attend_case_flags", "grid"]

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
    "Varlen": Flag("a packed batch with positions or causal alignment not reset per sequence",
                   "sequences after the first attend across their boundary or misalign their mask"),
    "MaskedLse": Flag("FlashAttention-2's +inf LSE of an empty row passed on unmapped",
                      "a downstream merge reads an empty partial as a dominant one"),
    "MergeShift": Flag("partials merged without subtracting the larger LSE first",
                       "exp(lse) overflows for large logits: Inf or NaN merged outputs"),
    "EmptyPartial": Flag("an empty partial (lse -inf) merged by the plain formula",
                         "-inf - -inf = NaN poisons the merged row"),
    "RopePairing": Flag("RoPE pairs formed the other way (rotate-half versus interleaved)",
                        "every position is rotated in the wrong planes: relative position is scrambled"),
    "RopeFrequencies": Flag("RoPE frequencies with the exponent over the head dim instead of the rotary dim, "
                            "or the wrong base", "partial-rotary models rotate with the wrong wavelengths"),
    "RopeScaling": Flag("Llama-3 or YaRN frequency scaling off (a boundary, the ramp, the attention factor)",
                        "long-context models see distorted positions beyond the original context"),
    "MscaleKeys": Flag("YaRN's attention factor read from the wrong key (mscale where transformers reads "
                       "attention_factor, or the other way; the mscale ratio taken with one key missing)",
                       "cos and sin scaled by a wrong factor: every logit of a long-context model off"),
    "RopePositions": Flag("positions taken as 0..L-1 instead of the given ids, or angles in low precision",
                          "decode steps, packed batches and long contexts get the wrong rotation"),
    "MlaWeights": Flag("W_UK and W_UV split or oriented wrongly in the absorbed form (W_UK transposed, "
                       "the value rows taken first)", "queries meet the latent through the wrong projection"),
    "MlaRope": Flag("RoPE applied to the latent (or to the whole 576-d cache entry) instead of only the "
                    "64-d rope part", "the latent's content is rotated by position: scores drift with distance"),
    "MlaScale": Flag("MLA softmax scale 1/sqrt(576) (the absorbed width) or mscale instead of mscale^2",
                     "attention too flat or too sharp in every DeepSeek layer"),
    "NaN": Flag("NaN input not propagated",
                "NaN silently becomes a finite value and hides a divergence"),
    "EmptyInput": Flag("empty or 0-d arrays crash (a reduction over no elements) or change shape",
                       "a zero-token batch or a scalar brings down the kernel or comes back reshaped"),
    "InvalidInput": Flag("bad input accepted silently",
                         "a wrong dtype or shape is reinterpreted instead of rejected"),
    "Random": Flag("any bug the curated vectors miss",
                   "random values across the format's range"),
}

# The LSE's base (FlashInfer: 2) and FlashAttention-2's +inf for an empty row are
# options of the oracles, not catalog axes: an adapter converts (lse_from_base2).
VARIANTS = (
    Variant("sink_in_lse", tuple(m.value for m in _attend.SinkInLse), "included",
            "whether the learnable sink's term is part of the returned LSE"),
)


# ---------------------------------------------------------------------------- attend

def _attend_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("attention.attend"))
    v = []

    def add(comment, flags, inputs, result="valid", **params):
        v.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))

    add("MHA, no mask: the plain definition", ["Scale"], _qkv(rng, 2, 5, 7, 3, 3, 16))
    add("causal, Lq == Lk", ["CausalAlignment"], _qkv(rng, 1, 9, 9, 2, 2, 16), causal=True)
    add("causal decode, Lq = 1 < Lk: the query sees every key (bottom-right)", ["CausalAlignment"],
        _qkv(rng, 2, 1, 13, 4, 2, 32), causal=True)
    add("causal chunked prefill, Lq = 5 < Lk = 12: row i sees keys 0..i+7", ["CausalAlignment"],
        _qkv(rng, 1, 5, 12, 4, 1, 16), causal=True)
    add("causal with Lq > Lk: the first Lq - Lk rows see no key (output 0, LSE -inf)",
        ["CausalAlignment", "EmptyRow"], _qkv(rng, 1, 8, 5, 2, 2, 16), causal=True)
    add("GQA 8/2: query heads 0-3 read KV head 0, 4-7 read KV head 1", ["GroupMapping"],
        _qkv(rng, 1, 6, 9, 8, 2, 16), causal=True)
    add("GQA 6/3 with distinct KV heads, no mask", ["GroupMapping"], _qkv(rng, 2, 4, 4, 6, 3, 8))
    add("MQA: 4 query heads share one KV head", ["GroupMapping"], _qkv(rng, 1, 3, 10, 4, 1, 16))
    big = _qkv(rng, 1, 4, 6, 2, 2, 16, std=24.0)
    add("logits up to +-1000: exp overflows (even float64's) without the row maximum subtracted",
        ["LargeLogits"], big)
    add("the same keys negated: exp underflows to 0 without the row maximum", ["LargeLogits"],
        {**big, "k": -big["k"]})
    add("explicit scale 0.5 instead of 1/sqrt(D)", ["Scale"], _qkv(rng, 1, 4, 5, 2, 2, 16), scale=0.5)
    add("soft-cap 1.0 with a causal mask: masked keys must stay at weight 0", ["Softcap", "CausalAlignment"],
        _qkv(rng, 1, 6, 6, 2, 2, 16, std=2.0), causal=True, softcap=1.0)
    add("soft-cap 2.0 on large logits (Gemma-2 style cap * tanh(s / cap))", ["Softcap", "LargeLogits"],
        _qkv(rng, 1, 5, 8, 2, 1, 16, std=4.0), softcap=2.0)
    add("soft-cap 50 (Gemma-2's attention cap) with a window", ["Softcap", "Window"],
        _qkv(rng, 1, 7, 7, 2, 2, 16, std=2.0), causal=True, window_left=3, softcap=50.0)
    sinks = grid(rng, (4,), 1.0)
    add("learnable sinks (gpt-oss): in the normalizer, no value, not scaled", ["LearnableSink", "SinkInLse"],
        {**_qkv(rng, 1, 5, 5, 4, 2, 16), "sinks": sinks}, causal=True)
    add("learnable sinks dominating the row (sink logits 6..8): the LSE variant shows",
        ["LearnableSink", "SinkInLse"],
        {**_qkv(rng, 1, 3, 6, 4, 2, 16), "sinks": np.array([6, 7, 7.5, 8], dtype=np.float32)})
    add("learnable sinks, causal with Lq > Lk emptying rows: output 0, LSE = sink (or -inf excluded)",
        ["LearnableSink", "EmptyRow", "SinkInLse"],
        {**_qkv(rng, 1, 6, 3, 2, 2, 8), "sinks": np.array([0.5, -1], dtype=np.float32)}, causal=True)
    add("sliding window (3, 0): each row sees its key and the 3 before it", ["Window"],
        _qkv(rng, 1, 10, 10, 2, 2, 16), causal=True, window_left=3)
    add("sliding window (2, 1) without causal: one key to the right", ["Window"],
        _qkv(rng, 1, 8, 8, 2, 1, 16), window_left=2, window_right=1)
    add("window (0, 0): each row sees its own key only", ["Window"], _qkv(rng, 1, 6, 6, 2, 2, 8),
        window_left=0, window_right=0)
    add("window with Lq < Lk (decode): edges bottom-right aligned", ["Window", "CausalAlignment"],
        _qkv(rng, 2, 2, 11, 2, 2, 16), causal=True, window_left=4)
    add("right-only window (-1, 2): unbounded left", ["Window"], _qkv(rng, 1, 7, 7, 1, 1, 8), window_right=2)
    add("2 sink tokens with window 3: keys 0 and 1 always visible, still causal", ["SinkTokens", "Window"],
        _qkv(rng, 1, 12, 12, 2, 2, 16), causal=True, window_left=3, sink_tokens=2)
    add("window shorter than the sinks: 4 sink tokens, window 1", ["SinkTokens", "Window"],
        _qkv(rng, 1, 10, 10, 2, 1, 8), causal=True, window_left=1, sink_tokens=4)
    add("sink tokens in decode (Lq = 2, Lk = 16)", ["SinkTokens", "CausalAlignment"],
        _qkv(rng, 1, 2, 16, 2, 2, 16), causal=True, window_left=5, sink_tokens=1)
    qkv = _qkv(rng, 2, 5, 6, 4, 2, 8)
    per_head = rng.random((2, 4, 5, 6)) < 0.6
    per_head[0, 1, 2] = False  # one row masked entirely
    add("explicit mask per batch and head, one row fully masked", ["ExplicitMask", "EmptyRow"],
        {**qkv, "mask": per_head})
    add("explicit [Lq, Lk] mask broadcast over batch and heads, combined with causal (a row emptied)",
        ["ExplicitMask", "EmptyRow"],
        {**_qkv(rng, 2, 6, 6, 2, 2, 8), "mask": rng.random((6, 6)) < 0.7}, causal=True)
    add("explicit mask [1, Hq, Lq, Lk]: one mask per head (rows emptied)", ["ExplicitMask", "EmptyRow"],
        {**_qkv(rng, 2, 4, 5, 3, 1, 8), "mask": rng.random((1, 3, 4, 5)) < 0.5})
    add("all keys masked: every row output 0, LSE -inf", ["EmptyRow"],
        {**_qkv(rng, 1, 3, 4, 2, 2, 8), "mask": np.zeros((3, 4), dtype=bool)})
    add("no queries (Lq = 0)", ["EmptyInput"], _qkv(rng, 1, 0, 5, 2, 2, 8))
    add("no keys (Lk = 0): output 0, LSE -inf", ["EmptyInput", "EmptyRow"], _qkv(rng, 2, 3, 0, 2, 1, 8))
    for d, dv in ((64, 64), (128, 128), (192, 128), (256, 256), (576, 512)):
        add(f"head dim {d}, value dim {dv}", ["HeadDim"], _qkv(rng, 1, 3, 9, 2, 1, d, dv), causal=True)
    mla = _qkv(rng, 1, 2, 8, 4, 1, 576)
    mla["v"] = np.ascontiguousarray(mla["k"][..., :512])
    add("FlashMLA convention: MQA over a 576-d latent cache, V = its first 512 dims", ["HeadDim"], mla,
        causal=True, scale=1 / math.sqrt(192))
    nan = _qkv(rng, 1, 4, 5, 4, 2, 8)
    nan["q"][0, 2, 1, 3] = np.nan
    add("NaN in one query row of head 1: that row is NaN; head 0, which shares its KV head, is not", ["NaN"],
        nan, causal=True)
    for choice in tuple(m.value for m in _attend.SinkInLse):
        add(f"sink_in_lse={choice}: a sink near the keys' mass, rows emptied by the mask",
            ["SinkInLse", "LearnableSink", "EmptyRow"],
            {**_qkv(rng, 1, 5, 3, 2, 2, 8), "sinks": np.array([1.5, 0.25], np.float32)}, causal=True,
            sink_in_lse=choice)
    add("one key per row and D = 1", ["EmptyInput"], _qkv(rng, 3, 1, 1, 1, 1, 1))
    large_sinks = {**_qkv(rng, 1, 3, 5, 2, 1, 8, std=0.5), "sinks": np.array([30, 100], np.float32)}
    for choice in tuple(m.value for m in _attend.SinkInLse):
        add(f"sink logits 30 and 100 over logits near 0, sink_in_lse={choice}: the LSE is the sink (30, 100) "
            "or log of the key terms (about 1.6); exp(100) overflows float32 unless shifted by the sink",
            ["LearnableSink", "SinkInLse", "LargeLogits"], large_sinks, sink_in_lse=choice)
    long_row = _qkv(rng, 1, 2, 4096, 1, 1, 2, std=0.5)
    long_row["v"] = round_to(2.0 + 0.5 * rng.standard_normal((1, 4096, 1, 4)), "bfloat16").astype(np.float32)
    add("4096 keys of nearly equal weight, values near 2: sums of P and P.V stall in a bfloat16 or float16 "
        "accumulator", ["Accumulation", "TileLoop"], long_row)
    # Long rows: a kernel's tile loop (FlashAttention's 64- or 128-key tiles; 16 in
    # small kernels) only shows its bugs past one tile: masks applied to the first tile
    # only, tile-skip bounds aligned top-left, a window's first tile taken from the
    # wrong row, the LSE of the last tile, the running output not rescaled.
    add("long causal prefill, Lq = Lk = 80: masks across key tiles", ["TileLoop", "CausalAlignment"],
        _qkv(rng, 1, 80, 80, 2, 1, 16), causal=True)
    add("long chunked prefill, Lq = 24 < Lk = 150", ["TileLoop", "CausalAlignment"],
        _qkv(rng, 1, 24, 150, 2, 1, 16), causal=True)
    add("long causal with Lq = 100 > Lk = 70: 30 empty rows, then masks across tiles",
        ["TileLoop", "CausalAlignment", "EmptyRow"], _qkv(rng, 1, 100, 70, 1, 1, 16), causal=True)
    late = _qkv(rng, 1, 1, 300, 4, 2, 16)
    late["k"][:, 290] = late["q"][:, 0, ::2] * 4  # each KV head's top logit sits in the last tile
    add("decode over 300 keys, the row maximum in the last tile", ["TileLoop", "CausalAlignment"], late,
        causal=True)
    add("speculative verification: 4 queries over 257 keys", ["TileLoop", "CausalAlignment"],
        _qkv(rng, 1, 4, 257, 4, 1, 16), causal=True)
    rising = _qkv(rng, 1, 6, 200, 2, 1, 16)
    rising["k"] *= np.linspace(0.1, 2.0, 200, dtype=np.float32)[None, :, None, None]
    rising["k"] = round_to(rising["k"], "bfloat16").astype(np.float32)
    add("logits growing key by key: the running maximum rises in every tile", ["TileLoop", "LargeLogits"],
        rising, causal=True, scale=0.5)
    add("long sliding window 40 with 4 sink tokens, L = 130", ["TileLoop", "Window", "SinkTokens"],
        _qkv(rng, 1, 130, 130, 2, 1, 16), causal=True, window_left=40, sink_tokens=4)
    add("long prefill with window 20, no sink tokens: each query tile starts at its own first row",
        ["TileLoop", "Window"], _qkv(rng, 1, 100, 100, 1, 1, 16), causal=True, window_left=20)
    add("long decode window: 3 queries, window 50, over 200 keys", ["TileLoop", "Window"],
        _qkv(rng, 1, 3, 200, 2, 2, 16), causal=True, window_left=50)
    add("long rows with learnable sinks and soft-cap 30", ["TileLoop", "LearnableSink", "Softcap"],
        {**_qkv(rng, 1, 70, 100, 2, 1, 16, std=2.0), "sinks": grid(rng, (2,), 2.0)}, causal=True, softcap=30.0)
    nan_v = _qkv(rng, 1, 3, 6, 4, 2, 8)
    nan_v["v"][0, 4, 1, 2] = np.nan
    add("NaN in a V row every query sees: KV head 1's query heads are NaN in one column, KV head 0's are not",
        ["NaN"], nan_v)
    nan_k = _qkv(rng, 1, 3, 6, 4, 2, 8)
    nan_k["k"][0, 2, 0, 5] = np.nan
    add("NaN in a K row every query sees: KV head 0's query heads are NaN, KV head 1's are not", ["NaN"], nan_k)
    add("explicit mask [B, 1, Lq, Lk]: one mask per batch element, shared by the heads", ["ExplicitMask"],
        {**_qkv(rng, 3, 4, 6, 4, 2, 8), "mask": rng.random((3, 1, 4, 6)) < 0.6})
    add("random: GQA 4/2, causal, window, soft-cap, sinks", ["Random"],
        {**_qkv(rng, 2, 7, 11, 4, 2, 32), "sinks": grid(rng, (4,))}, causal=True, window_left=5, softcap=20.0)

    bad = _qkv(rng, 1, 2, 3, 3, 2, 8)
    add("3 query heads over 2 KV heads", ["InvalidInput"], bad, result="invalid")
    add("q and k head dims differ", ["InvalidInput"],
        {**_qkv(rng, 1, 2, 3, 2, 2, 8), "k": grid(rng, (1, 3, 2, 4))}, result="invalid")
    add("causal with window_right = 2 contradict", ["InvalidInput"], _qkv(rng, 1, 2, 3, 2, 2, 8), result="invalid",
        causal=True, window_right=2)
    add("a float mask instead of bool", ["InvalidInput"],
        {**_qkv(rng, 1, 2, 3, 2, 2, 8), "mask": np.ones((2, 3), dtype=np.float32)}, result="invalid")
    add("integer q", ["InvalidInput"], {**_qkv(rng, 1, 2, 3, 2, 2, 8), "q": np.ones((1, 2, 2, 8), np.int32)},
        result="invalid")
    add("sinks of the wrong length", ["InvalidInput"],
        {**_qkv(rng, 1, 2, 3, 2, 2, 8), "sinks": np.zeros(3, np.float32)}, result="invalid")
    add("negative soft-cap", ["InvalidInput"], _qkv(rng, 1, 2, 3, 2, 2, 8), result="invalid", softcap=-1.0)
    return v


@st.composite
def _attend_case(draw, supported, varlen=False):
    params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    hkv = draw(st.integers(1, 3), label="hkv")
    hq = hkv * draw(st.integers(1, 3), label="group")
    d = draw(st.sampled_from([1, 2, 4, 8, 16, 32]), label="d")
    dv = draw(st.sampled_from([d, 4, 8]), label="dv")
    std = draw(st.sampled_from([0.5, 1.0, 3.0]), label="std")
    causal = draw(st.booleans(), label="causal")
    params["causal"] = causal
    left = draw(st.sampled_from([-1, -1, 0, 1, 3]), label="window_left")
    right = 0 if causal else draw(st.sampled_from([-1, -1, 0, 2]), label="window_right")
    if left >= 0:
        params["window_left"] = left
        params["sink_tokens"] = draw(st.sampled_from([0, 0, 1, 2]), label="sink_tokens")
    if right >= 0 and not causal:
        params["window_right"] = right
    if draw(st.booleans(), label="softcap?"):
        params["softcap"] = draw(st.sampled_from([1.0, 5.0, 30.0]), label="softcap")
    if draw(st.booleans(), label="scale?"):
        params["scale"] = draw(st.sampled_from([0.125, 0.3, 1.0]), label="scale")
    inputs = {}
    # Rarer shapes come from a generator of their own, so that the draws (and values) of
    # every other example stay as they were.
    rare = np.random.default_rng([seed, 1]).random(2)
    if draw(st.booleans(), label="sinks?"):  # a third of them dominant, past exp's float32 range (88)
        offset = 100.0 if rare[0] < 1 / 3 else 0.0
        inputs["sinks"] = round_to(offset + grid(rng, (hq,), 2.0), "bfloat16").astype(np.float32)
    if varlen:
        nseq = draw(st.integers(0, 3), label="sequences")
        top = 100 if draw(st.integers(0, 7), label="long?") == 0 else 8
        lks = [draw(st.integers(0, top), label="lk") for _ in range(nseq)]
        lqs = [draw(st.integers(0, min(lk_, 6) if top == 8 else lk_), label="lq") for lk_ in lks]
        if lqs and draw(st.booleans(), label="more queries than keys?"):
            lqs[-1] = lks[-1] + draw(st.integers(1, 3), label="extra queries")
        tq, tk = sum(lqs), sum(lks)
        inputs.update(q=grid(rng, (tq, hq, d), std), k=grid(rng, (tk, hkv, d), std), v=grid(rng, (tk, hkv, dv)),
                      cu_seqlens_q=np.cumsum([0] + lqs).astype(np.int32),
                      cu_seqlens_k=np.cumsum([0] + lks).astype(np.int32))
        return Case(inputs, params)
    b = draw(st.integers(1, 2), label="batch")
    if draw(st.integers(0, 7), label="long?") == 0:  # past a kernel's key tile, now and then
        lq, lk = draw(st.integers(0, 40), label="lq"), draw(st.integers(0, 300), label="lk")
        if rare[1] < 0.5:  # thousands of keys: a low-precision accumulator stalls
            lq, lk = min(lq, 3), 1000 + 10 * lk
    else:
        lq, lk = draw(st.integers(0, 9), label="lq"), draw(st.integers(0, 12), label="lk")
    inputs.update(_qkv(rng, b, lq, lk, hq, hkv, d, dv, std))
    if draw(st.booleans(), label="mask?"):
        shape = draw(st.sampled_from([(lq, lk), (b, hq, lq, lk), (1, hq, lq, lk), (b, 1, lq, lk)]),
                     label="mask shape")
        inputs["mask"] = rng.random(shape) < 0.7
    return Case(inputs, params)


def _has_empty_row(lq: int, lk: int, params, mask=None) -> bool:
    """Whether a query row of one sequence sees no key under the case's mask options."""
    if lq == 0 or lk == 0:  # no rows, or rows that see nothing
        return lq > 0
    window = {k: params[k] for k in ("causal", "window_left", "window_right", "sink_tokens") if k in params}
    visible = visible_keys(lq, lk, **window)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        visible = visible & (m if m.ndim == 2 else m.reshape(-1, lq, lk))
    return bool((~visible.any(axis=-1)).any())


def attend_case_flags(case: Case) -> tuple[str, ...]:
    """The flags an attend or attend_varlen call exercises, from its shapes and masks:
    "EmptyRow" when a query row sees no key, "EmptyInput" when a sequence has no
    queries or no keys. A skip or xfail naming either covers random examples with it
    (engines that mask with finfo.min return the mean of V in an empty row;
    transformers' sdpa_attention_forward raises at Lq = 0)."""
    inputs, params = case.inputs, case.params
    if "cu_seqlens_q" in inputs:
        cq = np.asarray(inputs["cu_seqlens_q"], np.int64)
        ck = np.asarray(inputs["cu_seqlens_k"], np.int64)
        lens = list(zip(np.diff(cq).tolist(), np.diff(ck).tolist()))
        empty_row = any(_has_empty_row(lq, lk, params) for lq, lk in lens)
        empty_input = not lens or any(0 in pair for pair in lens)
    else:
        lq, lk = np.shape(inputs["q"])[1], np.shape(inputs["k"])[1]
        empty_row = _has_empty_row(lq, lk, params, inputs.get("mask"))
        empty_input = 0 in (lq, lk)
    return ("EmptyRow",) * empty_row + ("EmptyInput",) * empty_input


# ---------------------------------------------------------------------------- varlen

def _varlen_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("attention.attend_varlen"))
    v = []

    def packed(lqs, lks, hq, hkv, d, dv=None, std=1.0):
        dv = d if dv is None else dv
        return {"q": grid(rng, (sum(lqs), hq, d), std), "k": grid(rng, (sum(lks), hkv, d), std),
                "v": grid(rng, (sum(lks), hkv, dv)),
                "cu_seqlens_q": np.cumsum([0, *lqs]).astype(np.int32),
                "cu_seqlens_k": np.cumsum([0, *lks]).astype(np.int32)}

    def add(comment, flags, inputs, result="valid", **params):
        v.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))

    add("three sequences of different lengths, causal prefill (Lq == Lk each)", ["Varlen", "CausalAlignment"],
        packed([4, 1, 6], [4, 1, 6], 4, 2, 16), causal=True)
    add("decode batch: one query per sequence, contexts 5, 9, 2", ["Varlen", "CausalAlignment"],
        packed([1, 1, 1], [5, 9, 2], 4, 1, 16), causal=True)
    add("chunked prefill: Lq < Lk in every sequence, each aligned bottom-right on its own",
        ["Varlen", "CausalAlignment"], packed([3, 2], [7, 4], 2, 2, 8), causal=True)
    add("an empty sequence in the middle and one with no keys", ["Varlen", "EmptyInput", "EmptyRow"],
        packed([2, 0, 3], [3, 2, 0], 2, 2, 8), causal=False)
    add("varlen with a sliding window and sink tokens", ["Varlen", "Window", "SinkTokens"],
        packed([8, 6], [8, 6], 2, 1, 16), causal=True, window_left=2, sink_tokens=1)
    add("varlen with learnable sinks and soft-cap", ["Varlen", "LearnableSink", "Softcap"],
        {**packed([3, 4], [5, 4], 2, 2, 8, std=2.0), "sinks": grid(rng, (2,))}, causal=True, softcap=3.0)
    add("long sequences of 70, 130 and 1 tokens, causal", ["Varlen", "TileLoop"],
        packed([70, 130, 1], [70, 130, 1], 2, 1, 16), causal=True)
    add("long decode batch: contexts 90 and 200, window 64", ["Varlen", "TileLoop", "Window"],
        packed([1, 2], [90, 200], 4, 2, 16), causal=True, window_left=64)
    add("causal with more queries than keys in a sequence (5 over 3): its first 2 rows see no key",
        ["Varlen", "CausalAlignment", "EmptyRow"], packed([5, 2], [3, 4], 2, 1, 8), causal=True)
    add("learnable sinks on a sequence with queries but no keys: its LSE is the sink",
        ["Varlen", "LearnableSink", "EmptyRow"], {**packed([2, 3, 1], [3, 0, 2], 2, 2, 8), "sinks": grid(rng, (2,))})
    add("no sequences at all", ["EmptyInput"], packed([], [], 2, 2, 8))
    add("offsets not starting at 0", ["InvalidInput"],
        {**packed([2, 2], [2, 2], 2, 2, 8), "cu_seqlens_q": np.array([1, 2, 4], np.int32)}, result="invalid")
    add("offsets that decrease", ["InvalidInput"],
        {**packed([2, 2], [2, 2], 2, 2, 8), "cu_seqlens_k": np.array([0, 3, 2, 4], np.int32)}, result="invalid")
    add("last offset differs from the packed length", ["InvalidInput"],
        {**packed([2, 2], [2, 2], 2, 2, 8), "cu_seqlens_q": np.array([0, 2, 3], np.int32)}, result="invalid")
    return v


def _varlen_oracle(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, **options):
    return _attend.attend_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=sinks, **options)


# ---------------------------------------------------------------------------- merge

def _merge_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("attention.merge_states"))
    v = []

    def states(n, h, dv, spread=1.0, center=0.0):
        return {"o_a": grid(rng, (n, h, dv)), "lse_a": (center + grid(rng, (n, h), spread)).astype(np.float32),
                "o_b": grid(rng, (n, h, dv)), "lse_b": (center + grid(rng, (n, h), spread)).astype(np.float32)}

    def add(comment, flags, inputs, result="valid", **params):
        v.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))

    add("two partials of similar mass", ["MergeShift"], states(5, 4, 16))
    add("LSEs near 1000: exp(lse) overflows without the max shift", ["MergeShift"], states(3, 2, 8, 4.0, 1000.0))
    add("LSEs near -1000: exp(lse) underflows to 0 without the max shift", ["MergeShift"],
        states(3, 2, 8, 4.0, -1000.0))
    add("one partial dominates by 40 nats", ["MergeShift"],
        {**states(2, 2, 8), "lse_a": np.full((2, 2), 40.0, np.float32)})
    st_ = states(4, 2, 8)
    st_["lse_a"][0, 0] = -np.inf
    st_["lse_b"][1, 1] = -np.inf
    st_["lse_a"][2] = -np.inf
    st_["lse_b"][2] = -np.inf
    add("empty partials (LSE -inf, stale finite outputs): one side, the other, both (output 0, LSE -inf)",
        ["EmptyPartial"], st_)
    add("no rows", ["EmptyInput"], states(0, 2, 8))
    nan = states(3, 2, 4)
    nan["lse_b"][1, 0] = np.nan
    add("NaN LSE in one row stays in that row", ["NaN"], nan)
    tie = states(3, 2, 8)
    tie["lse_b"][1] = tie["lse_a"][1]
    tie["o_a"][2, 0, 3] = np.nan
    add("equal LSEs in a row (weights 1/2 each), and NaN in one partial output", ["MergeShift", "NaN"], tie)
    add("o and lse shapes disagree", ["InvalidInput"], {**states(3, 2, 4), "lse_b": np.zeros((3, 3), np.float32)},
        result="invalid")
    add("an LSE of +inf (FlashAttention-2's empty row, unmapped)", ["InvalidInput", "MaskedLse"],
        {**states(2, 2, 4), "lse_a": np.full((2, 2), np.inf, np.float32)}, result="invalid")
    return v


@st.composite
def _merge_case(draw, supported):
    params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    n, h, dv = draw(st.integers(0, 6), label="n"), draw(st.integers(1, 4), label="h"), draw(
        st.integers(1, 16), label="dv")
    center = draw(st.sampled_from([0.0, 30.0, -200.0, 900.0]), label="center")
    spread = draw(st.sampled_from([0.5, 3.0, 50.0]), label="spread")
    inputs = {}
    for side in "ab":
        lse = (center + grid(rng, (n, h), spread)).astype(np.float32)
        empty = rng.random((n, h)) < draw(st.sampled_from([0.0, 0.3]), label=f"empty {side}")
        o = grid(rng, (n, h, dv))
        o[empty] = 0
        lse[empty] = -np.inf
        inputs[f"o_{side}"], inputs[f"lse_{side}"] = o, lse
    return Case(inputs, params)


def _ops() -> list[Op]:
    return [
        Op(name="attention.attend", kind=Kind.BOUNDED, oracle=_attend.attend,
           summary="scaled dot-product attention (GQA, masks, sinks, softcap) -> (out, lse)",
           spec=f"{_SPEC}#attend", variants=VARIANTS, vectors=_attend_vectors,
           examples=lambda supported: _attend_case(supported), compare=_compare(("out", "lse")),
           array_format=_format, outputs=("out", "lse"), emulate=emulate.attend,
           case_flags=attend_case_flags),
        Op(name="attention.attend_varlen", kind=Kind.BOUNDED, oracle=_varlen_oracle,
           summary="attention over a packed batch of variable-length sequences -> (out, lse)",
           spec=f"{_SPEC}#attend_varlen", variants=VARIANTS, vectors=_varlen_vectors,
           examples=lambda supported: _attend_case(supported, varlen=True), compare=_compare(("out", "lse")),
           array_format=_format, outputs=("out", "lse"), emulate=emulate.attend_varlen,
           case_flags=attend_case_flags),
        Op(name="attention.merge_states", kind=Kind.BOUNDED, oracle=split_kv.merge_states,
           summary="merge two split-KV partials (o, lse) -> (o, lse)",
           spec=f"{_SPEC}#merge_states", variants=(), vectors=_merge_vectors,
           examples=_merge_case, compare=_compare(("o", "lse")), array_format=_format,
           outputs=("o", "lse"), emulate=emulate.merge_states),
        Op(name="attention.rope", kind=Kind.BOUNDED, oracle=rope.apply_rope,
           summary="rotary position embedding (neox/gptj, partial, llama3/yarn scaling) -> x rotated",
           spec=f"{_SPEC}#rope", variants=ROPE_VARIANTS, vectors=_rope_vectors, examples=_rope_case,
           compare=_rope_compare, array_format=_format, emulate=_rope_emulated),
        Op(name="attention.mla", kind=Kind.BOUNDED, oracle=_mla_oracle,
           summary="multi-head latent attention (DeepSeek-V2/V3), RoPE on the rope part -> (out, lse)",
           spec=f"{_SPEC}#mla", variants=MLA_VARIANTS, vectors=_mla_vectors, examples=_mla_case,
           compare=_compare(("out", "lse")), array_format=_format, outputs=("out", "lse"), emulate=_mla_emulated),
    ]


OPERATIONS = _ops()

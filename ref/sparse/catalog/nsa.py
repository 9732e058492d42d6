"""The sparse area's nsa operations (spec/sparse.md#nsa): NSA's selected attention and the
whole gated forward, both bounded.

  sparse.nsa.selected_attend: q [B, Tq, Hq, D], k, v [B, Tk, Hkv, D], block_indices
      [B, Tq, Hkv, S] [, block_counts [B, Tq, Hkv]] -> (out [B, Tq, Hq, Dv], lse [B, Hq, Tq])
  sparse.nsa.attend: q, k, v, g_cmp, g_slc, g_swa [B, T, Hq] [, pe_k, pe_v [l, D]]
      -> out [B, T, Hq, Dv]

Block sizes, counts, the window and the scale travel in a vector's params; the one axis is
whose NSA (`variant`: paper | fla). Inputs are on the bfloat16 / float16 grid
(`ref.testing.attention_cases.grid`); the forward's vectors keep every selection margin
clear (the selection is exact, the bound is for the arithmetic).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.attention.catalog.common import OUT_LSE
from ref.sparse import nsa, nsa_select
from ref.sparse.catalog.common import AREA
from ref.testing.attention_cases import grid
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "Vectors", "selected_inputs"]

FLAGS = {
    "NsaSlcCausal": Flag("the selected blocks not causally masked: tokens after the query inside its own (or a "
                         "later) selected block read, or the causal corner aligned top-left when Tq < Tk",
                         "a query attends future tokens of the blocks it selected"),
    "NsaSlcGroups": Flag("a KV head's block list applied to the wrong query heads (interleaved h % Hkv instead of "
                         "contiguous h // G groups)", "query heads attend another group's blocks"),
    "NsaSlcUnused": Flag("an unused slot (-1, another negative index, or an index past the last block) read as a "
                         "block: -1 as the last block (Python indexing) or clamped to block 0",
                         "tokens the query never selected enter its softmax"),
    "NsaSlcCounts": Flag("block_counts ignored: the slots past a query's count read",
                         "blocks beyond the count enter the softmax"),
    "NsaSlcPartial": Flag("the last, partial block read past the sequence end, or dropped",
                          "an index error, garbage keys, or the newest tokens missing"),
    "NsaSlcEmptyRow": Flag("a query whose used slots hold no token up to it given NaN (the softmax of nothing) "
                           "instead of out 0, lse -inf", "NaN rows where the output is defined"),
    "NsaSlcLargeLogits": Flag("the softmax over the gathered tokens taken without the row maximum",
                              "logits past exp's range overflow: NaN out"),
    "NsaGates": Flag("a branch weighted by another branch's gate, or the branches summed without their gates",
                     "the output mixes the branches in the wrong proportions"),
    "NsaWindow": Flag("the sliding window one token too wide or too narrow (w + 1 tokens, k_{t-w:t} read with "
                      "both ends, or w - 1), or aligned top-left when Tq < Tk", "the oldest window token read or missed"),
    "NsaGroups": Flag("query heads mapped to KV heads interleaved (h % Hkv) in one branch, or the selection of one "
                      "KV head given to another's query heads", "heads attend another group's keys or blocks"),
    "NsaOverlap": Flag("tokens in both the window and a selected (local) block read by one branch only: the "
                       "branches deduplicated", "the overlap, always present at the newest tokens, weighted wrong"),
    "NsaPositionTerms": Flag("the position term pe_k added to the values as well (or pe_v dropped)",
                             "compressed values shifted: o_cmp wrong"),
    "NsaSelection": Flag("the forward's selection wrong: forced local blocks dropped, the importance of one query "
                         "head instead of the group's sum, top-n miscounted", "other blocks read by the selected branch"),
    "NsaVariant": Flag("fla's simplified NSA computed with the paper's overlapping blocks, or the paper's with "
                       "fla's one block size", "other compressed blocks: a different selection and o_cmp"),
}


VARIANT = Variant("variant", nsa.Variant, "paper", "whose NSA: the paper's (l, d, l', n, w) = (32, 16, 64, 16, "
                  "512) with position terms, or fla's naive_nsa (one block size 64, mean pooling, no window)")


class Vectors(list):
    def add(self, comment, flags, inputs, result="valid", **params):
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def selected_inputs(rng, b, tq, hq, hkv, s, bs, *, tk=None, d=8, dv=None, own=True, future=True, std=1.0,
                    dtype=np.float32, index_dtype=np.int32):
    """q, k, v on the grid and S distinct block indices per (query, KV head) drawn from the
    blocks up to the query's (and, with `future`, later ones), -1 padded at random slots;
    `own` puts each query's own block in its list (then every query reads a token: itself)."""
    tk = tq if tk is None else tk
    dv = d if dv is None else dv
    nb = -(-tk // bs)
    pos = np.arange(tq) + tk - tq
    idx = np.full((b, tq, hkv, s), -1, np.int64)
    for i in np.ndindex(b, tq, hkv):
        top = nb if future else pos[i[1]] // bs + 1
        pick = rng.permutation(top)[:rng.integers(0, min(s, top) + 1)] if top else np.zeros(0, np.int64)
        if own and s and pos[i[1]] // bs not in pick:
            pick = np.append(pick[:s - 1], pos[i[1]] // bs)
        slots = np.sort(rng.permutation(s)[:pick.size])
        idx[i][slots] = pick
    return {"q": grid(rng, (b, tq, hq, d), std).astype(dtype), "k": grid(rng, (b, tk, hkv, d), std).astype(dtype),
            "v": grid(rng, (b, tk, hkv, dv)).astype(dtype), "block_indices": idx.astype(index_dtype)}


def _selected_vectors():
    rng = np.random.default_rng(seed_for("sparse.nsa.selected_attend"))
    v = Vectors()
    v.add("fla's default block_size 64: T = 72 (a full and a partial block), GQA 2/1, S = 2",
          ["NsaSlcCausal", "NsaSlcPartial"], selected_inputs(rng, 1, 72, 2, 1, 2, 64, d=4, own=True), block_size=64)
    v.add("block 4, T = 12: each query's own block selected, its tokens after the query masked", ["NsaSlcCausal"],
          selected_inputs(rng, 1, 12, 2, 1, 2, 4, own=True, future=False), block_size=4)
    v.add("later blocks selected (never by NSA's top-n, still masked); queries with only later blocks read none",
          ["NsaSlcCausal", "NsaSlcEmptyRow"], selected_inputs(rng, 1, 12, 1, 1, 3, 4, own=False), block_size=4)
    v.add("decode: Tq = 1 of Tk = 19, bottom-right (the query is token 18)", ["NsaSlcCausal"],
          selected_inputs(rng, 2, 1, 2, 1, 3, 4, tk=19, own=True), block_size=4)
    v.add("chunk: Tq = 5 of Tk = 16", ["NsaSlcCausal"], selected_inputs(rng, 1, 5, 2, 2, 2, 4, tk=16, own=True),
          block_size=4)
    v.add("GQA 4/2: KV head 1's list for query heads 2-3", ["NsaSlcGroups"],
          selected_inputs(rng, 1, 10, 4, 2, 2, 2, own=True), block_size=2)
    v.add("GQA 6/3 with different lists per KV head", ["NsaSlcGroups"],
          selected_inputs(rng, 1, 8, 6, 3, 2, 4), block_size=4)
    x = selected_inputs(rng, 1, 12, 2, 1, 3, 4, own=True, future=False)
    x["block_indices"][0, :, 0, 0] = -1
    v.add("-1 in the first slot of every list", ["NsaSlcUnused"], x, block_size=4)
    x = selected_inputs(rng, 1, 14, 2, 1, 4, 4, own=True, future=False)
    t = np.arange(14)
    x["block_indices"][0, :, 0] = np.stack([np.where(t < 12, t // 4, 1), np.full(14, -2), np.where(t < 12, 7, 4),
                                           np.full(14, -1)], axis=-1)  # 4 blocks: 0..3 (3 partial)
    v.add("-2, 4 and 7 with 4 blocks (T = 14; queries 12-13 do not select block 3): unused, as fla skips them",
          ["NsaSlcUnused"], x, block_size=4)
    x = selected_inputs(rng, 1, 12, 2, 1, 3, 4, own=True, future=False)
    x["block_indices"][0, :, 0, :] = [2, 0, 1]
    x["block_counts"] = (np.arange(12) % 4).reshape(1, 12, 1).clip(0, 3).astype(np.int32)
    v.add("block_counts 0-3: the slots past a query's count hold valid blocks, never read (count 0: no token)",
          ["NsaSlcCounts", "NsaSlcCausal", "NsaSlcEmptyRow"], x, block_size=4)
    x = selected_inputs(rng, 1, 8, 2, 1, 2, 4)
    x["block_indices"][0, :, 0, :] = [1, 1]
    x["block_counts"] = np.zeros((1, 8, 1), np.int64)
    v.add("block_counts 0 with a duplicate past the count: no token (out 0, lse -inf)",
          ["NsaSlcCounts", "NsaSlcEmptyRow"], x,
          block_size=4)
    x = selected_inputs(rng, 1, 8, 2, 1, 2, 4)
    x["block_indices"][0, ::2] = -1
    v.add("every slot -1 on even queries: out 0, lse -inf", ["NsaSlcUnused", "NsaSlcEmptyRow"], x, block_size=4)
    x = selected_inputs(rng, 1, 10, 2, 1, 2, 4, own=True, future=False)
    x["block_indices"][0, :, 0, :] = np.where(np.arange(10)[:, None] >= 4, [[0, 1]], [[0, -1]])
    x["v"][0, 9, 0, 1] = x["k"][0, 9, 0, 2] = np.nan  # token 9 is in block 2, never selected
    x["v"][0, 6, 0, 0] = np.nan  # token 6 (block 1) is seen by queries 6..9 only
    v.add("NaN in k and v at an unselected token (not read) and in v at a selected one (queries 6-9 NaN)",
          ["NaN", "NsaSlcCausal"], x, block_size=4)
    v.add("partial last block: T = 14 in blocks of 4, block 3 holds tokens 12-13", ["NsaSlcPartial"],
          selected_inputs(rng, 1, 14, 2, 1, 2, 4, own=True), block_size=4)
    v.add("logits near +-1000: exp overflows without the row maximum", ["NsaSlcLargeLogits"],
          selected_inputs(rng, 1, 8, 2, 1, 2, 4, std=24.0, own=True), block_size=4)
    v.add("float16 inputs", ["Random"], selected_inputs(rng, 1, 9, 2, 1, 2, 4, dtype=np.float16), block_size=4)
    v.add("float64 inputs, int64 indices", ["Random"],
          selected_inputs(rng, 1, 9, 2, 1, 2, 4, dtype=np.float64, index_dtype=np.int64), block_size=4)
    v.add("explicit scale 0.25, Dv = 4 != D = 8", ["Random"], selected_inputs(rng, 1, 9, 2, 1, 2, 4, dv=4),
          block_size=4, scale=0.25)
    v.add("random: batch 2, GQA 4/2, S = 3, block 2", ["Random"], selected_inputs(rng, 2, 11, 4, 2, 3, 2),
          block_size=2)
    v.add("T = 0", ["EmptyInput"], selected_inputs(rng, 1, 0, 2, 1, 2, 4), block_size=4)
    v.add("S = 0: no slot (out 0, lse -inf)", ["EmptyInput", "NsaSlcEmptyRow"], selected_inputs(rng, 1, 5, 2, 1, 0, 4), block_size=4)
    good = selected_inputs(rng, 1, 8, 2, 1, 2, 4)
    dup = {**good, "block_indices": np.broadcast_to(np.array([1, 1], np.int32), (1, 8, 1, 2)).copy()}
    v.add("a block named twice among the read slots", ["InvalidInput"], dup, result="invalid", block_size=4)
    v.add("float block indices", ["InvalidInput"], {**good, "block_indices": good["block_indices"].astype(np.float32)},
          result="invalid", block_size=4)
    v.add("block_indices [B, Tq, Hq = 2, S] for 1 KV head", ["InvalidInput"],
          {**good, "block_indices": np.concatenate([good["block_indices"]] * 2, axis=2)}, result="invalid",
          block_size=4)
    v.add("block_counts above S", ["InvalidInput"], {**good, "block_counts": np.full((1, 8, 1), 3, np.int32)},
          result="invalid", block_size=4)
    v.add("3 query heads over 2 KV heads", ["InvalidInput"], selected_inputs(rng, 1, 4, 3, 2, 1, 4),
          result="invalid", block_size=4)
    v.add("block_size 0", ["InvalidInput"], good, result="invalid", block_size=0)
    return v


@st.composite
def _selected_examples(draw, supported):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    hkv = draw(st.integers(1, 2), label="hkv")
    bs = draw(st.sampled_from([1, 2, 4, 8]), label="block_size")
    tk = draw(st.integers(0, 20), label="tk")
    tq = tk if draw(st.booleans(), label="prefill?") else draw(st.integers(0, tk), label="tq")
    x = selected_inputs(rng, draw(st.integers(1, 2), label="b"), tq, hkv * draw(st.integers(1, 3), label="g"), hkv,
                        draw(st.integers(0, 4), label="s"), bs, tk=tk, d=draw(st.sampled_from([1, 4, 8]), label="d"),
                        own=draw(st.booleans(), label="own"), future=draw(st.booleans(), label="future"),
                        dtype=draw(st.sampled_from([np.float32, np.float64]), label="dtype"))
    if draw(st.booleans(), label="counts?"):
        x["block_counts"] = rng.integers(0, x["block_indices"].shape[-1] + 1, x["block_indices"].shape[:3])
    return Case(x, {"block_size": bs})


def forward_inputs(rng, b, tq, hq, hkv, *, tk=None, d=8, dv=None, pe=0, dtype=np.float32):
    """q, k, v on the grid, gates k / 256 in [0, 1] (exact at bfloat16), and pe_k, pe_v
    [pe, D] (pe = 0: none)."""
    x = selected_inputs(rng, b, tq, hq, hkv, 0, 1, tk=tk, d=d, dv=dv, dtype=dtype)
    del x["block_indices"]
    for name in ("g_cmp", "g_slc", "g_swa"):
        x[name] = (rng.integers(0, 257, (b, tq, hq)) / 256).astype(dtype)
    if pe:
        x["pe_k"], x["pe_v"] = grid(rng, (pe, d), 0.5).astype(dtype), grid(rng, (pe, x["v"].shape[3]), 0.5).astype(dtype)
    return x


def selection_margin(x, **params) -> float:
    """The smallest gap, over all rows, between the n-th and (n+1)-th selectable block's
    rank score (forced blocks +inf): vectors keep it >= 2^-8, so that a kernel at float32 (or
    a bfloat16 kernel that ranks in float32) selects the oracle's set."""
    br = nsa.branches(x["q"], x["k"], x["v"], x.get("pe_k"), x.get("pe_v"), **params)
    imp, tk = br["importance"], x["k"].shape[1]
    c = nsa_select.num_selection_blocks(tk, block_sel=br["block_sel"])
    tq = imp.shape[1]
    sel = nsa_select.selectable_blocks(tq, c, seq_len=tk, block_sel=br["block_sel"])[None, :, None]
    forced = nsa_select.forced_blocks(tq, c, seq_len=tk, block_sel=br["block_sel"])[None, :, None] & sel
    score = -np.sort(-np.where(sel, np.where(forced, np.inf, imp), -np.inf), axis=-1)
    n = br["n"]
    if c <= n:
        return np.inf
    with np.errstate(invalid="ignore"):
        gap = np.where(np.isfinite(score[..., n]), score[..., n - 1] - score[..., n], np.inf)
    return float(np.nanmin(gap, initial=np.inf))


def clear_inputs(rng, *shape, margin=2.0**-8, tries=400, **kw):
    """forward_inputs redrawn until every selection margin is clear (`selection_margin`);
    after `tries` draws (examples: a few), params["n"] is raised to every block instead
    (nothing left to rank), and a RuntimeError without params to change."""
    params = kw.pop("params", {})
    for _ in range(tries):
        x = forward_inputs(rng, *shape, **kw)
        if selection_margin(x, **params) >= margin:
            return x
    if "block_sel" in params:
        params["n"] = max(3, -(-x["k"].shape[1] // params["block_sel"]))
        return x
    raise RuntimeError("clear_inputs: no draw with a clear selection margin")


def _attend_vectors():
    rng = np.random.default_rng(seed_for("sparse.nsa.attend"))
    v = Vectors()
    small = {"block": 4, "stride": 2, "block_sel": 8, "n": 5, "window": 6}

    def add(comment, flags, shape, result="valid", kw=None, **params):
        x = clear_inputs(rng, *shape, params=params, **(kw or {}))
        v.add(comment, flags, x, result, **params)

    add("the paper's defaults (l = 32, d = 16, l' = 64, n = 16, w = 512): T = 160, pe_k, pe_v [32, 4]",
        ["NsaGates", "NsaPositionTerms"], (1, 160, 2, 1), kw={"d": 4, "pe": 32})
    add("paper, small: l = 4, d = 2, l' = 8, n = 5, w = 6; T = 48, GQA 4/2, position terms",
        ["NsaGates", "NsaWindow", "NsaGroups", "NsaSlcCausal", "NsaOverlap", "NsaPositionTerms", "NsaSelection",
         "NsaVariant"],
        (1, 48, 4, 2), kw={"pe": 4}, **small)
    add("paper, n = 4 (one free choice past the forced three), T = 64, MQA 4/1", ["NsaGroups", "NsaSlcCausal", "NsaSelection"],
        (1, 64, 4, 1), **{**small, "n": 4})
    add("decode: Tq = 1 of Tk = 50 (the query is token 49)", ["NsaWindow", "NsaSlcCausal"], (2, 1, 2, 1),
        kw={"tk": 50, "pe": 4}, **small)
    add("chunk: Tq = 6 of Tk = 40", ["NsaWindow", "NsaSlcCausal"], (1, 6, 2, 1), kw={"tk": 40}, **small)
    add("window 0: no sliding branch (g_swa unused)", ["NsaWindow"], (1, 24, 2, 1), **{**small, "window": 0})
    add("window 1: the query's own token only", ["NsaWindow"], (1, 20, 2, 1), **{**small, "window": 1})
    add("fla: one block size 4 (non-overlapping means), n = 4, no window", ["NsaVariant", "NsaSlcCausal", "NsaSelection"],
        (1, 28, 2, 1), variant="fla", block=4, stride=4, block_sel=4, n=4, window=0)
    add("fla with a window of 6 (flash_attn's window (5, 0))", ["NsaVariant", "NsaWindow", "NsaOverlap", "NsaSelection"],
        (1, 36, 4, 2), variant="fla", block=4, stride=4, block_sel=4, n=4, window=6)
    add("fla's defaults (block 64, n = 16, no window): T = 130", ["NsaVariant"], (1, 130, 2, 1),
        kw={"d": 4}, variant="fla")
    add("T = 3 < l = 4: no compressed block yet (o_cmp = 0), every block forced", ["NsaSlcCausal"],
        (1, 3, 2, 1), **small)
    add("explicit scale 0.5, Dv = 4", ["Random"], (1, 24, 2, 1), kw={"dv": 4}, scale=0.5, **small)
    add("float16 inputs", ["Random"], (1, 24, 2, 1), kw={"dtype": np.float16}, **small)
    add("float64 inputs, batch 2", ["Random"], (2, 24, 2, 1), kw={"dtype": np.float64, "pe": 4}, **small)
    add("T = 0", ["EmptyInput"], (1, 0, 2, 1), **small)
    good = forward_inputs(rng, 1, 8, 2, 1)
    v.add("g_slc of [B, T, Hkv] for 2 query heads", ["InvalidInput"], {**good, "g_slc": good["g_slc"][..., :1]},
          result="invalid", **small)
    v.add("fla with position terms", ["InvalidInput"], forward_inputs(rng, 1, 8, 2, 1, pe=4), result="invalid",
          variant="fla", block=4, stride=4, block_sel=4, n=4, window=0)
    v.add("stride 3 does not divide block 4", ["InvalidInput"], good, result="invalid", **{**small, "stride": 3})
    v.add("block 16 > block_sel 8", ["InvalidInput"], good, result="invalid", **{**small, "block": 16})
    v.add("3 query heads over 2 KV heads", ["InvalidInput"], forward_inputs(rng, 1, 8, 3, 2), result="invalid",
          **small)
    v.add("n = 2, fewer than the 3 forced blocks", ["InvalidInput"], good, result="invalid", **{**small, "n": 2})
    return v


@st.composite
def _attend_examples(draw, supported):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    variant = draw(st.sampled_from(list(supported.get("variant", ["paper"]))), label="variant")
    if variant == "fla":
        bs = draw(st.sampled_from([2, 4]), label="block")
        params = {"block": bs, "stride": bs, "block_sel": bs}
    else:
        stride = draw(st.sampled_from([1, 2]), label="stride")
        params = {"block": 2 * stride, "stride": stride, "block_sel": draw(st.sampled_from([4, 8]), label="block_sel")}
    params.update(variant=variant, n=draw(st.integers(3, 6), label="n"), window=draw(st.integers(0, 8), label="w"))
    hkv = draw(st.integers(1, 2), label="hkv")
    tk = draw(st.integers(0, 30), label="tk")
    shape = (draw(st.integers(1, 2), label="b"), draw(st.integers(0, tk), label="tq"),
             hkv * draw(st.integers(1, 2), label="g"), hkv)
    if draw(st.booleans(), label="prefill?"):
        shape = (shape[0], tk, *shape[2:])
    pe = params["block"] if variant == "paper" and draw(st.booleans(), label="pe?") else 0
    return Case(clear_inputs(rng, *shape, tk=tk, pe=pe, params=params, tries=4), params)


def _selected_flags(case) -> tuple[str, ...]:
    """EmptyInput for T = 0; NsaSlcEmptyRow when a query reads no token."""
    if np.size(case.inputs["q"]) == 0:
        return ("EmptyInput",)
    try:
        _, lse = nsa.selected_attend(**case.inputs, **case.params)
    except (ValueError, TypeError):
        return ()
    return ("NsaSlcEmptyRow",) if np.any(lse == -np.inf) else ()


def _attend_flags(case) -> tuple[str, ...]:
    return ("EmptyInput",) if np.size(case.inputs["q"]) == 0 else ()


OPERATIONS = [
    AREA.bounded("nsa.selected_attend", nsa.selected_attend, anchor="nsa-selected-attend",
                 summary="NSA's selected branch: each query attends its selected blocks' tokens up to itself",
                 vectors=_selected_vectors, examples=_selected_examples, outputs=("out", "lse"),
                 emulate=nsa.emulate_selected_attend, bounds=OUT_LSE, case_flags=_selected_flags),
    AREA.bounded("nsa.attend", nsa.attend, anchor="nsa-attend",
                 summary="NSA's forward: g_cmp o_cmp + g_slc o_slc + g_swa o_swa over compressed, selected and "
                         "window branches", variants=(VARIANT,), vectors=_attend_vectors, examples=_attend_examples,
                 emulate=nsa.emulate_attend, bounds=OUT_LSE["out"], case_flags=_attend_flags),
]

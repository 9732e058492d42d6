"""The sparse area's moba operations (spec/sparse.md#moba):

  sparse.moba.gate           (q, k, chunk_size) -> scores [B, Lq, Hq, N]       bounded
  sparse.moba.select         (scores, top_k) -> int32 [B, Lq, Hq, K]            exact
  sparse.moba.attend         (q, k, v, chunk_size, top_k) -> (out, lse)        bounded
  sparse.moba.attend_varlen  (q, k, v, cu_seqlens, chunk_size, top_k)          bounded

Inputs are multiples of 1/8 in [-1, 1] (exact at bfloat16 and float16), drawn as
integers; every query row whose selection a kernel computes from floats is redrawn
until its K-th and (K+1)-th past-chunk scores are MARGIN apart, so that a kernel at
any precision selects the oracle's set.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.attention.catalog.common import OUT_LSE, Vectors
from ref.sparse import moba
from ref.sparse.catalog.common import AREA
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.compare import compare_exact
from ref.testing.vector_files import Case

__all__ = ["FLAGS", "MARGIN", "OPERATIONS", "moba_inputs"]

FLAGS = {
    "MobaCausal": Flag("the current chunk attended without its token-level causal mask",
                       "a query reads the keys after it in its own chunk"),
    "MobaFuture": Flag("future chunks left selectable (not -inf in the gate, or taken to fill top-k)",
                       "a future chunk takes a top-k slot from a past chunk, or is reported selected"),
    "MobaGateScale": Flag("the gate q . mean(K_chunk) scaled by 1/sqrt(D)",
                          "gate scores off by sqrt(D) (the selection itself unchanged)"),
    "MobaMean": Flag("the chunk's key sum (or a mean over the wrong count) used for the gate",
                     "gate scores off by the chunk length; the selection changes where chunks differ in size"),
    "MobaTopK": Flag("top_k not counting the current chunk (top_k past chunks plus it), or capped wrong",
                     "one chunk too many or too few attended"),
    "MobaTie": Flag("equal gate scores broken toward the higher chunk index",
                    "another chunk selected at a tie"),
    "MobaHeads": Flag("GQA query heads mapped to KV heads interleaved (h % Hkv) instead of in groups",
                      "a query head gates and attends another head's keys"),
    "MobaAlign": Flag("query positions aligned top-left (p = i) when Lq < Lk instead of bottom-right",
                      "decode and chunked prefill gate and mask at the wrong position"),
    "MobaUnread": Flag("unselected keys masked by multiplying with zero instead of not being read",
                       "a NaN or Inf value in an unselected chunk reaches the output"),
    "MobaVarlen": Flag("chunk boundaries of a packed batch taken from the packed start, not each sequence's",
                       "sequences after the first gate and select misaligned chunks"),
    "MobaLargeLogits": Flag("the softmax over the selected keys taken without subtracting the row maximum",
                            "logits past 88 (float32) overflow exp: NaN or Inf out"),
    "MobaEmptyRow": Flag("a query row that sees no key (Lq > Lk) given NaN or a finite LSE",
                         "out must be 0 and lse -inf"),
}

MARGIN = 0.125  # between the K-th and (K+1)-th past-chunk score: far above bfloat16's error at D <= 16
GATE_BOUND = Bound(k=2.0, floor=2.0, scale="absolute")


def _grid(rng, shape) -> np.ndarray:
    return (rng.integers(-8, 9, shape) / 8).astype(np.float32)


def _unclear(q, k, chunk_size, top_k) -> np.ndarray:
    """[B, Lq, Hq]: rows whose cut between selected and unselected past chunks is
    closer than MARGIN."""
    s = moba.gate(q, k, chunk_size=chunk_size)  # [B, Lq, Hq, N]
    past = np.sort(np.where(np.isfinite(s), s, -np.inf), axis=-1)[..., ::-1]  # descending, -inf last
    keep = top_k - 1  # past chunks selected
    if keep < 1 or keep >= s.shape[-1]:
        return np.zeros(s.shape[:3], bool)
    a, b = past[..., keep - 1], past[..., keep]
    with np.errstate(invalid="ignore"):
        return np.isfinite(b) & (a - b < MARGIN)


def moba_inputs(rng, b, lq, lk, hq, hkv, d, *, chunk_size, top_k, dv=None, dtype=np.float32) -> dict:
    """q [b, lq, hq, d], k [b, lk, hkv, d], v [b, lk, hkv, dv] on the 1/8 grid, rows redrawn
    until every selection margin is clear, plus chunk_size and top_k."""
    dv = d if dv is None else dv
    q, k, v = _grid(rng, (b, lq, hq, d)), _grid(rng, (b, lk, hkv, d)), _grid(rng, (b, lk, hkv, dv))
    for _ in range(200):
        bad = _unclear(q, k, chunk_size, top_k)
        if not bad.any():
            break
        q[bad] = _grid(rng, (int(bad.sum()), d))
    else:
        raise RuntimeError("moba_inputs: no clear selection margin found; change the shape")
    return {"q": q.astype(dtype), "k": k.astype(dtype), "v": v.astype(dtype), "chunk_size": np.int64(chunk_size),
            "top_k": np.int64(top_k)}


def _packed(rng, lens, hq, hkv, d, *, chunk_size, top_k) -> dict:
    parts = [moba_inputs(rng, 1, n, n, hq, hkv, d, chunk_size=chunk_size, top_k=top_k) for n in lens]
    cat = {x: np.concatenate([p[x][0] for p in parts]) if parts else np.zeros((0, h, d), np.float32)
           for x, h in (("q", hq), ("k", hkv), ("v", hkv))}
    return {**cat, "cu_seqlens": np.cumsum([0, *lens]).astype(np.int32), "chunk_size": np.int64(chunk_size),
            "top_k": np.int64(top_k)}


def _qk(x: dict) -> dict:
    return {"q": x["q"], "k": x["k"], "chunk_size": x["chunk_size"]}


def _gate_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("sparse.moba.gate"))
    v = Vectors()
    inputs = lambda *a, cs, tk=2, **o: _qk(moba_inputs(rng, *a, chunk_size=cs, top_k=tk, **o))  # noqa: E731
    v.add("prefill L = 8, chunk 2, D = 8: q . mean, no 1/sqrt(D), future -inf, current +inf",
          ["MobaGateScale", "MobaMean", "MobaFuture"], inputs(1, 8, 8, 2, 2, 8, cs=2))
    v.add("GQA: 4 query heads over 2 KV heads", ["MobaHeads"], inputs(1, 6, 6, 4, 2, 8, cs=2))
    v.add("L = 7, chunk 3: partial last chunk (always current or future)", ["MobaFuture", "MobaMean"],
          inputs(1, 7, 7, 1, 1, 8, cs=3))
    v.add("decode: Lq = 1 at position 8 of Lk = 9, chunk 4 (bottom-right)", ["MobaAlign"],
          inputs(2, 1, 9, 2, 1, 8, cs=4))
    v.add("chunked prefill: Lq = 3 at positions 7-9 of Lk = 10, chunk 3", ["MobaAlign"], inputs(1, 3, 10, 2, 2, 4, cs=3))
    v.add("Lq = 4 over Lk = 2: rows at negative positions see only future chunks (-inf)", ["MobaAlign", "MobaEmptyRow"],
          inputs(1, 4, 2, 1, 1, 4, cs=1))
    v.add("chunk size 1: every key its own chunk", ["MobaMean"], inputs(1, 5, 5, 1, 1, 4, cs=1))
    v.add("chunk size 16 over 6 keys: one chunk, always current", ["MobaFuture"], inputs(1, 6, 6, 1, 1, 4, cs=16))
    v.add("float64 inputs, chunk 4 over 12 keys", ["MobaMean"], inputs(1, 12, 12, 2, 1, 8, cs=4, dtype=np.float64))
    v.add("float16 inputs, chunk 4 over 12 keys", ["MobaMean"], inputs(1, 12, 12, 2, 1, 8, cs=4, dtype=np.float16))
    v.add("no keys (Lk = 0): N = 0 chunks", ["EmptyInput"], inputs(1, 0, 0, 2, 1, 4, cs=2))
    v.add("no queries (Lq = 0) over 5 keys", ["EmptyInput"], inputs(1, 0, 5, 2, 1, 4, cs=2))
    nan = inputs(1, 8, 8, 1, 1, 4, cs=2)
    nan["k"] = nan["k"].copy()
    nan["k"][0, 1, 0, 2] = np.nan
    v.add("NaN in key 1: chunk 0's score NaN for the rows that see it as past", ["NaN"], nan)
    good = inputs(1, 4, 4, 2, 1, 4, cs=2)
    v.add("chunk_size 0", ["InvalidInput"], {**good, "chunk_size": np.int64(0)}, result="invalid")
    v.add("k of head dim 8 for q of 4", ["InvalidInput"], {**good, "k": np.zeros((1, 4, 1, 8), np.float32)},
          result="invalid")
    v.add("3 query heads over 2 KV heads", ["InvalidInput"],
          {**good, "q": np.zeros((1, 4, 3, 4), np.float32), "k": np.zeros((1, 4, 2, 4), np.float32)},
          result="invalid")
    v.add("integer q", ["InvalidInput"], {**good, "q": np.zeros((1, 4, 2, 4), np.int32)}, result="invalid")
    return v


def _select_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("sparse.moba.select"))
    v = Vectors()

    def scores(*a, cs, tk):
        x = moba_inputs(rng, *a, chunk_size=cs, top_k=tk)
        return {"scores": moba.gate(x["q"], x["k"], chunk_size=cs).astype(np.float32), "top_k": np.int64(tk)}

    v.add("prefill L = 16, chunk 2, top_k 3 (K counts the current chunk)", ["MobaTopK", "MobaFuture"],
          scores(1, 16, 16, 2, 1, 8, cs=2, tk=3))
    v.add("top_k 1: the current chunk alone", ["MobaTopK"], scores(1, 8, 8, 2, 1, 8, cs=2, tk=1))
    v.add("top_k 9 >= N = 4: every visible chunk, K = N, -1 pads the rows that see fewer", ["MobaTopK", "MobaFuture"],
          scores(1, 8, 8, 1, 1, 8, cs=2, tk=9))
    inf = np.inf
    ties = np.array([[[[1.0, 2.0, 2.0, 2.0, 0.5, inf, -inf]], [[0.25, 0.25, 0.25, 0.25, 0.25, 0.25, inf]],
                      [[3.0, -1.0, 3.0, -1.0, 3.0, -1.0, inf]]]], np.float32)  # [1, 3, 1, 7]
    v.add("ties at the cut: equal scores go to the lower chunk index", ["MobaTie"],
          {"scores": ties, "top_k": np.int64(3)})
    v.add("ties at the cut, top_k 5", ["MobaTie", "MobaTopK"], {"scores": ties, "top_k": np.int64(5)})
    fut = np.array([[[[0.5, -inf, -inf, -inf]], [[inf, -inf, -inf, -inf]], [[-2.0, -3.0, inf, -inf]]]], np.float32)
    v.add("fewer visible chunks than top_k 3: -inf chunks are never taken, -1 pads", ["MobaFuture"],
          {"scores": fut, "top_k": np.int64(3)})
    nan = np.array([[[[1.0, np.nan, 4.0, inf, -inf]]]], np.float32)
    v.add("a NaN score ranks after +inf and before every number (torch.topk's order)", ["NaN"],
          {"scores": nan, "top_k": np.int64(3)})
    v.add("float64 scores, 3 rows of 6 chunks", ["Random"], {"scores": scores(1, 12, 12, 1, 1, 8, cs=2, tk=2)[
        "scores"].astype(np.float64), "top_k": np.int64(2)})
    v.add("no chunks (N = 0)", ["EmptyInput"], {"scores": np.zeros((1, 3, 2, 0), np.float32), "top_k": np.int64(2)})
    v.add("no rows", ["EmptyInput"], {"scores": np.zeros((1, 0, 2, 4), np.float32), "top_k": np.int64(2)})
    v.add("top_k 0", ["InvalidInput"], {"scores": ties, "top_k": np.int64(0)}, result="invalid")
    v.add("0-d scores", ["InvalidInput"], {"scores": np.float32(1.0), "top_k": np.int64(1)}, result="invalid")
    return v


def _nan_unread(rng) -> dict:
    """NaN and Inf values at keys of past chunks that no row selects (2 queries at
    positions 14 and 15 of 16 keys, chunk 4, top_k 2: one past chunk each of 3)."""
    x = moba_inputs(rng, 1, 2, 16, 1, 1, 8, chunk_size=4, top_k=2)
    mask = moba.chunk_mask(x["q"], x["k"], chunk_size=4, top_k=2)  # [1, Hq, Lq, Lk]
    unseen = np.flatnonzero(~mask[0].any(axis=(0, 1)))
    v = x["v"].copy()
    v[0, unseen[:2], 0, 0] = [np.nan, np.inf][: min(2, unseen.size)]
    return {**x, "v": v}


def _attend_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("sparse.moba.attend"))
    v = Vectors()
    inputs = lambda *a, cs, tk, **o: moba_inputs(rng, *a, chunk_size=cs, top_k=tk, **o)  # noqa: E731
    v.add("prefill L = 16, chunk 4, top_k 2, D = 8", ["MobaCausal", "MobaFuture", "MobaTopK"],
          inputs(1, 16, 16, 2, 2, 8, cs=4, tk=2))
    v.add("GQA: 4 query heads over 2 KV heads, chunk 2, top_k 2", ["MobaHeads", "MobaCausal"],
          inputs(1, 10, 10, 4, 2, 8, cs=2, tk=2))
    v.add("top_k 8 >= N = 4: full causal attention", ["MobaTopK", "MobaCausal"], inputs(1, 13, 13, 2, 1, 8, cs=4, tk=8))
    v.add("top_k 1: the current chunk alone, causal inside", ["MobaCausal", "MobaTopK"],
          inputs(1, 9, 9, 1, 1, 8, cs=3, tk=1))
    v.add("decode: Lq = 1 over Lk = 19, chunk 4, top_k 2", ["MobaAlign", "MobaFuture"],
          inputs(2, 1, 19, 2, 1, 8, cs=4, tk=2))
    v.add("chunked prefill: Lq = 5 over Lk = 13, chunk 3, top_k 3", ["MobaAlign", "MobaCausal"],
          inputs(1, 5, 13, 2, 2, 8, cs=3, tk=3))
    tie = inputs(1, 12, 12, 1, 1, 8, cs=3, tk=2)
    tie["q"] = (rng.integers(1, 9, tie["q"].shape) / 8).astype(np.float32)  # positive queries
    k = rng.integers(1, 9, tie["k"].shape) / 8
    k[0, 3:6] = k[0, 0:3]  # chunks 0 and 1 equal: equal scores in every precision
    k[0, 6:] *= -1  # chunks 2 and 3 negative: chunk 2 clearly below the tie
    tie["k"] = k.astype(np.float32)
    v.add("equal chunks 0 and 1 tie for the one past slot: chunk 0 (lower index) is read", ["MobaTie"], tie)
    v.add("a NaN and an Inf value at keys no row selects: never read", ["MobaUnread"], _nan_unread(rng))
    nq = inputs(1, 6, 6, 1, 1, 4, cs=2, tk=2)
    nq["q"] = nq["q"].copy()
    nq["q"][0, 4, 0, 1] = np.nan
    v.add("NaN in query 4: its row is NaN, the others are not", ["NaN"], nq)
    v.add("Lq = 4 over Lk = 2: the first 2 rows see no key (out 0, lse -inf)", ["MobaEmptyRow", "MobaAlign"],
          inputs(1, 4, 2, 1, 1, 4, cs=1, tk=2))
    v.add("float64 inputs", ["Random"], inputs(1, 8, 8, 2, 1, 8, cs=2, tk=2, dtype=np.float64))
    v.add("float16 inputs", ["Random"], inputs(1, 8, 8, 2, 1, 8, cs=2, tk=2, dtype=np.float16))
    v.add("value dim 4 for head dim 8", ["Random"], inputs(1, 8, 8, 1, 1, 8, cs=2, tk=3, dv=4))
    v.add("chunk 16 over 6 keys: one chunk, causal attention", ["MobaCausal"], inputs(1, 6, 6, 1, 1, 4, cs=16, tk=1))
    v.add("no queries and no keys", ["EmptyInput"], inputs(1, 0, 0, 2, 1, 4, cs=2, tk=2))
    good = inputs(1, 4, 4, 1, 1, 4, cs=2, tk=2)
    v.add("top_k 0", ["InvalidInput"], {**good, "top_k": np.int64(0)}, result="invalid")
    v.add("chunk_size 0", ["InvalidInput"], {**good, "chunk_size": np.int64(0)}, result="invalid")
    v.add("v one token short", ["InvalidInput"], {**good, "v": good["v"][:, 1:]}, result="invalid")
    last = inputs(1, 8, 8, 2, 1, 8, cs=2, tk=2)
    last["v"] = last["v"].copy()
    last["v"][0, 7, 0, 1] = np.nan
    v.add("prefill, NaN value at the last key: only the last row reads it (p . v with p = 0 would spread it)",
          ["MobaUnread", "NaN"], last)
    big = inputs(1, 6, 6, 1, 1, 8, cs=2, tk=3)  # top_k >= N: no selection margin needed
    big["q"] = (16 + big["q"]).astype(np.float32)
    big["k"] = (16 + big["k"]).astype(np.float32)
    v.add("logits / sqrt(D) near 700, a few units apart, top_k >= N: exp overflows without the row maximum",
          ["MobaLargeLogits"], big)
    return v


def _varlen_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("sparse.moba.attend_varlen"))
    v = Vectors()
    v.add("three sequences of 5, 9 and 3 tokens, chunk 2, top_k 2: chunks restart per sequence",
          ["MobaVarlen", "MobaCausal"], _packed(rng, [5, 9, 3], 2, 1, 8, chunk_size=2, top_k=2))
    v.add("sequences of 7 and 12, chunk 4, top_k 2 (the second starts mid-chunk of the packed run)",
          ["MobaVarlen", "MobaFuture"], _packed(rng, [7, 12], 2, 2, 8, chunk_size=4, top_k=2))
    v.add("GQA, an empty sequence in the middle", ["MobaVarlen", "MobaHeads", "EmptyInput"],
          _packed(rng, [6, 0, 5], 4, 2, 8, chunk_size=2, top_k=2))
    v.add("no sequences", ["EmptyInput"], _packed(rng, [], 2, 1, 4, chunk_size=2, top_k=2))
    good = _packed(rng, [3, 4], 1, 1, 4, chunk_size=2, top_k=2)
    v.add("last offset differs from the packed length", ["InvalidInput"],
          {**good, "cu_seqlens": np.array([0, 3, 6], np.int32)}, result="invalid")
    v.add("offsets that decrease", ["InvalidInput"], {**good, "cu_seqlens": np.array([0, 4, 3, 7], np.int32)},
          result="invalid")
    return v


def _shape(d):
    hkv = d(st.integers(1, 2))
    lk = d(st.integers(0, 12))
    lq = lk if d(st.booleans()) else d(st.integers(min(lk, 1), max(lk, 1)))  # prefill (Lq = Lk) half the time
    return {"hkv": hkv, "hq": hkv * d(st.integers(1, 2)), "lk": lk, "lq": lq,
            "cs": d(st.sampled_from([1, 2, 3, 4])), "tk": d(st.integers(1, 4))}


def _rng(d):
    return np.random.default_rng(d(st.integers(0, 2**32 - 1), label="seed"))


def _attend_examples(supported):
    @st.composite
    def draw(d):
        s, rng = _shape(d), _rng(d)
        return Case(moba_inputs(rng, 1, s["lq"], s["lk"], s["hq"], s["hkv"], 8, chunk_size=s["cs"], top_k=s["tk"]))
    return draw()


def _gate_examples(supported):
    return _attend_examples(supported).map(lambda c: Case(_qk(c.inputs)))


def _select_examples(supported):
    return _attend_examples(supported).map(lambda c: Case({
        "scores": moba.gate(c.inputs["q"], c.inputs["k"], chunk_size=c.inputs["chunk_size"]).astype(np.float32),
        "top_k": c.inputs["top_k"]}))


def _varlen_examples(supported):
    @st.composite
    def draw(d):
        rng = _rng(d)
        lens = d(st.lists(st.integers(0, 7), min_size=0, max_size=3))
        hkv = d(st.integers(1, 2))
        return Case(_packed(rng, lens, hkv * d(st.integers(1, 2)), hkv, 4, chunk_size=d(st.integers(1, 3)),
                            top_k=d(st.integers(1, 3))))
    return draw()


def _empty_flags(case) -> tuple[str, ...]:
    """EmptyInput for a drawn case with no queries, no keys or an empty packed sequence."""
    x = case.inputs
    if "cu_seqlens" in x:
        empty = x["q"].shape[0] == 0 or bool((np.diff(x["cu_seqlens"]) == 0).any())
    else:
        empty = 0 in x["q"].shape[:2] or x["k"].shape[1] == 0
    return ("EmptyInput",) if empty else ()


OPERATIONS = [
    AREA.bounded("moba.gate", moba.gate, anchor="moba-gate",
                 summary="MoBA's gate q . mean(K_chunk) (unscaled), -inf at future chunks, +inf at the current one",
                 vectors=_gate_vectors, examples=_gate_examples, emulate=moba.emulate_gate, bounds=GATE_BOUND),
    AREA.exact("moba.select", moba.select, anchor="moba-select",
               summary="the top_k chunks of each gate row (current first, -inf never), ascending, -1 padded",
               vectors=_select_vectors, examples=_select_examples, compare=compare_exact),
    AREA.bounded("moba.attend", moba.attend, anchor="moba-attend",
                 summary="attention over the selected chunks, causal inside the current one -> (out, lse)",
                 vectors=_attend_vectors, examples=_attend_examples, outputs=("out", "lse"),
                 emulate=moba.emulate_attend, bounds=OUT_LSE, case_flags=_empty_flags),
    AREA.bounded("moba.attend_varlen", moba.attend_varlen, anchor="moba-attend-varlen",
                 summary="MoBA over a packed batch (q, k, v [S, H, D], cu_seqlens), chunks per sequence",
                 vectors=_varlen_vectors, examples=_varlen_examples, outputs=("out", "lse"),
                 emulate=moba.emulate_attend_varlen, bounds=OUT_LSE, case_flags=_empty_flags),
]

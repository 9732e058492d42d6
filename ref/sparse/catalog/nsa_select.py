"""NSA's compression and selection (spec/sparse.md#nsa-select):

  sparse.nsa.compress           (bounded) x [B,T,H,D] [, pe] -> [B,Tc,H,D]
  sparse.nsa.compressed_attend  (bounded) q, k_cmp, v_cmp -> (out, lse, p_cmp)
  sparse.nsa.importance         (exact on dyadic p_cmp) p_cmp [B,Lq,Hq,Tc] -> [B,Lq,Hkv,n_sel]
  sparse.nsa.select             (exact, as sets) importance -> int32 [B,Lq,Hkv,n]

Sizes (block l, stride d, block_sel l', n, initial, local, seq_len, heads_kv, scale)
travel in a vector's params beside the variant axes. Inputs are multiples of 2^-4
(attention), 2^-6 (p_cmp) or small integers (importance): exact at bfloat16 and float16,
and every sum of the importance exact in float32.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.sparse import nsa_compress as cmp
from ref.sparse import nsa_select as slc
from ref.sparse.catalog.common import AREA
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import Comparison, compare_exact, compare_values
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "compare_index_sets", "grid16"]

FLAGS = {
    "NsaCmpStride": Flag("compressed blocks taken at stride l (non-overlapping) instead of d, or starting at i*d + 1",
                         "every compressed key pools the wrong tokens"),
    "NsaCmpMean": Flag("mean pooling over l - 1 tokens, or the block sum divided by d instead of l",
                       "compressed keys off by a factor or missing a token"),
    "NsaCmpPartial": Flag("the trailing partial block compressed (paper), or dropped or divided by l (fla's pooling)",
                          "one compressed key too many, or fla's last key scaled down"),
    "NsaCmpPosition": Flag("the intra-block position term ignored, or all l of its rows added to a partial block",
                           "compressed keys lose their position information"),
    "NsaCmpAccumulation": Flag("the block sum accumulated in float16", "sums of large keys overflow to Inf"),
    "NsaCmpVisible": Flag("a compressed block visible before it is complete (its start i*d <= t, or (i+1)*d - 1 "
                          "<= t)", "queries read keys of tokens that do not exist yet"),
    "NsaCmpDecode": Flag("query positions aligned top-left (t = i) when Lq < seq_len", "decode and chunked-prefill "
                         "queries see too few compressed blocks"),
    "NsaCmpHeads": Flag("GQA query head h mapped to KV head h % Hkv instead of h // (Hq/Hkv)",
                        "query heads read another group's compressed keys"),
    "NsaCmpEmpty": Flag("a query that sees no compressed block gets NaN or uniform weights",
                        "NaN output or probabilities where the defined result is out 0, lse -inf, p_cmp 0"),
    "NsaCmpLargeLogits": Flag("p_cmp as exp(s) / sum exp(s) without the row maximum",
                              "exp overflows at large logits: NaN probabilities"),
    "NsaCmpProbs": Flag("p_cmp returned as logits, unnormalized, or without the softmax scale",
                        "the selection ranks blocks by the wrong numbers"),
    "NsaSelMap": Flag("eq. 9 read with 0-based block numbers (block j credited with block j - 1's compressed "
                      "blocks), or the overlap weights dropped", "selection ranks the block before the important one"),
    "NsaSelGroup": Flag("importance not summed over the query heads of a KV group, or groups interleaved (h % Hkv)",
                        "heads of one group select different blocks, or another group's"),
    "NsaSelReduce": Flag("the group's importances averaged where the paper sums (or the reverse for fla)",
                         "importance off by the group size"),
    "NsaSelForced": Flag("the initial or local blocks not forced", "the first tokens or the query's own block "
                         "dropped from the selection"),
    "NsaSelLocal": Flag("local blocks counted from (t + 1) // l' or from the last complete block at block boundaries",
                        "the query's own block missing, or a future block read, at one token per block"),
    "NsaSelCausal": Flag("future selection blocks (j l' > t) selectable", "queries read tokens after their own"),
    "NsaSelDecode": Flag("query positions aligned top-left (t = i) when Lq < seq_len in the top-n",
                         "decode rows force and allow the blocks of the sequence's start, not their own"),
    "NsaSelTies": Flag("ties broken toward the higher block index", "a different set of blocks on equal scores"),
    "NsaSelPad": Flag("fewer selectable blocks than n padded with block 0, repeats or unselectable blocks",
                      "rows read blocks twice or from the future instead of -1"),
    "NsaSelPrecision": Flag("importance rounded to bfloat16 or float16 before the top-n",
                            "close scores merge into ties and another block wins"),
}

PARTIAL = Variant("partial", (False, True), False, "the trailing partial block pooled over its own tokens "
                  "(fla's mean_pooling, stride = block) or dropped (the paper)")
REDUCE = Variant("reduce", slc.Reduce, "sum", "the query heads of a KV group summed (paper, eq. 10) or averaged (fla)")
COMPRESS_BOUND = Bound(k=2.0, floor=2.0, scale="absolute")
ATTEND_BOUNDS = {"out": Bound(k=2.0, floor=2.0, scale="relative"), "lse": Bound(k=2.0, floor=2.0, scale="log"),
                 "p_cmp": Bound(k=2.0, floor=2.0, scale="absolute")}


def grid16(rng, shape, scale: int = 16, dtype=np.float32) -> np.ndarray:
    """Multiples of 1/scale in [-1, 1]: exact at bfloat16 and float16."""
    return (rng.integers(-scale, scale + 1, shape) / scale).astype(dtype)


def compare_index_sets(expected, actual) -> Comparison:
    """Block indices compared as sets: each row of the candidate sorted, -1 after the
    indices (any integer dtype), then equal to the oracle's."""
    a = np.asarray(actual)
    if a.dtype.kind not in "iu":
        return Comparison(False, np.size(expected), np.size(expected), np.inf, "|difference|",
                          problem=f"dtype: expected integer block indices, got {a.dtype}")
    a = a.astype(np.int64)
    if a.shape == np.shape(expected) and a.ndim:
        big = np.iinfo(np.int64).max
        a = np.sort(np.where(a == -1, big, a), axis=-1)
        a = np.where(a == big, -1, a)
    return compare_exact(np.asarray(expected).astype(np.int64), a)


class _Vectors(list):
    def add(self, comment, flags, inputs, result="valid", **params):
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def _kv(rng, b, t, h, d, dtype=np.float32):
    return grid16(rng, (b, t, h, d), dtype=dtype)


def _compress_vectors():
    rng = np.random.default_rng(seed_for("sparse.nsa.compress"))
    v = _Vectors()
    v.add("paper sizes l = 32, d = 16, T = 100: 5 complete overlapping blocks, the 4-token tail dropped",
          ["NsaCmpStride", "NsaCmpMean", "NsaCmpPartial"], {"x": _kv(rng, 1, 100, 2, 4)}, block=32, stride=16)
    v.add("intra-block position term pe [l, D] added to every token of every block", ["NsaCmpPosition"],
          {"x": _kv(rng, 1, 40, 2, 4), "pe": grid16(rng, (8, 4))}, block=8, stride=4)
    v.add("a position term per head, pe [l, H, D]", ["NsaCmpPosition"],
          {"x": _kv(rng, 2, 20, 3, 2), "pe": grid16(rng, (8, 3, 2))}, block=8, stride=4)
    v.add("T = l: exactly one block", ["NsaCmpPartial"], {"x": _kv(rng, 1, 8, 1, 4)}, block=8, stride=4)
    v.add("T = l - 1: no complete block, Tc = 0", ["NsaCmpPartial", "EmptyInput"], {"x": _kv(rng, 1, 7, 2, 4)},
          block=8, stride=4)
    v.add("T = 0", ["EmptyInput"], {"x": _kv(rng, 2, 0, 2, 4)}, block=8, stride=4)
    v.add("fla's pooling (partial, l = d = 16), T = 40: the last block the mean of its 8 tokens",
          ["NsaCmpPartial", "NsaCmpMean"], {"x": _kv(rng, 1, 40, 2, 4)}, block=16, stride=16, partial=True)
    v.add("fla's pooling with a position term: the partial block adds pe[:8]", ["NsaCmpPartial", "NsaCmpPosition"],
          {"x": _kv(rng, 1, 12, 1, 4), "pe": grid16(rng, (8, 4))}, block=8, stride=8, partial=True)
    v.add("paper pooling with l = d = 16 (non-overlapping), T = 40: the partial tail dropped", ["NsaCmpPartial"],
          {"x": _kv(rng, 1, 40, 1, 4)}, block=16, stride=16, partial=False)
    v.add("l = 4, d = 1: a block at every token", ["NsaCmpStride"], {"x": _kv(rng, 1, 9, 2, 3)}, block=4, stride=1)
    nan = _kv(rng, 1, 24, 2, 4)
    nan[0, 10, 1, 2] = np.nan
    v.add("NaN in token 10 of head 1: only the blocks holding token 10 are NaN, in that channel", ["NaN"],
          {"x": nan}, block=8, stride=4)
    v.add("float64 inputs", ["Random"], {"x": _kv(rng, 1, 30, 2, 4, np.float64)}, block=16, stride=8)
    v.add("float16 inputs", ["Random"], {"x": _kv(rng, 1, 30, 2, 4, np.float16)}, block=16, stride=8)
    big = (2048 * (1 + rng.integers(0, 9, (1, 64, 1, 4)) / 8)).astype(np.float16)
    v.add("keys near 2048 to 4096 in float16: a block sum of 32 passes 65504", ["NsaCmpAccumulation"], {"x": big},
          block=32, stride=16)
    good = _kv(rng, 1, 20, 2, 4)
    v.add("pe of length 4 for blocks of 8", ["InvalidInput"], {"x": good, "pe": grid16(rng, (4, 4))},
          result="invalid", block=8, stride=4)
    v.add("stride 8 > block 4 skips tokens", ["InvalidInput"], {"x": good}, result="invalid", block=4, stride=8)
    v.add("partial pooling with overlapping blocks (stride != block)", ["InvalidInput"], {"x": good},
          result="invalid", block=8, stride=4, partial=True)
    v.add("x of 3 dimensions", ["InvalidInput"], {"x": good[0]}, result="invalid", block=8, stride=4)
    v.add("integer x", ["InvalidInput"], {"x": (good * 16).astype(np.int32)}, result="invalid", block=8, stride=4)
    return v


def _attend_inputs(rng, b, lq, tc, hq, hkv, d, dv=None):
    return {"q": grid16(rng, (b, lq, hq, d)), "k_cmp": grid16(rng, (b, tc, hkv, d)),
            "v_cmp": grid16(rng, (b, tc, hkv, d if dv is None else dv))}


def _attend_vectors():
    rng = np.random.default_rng(seed_for("sparse.nsa.compressed_attend"))
    v = _Vectors()
    v.add("paper sizes, prefill T = 100 (Tc = 5): rows t < 31 see no block, block i from t = 16 i + 31",
          ["NsaCmpVisible", "NsaCmpEmpty"], _attend_inputs(rng, 1, 100, 5, 2, 1, 8), block=32, stride=16)
    v.add("chunk of 4 queries at positions 44..47 of 48 (l = 32, d = 16): block 1 visible at t = 47 only",
          ["NsaCmpVisible", "NsaCmpDecode"], _attend_inputs(rng, 1, 4, 2, 4, 2, 8), seq_len=48, block=32,
          stride=16)
    v.add("decode: one query at position 99 sees all 5 blocks", ["NsaCmpDecode"],
          _attend_inputs(rng, 2, 1, 5, 4, 2, 8), seq_len=100, block=32, stride=16)
    v.add("fla sizes l = d = 16, T = 40, Tc = 3 (its partial block 2 pooled): block 2 is never visible",
          ["NsaCmpVisible", "NsaCmpPartial"], _attend_inputs(rng, 1, 40, 3, 2, 2, 4), block=16, stride=16)
    v.add("GQA 4 query heads over 2 KV heads", ["NsaCmpHeads"], _attend_inputs(rng, 1, 12, 5, 4, 2, 8), block=4,
          stride=2)
    v.add("explicit scale 0.5, values of other width (Dv = 4)", ["NsaCmpProbs"],
          _attend_inputs(rng, 1, 10, 4, 2, 2, 8, 4), block=4, stride=2, scale=0.5)
    nan = _attend_inputs(rng, 1, 12, 5, 2, 1, 4)
    nan["v_cmp"][0, 4, 0, 1] = np.nan
    nan["k_cmp"][0, 3, 0, 0] = np.nan
    v.add("NaN in block 3's key and block 4's value: rows before they complete stay finite", ["NaN", "NsaCmpVisible"],
          nan, block=4, stride=2)
    v.add("no compressed block (Tc = 0): out 0, lse -inf, p_cmp empty", ["NsaCmpEmpty", "EmptyInput"],
          _attend_inputs(rng, 1, 3, 0, 2, 1, 4), block=8, stride=4)
    v.add("no queries (Lq = 0)", ["EmptyInput"], _attend_inputs(rng, 1, 0, 3, 2, 1, 4), seq_len=20, block=8,
          stride=4)
    big = _attend_inputs(rng, 1, 6, 4, 2, 1, 8)
    big["q"] = big["q"] * 64
    big["k_cmp"] = big["k_cmp"] * 64
    v.add("logits near 1000: exp overflows without the row maximum", ["NsaCmpLargeLogits"], big, block=2,
          stride=1, scale=1.0)
    v.add("float64 inputs", ["Random"], {k: a.astype(np.float64) for k, a in _attend_inputs(
        rng, 1, 9, 4, 2, 1, 4).items()}, block=4, stride=2)
    v.add("float16 inputs", ["Random"], {k: a.astype(np.float16) for k, a in _attend_inputs(
        rng, 1, 9, 4, 2, 2, 4).items()}, block=4, stride=2)
    v.add("3 query heads over 2 KV heads", ["InvalidInput"], _attend_inputs(rng, 1, 4, 2, 3, 2, 4),
          result="invalid", block=4, stride=2)
    v.add("seq_len 3 < Lq 4", ["InvalidInput"], _attend_inputs(rng, 1, 4, 2, 2, 1, 4), result="invalid", seq_len=3,
          block=4, stride=2)
    bad = _attend_inputs(rng, 1, 4, 3, 2, 1, 4)
    v.add("v_cmp one block short", ["InvalidInput"], {**bad, "v_cmp": bad["v_cmp"][:, :2]}, result="invalid",
          block=4, stride=2)
    return v


def _probs(rng, shape, dtype=np.float32):
    return (rng.integers(0, 65, shape) / 64).astype(dtype)


def _importance_vectors():
    rng = np.random.default_rng(seed_for("sparse.nsa.importance"))
    v = _Vectors()
    v.add("paper sizes l = 32, d = 16, l' = 64, seq_len 200 (Tc = 11, 4 selection blocks), G = 2",
          ["NsaSelMap", "NsaSelGroup", "NsaSelReduce"], {"p_cmp": _probs(rng, (1, 3, 4, 11))}, heads_kv=2, block=32, stride=16,
          block_sel=64, seq_len=200)
    v.add("one blocking (l' = l = d = 16, fla): p_slc = p_cmp summed over the group of 4", ["NsaSelGroup"],
          {"p_cmp": _probs(rng, (1, 5, 4, 3))}, heads_kv=1, block=16, stride=16, block_sel=16, seq_len=50)
    v.add("fla's mean over the group", ["NsaSelReduce", "NsaSelGroup"], {"p_cmp": _probs(rng, (1, 5, 4, 3))},
          heads_kv=2, block=16, stride=16, block_sel=16, seq_len=50, reduce="mean")
    v.add("l = l' = 8, d = 4: compressed block i straddles selection blocks i/2 and i/2 + 1", ["NsaSelMap"],
          {"p_cmp": _probs(rng, (2, 2, 2, 7))}, heads_kv=2, block=8, stride=4, block_sel=8, seq_len=32)
    v.add("l = 4, d = 2, l' = 16: seven compressed blocks per selection block, weights 1 2 2 2 2 2 2 1",
          ["NsaSelMap"], {"p_cmp": _probs(rng, (1, 2, 2, 19))}, heads_kv=1, block=4, stride=2, block_sel=16,
          seq_len=40)
    v.add("MHA (G = 1): no group sum", ["NsaSelGroup"], {"p_cmp": _probs(rng, (1, 2, 3, 5))}, heads_kv=3,
          block=8, stride=4, block_sel=8, seq_len=24)
    nan = _probs(rng, (1, 2, 4, 7))
    nan[0, 1, 3, 2] = np.nan
    v.add("NaN at compressed block 2 of head 3: only group 1's selection blocks 0 and 1 are NaN", ["NaN"],
          {"p_cmp": nan}, heads_kv=2, block=8, stride=4, block_sel=8, seq_len=32)
    v.add("no compressed block yet (Tc = 0): importance 0", ["EmptyInput"], {"p_cmp": _probs(rng, (1, 3, 2, 0))},
          heads_kv=1, block=32, stride=16, block_sel=64, seq_len=20)
    v.add("no queries", ["EmptyInput"], {"p_cmp": _probs(rng, (1, 0, 2, 3))}, heads_kv=1, block=8, stride=4,
          block_sel=8, seq_len=16)
    v.add("float64 p_cmp", ["Random"], {"p_cmp": _probs(rng, (1, 2, 2, 9), np.float64)}, heads_kv=1, block=8,
          stride=4, block_sel=16, seq_len=40)
    good = {"p_cmp": _probs(rng, (1, 2, 4, 5))}
    v.add("4 query heads over 3 KV heads", ["InvalidInput"], good, result="invalid", heads_kv=3, block=8, stride=4,
          block_sel=8, seq_len=24)
    v.add("stride 3 does not divide block 8", ["InvalidInput"], good, result="invalid", heads_kv=1, block=8,
          stride=3, block_sel=24, seq_len=24)
    v.add("selection block 8 shorter than compression block 16", ["InvalidInput"], good, result="invalid",
          heads_kv=1, block=16, stride=8, block_sel=8, seq_len=48)
    return v


def _ranks(rng, shape, top=8, dtype=np.float32):
    return rng.integers(0, top, shape).astype(dtype)


def _select_vectors():
    rng = np.random.default_rng(seed_for("sparse.nsa.select"))
    v = _Vectors()
    v.add("paper defaults: n = 16 of 21 blocks of 64, 1 initial + 2 local forced, decode rows at 1280..1283",
          ["NsaSelForced", "NsaSelDecode"], {"importance": rng.permutation(np.arange(1 * 4 * 2 * 21)).reshape(
              1, 4, 2, 21).astype(np.float32)}, seq_len=1284, block_sel=64, n=16, initial=1, local=2)
    v.add("integer importances with many ties: the lower block index wins", ["NsaSelTies"],
          {"importance": _ranks(rng, (1, 3, 2, 12), top=3)}, seq_len=48, block_sel=4, n=5, initial=0, local=0)
    imp = _ranks(rng, (1, 2, 1, 10)) + 8
    imp[..., 0] = imp[..., 7:] = 0  # forced initial and local blocks score lowest
    v.add("forced blocks with the lowest importance are still selected", ["NsaSelForced"], {"importance": imp},
          seq_len=40, block_sel=4, n=4, initial=1, local=2)
    v.add("prefill over block boundaries (l' = 4, t = 0..15): local blocks t // 4 and t // 4 - 1",
          ["NsaSelLocal", "NsaSelCausal"], {"importance": _ranks(rng, (1, 16, 1, 4))}, block_sel=4, n=3,
          initial=1, local=2)
    fut = _ranks(rng, (1, 12, 2, 3))
    fut[..., 1:] += 100  # future blocks score highest
    v.add("future blocks score highest: never selected", ["NsaSelCausal", "NsaSelPad"], {"importance": fut},
          block_sel=4, n=2, initial=0, local=0)
    v.add("importance with 3 extra columns past the sequence, scored highest", ["NsaSelCausal"],
          {"importance": np.concatenate([_ranks(rng, (1, 2, 1, 4)), np.full((1, 2, 1, 3), 50, np.float32)], -1)},
          seq_len=16, block_sel=4, n=3, initial=1, local=1)
    v.add("fewer selectable blocks than n = 6: -1 padded", ["NsaSelPad"], {"importance": _ranks(rng, (1, 9, 1, 3))},
          block_sel=4, n=6, initial=1, local=2)
    v.add("n = 2 < 3 forced blocks: the lower indices win (block 0 and t // l' - 1)", ["NsaSelForced", "NsaSelTies"],
          {"importance": _ranks(rng, (1, 2, 1, 6))}, seq_len=24, block_sel=4, n=2, initial=1, local=2)
    v.add("2 initial and 3 local blocks", ["NsaSelForced", "NsaSelLocal"], {"importance": _ranks(rng, (1, 3, 2, 10))},
          seq_len=40, block_sel=4, n=6, initial=2, local=3)
    inf = _ranks(rng, (1, 1, 1, 8)) + 1
    inf[..., 1] = np.inf
    inf[..., 2] = -np.inf
    v.add("+inf importance ranks below the forced blocks; -inf is still selectable", ["NsaSelForced", "NsaSelPad"],
          {"importance": inf}, seq_len=32, block_sel=4, n=8, initial=1, local=2)
    close = np.array([1.0, 1.0 + 2.0**-12, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-12, 1.0], np.float32)
    v.add("scores 2^-12 apart: bfloat16 or float16 rounding makes ties", ["NsaSelPrecision"],
          {"importance": np.broadcast_to(close, (1, 1, 1, 5)).copy()}, seq_len=20, block_sel=4, n=2, initial=0,
          local=0)
    v.add("float64 importance", ["Random"], {"importance": _ranks(rng, (2, 2, 2, 6), dtype=np.float64)},
          seq_len=24, block_sel=4, n=3, initial=1, local=1)
    v.add("no queries", ["EmptyInput"], {"importance": _ranks(rng, (1, 0, 2, 4))}, seq_len=16, block_sel=4, n=2)
    v.add("n = 0", ["EmptyInput"], {"importance": _ranks(rng, (1, 2, 1, 4))}, seq_len=16, block_sel=4, n=0)
    nan = _ranks(rng, (1, 2, 1, 4))
    nan[0, 1, 0, 2] = np.nan
    v.add("NaN importance", ["InvalidInput", "NaN"], {"importance": nan}, result="invalid", seq_len=16, block_sel=4,
          n=2)
    v.add("3 blocks for seq_len 16 of blocks of 4", ["InvalidInput"], {"importance": _ranks(rng, (1, 2, 1, 3))},
          result="invalid", seq_len=16, block_sel=4, n=2)
    v.add("n = -1", ["InvalidInput"], {"importance": _ranks(rng, (1, 2, 1, 4))}, result="invalid", seq_len=16,
          block_sel=4, n=-1)
    fine = np.array([0.5, 0.5 + 2.0**-30, 0.5 + 2.0**-29, 0.5 + 3 * 2.0**-30, 0.5, 0.25], np.float64)
    v.add("float64 scores 2^-30 apart: a float32 copy ties them", ["NsaSelPrecision"],
          {"importance": np.broadcast_to(fine, (1, 1, 1, 6)).copy()}, seq_len=24, block_sel=4, n=3, initial=0,
          local=1)
    return v


def _seeded(d):
    return np.random.default_rng(d(st.integers(0, 2**32 - 1), label="seed"))


_POOLINGS = ((4, 2), (4, 4), (8, 4), (2, 1), (3, 1), (4, 1), (6, 3))
_MAPPINGS = ((4, 2, 4), (4, 2, 8), (2, 2, 2), (2, 1, 4), (4, 4, 8), (6, 3, 6), (4, 2, 16))


def _compress_examples(supported):
    @st.composite
    def draw(d):
        rng = _seeded(d)
        partial = d(st.sampled_from(supported["partial"]), label="partial")
        block, stride = d(st.sampled_from(_POOLINGS), label="block, stride")
        stride = block if partial else stride
        t, h, dim = d(st.integers(0, 20), label="T"), d(st.integers(1, 2), label="H"), d(st.integers(1, 4))
        dtype = d(st.sampled_from([np.float32, np.float64, np.float16]), label="dtype")
        inputs = {"x": grid16(rng, (d(st.integers(1, 2)), t, h, dim), dtype=dtype)}
        if d(st.booleans(), label="pe"):
            inputs["pe"] = grid16(rng, (block, dim) if d(st.booleans()) else (block, h, dim), dtype=dtype)
        return Case(inputs, {"partial": partial, "block": block, "stride": stride})
    return draw()


def _attend_examples(supported):
    @st.composite
    def draw(d):
        rng = _seeded(d)
        block, stride = d(st.sampled_from(_POOLINGS), label="block, stride")
        seq_len = d(st.integers(0, 16), label="seq_len")
        lq = d(st.sampled_from(sorted({seq_len, min(seq_len, 1), min(seq_len, 3)})), label="Lq")
        tc = cmp.num_compressed(seq_len, block=block, stride=stride) + d(st.integers(0, 1), label="extra blocks")
        hkv, g = d(st.integers(1, 2), label="Hkv"), d(st.integers(1, 2), label="G")
        params = {"block": block, "stride": stride, "seq_len": seq_len}
        if d(st.booleans(), label="scale given"):
            params["scale"] = d(st.sampled_from([0.25, 0.5, 1.0]))
        return Case(_attend_inputs(rng, 1, lq, tc, hkv * g, hkv, d(st.integers(1, 8), label="D")), params)
    return draw()


def _importance_examples(supported):
    @st.composite
    def draw(d):
        rng = _seeded(d)
        block, stride, block_sel = d(st.sampled_from(_MAPPINGS), label="block, stride, block_sel")
        seq_len = d(st.integers(0, 40), label="seq_len")
        lq = d(st.integers(0, min(seq_len, 3)), label="Lq")
        tc = cmp.num_compressed(seq_len, block=block, stride=stride)
        hkv, g = d(st.integers(1, 2), label="Hkv"), d(st.sampled_from([1, 2, 4]), label="G")
        return Case({"p_cmp": _probs(rng, (1, lq, hkv * g, tc))},
                    {"heads_kv": hkv, "block": block, "stride": stride, "block_sel": block_sel, "seq_len": seq_len,
                     "reduce": d(st.sampled_from(supported["reduce"]), label="reduce")})
    return draw()


def _select_examples(supported):
    @st.composite
    def draw(d):
        rng = _seeded(d)
        block_sel = d(st.sampled_from([1, 2, 4]), label="block_sel")
        seq_len = d(st.integers(0, 24), label="seq_len")
        lq = d(st.integers(0, min(seq_len, 4)), label="Lq")
        n_sel = slc.num_selection_blocks(seq_len, block_sel=block_sel) + d(st.integers(0, 1), label="extra")
        imp = _ranks(rng, (1, lq, d(st.integers(1, 2), label="Hkv"), n_sel), top=d(st.sampled_from([2, 5, 50])))
        return Case({"importance": imp}, {"seq_len": seq_len, "block_sel": block_sel, "n": d(st.integers(0, 6)),
                                          "initial": d(st.integers(0, 2)), "local": d(st.integers(0, 3))})
    return draw()


OPERATIONS = [
    AREA.bounded("nsa.compress", cmp.compress, anchor="nsa-compress",
                 summary="NSA's compressed keys or values: the mean of x + pe over blocks of l tokens at stride d",
                 variants=(PARTIAL,), vectors=_compress_vectors, examples=_compress_examples,
                 emulate=cmp.emulate_compress, bounds=COMPRESS_BOUND),
    AREA.bounded("nsa.compressed_attend", cmp.compressed_attend, anchor="nsa-compressed-attend",
                 summary="attention over the complete compressed blocks, with the probabilities p_cmp",
                 outputs=("out", "lse", "p_cmp"), vectors=_attend_vectors, examples=_attend_examples,
                 emulate=cmp.emulate_compressed_attend, bounds=ATTEND_BOUNDS),
    AREA.exact("nsa.importance", slc.importance, anchor="nsa-importance",
               summary="selection-block importance: eq. 9's overlap sum of p_cmp, summed over each KV group",
               variants=(REDUCE,), vectors=_importance_vectors, examples=_importance_examples,
               compare=lambda e, a: compare_values(e, a, "float64")),
    AREA.exact("nsa.select", slc.select, anchor="nsa-select",
               summary="NSA's top-n selection blocks: initial and local blocks forced, causal, ties to the lower index",
               vectors=_select_vectors, examples=_select_examples, compare=compare_index_sets),
]

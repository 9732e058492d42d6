"""kv.qjl.*: QJL's 1-bit key sketches and the scores read from them (spec/kv.md#qjl).

  kv.qjl.sketch           (k [B,H,T,D], S [m,D]) -> (signs int8 [B,H,T,m], norms float64 [B,H,T])   exact
  kv.qjl.pack             signs int8 [..., m] -> bytes uint8 [..., m/8], LSB first                     exact
  kv.qjl.scores           (q [B,Hq,Lq,D], S, signs (int8 or packed uint8), norms) -> [B,Hq,Lq,T]     bounded

The outlier variant's ops are in ref/kv/catalog/qjl_outliers.py (they use this module's flags and inputs).

Inputs are integers scaled by powers of two (byte-stable across NumPy versions): every
product S k is exact in float32, so its sign is the same in any precision. Projections
are small-integer matrices, or Hadamard rows with column signs flipped (the reference's
orthogonalized projection: rows orthogonal in blocks of D, each of norm sqrt(D)).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.kv import qjl
from ref.kv.catalog.common import AREA
from ref.quant.hadamard import hadamard_matrix
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.compare import Comparison, compare_exact, compare_parts, compare_values
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "H16", "OPERATIONS", "SCORE_BOUND", "Vectors", "compare_sketch_outliers", "fine_keys",
           "hadamard_projection", "integer_projection", "keys", "scores_inputs"]

SCORE_BOUND = Bound(k=2.0, floor=4.0, scale="relative")

FLAGS = {
    "QjlScale": Flag("the estimator's constant wrong: sqrt(pi/2) left out, or 1/D (head dim) in place of 1/m",
                     "every score scaled by 0.80, or by m/D"),
    "QjlNorm": Flag("the key norm dropped from the score, or the norm of the sketch (not of k) kept",
                    "scores of long and short keys come out alike"),
    "QjlProjection": Flag("the query projected with another matrix than the keys (S stored [D, m] and read as "
                          "[m, D], or the unorthogonalized one)", "the estimate no longer tracks <q, k>"),
    "QjlSignZero": Flag("S k = 0 mapped to +1 (or to 0) where the reference's `> 0` gives -1",
                        "all-zero keys and keys orthogonal to a row get the other bit"),
    "QjlBitOrder": Flag("signs packed (or read) most significant bit first where the reference packs row 8i + j "
                        "into bit j", "every byte's rows reversed"),
    "QjlHeads": Flag("query head h read against KV head h % H (interleaved) instead of h // g",
                     "GQA heads scored against another head's keys"),
    "QjlOutliers": Flag("outlier channels not excluded from the inlier sketch, the outlier sketch taken over all "
                        "m rows, the inlier norm taken as ||k|| (outliers not subtracted) or without the clamp at 0, "
                        "or a group's (or KV head's) mask applied to other tokens or heads",
                        "outlier mass counted twice, or with the wrong scale"),
    "QjlOutlierSelection": Flag("outliers chosen per token instead of per group of tokens, over all tokens or all "
                                "heads at once, with tokens put in groups strided, by max |k| or the L1 sum instead "
                                "of the norm over the group, with the energies summed in float16, or ties to the "
                                "higher index (or left to an unstable sort)",
                                "other channels kept as outliers"),
    "QjlPrecision": Flag("an input or intermediate kept in float16 inside a float32 kernel (keys, query, query "
                         "sketch S q, recent keys, values), or the norm taken as the float32 root of a float32 sum "
                         "or rounded twice (through float32 to float16)",
                         "errors of 2^-11 where the bound allows float32's, a sign flipped where S k is tiny, a norm "
                         "one unit off"),
}

# Sylvester's Hadamard matrix of order 16 (entries +-1, rows orthogonal, norm 4 = sqrt(16))
H16 = (hadamard_matrix(16) * 4).astype(np.int64)


def keys(rng, shape, shift: int = 5, top: int = 127, dtype=np.float32) -> np.ndarray:
    """Integers in [-top, top] times 2^-shift: exact in float16 (top < 2^11) and float32."""
    return (rng.integers(-top, top + 1, shape) * 2.0**-shift).astype(dtype)


def fine_keys(rng, shape, dtype=np.float32) -> np.ndarray:
    """Integers in [-4095, 4095] times 2^-12: 13 significant bits, exact in float32 but not in
    float16 (a half copy rounds them), their squares' sums not exact in a float32 sum."""
    return (rng.integers(-4095, 4096, shape) * 2.0**-12).astype(dtype)


def integer_projection(rng, m: int, d: int, dtype=np.float32) -> np.ndarray:
    """S [m, d]: the sum of two uniform integers in [-2, 2] (a rough bell), never a zero row."""
    s = rng.integers(-2, 3, (m, d)) + rng.integers(-2, 3, (m, d))
    s[np.all(s == 0, axis=1), 0] = 1
    return s.astype(dtype)


def hadamard_projection(rng, blocks: int, dtype=np.float32) -> np.ndarray:
    """S [16 * blocks, 16]: each block H16 with its columns' signs flipped at random
    (rows orthogonal within a block, of norm sqrt(16)), as the reference's QR blocks."""
    return np.concatenate([H16 * rng.choice([-1, 1], 16) for _ in range(blocks)]).astype(dtype)


class Vectors(list):
    def add(self, comment, flags, inputs, result="valid", **params):
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def _floats(expected, actual) -> Comparison:
    """Norms bit for bit: float64 as the oracle gives them, or float16 / float32 (the
    reference stores them in the keys' dtype) equal to the float64 norm rounded to
    nearest in that dtype."""
    got = np.asarray(actual)
    if got.dtype not in (np.float16, np.float32, np.float64):
        return Comparison(False, np.size(expected), np.size(expected), np.inf, "dtype",
                          problem=f"dtype: expected float16, float32 or float64 norms, got {got.dtype}")
    want = np.asarray(expected).astype(got.dtype)  # NumPy's casts round to nearest even
    return compare_values(want, got, got.dtype.name)


def _compare_sketch(expected, actual):
    return compare_parts(expected, actual, names=("signs", "norms"), comparators=(compare_exact, _floats))


def compare_sketch_outliers(expected, actual):
    return compare_parts(expected, actual, names=("signs", "norms", "outlier_signs", "outlier_norms"),
                         comparators=(compare_exact, _floats, compare_exact, _floats))


# ---------------------------------------------------------------------------- sketch and pack

def _sketch_vectors():
    rng = np.random.default_rng(seed_for("kv.qjl.sketch"))
    v = Vectors()
    v.add("B=1, H=2, T=5, D=16, m=24 integer projection", ["Random"],
          {"k": keys(rng, (1, 2, 5, 16)), "S": integer_projection(rng, 24, 16)})
    v.add("orthogonalized projection: two H16 blocks (m = 32)", ["Random"],
          {"k": keys(rng, (2, 1, 4, 16)), "S": hadamard_projection(rng, 2)})
    k0 = keys(rng, (1, 1, 4, 16))
    k0[0, 0, 1] = 0
    k0[0, 0, 2] = H16[3] * 0.5  # S k = 8 e_3: every other row exactly 0
    v.add("token 1 all zero (norm 0, every sign -1), token 2 a Hadamard row (S k = 0 on 15 rows: -1)",
          ["QjlSignZero", "EmptyInput"], {"k": k0, "S": H16.astype(np.float32)})
    v.add("float16 keys and projection", ["Random"],
          {"k": keys(rng, (1, 2, 3, 16), dtype=np.float16), "S": integer_projection(rng, 16, 16, np.float16)})
    v.add("float64 keys, D = 8, m = 8", ["Random"],
          {"k": keys(rng, (1, 1, 3, 8), dtype=np.float64), "S": integer_projection(rng, 8, 8, np.float64)})
    v.add("T = 0 (empty cache)", ["EmptyInput"], {"k": keys(rng, (1, 2, 0, 16)), "S": integer_projection(rng, 8, 16)})
    v.add("a single token, m = 1", ["EmptyInput"], {"k": keys(rng, (1, 1, 1, 16)), "S": integer_projection(rng, 1, 16)})
    good = {"k": keys(rng, (1, 1, 2, 16)), "S": integer_projection(rng, 8, 16)}
    v.add("S of width 8 for keys of head dim 16", ["InvalidInput", "QjlProjection"],
          {**good, "S": good["S"][:, :8]}, result="invalid")
    bad = good["k"].copy()
    bad[0, 0, 1, 3] = np.nan
    v.add("NaN in k", ["InvalidInput", "NaN"], {**good, "k": bad}, result="invalid")
    badS = good["S"].copy()
    badS[2, 2] = np.inf
    v.add("Inf in S", ["InvalidInput", "NaN"], {**good, "S": badS}, result="invalid")
    v.add("k of rank 3", ["InvalidInput"], {**good, "k": good["k"][0]}, result="invalid")
    v.add("integer keys", ["InvalidInput"], {**good, "k": good["k"].astype(np.int32)}, result="invalid")
    # issue 15 (adversary qjl): vectors appended here so that the ids above do not move
    fine = fine_keys(rng, (1, 2, 16, 16))
    S = integer_projection(rng, 24, 16)
    S[0] = 0
    S[0, :2] = 1
    fine[0, 0, 0] = 0
    fine[0, 0, 0, :2] = 1 + 2.0**-12, -1  # S k = 2^-12 on row 0: +1 (a float16 copy of k gives 0, so -1)
    v.add("float32 keys of 13 significant bits: S k exact in float32, not in float16; token 0 has S k = 2^-12 on "
          "row 0; norms not exact in a float32 sum", ["QjlPrecision", "QjlNorm", "QjlSignZero"], {"k": fine, "S": S})
    mid = np.zeros((1, 1, 4, 8))
    mid[0, 0, :, 0] = [1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-8 + 2.0**-40), 3 * (1 + 2.0**-11 + 2.0**-40),
                       1 - 2.0**-12 - 2.0**-40]
    v.add("float64 keys whose norms lie just past a float16 (or bfloat16) rounding midpoint: rounded to float16 "
          "directly they go up, through float32 they tie and go to even", ["QjlPrecision", "QjlNorm"],
          {"k": mid, "S": integer_projection(rng, 8, 8, np.float64)})
    v.add("S with m = 0 rows", ["InvalidInput"], {**good, "S": good["S"][:0]}, result="invalid")
    v.add("k of rank 5 (its last two axes of size D)", ["InvalidInput"],
          {**good, "k": keys(rng, (1, 1, 1, 16, 16))}, result="invalid")
    return v


def _pack_vectors():
    rng = np.random.default_rng(seed_for("kv.qjl.pack"))
    v = Vectors()
    one = -np.ones((1, 16), np.int8)
    one[0, 0], one[0, 9] = 1, 1
    v.add("one +1 at row 0 and row 9: bytes 0x01, 0x02 (LSB first)", ["QjlBitOrder"], {"signs": one})
    v.add("random signs [2, 3, 32]", ["QjlBitOrder", "Random"],
          {"signs": rng.choice(np.array([-1, 1], np.int8), (2, 3, 32))})
    v.add("no rows", ["EmptyInput"], {"signs": np.ones((0, 8), np.int8)})
    v.add("m = 12, not a multiple of 8", ["InvalidInput"], {"signs": np.ones((2, 12), np.int8)}, result="invalid")
    v.add("a sign 0", ["InvalidInput", "QjlSignZero"], {"signs": np.zeros((1, 8), np.int8)}, result="invalid")
    # issue 15: signs are int8 (the sketch's dtype); other integer dtypes of +-1 are refused
    v.add("int32 signs +-1", ["InvalidInput"], {"signs": np.ones((1, 8), np.int32)}, result="invalid")
    return v


def _sketch_examples(supported):
    @st.composite
    def draw(d):
        rng = np.random.default_rng(d(st.integers(0, 2**32 - 1), label="seed"))
        b, h, t = d(st.integers(1, 2)), d(st.integers(1, 3)), d(st.integers(0, 6))
        dim = d(st.sampled_from([8, 16, 32]))
        m = d(st.sampled_from([8, 16, 24]))
        dtype = d(st.sampled_from([np.float16, np.float32, np.float64]))
        return Case({"k": keys(rng, (b, h, t, dim), dtype=dtype), "S": integer_projection(rng, m, dim, dtype)})
    return draw()


def _pack_examples(supported):
    @st.composite
    def draw(d):
        rng = np.random.default_rng(d(st.integers(0, 2**32 - 1), label="seed"))
        shape = (d(st.integers(0, 3)), 8 * d(st.integers(1, 6)))
        return Case({"signs": rng.choice(np.array([-1, 1], np.int8), shape)})
    return draw()


# ---------------------------------------------------------------------------- scores

def scores_inputs(rng, b, h, g, lq, t, d, m, *, hadamard=False, packed=False, dtype=np.float32):
    """q integers times 2^-5, S, signs of random keys under S, norms integers times 2^-4."""
    S = hadamard_projection(rng, m // 16, dtype) if hadamard else integer_projection(rng, m, d, dtype)
    signs, _ = qjl.sketch(keys(rng, (b, h, t, d)), S)
    return {"q": keys(rng, (b, h * g, lq, d), dtype=dtype), "S": S,
            "signs": qjl.pack_signs(signs) if packed else signs,
            "norms": (rng.integers(1, 64, (b, h, t)) * 2.0**-4).astype(dtype)}


def _scores_vectors():
    rng = np.random.default_rng(seed_for("kv.qjl.scores"))
    v = Vectors()
    v.add("B=1, H=2, Lq=3, T=6, D=16, m=24, norms from 1/16 to 63/16",
          ["QjlScale", "QjlNorm", "QjlProjection"], scores_inputs(rng, 1, 2, 1, 3, 6, 16, 24))
    v.add("GQA: Hq = 4 over H = 2 (query head h reads KV head h // 2)", ["QjlHeads", "QjlScale"],
          scores_inputs(rng, 1, 2, 2, 2, 5, 16, 24))
    v.add("packed signs (uint8, LSB first), m = 32 orthogonalized", ["QjlBitOrder", "QjlScale"],
          scores_inputs(rng, 2, 1, 1, 2, 4, 16, 32, hadamard=True, packed=True))
    v.add("m = 48 against D = 16 (1/D in place of 1/m is 3x off)", ["QjlScale", "QjlProjection"],
          scores_inputs(rng, 1, 1, 2, 1, 7, 16, 48, hadamard=True))
    v.add("float16 inputs", ["Random"], scores_inputs(rng, 1, 1, 1, 2, 3, 16, 16, dtype=np.float16))
    v.add("float64 inputs", ["Random"], scores_inputs(rng, 1, 2, 1, 1, 3, 8, 8, dtype=np.float64))
    v.add("T = 0 (no cached keys)", ["EmptyInput"], scores_inputs(rng, 1, 1, 1, 2, 0, 16, 16))
    v.add("Lq = 0", ["EmptyInput"], scores_inputs(rng, 1, 1, 1, 0, 3, 16, 16))
    good = scores_inputs(rng, 1, 2, 1, 1, 3, 16, 16)
    v.add("S of width 8 for queries of dim 16", ["InvalidInput", "QjlProjection"],
          {**good, "S": good["S"][:, :8]}, result="invalid")
    v.add("signs of width 8 for m = 16", ["InvalidInput"], {**good, "signs": good["signs"][..., :8]},
          result="invalid")
    v.add("3 query heads over 2 KV heads", ["InvalidInput", "QjlHeads"],
          {**good, "q": np.concatenate([good["q"], good["q"][:, :1]], axis=1)}, result="invalid")
    v.add("a negative norm", ["InvalidInput", "QjlNorm"], {**good, "norms": -good["norms"]}, result="invalid")
    nan = good["q"].copy()
    nan[0, 0, 0, 0] = np.nan
    v.add("NaN in q", ["InvalidInput", "NaN"], {**good, "q": nan}, result="invalid")
    v.add("a sign 0", ["InvalidInput", "QjlSignZero"], {**good, "signs": np.zeros_like(good["signs"])},
          result="invalid")
    v.add("norms of shape [B, H, T - 1]", ["InvalidInput"], {**good, "norms": good["norms"][..., 1:]},
          result="invalid")
    # issue 15 (adversary qjl): vectors appended here so that the ids above do not move
    fine = scores_inputs(rng, 1, 2, 2, 2, 6, 16, 24)
    fine["q"] = fine_keys(rng, fine["q"].shape)
    fine["q"][0, 0, 0] = 0
    fine["q"][0, 0, 0, 0] = 1 + 2.0**-12
    fine["S"][1::2] = fine_keys(rng, fine["S"][1::2].shape) * 4
    fine["signs"], _ = qjl.sketch(keys(rng, (1, 2, 6, 16)), fine["S"])
    fine["norms"] = (rng.integers(1, 4096, (1, 2, 6)) * 2.0**-10).astype(np.float32)
    v.add("float32 q, S and norms of 13 significant bits (a float16 copy of q or of S q is 2^-12 off)",
          ["QjlPrecision"], fine)
    v.add("q of batch 1 against signs and norms of batch 2", ["InvalidInput"],
          {**scores_inputs(rng, 2, 1, 1, 1, 2, 16, 16), "q": keys(rng, (1, 1, 1, 16))}, result="invalid")
    return v


def _scores_examples(supported):
    @st.composite
    def draw(d):
        rng = np.random.default_rng(d(st.integers(0, 2**32 - 1), label="seed"))
        had = d(st.booleans(), label="hadamard")
        return Case(scores_inputs(rng, d(st.integers(1, 2)), d(st.integers(1, 2)), d(st.integers(1, 3)),
                                  d(st.integers(0, 3)), d(st.integers(0, 6)), 16,
                                  d(st.sampled_from([16, 32])) if had else d(st.sampled_from([8, 24, 40])),
                                  hadamard=had, packed=d(st.booleans(), label="packed"),
                                  dtype=d(st.sampled_from([np.float16, np.float32, np.float64]))))
    return draw()


OPERATIONS = [
    AREA.exact("qjl.sketch", qjl.sketch, anchor="qjl", outputs=("signs", "norms"),
               summary="k [B,H,T,D], S [m,D] -> (signs int8 +-1 of S k, 0 -> -1; norms ||k|| float64)",
               vectors=_sketch_vectors, examples=_sketch_examples, compare=_compare_sketch),
    AREA.exact("qjl.pack", qjl.pack_signs, anchor="qjl-packing",
               summary="signs int8 [..., m] -> uint8 [..., m/8], row 8i + j in bit j of byte i",
               vectors=_pack_vectors, examples=_pack_examples, compare=compare_exact),
    AREA.bounded("qjl.scores", qjl.scores, anchor="qjl-scores",
                 summary="q [B,Hq,Lq,D], S, signs, norms -> sqrt(pi/2)/m * norms * <S q, signs> [B,Hq,Lq,T]",
                 vectors=_scores_vectors, examples=_scores_examples, emulate=qjl.emulate_scores,
                 bounds=SCORE_BOUND),
]

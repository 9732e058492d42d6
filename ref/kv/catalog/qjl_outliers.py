"""kv.qjl's outlier variant, as the reference (amirzandieh/QJL) runs it (spec/kv.md#qjl-outliers):

  kv.qjl.outliers         (k [B,H,T,D], group, count) -> mask bool [B,H,T/group,D]                     exact
  kv.qjl.sketch_outliers  (k, S, outliers, outlier_dim) -> (signs, norms, outlier_signs, outlier_norms) exact
  kv.qjl.scores_outliers  (q, S, signs, norms, outliers, outlier_signs, outlier_norms) -> scores       bounded

The flags are ref.kv.catalog.qjl's; the inputs are built as there (integers scaled by
powers of two), with outlier channels a few integers times 2^3.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.kv import qjl
from ref.kv.catalog.common import AREA
from ref.kv.catalog.qjl import (SCORE_BOUND, Vectors, compare_sketch_outliers, hadamard_projection,
                                integer_projection, keys)
from ref.testing.catalog_types import seed_for
from ref.testing.compare import compare_exact
from ref.testing.vector_files import Case

__all__ = ["FLAGS", "OPERATIONS", "outlier_keys"]

FLAGS: dict = {}  # ref.kv.catalog.qjl's


def outlier_keys(rng, b, h, t, d, channels=(2, 11), dtype=np.float32) -> np.ndarray:
    """Keys with the given channels 8x larger (integers times 2^-2 instead of 2^-5)."""
    k = keys(rng, (b, h, t, d), dtype=np.float64)
    k[..., list(channels)] *= 8
    return k.astype(dtype)


def _i(x: int) -> np.ndarray:
    return np.int64(x)


def _outliers_vectors():
    rng = np.random.default_rng(seed_for("kv.qjl.outliers"))
    v = Vectors()
    v.add("two outlier channels (2, 11) in groups of 4 tokens, count 2", ["QjlOutlierSelection"],
          {"k": outlier_keys(rng, 1, 2, 8, 16), "group": _i(4), "count": _i(2)})
    k = np.zeros((1, 1, 4, 8), np.float32)
    k[0, 0, 0, 1] = 10  # the largest |k|, energy 100
    k[0, 0, :, 5] = 6  # energy 144 over the group: the norm picks 5, max |k| picks 1
    k[0, 0, 1:, 2] = 5  # energy 75
    k[0, 0, 3, 6] = 9  # token 3 alone would pick 6 (81) over 5 (36)
    v.add("norm over the group against max |k| and per-token choice: channel 5 (norm 12) over 1 (max 10), "
          "6 (one token 9)", ["QjlOutlierSelection"], {"k": k, "group": _i(4), "count": _i(1)})
    tie = np.zeros((1, 1, 2, 8), np.float32)
    tie[0, 0, 0, [3, 6]] = 4
    tie[0, 0, 1, [3, 6]] = -4
    v.add("a tie (channels 3 and 6 of equal norm), count 1: the lower index 3", ["QjlOutlierSelection"],
          {"k": tie, "group": _i(2), "count": _i(1)})
    v.add("count 0 (no outliers) and count D (all)", ["EmptyInput"],
          {"k": keys(rng, (1, 1, 4, 8)), "group": _i(2), "count": _i(0)})
    v.add("count = D", ["EmptyInput"], {"k": keys(rng, (1, 1, 4, 8)), "group": _i(4), "count": _i(8)})
    v.add("group 1 (per token), float16", ["QjlOutlierSelection"],
          {"k": outlier_keys(rng, 1, 1, 3, 16, dtype=np.float16), "group": _i(1), "count": _i(2)})
    v.add("T = 0", ["EmptyInput"], {"k": keys(rng, (1, 1, 0, 8)), "group": _i(4), "count": _i(2)})
    good = {"k": keys(rng, (1, 1, 6, 8)), "group": _i(3), "count": _i(2)}
    v.add("group 4 does not divide T = 6", ["InvalidInput"], {**good, "group": _i(4)}, result="invalid")
    v.add("count 9 > D = 8", ["InvalidInput"], {**good, "count": _i(9)}, result="invalid")
    v.add("group 0", ["InvalidInput"], {**good, "group": _i(0)}, result="invalid")
    return v


def sketch_outlier_inputs(rng, b, h, groups, group, d, m, mo, count=2, hadamard=False, dtype=np.float32):
    k = outlier_keys(rng, b, h, groups * group, d, dtype=dtype)
    return {"k": k, "S": hadamard_projection(rng, m // 16, dtype) if hadamard else integer_projection(rng, m, d, dtype),
            "outliers": qjl.outlier_channels(k, group, count), "outlier_dim": _i(mo)}


def _sketch_vectors():
    rng = np.random.default_rng(seed_for("kv.qjl.sketch_outliers"))
    v = Vectors()
    v.add("2 groups of 4 tokens, outliers 2 and 11 (8x), m = 24, m_out = 8", ["QjlOutliers", "QjlSignZero"],
          sketch_outlier_inputs(rng, 1, 2, 2, 4, 16, 24, 8))
    v.add("orthogonalized m = 32, m_out = 16", ["QjlOutliers"],
          sketch_outlier_inputs(rng, 1, 1, 2, 2, 16, 32, 16, hadamard=True))
    x = sketch_outlier_inputs(rng, 1, 1, 1, 2, 16, 16, 16)
    x["outliers"] = np.zeros_like(x["outliers"])
    v.add("no outliers: the outlier sketch of a zero vector is all -1, its norm 0", ["QjlSignZero", "QjlOutliers"], x)
    v.add("float64, m_out = m", ["QjlOutliers"], sketch_outlier_inputs(rng, 1, 1, 1, 3, 16, 16, 16, dtype=np.float64))
    good = sketch_outlier_inputs(rng, 1, 1, 2, 2, 16, 16, 8)
    v.add("outlier_dim 17 > m = 16", ["InvalidInput"], {**good, "outlier_dim": _i(17)}, result="invalid")
    v.add("3 groups do not divide T = 4", ["InvalidInput"],
          {**good, "outliers": np.concatenate([good["outliers"]] * 2, axis=2)[:, :, :3]}, result="invalid")
    v.add("a float mask", ["InvalidInput"], {**good, "outliers": good["outliers"].astype(np.float32)},
          result="invalid")
    return v


def scores_outlier_inputs(rng, b, h, g, lq, groups, group, d, m, mo, hadamard=False, dtype=np.float32):
    x = sketch_outlier_inputs(rng, b, h, groups, group, d, m, mo, hadamard=hadamard, dtype=dtype)
    signs, norms, osigns, onorms = qjl.sketch_outliers(**x)
    return {"q": keys(rng, (b, h * g, lq, d), dtype=dtype), "S": x["S"], "signs": signs,
            "norms": norms.astype(dtype), "outliers": x["outliers"], "outlier_signs": osigns,
            "outlier_norms": onorms.astype(dtype)}


def _scores_vectors():
    rng = np.random.default_rng(seed_for("kv.qjl.scores_outliers"))
    v = Vectors()
    v.add("2 groups of 4, m = 24, m_out = 8 (the two scales differ)", ["QjlOutliers", "QjlScale"],
          scores_outlier_inputs(rng, 1, 2, 1, 2, 2, 4, 16, 24, 8))
    v.add("GQA 2 query heads per KV head, orthogonalized m = 32, m_out = 16", ["QjlOutliers", "QjlHeads"],
          scores_outlier_inputs(rng, 1, 2, 2, 2, 2, 2, 16, 32, 16, hadamard=True))
    v.add("float64 inputs", ["Random"], scores_outlier_inputs(rng, 1, 1, 1, 1, 1, 3, 16, 16, 16, dtype=np.float64))
    good = scores_outlier_inputs(rng, 1, 1, 1, 1, 2, 2, 16, 16, 8)
    v.add("outlier_signs wider than m", ["InvalidInput"],
          {**good, "outlier_signs": np.concatenate([good["signs"], good["outlier_signs"]], -1)}, result="invalid")
    v.add("a negative outlier norm", ["InvalidInput"], {**good, "outlier_norms": -good["outlier_norms"] - 1},
          result="invalid")
    return v


def _examples(inputs):
    def examples(supported):
        @st.composite
        def draw(d):
            rng = np.random.default_rng(d(st.integers(0, 2**32 - 1), label="seed"))
            had = d(st.booleans(), label="hadamard")
            m = 16 * d(st.integers(1, 2)) if had else d(st.sampled_from([8, 24]))
            return Case(inputs(rng, d, had, m, d(st.sampled_from([np.float32, np.float64]))))
        return draw()
    return examples


def _outlier_example(rng, d, had, m, dtype):
    group = d(st.sampled_from([1, 2, 4]))
    return {"k": outlier_keys(rng, 1, d(st.integers(1, 2)), group * d(st.integers(0, 3)), 16, dtype=dtype),
            "group": _i(group), "count": _i(d(st.integers(0, 4)))}


def _sketch_example(rng, d, had, m, dtype):
    return sketch_outlier_inputs(rng, 1, d(st.integers(1, 2)), d(st.integers(1, 3)), d(st.sampled_from([1, 2, 4])),
                                 16, m, d(st.integers(1, m)), count=d(st.integers(0, 4)), hadamard=had, dtype=dtype)


def _scores_example(rng, d, had, m, dtype):
    return scores_outlier_inputs(rng, 1, d(st.integers(1, 2)), d(st.integers(1, 2)), d(st.integers(1, 3)),
                                 d(st.integers(1, 3)), d(st.sampled_from([1, 2, 4])), 16, m, d(st.integers(1, m)),
                                 hadamard=had, dtype=dtype)


OPERATIONS = [
    AREA.exact("qjl.outliers", qjl.outlier_channels, anchor="qjl-outliers",
               summary="k [B,H,T,D], group, count -> bool [B,H,T/group,D]: per group of tokens the count channels "
                       "of largest norm (ties: lower index)",
               vectors=_outliers_vectors, examples=_examples(_outlier_example), compare=compare_exact),
    AREA.exact("qjl.sketch_outliers", qjl.sketch_outliers, anchor="qjl-outliers",
               outputs=("signs", "norms", "outlier_signs", "outlier_norms"),
               summary="k, S, outliers, outlier_dim -> inlier signs (m rows), ||k||, outlier signs (first m_out "
                       "rows), ||k_out||", vectors=_sketch_vectors, examples=_examples(_sketch_example),
               compare=compare_sketch_outliers),
    AREA.bounded("qjl.scores_outliers", qjl.scores_outliers, anchor="qjl-outliers",
                 summary="both sketches' estimates summed, each with its own norm and 1/m",
                 vectors=_scores_vectors, examples=_examples(_scores_example), emulate=qjl.emulate_scores_outliers,
                 bounds=SCORE_BOUND),
]

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
from ref.kv.catalog.qjl import (SCORE_BOUND, Vectors, compare_sketch_outliers, fine_keys, hadamard_projection,
                                integer_projection, keys)
from ref.testing.catalog_types import seed_for
from ref.testing.compare import compare_exact
from ref.testing.vector_files import Case

__all__ = ["FLAGS", "OPERATIONS", "clamp_inputs", "outlier_keys", "varied_outlier_keys"]

FLAGS: dict = {}  # ref.kv.catalog.qjl's


def outlier_keys(rng, b, h, t, d, channels=(2, 11), dtype=np.float32) -> np.ndarray:
    """Keys with the given channels 8x larger (integers times 2^-2 instead of 2^-5)."""
    k = keys(rng, (b, h, t, d), dtype=np.float64)
    k[..., list(channels)] *= 8
    return k.astype(dtype)


def varied_outlier_keys(rng, b, h, groups, group, d, count=3, dtype=np.float32) -> np.ndarray:
    """Keys whose `count` outlier channels differ from group to group and from head to head:
    each (batch, head, group) gets its own channels, 8x larger with distinct weights (1..count
    extra units), so that per-tensor, per-layer, strided or tiled groupings pick others."""
    k = keys(rng, (b, h, groups * group, d), dtype=np.float64)
    for i in np.ndindex(b, h, groups):
        chans = rng.choice(d, count, replace=False)
        rows = slice(i[2] * group, (i[2] + 1) * group)
        k[i[0], i[1], rows][:, chans] = (rng.integers(64, 128, (group, count)) * np.sign(
            rng.integers(0, 2, (group, count)) - 0.5) + np.arange(count) * 8) * 2.0**-2
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
    # issue 15 (adversary qjl): vectors appended here so that the ids above do not move
    v.add("H = 2, 3 groups of 2 tokens, count 3: the outlier channels differ per group and per head (chosen "
          "per tensor, per layer, or with strided groups they differ)", ["QjlOutlierSelection"],
          {"k": varied_outlier_keys(rng, 1, 2, 3, 2, 16), "group": _i(2), "count": _i(3)})
    k = np.zeros((1, 2, 4, 4), np.float32)
    k[0, 0, 0, 0], k[0, 0, 1, 3], k[0, 0, 2, 1], k[0, 0, 3, 2] = 3, 2, 1, 1
    k[0, 1, 0, 2], k[0, 1, 1, 1], k[0, 1, 2, 3], k[0, 1, 3, 0] = 3, 2, 1, 1
    v.add("per group and per head the top channel differs (group 2, count 1)", ["QjlOutlierSelection"],
          {"k": k, "group": _i(2), "count": _i(1)})
    l1 = np.array([[[[3, 2], [0, 2]]]], np.float32)
    v.add("energy 9 (channel 0) against 8 (channel 1), L1 3 against 4: the norm picks channel 0",
          ["QjlOutlierSelection"], {"k": l1, "group": _i(2), "count": _i(1)})
    ties = rng.integers(1, 4, (1, 1, 8, 16)).astype(np.float32)
    ties[0, 0, 0, :4] = [1, 1, 2, 2]
    v.add("ties at the cutoff, per token: values in {1, 2, 3} over D = 16, count 5 (token 0 starts 1, 1, 2, 2: "
          "channel 2 before 3); an unstable sort picks others", ["QjlOutlierSelection"],
          {"k": ties, "group": _i(1), "count": _i(5)})
    ties1 = np.zeros((1, 1, 1, 4), np.float32)
    ties1[0, 0, 0] = [1, 1, 2, 2]
    v.add("[1, 1, 2, 2], count 1: channel 2", ["QjlOutlierSelection"],
          {"k": ties1, "group": _i(1), "count": _i(1)})
    big = np.zeros((1, 1, 3, 4), np.float32)
    big[0, 0, 0, :2] = 256, 300
    big[0, 0, 1, :2] = 2048, 2049
    big[0, 0, 2, :3] = 255, -300, 299
    v.add("channels in the hundreds and thousands (256^2 overflows float16; 2049 rounds to 2048 in half)",
          ["QjlOutlierSelection", "QjlPrecision"], {"k": big, "group": _i(1), "count": _i(1)})
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
    # issue 15 (adversary qjl): vectors appended here so that the ids above do not move
    k = varied_outlier_keys(rng, 1, 2, 3, 2, 16)
    v.add("H = 2, 3 groups of 2 tokens, count 3: masks differ per group and per head (a tiled group-to-token map "
          "or head 0's mask for every head gives other signs)", ["QjlOutliers"],
          {"k": k, "S": integer_projection(rng, 24, 16), "outliers": qjl.outlier_channels(k, 2, 3),
           "outlier_dim": _i(8)})
    k = np.array([[[[1, 0], [1, 0], [0, 1], [0, 1]]], [[[0, 1], [0, 1], [1, 0], [1, 0]]]], np.float32)
    k = k.reshape(1, 2, 4, 2)
    v.add("2 heads, 2 groups of 2 tokens, each token's only channel its group's outlier: every inlier sign -1",
          ["QjlOutliers", "QjlSignZero"], {"k": k, "S": np.eye(2, dtype=np.float32),
                                           "outliers": qjl.outlier_channels(k, 2, 1), "outlier_dim": _i(1)})
    fine = fine_keys(rng, (1, 1, 8, 16))
    v.add("float32 keys of 13 significant bits (norms not exact in a float32 sum)", ["QjlPrecision", "QjlNorm"],
          {"k": fine, "S": integer_projection(rng, 16, 16), "outliers": qjl.outlier_channels(fine, 4, 2),
           "outlier_dim": _i(8)})
    v.add("outlier_dim 0", ["InvalidInput"], {**good, "outlier_dim": _i(0)}, result="invalid")
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
    # issue 15 (adversary qjl): vectors appended here so that the ids above do not move
    v.add("outlier norm 2 > norm 1 (token 0): the inlier norm clamps at 0 (a root of 1 - 4 is NaN)",
          ["QjlOutliers"], clamp_inputs())
    x = {"k": varied_outlier_keys(rng, 1, 2, 2, 2, 16), "S": integer_projection(rng, 24, 16)}
    x["outliers"], x["outlier_dim"] = qjl.outlier_channels(x["k"], 2, 3), _i(8)
    signs, norms, osigns, onorms = qjl.sketch_outliers(**x)
    v.add("GQA 2 query heads per KV head, masks that differ per KV head and per group (count 3)",
          ["QjlOutliers", "QjlHeads"],
          {"q": keys(rng, (1, 4, 2, 16)), "S": x["S"], "signs": signs, "norms": norms.astype(np.float32),
           "outliers": x["outliers"], "outlier_signs": osigns, "outlier_norms": onorms.astype(np.float32)})
    fine = scores_outlier_inputs(rng, 1, 2, 1, 2, 2, 2, 16, 24, 8)
    fine["q"] = fine_keys(rng, fine["q"].shape)
    v.add("float32 q of 13 significant bits (a float16 copy of q or of S q is 2^-12 off)", ["QjlPrecision"], fine)
    return v


def clamp_inputs() -> dict:
    """One KV head, T = 2, D = 8, S = I: token 0's outlier norm (2) exceeds its norm (1)."""
    q = np.ones((1, 1, 1, 8), np.float32)
    q[..., 1::2] = 0.5
    mask = np.zeros((1, 1, 1, 8), bool)
    mask[..., 0] = True
    return {"q": q, "S": np.eye(8, dtype=np.float32), "signs": np.ones((1, 1, 2, 8), np.int8),
            "norms": np.array([[[1, 3]]], np.float32), "outliers": mask,
            "outlier_signs": np.ones((1, 1, 2, 8), np.int8), "outlier_norms": np.array([[[2, 1]]], np.float32)}


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

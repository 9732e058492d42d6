"""OSCAR's calibration and attention (spec/kv.md#oscar-rotation, #oscar-attend): bounded.

  kv.oscar.covariances  q [B, Hq, T, D], k, v [B, H, T, D] -> (c_k, c_v) [D, D]
  kv.oscar.rotation     c [D, D] -> R = U H P_br [D, D] (eigenvector signs pinned)
  kv.oscar.attend       q, k, v, r_k, r_v -> out [B, Hq, Lq, D] over [sink | INT2 | recent]

Rotations in the vectors are exact in every precision (signed permutations, and
Hadamard / 4 at D = 16 composed with them), and inputs are multiples of 2^-3 in
[-1, 1], so the rotated rows are exact at bfloat16 and the INT2 codes do not
depend on the precision a kernel runs at. Covariances for `rotation` are integer
matrices divided by 25 (Givens rotations by 3-4-5 triples), eigenvalues well apart.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.attention.emulate import rounder
from ref.kv import oscar_attend, oscar_rotation
from ref.kv.catalog.common import AREA
from ref.quant.hadamard import hadamard_matrix
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

COMPOSITION = Variant("composition", oscar_rotation.Composition, "r_h_pbr",
                      "U H P_br (the paper's), U H, U P_br or U alone")
BOUND = Bound(k=2.0, floor=8.0, scale="relative")

FLAGS = {
    "OscarQueryOnlyRotation": Flag("R_K applied to the queries but not the keys (or R_V not undone on the output)",
                                   "scores q R . k are not q . k: attention reads a scrambled cache"),
    "OscarBitReversal": Flag("P_br left out (eigenvalue order kept) or applied as its inverse",
                             "high-variance directions share quantization groups"),
    "OscarEigenOrder": Flag("eigenvalues ranked ascending (eigh's order) where P_br ranks them descending, or H and U "
                            "composed in the other order", "another orthogonal R: a different spread of the variance"),
    "OscarEigenSign": Flag("eigenvector signs left as the solver returns them",
                           "R's columns flip sign between solvers"),
    "OscarQueryGroups": Flag("a KV head's query group taken as heads h, h + H, ... (interleaved) instead of "
                             "h g .. h g + g - 1", "C_K and C_V average the wrong queries"),
    "OscarValueWeights": Flag("C_V without the attention weights k^T C_q k, or the weights not normalised to mean 1",
                              "the value rotation ignores which tokens attention reads"),
    "OscarWindowEdge": Flag("the bf16 sink or recent window one token too long or too short",
                            "a boundary token is quantized that should not be, or the reverse"),
    "OscarClipSwap": Flag("K's clip ratio (0.96) used for V or V's (0.92) for K", "values clipped too little or keys "
                          "too much"),
}


def _signed_permutation(rng, d: int) -> np.ndarray:
    return np.eye(d)[rng.permutation(d)] * rng.choice([-1.0, 1.0], d)[:, None]


def _rotations(rng, d: int) -> np.ndarray:
    """An exact orthogonal [d, d]: a signed permutation, times Hadamard / sqrt(d) when d is 16 or 64."""
    p = _signed_permutation(rng, d)
    return p @ hadamard_matrix(d) if d in (4, 16, 64) else p


def _grid(rng, shape) -> np.ndarray:
    return (rng.integers(-8, 9, shape) * 2.0**-3).astype(np.float32)


def _covariance(rng, d: int, eig) -> np.ndarray:
    """Q diag(eig) Q^T / 25 from integers: Q = 5 x (Givens rotations by (3/5, 4/5) on disjoint pairs), a signed
    permutation around it."""
    g = np.eye(d, dtype=np.int64) * 5
    for i in range(0, d - 1, 2):
        g[i:i + 2, i:i + 2] = [[3, -4], [4, 3]]
    p = _signed_permutation(rng, d).astype(np.int64)
    q5 = p @ g @ p.T  # [d, d] integers
    return (q5 @ np.diag(np.asarray(eig, np.int64)) @ q5.T) / 25.0


def covariances_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.oscar.covariances"))

    def qkv(b, hq, h, t, d):
        return {"q": _grid(rng, (b, hq, t, d)), "k": _grid(rng, (b, h, t, d)), "v": _grid(rng, (b, h, t, d))}

    loud = qkv(1, 4, 2, 12, 8)
    loud["q"][:, :2] *= 4  # query heads 0-1 (KV head 0's group) louder: interleaving mixes them into head 1
    v = VectorSpec
    return [
        v("MHA, 2 heads, 10 tokens", ("Random", "OscarValueWeights"), Case(qkv(1, 2, 2, 10, 8), {})),
        v("GQA 4/2, two batch rows", ("OscarQueryGroups", "OscarValueWeights", "Random"), Case(qkv(2, 4, 2, 6, 8), {})),
        v("GQA 4/2, group 0 louder: the group is heads 0-1, not 0 and 2", ("OscarQueryGroups",), Case(loud, {})),
        v("MQA: 3 query heads, one KV head, D = 16", ("OscarQueryGroups", "Random"), Case(qkv(1, 3, 1, 9, 16), {})),
        v("one token", ("OscarValueWeights",), Case(qkv(1, 2, 1, 1, 4), {})),
        v("all-zero keys: weights 0, the sum floored at 1e-12, C_V = 0", ("OscarValueWeights",),
          Case({**qkv(1, 2, 1, 3, 4), "k": np.zeros((1, 1, 3, 4), np.float32)}, {})),
        v("float64 activations", ("OscarValueWeights",),
          Case({n: a.astype(np.float64) for n, a in qkv(1, 2, 1, 5, 4).items()}, {})),
        v("no tokens is rejected", ("InvalidInput", "EmptyInput"), Case(qkv(1, 2, 1, 0, 4), {}), "invalid"),
        v("3 query heads over 2 KV heads is rejected", ("InvalidInput",), Case(qkv(1, 3, 2, 4, 4), {}), "invalid"),
        v("NaN in v is rejected", ("InvalidInput", "NaN"),
          Case({**qkv(1, 2, 1, 3, 4), "v": np.full((1, 1, 3, 4), np.nan, np.float32)}, {}), "invalid"),
    ]


def rotation_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.oscar.rotation"))
    c16 = _covariance(rng, 16, rng.permutation(np.arange(1, 17) * 3))
    c64 = _covariance(rng, 64, rng.permutation(np.arange(1, 65) * 2 + 40))
    v = VectorSpec
    specs = [v(f"D = 16, eigenvalues 3 .. 48, {comp}", ("OscarBitReversal", "OscarEigenOrder", "OscarEigenSign"),
               Case({"c": c16}, {"composition": comp})) for comp in COMPOSITION.values]
    return specs + [
        v("D = 64, eigenvalues 42 .. 168", ("OscarBitReversal", "OscarEigenOrder", "OscarEigenSign", "Random"),
          Case({"c": c64}, {})),
        v("a diagonal covariance (U a signed permutation)", ("OscarBitReversal", "OscarEigenSign"),
          Case({"c": np.diag(np.arange(8, 0, -1) * 1.0)}, {})),
        v("D = 2: H the 2 x 2 Hadamard, P_br the identity", ("OscarEigenOrder",),
          Case({"c": np.array([[5.0, 2.0], [2.0, 2.0]])}, {})),
        v("D = 1", ("OscarEigenSign",), Case({"c": np.array([[4.0]])}, {})),
        v("float32 covariance", ("OscarBitReversal",), Case({"c": c16.astype(np.float32)}, {})),
        v("D = 12, not a power of two, is rejected", ("InvalidInput",), Case({"c": np.eye(12)}, {}), "invalid"),
        v("a non-symmetric matrix is rejected", ("InvalidInput",), Case({"c": np.triu(np.ones((4, 4)))}, {}),
          "invalid"),
        v("a non-square matrix is rejected", ("InvalidInput",), Case({"c": np.ones((4, 2))}, {}), "invalid"),
        v("NaN is rejected", ("InvalidInput", "NaN"), Case({"c": np.full((2, 2), np.nan)}, {}), "invalid"),
    ]


def attend_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.oscar.attend"))

    def case(b, hq, h, lq, t, d, rotate=True):
        inputs = {"q": _grid(rng, (b, hq, lq, d)), "k": _grid(rng, (b, h, t, d)), "v": _grid(rng, (b, h, t, d))}
        inputs["k"][..., 2] *= 8  # an outlier channel in the keys
        if rotate:
            inputs["r_k"], inputs["r_v"] = _rotations(rng, d), _rotations(rng, d)
        return inputs

    small = {"sink": 4, "recent": 8, "group": 16}
    v = VectorSpec
    return [
        v("decode, GQA 4/2, T = 40: sink 4, INT2 28, recent 8; Hadamard rotations",
          ("OscarQueryOnlyRotation", "OscarWindowEdge", "Random"), Case(case(1, 4, 2, 1, 40, 16), small)),
        v("prefill Lq = T = 24, causal bottom-right", ("OscarQueryOnlyRotation", "OscarWindowEdge"),
          Case(case(1, 2, 1, 24, 24, 16), small)),
        v("no rotation (plain INT2 with windows)", ("OscarWindowEdge", "OscarClipSwap"),
          Case(case(2, 2, 2, 2, 30, 16, rotate=False), small)),
        v("distinct clip ratios: K 0.96, V 0.5", ("OscarClipSwap",), Case(case(1, 2, 2, 1, 30, 16), {**small,
                                                                                              "v_clip": 0.5})),
        v("D = 64, groups of 32, signed-permutation x Hadamard rotations", ("OscarQueryOnlyRotation", "Random"),
          Case(case(1, 2, 1, 2, 20, 64), {"sink": 2, "recent": 3, "group": 32})),
        v("T = sink + recent: nothing quantized", ("OscarWindowEdge",), Case(case(1, 2, 1, 1, 12, 16), small)),
        v("T = sink + recent + 1: one INT2 token", ("OscarWindowEdge",), Case(case(1, 2, 1, 1, 13, 16), small)),
        v("T < sink: all bf16", ("OscarWindowEdge",), Case(case(1, 2, 1, 1, 3, 16), small)),
        v("a single token", ("OscarWindowEdge",), Case(case(1, 1, 1, 1, 1, 16), small)),
        v("no sink, no recent window: everything INT2", ("OscarWindowEdge",),
          Case(case(1, 2, 2, 1, 10, 16), {"sink": 0, "recent": 0, "group": 16})),
        v("a non-orthogonal r_k is rejected", ("InvalidInput",),
          Case({**case(1, 2, 1, 1, 10, 16), "r_k": np.eye(16) * 2}, small), "invalid"),
        v("r_v of the wrong width is rejected", ("InvalidInput",),
          Case({**case(1, 2, 1, 1, 10, 16), "r_v": np.eye(8)}, small), "invalid"),
        v("3 query heads over 2 KV heads is rejected", ("InvalidInput",), Case(case(1, 3, 2, 1, 10, 16), small),
          "invalid"),
        v("NaN in k is rejected", ("InvalidInput", "NaN"),
          Case({**case(1, 2, 1, 1, 10, 16), "k": np.full((1, 1, 10, 16), np.nan, np.float32)}, small), "invalid"),
        v("an empty cache (T = 0): no key seen, output 0", ("EmptyInput",),
          Case({**case(1, 2, 1, 1, 1, 16), "k": np.zeros((1, 1, 0, 16), np.float32),
                "v": np.zeros((1, 1, 0, 16), np.float32)}, small)),
        v("float16 q, k, v", ("OscarWindowEdge", "Random"),
          Case({name: a.astype(np.float16) if name in "qkv" else a for name, a in case(1, 2, 1, 1, 20, 16).items()},
               small)),
        v("float64 q, k, v", ("OscarQueryOnlyRotation",),
          Case({name: a.astype(np.float64) for name, a in case(1, 2, 1, 1, 20, 16).items()}, small)),
    ]


def _seed(draw) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))


def _covariances_examples(supported):
    @st.composite
    def case(draw):
        rng = _seed(draw)
        h, g = draw(st.integers(1, 3), label="h"), draw(st.integers(1, 3), label="g")
        b, t, d = draw(st.integers(1, 2), label="b"), draw(st.integers(1, 12), label="t"), 8
        return Case({"q": _grid(rng, (b, h * g, t, d)), "k": _grid(rng, (b, h, t, d)),
                     "v": _grid(rng, (b, h, t, d))}, {})

    return case()


def _rotation_examples(supported):
    @st.composite
    def case(draw):
        params = draw(variant_params(supported), label="params")
        rng = _seed(draw)
        d = draw(st.sampled_from([2, 4, 8, 16]), label="d")
        return Case({"c": _covariance(rng, d, rng.permutation(np.arange(1, d + 1) * 4 + d))}, params)

    return case()


def _attend_examples(supported):
    @st.composite
    def case(draw):
        rng = _seed(draw)
        h, g = draw(st.integers(1, 2), label="h"), draw(st.integers(1, 2), label="g")
        t = draw(st.integers(1, 40), label="t")
        lq = draw(st.integers(1, min(t, 3)), label="lq")
        d = draw(st.sampled_from([16, 64]), label="d")
        inputs = {"q": _grid(rng, (1, h * g, lq, d)), "k": _grid(rng, (1, h, t, d)), "v": _grid(rng, (1, h, t, d)),
                  "r_k": _rotations(rng, d), "r_v": _rotations(rng, d)}
        params = {"sink": draw(st.integers(0, 5), label="sink"), "recent": draw(st.integers(0, 9), label="recent"),
                  "group": draw(st.sampled_from([d, d // 2]), label="group"),
                  "k_clip": draw(st.sampled_from([0.0, 0.96]), label="k_clip"),
                  "v_clip": draw(st.sampled_from([0.0, 0.92]), label="v_clip")}
        return Case(inputs, params)

    return case()


def _emulate_covariances(precision, q, k, v):
    rnd = rounder(precision)
    return tuple(rnd(c) for c in oscar_rotation.covariances(rnd(q), rnd(k), rnd(v)))


def _emulate_rotation(precision, c, composition="r_h_pbr"):
    rnd = rounder(precision)
    return rnd(oscar_rotation.rotation(rnd(c), composition=composition))


OPERATIONS = [
    AREA.bounded("oscar.covariances", oscar_rotation.covariances, anchor="oscar-rotation",
                 summary="calibration q, k, v -> (C_K = E[q q^T], C_V attention-weighted E[v v^T])",
                 vectors=covariances_vectors, examples=_covariances_examples, outputs=("c_k", "c_v"),
                 emulate=_emulate_covariances, bounds={"c_k": BOUND, "c_v": BOUND}),
    AREA.bounded("oscar.rotation", oscar_rotation.rotation, anchor="oscar-rotation",
                 summary="covariance [D, D] -> R = U H P_br (eigenvector signs pinned)", variants=(COMPOSITION,),
                 vectors=rotation_vectors, examples=_rotation_examples, emulate=_emulate_rotation,
                 bounds=Bound(k=2.0, floor=8.0, scale="absolute")),
    AREA.bounded("oscar.attend", oscar_attend.attend, anchor="oscar-attend",
                 summary="attention of q R_K over [bf16 sink | INT2 | bf16 recent] of k R_K, v R_V, out R_V^T",
                 vectors=attend_vectors, examples=_attend_examples, emulate=oscar_attend.emulate_attend,
                 bounds=BOUND),
]

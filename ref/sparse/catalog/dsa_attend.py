"""sparse.dsa.attend: attention restricted to the tokens DSA's indexer selected
(spec/sparse.md#dsa-attend), bounded, judged against ref.attention's emulation with the
selection as the mask. Inputs: halves for q and k, eighths for v, random index lists
with -1 slots."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.sparse import dsa
from ref.sparse.catalog.common import AREA
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "Vectors", "attend_inputs", "ints"]

FLAGS = {
    "DsaPadIndex": Flag("a -1 slot read as a token (Python's negative indexing: the last one)",
                        "the newest token attended by rows that did not select it"),
    "DsaGqa": Flag("query heads mapped to KV heads interleaved (h % Hkv) instead of in contiguous groups (h // G)",
                   "heads read another head's keys and values"),
}
OUT_BOUND = Bound(k=2.0, floor=2.0, scale="relative")
LSE_BOUND = Bound(k=2.0, floor=2.0, scale="log")


class Vectors(list):
    """VectorSpecs added one call per vector."""

    def add(self, comment, flags, inputs, result="valid", **params):
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def ints(rng, shape, lo=-2, hi=2, dtype=np.float32, step=1.0):
    """Integers lo..hi times `step` (exact at every precision)."""
    return (rng.integers(lo, hi + 1, shape) * step).astype(dtype)


# ---------------------------------------------------------------------------- attend

def attend_inputs(rng, b, t, s, h, hkv, d, k, dv=None, pad=0.3):
    idx = np.argsort(rng.random((b, t, s)), axis=-1)[..., :k]  # k distinct keys per row
    idx = np.where(rng.random(idx.shape) < pad, -1, idx).astype(np.int32)
    return {"q": ints(rng, (b, t, h, d), step=0.5), "k": ints(rng, (b, s, hkv, d), step=0.5),
            "v": ints(rng, (b, s, hkv, dv or d), -8, 8, step=1 / 8), "indices": idx}


def _attend_vectors():
    rng = np.random.default_rng(seed_for("sparse.dsa.attend"))
    v = Vectors()
    x = attend_inputs(rng, 1, 4, 8, 4, 1, 16, 4)
    v.add("prefill T = 4 of S = 8, 4 heads on one latent KV head (MQA), 4 slots, some -1", ["DsaPadIndex",
          "DsaCausal"], x)
    x2 = attend_inputs(rng, 2, 1, 9, 2, 2, 8, 3, dv=4, pad=0.0)
    v.add("decode T = 1 of S = 9, two KV heads, Dv = 4", ["DsaCausal"], x2)
    p = attend_inputs(rng, 1, 3, 6, 2, 1, 8, 3, pad=0.0)
    p["indices"][0, :, 2] = -1
    p["v"][0, 5] = 8  # the last token stands out: a -1 read as it shows
    v.add("-1 in every row's last slot, the last token's values large", ["DsaPadIndex"], p)
    d = p.copy()
    d["indices"] = np.array([[[0, 0, 1], [2, 2, 2], [3, 1, 3]]], np.int32)
    v.add("repeated indices count once", ["DsaPadIndex"], d)
    f = attend_inputs(rng, 1, 3, 5, 2, 1, 8, 2, pad=0.0)
    f["indices"][0] = [[0, 4], [1, 4], [2, 4]]
    v.add("a future index in the list is still masked by causality", ["DsaCausal"], f)
    v.add("causal off: the future index is read", ["DsaCausal"], f, causal=False)
    n = attend_inputs(rng, 1, 2, 5, 2, 1, 8, 2, pad=0.0)
    n["indices"][0] = [[0, 1], [1, 3]]
    n["v"][0, 2] = np.nan
    n["v"][0, 4] = np.inf
    v.add("NaN and Inf at keys nobody selected: never read", ["NaN", "DsaPadIndex"], n)
    e = attend_inputs(rng, 1, 2, 4, 2, 1, 8, 2)
    e["indices"][0, 0] = -1
    v.add("a row with every slot -1: out 0, lse -inf", ["DsaPadIndex", "EmptyInput"], e)
    v.add("float64 inputs", ["Random"], {**attend_inputs(rng, 1, 2, 3, 2, 1, 4, 2),
                                         **{k: a.astype(np.float64) for k, a in
                                            attend_inputs(rng, 1, 2, 3, 2, 1, 4, 2).items() if k != "indices"}})
    v.add("no queries", ["EmptyInput"], attend_inputs(rng, 1, 0, 3, 2, 1, 4, 2))
    bad = attend_inputs(rng, 1, 2, 4, 2, 1, 8, 2, pad=0.0)
    v.add("index S (past the cache)", ["InvalidInput"], {**bad, "indices": bad["indices"] + 4}, result="invalid")
    v.add("index -2", ["InvalidInput"], {**bad, "indices": bad["indices"] - 4}, result="invalid")
    v.add("float indices", ["InvalidInput"], {**bad, "indices": bad["indices"].astype(np.float32)},
          result="invalid")
    v.add("4 query heads on 2 KV heads (contiguous groups)", ["DsaGqa"], attend_inputs(rng, 1, 3, 6, 4, 2, 8, 3))
    return v


@st.composite
def _attend_cases(draw, supported):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    t = draw(st.integers(0, 4), label="T")
    s = t + draw(st.integers(0, 6), label="S - T")
    hkv = draw(st.integers(1, 2), label="Hkv")
    x = attend_inputs(rng, 1, t, s, hkv * draw(st.integers(1, 2)), hkv, 8, min(s, draw(st.integers(1, 4))))
    return Case(x, {"causal": draw(st.booleans(), label="causal")})


OPERATIONS = [
    AREA.bounded("dsa.attend", dsa.attend, anchor="dsa-attend",
                 summary="attention restricted to the selected tokens: masked dense attend",
                 vectors=_attend_vectors, examples=_attend_cases, outputs=("out", "lse"), emulate=dsa.emulate_attend,
                 bounds={"out": OUT_BOUND, "lse": LSE_BOUND}),
]

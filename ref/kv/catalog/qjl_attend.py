"""kv.qjl.attend: attention over a QJL key cache (spec/kv.md#qjl-attend), bounded:

  (q [B,Hq,Lq,D], S, signs, norms, k_recent [B,H,R,D], v [B,H,T+R,Dv]
   [, outliers, outlier_signs, outlier_norms]) -> out [B,Hq,Lq,Dv]

judged against ref.attention's emulation on the decoded keys. The flags are
ref.kv.catalog.qjl's; the inputs are built as there.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.kv import qjl_attend
from ref.kv.catalog.common import AREA
from ref.kv.catalog.qjl import Vectors, keys, scores_inputs
from ref.kv.catalog.qjl_outliers import scores_outlier_inputs
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.vector_files import Case

__all__ = ["FLAGS", "OPERATIONS", "attend_inputs"]

FLAGS = {
    "QjlRecent": Flag("the full-precision recent keys left out of the softmax, or their logits taken without the "
                      "1/sqrt(D) scale", "the newest tokens weighted wrong"),
}
ATTEND_BOUND = Bound(k=2.0, floor=4.0, scale="absolute")


def attend_inputs(rng, b, h, g, lq, t, r, d=16, m=24, *, outliers=False, dv=8, recent_shift=5, dtype=np.float32):
    """Sketched keys, R recent keys of the queries' scale (logits of a few units: the softmax neither
    flat nor saturated), values."""
    if outliers:
        x = scores_outlier_inputs(rng, b, h, g, lq, max(t // 2, 1) if t else 0, 2 if t else 1, d, m, m // 2,
                                  dtype=dtype)
    else:
        x = scores_inputs(rng, b, h, g, lq, t, d, m, dtype=dtype)
    t = x["signs"].shape[2]
    return {**x, "k_recent": keys(rng, (b, h, r, d), shift=recent_shift, dtype=dtype),
            "v": keys(rng, (b, h, t + r, dv), dtype=dtype)}


def _vectors():
    rng = np.random.default_rng(seed_for("kv.qjl.attend"))
    v = Vectors()
    v.add("T = 6 sketched, R = 3 recent keys, D = 16, m = 24", ["QjlNorm", "QjlRecent"],
          attend_inputs(rng, 1, 2, 1, 2, 6, 3))
    v.add("T = 8 sketched keys (logits of a few units) dominate R = 1 small recent key", ["QjlScale", "QjlNorm"],
          attend_inputs(rng, 1, 1, 1, 2, 8, 1, recent_shift=8))
    v.add("GQA 2 query heads per KV head", ["QjlHeads", "QjlRecent"], attend_inputs(rng, 1, 2, 2, 1, 5, 2))
    v.add("with outliers (2 groups of 2 tokens, m_out = 12)", ["QjlOutliers", "QjlRecent"],
          attend_inputs(rng, 1, 1, 1, 2, 4, 2, outliers=True))
    v.add("no recent keys (R = 0: T a multiple of the buffer)", ["EmptyInput"], attend_inputs(rng, 1, 1, 1, 1, 4, 0))
    v.add("no sketched keys (T = 0: a short prompt)", ["EmptyInput", "QjlRecent"],
          attend_inputs(rng, 1, 1, 1, 1, 0, 3))
    v.add("float64 inputs", ["Random"], attend_inputs(rng, 1, 1, 1, 1, 3, 2, dtype=np.float64))
    good = attend_inputs(rng, 1, 1, 1, 1, 3, 2)
    v.add("v one token short", ["InvalidInput"], {**good, "v": good["v"][:, :, 1:]}, result="invalid")
    v.add("k_recent of head dim 8", ["InvalidInput"], {**good, "k_recent": good["k_recent"][..., :8]},
          result="invalid")
    v.add("outliers without their signs and norms", ["InvalidInput"],
          {**good, "outliers": np.zeros((1, 1, 3, 16), bool)}, result="invalid")
    return v


def _examples(supported):
    @st.composite
    def draw(d):
        rng = np.random.default_rng(d(st.integers(0, 2**32 - 1), label="seed"))
        return Case(attend_inputs(rng, 1, d(st.integers(1, 2)), d(st.integers(1, 2)), d(st.integers(1, 3)),
                                  2 * d(st.integers(0, 3)), d(st.integers(0, 4)), outliers=d(st.booleans()),
                                  dtype=d(st.sampled_from([np.float32, np.float64]))))
    return draw()


OPERATIONS = [
    AREA.bounded("qjl.attend", qjl_attend.attend, anchor="qjl-attend",
                 summary="softmax([QJL scores | q . k_recent] / sqrt(D)) v over T sketched and R recent keys",
                 vectors=_vectors, examples=_examples, emulate=qjl_attend.emulate_attend, bounds=ATTEND_BOUND),
]



"""attention.merge_states: merge two split-KV partials of the same rows.

  (o_a [N, H, Dv], lse_a [N, H], o_b, lse_b) -> (o [N, H, Dv], lse [N, H])

A split-KV (flash-decoding) kernel attends each slice of the keys on its own and
merges the partials by their LSEs; an empty partial has lse -inf.
"""

from __future__ import annotations

import numpy as np

from ref.attention import emulate, split_kv
from ref.attention.catalog.common import ATTENTION, LSE_BOUND, OUT_BOUND, Vectors
from ref.testing.attention_cases import grid, merge_cases
from ref.testing.catalog_types import Flag, seed_for

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "MaskedLse": Flag("FlashAttention-2's +inf LSE of an empty row passed on unmapped",
                      "a downstream merge reads an empty partial as a dominant one"),
    "MergeShift": Flag("partials merged without subtracting the larger LSE first",
                       "exp(lse) overflows for large logits: Inf or NaN merged outputs"),
    "EmptyPartial": Flag("an empty partial (lse -inf) merged by the plain formula",
                         "-inf - -inf = NaN poisons the merged row"),
}


def _merge_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("attention.merge_states"))
    v = Vectors()
    add = v.add

    def states(n, h, dv, spread=1.0, center=0.0):
        return {"o_a": grid(rng, (n, h, dv)), "lse_a": (center + grid(rng, (n, h), spread)).astype(np.float32),
                "o_b": grid(rng, (n, h, dv)), "lse_b": (center + grid(rng, (n, h), spread)).astype(np.float32)}

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


def _case_flags(case) -> tuple[str, ...]:
    """EmptyPartial for an LSE of -inf, MaskedLse for +inf, MergeShift for an LSE whose
    exponential overflows float32 (past 88); Random for any other case."""
    lse = np.concatenate([np.ravel(case.inputs["lse_a"]), np.ravel(case.inputs["lse_b"])]).astype(np.float64)
    finite = lse[np.isfinite(lse)]
    found = (("EmptyPartial",) * bool(np.any(lse == -np.inf)) + ("MaskedLse",) * bool(np.any(lse == np.inf))
             + ("MergeShift",) * bool(finite.size and np.max(np.abs(finite)) > 88))
    return found or ("Random",)


OPERATIONS = [
    ATTENTION.bounded(
        "merge_states", split_kv.merge_states, anchor="merge_states",
        summary="merge two split-KV partials (o, lse) -> (o, lse)",
        vectors=_merge_vectors, examples=merge_cases, outputs=("o", "lse"),
        emulate=emulate.merge_states, bounds={"o": OUT_BOUND, "lse": LSE_BOUND}, case_flags=_case_flags),
]

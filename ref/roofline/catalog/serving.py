"""The roofline's serving formulas, judged by the bounded rule (float64 outputs):

  roofline.moe.expected_experts(experts, top_k, tokens)   distinct experts a batch touches
  roofline.specdec.expected_tokens(alpha, k)              tokens per target forward
  roofline.specdec.speedup(alpha, k, cost)                speculative decoding's wall-time gain
  roofline.phase_time(flops, bytes, peak_flops, bandwidth)   seconds, overlap "max" or "sum"

Counts are int64 arrays, rates and ratios float64 arrays, all of one op the same
shape; the emulations are in ref.roofline.emulate.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.roofline import emulate, moe, perf, specdec
from ref.testing.bounded import Bound
from ref.roofline.catalog.common import AREA, invalid_vectors
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.params import variant_params
from ref.testing.strategies import small_shapes
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

BOUND = Bound(k=2.0, floor=2.0, scale="relative")

FLAGS = {
    "WithoutReplacement": Flag("a token's k experts drawn with replacement: E (1 - (1 - 1/E)^(k B))",
                               "fewer experts than the k a single token touches; weight traffic underestimated"),
    "Saturation": Flag("min(E, k B), the bound, taken for the expected distinct experts",
                       "a batch is assumed to touch every expert long before it does: MoE decode too slow"),
    "AlphaOne": Flag("the closed form (1 - a^(k+1)) / (1 - a) evaluated at a = 1",
                     "0 / 0: NaN tokens per step for a draft the target always accepts"),
    "NearOne": Flag("a power of a number near 1 taken as written, 1 - x^n or (1 - p)^n in floats",
                    "the difference from 1 cancels: few or no correct digits near a = 1 or for k/E tiny"),
    "BonusToken": Flag("expected tokens summed over k terms, leaving out the target's own token",
                       "one token short per step: a = 0.8, k = 4 gives 2.95 instead of 3.36"),
    "TargetStep": Flag("speedup's denominator without the target's own step: k * cost, not k * cost + 1",
                       "a cheap draft looks like an unbounded speedup (infinite at cost 0)"),
    "MemoryBound": Flag("a memory-bound phase timed by its FLOPs (or the bandwidth misread)",
                        "decode looks orders of magnitude faster than the hardware allows"),
    "ComputeBound": Flag("a compute-bound phase timed by its bytes (or the peak misread)",
                         "prefill looks faster than the hardware's FLOP/s allow"),
    "Overlap": Flag("compute and memory times summed where the roofline takes their max, or the reverse",
                    "times off by up to 2x near the ridge point"),
}

OVERLAP = Variant("overlap", perf.Overlap, perf.Overlap.MAX,
                  "max: compute and memory overlap (the roofline); sum: they do not")


class _Vectors(list):
    def add(self, comment: str, flags, inputs, result: str = "valid", **params) -> None:
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def _i(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _f(*values) -> np.ndarray:
    return np.array(values, dtype=np.float64)


# ------------------------------------------------------------------ expected_experts

def _experts(e, k, b) -> dict[str, np.ndarray]:
    e, k, b = (np.asarray(x, np.int64) for x in (e, k, b))
    return {"experts": e, "top_k": k, "tokens": b}


def _expected_experts_vectors() -> _Vectors:
    rng = np.random.default_rng(seed_for("roofline.moe.expected_experts"))
    v = _Vectors()
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096]
    n = len(batches)
    v.add("Qwen3-30B-A3B (128 experts, top-8) at decode batches 1..4096: one token touches exactly 8",
          ["WithoutReplacement", "Saturation"], _experts([128] * n, [8] * n, batches))
    v.add("DeepSeek-V3 (256 routed experts, top-8) at decode batches 1..4096",
          ["WithoutReplacement", "Saturation"], _experts([256] * n, [8] * n, batches))
    v.add("Qwen3-Next-80B-A3B (512 experts, top-10) and Mixtral (8 experts, top-2) at batches 1, 32, 1024",
          ["WithoutReplacement", "Saturation"], _experts([512] * 3 + [8] * 3, [10] * 3 + [2] * 3, [1, 32, 1024] * 2))
    v.add("top_k = experts: every token touches all E (with replacement falls short)", ["WithoutReplacement"],
          _experts([1, 8, 128], [1, 8, 128], [1, 1, 3]))
    v.add("no tokens touch no expert, whatever E and k (0 * log1p(-1) is not NaN)", ["Saturation"],
          _experts([128, 8, 1], [8, 8, 0], [0, 0, 0]))
    v.add("top_k 0 touches none", ["Saturation"], _experts([16, 16], [0, 0], [1, 1000]))
    v.add("k/E below float64's epsilon: (1 - k/E)^B as written keeps only a few digits", ["NearOne"],
          _experts([3 * 2**38, 3 * 2**50, 2**60 + 2**40], [1, 5, 3], [2**20, 2**30, 2**40]))
    v.add("2-D input keeps its shape", ["Random"],
          _experts(np.full((2, 3), 64), np.full((2, 3), 6), [[1, 2, 3], [10, 20, 30]]))
    e = rng.integers(1, 1025, 40)
    v.add("random experts, top_k and batches", ["Random", "WithoutReplacement", "Saturation"],
          _experts(e, rng.integers(0, e + 1), rng.integers(0, 5000, 40)))
    v.add("0-d inputs", ["EmptyInput"], _experts(np.int64(64), np.int64(4), np.int64(16)))
    v.add("empty inputs give an empty output", ["EmptyInput"], _experts(np.zeros(0), np.zeros(0), np.zeros(0)))
    v.add("top_k above experts is rejected", ["InvalidInput"], _experts([8], [9], [1]), result="invalid")
    v.add("zero experts is rejected", ["InvalidInput"], _experts([0], [0], [1]), result="invalid")
    v.add("negative tokens are rejected", ["InvalidInput"], _experts([8], [2], [-1]), result="invalid")
    v.add("float tokens are rejected (counts are int64)", ["InvalidInput"],
          {**_experts([8], [2], [1]), "tokens": _f(1.0)}, result="invalid")
    v.add("bool top_k is rejected", ["InvalidInput"], {**_experts([8], [1], [1]), "top_k": np.array([True])},
          result="invalid")
    v.add("shapes differ (no broadcasting)", ["InvalidInput"], _experts([8, 8], [2, 2], [1]), result="invalid")
    v += invalid_vectors(Case(_experts(128, 8, 32)), counts=("experts", "top_k", "tokens"))
    return v


@st.composite
def _experts_cases(draw, supported):
    shape = draw(small_shapes(max_dims=2, max_side=6))
    e = draw(hnp.arrays(np.int64, shape, elements=st.integers(1, 2**20)))
    frac = draw(hnp.arrays(np.float64, shape, elements=st.floats(0, 1)))
    k = np.floor(frac * e).astype(np.int64)
    b = draw(hnp.arrays(np.int64, shape, elements=st.integers(0, 2**24)))
    return Case(_experts(e, k, b), {})


# ------------------------------------------------------------------ specdec

def _specdec_vectors(with_cost: bool):
    def make() -> _Vectors:
        op = "roofline.specdec.speedup" if with_cost else "roofline.specdec.expected_tokens"
        rng = np.random.default_rng(seed_for(op))
        v = _Vectors()

        def add(comment, flags, alpha, k, cost=None, result="valid"):
            inputs = {"alpha": np.asarray(alpha, np.float64) if not isinstance(alpha, np.ndarray) else alpha,
                      "k": np.asarray(k, np.int64) if not isinstance(k, np.ndarray) else k}
            if with_cost:
                inputs["cost"] = (np.zeros(np.shape(inputs["alpha"])) if cost is None
                                  else cost if isinstance(cost, np.ndarray) else np.asarray(cost, np.float64))
            v.add(comment, flags, inputs, result)

        add("the tutorial's a = 0.8, k = 4: 3.3616 tokens per step (k terms give 2.95)", ["BonusToken"],
            [0.8], [4])
        add("k = 0: one token per step, whatever alpha", ["BonusToken"], [0.0, 0.5, 1.0], [0, 0, 0])
        add("alpha = 1: k + 1 tokens (the closed form is 0 / 0)", ["AlphaOne", "BonusToken"],
            [1.0] * 4, [1, 4, 7, 1000])
        # One vector per size of the result: the floor scales with the vector's largest output.
        add("alpha within 2^-20..2^-50 of 1, k = 4: the closed form as written cancels", ["NearOne"],
            [1 - 2.0**-20, 1 - 2.0**-30, 1 - 2.0**-40, 1 - 2.0**-50], [4] * 4)
        add("alpha = 1 - 2^-40, k = 100: the closed form as written cancels", ["NearOne"], [1 - 2.0**-40], [100])
        add("alpha = 1 - 2^-40, k = 10^6: the closed form as written cancels", ["NearOne"], [1 - 2.0**-40],
            [10**6])
        add("alpha = 0: only the target's token", ["BonusToken"], [0.0, 0.0], [1, 64])
        add("exact dyadic alphas 1/2, 3/4, 7/8, 15/16 at k = 1..8", ["BonusToken"],
            np.repeat(_f(0.5, 0.75, 0.875, 0.9375), 8), np.tile(np.arange(1, 9, dtype=np.int64), 4))
        add("large k: the sum approaches 1 / (1 - alpha)", ["NearOne"], [0.5, 0.9375, 0.99609375], [10**9] * 3)
        add("random alphas and draft lengths", ["Random", "BonusToken"], rng.random(30),
            rng.integers(0, 17, 30), cost=rng.random(30) * 0.5 if with_cost else None)
        add("0-d inputs", ["EmptyInput"], np.float64(0.75), np.int64(3),
            cost=np.float64(0.125) if with_cost else None)
        add("empty inputs give an empty output", ["EmptyInput"], np.zeros(0), np.zeros(0, np.int64))
        if with_cost:
            add("the tutorial's a = 0.8, k = 4 with drafts at 1/20, 1/10 and 1 of the target's cost",
                ["BonusToken", "TargetStep"], [0.8] * 3, [4] * 3, cost=_f(0.05, 0.1, 1.0))
            add("a free draft (cost 0) and alpha = 1: speedup k + 1", ["AlphaOne"], [1.0, 1.0], [3, 8],
                cost=_f(0.0, 0.0))
            add("negative cost is rejected", ["InvalidInput"], [0.5], [2], cost=_f(-0.125), result="invalid")
            add("infinite cost is rejected", ["InvalidInput"], [0.5], [2], cost=_f(np.inf), result="invalid")
            add("cost of another shape is rejected", ["InvalidInput"], [0.5], [2], cost=_f(0.1, 0.1),
                result="invalid")
        add("alpha above 1 is rejected", ["InvalidInput"], [1.0 + 2.0**-52], [2], result="invalid")
        add("negative alpha is rejected", ["InvalidInput"], [-0.25], [2], result="invalid")
        add("NaN alpha is rejected", ["InvalidInput", "NaN"], [np.nan], [2], result="invalid")
        add("negative k is rejected", ["InvalidInput"], [0.5], [-1], result="invalid")
        add("float k is rejected (counts are int64)", ["InvalidInput"], [0.5], _f(2.0), result="invalid")
        add("integer alpha is rejected (a float64 probability)", ["InvalidInput"], _i(1), [2], result="invalid")
        add("shapes differ (no broadcasting)", ["InvalidInput"], [0.5, 0.5], [2], result="invalid")
        base = {"alpha": np.float64(0.8), "k": np.int64(4), **({"cost": np.float64(0.125)} if with_cost else {})}
        v += invalid_vectors(Case(base), counts=("k",), reals=("alpha", "cost") if with_cost else ("alpha",))
        return v
    return make


@st.composite
def _specdec_cases(draw, supported, with_cost: bool):
    shape = draw(small_shapes(max_dims=2, max_side=6))
    near = draw(st.booleans())
    alpha = draw(hnp.arrays(np.float64, shape, elements=st.floats(0, 1)))
    if near:  # the cancelling region
        alpha = 1.0 - draw(hnp.arrays(np.float64, shape, elements=st.floats(0, 2.0**-20)))
    inputs = {"alpha": alpha, "k": draw(hnp.arrays(np.int64, shape, elements=st.integers(0, 2**20)))}
    if with_cost:
        inputs["cost"] = draw(hnp.arrays(np.float64, shape, elements=st.floats(0, 4)))
    return Case(inputs, {})


def _alpha_flags(case) -> tuple[str, ...]:
    alpha = np.asarray(case.inputs["alpha"], np.float64)
    return (("AlphaOne",) * bool(np.any(alpha == 1.0)) + ("NearOne",) * bool(np.any((alpha < 1) & (alpha > 0.999)))
            ) or ("Random",)


# ------------------------------------------------------------------ phase_time

def _phase(flops, nbytes, peak, bandwidth) -> dict[str, np.ndarray]:
    return {"flops": np.asarray(flops, np.float64), "bytes": np.asarray(nbytes, np.float64),
            "peak_flops": np.asarray(peak, np.float64), "bandwidth": np.asarray(bandwidth, np.float64)}


def _decades(rng: np.random.Generator, lo: int, hi: int, n: int = 30) -> np.ndarray:
    """n numbers of four significant digits spread over 10^lo..10^hi, each the correctly
    rounded float of an exact rational (no pow whose last bit varies with the platform's
    libm, so the vectors are the same bytes on every NumPy)."""
    mantissas, exponents = rng.integers(1000, 10000, n), rng.integers(lo - 3, hi - 3, n)
    return np.array([m * 10**e if e >= 0 else m / 10**-e for m, e in zip(mantissas.tolist(), exponents.tolist())],
                    dtype=np.float64)


def _phase_vectors() -> _Vectors:
    rng = np.random.default_rng(seed_for("roofline.phase_time"))
    v = _Vectors()
    for overlap in OVERLAP.values:
        v.add(f"the tutorial's Qwen3-8B 40k prefill on a B200 at FP8: 1.03 PFLOP, 16.4 GB ({overlap})",
              ["ComputeBound", "Overlap"], _phase([1.03e15], [16.4e9], [4.5e15], [8e12]), overlap=overlap)
        v.add(f"the tutorial's Qwen3-8B decode token at 40k: 16 GFLOP, 22 GB at 8 TB/s ({overlap})",
              ["MemoryBound", "Overlap"], _phase([16.4e9], [22e9], [2.25e15], [8e12]), overlap=overlap)
        v.add(f"at the ridge point compute and memory take the same time ({overlap})", ["Overlap"],
              _phase([562.5 * 2**33], [2.0**33], [4.5e15], [8e12]), overlap=overlap)
        f = _decades(rng, 6, 18)
        v.add(f"random work across 12 decades on a B200, an H100 and an M3 Ultra ({overlap})",
              ["Random", "MemoryBound", "ComputeBound", "Overlap"],
              _phase(f, f / _decades(rng, -1, 4), np.tile(_f(4.5e15, 989e12, 28.4e12), 10),
                     np.tile(_f(8e12, 3.35e12, 819e9), 10)), overlap=overlap)
    v.add("no work takes no time; no FLOPs is memory time only, no bytes compute time only",
          ["MemoryBound", "ComputeBound"], _phase([0.0, 0.0, 1e12], [0.0, 1e9, 0.0], [1e15] * 3, [1e12] * 3))
    v.add("0-d inputs", ["EmptyInput"], _phase(1e12, 1e9, 1e15, 1e12))
    v.add("empty inputs give an empty output", ["EmptyInput"], _phase([], [], [], []))
    v.add("zero peak FLOP/s is rejected", ["InvalidInput"], _phase([1.0], [1.0], [0.0], [1.0]), result="invalid")
    v.add("negative bandwidth is rejected", ["InvalidInput"], _phase([1.0], [1.0], [1.0], [-1.0]), result="invalid")
    v.add("negative bytes are rejected", ["InvalidInput"], _phase([1.0], [-1.0], [1.0], [1.0]), result="invalid")
    v.add("NaN FLOPs are rejected", ["InvalidInput", "NaN"], _phase([np.nan], [1.0], [1.0], [1.0]),
          result="invalid")
    v.add("infinite bytes are rejected", ["InvalidInput"], _phase([1.0], [np.inf], [1.0], [1.0]), result="invalid")
    v.add("integer FLOPs are rejected (float64 quantities)", ["InvalidInput"],
          {**_phase([1.0], [1.0], [1.0], [1.0]), "flops": _i(1)}, result="invalid")
    v.add("shapes differ (no broadcasting)", ["InvalidInput"], _phase([1.0, 2.0], [1.0], [1.0], [1.0]),
          result="invalid")
    for overlap in OVERLAP.values:
        v.add(f"a time past float64's range (1e300 FLOPs at 1e-10 FLOP/s) is rejected, not inf ({overlap})",
              ["InvalidInput"], _phase([1e300], [0.0], [1e-10], [1.0]), result="invalid", overlap=overlap)
        v += invalid_vectors(Case(_phase(1.03e15, 16.4e9, 4.5e15, 8e12), {"overlap": overlap}),
                             reals=("flops", "bytes", "peak_flops", "bandwidth"))
    return v


@st.composite
def _phase_cases(draw, supported):
    shape = draw(small_shapes(max_dims=2, max_side=6))

    def decades(lo, hi):
        return 10.0 ** draw(hnp.arrays(np.float64, shape, elements=st.floats(lo, hi)))

    zero = draw(hnp.arrays(np.bool_, shape))
    flops = np.where(zero, 0.0, decades(0, 18))
    inputs = _phase(flops, decades(0, 15), decades(9, 17), decades(9, 14))
    return Case(inputs, draw(variant_params(supported)))


def _bound_flags(case) -> tuple[str, ...]:
    i = case.inputs
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.asarray(i["flops"]) / np.asarray(i["peak_flops"])
        memory = np.asarray(i["bytes"]) / np.asarray(i["bandwidth"])
    return (("MemoryBound",) * bool(np.any(memory > compute)) + ("ComputeBound",) * bool(np.any(compute > memory))
            + ("Overlap",)) if compute.size else ("EmptyInput",)


OPERATIONS = [
    AREA.bounded("moe.expected_experts", moe.expected_experts, anchor="expected_experts",
                     summary="distinct experts B tokens touch, each a uniform top-k subset of E",
                     vectors=_expected_experts_vectors, examples=_experts_cases,
                     emulate=emulate.expected_experts, bounds=BOUND,
                     case_flags=lambda case: ("WithoutReplacement", "Saturation")),
    AREA.bounded("specdec.expected_tokens", specdec.expected_tokens, anchor="speculative_decoding",
                     summary="tokens per target forward: sum_{i=0..k} alpha^i",
                     vectors=_specdec_vectors(False), examples=lambda s: _specdec_cases(s, False),
                     emulate=emulate.expected_tokens, bounds=BOUND, case_flags=_alpha_flags),
    AREA.bounded("specdec.speedup", specdec.speedup, anchor="speculative_decoding",
                     summary="expected_tokens / (k * cost + 1) (Leviathan et al., Theorem 3.8)",
                     vectors=_specdec_vectors(True), examples=lambda s: _specdec_cases(s, True),
                     emulate=emulate.speedup, bounds=BOUND, case_flags=_alpha_flags),
    AREA.bounded("phase_time", perf.phase_time, anchor="phase_time",
                     summary="seconds: max (or sum) of flops / peak_flops and bytes / bandwidth",
                     variants=(OVERLAP,), vectors=_phase_vectors, examples=_phase_cases,
                     emulate=emulate.phase_time, bounds=BOUND, case_flags=_bound_flags),
]

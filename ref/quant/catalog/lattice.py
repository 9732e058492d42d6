"""E8 and D8 nearest points (spec/quant.md#e8-nearest): Conway and Sloane's decoder as
exact ops.

  quant.e8.nearest  x [..., 8] -> the nearest E8 point [..., 8] float64
  quant.d8.nearest  x [..., 8] -> the nearest D8 point [..., 8] float64

Vector inputs are dyadic rationals (integers times powers of two), so they are the
same bytes under every NumPy version.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.quant import lattice
from ref.quant.catalog.common import AREA
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.compare import compare_exact
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "E8Coset": Flag("the half-integer coset D8 + 1/2 left out, or decoded with the wrong offset",
                    "a point near (1/2, ..., 1/2) + D8 decodes to an integer point at squared distance near 2"),
    "ParityFix": Flag("an odd coordinate sum repaired on the wrong coordinate or in the wrong direction",
                      "the returned point is in D8 but not the nearest: one coordinate off by one or two"),
    "LatticeTie": Flag("a tie broken by another rule than the spec's (halfway toward zero, the first worst "
                       "coordinate, the D8 point over the coset's)", "an equally near but different lattice point"),
    "NearTie": Flag("distances compared in floating point: two candidates one float64 ulp apart look equal",
                    "the farther of two nearly equidistant points is returned"),
    "LatticeShape": Flag("float16/float32 inputs, 1-d or 3-d stacks mishandled",
                         "a crash, or an output of another shape or dtype"),
}

Q = 2.0**-6  # vector coordinates: integers times 2^-6


def _grid(rng, shape, span: int) -> np.ndarray:
    return rng.integers(-span, span + 1, shape).astype(np.float64) * Q


def _d8_points(rng, n: int) -> np.ndarray:
    p = rng.integers(-3, 4, (n, 8)).astype(np.float64)
    p[:, 0] += p.sum(axis=1) % 2  # even sum
    return p


def _parity_rows(rng) -> np.ndarray:
    """Rows near a D8 point whose rounding has an odd sum, the worst coordinate at each
    position 0..7, on either side of its integer (the repair goes up or down)."""
    rows = []
    for pos in range(8):
        for sign in (1.0, -1.0):
            base = _d8_points(rng, 1)[0]
            noise = rng.integers(-8, 9, 8).astype(np.float64) * Q  # |.| <= 1/8
            noise[pos] = sign * 0.375
            base[(pos + 1) % 8] += 1  # odd sum: the repair is needed
            rows.append(base + noise)
    return np.array(rows)


def _tie_rows() -> dict[str, np.ndarray]:
    e = np.eye(8)
    quarter = np.full(8, 0.25)
    return {
        "halfway coordinates (1.5, 1.5, ...) round toward zero": np.array([[1.5, 1.5, 0, 0, 0, 0, 0, 0],
                                                                            [-1.5, -1.5, 0, 0, 0, 0, 0, 0],
                                                                            [0.5, 0.5, 2.5, 2.5, 0, 0, 0, 0]]),
        "two equally bad coordinates: the first is repaired": np.array([[0.25, 0.25, 1, 0, 0, 0, 0, 0],
                                                                          [0, 0, 0, 1, 0, -0.25, 0, -0.25]]),
        "an odd integer row: the first coordinate goes up (x >= f)": np.stack([e[0], -e[0], 3 * e[5]]),
        "halfway in the coset (x - 1/2 = k + 1/2) rounds toward zero": np.array([[1, 1] + [0.5] * 6, [0, 0] + [0.5] * 6,
                                                                                  [-1, 0] + [-0.5] * 6]),
        "(1/4, ..., 1/4): D8 and its coset equally near, D8 wins": np.stack([quarter, -quarter,
                                                                               quarter + np.arange(8) % 2]),
    }


def _near_ties() -> np.ndarray:
    """One float64 ulp away from the D8/coset tie (1/4, ..., 1/4): the float64 sums of
    squares round to the same number, the exact ones do not."""
    up, down = np.full(8, 0.25), np.full(8, 0.25)
    up[0] += 2.0**-54
    down[3] -= 2.0**-54
    return np.stack([up, down, -up, 1 + up])


def _shape_vectors(rng) -> list[VectorSpec]:
    x = _grid(rng, (4, 8), 128)
    return [
        VectorSpec("float32 coordinates (widened exactly)", ("LatticeShape",), Case({"x": x.astype(np.float32)})),
        VectorSpec("float16 coordinates (widened exactly)", ("LatticeShape",), Case({"x": x.astype(np.float16)})),
        VectorSpec("one vector: 1-d input", ("LatticeShape",), Case({"x": x[0]})),
        VectorSpec("a 3-d stack", ("LatticeShape",), Case({"x": x.reshape(2, 2, 8)})),
        VectorSpec("no vectors", ("EmptyInput",), Case({"x": np.zeros((0, 8))})),
        VectorSpec("a NaN coordinate is rejected", ("InvalidInput", "NaN"),
                   Case({"x": np.where(np.arange(8) == 2, np.nan, x[0])}), "invalid"),
        VectorSpec("an Inf coordinate is rejected", ("InvalidInput",),
                   Case({"x": np.where(np.arange(8) == 5, -np.inf, x[0])}), "invalid"),
        VectorSpec("7 coordinates are rejected, not padded", ("InvalidInput",), Case({"x": x[:, :7]}), "invalid"),
        VectorSpec("integer coordinates are rejected", ("InvalidInput",),
                   Case({"x": np.ones((2, 8), np.int64)}), "invalid"),
        VectorSpec("a 0-d input is rejected", ("InvalidInput",), Case({"x": np.float64(1)}), "invalid"),
        VectorSpec("a coordinate of magnitude 2^50 is rejected", ("InvalidInput",),
                   Case({"x": np.where(np.arange(8) == 0, 2.0**50, x[0])}), "invalid"),
    ]


def _vectors(op: str, coset: bool) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(op))
    specs = [VectorSpec("random dyadic vectors in [-4, 4]", ("Random",), Case({"x": _grid(rng, (64, 8), 256)})),
             VectorSpec("the repair of an odd sum at every position, both directions", ("ParityFix",),
                        Case({"x": _parity_rows(rng)}))]
    specs += [VectorSpec(f"ties: {name}", ("LatticeTie",), Case({"x": rows})) for name, rows in _tie_rows().items()]
    if coset:
        near_coset = _d8_points(rng, 24) + 0.5 + _grid(rng, (24, 8), 12)
        specs += [
            VectorSpec("vectors near D8 + 1/2: the half-integer coset wins", ("E8Coset",), Case({"x": near_coset})),
            VectorSpec("(1/2, ..., 1/2) and its negative are lattice points", ("E8Coset",),
                       Case({"x": np.stack([np.full(8, 0.5), np.full(8, -0.5), np.full(8, 0.5) + 2 * np.eye(8)[1]])})),
            VectorSpec("one float64 ulp from the D8/coset tie", ("NearTie",), Case({"x": _near_ties()})),
        ]
    return specs + _shape_vectors(rng)


def _examples(supported):
    @st.composite
    def case(draw):
        n = draw(st.integers(0, 6), label="rows")
        step = draw(st.sampled_from([0.25, 2.0**-4, 2.0**-10]), label="step")  # coarse steps: many ties
        ints = draw(st.lists(st.integers(-int(4 / step), int(4 / step)), min_size=8 * n, max_size=8 * n),
                    label="coordinates")
        dtype = draw(st.sampled_from([np.float64, np.float32, np.float16]), label="dtype")
        return Case({"x": (np.array(ints, np.float64).reshape(n, 8) * step).astype(dtype)})

    return case()


def _flags(case: Case) -> tuple[str, ...]:
    return ("Random",)


OPERATIONS = [
    AREA.exact("e8.nearest", lattice.e8_nearest, anchor="e8-nearest",
               summary="x [..., 8] -> the nearest point of E8 = D8 u (D8 + 1/2), float64",
               vectors=lambda: _vectors("quant.e8.nearest", True), examples=_examples, compare=compare_exact,
               case_flags=_flags),
    AREA.exact("d8.nearest", lattice.d8_nearest, anchor="e8-nearest",
               summary="x [..., 8] -> the nearest point of D8 (integers of even sum), float64",
               vectors=lambda: _vectors("quant.d8.nearest", False), examples=_examples, compare=compare_exact,
               case_flags=_flags),
]

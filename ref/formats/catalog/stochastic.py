"""Stochastic rounding with explicit random bits, judged exactly.

  formats.F.encode_stochastic   (x [...], rbits [...] uint32) -> codes [...]   (F: every element format)

The magnitude steps up iff discarded_fraction + rbits / 2^32 >= 1, reading the top
`sr_bits` bits of rbits (ref.formats.stochastic). A kernel that draws its own random
numbers is judged by the statistical twin (`stochastic_rng`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.formats.catalog.case_classes import element_flags, ordered
from ref.formats.catalog.element import AREA, LARGE, large_values, policy_variants
from ref.formats.catalog.element_vectors import EncodeVectors, random_magnitudes, tie_probe
from ref.formats.minifloat import FORMATS, FloatFormat, decode, encode
from ref.formats.stochastic import SR_WIDTHS, encode_stochastic
from ref.testing.catalog_types import ExactOp, Flag, Variant, seed_for
from ref.testing.compare import compare_codes
from ref.testing.params import variant_params
from ref.testing.strategies import edge_values, element_inputs, rounding_ties, spread, variant_grid
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "sr_boundary"]

FLAGS = {
    "StochasticRounding": Flag("random bits added at the wrong position or carried wrongly",
                               "stochastic rounding becomes biased: its mean no longer equals the input"),
    "SrBoundary": Flag("stochastic rounding that drops or misplaces the low random bits",
                       "the carry happens one random step late or early: a bias of 2^-16 or more"),
}

F32 = np.float32


def _variants(f: FloatFormat) -> tuple[Variant, ...]:
    sr_bits = Variant("sr_bits", SR_WIDTHS, 32, "random bits read, from the top of rbits (PTX cvt.rs: 16 for "
                      "FP8/FP6/bf16, 13 for f16, 8 for E2M1)")
    return (sr_bits, *policy_variants(f))


def sr_vectors(f: FloatFormat, variants: tuple[Variant, ...]) -> list[VectorSpec]:
    v = EncodeVectors(f, variants)
    rng = np.random.default_rng(seed_for(f"formats.{f.name}.encode_stochastic"))
    rand = random_magnitudes(f, rng)
    ties = spread(rounding_ties(f)[rounding_ties(f) > 0], 480)
    x = v.signs(np.concatenate([tie_probe(f, ties)[:128], rand[:64]]).astype(F32)).astype(F32)
    n = x.size
    v.add("rbits = 0: truncation", ["StochasticRounding"], x, rbits=np.zeros(n))
    v.add("rbits = 2^32 - 1: every inexact value steps away from zero, exact values stay", ["StochasticRounding"],
          x, rbits=np.full(n, 2**32 - 1))
    tie_x = v.signs(ties[:64]).astype(F32)
    v.add("a tie with rbits = 2^31: the carry happens (fraction + 1/2 = 1)", ["StochasticRounding"],
          tie_x, rbits=np.full(tie_x.size, 2**31))
    v.add("a tie with rbits = 2^31 - 1: no carry", ["StochasticRounding"], tie_x, rbits=np.full(tie_x.size, 2**31 - 1))
    v.add("random bits", ["StochasticRounding", "Random"], x, rbits=rng.integers(0, 2**32, n, dtype=np.uint64))
    v.add("16 random bits in the top half (hardware RNG width)", ["StochasticRounding"], x,
          rbits=rng.integers(0, 2**16, n, dtype=np.uint64) << 16)
    for width in SR_WIDTHS[1:]:
        v.add(f"sr_bits={width}: the bits below the top {width} are ignored", ["StochasticRounding"], x,
              rbits=rng.integers(0, 2**32, n, dtype=np.uint64), sr_bits=width)
    _boundaries(v, rand)
    _specials(v, rng)
    v.invalid("float rbits (torch.rand) are rejected", ["InvalidInput", "StochasticRounding"],
              x=x[:4], rbits=np.full(4, 0.5, dtype=np.float32))
    v.invalid("rbits of another shape are rejected, not broadcast", ["InvalidInput", "StochasticRounding"],
              x=x[:4], rbits=np.zeros(1, dtype=np.uint32))
    v.invalid("int32 input is rejected, not converted", ["InvalidInput"],
              x=np.ones(4, dtype=np.int32), rbits=np.zeros(4, dtype=np.uint32))
    return v.specs


def _boundaries(v: EncodeVectors, rand: np.ndarray) -> None:
    """rbits right at the carry, and one random step less, at every width and input dtype."""
    for dt in (F32, np.float16, np.float64):
        for width in SR_WIDTHS:
            x, carry = sr_boundary(v.f, rand, dt, width)
            if not x.size:
                continue
            name = np.dtype(dt).name
            v.add(f"{name}: rbits that just complete the fraction carry (sr_bits={width})",
                  ["StochasticRounding", "SrBoundary"], x, dtype=dt, rbits=carry, sr_bits=width)
            # carry - 1: one random step less in the top `width` bits and every bit below them set,
            # so a kernel that reads more random bits than it declares carries here.
            v.add(f"{name}: one random step less, every ignored low bit set, does not carry (sr_bits={width})",
                  ["StochasticRounding", "SrBoundary"], x, dtype=dt, rbits=carry - 1, sr_bits=width)


def _specials(v: EncodeVectors, rng: np.random.Generator) -> None:
    """Zeros, NaN, Inf, overflow, shapes: what encode does, whatever the random bits."""
    f = v.f
    top = np.nextafter(F32(f.max_normal), F32(np.inf)) if f.max_normal < 3e38 else F32(3.4e38)
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, float(top), -float(top)] if f.signed else \
        [0.0, np.nan, np.inf, float(top), -1.0]
    ones = np.full(len(special), 2**32 - 1)
    for policy in [o.value for o in f.overflow_policies()]:
        v.add(f"zeros, NaN, Inf and just past max, every random bit set ({policy})",
              ["SignedZero" if f.signed else "E8M0", "Infinity", "Overflow", "StochasticRounding"], special,
              rbits=ones, overflow=policy)
    payloads = np.array([0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000],
                        dtype=np.uint32).view(F32)
    v.add("NaN payloads (only in the low bits; all ones) with every random bit set: NaN, never Inf or a number "
          "(a bit trick that adds the random bits to NaN carries into Inf or -0)", ["NaN", "NanPayload",
                                                                                   "StochasticRounding"],
          payloads, rbits=np.full(payloads.size, 2**32 - 1))
    cube = np.abs(random_magnitudes(f, rng, 48)) if not f.signed else random_magnitudes(f, rng, 48)
    v.add("a 3-d float64 input with its 3-d rbits", ["InputRank"], cube.reshape(2, 3, 8), dtype=np.float64,
          rbits=rng.integers(0, 2**32, (2, 3, 8), dtype=np.uint64))
    v.add("empty input gives empty codes", ["EmptyInput"], np.zeros((2, 0)), rbits=np.zeros((2, 0)))
    v.add("a 0-d input gives a 0-d code", ["EmptyInput"], F32(f.min_normal * 1.3), rbits=np.array(2**31))


def sr_boundary(f: FloatFormat, candidates: np.ndarray, dtype, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and the smallest `width`-bit rbits (top-aligned) that make them carry,
    from the definition in exact rationals: up iff fraction + rbits / 2^32 >= 1."""
    with np.errstate(over="ignore"):
        x = np.asarray(candidates, dtype=np.float64).astype(dtype)
    ax = np.abs(x.astype(np.float64))
    lo = np.abs(decode(encode(x, f, rounding="toward_zero", overflow="saturate"), f).astype(np.float64))
    hi = np.abs(decode(encode(np.abs(x), f, rounding="toward_positive", overflow="saturate"), f).astype(np.float64))
    keep = np.isfinite(ax) & (hi > lo) & (ax > lo)
    xs, rb = [], []
    for xi, a, low, high in zip(x[keep], ax[keep], lo[keep], hi[keep]):
        frac = (Fraction(float(a)) - Fraction(float(low))) / (Fraction(float(high)) - Fraction(float(low)))
        need = math.ceil((1 - frac) * (1 << width))  # smallest R with frac + R / 2^width >= 1
        if 1 <= need < (1 << width):
            xs.append(xi)
            rb.append(need << (32 - width))
    return np.array(xs, dtype=dtype)[:48], np.array(rb, dtype=np.uint32)[:48]


def _examples(f: FloatFormat, supported: Mapping[str, Sequence]) -> st.SearchStrategy[Case]:
    @st.composite
    def case(draw):
        x = draw(element_inputs(f), label="x")
        rbits = draw(hnp.arrays(np.uint32, x.shape), label="rbits")
        return Case({"x": x, "rbits": rbits}, draw(variant_params(supported), label="params"))

    return case()


def _sweep(f: FloatFormat, supported: Mapping[str, Sequence]) -> Iterable[Case]:
    """Every float16 bit pattern and every tie +-1 ulp (float32, float64), with seeded
    random bits and with rbits = 2^31 (a tie's carry), under every supported combination."""
    ev32 = edge_values(f, np.float32)
    xs = (np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16),
          np.concatenate([ev32["ties"], ev32["tie_neighbours"]]),
          np.concatenate(list(edge_values(f, np.float64).values())))
    rng = np.random.default_rng(seed_for(f.name))
    for params in variant_grid(supported):
        for x in xs:
            yield Case({"x": x, "rbits": rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)}, params)
            yield Case({"x": x, "rbits": np.full(x.shape, 2**31, dtype=np.uint32)}, params)


def _large(f: FloatFormat, supported: Mapping[str, Sequence]) -> Iterable[Case]:
    rbits = np.random.default_rng(1).integers(0, 2**32, LARGE, dtype=np.uint64).astype(np.uint32)
    yield Case({"x": large_values(f), "rbits": rbits}, {axis: values[-1] for axis, values in supported.items()})


def _op(f: FloatFormat) -> ExactOp:
    variants = _variants(f)
    return AREA.exact(
        f"{f.name}.encode_stochastic", partial(encode_stochastic, fmt=f.name), anchor="encode-stochastic",
        summary=f"(float16/32/64, uint32 random bits) -> {f.name} codes, stochastically rounded",
        variants=variants, vectors=partial(sr_vectors, f, variants), examples=partial(_examples, f),
        compare=partial(compare_codes, fmt=f.name), exhaustive=partial(_sweep, f), large=partial(_large, f),
        array_format=lambda name, arr: f.name if name == "expected" else None, case_flags=_case_flags(f),
    )


def _case_flags(f: FloatFormat):
    """The element classes of x, with StochasticRounding for every value between two codes."""
    def flags(case: Case) -> tuple[str, ...]:
        found = element_flags(case.inputs["x"], f)
        inexact = {"TiesToEven", "RoundingDirection", "Subnormal", "CarryIntoExponent", "Underflow"}
        return ordered((*found, *(("StochasticRounding",) * bool(inexact & set(found)))))

    return flags


OPERATIONS = [_op(f) for f in FORMATS.values()]

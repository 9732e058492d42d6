"""Stochastic rounding by a kernel that draws its own random numbers (PTX `cvt.rs`
fed by a Philox stream): `formats.<fmt>.encode_stochastic_rng`, a statistical op.

The candidate takes `x`, a `seed` and the variants (sr_bits, overflow; nan for the
formats without NaN) and returns one stochastically rounded array of codes; the
oracle, `sr_distribution`, gives each element's two possible codes and the
probability of stepping away from zero. spec/formats.md, "The statistical twin".
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.formats.minifloat import FloatFormat, NanPolicy, decode, get_format
from ref.formats.sr_distribution import SR_FORMATS, SR_WIDTHS, sr_distribution
from ref.testing.catalog_types import Area, Flag, Variant, seed_for
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.statistical import StatisticalOp
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "same_code", "variants"]

AREA = Area("formats", spec="spec/formats.md")

FLAGS = {
    **COMMON,
    "SrTie": Flag("a tie treated as round-to-nearest-even, or the random bits compared with > instead of >=",
                  "values halfway between two codes do not go either way half the time"),
    "SrFraction": Flag("random bits added at the wrong position, or a bias (half an ulp added first)",
                       "the mean of the rounded values is no longer the input"),
    "SrExact": Flag("a representable value that moves (random bits added before an exactness test)",
                    "exact inputs come back one code off now and then"),
    "SrWidth": Flag("fewer (or more) random bits than declared, or the fraction compared at the wrong width",
                    "fractions of about 2^-W step too rarely, or fractions below 2^-W step at all"),
    "SrSign": Flag("negative values stepped toward +Inf (up) instead of away from zero",
                   "negative values are rounded with the complementary probability"),
    "SrOverflow": Flag("the step past the largest finite value not given the overflow policy",
                       "values just above max never reach Inf, or saturating kernels return Inf"),
    "SrIndependence": Flag("neighbouring elements share one random number (a pair or quad unpacked from one "
                           "cvt.rs draw)", "each element is right on its own, but a block's sum swings twice as far: "
                           "the rounding noise no longer averages out"),
    "SrSubnormal": Flag("subnormal targets flushed, or their quantum taken from the normal range",
                        "tiny values round to zero or to the wrong neighbour"),
}


def same_code(a: np.ndarray, b: np.ndarray, fmt: str) -> np.ndarray:
    """Codes that count as the same outcome: equal, or both NaN (any NaN code)."""
    f = get_format(fmt)
    a, b = np.asarray(a), np.asarray(b)
    equal = a == b
    nan = f.is_nan_code(a)
    if not nan.any():
        return equal
    return equal | (nan & f.is_nan_code(b))


def variants(f: FloatFormat) -> tuple[Variant, ...]:
    out = [
        Variant("sr_bits", SR_WIDTHS, 32, "random bits per element (PTX cvt.rs: 16 for FP8/FP6/bf16, 13 for "
                                          "f16, 8 for E2M1); 32 is the ideal"),
        Variant("overflow", tuple(o.value for o in f.overflow_policies()), f.default_overflow.value,
                "the step past max: saturate to max finite, or Inf/NaN"),
    ]
    if not f.has_nan:
        out.append(Variant("nan", tuple(p.value for p in NanPolicy), NanPolicy.MAX.value,
                           "code written for NaN input (declared here: a statistical op has no latitude)"))
    return tuple(out)


def _neighbours(f: FloatFormat) -> tuple[np.ndarray, np.ndarray]:
    """(lo, quantum) for a handful of magnitude codes: subnormal, around 1, near max."""
    mags = np.arange(f.max_code + 1, dtype=np.int64).astype(f.code_dtype)
    table = decode(mags, f).astype(np.float64)
    top = np.append(table, table[-1] + f.ulp_at_max)
    one = int(np.searchsorted(table, 1.0))
    picks = sorted({0, 1, (1 << f.mbits) - 1, one, one + 1, f.max_code // 2, f.max_code - 1})
    picks = [c for c in picks if 0 <= c < f.max_code]
    lo = table[picks]
    return lo, top[np.array(picks) + 1] - lo


def _spread(values, copies: int = 128) -> np.ndarray:
    """Each value repeated `copies` times, both signs: [2 * len(values), copies]."""
    v = np.asarray(values, dtype=np.float64)
    return np.repeat(np.concatenate([v, -v])[:, None], copies, axis=1)


def _vectors(f: FloatFormat) -> list[VectorSpec]:
    specs: list[VectorSpec] = []

    def add(comment, flags, x, dtype=np.float64, result="valid", **params):
        with np.errstate(over="ignore", invalid="ignore"):  # an array already of dtype keeps its bits (NaN payloads)
            x = x if isinstance(x, np.ndarray) and x.dtype == dtype else np.asarray(x, dtype=np.float64).astype(dtype)
        specs.append(VectorSpec(comment, tuple(flags), Case({"x": x}, params), result))

    lo, q = _neighbours(f)
    sub_lo, sub_q = np.array([0.0, f.min_subnormal]), np.array([f.min_subnormal] * 2)
    last_sub = f.min_normal - f.min_subnormal
    add("ties: halfway between neighbouring codes, P(away) = 1/2", ["SrTie", "SrSign", "SrIndependence"],
        _spread(lo + q / 2), dtype=np.float32)
    for num, den in ((1, 4), (3, 4), (1, 8), (5, 8)):
        add(f"fraction {num}/{den} of the quantum: P(away) = {num}/{den}", ["SrFraction", "SrSign"],
            _spread(lo + q * num / den), dtype=np.float32)
    add("fractions 2^-5 + 2^-7 and 1/2 + 2^-6: more than 4 random bits needed (any declared width)",
        ["SrWidth", "SrSign"], _spread(np.concatenate([lo + q * (2.0**-5 + 2.0**-7), lo + q * (0.5 + 2.0**-6)])),
        dtype=np.float32)
    exact = _values(f)
    add("every representable value (both signs): P = 0, it never moves", ["SrExact"], _spread(exact, 4),
        dtype=np.float32)
    for w in SR_WIDTHS:
        # 2^-W x elements x 64 calls must expect >= ~20 steps for a missing step to be seen: 1536 copies at W=16
        add(f"fraction 2^-{w}: steps with probability exactly 2^-{w} (float64 input)", ["SrWidth", "SrSign"],
            _spread(lo + np.ldexp(q, -w), 1536 if w == 16 else 256), sr_bits=w)
        add(f"fraction 2^-{w + 1}, below the {w} random bits: never steps (float64 input)", ["SrWidth"],
            _spread(lo + np.ldexp(q, -w - 1), 256), sr_bits=w)
    for m in (8, 13, 16):
        add(f"fraction 2^-{m} - 2^-32 at 32 bits: P = 2^-{m} - 2^-32, never steps with only {m} random bits read",
            ["SrWidth"], _spread(lo + q * (2.0**-m - 2.0**-32), 1536 if m == 16 else 256), sr_bits=32)
    top = f.max_normal + f.ulp_at_max
    for policy in f.overflow_policies():
        add(f"just above max (fractions 1/4, 1/2, 3/4): the step overflows ({policy.value})", ["SrOverflow"],
            _spread(f.max_normal + f.ulp_at_max * np.array([0.25, 0.5, 0.75])), overflow=policy.value)
        add(f"max + ulp and beyond: overflow whatever the random bits ({policy.value})", ["SrOverflow"],
            _spread([top, 2 * top, 1e300], 8), overflow=policy.value)
        add(f"Inf, NaN (a payload in the low bits too), zeros: deterministic ({policy.value})", [NAN],
            np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0]), overflow=policy.value)
    payload = np.array([0x7F800001, 0xFF800001, 0x7FC00000], dtype=np.uint32).view(np.float32)
    add("NaN with its payload only in the low bits: NaN, never Inf", [NAN], payload, dtype=np.float32)
    add("subnormals: below the smallest, between the first two, and below min normal", ["SrSubnormal"],
        _spread(np.concatenate([sub_lo + sub_q * 0.25, sub_lo + sub_q * 0.75, [last_sub + f.min_subnormal / 2]])),
        dtype=np.float32)
    if f.mbits < 10:
        add("float16 input", ["SrFraction"], _spread((lo + q * 3 / 4)[lo + q < 60000]), dtype=np.float16)
    else:
        add("float16 input: exact in float16, never moves", ["SrExact"], _spread([1.0, 1.5, 65504.0], 8),
            dtype=np.float16)
    rng = np.random.default_rng(seed_for(f"formats.{f.name}.encode_stochastic_rng"))
    scale = f.max_normal / 4
    add("random values across the range", [RANDOM], rng.standard_normal(512) * scale, dtype=np.float32)
    add("an empty array", [EMPTY_INPUT], np.zeros((0, 3)), dtype=np.float32)
    add("a 0-d array (a tie)", [EMPTY_INPUT], np.float64(lo[-1] + q[-1] / 2), dtype=np.float32)
    for bad, what in ((np.int32, "int32"), (np.uint16, "uint16 (a bit pattern)"), (np.bool_, "bool")):
        specs.append(VectorSpec(f"{what} input is rejected, never converted", (INVALID_INPUT,),
                                Case({"x": np.ones(4, dtype=bad)}, {}), "invalid"))
    return specs


def _values(f: FloatFormat) -> np.ndarray:
    """A sample of the format's finite non-negative values (all of them for 8 bits or fewer)."""
    mags = np.arange(f.max_code + 1, dtype=np.int64)
    if mags.size > 512:
        mags = np.unique(np.concatenate([mags[:64], mags[-64:], mags[:: mags.size // 384]]))
    return decode(mags.astype(f.code_dtype), f).astype(np.float64)


@st.composite
def _example(draw, f: FloatFormat, supported) -> Case:
    """A few magnitudes, each repeated so that its class is large enough to test."""
    params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
    dtype = draw(st.sampled_from([np.float32, np.float64] + ([np.float16] if f.mbits <= 10 else [])), label="dtype")
    lo, q = _neighbours(f)
    parts = []
    for _ in range(draw(st.integers(1, 4), label="values")):
        i = draw(st.integers(0, lo.size - 1))
        den = 1 << draw(st.integers(1, 10))
        frac = draw(st.integers(0, den - 1)) / den
        sign = draw(st.sampled_from([1.0, -1.0]))
        parts.append(np.full(draw(st.integers(16, 256)), sign * (lo[i] + q[i] * frac)))
    if draw(st.booleans(), label="beyond max"):
        parts.append(np.full(64, f.max_normal + f.ulp_at_max * draw(st.sampled_from([0.25, 0.5, 0.75]))))
    with np.errstate(over="ignore"):
        x = np.concatenate(parts).astype(dtype)
    return Case({"x": x}, params)


def _examples(f: FloatFormat):
    return lambda supported: _example(f, supported)


def _op(name: str) -> StatisticalOp:
    f = get_format(name)
    return AREA.declare(
        StatisticalOp, f"{name}.encode_stochastic_rng", partial(sr_distribution, fmt=name),
        anchor="statistical-twin",
        summary=f"float16/32/64 -> {name} codes, stochastically rounded with the kernel's own random bits",
        vectors=partial(_vectors, f), examples=_examples(f), variants=variants(f),
        calls=64, false_alarm=1e-6, same=partial(same_code, fmt=name),
        array_format=lambda key, arr: name if key == "outcomes" else None,
    )


OPERATIONS = [_op(name) for name in SR_FORMATS]

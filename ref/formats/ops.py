"""Catalog declarations of the formats area.

The only file of the area that reaches up to `ref.testing` (catalog types,
comparators, strategies, vector specs); `ref.conformance.catalog` discovers it.

  formats.F.encode              x [, rbits] -> codes            (F: every element format)
  formats.F.decode              codes -> float32 values
  formats.float4_e2m1fn.pack    codes [..., 2n] -> bytes [..., n]
  formats.float4_e2m1fn.unpack  bytes [..., n] -> codes [..., 2n]

(The block formats, MX, NVFP4, integer groups and scale layouts, are declared in
ref/formats/catalog/.)

All are exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.testing.operations import Flag, Kind, Op, Variant, seed_for
from ref.formats.minifloat import (
    FORMATS,
    FloatFormat,
    NanPolicy,
    NegativePolicy,
    Rounding,
    decode,
    encode,
)
from ref.formats.packing import NIBBLE_ORDERS, pack_fp4, unpack_fp4
from ref.testing.compare import (
    compare_codes,
    compare_exact,
    compare_values,
)
from ref.testing.golden import Case, VectorSpec
from ref.testing.strategies import (
    FLOAT_DTYPES,
    codes,
    edge_arrays,
    edge_values,
    float_bits_arrays,
    realistic_arrays,
    representable_values,
    rounding_ties,
    small_shapes,
)

SPEC = "spec/formats.md"

FLAGS = {
    "SignedZero": Flag("the sign of zero is dropped or invented",
                       "-0 encodes as +0 (or the reverse); 1/x and sign tests flip"),
    "NoNegativeZero": Flag("an FNUZ encoder keeps the sign bit on a zero result",
                           "0x80 is NaN in FNUZ formats: a tiny negative value becomes NaN"),
    "Subnormal": Flag("subnormal results flushed to zero (FTZ) or mis-scaled",
                      "small magnitudes vanish; error near zero grows by orders of magnitude"),
    "InputSubnormal": Flag("subnormal inputs treated as zero (DAZ)",
                           "float32 subnormals lose their bfloat16/E8M0 codes"),
    "MinNormal": Flag("the subnormal/normal boundary off by one binade",
                      "values near the smallest normal are off by a factor of two"),
    "MaxNormal": Flag("the largest finite value treated as overflow, or its code miscounted",
                      "the top code of the format is lost"),
    "RoundTrip": Flag("a representable value does not encode to its own code",
                      "lossless data changes on a round trip"),
    "TiesToEven": Flag("ties rounded away from zero or up instead of to the even code",
                       "a half-ulp bias on every tie: systematic drift in accumulations"),
    "RoundingDirection": Flag("truncation, or the wrong neighbour just off a tie",
                              "errors of up to one ulp where half is the bound"),
    "CarryIntoExponent": Flag("a mantissa rounding up past all ones does not carry into the exponent",
                              "the value falls a whole binade"),
    "OverflowBoundary": Flag("the overflow threshold placed at max instead of max plus half an ulp",
                             "values between max and the tie overflow or saturate wrongly "
                             "(ml_dtypes' E4M3FN NaN above 464 is this boundary)"),
    "Overflow": Flag("overflow policy not honoured: NaN/Inf where the policy saturates, or a clamp where it does not",
                     "a saturating kernel emits NaN that poisons a whole tile, or the reverse hides overflow"),
    "Infinity": Flag("Inf input mishandled (NaN, zero, or the wrong saturation)",
                     "an infinite input comes out as a number, or the wrong one"),
    "NaN": Flag("NaN input not propagated",
                "NaN silently becomes a finite value and hides a divergence"),
    "NanNoNanFormat": Flag("(latitude) NaN into a format without NaN",
                           "implementation-defined: result 'acceptable', each variant's code stored"),
    "Underflow": Flag("values at or below half the smallest subnormal round the wrong way",
                      "tiny values become zero where they should not, or the reverse"),
    "DoubleRounding": Flag("float64 input rounded to float32 before encoding",
                           "inputs just off a tie land on it and round the wrong way"),
    "Float16Input": Flag("float16 input reinterpreted or widened wrongly",
                         "half-precision activations encode to wrong codes"),
    "DirectedRounding": Flag("a directed rounding mode implemented as another (floor as truncation...)",
                             "scales or codes one step off for one sign"),
    "TiesAway": Flag("round-half-away implemented as round-half-even or as ceiling",
                     "ties go the wrong way in the declared ties-away variant"),
    "StochasticRounding": Flag("random bits added at the wrong position or carried wrongly",
                               "stochastic rounding becomes biased: its mean no longer equals the input"),
    "E8M0": Flag("E8M0 special cases: zero, negatives, Inf, NaN, values below 2^-127",
                 "a scale of zero or a negative amax yields a number instead of NaN"),
    "ScaleCeil": Flag("an E8M0 scale computed by floor (truncation) instead of ceiling in .rp mode",
                      "the block maximum overflows the element format after division by the scale"),
    "Exhaustive": Flag("any single wrong code in a decoder table",
                       "one value of the format decodes wrong"),
    "NibbleOrder": Flag("FP4 nibbles packed high-first where low-first is declared, or the reverse",
                        "every element pair is swapped: the tensor is silently permuted"),
    "DirtyBits": Flag("bits above a code's width (in its byte) masked instead of rejected, rejected in a packed "
                      "byte that has no spare bits, or written where they must be zero",
                      "a corrupt or misaligned buffer decodes as numbers, or valid packed data is refused"),
    "InputRank": Flag("an input of another rank (0-d, 1-d, 3-d and more) flattened, squeezed or refused",
                      "a single row or a batch of matrices comes back in another shape, or fails"),
    "RaggedGroup": Flag("a last axis that is not a multiple of the group (or word) size padded or truncated "
                        "instead of rejected", "the tail of each row is quantized in a made-up group, or dropped"),
    "DegenerateGroup": Flag("a group whose scale underflows float32 (tiny or subnormal weights) divided by a "
                            "zero scale instead of the 2^-23 floor",
                            "codes come from casting NaN or Inf to an integer (platform-dependent); zeros miss "
                            "the zero point"),
    "EmptyInput": Flag("empty or 0-d arrays crash (a reduction over no elements) or change shape",
                       "a zero-token batch or a scalar brings down the kernel or comes back reshaped"),
    "NanPayload": Flag("NaN recognised by its quiet bit or high payload only",
                       "a NaN whose payload sits in the low bits rounds into Inf or a number"),
    "SrBoundary": Flag("stochastic rounding that drops or misplaces the low random bits",
                       "the carry happens one random step late or early: a bias of 2^-16 or more"),
    "ScaleRule": Flag("the shared exponent computed by another rule than the declared one (floor, ceil, even, rceil)",
                      "every block whose amax is not a power of two gets a scale one step off"),
    "Log2Float32": Flag("floor(log2(amax)) taken with a float32 log2, which rounds up just below a power of two",
                        "blocks with amax just under 2^k get a scale one step too large"),
    "ZeroBlock": Flag("an all-zero block's scale computed from log2(0)",
                      "the scale wraps, goes NaN, or differs from the smallest scale 2^-127"),
    "NanBlock": Flag("NaN or Inf in a block ignored (nanmax) or turned into zero",
                     "a poisoned block decodes as numbers instead of NaN"),
    "ElementSaturation": Flag("elements past the element max not clamped after division by the scale",
                              "under the floor rule amax/2^X can exceed max: NaN or Inf elements appear"),
    "RecipeOrder": Flag("another recipe's float32 operation order (or a fused/reassociated one)",
                        "block scales or codes differ from the declared recipe where intermediates meet a tie"),
    "E4M3Rounding": Flag("the block scale left in float32 instead of rounded to E4M3",
                         "elements are scaled by a value the stored scale cannot reproduce"),
    "ScaleClamp": Flag("torchao's 2^-6 floor on the block scale missing, or applied to a recipe without it",
                       "small-magnitude blocks get another scale (and zero blocks another code)"),
    "LayoutTranspose": Flag("the 128x4 scale layout with rows and columns (or its 32-row interleave) swapped",
                            "a GEMM reads every block with another block's scale"),
    "LayoutPadding": Flag("scale rows not padded to 128 (or columns to 4), or padding left uninitialised",
                          "tiles after the first are misaligned, or garbage scales feed padded rows"),
    "ZeroPoint": Flag("zero point off by one (GPTQ v1's stored zero - 1 applied twice or not at all)",
                      "every weight of a group shifts by one quantization step"),
    "WordOrder": Flag("INT4 codes packed into int32 in GPTQ's order where AWQ's is declared, or the reverse",
                      "the eight weights of every word are permuted"),
    "GlobalAmax": Flag("a tensor amax of 0, NaN or Inf used as is for the NVFP4 global scale",
                       "a division by zero or a NaN spreads to every block of the tensor"),
    "DequantOrder": Flag("a float32 dequantization in another order than declared (the scales multiplied "
                         "first, or the exact product rounded once)",
                         "values one float32 ulp off where an element of 1.5, 3 or 6 meets an inexact scale product"),
    "InfBlock": Flag("an Inf in an MX block given a finite scale (read from the exponent bits of Inf) or ignored",
                     "the poisoned block decodes as saturated numbers instead of NaN"),
    "SmallestScale": Flag("elements of a block at the MX scale 2^-127 divided by another power of two (2^-126, "
                          "float32's smallest normal, or 1)", "tiny blocks lose a bit of every element, or all of them"),
    "GlobalScale": Flag("a zero, negative, infinite or NaN NVFP4 global scale accepted",
                        "dequantized values silently become Inf or NaN, or change sign"),
    "Hadamard": Flag("the random Hadamard transform with another sign vector, order or scale, or the global "
                     "amax taken before it", "every code of the transformed tensor is off"),
    "InvalidInput": Flag("bad input accepted silently",
                         "a wrong dtype or shape is reinterpreted instead of rejected"),
    "Random": Flag("any bug the curated vectors miss",
                   "random values across the format's range"),
}

_RNE = Rounding.NEAREST_EVEN.value
SR_WIDTHS = ("32", "16", "13", "8")
_DIRECTED = (Rounding.TOWARD_ZERO.value, Rounding.TOWARD_POSITIVE.value, Rounding.TOWARD_NEGATIVE.value)


def _variants(f: FloatFormat) -> tuple[Variant, ...]:
    out = [
        Variant("rounding", tuple(r.value for r in Rounding), _RNE,
                "rounding mode; stochastic takes rbits (uint32), up iff fraction + rbits/2^32 >= 1"),
        Variant("overflow", tuple(o.value for o in f.overflow_policies()), f.default_overflow.value,
                "saturate to max finite (PTX .satfinite) or go to Inf/NaN"),
        Variant("sr_bits", SR_WIDTHS, "32",
                "random bits stochastic rounding reads, from the top of rbits (PTX cvt.rs: 16 for "
                "FP8/FP6/bf16, 13 for f16, 8 for E2M1)"),
    ]
    if not f.signed:
        out.append(Variant("negative", tuple(p.value for p in NegativePolicy), NegativePolicy.NAN.value,
                           "zero and negative input: NaN (ml_dtypes) or the code of |x|, zero giving the "
                           "smallest value (torch, CUDA's host conversion)"))
    if not f.has_nan:
        out.append(Variant("nan", tuple(p.value for p in NanPolicy), NanPolicy.MAX.value,
                           "code written for NaN input: +max (PTX), +0, or ml_dtypes' zero of flipped sign",
                           latitude=True))
    return tuple(out)


def _sample(values: np.ndarray, n: int) -> np.ndarray:
    """All of `values` if few, else both ends and an even spread (deterministic)."""
    if values.size <= n:
        return values
    idx = np.unique(np.concatenate([np.arange(16), np.linspace(0, values.size - 1, n).astype(int),
                                    np.arange(values.size - 16, values.size)]))
    return values[idx]


def _both_signs(v) -> np.ndarray:
    v = np.atleast_1d(np.asarray(v, dtype=np.float64))
    return np.concatenate([v, -v])


class _Vectors:
    """Collects `VectorSpec`s for one encode op with the op's defaults filled in."""

    def __init__(self, f: FloatFormat):
        self.f = f
        self.defaults = {v.name: v.default for v in _variants(f)}
        self.specs: list[VectorSpec] = []

    def add(self, comment, flags, x, *, dtype=np.float32, result="valid", rbits=None, **params):
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.asarray(x, dtype=np.float64).astype(dtype) if np.asarray(x).dtype != dtype else np.asarray(x)
        inputs = {"x": x} if rbits is None else {"x": x, "rbits": np.asarray(rbits, dtype=np.uint32)}
        latitude = ()
        if not self.f.has_nan and np.isnan(x).any() and result == "valid":
            result, latitude = "acceptable", ("nan",)
            flags = (*flags, "NanNoNanFormat")
            params = {"nan": self.defaults["nan"], **params}
        self.specs.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result, latitude))


def _encode_vectors(f: FloatFormat) -> list[VectorSpec]:
    v = _Vectors(f)
    rng = np.random.default_rng(seed_for(f"formats.{f.name}.encode"))
    values = representable_values(f)
    ties = _sample(rounding_ties(f)[rounding_ties(f) > 0], 480)
    tiny, mx = f.min_subnormal, f.max_normal
    f32 = np.float32
    both = ", both signs" if f.signed else ""
    policies = [o.value for o in f.overflow_policies()]

    if f.has_zero:
        if f.has_negative_zero:
            v.add("+0 and -0 keep their sign", ["SignedZero"], [0.0, -0.0])
        else:
            v.add("-0 encodes as +0: FNUZ has no negative zero (0x80 is NaN)", ["NoNegativeZero"], [0.0, -0.0])
    else:
        v.add("zero and -0 have no E8M0 code: NaN", ["E8M0"], [0.0, -0.0])
    signs = _both_signs if f.signed else np.atleast_1d
    if f.has_subnormals:
        v.add(f"smallest subnormal{both}", ["Subnormal"], signs([tiny]))
        v.add(f"largest subnormal{both}", ["Subnormal"], signs([f.min_normal - tiny]))
        v.add("largest subnormal plus half an ulp carries into the smallest normal", ["CarryIntoExponent", "Subnormal"],
              signs([f.min_normal - tiny / 2]))
        v.add("half the smallest subnormal is a tie with zero: rounds to zero", ["Underflow", "TiesToEven"],
              signs([tiny / 2]))
        v.add("just above half the smallest subnormal rounds up to it", ["Underflow", "Subnormal"],
              signs(np.nextafter(f32(tiny / 2), f32(1))))
        v.add("far below the subnormal range rounds to zero", ["Underflow"], signs([tiny / 5, 1e-30, 1e-40]))
    else:
        v.add("values below 2^-127 have no smaller code: they give 2^-127", ["E8M0", "Underflow"],
              [tiny / 2, tiny / 3, 1e-40, np.nextafter(f32(tiny), f32(0))])
    v.add(f"smallest normal{both}", ["MinNormal"], signs([f.min_normal]))
    v.add(f"largest finite value{both}", ["MaxNormal"], signs([mx]))
    v.add("every listed representable value encodes to its own code", ["RoundTrip"],
          signs(_sample(values[values > 0], 400)))
    top_odd = (f.max_code & 1) == 1
    boundary = mx + f.ulp_at_max / 2
    for policy in policies:
        if top_odd:
            comment = f"max plus half an ulp: a tie whose even neighbour is past max ({policy})"
        else:
            comment = f"max plus half an ulp: a tie that rounds to the even max ({policy})"
        v.add(comment, ["OverflowBoundary"], signs([boundary]), overflow=policy)
        v.add(f"one float32 ulp past the overflow tie overflows ({policy})", ["OverflowBoundary", "Overflow"],
              signs(np.nextafter(f32(boundary), f32(np.inf))), overflow=policy)
        v.add(f"one float32 ulp below the overflow tie stays at max ({policy})", ["OverflowBoundary"],
              signs(np.nextafter(f32(boundary), f32(0))), overflow=policy)
        v.add(f"large finite values overflow ({policy})", ["Overflow"],
              signs([2 * mx, 1e30, float(np.finfo(np.float32).max)]) if mx < 1e38 else
              signs([float(np.finfo(np.float32).max)]), overflow=policy)
        v.add(f"+-Inf ({policy})", ["Infinity"], signs([np.inf]), overflow=policy)
    if f.signed:
        v.add("NaN of both signs", ["NaN"], [np.nan, -np.nan])
    else:
        v.add("NaN and negative values are NaN in E8M0", ["E8M0", "NaN"], [np.nan, -1.0, -tiny, -np.inf])
    v.add("every rounding tie rounds to the even code", ["TiesToEven"], signs(ties))
    v.add("one float32 ulp above each tie rounds away from zero", ["RoundingDirection"],
          signs(np.nextafter(ties.astype(f32), f32(np.inf))))
    v.add("one float32 ulp below each tie rounds toward zero", ["RoundingDirection"],
          signs(np.nextafter(ties.astype(f32), f32(0))))
    binade_tops = values[(values > f.min_normal) & (np.frexp(values)[0] == 0.5)]  # powers of two
    v.add("ties just below each power of two carry into the next binade", ["CarryIntoExponent", "TiesToEven"],
          signs(binade_tops - _ulp_below(values, binade_tops) / 2))
    sub32 = np.array([1, 2**10, 2**21, 2**22, 2**22 + 1, 2**22 + 2**21, 2**23 - 1], dtype=np.uint32).view(f32)
    v.add("float32 subnormal inputs are values, not zeros (no DAZ)", ["InputSubnormal"], signs(sub32))
    # Log-uniform magnitudes built exactly (mantissa times a power of two): np.exp and
    # np.log round differently from one numpy version to the next.
    top = min(mx * 2, 3e38)
    exponents = rng.integers(np.frexp(tiny / 4)[1], np.frexp(top)[1] + 1, 256)
    magnitudes = np.minimum(np.ldexp(rng.uniform(0.5, 1.0, 256), exponents), top)
    rand = magnitudes * (rng.choice([-1.0, 1.0], 256) if f.signed else 1.0)
    v.add("random float32 values across the format's range, as a 16x16 matrix", ["Random"], rand.reshape(16, 16))

    # float64 inputs just off a tie: a float32 detour lands exactly on the tie.
    eps = np.ldexp(1.0, -40)
    t64 = ties.astype(np.float64)
    off = np.concatenate([t64 * (1 + eps), t64 * (1 - eps)])
    v.add("float64 inputs just off a tie round once, not through float32", ["DoubleRounding"],
          signs(off), dtype=np.float64)
    v.add("random float64 values, as a 4x8x8 array", ["Random"],
          (rand.astype(np.float64) * (1 + rng.uniform(-1e-9, 1e-9, 256))).reshape(4, 8, 8), dtype=np.float64)
    half = rand[np.abs(rand) < 6e4][:128].astype(np.float16)
    v.add("float16 inputs, as a matrix", ["Float16Input"], half.reshape(-1, 8), dtype=np.float16)
    f16_edges = np.concatenate(list(edge_values(f, np.float16).values()))
    v.add("float16 edge values: ties, neighbours, subnormals, specials", ["Float16Input", "TiesToEven"],
          f16_edges, dtype=np.float16)
    v.add("big-endian float32 input: the same values, another byte order", ["Random"],
          rand[:32].astype(">f4"), dtype=np.dtype(">f4"))
    for dt in (f32, np.float16, np.float64):
        with np.errstate(over="ignore"):
            cube = rand[:48].astype(dt)
        v.add(f"a 3-d {np.dtype(dt).name} input keeps its shape", ["InputRank"], cube.reshape(2, 3, 8), dtype=dt)
    for bad in (np.int32, np.uint16, np.bool_):
        v.specs.append(VectorSpec(f"{np.dtype(bad).name} input is rejected, not converted", ("InvalidInput",),
                                  Case({"x": np.ones(4, dtype=bad)}, {}), "invalid"))
    v.add("empty input gives empty codes", ["EmptyInput"], np.zeros((2, 0)))
    v.add("a 0-d input gives a 0-d code", ["EmptyInput"], np.float32(np.median(values[values > 0]) * 1.01))
    nan32 = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0x7FC00001],
                     dtype=np.uint32).view(f32)
    v.add("NaN payloads: quiet, signalling, payload only in the low bits, both signs", ["NaN", "NanPayload"], nan32)
    nan64 = np.array([0x7FF8000000000000, 0x7FF0000000000001, 0xFFF0000000000001, 0x7FF0000000100000],
                     dtype=np.uint64).view(np.float64)
    v.add("float64 NaN payloads", ["NaN", "NanPayload"], nan64, dtype=np.float64)
    v.add("float16 NaN payloads", ["NaN", "NanPayload", "Float16Input"],
          np.array([0x7E00, 0x7C01, 0xFC01, 0x7D00], dtype=np.uint16).view(np.float16), dtype=np.float16)

    # Directed and ties-away rounding.
    probe = np.concatenate([ties, np.nextafter(ties.astype(f32), f32(0)), np.nextafter(ties.astype(f32), f32(np.inf)),
                            _sample(values[values > 0], 64)])
    for mode in _DIRECTED:
        for policy in policies:
            v.add(f"{mode}: ties and their neighbours ({policy})", ["DirectedRounding"], signs(probe),
                  rounding=mode, overflow=policy)
            v.add(f"{mode}: finite overflow and Inf ({policy})", ["DirectedRounding", "Overflow"],
                  signs([2 * mx if mx < 1e38 else 3.4e38, np.inf]), rounding=mode, overflow=policy)
    exact = _sample(values[values > 0], 96)
    for dt, name in ((np.float64, "float64"), (f32, "float32")):
        near = np.concatenate([np.nextafter(exact.astype(dt), dt(np.inf)), np.nextafter(exact.astype(dt), dt(0))])
        for mode in _DIRECTED:
            v.add(f"{mode}: {name} one ulp either side of representable values (and powers of two)",
                  ["DirectedRounding", "ScaleCeil" if not f.signed else "RoundingDirection"], signs(near),
                  dtype=dt, rounding=mode, overflow="saturate")
    for policy in policies:
        v.add(f"nearest_away: ties go away from zero ({policy})", ["TiesAway"], signs(probe),
              rounding=Rounding.NEAREST_AWAY.value, overflow=policy)
    if not f.signed:
        v.add("magnitude: zero and -0 give the smallest value, 2^-127", ["E8M0"], [0.0, -0.0],
              negative="magnitude")
        v.add("magnitude: negative values encode |x|; NaN and Inf stay special", ["E8M0"],
              np.concatenate([-rand[:32], [-np.inf, np.nan, -tiny]]), negative="magnitude")
        v.add("toward_positive: E8M0 scales round up (PTX .rp), e.g. amax/6", ["ScaleCeil", "DirectedRounding"],
              np.concatenate([rand / 6, [3.0, 5.0, 6.0, 0.75, 1.0 + 2**-20]]), rounding="toward_positive")

    # Stochastic rounding: the random bits are an input.
    sr_x = np.concatenate([probe[:128], rand[:64]]).astype(f32)
    sr_x = signs(sr_x).astype(f32)
    n = sr_x.size
    v.add("stochastic, rbits = 0: truncation", ["StochasticRounding"], sr_x,
          rbits=np.zeros(n), rounding="stochastic")
    v.add("stochastic, rbits = 2^32 - 1: every inexact value steps away from zero", ["StochasticRounding"], sr_x,
          rbits=np.full(n, 2**32 - 1), rounding="stochastic")
    tie_x = signs(ties[:64]).astype(f32)
    v.add("stochastic, tie with rbits = 2^31: the carry happens (fraction + 1/2 = 1)", ["StochasticRounding"],
          tie_x, rbits=np.full(tie_x.size, 2**31), rounding="stochastic")
    v.add("stochastic, tie with rbits = 2^31 - 1: no carry", ["StochasticRounding"],
          tie_x, rbits=np.full(tie_x.size, 2**31 - 1), rounding="stochastic")
    v.add("stochastic, random bits", ["StochasticRounding", "Random"], sr_x,
          rbits=rng.integers(0, 2**32, n, dtype=np.uint64), rounding="stochastic")
    v.add("stochastic, 16 random bits in the top half (hardware RNG width)", ["StochasticRounding"], sr_x,
          rbits=rng.integers(0, 2**16, n, dtype=np.uint64) << 16, rounding="stochastic")

    for dt in (f32, np.float16, np.float64):
        for width in SR_WIDTHS:
            x, carry = _sr_boundary(f, rand, dt, int(width))
            if x.size:
                dname = np.dtype(dt).name
                v.add(f"stochastic, {dname}: rbits that just complete the fraction carry (sr_bits={width})",
                      ["StochasticRounding", "SrBoundary"], x, dtype=dt, rbits=carry, rounding="stochastic",
                      sr_bits=width)
                # carry - 1: one random step less in the top `width` bits and every bit below them set,
                # so a kernel that reads more random bits than it declares carries here.
                v.add(f"stochastic, {dname}: one random step less, every ignored low bit set, does not carry "
                      f"(sr_bits={width})", ["StochasticRounding", "SrBoundary"], x, dtype=dt, rbits=carry - 1,
                      rounding="stochastic", sr_bits=width)
    for width in SR_WIDTHS[1:]:
        v.add(f"stochastic, sr_bits={width}: the bits below the top {width} are ignored", ["StochasticRounding"],
              sr_x, rbits=rng.integers(0, 2**32, n, dtype=np.uint64), rounding="stochastic", sr_bits=width)
    v.specs.append(VectorSpec("stochastic rounding with float rbits (torch.rand) is rejected",
                              ("InvalidInput", "StochasticRounding"),
                              Case({"x": sr_x[:4], "rbits": np.full(4, 0.5, dtype=np.float32)},
                                   {"rounding": "stochastic"}), "invalid"))
    v.specs.append(VectorSpec("stochastic rounding with rbits of another shape is rejected, not broadcast",
                              ("InvalidInput", "StochasticRounding"),
                              Case({"x": sr_x[:4], "rbits": np.zeros(1, dtype=np.uint32)},
                                   {"rounding": "stochastic"}), "invalid"))
    return v.specs


def _sr_boundary(f: FloatFormat, candidates: np.ndarray, dtype, width: int):
    """Inputs and the smallest `width`-bit rbits (top-aligned) that make them carry,
    from the definition in exact rationals: up iff fraction + rbits / 2^32 >= 1."""
    with np.errstate(over="ignore"):
        x = np.asarray(candidates, dtype=np.float64).astype(dtype)
    ax = np.abs(x.astype(np.float64))
    lo = np.abs(decode(encode(x, f, rounding="toward_zero", overflow="saturate"), f).astype(np.float64))
    hi = np.abs(decode(encode(np.abs(x), f, rounding="toward_positive", overflow="saturate"), f).astype(np.float64))
    keep = np.isfinite(ax) & (hi > lo) & (ax > lo)
    xs, rb = [], []
    for xi, a, l, h in zip(x[keep], ax[keep], lo[keep], hi[keep]):
        frac = (Fraction(float(a)) - Fraction(float(l))) / (Fraction(float(h)) - Fraction(float(l)))
        need = math.ceil((1 - frac) * (1 << width))  # smallest R with frac + R / 2^width >= 1
        if 1 <= need < (1 << width):
            xs.append(xi)
            rb.append(need << (32 - width))
    return np.array(xs, dtype=dtype)[:48], np.array(rb, dtype=np.uint32)[:48]


def _ulp_below(values: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Spacing of the format just below each of `points` (which are in `values`)."""
    idx = np.searchsorted(values, points)
    return values[idx] - values[idx - 1]


def _decode_vectors(f: FloatFormat) -> list[VectorSpec]:
    specs = []
    if f.nbits <= 8:
        specs.append(VectorSpec("every code of the format", ("Exhaustive",),
                                Case({"codes": np.arange(1 << f.nbits).astype(f.code_dtype)})))
    else:
        rng = np.random.default_rng(seed_for(f"formats.{f.name}.decode"))
        edges = [0, f.sign_mask, 1, f.sign_mask | 1, (1 << f.mbits) - 1, 1 << f.mbits, f.max_code,
                 f.sign_mask | f.max_code, f.inf_code, f.sign_mask | f.inf_code, f.nan_code, f.sign_mask | f.nan_code,
                 f.inf_code + 1]
        specs.append(VectorSpec("zeros, subnormal and normal extremes, Inf, NaN", ("SignedZero", "Subnormal",
                                "MaxNormal", "Infinity", "NaN"), Case({"codes": np.array(edges, dtype=f.code_dtype)})))
        specs.append(VectorSpec("random codes", ("Random",),
                                Case({"codes": rng.integers(0, 1 << f.nbits, 512).astype(f.code_dtype)})))
        specs.append(VectorSpec("every subnormal code", ("Subnormal",),
                                Case({"codes": np.arange(1 << f.mbits).astype(f.code_dtype)})))
    specs.append(VectorSpec("empty codes give empty values", ("EmptyInput",),
                            Case({"codes": np.zeros((0, 3), dtype=f.code_dtype)})))
    specs.append(VectorSpec("a 0-d code gives a 0-d value", ("EmptyInput",),
                            Case({"codes": np.array(f.max_code, dtype=f.code_dtype)})))
    specs.append(VectorSpec("codes of another width are rejected", ("InvalidInput",),
                            Case({"codes": np.zeros(4, dtype=np.int32)}), "invalid"))
    specs.append(VectorSpec("signed codes are rejected, not reinterpreted", ("InvalidInput",),
                            Case({"codes": np.zeros(4, dtype=np.int8 if f.nbits <= 8 else np.int16)}), "invalid"))
    every = np.arange(min(1 << f.nbits, 256)).astype(f.code_dtype)
    specs.append(VectorSpec("codes as a 3-d array keep their shape", ("InputRank",),
                            Case({"codes": every.reshape(2, -1, 4)})))
    # Codes travel one per byte; the bits above a sub-byte code are zero, and a byte that
    # sets any of them is not a code: rejected, never masked. One vector per high bit, so a
    # check of only the next bit (codes & 0x10) or only the sign of the byte fails too.
    for bit in range(f.nbits, 8 * f.code_dtype.itemsize):
        dirty = np.array([1, (1 << bit) | 1], dtype=f.code_dtype)
        specs.append(VectorSpec(f"a code with bit {bit} set is rejected, not masked to 1",
                                ("DirtyBits", "InvalidInput"),
                                Case({"codes": dirty}), "invalid"))
    return specs


def _encode_examples(f: FloatFormat):
    def strategy(supported: Mapping[str, Sequence[str]]) -> st.SearchStrategy[Case]:
        @st.composite
        def case(draw):
            dtypes = st.sampled_from(FLOAT_DTYPES)
            x = draw(st.one_of(
                edge_arrays(f, dtype=dtypes),
                float_bits_arrays(dtype=dtypes),
                realistic_arrays(dtype=dtypes, scale=st.sampled_from([f.min_normal, 1.0, f.max_normal / 8])),
            ), label="x")
            params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
            inputs = {"x": x}
            if params["rounding"] == Rounding.STOCHASTIC.value:
                inputs["rbits"] = draw(hnp.arrays(np.uint32, x.shape), label="rbits")
            return Case(inputs, params)

        return case()

    return strategy


def _encode_exhaustive(f: FloatFormat):
    """Every bfloat16 bit pattern as float32, every float16 bit pattern, and every tie
    +-1 ulp in float32 and float64."""

    def cases(supported: Mapping[str, Sequence[str]]) -> Iterable[Case]:
        bf16_all = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
        f16_all = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
        ev32 = edge_values(f, np.float32)
        ties32 = np.concatenate([ev32["ties"], ev32["tie_neighbours"]])
        ties64 = np.concatenate(list(edge_values(f, np.float64).values()))
        axes = [a for a in supported]
        combos = [{}]
        for axis in axes:
            values = [val for val in supported[axis] if val != Rounding.STOCHASTIC.value]
            combos = [{**c, axis: val} for c in combos for val in values]
        for params in combos:
            for x in (bf16_all, f16_all, ties32, ties64):
                yield Case({"x": x}, params)

    return cases


LARGE = (1 << 24) + (1 << 20)  # past 65535 blocks x 256 threads = 16,776,960 elements


def _encode_large(f: FloatFormat):
    """Arrays past 2^24 elements: under the last non-stochastic value the implementation
    supports on each axis (a wrapper that forwards its options to the first launch
    only fails here), and under stochastic rounding when it is supported."""

    def cases(supported: Mapping[str, Sequence[str]]) -> Iterable[Case]:
        sr = Rounding.STOCHASTIC.value
        params = {axis: next((v for v in reversed(values) if v != sr), values[-1])
                  for axis, values in supported.items()}
        x = _large_values(f)
        if params["rounding"] != sr:
            yield Case({"x": x}, params)
        if sr in supported["rounding"]:
            rbits = np.random.default_rng(1).integers(0, 2**32, LARGE, dtype=np.uint64).astype(np.uint32)
            yield Case({"x": x, "rbits": rbits}, {**params, "rounding": sr})

    return cases


def _large_values(f: FloatFormat) -> np.ndarray:
    rng = np.random.default_rng(seed_for(f.name))
    x = rng.standard_normal(LARGE, dtype=np.float32) * np.float32(min(f.max_normal / 8, 1e4))
    return np.abs(x) if not f.signed else x


def _codes_large(f: FloatFormat):
    def cases(supported):
        rng = np.random.default_rng(seed_for(f.name))
        yield Case({"codes": rng.integers(0, 1 << f.nbits, LARGE, dtype=np.uint32).astype(f.code_dtype)}, {})

    return cases


def _codes_examples(f: FloatFormat):
    def strategy(supported):
        return codes(f).map(lambda c: Case({"codes": c}, {}))

    return strategy


def _codes_exhaustive(f: FloatFormat):
    def cases(supported):
        yield Case({"codes": np.arange(1 << f.nbits, dtype=np.int64).astype(f.code_dtype)}, {})

    return cases


def _format_of(f: FloatFormat, *names: str):
    return lambda name, arr: f.name if name in names else None


def _encode_oracle(f: FloatFormat):
    """encode under the catalog's convention: variant values arrive as strings."""

    def oracle(x, *, sr_bits="32", **options):
        return encode(x, f.name, sr_bits=int(sr_bits), **options)

    return oracle


def _element_ops(f: FloatFormat) -> list[Op]:
    enc = Op(
        name=f"formats.{f.name}.encode",
        kind=Kind.EXACT,
        oracle=_encode_oracle(f),
        summary=f"float16/32/64 -> {f.name} codes",
        spec=f"{SPEC}#encode",
        variants=_variants(f),
        vectors=partial(_encode_vectors, f),
        examples=_encode_examples(f),
        compare=partial(compare_codes, fmt=f.name),
        array_format=_format_of(f, "expected"),
        exhaustive=_encode_exhaustive(f),
        large=_encode_large(f),
    )
    dec = Op(
        name=f"formats.{f.name}.decode",
        kind=Kind.EXACT,
        oracle=partial(decode, fmt=f.name),
        summary=f"{f.name} codes -> float32",
        spec=f"{SPEC}#decode",
        variants=(),
        vectors=partial(_decode_vectors, f),
        examples=_codes_examples(f),
        compare=partial(compare_values, fmt="float32"),
        array_format=_format_of(f, "codes"),
        exhaustive=_codes_exhaustive(f),
        large=_codes_large(f),
    )
    return [enc, dec]


_ORDER = Variant("order", NIBBLE_ORDERS, "low_first",
                 "which nibble holds element 0: low (PyTorch, vLLM, TE, FlashInfer, OCP) or high")


def _pack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.float4_e2m1fn.pack"))
    specs = []
    for order in NIBBLE_ORDERS:
        p = {"order": order}
        specs += [
            VectorSpec(f"two distinct codes show which nibble is element 0 ({order})", ("NibbleOrder",),
                       Case({"codes": np.array([0x1, 0xE], dtype=np.uint8)}, p)),
            VectorSpec(f"every pair of codes ({order})", ("NibbleOrder", "Exhaustive"),
                       Case({"codes": np.stack(np.meshgrid(np.arange(16), np.arange(16)), -1)
                             .reshape(-1).astype(np.uint8)}, p)),
            VectorSpec(f"random codes with leading axes ({order})", ("NibbleOrder", "Random"),
                       Case({"codes": rng.integers(0, 16, (3, 2, 32)).astype(np.uint8)}, p)),
            VectorSpec(f"empty input gives empty bytes ({order})", ("EmptyInput",),
                       Case({"codes": np.zeros((3, 0), dtype=np.uint8)}, p)),
            VectorSpec(f"a 0-d input is rejected ({order})", ("EmptyInput", "InvalidInput"),
                       Case({"codes": np.array(3, dtype=np.uint8)}, p), "invalid"),
            VectorSpec(f"odd last axis is rejected ({order})", ("InvalidInput",),
                       Case({"codes": np.zeros(3, dtype=np.uint8)}, p), "invalid"),
            VectorSpec(f"int64 codes are rejected, not narrowed (257 is not 1) ({order})", ("InvalidInput",),
                       Case({"codes": np.array([257, 14], dtype=np.int64)}, p), "invalid"),
        ]
        specs += [VectorSpec(f"a code with bit {bit} set is rejected, not masked ({order})",
                             ("DirtyBits", "InvalidInput"),
                             Case({"codes": np.array([(1 << bit) | 1, 0x01], dtype=np.uint8)}, p), "invalid")
                  for bit in range(4, 8)]
    return specs


def _unpack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.float4_e2m1fn.unpack"))
    specs = []
    for order in NIBBLE_ORDERS:
        p = {"order": order}
        specs += [
            VectorSpec(f"every byte: a packed byte has no spare bits, so none is rejected ({order})",
                       ("NibbleOrder", "Exhaustive", "DirtyBits"), Case({"packed": np.arange(256, dtype=np.uint8)}, p)),
            VectorSpec(f"random bytes with leading axes ({order})", ("NibbleOrder", "Random"),
                       Case({"packed": rng.integers(0, 256, (2, 3, 8)).astype(np.uint8)}, p)),
            VectorSpec(f"empty input gives empty codes ({order})", ("EmptyInput",),
                       Case({"packed": np.zeros((0, 4), dtype=np.uint8)}, p)),
            VectorSpec(f"non-uint8 input is rejected ({order})", ("InvalidInput",),
                       Case({"packed": np.zeros(4, dtype=np.int32)}, p), "invalid"),
            VectorSpec(f"a 0-d input is rejected ({order})", ("EmptyInput", "InvalidInput"),
                       Case({"packed": np.array(0x21, dtype=np.uint8)}, p), "invalid"),
        ]
    return specs


def _ordered(name: str, arrays: st.SearchStrategy):
    """Example cases of one array input and the `order` variant."""

    def strategy(supported):
        return st.tuples(arrays, st.sampled_from(list(supported["order"]))).map(
            lambda t: Case({name: t[0]}, {"order": t[1]}))

    return strategy


_NIBBLES = st.integers(0, 15)
_pack_examples = _ordered("codes", hnp.arrays(np.uint8, small_shapes(max_dims=3, max_side=8).map(
    lambda s: (*s[:-1], 2 * s[-1])), elements=_NIBBLES))
_unpack_examples = _ordered("packed", hnp.arrays(np.uint8, small_shapes(max_dims=3, max_side=8)))


_FP4 = FORMATS["float4_e2m1fn"]

OPERATIONS = [op for f in FORMATS.values() for op in _element_ops(f)] + [
    Op(
        name="formats.float4_e2m1fn.pack",
        kind=Kind.EXACT,
        oracle=pack_fp4,
        summary="FP4 codes [..., 2n] -> bytes [..., n]",
        spec=f"{SPEC}#packing",
        variants=(_ORDER,),
        vectors=_pack_vectors,
        examples=_pack_examples,
        compare=compare_exact,
        array_format=lambda name, arr: {"codes": "float4_e2m1fn", "expected": "float4_e2m1fn_x2"}.get(name),
    ),
    Op(
        name="formats.float4_e2m1fn.unpack",
        kind=Kind.EXACT,
        oracle=unpack_fp4,
        summary="bytes [..., n] -> FP4 codes [..., 2n]",
        spec=f"{SPEC}#packing",
        variants=(_ORDER,),
        vectors=_unpack_vectors,
        examples=_unpack_examples,
        compare=partial(compare_codes, fmt=_FP4.name),
        array_format=lambda name, arr: {"packed": "float4_e2m1fn_x2", "expected": "float4_e2m1fn"}.get(name),
    ),
]

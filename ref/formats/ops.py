"""Catalog declarations of the formats area.

The only file of the area that reaches up to `ref.testing` (catalog types,
comparators, strategies, vector specs); `ref.conformance.catalog` discovers it.

  formats.F.encode              x [, rbits] -> codes            (F: every element format)
  formats.F.decode              codes -> float32 values
  formats.float4_e2m1fn.pack    codes [..., 2n] -> bytes [..., n]
  formats.float4_e2m1fn.unpack  bytes [..., n] -> codes [..., 2n]
  formats.mxE.quantize          x [..., 32k] -> (codes, E8M0 scales [..., k])   (E: the MX element)
  formats.mxE.dequantize        (codes, scales) -> values (exact at the output's float precision)
  formats.nvfp4.quantize        x [..., R, 16k] -> (codes, E4M3 scales [..., R, k], global scale)
  formats.nvfp4.dequantize      (codes, scales, global scale) -> values (exact, or torchao's float32 order)
  formats.scales.to_blocked     scales [R, C] -> the 128x4 blocked layout (flat)
  formats.scales.from_blocked   (blocked, rows, cols) -> scales [rows, cols]
  formats.intB_group.quantize   w [..., n] -> (codes, scales, zeros)            (B: 4 or 8)
  formats.intB_group.dequantize (codes, scales, zeros) -> float32 weights
  formats.int4.pack_int32       codes [..., 8k] -> int32 words [..., k] (GPTQ or AWQ order)
  formats.int4.unpack_int32     words -> codes

All are exact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.testing.operations import Flag, Kind, Op, Variant, seed_for
from ref.formats.minifloat import (
    FORMATS,
    get_format,
    FloatFormat,
    NanPolicy,
    NegativePolicy,
    Rounding,
    decode,
    encode,
)
from ref.formats import intgroup, layouts, mx, nvfp4
from ref.formats.packing import NIBBLE_ORDERS, pack_fp4, unpack_fp4
from ref.testing.compare import (
    Comparison,
    compare_block_codes,
    compare_codes,
    compare_exact,
    compare_parts,
    compare_values,
)
from ref.testing.vector_files import Case, VectorSpec
from ref.testing.strategies import (
    FLOAT_DTYPES,
    block_shapes,
    codes,
    edge_arrays,
    edge_values,
    float_bits_arrays,
    outlier_arrays,
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


MX_NAMES = {"float8_e4m3fn": "mxfp8_e4m3", "float8_e5m2": "mxfp8_e5m2", "float6_e2m3fn": "mxfp6_e2m3",
            "float6_e3m2fn": "mxfp6_e3m2", "float4_e2m1fn": "mxfp4", "int8": "mxint8"}
_MX_VARIANTS = (
    Variant("scale_rule", tuple(r.value for r in mx.ScaleRule), "floor",
            "shared exponent: floor (OCP), ceil, even (amax rounded to the element width), rceil (NVIDIA)"),
    Variant("scale_overflow", tuple(o.value for o in mx.ScaleOverflow), "nan",
            "Inf in a block or an exponent past 127: scale 0xFF (NaN) or 0xFE (satfinite, TransformerEngine)"),
)


def _mx_vectors(elem: str) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.{MX_NAMES[elem]}.quantize"))
    emax, _ = mx.MX_ELEMENTS[elem]
    top = mx._max_element(elem)
    specs = []

    def add(comment, flags, x, result="valid", **params):
        specs.append(VectorSpec(comment, tuple(flags), Case({"x": np.asarray(x, dtype=np.float32)}, params), result))

    def row(amax, n=32, seed=0):
        """One block of n values with the given amax (at index 3), the rest below it."""
        r = np.random.default_rng(seed).uniform(-1, 1, n) * amax
        r[3] = amax
        return r

    gauss = rng.standard_normal((4, 64)) * np.array([[1e-3], [1.0], [30.0], [1e4]])
    outliers = rng.standard_normal((2, 64))
    outliers[:, 5] *= 300
    for rule in mx.ScaleRule:
        add(f"{rule.value}: Gaussian rows at four magnitudes", ["ScaleRule", "Random"], gauss, scale_rule=rule.value)
        add(f"{rule.value}: an outlier channel sets each block's scale", ["ScaleRule"], outliers, scale_rule=rule.value)
        powers = np.stack([row(2.0**k, seed=k + 40) for k in (-20, -1, 0, 1, 7, 20)])
        add(f"{rule.value}: amax exactly a power of two", ["ScaleRule"], powers, scale_rule=rule.value)
        below = np.stack([row(float(np.nextafter(np.float32(2.0**k), np.float32(0))), seed=k + 80)
                          for k in (-20, 1, 7, 20, 60)])
        add(f"{rule.value}: amax one float32 ulp below a power of two", ["ScaleRule", "Log2Float32"], below,
            scale_rule=rule.value)
        maxes = np.stack([row(top * 2.0**k * f, seed=k + 7) for k in (-3, 0, 5) for f in (1.0, 1.0 + 2**-20)])
        add(f"{rule.value}: amax at element max times a power of two, and just above", ["ScaleRule"], maxes,
            scale_rule=rule.value)
        def ulp_rows(ks):
            edges = [np.float32(top * 2.0**k) for k in ks]
            return np.stack([row(float(v), seed=i) for i, e in enumerate(edges)
                             for v in (np.nextafter(e, np.float32(np.inf)), np.nextafter(e, np.float32(0)))])

        add(f"{rule.value}: amax one float32 ulp either side of element max times 2^k (the fp32 product "
            f"amax * (1/max) rounds onto the power of two)", ["ScaleRule", "Log2Float32"],
            ulp_rows((-100, -3, 0, 5, 60)), scale_rule=rule.value)
        add(f"{rule.value}: amax one float32 ulp either side of element max times 2^-127",
            ["ScaleRule", "Log2Float32", "SmallestScale"], ulp_rows((-127,)), scale_rule=rule.value)
        add(f"{rule.value}: all-zero block (and -0)", ["ZeroBlock"], np.stack([np.zeros(32), -np.zeros(32)]),
            scale_rule=rule.value)
        sub = np.stack([row(1e-40), row(3e-45, seed=3)])
        add(f"{rule.value}: amax a float32 subnormal", ["ZeroBlock", "InputSubnormal", "SmallestScale"], sub,
            scale_rule=rule.value)
        smallest = np.stack([row(2.0 ** (emax - 127)), row(1.5 * 2.0 ** (emax - 129), seed=1),
                             row(2.0 ** (emax - 133), seed=2)])
        add(f"{rule.value}: blocks at the smallest scale 2^-127 (code 0), elements divided by exactly 2^-127",
            ["SmallestScale"], smallest, scale_rule=rule.value)
        huge = np.stack([row(3.4e38), row(2.0**127)])
        poison = np.stack([row(1.0), row(1.0)])
        poison[0, 9], poison[1, 30] = np.inf, -np.inf
        for overflow in mx.ScaleOverflow:
            add(f"{rule.value}: amax near float32 max (the exponent may pass 127), scale_overflow={overflow.value}",
                ["Overflow"], huge, scale_rule=rule.value, scale_overflow=overflow.value)
            add(f"{rule.value}: +-Inf in a block, scale_overflow={overflow.value} (0xFF: the block is NaN; 0xFE: "
                f"Inf saturates, the rest is tiny)", ["NanBlock", "InfBlock"], poison, scale_rule=rule.value,
                scale_overflow=overflow.value)
        nan = np.stack([row(1.0), row(1.0)])
        nan[0, 9] = np.nan
        add(f"{rule.value}: NaN in a block", ["NanBlock"], nan, scale_rule=rule.value)
    sat = np.stack([row(top * 2.0**k * 1.99 / (top / 2.0**emax) if elem != "int8" else 1.99 * 2.0**k)
                    for k in (0, 3)])
    add("floor: amax/2^X above the element max saturates", ["ElementSaturation"], sat)
    values = np.array([0.0]) if elem == "int8" else representable_values(elem)
    ties = (values[:-1] + values[1:]) / 2 if elem != "int8" else (np.arange(-126, 126) + 0.5) / 64
    blk = np.concatenate([ties[: (len(ties) // 32) * 32]])
    if blk.size:
        tie_rows = blk.reshape(-1, 32).copy()
        tie_rows[:, 0] = 2.0**emax * 1.5  # pins the scale exponent at X = 0 (floor rule)
        add("element ties round to even (scale pinned at 1)", ["TiesToEven"], tie_rows)
    add("a 2x3x64 tensor, blocks along the last axis", ["Random", "InputRank"], rng.standard_normal((2, 3, 64)) * 5)
    add("empty input", ["EmptyInput"], np.zeros((0, 32)))
    return specs + _mx_shape_vectors((rng.standard_normal((4, 64)) * 5).astype(np.float32))


def _mx_shape_vectors(x: np.ndarray) -> list[VectorSpec]:
    """Every input dtype and rank mx.quantize accepts, and what it refuses; x: float32 [4, 64]."""
    half = np.float16([6e-8, -1.2e-7, 3e-5, 65504.0, -1.0, 0.0, 2.0**-14, -0.0] * 4)  # subnormals to max
    specs = [
        VectorSpec("float16 input (widened to float32 exactly)", ("Float16Input",),
                   Case({"x": np.concatenate([x[:2].astype(np.float16), half[None, :].repeat(2, 1)])})),
        VectorSpec("one row: a 1-d input", ("InputRank",), Case({"x": x[0]})),
        VectorSpec("a 3-d float16 stack", ("InputRank", "Float16Input"),
                   Case({"x": x.reshape(2, 2, 64).astype(np.float16)})),
        VectorSpec("a 1-d empty input: no blocks", ("EmptyInput", "InputRank"), Case({"x": np.zeros(0, np.float32)})),
        VectorSpec("rows of no values: no blocks", ("EmptyInput",), Case({"x": np.zeros((2, 0), np.float32)})),
        VectorSpec("float64 input is rejected, not narrowed", ("InvalidInput",), Case({"x": x.astype(np.float64)}),
                   "invalid"),
        VectorSpec("integer input is rejected", ("InvalidInput",), Case({"x": np.ones((1, 32), np.int32)}), "invalid"),
        VectorSpec("a 0-d input is rejected (it has no axis to block)", ("InvalidInput", "InputRank"),
                   Case({"x": np.float32(1)}), "invalid"),
    ]
    for n in (48, 16, 33):
        specs.append(VectorSpec(f"a last axis of {n} is rejected, not padded or cut to blocks of 32",
                                ("InvalidInput", "RaggedGroup"), Case({"x": x[:2, :n]}), "invalid"))
    return specs


def _mx_dequant_vectors(elem: str) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.{MX_NAMES[elem]}.dequantize"))
    bits = 8 if elem == "int8" else get_format(elem).nbits
    codes_all = rng.integers(0, 1 << bits, (4, 64)).astype(np.uint8)
    scales = np.array([[0, 1], [126, 127], [128, 200], [254, 255]], dtype=np.uint8)
    every = np.arange(1 << bits, dtype=np.uint8)
    every = np.resize(every, (max(1, every.size // 32), 32))
    return [
        VectorSpec("random codes under the extreme scales 2^-127, 2^127 and NaN (float32: subnormal and "
                   "overflowing results)", ("Random", "NanBlock", "Subnormal"),
                   Case({"codes": codes_all, "scales": scales})),
        VectorSpec("every element code under scale 1", ("Exhaustive",),
                   Case({"codes": every, "scales": np.full((every.shape[0], 1), 127, np.uint8)})),
        VectorSpec("scales of the wrong shape are rejected", ("InvalidInput",),
                   Case({"codes": codes_all, "scales": scales[:, :1]}), "invalid"),
    ] + _mx_dequant_shape_vectors(codes_all, scales, bits)


def _mx_dequant_shape_vectors(codes: np.ndarray, scales: np.ndarray, bits: int) -> list[VectorSpec]:
    """Every rank mx.dequantize accepts, and what it refuses: dirty bits above an FP4/FP6
    code (one vector per spare bit), wrong dtypes, a ragged last axis. codes [4, 64],
    scales [4, 2]."""
    c3, s3 = codes.reshape(2, 2, 64), scales.reshape(2, 2, 2)
    specs = [
        VectorSpec("one row: 1-d codes", ("InputRank",), Case({"codes": codes[1], "scales": scales[1]})),
        VectorSpec("a 3-d stack", ("InputRank",), Case({"codes": c3, "scales": s3})),
        VectorSpec("no rows", ("EmptyInput",), Case({"codes": codes[:0], "scales": scales[:0]})),
        VectorSpec("rows of no codes: no blocks", ("EmptyInput",),
                   Case({"codes": codes[:, :0], "scales": scales[:, :0]})),
        VectorSpec("int8 codes are rejected (uint8 expected)", ("InvalidInput",),
                   Case({"codes": codes[:1, :32].view(np.int8), "scales": scales[:1, :1]}), "invalid"),
        VectorSpec("int32 scales are rejected", ("InvalidInput",),
                   Case({"codes": codes[:1, :32], "scales": scales[:1, :1].astype(np.int32)}), "invalid"),
        VectorSpec("0-d codes are rejected", ("InvalidInput", "InputRank"),
                   Case({"codes": codes[0, 0], "scales": scales[0, 0]}), "invalid"),
        VectorSpec("scales of a 2-d shape for 3-d codes are rejected", ("InvalidInput", "InputRank"),
                   Case({"codes": c3, "scales": scales}), "invalid"),
    ]
    for n, k, what in ((48, 2, "its padded"), (48, 1, "its whole"), (16, 1, "its padded")):
        specs.append(VectorSpec(f"a last axis of {n} is rejected (scales for {what} blocks: {k})",
                                ("InvalidInput", "RaggedGroup"),
                                Case({"codes": codes[:, :n], "scales": scales[:, :k]}), "invalid"))
    for bit in range(bits, 8):
        dirty = codes[:2, :32].copy()
        dirty[1, 5] |= 1 << bit
        specs.append(VectorSpec(f"a code with bit {bit} set (above its {bits}) is rejected, not masked",
                                ("DirtyBits", "InvalidInput"), Case({"codes": dirty, "scales": scales[:2, :1]}),
                                "invalid"))
    return specs


def _mx_examples(elem: str):
    def strategy(supported):
        @st.composite
        def case(draw):
            shape = draw(block_shapes(block=32, max_blocks=3), label="shape")
            x = draw(st.one_of(realistic_arrays(shape=st.just(shape), dtype=st.just(np.dtype(np.float32))),
                               outlier_arrays(shape=st.just(shape), dtype=st.just(np.dtype(np.float32)))),
                     label="x")
            if draw(st.booleans(), label="poison") and x.size:
                x = x.copy()
                x.flat[draw(st.integers(0, x.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf, 0.0]))
            params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
            return Case({"x": x}, params)

        return case()

    return strategy


def _mx_dequant_examples(elem: str):
    bits = 8 if elem == "int8" else get_format(elem).nbits

    def strategy(supported):
        @st.composite
        def case(draw):
            shape = draw(block_shapes(block=32, max_blocks=3), label="shape")
            c = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, (1 << bits) - 1)), label="codes")
            s = draw(hnp.arrays(np.uint8, (*shape[:-1], shape[-1] // 32)), label="scales")
            return Case({"codes": c, "scales": s}, {})

        return case()

    return strategy


def _mx_ops(elem: str) -> list[Op]:
    name = MX_NAMES[elem]
    elem_fmt = None if elem == "int8" else elem
    return [
        Op(
            name=f"formats.{name}.quantize",
            kind=Kind.EXACT,
            oracle=partial(mx.quantize, elem=elem),
            summary=f"float32 or float16 [..., 32k] -> ({elem} codes, E8M0 scales [..., k]), OCP MX",
            spec=f"{SPEC}#mx",
            variants=_MX_VARIANTS,
            vectors=partial(_mx_vectors, elem),
            examples=_mx_examples(elem),
            compare=partial(compare_block_codes, elem_fmt=elem_fmt),
            outputs=("codes", "scales"),
            array_format=lambda n, a, e=elem: {"codes": None if e == "int8" else e,
                                               "scales": "float8_e8m0fnu"}.get(n),
        ),
        Op(
            name=f"formats.{name}.dequantize",
            kind=Kind.EXACT,
            oracle=partial(mx.dequantize, elem=elem),
            summary=f"({elem} codes, E8M0 scales) -> values, exact at the output's precision",
            spec=f"{SPEC}#mx",
            variants=(),
            vectors=partial(_mx_dequant_vectors, elem),
            examples=_mx_dequant_examples(elem),
            compare=_compare_at_output_precision,
            array_format=lambda n, a, e=elem: {"codes": None if e == "int8" else e,
                                               "scales": "float8_e8m0fnu"}.get(n),
        ),
    ]


_NV_VARIANTS = (
    Variant("recipe", tuple(r.value for r in nvfp4.Recipe), "transformer_engine",
            "float32 operation order of the scales: TransformerEngine, vLLM/FlashInfer, torchao 0.13-0.16 "
            "(x / f32(p * sb)), torchao 0.17 on (x * f32(f32(1/p) / sb))"),
    Variant("tile_2d", ("false", "true"), "false", "one scale per 16 elements, or per 16x16 tile (TE weights)"),
    Variant("rht", ("false", "true"), "false",
            "random Hadamard transform of each 16 elements before scaling (TE's recipe for wgrad inputs)"),
    Variant("rounding", ("nearest_even", "stochastic"), "nearest_even",
            "element rounding; stochastic reads the top 8 bits of rbits (PTX cvt.rs.e2m1x4)"),
)


_BOOLEAN = {"false": False, "true": True}


def _boolean(value: str, name: str) -> bool:
    """A catalog variant string ('false' or 'true') as the oracle's boolean."""
    if value not in _BOOLEAN:
        raise ValueError(f"{name}: expected 'false' or 'true', got {value!r}")
    return _BOOLEAN[value]


def _nvfp4_oracle(x, *, recipe="transformer_engine", tile_2d="false", rht="false", rounding="nearest_even",
                  rbits=None):
    return nvfp4.quantize(x, recipe=recipe, tile_2d=_boolean(tile_2d, "tile_2d"), rht=_boolean(rht, "rht"),
                          rounding=rounding, rbits=rbits)


def _divides(recipe: nvfp4.Recipe) -> bool:
    """torchao up to 0.16 divides the elements by f32(p * sb); the others multiply."""
    return recipe is nvfp4.Recipe.TORCHAO_0_13


def _torchao(recipe: nvfp4.Recipe) -> bool:
    return recipe in (nvfp4.Recipe.TORCHAO_0_13, nvfp4.Recipe.TORCHAO_0_17)


def _recipe_ties(recipe_a: str, recipe_b: str, amax: float, count: int = 32) -> np.ndarray:
    """Block maxima where two recipes' float32 orders pick different E4M3 scales
    (searched among float32 neighbours of each E4M3 tie times 6/g)."""
    g = {r: nvfp4._global(np.float32(amax), nvfp4.Recipe(r)) for r in (recipe_a, recipe_b)}
    e4 = representable_values("float8_e4m3fn")
    e4 = e4[e4 > 0.01]
    ties = (e4[:-1] + e4[1:]) / 2
    found = []
    g_te = float(nvfp4._global(np.float32(amax), nvfp4.Recipe.TRANSFORMER_ENGINE))
    for t in ties[::3]:
        centre = np.float32(t * 6 / g_te)
        steps = np.arange(-64, 65)
        cand = (centre.view(np.int32) + steps).astype(np.int32).view(np.float32)
        cand = cand[(cand > 0) & (cand < amax)]
        sa, _ = nvfp4._scales_and_multipliers(cand, g[recipe_a], nvfp4.Recipe(recipe_a))
        sb, _ = nvfp4._scales_and_multipliers(cand, g[recipe_b], nvfp4.Recipe(recipe_b))
        found.extend(cand[sa != sb][:2])
        if len(found) >= count:
            break
    return np.array(found[:count], dtype=np.float32)


def _at_scale_ties(recipe: nvfp4.Recipe, amax: float, count: int = 40) -> np.ndarray:
    """Block maxima whose float32 block-scale value, in this recipe's order, lies
    within 2 ulps of an E4M3 tie: any other order or rounding of the intermediates
    lands some of them on the other side."""
    g = nvfp4._global(np.float32(amax), recipe)
    e4 = representable_values("float8_e4m3fn")
    e4 = e4[(e4 > 0.01) & (e4 < 448)]
    ties = ((e4[:-1] + e4[1:]) / 2)[::2].astype(np.float32)
    per_unit = float(g) / 6 if not _torchao(recipe) else 1 / (6 * float(g))
    centre = (ties / per_unit).astype(np.float32)
    cand = (centre.view(np.int32)[:, None] + np.arange(-6, 7)).astype(np.int32).view(np.float32)
    with np.errstate(all="ignore"):
        if recipe is nvfp4.Recipe.TRANSFORMER_ENGINE:
            value = cand * (g * np.float32(1 / 6))
        elif recipe is nvfp4.Recipe.VLLM:
            value = g * (cand * np.float32(1 / 6))
        else:
            value = (cand / np.float32(6)) / g
    ulp = np.spacing(ties)[:, None]
    near = (np.abs(value - ties[:, None]) <= 2 * ulp) & (cand > 0) & (cand < amax)
    return cand[near][:count].astype(np.float32)


def _element_ties(recipe: nvfp4.Recipe, amax: float, rng) -> np.ndarray:
    """Rows [block max, 15 elements] where each element, scaled in the recipe's order
    (x * r, or x / d for torchao 0.13), lands within 2 float32 ulps of an E2M1 tie: a
    reciprocal where the recipe divides (or the reverse) flips some of them."""
    g = nvfp4._global(np.float32(amax), recipe)
    rows = [np.array([amax] + [0.0] * 15, np.float32)]
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    for bamax in rng.uniform(1.0, 90.0, 12).astype(np.float32):
        _, m = nvfp4._scales_and_multipliers(np.array([bamax], np.float32), g, recipe)
        m = m[0]
        div = _divides(recipe)
        centre = (ties * m if div else ties / m).astype(np.float32)
        cand = (centre.view(np.int32)[:, None] + np.arange(-3, 4)).astype(np.int32).view(np.float32).ravel()
        with np.errstate(all="ignore"):
            scaled = cand / m if div else cand * m
        near = np.abs(scaled - np.repeat(ties, 7)) <= 2 * np.spacing(np.repeat(ties, 7))
        pick = cand[near & (cand < bamax)]
        if pick.size:
            row = np.zeros(16, np.float32)
            row[0] = bamax
            row[1:] = np.resize(pick, 15) * rng.choice([-1, 1], 15).astype(np.float32)
            rows.append(row)
    return np.stack(rows)


def _torchao_order_ties(amax: np.float32, rng, count: int = 12) -> np.ndarray:
    """Rows [global amax, 0...] then [block max, 15 elements] where torchao 0.13's
    division and 0.17's reciprocal product give different E2M1 codes."""
    old, new = nvfp4.Recipe.TORCHAO_0_13, nvfp4.Recipe.TORCHAO_0_17
    p = nvfp4._global(amax, new)
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    rows = [np.array([amax] + [0.0] * 15, np.float32)]
    for bamax in rng.uniform(0.05, 0.95, 64).astype(np.float32) * amax:
        _, d = nvfp4._scales_and_multipliers(np.array([bamax], np.float32), p, old)
        _, m = nvfp4._scales_and_multipliers(np.array([bamax], np.float32), p, new)
        centre = (ties * d[0]).astype(np.float32)
        cand = (centre.view(np.int32)[:, None] + np.arange(-4, 5)).astype(np.int32).view(np.float32).ravel()
        cand = cand[(cand > 0) & (cand < bamax)]
        with np.errstate(all="ignore"):
            differ = encode(cand / d[0], "float4_e2m1fn") != encode(cand * m[0], "float4_e2m1fn")
        if differ.any():
            row = np.zeros(16, np.float32)
            row[0] = bamax
            row[1:] = np.resize(cand[differ], 15) * rng.choice([-1, 1], 15).astype(np.float32)
            rows.append(row)
        if len(rows) > count:
            break
    return np.stack(rows)


def _nvfp4_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.nvfp4.quantize"))
    specs = []

    def add(comment, flags, x, result="valid", **params):
        inputs = {"x": np.asarray(x, dtype=np.float32)}
        if "rbits" in params:
            inputs["rbits"] = params.pop("rbits")
        specs.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))

    gauss = rng.standard_normal((32, 64)).astype(np.float32)
    gauss[:, 5] *= 40  # an outlier channel
    for r in nvfp4.Recipe:
        add(f"{r.value}: Gaussian 32x64 with an outlier channel", ["RecipeOrder", "Random"], gauss, recipe=r.value)
        add(f"{r.value}: 16x16 tiles (2D scaling)", ["RecipeOrder"], gauss, recipe=r.value, tile_2d="true")
        add(f"{r.value}: random Hadamard transform first (the outlier spreads over its 16)", ["Hadamard"], gauss,
            recipe=r.value, rht="true")
        tiny = rng.standard_normal((4, 32)) * np.array([[1e-6], [1e-3], [1.0], [1e3]])
        tiny[0] = 0.0
        add(f"{r.value}: blocks from zero to large, one all-zero row", ["ZeroBlock", "ScaleClamp", "E4M3Rounding"],
            tiny, recipe=r.value)
        add(f"{r.value}: an all-zero tensor (amax 0: global scale 1)", ["ZeroBlock", "GlobalAmax"],
            np.zeros((2, 32)), recipe=r.value)
        poison = rng.standard_normal((3, 32))
        for value, what in ((np.nan, "NaN"), (np.inf, "Inf")):
            poisoned = poison.copy()
            poisoned[1, 20] = value
            add(f"{r.value}: a {what} block (tensor amax {what}: global scale 1, the other blocks as usual)",
                ["NanBlock", "GlobalAmax"], poisoned, recipe=r.value)
        ties = np.tile(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2, dtype=np.float32), (2, 1))
        ties[1] *= -1
        add(f"{r.value}: element ties (block amax 6 under a unit global scale: torchao's path without one)",
            ["TiesToEven"],
            np.concatenate([ties, np.full((1, 16), 6.0 * 448, np.float32)]), recipe=r.value)
        add(f"{r.value}: stochastic rounding with random bits", ["StochasticRounding"], gauss[:4],
            recipe=r.value, rounding="stochastic",
            rbits=rng.integers(0, 2**32, (4, 64), dtype=np.uint64).astype(np.uint32))
        tie_x = np.concatenate([ties, np.full((1, 16), 6.0 * 448, np.float32)])
        for rb, what in ((1 << 31, "carries (fraction 1/2 + 1/2 = 1)"), ((1 << 31) - (1 << 24), "does not carry")):
            add(f"{r.value}: stochastic rounding on exact E2M1 midpoints, random byte at the boundary {what}",
                ["StochasticRounding", "SrBoundary"], tie_x, recipe=r.value, rounding="stochastic",
                rbits=np.full(tie_x.shape, rb, dtype=np.uint32))
    torchao = {nvfp4.Recipe.TORCHAO_0_13.value, nvfp4.Recipe.TORCHAO_0_17.value}
    for a, b in itertools.combinations([r.value for r in nvfp4.Recipe], 2):
        if {a, b} == torchao:  # the same scales: their elements differ, below
            continue
        amax = 100.0
        bam = _recipe_ties(a, b, amax)
        if bam.size:
            rows = np.zeros((bam.size + 1, 16), np.float32)
            rows[0, 0] = amax  # fixes the global amax
            rows[1:, :] = rng.uniform(-1, 1, (bam.size, 16)).astype(np.float32) * bam[:, None]
            rows[1:, 0] = bam
            for r in (a, b):
                add(f"{r}: block maxima where {a} and {b} choose different E4M3 scales", ["RecipeOrder"], rows,
                    recipe=r)
    for r in nvfp4.Recipe:
        for amax in (1000.0, 77.7):  # 1000: f32(g / 6) != f32(g * f32(1/6))
            bam = _at_scale_ties(r, amax)
            rows = np.zeros((bam.size + 1, 16), np.float32)
            rows[0, 0] = amax
            rows[1:, 0] = bam
            rows[1:, 1:] = rng.uniform(-1, 1, (bam.size, 15)).astype(np.float32) * bam[:, None]
            add(f"{r.value}: block scale products within 2 float32 ulps of an E4M3 tie (global amax {amax:g})",
                ["RecipeOrder", "E4M3Rounding"], rows, recipe=r.value)
    for r in nvfp4.Recipe:
        add(f"{r.value}: elements whose scaled value lies within 2 float32 ulps of an E2M1 tie",
            ["RecipeOrder", "TiesToEven"], _element_ties(r, 100.0, rng), recipe=r.value)
    for amax in (100.0, 2688.0):  # 2688: p = 1, torchao without a global scale
        rows = _torchao_order_ties(np.float32(amax), rng)
        for r in sorted(torchao):
            add(f"{r}: elements where x / f32(p * sb) and x * f32(f32(1/p) / sb) pick different codes "
                f"(global amax {amax:g})", ["RecipeOrder"], rows, recipe=r)
    add("empty input", ["EmptyInput"], np.zeros((0, 16)))
    specs.append(VectorSpec("2D tiles need rows in multiples of 16", ("InvalidInput",),
                            Case({"x": np.ones((8, 16), np.float32)}, {"tile_2d": "true"}), "invalid"))
    return specs + _nvfp4_shape_vectors(gauss)


def _nvfp4_shape_vectors(x: np.ndarray) -> list[VectorSpec]:
    """Every input dtype and rank nvfp4.quantize accepts, and what it refuses; x: float32
    [32, 64]. (bfloat16 input has no golden representation: arrays are stored in NumPy's
    own dtypes.)"""
    half = np.float16([6e-8, -1.2e-7, 3e-5, 65504.0, -1.0, 0.0, 2.0**-14, -0.0] * 8)  # subnormals to max
    specs = [
        VectorSpec("float16 input (widened to float32 exactly)", ("Float16Input",),
                   Case({"x": np.concatenate([x[:2].astype(np.float16), half[None, :]])})),
        VectorSpec("one row: a 1-d input", ("InputRank",), Case({"x": x[0]})),
        VectorSpec("a 3-d float16 stack", ("InputRank", "Float16Input"),
                   Case({"x": x[:4].reshape(2, 2, 64).astype(np.float16)})),
        VectorSpec("a 3-d stack of two 16x32 matrices, 16x16 tiles", ("InputRank",),
                   Case({"x": x[:, :32].reshape(2, 16, 32)}, {"tile_2d": "true"})),
        VectorSpec("a 1-d empty input", ("EmptyInput", "InputRank"), Case({"x": np.zeros(0, np.float32)})),
        VectorSpec("rows of no values: no blocks", ("EmptyInput",), Case({"x": np.zeros((2, 0), np.float32)})),
        VectorSpec("float64 input is rejected, not narrowed", ("InvalidInput",),
                   Case({"x": x[:2].astype(np.float64)}), "invalid"),
        VectorSpec("integer input is rejected", ("InvalidInput",), Case({"x": np.ones((1, 16), np.int32)}),
                   "invalid"),
        VectorSpec("a 0-d input is rejected", ("InvalidInput", "InputRank"), Case({"x": np.float32(1)}), "invalid"),
    ]
    for n in (24, 8, 17):
        specs.append(VectorSpec(f"a last axis of {n} is rejected, not padded or cut to blocks of 16",
                                ("InvalidInput", "RaggedGroup"), Case({"x": x[:2, :n]}), "invalid"))
    return specs


def _nvfp4_examples(supported):
    @st.composite
    def case(draw):
        rows = draw(st.sampled_from([16, 32]), label="rows")
        cols = 16 * draw(st.integers(1, 4), label="blocks")
        x = draw(st.one_of(realistic_arrays(shape=st.just((rows, cols)), dtype=st.just(np.dtype(np.float32))),
                           outlier_arrays(shape=st.just((rows, cols)), dtype=st.just(np.dtype(np.float32)))),
                 label="x")
        params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
        inputs = {"x": x}
        if params["rounding"] == "stochastic":
            inputs["rbits"] = draw(hnp.arrays(np.uint32, x.shape), label="rbits")
        return Case(inputs, params)

    return case()


def _compare_nvfp4(expected, actual):
    if not isinstance(actual, tuple) or len(actual) != 3:
        return Comparison(False, 0, 0, np.inf, "", problem="expected (codes, scales, global_scale)")
    cmp = compare_values(np.asarray(expected[2], dtype=np.float32), np.asarray(actual[2]))
    if not cmp.ok:
        return replace(cmp, part="global_scale")
    return compare_block_codes(expected[:2], tuple(actual[:2]), elem_fmt="float4_e2m1fn",
                               scale_fmt="float8_e4m3fn", block=16)


_NV_ORDER = Variant("order", tuple(o.value for o in nvfp4.DequantOrder), "exact",
                    "exact (float64; a float32 output is the exact value rounded once), or torchao's float32 "
                    "order f32(e * f32(d * sb)) (scale_first)")


def _compare_at_output_precision(expected, actual) -> Comparison:
    """Values exact at the candidate's output precision: a float32 (or float16) output
    must be the oracle's value rounded once to it (nearest even, overflow to Inf)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.dtype not in (np.float16, np.float32):
        return compare_values(expected, actual, fmt="float64")
    if actual.dtype.itemsize < expected.dtype.itemsize:
        with np.errstate(over="ignore"):
            expected = expected.astype(actual.dtype)
    return compare_values(expected, actual, fmt=actual.dtype.name)


def _nvfp4_dequant_vectors() -> list[VectorSpec]:
    orders_all = tuple(o.value for o in nvfp4.DequantOrder)
    rng = np.random.default_rng(seed_for("formats.nvfp4.dequantize"))
    codes = rng.integers(0, 16, (4, 32)).astype(np.uint8)
    scales = np.array([[0x00, 0x01], [0x38, 0x7E], [0x7F, 0xFE], [0x08, 0x40]], dtype=np.uint8)
    specs = []
    for r in nvfp4.Recipe:
        for gs, orders in ((1.0, ("exact",)), (0.0123, orders_all), (2688 / 3.0, orders_all)):
            for order in orders:
                specs.append(VectorSpec(f"{r.value}: random codes, extreme and NaN scales, global {gs:g} ({order})",
                                        ("Random", "NanBlock"),
                                        Case({"codes": codes, "scales": scales, "global_scale": np.float32(gs)},
                                             {"recipe": r.value, "order": order})))
    every = np.tile(np.arange(16, dtype=np.uint8), (8, 2))  # [8, 32]: every code under 16 scales
    many = rng.integers(1, 0x7F, (8, 2)).astype(np.uint8)
    for r in nvfp4.Recipe:
        for gs in (7.1e-3, 13.7):
            specs.append(VectorSpec(
                f"{r.value}: every code times E4M3 scales times global {gs:g}, float32 in torchao's order "
                f"f32(e * f32(d * sb)): 1.5, 3 and 6 round twice", ("DequantOrder",),
                Case({"codes": every, "scales": many, "global_scale": np.float32(gs)},
                     {"recipe": r.value, "order": "scale_first"})))
        specs.append(VectorSpec(
            f"{r.value}: every code times E4M3 scales, exact (a float32 output rounds it once)", ("DequantOrder",),
            Case({"codes": every, "scales": many, "global_scale": np.float32(13.7)},
                 {"recipe": r.value, "order": "exact"})))
    for gs, what in ((0.0, "zero"), (-1.0, "negative"), (np.inf, "infinite"), (np.nan, "NaN")):
        specs.append(VectorSpec(f"a {what} global scale is rejected", ("InvalidInput", "GlobalScale"),
                                Case({"codes": codes, "scales": scales, "global_scale": np.float32(gs)}),
                                "invalid"))
    specs.append(VectorSpec("scales of the wrong shape are rejected", ("InvalidInput",),
                            Case({"codes": codes, "scales": scales[:, :1], "global_scale": np.float32(1)}),
                            "invalid"))
    return specs + _nvfp4_dequant_shape_vectors(codes, scales)


def _nvfp4_dequant_shape_vectors(codes: np.ndarray, scales: np.ndarray) -> list[VectorSpec]:
    """Every rank nvfp4.dequantize accepts, and what it refuses: each of bits 4-7 set
    above an E2M1 code, wrong dtypes, a ragged last axis. codes [4, 32], scales [4, 2]."""
    one = np.float32(1.5)

    def case(c, s):
        return Case({"codes": c, "scales": s, "global_scale": one})

    finite = scales.copy()
    finite[(finite & 0x7F) == 0x7F] = 0x38  # no NaN scale: every value is compared
    c3, s3 = codes.reshape(2, 2, 32), finite.reshape(2, 2, 2)
    specs = [
        VectorSpec("one row: 1-d codes", ("InputRank",), case(codes[3], finite[3])),
        VectorSpec("a 3-d stack", ("InputRank",), case(c3, s3)),
        VectorSpec("no rows", ("EmptyInput",), case(codes[:0], finite[:0])),
        VectorSpec("rows of no codes: no blocks", ("EmptyInput",), case(codes[:, :0], finite[:, :0])),
        VectorSpec("int8 codes are rejected (uint8 expected)", ("InvalidInput",),
                   case(codes[:1, :16].view(np.int8), finite[:1, :1]), "invalid"),
        VectorSpec("float32 scales are rejected (E4M3 codes expected)", ("InvalidInput",),
                   case(codes[:1, :16], np.ones((1, 1), np.float32)), "invalid"),
        VectorSpec("0-d codes are rejected", ("InvalidInput", "InputRank"), case(codes[0, 0], finite[0, 0]),
                   "invalid"),
        VectorSpec("scales of a 2-d shape for 3-d codes are rejected", ("InvalidInput", "InputRank"),
                   case(c3, finite), "invalid"),
    ]
    for n, k, what in ((24, 2, "its padded"), (24, 1, "its whole"), (8, 1, "its padded")):
        specs.append(VectorSpec(f"a last axis of {n} is rejected (scales for {what} blocks: {k})",
                                ("InvalidInput", "RaggedGroup"), case(codes[:, :n], finite[:, :k]), "invalid"))
    for bit in range(4, 8):
        dirty = codes[:2, :16].copy()
        dirty[1, 5] |= 1 << bit
        specs.append(VectorSpec(f"a code with bit {bit} set (above its 4) is rejected, not masked",
                                ("DirtyBits", "InvalidInput"), case(dirty, finite[:2, :1]), "invalid"))
    return specs


def _nvfp4_dequant_examples(supported):
    @st.composite
    def case(draw):
        shape = draw(block_shapes(block=16, max_blocks=3), label="shape")
        c = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, 15)), label="codes")
        sc = draw(hnp.arrays(np.uint8, (*shape[:-1], shape[-1] // 16)), label="scales")
        gs = draw(st.floats(2.0**-20, 2.0**20, width=32), label="global_scale")
        return Case({"codes": c, "scales": sc, "global_scale": np.float32(gs)},
                    {"recipe": draw(st.sampled_from(list(supported["recipe"])), label="recipe"),
                     "order": draw(st.sampled_from(list(supported["order"])), label="order")})

    return case()


_NVFP4_OPS = [
    Op(
        name="formats.nvfp4.quantize",
        kind=Kind.EXACT,
        oracle=_nvfp4_oracle,
        summary="float32 or float16 [..., R, 16k] -> (E2M1 codes, E4M3 scales [..., R, k], FP32 global scale)",
        spec=f"{SPEC}#nvfp4",
        variants=_NV_VARIANTS,
        vectors=_nvfp4_vectors,
        examples=_nvfp4_examples,
        compare=_compare_nvfp4,
        outputs=("codes", "scales", "global_scale"),
        array_format=lambda n, a: {"codes": "float4_e2m1fn", "scales": "float8_e4m3fn"}.get(n),
    ),
    Op(
        name="formats.nvfp4.dequantize",
        kind=Kind.EXACT,
        oracle=nvfp4.dequantize,
        summary="(E2M1 codes, E4M3 scales, global scale) -> values, exact at the output's precision",
        spec=f"{SPEC}#nvfp4",
        variants=(_NV_VARIANTS[0], _NV_ORDER),
        vectors=_nvfp4_dequant_vectors,
        examples=_nvfp4_dequant_examples,
        compare=_compare_at_output_precision,
        array_format=lambda n, a: {"codes": "float4_e2m1fn", "scales": "float8_e4m3fn"}.get(n),
    ),
]

def _layout_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.scales.to_blocked"))
    specs = []
    for rows, cols in ((1, 1), (128, 4), (129, 5), (300, 7), (256, 8), (32, 3)):
        s = rng.integers(1, 256, (rows, cols)).astype(np.uint8)
        specs.append(VectorSpec(f"{rows}x{cols} scales (padded to {-(-rows // 128) * 128}x{-(-cols // 4) * 4})",
                                ("LayoutTranspose", "LayoutPadding"), Case({"scales": s})))
    specs.append(VectorSpec("no rows", ("EmptyInput",), Case({"scales": np.zeros((0, 4), np.uint8)})))
    specs.append(VectorSpec("float32 scales: the layout moves any element type unchanged", ("LayoutTranspose",),
                            Case({"scales": rng.standard_normal((130, 5)).astype(np.float32)})))
    specs.append(VectorSpec("1-D scales are rejected", ("InvalidInput", "InputRank"),
                            Case({"scales": np.zeros(8, np.uint8)}), "invalid"))
    specs.append(VectorSpec("3-D scales are rejected, not flattened", ("InvalidInput", "InputRank"),
                            Case({"scales": np.zeros((2, 128, 4), np.uint8)}), "invalid"))
    return specs


def _unblock_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.scales.from_blocked"))
    specs = []
    for rows, cols in ((1, 1), (128, 4), (129, 5), (300, 7)):
        n = -(-rows // 128) * 128 * (-(-cols // 4) * 4)
        specs.append(VectorSpec(f"{rows}x{cols} from its blocked layout", ("LayoutTranspose",),
                                Case({"blocked": rng.integers(0, 256, n).astype(np.uint8),
                                      "rows": np.int64(rows), "cols": np.int64(cols)})))
    specs.append(VectorSpec("a blocked array of the wrong length is rejected", ("InvalidInput",),
                            Case({"blocked": np.zeros(100, np.uint8), "rows": np.int64(128), "cols": np.int64(4)}),
                            "invalid"))
    specs.append(VectorSpec("a 2-D blocked array is rejected, not flattened", ("InvalidInput", "InputRank"),
                            Case({"blocked": np.zeros((128, 4), np.uint8), "rows": np.int64(128),
                                  "cols": np.int64(4)}), "invalid"))
    return specs


def _layout_examples(supported):
    return st.tuples(st.integers(0, 300), st.integers(1, 12), st.integers(0, 2**32 - 1)).map(
        lambda t: Case({"scales": np.random.default_rng(t[2]).integers(0, 256, t[:2]).astype(np.uint8)}, {}))


def _unblock_examples(supported):
    def make(t):
        rows, cols, seed = t
        n = -(-rows // 128) * 128 * (-(-cols // 4) * 4)
        b = np.random.default_rng(seed).integers(0, 256, n).astype(np.uint8)
        return Case({"blocked": b, "rows": np.int64(rows), "cols": np.int64(cols)}, {})

    return st.tuples(st.integers(0, 300), st.integers(1, 12), st.integers(0, 2**32 - 1)).map(make)


def _from_blocked(blocked, rows, cols):
    return layouts.from_blocked(blocked, int(rows), int(cols))


_INT_VARIANTS = (
    Variant("scheme", intgroup.SCHEMES, "asymmetric",
            "asymmetric min-max with a zero point (GPTQ, AWQ) or symmetric amax / (2^(b-1) - 1)"),
    Variant("group", tuple(str(g) for g in intgroup.GROUP_SIZES[::-1]), "128",
            "elements per scale along the input (last) axis"),
    Variant("zero_storage", intgroup.ZERO_STORAGE, "exact",
            "zero points as they are (GPTQ v2, AWQ) or minus one modulo 2^b (GPTQ v1 checkpoints)"),
)


def _int_oracle(bits):
    def quantize(w, *, scheme="asymmetric", group="128", zero_storage="exact"):
        return intgroup.quantize(w, bits=bits, group=int(group), scheme=scheme, zero_storage=zero_storage)

    return quantize


def _int_dequant_oracle(bits):
    def dequantize(codes, scales, zeros, *, group="128", zero_storage="exact"):
        return intgroup.dequantize(codes, scales, zeros, group=int(group), bits=bits, zero_storage=zero_storage)

    return dequantize


def _int_ties(bits: int, scheme: str, rng) -> np.ndarray:
    """Groups of 128 whose scale is fixed by their first two elements (the group's min
    and max) and whose other elements sit within 3 float32 ulps of (k + 1/2) * scale:
    a float64 quotient or a multiply by the reciprocal rounds some of them otherwise."""
    rows = []
    for lo, hi in ((-0.640592098, 0.277088851), (-0.0505637899, 0.0263623595), (-1.0, 1.0)):
        lo, hi = np.float32(lo), np.float32(hi)
        w = np.zeros(128, np.float32)
        w[0], w[1] = lo, hi
        _, scale, _ = intgroup.quantize(w[None, :], bits=bits, group=128, scheme=scheme)
        scale = scale[0, 0]
        k = rng.integers(-(1 << (bits - 1)) + 1, (1 << (bits - 1)) - 1, 18).astype(np.float32)
        centre = ((k + np.float32(0.5)) * scale).astype(np.float32)
        near = (centre.view(np.int32)[:, None] + np.arange(-3, 4)).astype(np.int32).view(np.float32).ravel()
        near = near[(near > lo) & (near < hi)]
        w[2:2 + min(126, near.size)] = near[:126]
        rows.append(w)
    return np.stack(rows)


def _int_vectors(bits: int) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.int{bits}_group.quantize"))
    specs = []
    w = (rng.standard_normal((8, 256)) * 0.02).astype(np.float32)
    w[:, 17] *= 30  # an outlier input channel
    for scheme in intgroup.SCHEMES:
        for group in intgroup.GROUP_SIZES:
            specs.append(VectorSpec(f"{scheme}, group {group}: weights with an outlier channel", ("Random",),
                                    Case({"w": w}, {"scheme": scheme, "group": str(group)})))
        one_sided = np.abs(w[:2, :128]) + 0.01
        specs.append(VectorSpec(f"{scheme}: all-positive groups (the zero point meets its clamp)", ("ZeroPoint",),
                                Case({"w": np.concatenate([one_sided, -one_sided])}, {"scheme": scheme})))
        specs.append(VectorSpec(f"{scheme}: zero points stored GPTQ v1 style (minus one, 0 wraps)", ("ZeroPoint",),
                                Case({"w": np.concatenate([one_sided, -one_sided])},
                                     {"scheme": scheme, "zero_storage": "gptq_v1"})))
        specs.append(VectorSpec(f"{scheme}: an all-zero group", ("ZeroBlock",),
                                Case({"w": np.zeros((1, 128), np.float32)}, {"scheme": scheme})))
        steps = (np.arange(128) - 64).astype(np.float32) * np.float32(0.5)
        specs.append(VectorSpec(f"{scheme}: values on half steps (rounding ties)", ("TiesToEven",),
                                Case({"w": steps[None, :]}, {"scheme": scheme})))
        specs.append(VectorSpec(f"{scheme}: weights within 3 float32 ulps of (k + 1/2) * scale", ("TiesToEven",),
                                Case({"w": _int_ties(bits, scheme, rng)}, {"scheme": scheme})))
    qmax = (1 << bits) - 1
    lo = np.float32(-6.5 / 16)  # scale exactly 1/16 and -lo/scale exactly 6.5 (a tie)
    exact = (np.float64(lo) + np.arange(128) * (qmax / 16 / 127)).astype(np.float32)  # not linspace: its rounding varies by numpy version
    exact[0], exact[-1] = lo, np.float32(lo + np.float32(qmax / 16))
    specs.append(VectorSpec("asymmetric: the zero point -lo/scale is exactly k + 1/2 (rounds to even)",
                            ("ZeroPoint", "TiesToEven"), Case({"w": exact[None, :]}, {"scheme": "asymmetric"})))
    specs.append(VectorSpec("NaN weights are rejected", ("InvalidInput", "NaN"),
                            Case({"w": np.full((1, 128), np.nan, np.float32)}), "invalid"))
    specs += _int_shape_vectors(w) + _degenerate_vectors()
    return specs


def _int_shape_vectors(w: np.ndarray) -> list[VectorSpec]:
    """Every input dtype and rank intB_group.quantize accepts, and what it refuses."""
    specs = [
        VectorSpec("float16 weights (widened to float32 exactly)", ("Float16Input",),
                   Case({"w": w[:2].astype(np.float16)}, {"group": "64"})),
        VectorSpec("one row: a 1-d weight vector", ("InputRank",), Case({"w": w[0]}, {"group": "64"})),
        VectorSpec("a 3-d stack of weight matrices", ("InputRank",),
                   Case({"w": w[:4].reshape(2, 2, 256)}, {"group": "128"})),
        VectorSpec("a 3-d float16 stack", ("InputRank", "Float16Input"),
                   Case({"w": w[:4, :64].reshape(2, 2, 64).astype(np.float16)}, {"group": "32"})),
        VectorSpec("no rows: empty codes, scales and zero points", ("EmptyInput",),
                   Case({"w": np.zeros((0, 128), np.float32)})),
        VectorSpec("rows of no weights: no groups", ("EmptyInput",), Case({"w": np.zeros((2, 0), np.float32)})),
        VectorSpec("float64 weights are rejected, not narrowed", ("InvalidInput",),
                   Case({"w": w[:1].astype(np.float64)}), "invalid"),
        VectorSpec("integer weights are rejected", ("InvalidInput",), Case({"w": np.ones((1, 128), np.int32)}),
                   "invalid"),
        VectorSpec("a 0-d weight is rejected", ("InvalidInput", "InputRank"),
                   Case({"w": np.float32(1)}, {"group": "32"}), "invalid"),
        VectorSpec("Inf weights are rejected", ("InvalidInput", "Infinity"),
                   Case({"w": np.where(np.arange(128) == 3, np.float32(np.inf), w[0, :128])[None, :]}), "invalid"),
        VectorSpec("a group whose range max - min overflows float32 is rejected", ("InvalidInput",),
                   Case({"w": np.float32([3e38, -3e38] * 64)[None, :]}, {"scheme": "asymmetric"}), "invalid"),
    ]
    for group in intgroup.GROUP_SIZES:
        for n in (group + group // 2, group // 2):
            specs.append(VectorSpec(f"a last axis of {n} with group {group} is rejected, not padded or cut",
                                    ("InvalidInput", "RaggedGroup"), Case({"w": w[:1, :n]}, {"group": str(group)}),
                                    "invalid"))
    return specs


def _degenerate_vectors() -> list[VectorSpec]:
    """Groups whose scale (hi - lo) / qmax or amax / (2^(b-1) - 1) underflows float32, or
    falls below the 2^-23 floor: they take scale 2^-23 and quantize to the zero point."""
    subnormals = np.float32([-3e-45, 1e-45, 0.0, 4e-45] * 32)
    tiny = (np.sin(np.arange(128)) * 4e-7).astype(np.float32)  # a scale of about 5e-8 or 3e-9: below 2^-23
    normal = np.float32(np.linspace(-0.03, 0.05, 128))
    specs = []
    for scheme in intgroup.SCHEMES:
        specs.append(VectorSpec(f"{scheme}: a group of float32 subnormals (its scale underflows to 0)",
                                ("DegenerateGroup",), Case({"w": np.stack([subnormals, normal])}, {"scheme": scheme})))
        specs.append(VectorSpec(f"{scheme}: a group of weights near 4e-7 (scale floored at 2^-23)",
                                ("DegenerateGroup",), Case({"w": np.stack([tiny, -tiny])}, {"scheme": scheme})))
        specs.append(VectorSpec(f"{scheme}: float16 subnormals (widened exactly; their scale is floored too)",
                                ("DegenerateGroup", "Float16Input"),
                                Case({"w": np.float16([6e-8, -1.2e-7, 0.0, 1.8e-7] * 8 + [6e-8, 0.0, 3e-5, -1e-5] * 8)
                                      [None, :]}, {"scheme": scheme, "group": "32"})))
    return specs


def _int_dequant_vectors(bits: int) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.int{bits}_group.dequantize"))
    codes = rng.integers(0, 1 << bits, (4, 256)).astype(np.uint8)
    specs = []
    for group in intgroup.GROUP_SIZES:
        n = 256 // group
        scales = (rng.random((4, n)) * 0.01).astype(np.float32)
        zeros = rng.integers(0, 1 << bits, (4, n)).astype(np.uint8)
        for storage in intgroup.ZERO_STORAGE:
            specs.append(VectorSpec(f"random codes, group {group}, zero points {storage}", ("ZeroPoint", "Random"),
                                    Case({"codes": codes, "scales": scales, "zeros": zeros},
                                         {"group": str(group), "zero_storage": storage})))
    specs.append(VectorSpec("scales of the wrong shape are rejected", ("InvalidInput",),
                            Case({"codes": codes, "scales": np.ones((4, 3), np.float32),
                                  "zeros": np.zeros((4, 3), np.uint8)}), "invalid"))
    sc = (rng.random((4, 2)) * 0.01).astype(np.float32)
    z = rng.integers(0, 1 << bits, (4, 2)).astype(np.uint8)
    specs += [
        VectorSpec("one row: 1-d codes", ("InputRank",),
                   Case({"codes": codes[0], "scales": sc[0], "zeros": z[0]})),
        VectorSpec("a 3-d stack", ("InputRank",),
                   Case({"codes": codes.reshape(2, 2, 256), "scales": sc.reshape(2, 2, 2),
                         "zeros": z.reshape(2, 2, 2)})),
        VectorSpec("no rows", ("EmptyInput",),
                   Case({"codes": codes[:0], "scales": sc[:0], "zeros": z[:0]})),
        VectorSpec("int32 codes are rejected", ("InvalidInput",),
                   Case({"codes": codes.astype(np.int32), "scales": sc, "zeros": z}), "invalid"),
        VectorSpec("float64 scales are rejected", ("InvalidInput",),
                   Case({"codes": codes, "scales": sc.astype(np.float64), "zeros": z}), "invalid"),
        VectorSpec("a last axis of 192 with group 128 is rejected, not padded or cut", ("InvalidInput", "RaggedGroup"),
                   Case({"codes": codes[:, :192], "scales": sc, "zeros": z}), "invalid"),
        VectorSpec("a last axis of 48 with group 32 is rejected, not padded or cut", ("InvalidInput", "RaggedGroup"),
                   Case({"codes": codes[:, :48], "scales": sc, "zeros": z}, {"group": "32"}), "invalid"),
    ]
    if bits < 8:
        for bit in (bits, 7):
            dirty = codes.copy()
            dirty[1, 5] |= 1 << bit
            specs.append(VectorSpec(f"a code with bit {bit} set is rejected, not masked", ("DirtyBits", "InvalidInput"),
                                    Case({"codes": dirty, "scales": sc, "zeros": z}), "invalid"))
            dirty_z = z.copy()
            dirty_z[2, 1] |= 1 << bit
            specs.append(VectorSpec(f"a zero point with bit {bit} set is rejected, not masked",
                                    ("DirtyBits", "InvalidInput"),
                                    Case({"codes": codes, "scales": sc, "zeros": dirty_z}), "invalid"))
    return specs


def _int_examples(bits: int):
    def strategy(supported):
        @st.composite
        def case(draw):
            params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
            shape = draw(block_shapes(block=int(params["group"]), max_blocks=3), label="shape")
            dtype = st.just(draw(st.sampled_from([np.dtype(np.float32), np.dtype(np.float16)]), label="dtype"))
            # 1e-7 puts scales below the 2^-23 floor (degenerate groups); float16 stays finite at every scale.
            scale = st.sampled_from([1e-7, 1e-4, 1e-2, 0.1, 1.0, 10.0])
            w = draw(st.one_of(realistic_arrays(shape=st.just(shape), dtype=dtype, scale=scale),
                               outlier_arrays(shape=st.just(shape), dtype=dtype)),
                     label="w")
            return Case({"w": w}, params)

        return case()

    return strategy


def _int_dequant_examples(bits: int):
    def strategy(supported):
        @st.composite
        def case(draw):
            group = draw(st.sampled_from(list(supported["group"])), label="group")
            shape = draw(block_shapes(block=int(group), max_blocks=2), label="shape")
            n = (*shape[:-1], shape[-1] // int(group))
            c = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, (1 << bits) - 1)), label="codes")
            sc = draw(hnp.arrays(np.float32, n, elements=st.floats(2.0**-20, 10.0, width=32)), label="scales")
            z = draw(hnp.arrays(np.uint8, n, elements=st.integers(0, (1 << bits) - 1)), label="zeros")
            storage = draw(st.sampled_from(list(supported["zero_storage"])), label="zero_storage")
            return Case({"codes": c, "scales": sc, "zeros": z}, {"group": group, "zero_storage": storage})

        return case()

    return strategy


_compare_int = partial(compare_parts, names=("codes", "scales", "zeros"),
                       comparators=(compare_exact, partial(compare_values, fmt="float32"), compare_exact))


def _int_ops(bits: int) -> list[Op]:
    return [
        Op(name=f"formats.int{bits}_group.quantize", kind=Kind.EXACT, oracle=_int_oracle(bits),
           summary=f"float32 w [..., n] -> (INT{bits} codes, float32 scales, zero points) per group",
           spec=f"{SPEC}#int-groups", variants=_INT_VARIANTS, vectors=partial(_int_vectors, bits),
           examples=_int_examples(bits), compare=_compare_int, outputs=("codes", "scales", "zeros")),
        Op(name=f"formats.int{bits}_group.dequantize", kind=Kind.EXACT, oracle=_int_dequant_oracle(bits),
           summary=f"(INT{bits} codes, scales, zeros) -> float32 weights", spec=f"{SPEC}#int-groups",
           variants=_INT_VARIANTS[1:], vectors=partial(_int_dequant_vectors, bits),
           examples=_int_dequant_examples(bits), compare=compare_values),
    ]


_WORD_ORDER = Variant("order", intgroup.WORD_ORDERS, "gptq",
                      "nibble order in an int32 word: sequential (GPTQ) or interleaved 0,2,4,6,1,3,5,7 (AWQ)")


def _pack32_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.int4.pack_int32"))
    specs = []
    for order in intgroup.WORD_ORDERS:
        p = {"order": order}
        specs += [
            VectorSpec(f"0..7 in one word shows the nibble order ({order})", ("WordOrder",),
                       Case({"codes": np.arange(8, dtype=np.uint8)}, p)),
            VectorSpec(f"codes with the top nibble set (sign of the int32 word) ({order})", ("WordOrder",),
                       Case({"codes": np.array([15] * 8 + [0, 0, 0, 0, 0, 0, 0, 15], np.uint8)}, p)),
            VectorSpec(f"random codes [4, 64] ({order})", ("WordOrder", "Random"),
                       Case({"codes": rng.integers(0, 16, (4, 64)).astype(np.uint8)}, p)),
            VectorSpec(f"a code above 15 is rejected ({order})", ("DirtyBits", "InvalidInput"),
                       Case({"codes": np.array([16] + [0] * 7, np.uint8)}, p), "invalid"),
            VectorSpec(f"a code with bit 7 set is rejected, not masked ({order})", ("DirtyBits", "InvalidInput"),
                       Case({"codes": np.array([0] * 7 + [0x81], np.uint8)}, p), "invalid"),
            VectorSpec(f"a 3-d stack of codes ({order})", ("InputRank", "WordOrder"),
                       Case({"codes": rng.integers(0, 16, (2, 3, 16)).astype(np.uint8)}, p)),
            VectorSpec(f"empty rows give empty words ({order})", ("EmptyInput",),
                       Case({"codes": np.zeros((3, 0), np.uint8)}, p)),
            VectorSpec(f"int32 codes are rejected ({order})", ("InvalidInput",),
                       Case({"codes": np.arange(8, dtype=np.int32)}, p), "invalid"),
            VectorSpec(f"a 0-d code is rejected ({order})", ("InvalidInput", "InputRank"),
                       Case({"codes": np.array(3, np.uint8)}, p), "invalid"),
        ]
        specs += [VectorSpec(f"a last axis of {n} is rejected, not padded to a word ({order})",
                             ("InvalidInput", "RaggedGroup"), Case({"codes": np.ones((2, n), np.uint8)}, p), "invalid")
                  for n in (7, 12)]
    return specs


def _unpack32_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.int4.unpack_int32"))
    specs = []
    for order in intgroup.WORD_ORDERS:
        p = {"order": order}
        specs += [
            VectorSpec(f"words 0x76543210 and -1 ({order})", ("WordOrder",),
                       Case({"words": np.array([0x76543210, -1], np.int32)}, p)),
            VectorSpec(f"random words [3, 8] ({order})", ("WordOrder", "Random"),
                       Case({"words": rng.integers(-2**31, 2**31, (3, 8)).astype(np.int32)}, p)),
            VectorSpec(f"uint32 words are rejected ({order})", ("InvalidInput",),
                       Case({"words": np.zeros(2, np.uint32)}, p), "invalid"),
            VectorSpec(f"a 3-d stack of words, every bit pattern valid ({order})", ("InputRank", "DirtyBits"),
                       Case({"words": np.array([-1, -2**31, 2**31 - 1, 0x10000000, 0x7, -8, 1, 0x0F0F0F0F],
                                               np.int32).reshape(2, 2, 2)}, p)),
            VectorSpec(f"empty rows give empty codes ({order})", ("EmptyInput",),
                       Case({"words": np.zeros((3, 0), np.int32)}, p)),
            VectorSpec(f"a 0-d word is rejected ({order})", ("InvalidInput", "InputRank"),
                       Case({"words": np.array(0x76543210, np.int32)}, p), "invalid"),
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
_pack32_examples = _ordered("codes", hnp.arrays(np.uint8, block_shapes(block=8, max_blocks=4), elements=_NIBBLES))
_unpack32_examples = _ordered("words", hnp.arrays(np.int32, small_shapes(max_dims=2, max_side=6)))


_LAYOUT_AND_INT_OPS = [
    Op(name="formats.scales.to_blocked", kind=Kind.EXACT, oracle=layouts.to_blocked,
       summary="scales [R, C] -> cuBLAS/CUTLASS 128x4 blocked layout (flat, zero padded)",
       spec=f"{SPEC}#scale-layout", variants=(), vectors=_layout_vectors, examples=_layout_examples,
       compare=compare_exact),
    Op(name="formats.scales.from_blocked", kind=Kind.EXACT, oracle=_from_blocked,
       summary="(blocked, rows, cols) -> scales [rows, cols]", spec=f"{SPEC}#scale-layout", variants=(),
       vectors=_unblock_vectors, examples=_unblock_examples, compare=compare_exact),
    Op(name="formats.int4.pack_int32", kind=Kind.EXACT, oracle=intgroup.pack_int32,
       summary="INT4 codes [..., 8k] -> int32 words [..., k]", spec=f"{SPEC}#int-groups", variants=(_WORD_ORDER,),
       vectors=_pack32_vectors, examples=_pack32_examples, compare=compare_exact),
    Op(name="formats.int4.unpack_int32", kind=Kind.EXACT, oracle=intgroup.unpack_int32,
       summary="int32 words [..., k] -> INT4 codes [..., 8k]", spec=f"{SPEC}#int-groups", variants=(_WORD_ORDER,),
       vectors=_unpack32_vectors, examples=_unpack32_examples, compare=compare_exact),
] + _int_ops(4) + _int_ops(8)

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
] + [op for elem in mx.MX_ELEMENTS for op in _mx_ops(elem)] + _NVFP4_OPS + _LAYOUT_AND_INT_OPS

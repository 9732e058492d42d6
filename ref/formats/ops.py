"""Catalog declarations of the formats area not yet moved into ref/formats/catalog/
(the element codecs, stochastic rounding and FP4 packing have moved there).

The only file of the area that reaches up to `ref.testing` (catalog types,
comparators, strategies, vector specs); `ref.conformance.catalog` discovers it.

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
from dataclasses import replace
from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.testing.operations import Flag, Kind, Op, Variant, seed_for
from ref.formats.minifloat import (
    get_format,
    encode,
)
from ref.formats import intgroup, layouts, mx, nvfp4
from ref.testing.compare import (
    Comparison,
    compare_block_codes,
    compare_exact,
    compare_parts,
    compare_values,
)
from ref.testing.golden import Case, VectorSpec
from ref.testing.strategies import (
    block_shapes,
    outlier_arrays,
    realistic_arrays,
    representable_values,
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

OPERATIONS = [op for elem in mx.MX_ELEMENTS for op in _mx_ops(elem)] + _NVFP4_OPS + _LAYOUT_AND_INT_OPS

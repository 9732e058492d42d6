"""MX block codecs (spec/formats.md#mx): blocks of 32 along the last axis share one
E8M0 scale.

  formats.mxE.quantize    x [..., 32k] -> (E codes, E8M0 scales [..., k])   (E: the element)
  formats.mxE.dequantize  (codes, scales) -> values, exact at the output's precision

Both exact; the oracles are `ref.formats.mx.quantize` and `dequantize` with the
element bound.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.formats import mx
from ref.formats.catalog.case_classes import for_blocks
from ref.formats.minifloat import get_format
from ref.testing.catalog_types import Area, Flag, Variant, seed_for
from ref.testing.compare import Comparison, compare_block_codes, compare_values
from ref.testing.strategies import block_shapes, outlier_arrays, realistic_arrays, representable_values
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "MX_NAMES", "OPERATIONS", "VARIANTS", "compare_at_output_precision"]

FORMATS = Area("formats", spec="spec/formats.md")

# element -> the op prefix (formats.<prefix>.quantize), after OCP's format names
MX_NAMES = {"float8_e4m3fn": "mxfp8_e4m3", "float8_e5m2": "mxfp8_e5m2", "float6_e2m3fn": "mxfp6_e2m3",
            "float6_e3m2fn": "mxfp6_e3m2", "float4_e2m1fn": "mxfp4", "int8": "mxint8"}

VARIANTS = (
    Variant("scale_rule", mx.ScaleRule, "floor",
            "shared exponent: floor (OCP), ceil, even (amax rounded to the element width), rceil (NVIDIA)"),
    Variant("scale_overflow", mx.ScaleOverflow, "nan",
            "Inf in a block or an exponent past 127: scale 0xFF (NaN) or 0xFE (satfinite, TransformerEngine)"),
)

# The flags of block formats that only MX vectors carry, and the two every block
# format shares (ZeroBlock, NanBlock). Element-level flags (TiesToEven, Subnormal,
# Float16Input, InputRank, DirtyBits...) are explained by the element catalog.
FLAGS = {
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
    "InfBlock": Flag("an Inf in an MX block given a finite scale (read from the exponent bits of Inf) or ignored",
                     "the poisoned block decodes as saturated numbers instead of NaN"),
    "SmallestScale": Flag("elements of a block at the MX scale 2^-127 divided by another power of two (2^-126, "
                          "float32's smallest normal, or 1)", "tiny blocks lose a bit of every element, or all of them"),
}


def _row(amax: float, n: int = 32, seed: int = 0) -> np.ndarray:
    """One block of n values with the given amax (at index 3), the rest below it."""
    r = np.random.default_rng(seed).uniform(-1, 1, n) * amax
    r[3] = amax
    return r


def _add(specs: list, comment: str, flags, x, result: str = "valid", **params) -> None:
    specs.append(VectorSpec(comment, tuple(flags), Case({"x": np.asarray(x, dtype=np.float32)}, params), result))


def _ulp_rows(top: float, ks) -> np.ndarray:
    """Blocks whose amax is one float32 ulp either side of top * 2^k."""
    edges = [np.float32(top * 2.0**k) for k in ks]
    return np.stack([_row(float(v), seed=i) for i, e in enumerate(edges)
                     for v in (np.nextafter(e, np.float32(np.inf)), np.nextafter(e, np.float32(0)))])


def _scale_vectors(elem: str, rule: str, gauss: np.ndarray, outliers: np.ndarray) -> list[VectorSpec]:
    """The vectors of one scale rule: block maxima at and around powers of two and the
    element max, zero, subnormal and poisoned blocks."""
    emax, _ = mx.MX_ELEMENTS[elem]
    top = mx.max_element(elem)
    specs: list[VectorSpec] = []
    add = partial(_add, specs, scale_rule=rule)
    add(f"{rule}: Gaussian rows at four magnitudes", ["ScaleRule", "Random"], gauss)
    add(f"{rule}: an outlier channel sets each block's scale", ["ScaleRule"], outliers)
    add(f"{rule}: amax exactly a power of two", ["ScaleRule"],
        np.stack([_row(2.0**k, seed=k + 40) for k in (-20, -1, 0, 1, 7, 20)]))
    add(f"{rule}: amax one float32 ulp below a power of two", ["ScaleRule", "Log2Float32"],
        np.stack([_row(float(np.nextafter(np.float32(2.0**k), np.float32(0))), seed=k + 80)
                  for k in (-20, 1, 7, 20, 60)]))
    add(f"{rule}: amax at element max times a power of two, and just above", ["ScaleRule"],
        np.stack([_row(top * 2.0**k * f, seed=k + 7) for k in (-3, 0, 5) for f in (1.0, 1.0 + 2**-20)]))
    add(f"{rule}: amax one float32 ulp either side of element max times 2^k (the fp32 product "
        f"amax * (1/max) rounds onto the power of two)", ["ScaleRule", "Log2Float32"],
        _ulp_rows(top, (-100, -3, 0, 5, 60)))
    add(f"{rule}: amax one float32 ulp either side of element max times 2^-127",
        ["ScaleRule", "Log2Float32", "SmallestScale"], _ulp_rows(top, (-127,)))
    add(f"{rule}: all-zero block (and -0)", ["ZeroBlock"], np.stack([np.zeros(32), -np.zeros(32)]))
    add(f"{rule}: amax a float32 subnormal", ["ZeroBlock", "InputSubnormal", "SmallestScale"],
        np.stack([_row(1e-40), _row(3e-45, seed=3)]))
    add(f"{rule}: blocks at the smallest scale 2^-127 (code 0), elements divided by exactly 2^-127",
        ["SmallestScale"], np.stack([_row(2.0 ** (emax - 127)), _row(1.5 * 2.0 ** (emax - 129), seed=1),
                                     _row(2.0 ** (emax - 133), seed=2)]))
    huge = np.stack([_row(3.4e38), _row(2.0**127)])
    poison = np.stack([_row(1.0), _row(1.0)])
    poison[0, 9], poison[1, 30] = np.inf, -np.inf
    for overflow in (o.value for o in mx.ScaleOverflow):
        add(f"{rule}: amax near float32 max (the exponent may pass 127), scale_overflow={overflow}",
            ["Overflow"], huge, scale_overflow=overflow)
        add(f"{rule}: +-Inf in a block, scale_overflow={overflow} (0xFF: the block is NaN; 0xFE: "
            f"Inf saturates, the rest is tiny)", ["NanBlock", "InfBlock"], poison, scale_overflow=overflow)
    nan = np.stack([_row(1.0), _row(1.0)])
    nan[0, 9] = np.nan
    add(f"{rule}: NaN in a block", ["NanBlock"], nan)
    return specs


def quantize_vectors(elem: str) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.{MX_NAMES[elem]}.quantize"))
    emax, _ = mx.MX_ELEMENTS[elem]
    top = mx.max_element(elem)
    gauss = rng.standard_normal((4, 64)) * np.array([[1e-3], [1.0], [30.0], [1e4]])
    outliers = rng.standard_normal((2, 64))
    outliers[:, 5] *= 300
    specs = [s for rule in mx.ScaleRule for s in _scale_vectors(elem, rule.value, gauss, outliers)]
    sat = np.stack([_row(top * 2.0**k * 1.99 / (top / 2.0**emax) if elem != "int8" else 1.99 * 2.0**k)
                    for k in (0, 3)])
    _add(specs, "floor: amax/2^X above the element max saturates", ["ElementSaturation"], sat)
    values = np.array([0.0]) if elem == "int8" else representable_values(elem)
    ties = (values[:-1] + values[1:]) / 2 if elem != "int8" else (np.arange(-126, 126) + 0.5) / 64
    blk = ties[: (len(ties) // 32) * 32]
    if blk.size:
        tie_rows = blk.reshape(-1, 32).copy()
        tie_rows[:, 0] = 2.0**emax * 1.5  # pins the scale exponent at X = 0 (floor rule)
        _add(specs, "element ties round to even (scale pinned at 1)", ["TiesToEven"], tie_rows)
    _add(specs, "a 2x3x64 tensor, blocks along the last axis", ["Random", "InputRank"],
         rng.standard_normal((2, 3, 64)) * 5)
    _add(specs, "empty input", ["EmptyInput"], np.zeros((0, 32)))
    return specs + _shape_vectors((rng.standard_normal((4, 64)) * 5).astype(np.float32))


def _shape_vectors(x: np.ndarray) -> list[VectorSpec]:
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


def _bits(elem: str) -> int:
    return 8 if elem == "int8" else get_format(elem).nbits


def dequantize_vectors(elem: str) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.{MX_NAMES[elem]}.dequantize"))
    bits = _bits(elem)
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
    ] + _dequantize_shape_vectors(codes_all, scales, bits)


def _dequantize_shape_vectors(codes: np.ndarray, scales: np.ndarray, bits: int) -> list[VectorSpec]:
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


def _quantize_examples(supported):
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


def _dequantize_examples(elem: str):
    bits = _bits(elem)

    def strategy(supported):
        @st.composite
        def case(draw):
            shape = draw(block_shapes(block=32, max_blocks=3), label="shape")
            c = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, (1 << bits) - 1)), label="codes")
            s = draw(hnp.arrays(np.uint8, (*shape[:-1], shape[-1] // 32)), label="scales")
            return Case({"codes": c, "scales": s}, {})

        return case()

    return strategy


def compare_at_output_precision(expected, actual) -> Comparison:
    """Values exact at the candidate's output precision: a float32 (or float16) output
    must be the oracle's value rounded once to it (nearest even, overflow to Inf)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.dtype not in (np.float16, np.float32):
        return compare_values(expected, actual, fmt="float64")
    if actual.dtype.itemsize < expected.dtype.itemsize:
        with np.errstate(over="ignore"):
            expected = expected.astype(actual.dtype)
    return compare_values(expected, actual, fmt=actual.dtype.name)


def _ops(elem: str) -> list:
    name = MX_NAMES[elem]

    def array_format(n, a):
        return {"codes": None if elem == "int8" else elem, "scales": "float8_e8m0fnu"}.get(n)

    return [
        FORMATS.exact(f"{name}.quantize", partial(mx.quantize, elem=elem), anchor="mx",
                      summary=f"float32 or float16 [..., 32k] -> ({elem} codes, E8M0 scales [..., k]), OCP MX",
                      variants=VARIANTS, vectors=partial(quantize_vectors, elem), examples=_quantize_examples,
                      compare=partial(compare_block_codes, elem_fmt=None if elem == "int8" else elem),
                      outputs=("codes", "scales"), array_format=array_format,
                      case_flags=for_blocks(32, elem=None if elem == "int8" else elem)),
        FORMATS.exact(f"{name}.dequantize", partial(mx.dequantize, elem=elem), anchor="mx",
                      summary=f"({elem} codes, E8M0 scales) -> values, exact at the output's precision",
                      vectors=partial(dequantize_vectors, elem), examples=_dequantize_examples(elem),
                      compare=compare_at_output_precision, array_format=array_format,
                      case_flags=for_blocks(32, codes=None if elem == "int8" else elem,
                                            scale_nan=get_format("float8_e8m0fnu").is_nan_code)),
    ]


OPERATIONS = [op for elem in mx.MX_ELEMENTS for op in _ops(elem)]

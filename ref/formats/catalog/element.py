"""Element codecs: every element format's encode and decode.

  formats.F.encode   x [...] float16/32/64 -> codes [...]   (F: every element format)
  formats.F.decode   codes [...] -> float32 values

Both exact. The vectors are built in `element_vectors`; stochastic rounding is its
own operation (`ref.formats.catalog.stochastic`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.formats.catalog.case_classes import for_codes, for_elements
from ref.formats.catalog.element_vectors import decode_vectors, encode_vectors
from ref.formats.minifloat import FORMATS, FloatFormat, NanPolicy, NegativePolicy, Rounding, decode, encode
from ref.testing.catalog_types import Area, ExactOp, Flag, Variant, seed_for
from ref.testing.compare import compare_codes, compare_values
from ref.testing.params import variant_params
from ref.testing.strategies import codes, edge_values, element_inputs, variant_grid
from ref.testing.vector_files import Case

__all__ = ["AREA", "FLAGS", "LARGE", "OPERATIONS", "large_values", "policy_variants"]

AREA = Area("formats", spec="spec/formats.md")
LARGE = (1 << 24) + (1 << 20)  # past 65535 blocks x 256 threads = 16,776,960 elements

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
    "E8M0": Flag("E8M0 special cases: zero, negatives, Inf, NaN, values below 2^-127",
                 "a scale of zero or a negative amax yields a number instead of NaN"),
    "ScaleCeil": Flag("an E8M0 scale computed by floor (truncation) instead of ceiling in .rp mode",
                      "the block maximum overflows the element format after division by the scale"),
    "Exhaustive": Flag("any single wrong code in a decoder table",
                       "one value of the format decodes wrong"),
    "DirtyBits": Flag("bits above a code's width (in its byte) masked instead of rejected, rejected in a packed "
                      "byte that has no spare bits, or written where they must be zero",
                      "a corrupt or misaligned buffer decodes as numbers, or valid packed data is refused"),
    "InputRank": Flag("an input of another rank (0-d, 1-d, 3-d and more) flattened, squeezed or refused",
                      "a single row or a batch of matrices comes back in another shape, or fails"),
    "NanPayload": Flag("NaN recognised by its quiet bit or high payload only",
                       "a NaN whose payload sits in the low bits rounds into Inf or a number"),
}


def policy_variants(f: FloatFormat) -> tuple[Variant, ...]:
    """The overflow axis, and the negative (E8M0) and nan (formats without NaN) axes."""
    out = [Variant("overflow", f.overflow_policies(), f.default_overflow,
                   "saturate to max finite (PTX .satfinite) or go to Inf/NaN")]
    if not f.signed:
        out.append(Variant("negative", NegativePolicy, NegativePolicy.NAN,
                           "zero and negative input: NaN (ml_dtypes) or the code of |x|, zero giving the "
                           "smallest value (torch, CUDA's host conversion)"))
    if not f.has_nan:
        out.append(Variant("nan", NanPolicy, NanPolicy.MAX,
                           "code written for NaN input: +max (PTX), +0, or ml_dtypes' zero of flipped sign",
                           latitude=True))
    return tuple(out)


def _encode_variants(f: FloatFormat) -> tuple[Variant, ...]:
    rounding = Variant("rounding", Rounding, Rounding.NEAREST_EVEN,
                       "nearest (ties to even or away), or directed: toward zero, +infinity, -infinity")
    return (rounding, *policy_variants(f))


def _encode_examples(f: FloatFormat, supported: Mapping[str, Sequence]) -> st.SearchStrategy[Case]:
    return st.tuples(element_inputs(f), variant_params(supported)).map(lambda t: Case({"x": t[0]}, t[1]))


def _encode_sweep(f: FloatFormat, supported: Mapping[str, Sequence]) -> Iterable[Case]:
    """Every bfloat16 bit pattern as float32, every float16 bit pattern, and every tie
    +-1 ulp in float32 and float64, under every supported combination of variants."""
    bf16_all = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    f16_all = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    ev32 = edge_values(f, np.float32)
    ties32 = np.concatenate([ev32["ties"], ev32["tie_neighbours"]])
    ties64 = np.concatenate(list(edge_values(f, np.float64).values()))
    for params in variant_grid(supported):
        for x in (bf16_all, f16_all, ties32, ties64):
            yield Case({"x": x}, params)


def large_values(f: FloatFormat) -> np.ndarray:
    """LARGE float32 values on the format's scale (non-negative for an unsigned format)."""
    rng = np.random.default_rng(seed_for(f.name))
    x = rng.standard_normal(LARGE, dtype=np.float32) * np.float32(min(f.max_normal / 8, 1e4))
    return np.abs(x) if not f.signed else x


def _encode_large(f: FloatFormat, supported: Mapping[str, Sequence]) -> Iterable[Case]:
    """An array past 2^24 elements under the last value the implementation supports
    on each axis: a wrapper that forwards its options to the first launch only fails."""
    yield Case({"x": large_values(f)}, {axis: values[-1] for axis, values in supported.items()})


def _decode_large(f: FloatFormat, supported) -> Iterable[Case]:
    rng = np.random.default_rng(seed_for(f.name))
    yield Case({"codes": rng.integers(0, 1 << f.nbits, LARGE, dtype=np.uint32).astype(f.code_dtype)}, {})


def _every_code(f: FloatFormat, supported) -> Iterable[Case]:
    yield Case({"codes": np.arange(1 << f.nbits, dtype=np.int64).astype(f.code_dtype)}, {})


def _format_of(fmt: str, *names: str):
    return lambda name, arr: fmt if name in names else None


def _element_ops(f: FloatFormat) -> list[ExactOp]:
    variants = _encode_variants(f)
    encode_op = AREA.exact(
        f"{f.name}.encode", partial(encode, fmt=f.name), anchor="encode",
        summary=f"float16/32/64 -> {f.name} codes", variants=variants,
        vectors=partial(encode_vectors, f, variants), examples=partial(_encode_examples, f),
        compare=partial(compare_codes, fmt=f.name), array_format=_format_of(f.name, "expected"),
        exhaustive=partial(_encode_sweep, f), large=partial(_encode_large, f), case_flags=for_elements(f.name),
    )
    decode_op = AREA.exact(
        f"{f.name}.decode", partial(decode, fmt=f.name), anchor="decode",
        summary=f"{f.name} codes -> float32", vectors=partial(decode_vectors, f),
        examples=lambda supported: codes(f).map(lambda c: Case({"codes": c}, {})),
        compare=partial(compare_values, fmt="float32"), array_format=_format_of(f.name, "codes"),
        exhaustive=partial(_every_code, f), large=partial(_decode_large, f), case_flags=for_codes(f.name),
    )
    return [encode_op, decode_op]


OPERATIONS = [op for f in FORMATS.values() for op in _element_ops(f)]

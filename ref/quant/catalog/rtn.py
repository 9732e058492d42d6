"""Round-to-nearest group quantization (spec/quant.md#rtn): a scale and a zero point
per group of consecutive input channels, with GPTQ's and AWQ's range conventions,
the symmetric conventions of GPTQ, compressed-tensors and ref.formats.intgroup, and
GPTQ's MSE range search.

  quant.rtn.quantize    w [..., n] -> (codes int64 [..., n], scales [..., n/g], zeros [..., n/g])
  quant.rtn.dequantize  (codes, scales, zeros) -> weights [..., n] in the scales' dtype

Both exact (bit for bit); the oracles are `ref.quant.rtn.quantize_groups` and
`ref.quant.rtn.dequantize_groups`.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.quant import rtn
from ref.quant.catalog.common import AREA
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import Comparison, compare_exact, compare_parts, compare_values
from ref.testing.params import variant_params
from ref.testing.strategies import block_shapes, outlier_arrays, realistic_arrays
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

BITS = Variant("bits", rtn.BITS, 4, "bits per code: 2, 3, 4 or 8 (codes 0 .. 2^bits - 1)")
GROUP = Variant("group", (128, 64, 32, 16, 1, -1), 128,
                "input channels per scale (consecutive along the last axis); -1: one group per row (per-channel)")
SCHEME = Variant("scheme", rtn.Scheme, "asymmetric",
                 "asymmetric min-max with a zero point; symmetric as GPTQ, compressed-tensors or "
                 "ref.formats.intgroup (restricted) compute it")
ZERO_RANGE = Variant("zero_range", rtn.ZeroRange, "include_zero",
                     "the range forced to include zero (GPTQ, compressed-tensors) or the group's own min and max (AWQ)")
SCALE_FLOOR = Variant("scale_floor", rtn.ScaleFloor, "tiny",
                      "the smallest scale: the dtype's smallest normal, or its epsilon (compressed-tensors)")
SEARCH = Variant("search", rtn.Search, "minmax",
                 "the range itself, or GPTQ's MSE search (grid 100, maxshrink 0.8, norm 2.4)")

FLAGS = {
    "ZeroPointRounding": Flag("the zero point off by one: -lo / scale truncated or rounded half away from zero, or "
                              "shifted by one", "every weight of a group moves by one step"),
    "IncludeZero": Flag("the range not forced to include zero where GPTQ's convention says so (or forced where "
                        "AWQ's does not)", "one-sided groups get a narrower range and other codes"),
    "SymmetricConvention": Flag("one library's symmetric scale where another's is declared (2 amax / maxq, GPTQ's "
                                "lo = 0 for a non-negative group, or amax / (2^(b-1) - 1))",
                                "every scale differs, or a non-negative group's upper half clips"),
    "RoundingTies": Flag("w / scale rounded half away from zero (np.round of torch is half to even)",
                         "a weight exactly between two steps takes the other code"),
    "GroupAxis": Flag("groups taken along the output axis, or of the wrong size",
                      "scales pair with the wrong weights"),
    "AllZeroGroup": Flag("an all-zero group divided by a zero scale instead of GPTQ's -1, +1 range",
                         "NaN scales or codes from casting NaN"),
    "DegenerateScale": Flag("a scale that underflows (tiny weights) not raised to the floor",
                            "division by zero: codes from Inf or NaN"),
    "ArithmeticDtype": Flag("float64 arithmetic for float32 weights (or the reverse)",
                            "codes near a rounding boundary flip; scales differ in the last bit"),
    "MseSearch": Flag("GPTQ's MSE search with another grid, norm, shrink count or tie rule, or a zero point not "
                      "recomputed for each shrunk range", "other scales and codes for groups with outliers"),
}

_P2 = 2.0**-7


def _layer(rng, shape, dtype=np.float32, outlier: bool = True) -> np.ndarray:
    """Integers in [-40, 40] times 2^-7 (exact at every dtype) and, with `outlier`, input
    channel 5 times 12: the outlier channel that inflates its group's range."""
    w = rng.integers(-40, 41, shape).astype(np.float64) * _P2
    if outlier and shape[-1] > 5:
        w[..., 5] *= 12
    return w.astype(dtype)


def _variant_vectors(rng) -> list[VectorSpec]:
    specs = []
    for bits in rtn.BITS:
        for scheme in (s.value for s in rtn.Scheme):
            w = _layer(rng, (2, 64))
            w[1, 32:] = np.abs(w[1, 32:])  # one non-negative group: GPTQ's symmetric lo = 0
            for zr in (z.value for z in rtn.ZeroRange):
                flags = ["Random", "IncludeZero", "SymmetricConvention" if scheme != "asymmetric" else
                         "ZeroPointRounding"]
                specs.append(VectorSpec(f"{bits} bits, {scheme}, {zr}, group 32: an outlier channel, a "
                                        "non-negative group", tuple(flags),
                                        Case({"w": w}, {"bits": bits, "scheme": scheme, "zero_range": zr,
                                                        "group": 32})))
    return specs


def _group_vectors(rng) -> list[VectorSpec]:
    w = _layer(rng, (3, 128))
    specs = [VectorSpec(f"group {g}: scales along the input axis", ("GroupAxis", "Random"),
                        Case({"w": w}, {"group": g})) for g in (128, 64, 16, -1)]
    square = _layer(rng, (32, 32))
    square[:, :16] *= 4  # the first 16 input channels wide: only groups along the input axis see them together
    specs += [VectorSpec("a square layer, group 16: groups along the output axis give other scales", ("GroupAxis",),
                         Case({"w": square}, {"group": 16})),
              VectorSpec("groups of 1: every weight its own scale (asymmetric: codes at the range ends)",
                         ("GroupAxis",), Case({"w": w[:1, :16]}, {"group": 1})),
              VectorSpec("a single input column, per-channel", ("GroupAxis",),
                         Case({"w": w[:, 5:6]}, {"group": -1})),
              VectorSpec("groups of 1, symmetric", ("GroupAxis", "SymmetricConvention"),
                         Case({"w": w[:1, :16]}, {"group": 1, "scheme": "symmetric"}))]
    return specs


def _edge_vectors() -> list[VectorSpec]:
    s = np.float32(2.0**-4)
    tie_zero = np.float32([-6.5, 8.5] + [0.0] * 30) * s  # scale 1/16 exactly, -lo / scale = 6.5: a tie
    steps = (np.arange(-8, 8, dtype=np.float32) + np.float32(0.5)) * s  # every weight halfway between steps
    halves = np.concatenate([np.float32([-0.5, 0.4375]), steps[1:15], np.zeros(16, np.float32)])
    one_sided = (np.arange(1, 33, dtype=np.float32) * np.float32(2.0**-6))
    specs = [
        VectorSpec("-lo / scale exactly 6.5: the zero point rounds half to even (6)", ("ZeroPointRounding",),
                   Case({"w": tie_zero[None, :]}, {"group": 32})),
        VectorSpec("weights on half steps of scale 1/16: ties to even", ("RoundingTies",),
                   Case({"w": halves[None, :]}, {"group": 32})),
        VectorSpec("weights on half steps, symmetric", ("RoundingTies",),
                   Case({"w": (steps * np.float32(2))[None, :]}, {"group": 16, "scheme": "symmetric"})),
        VectorSpec("compressed-tensors: w / scale = 1/2 + 2^-24 plus the zero point 6 rounds to the tie 6.5 (6), "
                   "rounding first gives 1 + 6", ("ZeroPointRounding",),
                   Case({"w": np.concatenate([np.float32([-0.875, 0.0625, 2.0**-5 + 2.0**-28]),
                                              np.zeros(29, np.float32)])[None, :]},
                        {"group": 32, "scheme": "asymmetric_compressed_tensors"})),
        VectorSpec("all-positive groups: include_zero makes lo 0", ("IncludeZero", "ZeroPointRounding"),
                   Case({"w": np.stack([one_sided, -one_sided])}, {"group": 32})),
        VectorSpec("all-positive groups, minmax: the zero point clamps at 0 (AWQ)", ("IncludeZero",),
                   Case({"w": np.stack([one_sided, -one_sided])}, {"group": 32, "zero_range": "minmax"})),
    ]
    for scheme in (x.value for x in rtn.Scheme):
        specs += [
            VectorSpec(f"{scheme}: an all-zero group", ("AllZeroGroup",),
                       Case({"w": np.stack([np.zeros(32, np.float32), one_sided])}, {"group": 32, "scheme": scheme})),
            VectorSpec(f"{scheme}: an all-zero group, minmax (AWQ: no -1, +1 range; the floors decide)",
                       ("AllZeroGroup", "IncludeZero"),
                       Case({"w": np.stack([np.zeros(32, np.float32), one_sided])},
                            {"group": 32, "scheme": scheme, "zero_range": "minmax"})),
            VectorSpec(f"{scheme}: a non-negative group (GPTQ's symmetric keeps lo = 0)", ("SymmetricConvention",),
                       Case({"w": one_sided[None, :]}, {"group": 32, "scheme": scheme})),
            VectorSpec(f"{scheme}: constant groups of +3/8 and -3/8, minmax (zero range, scale floored)",
                       ("DegenerateScale", "IncludeZero"),
                       Case({"w": np.float32([[0.375] * 16, [-0.375] * 16])},
                            {"group": 16, "scheme": scheme, "zero_range": "minmax"})),
        ]
    tiny = np.float32([1, -3, 2, 0] * 8) * np.float32(2.0**-140)  # float32 subnormals: the scale underflows
    for floor in (f.value for f in rtn.ScaleFloor):
        specs.append(VectorSpec(f"subnormal weights: the scale is raised to the floor ({floor})", ("DegenerateScale",),
                                Case({"w": tiny[None, :]}, {"group": 32, "scale_floor": floor})))
    specs.append(VectorSpec("weights near 2^-30: above the smallest normal, below epsilon", ("DegenerateScale",),
                            Case({"w": tiny[None, :] * np.float32(2.0**110)}, {"group": 32, "scale_floor": "eps"})))
    return specs


def _mse_vectors(rng) -> list[VectorSpec]:
    specs = []
    for bits in rtn.BITS:
        for scheme in ("asymmetric", "symmetric"):
            w = _layer(rng, (4, 64))
            specs.append(VectorSpec(f"MSE search, {bits} bits, {scheme}: an outlier channel shrinks the range",
                                    ("MseSearch", "Random"),
                                    Case({"w": w}, {"bits": bits, "scheme": scheme, "group": 32, "search": "mse"})))
    w = _layer(rng, (2, 64))
    w[1, :32] = 0
    specs += [VectorSpec("MSE search with an all-zero group", ("MseSearch", "AllZeroGroup"),
                         Case({"w": w}, {"group": 32, "search": "mse"})),
              VectorSpec("MSE search, per-channel, float64", ("MseSearch", "ArithmeticDtype"),
                         Case({"w": _layer(rng, (3, 64), np.float64)}, {"group": -1, "search": "mse"}))]
    return specs


def _inexact_span() -> np.ndarray:
    """Rows [4, 32] of non-negative multiples of 2^-24 with the maximum near 1/2 and
    one odd multiple of 2^-30 below zero: hi - lo needs 30 bits, so float32 rounds it;
    kept are the first four candidates whose float32 scale differs from the float64
    one rounded to float32."""
    rng = np.random.default_rng(seed_for("quant.rtn.quantize/inexact span"))
    rows = []
    while len(rows) < 4:
        ints = rng.integers(0, 2**22, 32) * 64
        ints[0] = (2**23 + rng.integers(1, 2**20)) * 64
        ints[1] = -(rng.integers(1, 64) * 2 + 1)
        w = (ints * 2.0**-30).astype(np.float32)
        s32 = rtn.params(w, bits=4)[0]
        s64 = rtn.params(w.astype(np.float64), bits=4)[0].astype(np.float32)
        if s32 != s64:
            rows.append(w)
    return np.stack(rows)


def _shape_vectors(rng) -> list[VectorSpec]:
    w = _layer(rng, (4, 64))
    near = np.float32([0.5, 0.4375]) + np.float32(2.0**-20)  # float32 and float64 scales differ in the last bit
    odd = np.concatenate([near, _layer(rng, (30,)) / np.float32(3)])
    return [
        VectorSpec("float64 weights: float64 arithmetic", ("ArithmeticDtype",),
                   Case({"w": odd.astype(np.float64)[None, :] * 3}, {"group": 32})),
        VectorSpec("float32 weights of the same values: float32 arithmetic", ("ArithmeticDtype",),
                   Case({"w": (odd.astype(np.float64) * 3).astype(np.float32)[None, :]}, {"group": 32})),
        VectorSpec("float32 weights whose range is inexact in float32: float32 steps, not float64",
                   ("ArithmeticDtype",), Case({"w": _inexact_span()}, {"group": 32})),
        VectorSpec("float16 weights (widened to float32)", ("ArithmeticDtype",),
                   Case({"w": w[:2].astype(np.float16)}, {"group": 32})),
        VectorSpec("one row: 1-d weights", ("GroupAxis",), Case({"w": w[0]}, {"group": 32})),
        VectorSpec("a 3-d stack of layers", ("GroupAxis",), Case({"w": w.reshape(2, 2, 64)}, {"group": 32})),
        VectorSpec("no rows", ("EmptyInput",), Case({"w": w[:0]}, {"group": 32})),
        VectorSpec("rows of no weights, per-channel", ("EmptyInput",),
                   Case({"w": np.zeros((2, 0), np.float32)}, {"group": -1})),
        VectorSpec("NaN weights are rejected", ("InvalidInput", "NaN"),
                   Case({"w": np.where(np.arange(64) == 7, np.float32(np.nan), w[0])[None, :]}, {"group": 32}),
                   "invalid"),
        VectorSpec("Inf weights are rejected", ("InvalidInput",),
                   Case({"w": np.where(np.arange(64) == 9, np.float32(-np.inf), w[0])[None, :]}, {"group": 32}),
                   "invalid"),
        VectorSpec("a group that does not divide the input dimension is rejected", ("InvalidInput", "GroupAxis"),
                   Case({"w": w[:, :48]}, {"group": 32}), "invalid"),
        VectorSpec("integer weights are rejected", ("InvalidInput",),
                   Case({"w": np.ones((1, 32), np.int32)}, {"group": 32}), "invalid"),
        VectorSpec("a 0-d weight is rejected", ("InvalidInput",), Case({"w": np.float32(1)}, {"group": -1}),
                   "invalid"),
        VectorSpec("a range that overflows float32 is rejected", ("InvalidInput",),
                   Case({"w": np.float32([3e38, -3e38] * 16)[None, :]}, {"group": 32, "scheme": "asymmetric"}),
                   "invalid"),
        VectorSpec("the same weights, symmetric_compressed_tensors: amax / 7.5 is finite", ("Random",),
                   Case({"w": np.float32([3e38, -3e38] * 16)[None, :]},
                        {"group": 32, "scheme": "symmetric_compressed_tensors"})),
    ]


def _gap_vectors(rng) -> list[VectorSpec]:
    """Added after the adversary's round (issue 14); appended so that earlier ids stay."""
    zeros = np.zeros((1, 4), np.float32)
    near = np.float32([1, -3, 2, 0] * 8) * np.float32(2.0**-30)  # span 5 * 2^-30: scale below epsilon
    one_sided = np.arange(1, 33, dtype=np.float32) * np.float32(2.0**-6)
    specs = [
        # zero_to_eps: a scale of exactly 0 becomes epsilon (2^-23), not the smallest normal
        VectorSpec("symmetric_compressed_tensors, zero_to_eps: an all-zero group's scale 0 becomes 2^-23",
                   ("DegenerateScale", "AllZeroGroup"),
                   Case({"w": zeros}, {"bits": 4, "group": -1, "scheme": "symmetric_compressed_tensors",
                                       "scale_floor": "zero_to_eps"})),
        VectorSpec("asymmetric_compressed_tensors, zero_to_eps: an all-zero group's scale 0 becomes 2^-23",
                   ("DegenerateScale", "AllZeroGroup"),
                   Case({"w": zeros}, {"bits": 4, "group": -1, "scheme": "asymmetric_compressed_tensors",
                                       "scale_floor": "zero_to_eps"})),
        VectorSpec("asymmetric, minmax, zero_to_eps: a constant group of 1/2 (span 0) gets scale 2^-23",
                   ("DegenerateScale",),
                   Case({"w": np.float32([[0.5, 0.5]])}, {"group": -1, "zero_range": "minmax",
                                                            "scale_floor": "zero_to_eps"})),
        # bits outside 2, 3, 4, 8
        VectorSpec("bits 5 is rejected", ("InvalidInput",), Case({"w": np.float32([[0.125, -0.25]])},
                                                                  {"bits": 5, "group": -1}), "invalid"),
        VectorSpec("bits 1 is rejected", ("InvalidInput",), Case({"w": np.float32([[0.125, -0.25]])},
                                                                  {"bits": 1, "group": -1}), "invalid"),
        # the zero point: from the floored scale (asymmetric), from the raw one (compressed-tensors)
        VectorSpec("asymmetric_compressed_tensors, eps floor: the zero point from the scale before the floor",
                   ("DegenerateScale", "ZeroPointRounding"),
                   Case({"w": near[None, :]}, {"group": 32, "scheme": "asymmetric_compressed_tensors",
                                               "scale_floor": "eps"})),
        VectorSpec("asymmetric_compressed_tensors, zero_to_eps: the same weights, scale not floored",
                   ("DegenerateScale", "ZeroPointRounding"),
                   Case({"w": near[None, :]}, {"group": 32, "scheme": "asymmetric_compressed_tensors",
                                               "scale_floor": "zero_to_eps"})),
        # zero points are +0.0: -lo / scale = -0.0 for lo = 0 must not leave a negative zero
        VectorSpec("a non-negative group, asymmetric: lo = 0, the zero point is +0.0 (not -0.0)",
                   ("ZeroPointRounding", "IncludeZero"),
                   Case({"w": np.stack([one_sided, one_sided[::-1]])}, {"group": 16})),
        VectorSpec("a non-negative group, asymmetric, float64: the zero point is +0.0",
                   ("ZeroPointRounding", "IncludeZero"),
                   Case({"w": one_sided[None, :].astype(np.float64)}, {"group": 32})),
        # a float32 MSE search after the float64 one (vector 'MSE search, per-channel, float64'):
        # a shrink table kept from an earlier call's dtype fails one of the two
        VectorSpec("MSE search, per-channel, float32 (after a float64 MSE vector)", ("MseSearch", "ArithmeticDtype"),
                   Case({"w": _layer(rng, (3, 64))}, {"group": -1, "search": "mse"})),
    ]
    return specs


def quantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.rtn.quantize"))
    return (_variant_vectors(rng) + _group_vectors(rng) + _edge_vectors() + _mse_vectors(rng)
            + _shape_vectors(rng) + _gap_vectors(np.random.default_rng(seed_for("quant.rtn.quantize/gaps"))))


def dequantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.rtn.dequantize"))
    codes = rng.integers(0, 16, (4, 64))
    scales = (rng.integers(1, 200, (4, 2)) * 2.0**-12).astype(np.float32)
    zeros = rng.integers(0, 16, (4, 2)).astype(np.float32)
    base = {"codes": codes, "scales": scales, "zeros": zeros}
    wide = rng.integers(0, 16, (2, 256))
    return [
        VectorSpec("random INT4 codes [2, 256], group 128 (the default)", ("ZeroPointRounding", "Random"),
                   Case({"codes": wide, "scales": scales[:2], "zeros": zeros[:2]})),
        VectorSpec("random INT4 codes, group 32", ("ZeroPointRounding", "Random"), Case(base, {"group": 32})),
        VectorSpec("uint8 codes, float64 scales and zeros", ("ArithmeticDtype",),
                   Case({"codes": codes.astype(np.uint8), "scales": scales.astype(np.float64) / 3,
                         "zeros": zeros.astype(np.float64)}, {"group": 32})),
        VectorSpec("per-channel", ("GroupAxis",),
                   Case({"codes": codes, "scales": scales[:, :1], "zeros": zeros[:, :1]}, {"group": -1})),
        VectorSpec("groups of 16: scales [4, 4]", ("GroupAxis",),
                   Case({"codes": codes, "scales": np.repeat(scales, 2, axis=1), "zeros": np.repeat(zeros, 2, 1)},
                        {"group": 16})),
        VectorSpec("8-bit codes", ("Random",),
                   Case({"codes": rng.integers(0, 256, (2, 64)), "scales": scales[:2], "zeros": zeros[:2] * 16},
                        {"group": 32})),
        VectorSpec("no rows", ("EmptyInput",),
                   Case({"codes": codes[:0], "scales": scales[:0], "zeros": zeros[:0]}, {"group": 32})),
        VectorSpec("one row: 1-d codes", ("GroupAxis",),
                   Case({"codes": codes[0], "scales": scales[0], "zeros": zeros[0]}, {"group": 32})),
        VectorSpec("a 3-d stack", ("GroupAxis",),
                   Case({"codes": codes.reshape(2, 2, 64), "scales": scales.reshape(2, 2, 2),
                         "zeros": zeros.reshape(2, 2, 2)}, {"group": 32})),
        VectorSpec("negative codes are rejected", ("InvalidInput",),
                   Case({**base, "codes": codes - 1}, {"group": 32}), "invalid"),
        VectorSpec("float codes are rejected", ("InvalidInput",),
                   Case({**base, "codes": codes.astype(np.float32)}, {"group": 32}), "invalid"),
        VectorSpec("float16 scales are rejected", ("InvalidInput",),
                   Case({**base, "scales": scales.astype(np.float16)}, {"group": 32}), "invalid"),
        VectorSpec("scales of the wrong shape are rejected", ("InvalidInput", "GroupAxis"),
                   Case({**base, "scales": scales[:, :1]}, {"group": 32}), "invalid"),
        VectorSpec("a group that does not divide the input dimension is rejected", ("InvalidInput", "GroupAxis"),
                   Case({**base, "codes": codes[:, :48]}, {"group": 32}), "invalid"),
        # added after issue 14's adversary round
        VectorSpec("scales and zeros of the right size, the wrong shape ([4], not [2, 2]) are rejected",
                   ("InvalidInput", "GroupAxis"),
                   Case({"codes": codes[:2, :4], "scales": scales.reshape(-1)[:4], "zeros": zeros.reshape(-1)[:4]},
                        {"group": 2}), "invalid"),
        VectorSpec("zeros of the wrong shape (scales right) are rejected", ("InvalidInput", "GroupAxis"),
                   Case({**base, "zeros": zeros.T.copy()}, {"group": 32}), "invalid"),
        VectorSpec("per-channel: scales [rows, 1]", ("GroupAxis",),
                   Case({"codes": codes[:, :8], "scales": scales[:, :1] * 4, "zeros": zeros[:, 1:]}, {"group": -1})),
    ]


def _quantize_examples(supported):
    @st.composite
    def case(draw):
        params = draw(variant_params(supported), label="params")
        group = params["group"]
        shape = draw(block_shapes(block=group if group > 0 else draw(st.integers(1, 48)), max_blocks=3), label="shape")
        dtype = st.just(draw(st.sampled_from([np.dtype(np.float32), np.dtype(np.float64)]), label="dtype"))
        w = draw(st.one_of(realistic_arrays(shape=st.just(shape), dtype=dtype,
                                            scale=st.sampled_from([1e-3, 0.02, 1.0])),
                           outlier_arrays(shape=st.just(shape), dtype=dtype)), label="w")
        return Case({"w": w}, params)

    return case()


def _dequantize_examples(supported):
    @st.composite
    def case(draw):
        group = draw(st.sampled_from(list(supported["group"])), label="group")
        shape = draw(block_shapes(block=group if group > 0 else 24, max_blocks=3), label="shape")
        n = (*shape[:-1], shape[-1] // group if group > 0 else 1)
        codes = draw(hnp.arrays(np.int64, shape, elements=st.integers(0, 255)), label="codes")
        dtype = draw(st.sampled_from([np.float32, np.float64]), label="dtype")
        scales = draw(hnp.arrays(dtype, n, elements=st.floats(2.0**-20, 4.0, width=32)), label="scales")
        zeros = draw(hnp.arrays(dtype, n, elements=st.integers(0, 255)), label="zeros")
        return Case({"codes": codes, "scales": scales, "zeros": zeros}, {"group": group})

    return case()


def _floats(expected, actual) -> Comparison:
    fmt = "float64" if np.asarray(expected).dtype == np.float64 else "float32"
    got = np.asarray(actual)
    if got.dtype != np.asarray(expected).dtype:
        return Comparison(False, np.size(expected), np.size(expected), np.inf, "dtype",
                          problem=f"dtype: expected {np.asarray(expected).dtype}, got {got.dtype}")
    return compare_values(expected, actual, fmt)


def _compare_quantized(expected, actual) -> Comparison:
    return compare_parts(expected, actual, names=("codes", "scales", "zeros"),
                         comparators=(compare_exact, _floats, _floats))


OPERATIONS = [
    AREA.exact("rtn.quantize", rtn.quantize_groups, anchor="rtn",
               summary="w [..., n] -> (codes int64, scales, zeros) per group of input channels",
               variants=(BITS, GROUP, SCHEME, ZERO_RANGE, SCALE_FLOOR, SEARCH), vectors=quantize_vectors,
               examples=_quantize_examples, compare=_compare_quantized, outputs=("codes", "scales", "zeros")),
    AREA.exact("rtn.dequantize", rtn.dequantize_groups, anchor="rtn",
               summary="(codes, scales, zeros) -> scales * (codes - zeros) per group", variants=(GROUP,),
               vectors=dequantize_vectors, examples=_dequantize_examples, compare=_floats),
]

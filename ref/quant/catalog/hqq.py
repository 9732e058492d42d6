"""HQQ (spec/quant.md#hqq): the half-quadratic zero-point solver and hqq's bit packings.

  quant.hqq.quantize    w (any shape) -> (codes [grouped], scale = 1/s, zero)   agreement rule
  quant.hqq.dequantize  (codes, scale, zero) -> float32 (codes - zero) * scale  exact
  quant.hqq.pack        codes [R, C] uint8 -> hqq's packed words (layout)       exact
  quant.hqq.unpack      packed words -> codes                                   exact

quantize's oracle runs in float64 and hqq in float32 (CPU) or float16 (CUDA): a weight
within rounding of a step boundary can take the neighbouring code at any of the
solver's steps, the zero point of its group (a mean of codes) then moves by about 1/G,
and an early-stop test on a plateau of the error can go either way. The op's vectors
and examples are therefore CONDITIONED inputs (`hqq.conditioning`: every decision at
least CODE_MARGIN * 2^b from its boundary, every stop test decided by GAP), on which
float32 arithmetic takes every decision float64 does: codes exact, scales and zeros
within a float32 rounding rule (`compare_quantized`). `agreement` is the looser rule for
arbitrary layers (engine cross-checks): figures measured in tests/test_quant_hqq.py.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.quant import hqq
from ref.quant.catalog.common import AREA
from ref.quant.catalog.hqq_compare import (CODE_FRACTION, CODE_MARGIN, CODE_SLACK, GAP, SCALE_RTOL, ZERO_PER_FLIP,
                                           ZERO_RTOL, ZERO_TIGHT, agreement, compare_quantized)
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact, compare_values
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["CODE_FRACTION", "CODE_MARGIN", "CODE_SLACK", "FLAGS", "GAP", "OPERATIONS", "SCALE_RTOL", "ZERO_PER_FLIP",
           "ZERO_RTOL", "ZERO_TIGHT", "agreement", "compare_quantized", "conditioned"]

FLAGS = {
    **{name: COMMON[name] for name in (EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM)},
    "HqqBetaSchedule": Flag("beta multiplied by kappa where hqq 0.2.7+ keeps it constant, or before the step "
                            "that should use it (kappa^(i+1) at step i)",
                            "the shrink threshold of every step is off: zero points drift by up to 0.1 step"),
    "HqqEarlyStop": Flag("the solver runs all iterations, or stops one step early or late (returns the best "
                         "step's zero, or checks the error before the update)",
                         "zero points are one or more updates away from hqq's"),
    "HqqShrink": Flag("the l_p shrink written as a soft threshold 1/beta, or with |x|^p or |x|^(1-p)",
                      "the residual kept by the solver is wrong: zero points move wherever |w - r| > 0.17"),
    "HqqZeroUpdate": Flag("the zero point left at its min-max value, or averaged over the wrong axis",
                          "codes and zeros of every group differ from hqq's"),
    "HqqGroupAxis": Flag("axis 0's groups taken as runs of G consecutive elements (or rows of the weight) "
                         "instead of hqq's reshape(G, -1) columns",
                         "every group holds other weights: different scales, zeros and codes"),
    "HqqInverseScale": Flag("the inverse scale s returned where hqq stores 1/s (or the reverse)",
                            "dequantization multiplies by the wrong factor"),
    "HqqRoundZero": Flag("round_zero ignored, or the zero rounded after the solver instead of before",
                         "zero points differ by up to half a step"),
    "HqqFlatGroup": Flag("a group whose range is at most 1e-4 divided by its range (or the 2e4 clamp of the "
                         "inverse scale missing)", "Inf or NaN scales, or codes of a narrow group spread"),
    "HqqHalves": Flag("packed codes interleaved (rows 2i, 2i+1 in one byte) instead of hqq's slices "
                      "(row i with row i + R/k), or the first slice put in the low field",
                      "a checkpoint's codes land on other rows after unpacking"),
    "HqqPad3": Flag("3bit_32 rows not padded to a multiple of 10 (rejected or cut), or the padding read back as "
                    "codes in another order", "3-bit checkpoints of rows not divisible by 10 misload"),
    "HqqTie": Flag("a w * s + z or a round_zero zero exactly halfway between two integers rounded half up "
                   "(C's round, floor(x + 1/2)) instead of to even (torch.round)",
                   "a code one step up at each exact tie; a rounded zero one step up moves every code of its group"),
    "HqqDequantRounding": Flag("dequantize computed as codes * scale - zero * scale, or in float64 and rounded once, "
                               "instead of float32 (codes - zero) rounded, then times scale rounded",
                               "dequantized weights one float32 ulp off hqq's"),
    "HqqWeightShape": Flag("only 2-d float32 weights accepted, or a 1-d / 3-d / float16 / float64 weight "
                           "grouped another way",
                           "vectors, stacks and half-precision weights are refused or regrouped"),
}

BITS = Variant("bits", hqq.BITS, 4, "code width: 8, 6, 5 stored as 8bit_u8; 4, 3, 2, 1 packed (hqq "
                                   "SUPPORTED_BITS less 1.58)")
GROUP = Variant("group", (64, 8, 16, 32, 128), 64, "elements per group (hqq: numel must be a multiple)")
AXIS = Variant("axis", (0, 1), 0, "0: groups are columns of reshape(G, -1) (Quantizer.quantize's default); "
                                  "1: rows of reshape(-1, G) (BaseQuantizeConfig's default)")
OPTIMIZE = Variant("optimize", (True, False), True, "run the zero-point solver (False: min-max only)")
ROUND_ZERO = Variant("round_zero", (False, True), False,
                     "round the initial zero point (BaseQuantizeConfig sets it for 4 bits)")
SCHEDULE = Variant("beta_schedule", hqq.BetaSchedule, "constant",
                   "beta fixed (hqq 0.2.7 .. 0.2.8.post1) or times kappa after each step (hqq <= 0.2.6)")
FLAT_FLOOR = Variant("flat_floor", (True, False), True,
                     "a range <= 1e-4 takes inverse scale 1 (hqq 0.2.7+) or only the 2e4 clamp (hqq <= 0.2.6)")
LAYOUT = Variant("layout", hqq.Layout, "4bit_u8", "hqq's BitPack layout")

# Conditioned inputs and their rule (measured: tests/test_quant_hqq.py, spec/quant.md#hqq-tolerance).
def conditioned(w: np.ndarray, **params) -> bool:
    """Whether float32 arithmetic takes every decision float64 does on this input."""
    margin, gap = hqq.conditioning(w, **params)
    return margin >= CODE_MARGIN * 2 ** params.get("bits", 4) and gap >= GAP


# --- inputs: integers scaled by powers of two (byte-stable across NumPy versions) --------------------

def _weights(rng, shape, exponent: int, outlier: int | None = None) -> np.ndarray:
    """Bell-shaped weights: the sum of four integers in [-2^20, 2^20], times 2^(exponent - 14)
    (fine enough that equal weights are rare: a tie would move all of them at once);
    column `outlier` times 32."""
    w = rng.integers(-2 ** 20, 2 ** 20 + 1, (4, *shape)).sum(axis=0).astype(np.float64) * 2.0 ** (exponent - 14)
    if outlier is not None:
        w[..., outlier] *= 32
    return w.astype(np.float32)


def _draw(rng, shape, exponent: int, outlier: int | None = None, dtype=np.float32, **params) -> np.ndarray:
    """Weights as `_weights` draws them (rounded to `dtype`), drawn again until `conditioned`."""
    for _ in range(64):
        w = _weights(rng, shape, exponent, outlier).astype(dtype)
        if conditioned(w, **params):
            return w
    raise RuntimeError(f"no conditioned weights for {params} at 2^{exponent} in 64 draws")


def quantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.hqq.quantize"))
    out = []

    def add(comment, flags, w, result="valid", **params):
        out.append(VectorSpec(comment, flags, Case({"w": w}, params), result))

    def cond(comment, flags, shape, exponent, outlier=None, **params):
        add(comment, flags, _draw(rng, shape, exponent, outlier, **params), **params)

    for bits, axis in ((4, 0), (4, 1), (1, 0)):
        cond(f"{bits} bits, axis {axis}: LLM-sized weights with an outlier column (the shrink inactive)",
             (RANDOM, "HqqGroupAxis", "HqqZeroUpdate"), (8, 64), -11, 5, bits=bits, axis=axis)
    for bits, axis in ((1, 0), (2, 0), (3, 0), (3, 1), (4, 1), (5, 1), (6, 0), (8, 1)):
        cond(f"{bits} bits, axis {axis}: unit-sized weights (|w - r| past the shrink's threshold)",
             (RANDOM, "HqqShrink", "HqqZeroUpdate", "HqqEarlyStop", "HqqBetaSchedule", "HqqGroupAxis"),
             (8, 64), -7, bits=bits, axis=axis)
    for bits, group in ((1, 8), (2, 32), (3, 32)):
        cond(f"{bits} bits, group {group}, hqq <= 0.2.6's kappa schedule", (RANDOM, "HqqBetaSchedule"), (8, 128),
             -7, bits=bits, group=group, axis=1, beta_schedule="kappa")
    cond("2 bits, group 8, constant beta", (RANDOM, "HqqBetaSchedule", "HqqShrink"), (8, 128), -7, bits=2, group=8,
         axis=0)
    cond("round_zero (BaseQuantizeConfig's 4-bit setting)", ("HqqRoundZero",), (8, 128), -7, round_zero=True, axis=0)
    cond("min-max only: no solver", ("HqqInverseScale", "HqqGroupAxis"), (8, 128), -7, optimize=False, axis=0)
    cond("128 groups, axis 0: one group per column of reshape(G, -1)", ("HqqGroupAxis",), (8, 256), -9, 3,
         group=128, axis=0)
    big = _draw(rng, (8, 128), -7)
    flat = _draw(rng, (8, 128), -7, axis=1)
    flat[:, :64] = np.float32(0.75)  # axis 1: four constant groups
    flat[:, 64:128] = np.float32(2.0 ** -16) * (np.arange(64) % 3)  # range 2^-15 <= 1e-4: inverse scale 1
    add("constant groups and groups of range 2^-15 (inverse scale 1)", ("HqqFlatGroup",), flat, axis=1)
    add("the same under hqq <= 0.2.6: inverse scale 2e4 (the clamp) for every flat group", ("HqqFlatGroup",), flat,
        axis=1, flat_floor=False)
    narrow = (np.float32(1) + np.float32(2.0 ** -13) * (np.arange(8 * 128) % 5)).reshape(8, 128)
    add("groups of range 2^-11 (max - min above 1e-4): inverse scale clamped at 2e4, codes clip",
        ("HqqFlatGroup",), narrow.astype(np.float32), axis=1, bits=8)
    add("an all-zero weight", ("HqqFlatGroup",), np.zeros((4, 64), np.float32))
    add("float16 weights (widened exactly)", ("HqqWeightShape",), _draw(rng, (4, 128), -7, dtype=np.float16))
    add("float64 weights (hqq casts to float32: these are float32 values)", ("HqqWeightShape",),
        big[:4].astype(np.float64))
    add("a 1-d weight", ("HqqWeightShape",), _draw(rng, (128,), -7, group=32), group=32)
    add("a 3-d stack of weights: grouped as the flat array", ("HqqWeightShape",),
        _draw(rng, (2, 2, 128), -7, axis=1), axis=1)
    add("NaN weights are rejected", (INVALID_INPUT, NAN), np.where(np.arange(128) == 7, np.nan, big[0]), "invalid")
    add("Inf weights are rejected", (INVALID_INPUT,), np.where(np.arange(128) == 7, np.inf, big[0]), "invalid")
    add("integer weights are rejected", (INVALID_INPUT,), np.ones((2, 64), np.int32), "invalid")
    add("a weight of no elements is rejected", (INVALID_INPUT, EMPTY_INPUT), np.zeros((0, 64), np.float32),
        "invalid")
    add("96 elements do not split into groups of 64", (INVALID_INPUT,), big[0, :96], "invalid", group=64)
    # Appended after the vectors above (their ids are named by engine xfails).
    t = np.float32(13743895 * 2.0 ** -37)  # float32(1e-4), just below 1e-4
    edge = np.stack([np.arange(8) * 2.0 ** -17, _weights(rng, (8,), -7)]).astype(np.float32)
    edge[0, 7] = t  # row 0's range is exactly float32(1e-4): flat (<= 1e-4), inverse scale 1
    for optimize in (False, True):
        add(f"a group of range exactly float32(1e-4) is flat (range <= 1e-4), optimize {optimize}",
            ("HqqFlatGroup",), edge, bits=4, group=8, axis=1, optimize=optimize)
    add("bits 7 is rejected", (INVALID_INPUT,), big[0], "invalid", bits=7)
    add("axis 2 is rejected", (INVALID_INPUT,), big[0], "invalid", axis=2)
    add("an unknown beta_schedule is rejected", (INVALID_INPUT,), big[0], "invalid", beta_schedule="kappa2")
    # Exact ties (conditioned: float32 computes each w * s + z exactly, spec/quant.md#hqq-tolerance):
    # max - min = 6, s = 15 / 6 = 2.5, -min * s = 2.5.
    ties = (np.array([[-4, 20, 0, 4, 8, 12, 16, 2], [-4, 20, 1, 5, 9, 13, 17, -3]]) * 0.25).astype(np.float32)
    add("round_zero at an exact tie: the zero 2.5 rounds to even (2), and w * s + z = 4.5, 9.5, 14.5 to even",
        ("HqqTie", "HqqRoundZero"), ties, bits=4, group=8, axis=1, optimize=False, round_zero=True)
    add("min-max codes at exact ties: w * s + z = 2.5, 7.5, 12.5 round to even", ("HqqTie",), ties, bits=4, group=8,
        axis=1, optimize=False)
    return out


def dequantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.hqq.dequantize"))
    codes = rng.integers(0, 16, (64, 8)).astype(np.uint8)
    col = (rng.integers(1, 2 ** 10, (1, 8)) * 2.0 ** -14).astype(np.float32)
    zcol = (rng.integers(0, 2 ** 8, (1, 8)) * 2.0 ** -4).astype(np.float32)
    row = (rng.integers(1, 2 ** 10, (64, 1)) * 2.0 ** -14).astype(np.float32)
    zrow = (rng.integers(0, 2 ** 8, (64, 1)) * 2.0 ** -4).astype(np.float32)
    v = [VectorSpec("axis 0: one scale and zero per column", ("HqqGroupAxis",),
                    Case({"codes": codes, "scale": col, "zero": zcol})),
         VectorSpec("axis 1: one scale and zero per row", ("HqqGroupAxis",),
                    Case({"codes": codes, "scale": row, "zero": zrow})),
         VectorSpec("float64 scales are rejected", (INVALID_INPUT,),
                    Case({"codes": codes, "scale": col.astype(np.float64), "zero": zcol}), "invalid"),
         VectorSpec("a scale of the wrong shape is rejected", (INVALID_INPUT,),
                    Case({"codes": codes, "scale": row[:8], "zero": zrow[:8]}), "invalid"),
         VectorSpec("1-d codes are rejected", (INVALID_INPUT, "HqqWeightShape"),
                    Case({"codes": codes[0], "scale": col[0], "zero": zcol[0]}), "invalid"),
         VectorSpec("int32 codes are rejected", (INVALID_INPUT,),
                    Case({"codes": codes.astype(np.int32), "scale": col, "zero": zcol}), "invalid")]
    # Appended after the vectors above (their ids are named by engine xfails).
    full_scale = (rng.integers(2 ** 23, 2 ** 24, (1, 8)) * 2.0 ** -27).astype(np.float32)  # 24-bit significands
    full_zero = (rng.integers(2 ** 22, 2 ** 24, (1, 8)) * 2.0 ** -20).astype(np.float32)
    bytes_ = rng.integers(0, 256, (64, 8)).astype(np.uint8)  # codes - zero needs up to 28 bits: rounded
    v += [VectorSpec("8-bit codes, scales and zeros of full 24-bit significands: (codes - zero) rounded to "
                     "float32, then the product rounded", ("HqqDequantRounding", "HqqGroupAxis"),
                     Case({"codes": bytes_, "scale": full_scale, "zero": full_zero})),
          VectorSpec("the same by rows", ("HqqDequantRounding", "HqqGroupAxis"),
                     Case({"codes": bytes_[:8].T.copy(), "scale": full_scale.T.copy(), "zero": full_zero.T.copy()})),
          VectorSpec("a [1, 1] scale and zero for codes [4, 8] are rejected (they would broadcast)",
                     (INVALID_INPUT,), Case({"codes": codes[:4], "scale": col[:, :1], "zero": zcol[:, :1]}),
                     "invalid"),
          VectorSpec("a zero of another shape than the scale is rejected", (INVALID_INPUT,),
                     Case({"codes": codes[:4], "scale": col, "zero": zrow[:4]}), "invalid")]
    return v


def _pack_inputs(rng, layout: str) -> list[tuple[str, tuple, np.ndarray]]:
    bits, k = hqq.FIELDS[hqq.Layout(layout)]
    top = 1 << bits
    rows = 20 if layout == "3bit_32" else 2 * k
    ramp = (np.arange(rows * 4) % top).astype(np.uint8).reshape(rows, 4)
    cases = [("row i holds code i mod 2^b: shows which rows share a word", ("HqqHalves",), ramp),
             ("random codes [64, 8]", (RANDOM, "HqqHalves"), rng.integers(0, top, (64 if layout != "3bit_32" else 60,
                                                                                   8)).astype(np.uint8))]
    if layout == "3bit_32":
        cases.append(("13 rows: padded with zero codes to 20", ("HqqPad3",),
                      rng.integers(0, 8, (13, 4)).astype(np.uint8)))
    return cases


def pack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.hqq.pack"))
    out = []
    for layout in (m.value for m in hqq.Layout):
        bits, k = hqq.FIELDS[hqq.Layout(layout)]
        for comment, flags, codes in _pack_inputs(rng, layout):
            out.append(VectorSpec(f"{layout}: {comment}", flags, Case({"codes": codes}, {"layout": layout})))
        if bits < 8:
            out.append(VectorSpec(f"{layout}: a code of {1 << bits} is rejected, not masked", (INVALID_INPUT,),
                                  Case({"codes": np.full((2 * k, 2), 1 << bits, np.uint8)}, {"layout": layout}),
                                  "invalid"))
        if k > 1 and layout != "3bit_32":
            out.append(VectorSpec(f"{layout}: {k + 1} rows do not split into {k} slices", (INVALID_INPUT,),
                                  Case({"codes": np.zeros((k + 1, 2), np.uint8)}, {"layout": layout}), "invalid"))
    out.append(VectorSpec("int32 codes are rejected", (INVALID_INPUT,),
                          Case({"codes": np.zeros((4, 2), np.int32)}, {"layout": "4bit_u8"}), "invalid"))
    out.append(VectorSpec("1-d codes are rejected (hqq packs [rows, columns])", (INVALID_INPUT, "HqqWeightShape"),
                          Case({"codes": np.zeros(8, np.uint8)}, {"layout": "4bit_u8"}), "invalid"))
    out.append(VectorSpec("an unknown layout is rejected", (INVALID_INPUT,),
                          Case({"codes": np.array([[4], [2]], np.uint8)}, {"layout": "5bit_u8"}), "invalid"))
    return out


def unpack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.hqq.unpack"))
    out = []
    for layout in (m.value for m in hqq.Layout):
        for comment, flags, codes in _pack_inputs(rng, layout):
            out.append(VectorSpec(f"{layout}: words of {comment}", flags,
                                  Case({"packed": hqq.pack(codes, layout=layout)}, {"layout": layout})))
    out.append(VectorSpec("3bit_32: bits 30 and 31 set (not fields) are ignored", ("HqqPad3",),
                          Case({"packed": np.array([[-1, -2 ** 31, 2 ** 30]], np.int32)}, {"layout": "3bit_32"})))
    out.append(VectorSpec("4bit_u8 words given as int32 are rejected", (INVALID_INPUT,),
                          Case({"packed": np.zeros((2, 2), np.int32)}, {"layout": "4bit_u8"}), "invalid"))
    out.append(VectorSpec("1-d words are rejected", (INVALID_INPUT, "HqqWeightShape"),
                          Case({"packed": np.zeros(4, np.int32)}, {"layout": "3bit_32"}), "invalid"))
    out.append(VectorSpec("an unknown layout is rejected", (INVALID_INPUT,),
                          Case({"packed": np.array([[0x42]], np.uint8)}, {"layout": "5bit_u8"}), "invalid"))
    return out


# --- random examples --------------------------------------------------------------------------------

def _quantize_examples(supported):
    @st.composite
    def case(draw):
        params = draw(variant_params(supported), label="params")
        group = params.get("group", 64)
        shape = (draw(st.integers(1, 6), label="rows"), 2 * group)
        seed = draw(st.integers(0, 2 ** 32 - 1), label="seed")
        exponent = draw(st.sampled_from([-12, -9, -7, -5]), label="exponent")
        dtype = draw(st.sampled_from([np.float32, np.float32, np.float16]), label="dtype")
        rng = np.random.default_rng(seed)
        for _ in range(16):  # conditioned inputs only (see the module's docstring)
            w = _weights(rng, shape, exponent, outlier=int(rng.integers(shape[1]))).astype(dtype)
            if conditioned(w, **params):
                return Case({"w": w}, params)
        assume(False)

    return case()


def _codes_examples(supported):
    layouts = list(supported.get("layout", [LAYOUT.default]))

    @st.composite
    def case(draw):
        layout = draw(st.sampled_from(layouts), label="layout")
        bits, k = hqq.FIELDS[hqq.Layout(layout)]
        rows = draw(st.integers(1, 5), label="rows") * (1 if layout == "3bit_32" else k)
        c = draw(hnp.arrays(np.uint8, (rows, draw(st.integers(1, 6), label="cols")),
                            elements=st.integers(0, (1 << bits) - 1)), label="codes")
        return Case({"codes": c}, {"layout": layout})

    return case()


def _unpack_examples(supported):
    return _codes_examples(supported).map(
        lambda c: Case({"packed": hqq.pack(c.inputs["codes"], layout=c.params["layout"])}, c.params))


def _dequantize_examples(supported):
    @st.composite
    def case(draw):
        r, c = draw(st.integers(1, 8), label="rows"), draw(st.integers(1, 8), label="cols")
        by_row = draw(st.booleans(), label="axis 1")
        shp = (r, 1) if by_row else (1, c)
        floats = st.floats(2.0 ** -20, 16.0, width=32)
        return Case({"codes": draw(hnp.arrays(np.uint8, (r, c)), label="codes"),
                     "scale": draw(hnp.arrays(np.float32, shp, elements=floats), label="scale"),
                     "zero": draw(hnp.arrays(np.float32, shp, elements=floats), label="zero")}, {})

    return case()


OPERATIONS = [
    AREA.exact("hqq.quantize", hqq.quantize, anchor="hqq", golden_float_bound=True,
               summary="w -> (codes, scale = 1/s, zero): min-max then "
               "the half-quadratic zero-point solver",
               variants=(BITS, GROUP, AXIS, OPTIMIZE, ROUND_ZERO, SCHEDULE, FLAT_FLOOR),
               vectors=quantize_vectors, examples=_quantize_examples, compare=compare_quantized,
               outputs=("codes", "scale", "zero")),
    AREA.exact("hqq.dequantize", hqq.dequantize, anchor="hqq-layout", summary="float32 (codes - zero) * scale",
               vectors=dequantize_vectors, examples=_dequantize_examples, compare=partial(compare_values,
                                                                                          fmt="float32")),
    AREA.exact("hqq.pack", hqq.pack, anchor="hqq-layout", summary="codes [R, C] -> hqq's packed words",
               variants=(LAYOUT,), vectors=pack_vectors, examples=_codes_examples, compare=compare_exact),
    AREA.exact("hqq.unpack", hqq.unpack, anchor="hqq-layout", summary="hqq's packed words -> codes",
               variants=(LAYOUT,), vectors=unpack_vectors, examples=_unpack_examples, compare=compare_exact),
]

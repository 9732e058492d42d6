"""KIVI's codec (spec/kv.md#kivi): asymmetric min/max codes, keys per channel and
values per token, and the int32 packing.

  kv.kivi.quantize    x [B, H, T, D] -> (codes int32, scale, mn) in x's dtype
  kv.kivi.dequantize  (codes, scale, mn) -> x_hat = code * scale + mn
  kv.kivi.pack        codes -> int32 words (along tokens for keys, channels for values)
  kv.kivi.unpack      int32 words -> codes

All exact (bit for bit); the oracles are `ref.kv.kivi`'s functions.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.kv import kivi
from ref.kv.catalog.common import AREA
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import Comparison, compare_exact, compare_parts, compare_values
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "integers"]

FLAGS = {
    **{f: COMMON[f] for f in (EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM)},
    "KiviKeyAxis": Flag("keys quantized per token (groups of channels) instead of per channel (groups of tokens)",
                    "an outlier channel's range swamps every other channel of its token: 2-bit keys collapse"),
    "KiviGroupAxis": Flag("a group's min and max taken along the wrong axis, or over the wrong number of elements",
                      "scales and zero points pair with other elements than they were computed from"),
    "KiviRoundingTies": Flag("(x - mn) / scale rounded half up (floor(t + 0.5)) where the reference rounds half to "
                         "even (torch.round), or the reverse", "an element exactly between two levels takes the "
                         "other code"),
    "KiviScaleLevels": Flag("the scale (mx - mn) / 2^b, or (mx - mn) without dividing by 2^b - 1",
                        "every code is off: the top level is never used, or everything clamps to the top"),
    "KiviConstantGroup": Flag("a constant group (mx == mn) divided by a zero scale: NaN cast to an integer",
                          "codes from casting NaN (INT_MIN on x86); the group must decode to mn exactly"),
    "KiviArithmeticDtype": Flag("float16 inputs quantized in float32 (or float64) arithmetic",
                            "codes near a level boundary flip and scales differ in the last bit"),
    "KiviPackOrder": Flag("codes packed high-first in the int32 word, or along the wrong axis",
                      "every word's codes are permuted: the cache reads other tokens' codes"),
}

AXIS = Variant("axis", kivi.Axis, "channel",
               "channel: keys, a group is G tokens of one channel; token: values, a group is G channels of a token")
BITS = Variant("bits", kivi.BITS, 2, "bits per code (codes 0 .. 2^b - 1); the reference packs 2, 4 or 8")
GROUP = Variant("group", (32, 16, 8, 4, 2, 128), 32, "elements per group: tokens (keys) or channels (values)")

_P2 = 2.0**-6


def integers(rng, shape, dtype=np.float16, outlier: bool = True, span: int = 100) -> np.ndarray:
    """Integers in [-span, span] times 2^-6 (exact at float16) and, with `outlier`,
    channel 1 times 16 (KIVI's outlier key channel)."""
    x = rng.integers(-span, span + 1, shape).astype(np.float64) * _P2
    if outlier and shape[-1] > 1:
        x[..., 1] *= 16
    return x.astype(dtype)


def _case(x, axis, bits, group) -> Case:
    return Case({"x": x}, {"axis": axis, "bits": bits, "group": group})


def _ties(axis: str) -> np.ndarray:
    """One group of 4 per (channel or token) with min 0 and max 3 (scale 1 at 2 bits) and
    the ties 0.5, 2.5 and 1.5: half even gives 0, 2, 2; half up 1, 3, 2."""
    g = np.array([[0, 0.5, 2.5, 3], [3, 1.5, 0, 0.5], [2.5, 0, 3, 1.5], [0, 3, 0.5, 2.5]], np.float16)
    x = g.T if axis == "channel" else g  # channel: tokens run down axis 2
    return x.reshape(1, 1, 4, 4)


def quantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.kivi.quantize"))
    specs = []
    for axis in ("channel", "token"):
        flags = ("KiviKeyAxis", "KiviGroupAxis") if axis == "channel" else ("KiviGroupAxis",)
        for bits in kivi.BITS:
            specs.append(VectorSpec(f"random float16 [1, 2, 32, 16] with an outlier channel, {axis}, {bits} bits, "
                                    "group 16", (*flags, "KiviScaleLevels", "KiviArithmeticDtype", RANDOM),
                                    _case(integers(rng, (1, 2, 32, 16)), axis, bits, 16)))
        specs += [
            VectorSpec(f"ties at 0.5, 1.5, 2.5 steps ({axis}, 2 bits): half to even", ("KiviRoundingTies",),
                       _case(_ties(axis), axis, 2, 4)),
            VectorSpec(f"float32 input, {axis}, 4 bits, group 32 (the default group)", ("KiviArithmeticDtype", *flags),
                       _case(integers(rng, (2, 1, 64, 32), np.float32) / np.float32(3), axis, 4, 32)),
            VectorSpec(f"float64 input, {axis}, 2 bits", ("KiviArithmeticDtype", *flags),
                       _case(integers(rng, (1, 1, 8, 8), np.float64) / 3, axis, 2, 8)),
            VectorSpec(f"no tokens ({axis})", (EMPTY_INPUT,), _case(np.zeros((1, 2, 0, 8), np.float16), axis, 2, 4)),
            VectorSpec(f"NaN input is rejected ({axis})", (NAN, INVALID_INPUT),
                       _case(np.full((1, 1, 4, 4), np.nan, np.float16), axis, 2, 4), "invalid"),
            VectorSpec(f"Inf input is rejected ({axis})", (NAN, INVALID_INPUT),
                       _case(np.full((1, 1, 4, 4), np.inf, np.float16), axis, 2, 4), "invalid"),
            VectorSpec(f"a group range that overflows float16 is rejected ({axis})", (INVALID_INPUT,),
                       _case(np.float16([[-6e4, 6e4, 0, 0], [6e4, -6e4, 0, 0]] * 2).reshape(1, 1, 4, 4), axis, 2, 4), "invalid"),
            VectorSpec(f"3 bits is rejected ({axis})", (INVALID_INPUT,),
                       _case(integers(rng, (1, 1, 8, 8)), axis, 3, 8), "invalid"),
            VectorSpec(f"integer input is rejected ({axis})", (INVALID_INPUT,),
                       _case(np.zeros((1, 1, 4, 4), np.int32), axis, 2, 4), "invalid"),
            VectorSpec(f"a rank-3 input is rejected ({axis})", (INVALID_INPUT,),
                       _case(np.zeros((1, 4, 4), np.float16), axis, 2, 4), "invalid"),
        ]
    const = integers(rng, (1, 1, 8, 8))
    const[0, 0, :4, 2] = 1.5  # channel 2's first key group is constant
    const[0, 0, 5, :4] = -0.25  # token 5's first value group is constant
    specs += [
        VectorSpec("a constant key group and a constant value group: code 0, decoded to mn exactly (channel)",
                   ("KiviConstantGroup",), _case(const, "channel", 2, 4)),
        VectorSpec("a constant key group and a constant value group: code 0, decoded to mn exactly (token)",
                   ("KiviConstantGroup",), _case(const, "token", 2, 4)),
        VectorSpec("all-zero keys: every group constant", ("KiviConstantGroup",),
                   _case(np.zeros((1, 1, 4, 4), np.float16), "channel", 4, 4)),
        VectorSpec("tokens not a multiple of the group are rejected (channel: groups along tokens)",
                   (INVALID_INPUT, "KiviGroupAxis"), _case(integers(rng, (1, 1, 12, 8)), "channel", 2, 8), "invalid"),
        VectorSpec("channels not a multiple of the group are rejected (token: groups along channels)",
                   (INVALID_INPUT, "KiviGroupAxis"), _case(integers(rng, (1, 1, 8, 12)), "token", 2, 8), "invalid"),
        VectorSpec("groups of 32 tokens of a 128-dim head, 2-bit keys (the paper's setting)",
                   ("KiviKeyAxis", "KiviGroupAxis", RANDOM), _case(integers(rng, (1, 1, 32, 128)), "channel", 2, 32)),
        VectorSpec("a group of one element (every element its own min and max)", ("KiviGroupAxis", "KiviConstantGroup"),
                   _case(integers(rng, (1, 1, 4, 4)), "token", 2, 1)),
    ]
    # ADV15 (kivi): a check written as `bits in (1, 2, 4, 8)` or "a power of two up to 16"
    # passed, since only 3 bits was refused; 1 and 16 bits are refused too.
    ramp = np.float16([0, 1, 2, 3]).reshape(1, 1, 1, 4)
    specs += [VectorSpec(f"{b} bits is rejected (token)", (INVALID_INPUT,), _case(ramp, "token", b, 4), "invalid")
              for b in (1, 16)]
    return specs


def _dq_case(rng, axis, bits, group, shape, dtype=np.float16) -> Case:
    b, h, t, d = shape
    sshape = (b, h, t // group, d) if axis == "channel" else (b, h, t, d // group)
    codes = rng.integers(0, 2**bits, shape).astype(np.int32)
    scale = (rng.integers(0, 64, sshape) * 2.0**-8).astype(dtype)
    mn = (rng.integers(-256, 64, sshape) * 2.0**-6).astype(dtype)
    return Case({"codes": codes, "scale": scale, "mn": mn}, {"axis": axis, "bits": bits, "group": group})


def dequantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.kivi.dequantize"))
    specs = []
    for axis in ("channel", "token"):
        for bits in kivi.BITS:
            specs.append(VectorSpec(f"random codes, float16 scale and mn, {axis}, {bits} bits, group 8",
                                    ("KiviGroupAxis", "KiviKeyAxis", RANDOM), _dq_case(rng, axis, bits, 8, (1, 2, 16, 16))))
        case = _dq_case(rng, axis, 2, 8, (1, 1, 8, 16))
        specs += [
            VectorSpec(f"float32 scale and mn ({axis})", ("KiviArithmeticDtype",),
                       _dq_case(rng, axis, 4, 8, (1, 1, 8, 8), np.float32)),
            VectorSpec(f"int64 codes, float64 scale and mn ({axis})", ("KiviArithmeticDtype",),
                       Case({**case.inputs, "codes": case.inputs["codes"].astype(np.int64),
                             "scale": case.inputs["scale"].astype(np.float64) / 3,
                             "mn": case.inputs["mn"].astype(np.float64)}, case.params)),
            VectorSpec(f"uint8 codes ({axis})", ("KiviGroupAxis",),
                       Case({**case.inputs, "codes": case.inputs["codes"].astype(np.uint8)}, case.params)),
            VectorSpec(f"scale of the wrong shape is rejected ({axis})", (INVALID_INPUT, "KiviGroupAxis"),
                       Case({**case.inputs, "scale": case.inputs["scale"][..., :1]}, case.params), "invalid"),
            VectorSpec(f"a code above 2^b - 1 is rejected ({axis})", (INVALID_INPUT,),
                       Case({**case.inputs, "codes": case.inputs["codes"] + 4}, case.params), "invalid"),
            VectorSpec(f"mn in another dtype than scale is rejected ({axis})", (INVALID_INPUT,),
                       Case({**case.inputs, "mn": case.inputs["mn"].astype(np.float32)}, case.params), "invalid"),
        ]
    # ADV15 (kivi): refusals a kernel skipped unseen (only a code above 2^b - 1 and a wrong
    # scale shape were refused before): one group of 4 codes [1, 1, 1, 4] on the token axis.
    codes = np.arange(4, dtype=np.int32).reshape(1, 1, 1, 4)
    one = np.float16([[[[1]]]])

    def tok(c=codes, s=one, m=one * 0, bits=2):
        return Case({"codes": c, "scale": s, "mn": m}, {"axis": "token", "bits": bits, "group": 4})
    two = np.tile(codes, 2)  # two groups: scale and mn [1, 1, 1, 2]
    specs += [
        VectorSpec("a negative code is rejected (token)", (INVALID_INPUT,), tok(c=codes - 1), "invalid"),
        VectorSpec("float codes are rejected (token)", (INVALID_INPUT,), tok(c=codes.astype(np.float32)), "invalid"),
        VectorSpec("mn of the wrong (broadcastable) shape is rejected: one mn for two groups",
                   (INVALID_INPUT, "KiviGroupAxis"),
                   Case({"codes": two, "scale": np.float16([1, 2]).reshape(1, 1, 1, 2), "mn": one * 5},
                        {"axis": "token", "bits": 2, "group": 4}), "invalid"),
        VectorSpec("a NaN scale is rejected", (NAN, INVALID_INPUT), tok(s=one * np.float16("nan")), "invalid"),
        VectorSpec("an Inf mn is rejected", (NAN, INVALID_INPUT), tok(m=one * np.float16("inf")), "invalid"),
        *(VectorSpec(f"{b} bits is rejected", (INVALID_INPUT,), tok(c=codes % 2, bits=b), "invalid") for b in (1, 16)),
        # a kernel built for KIVI's defaults only (keys, 2 bits, G = 32) meets a vector too
        VectorSpec("random codes at the defaults: channel axis, 2 bits, group 32", ("KiviGroupAxis", RANDOM),
                   _dq_case(rng, "channel", 2, 32, (1, 1, 64, 4))),
    ]
    return specs


def _pack_case(codes, axis, bits) -> Case:
    return Case({"codes": codes}, {"axis": axis, "bits": bits})


def pack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.kivi.pack"))
    specs = []
    for axis in ("channel", "token"):
        for bits in kivi.BITS:
            per = 32 // bits
            shape = (1, 2, 2 * per, 4) if axis == "channel" else (1, 2, 4, 2 * per)
            specs.append(VectorSpec(f"random {bits}-bit codes, {axis}", ("KiviPackOrder", RANDOM),
                                    _pack_case(rng.integers(0, 2**bits, shape).astype(np.int32), axis, bits)))
            ramp = (np.arange(per) % 2**bits).astype(np.int32)
            ramp = ramp.reshape(1, 1, per, 1) if axis == "channel" else ramp.reshape(1, 1, 1, per)
            specs.append(VectorSpec(f"codes 0, 1, 2, ... in one word show which bits hold code 0 ({axis}, {bits} bits)",
                                    ("KiviPackOrder",), _pack_case(ramp, axis, bits)))
            top = np.full(shape, 2**bits - 1, np.int32)
            specs.append(VectorSpec(f"all codes at the top: the word's bit 31 set, int32 -1 ({axis}, {bits} bits)",
                                    ("KiviPackOrder",), _pack_case(top, axis, bits)))
        specs += [
            VectorSpec(f"a code above 3 at 2 bits is rejected, not masked ({axis})", (INVALID_INPUT,),
                       _pack_case(np.full((1, 1, 16, 16), 4, np.int32), axis, 2), "invalid"),
            VectorSpec(f"a packed axis not a multiple of 16 codes at 2 bits is rejected ({axis})", (INVALID_INPUT,),
                       _pack_case(np.zeros((1, 1, 8, 8), np.int32), axis, 2), "invalid"),
            VectorSpec(f"int64 and uint8 codes pack as int32 codes do ({axis})", ("KiviPackOrder",),
                       _pack_case(rng.integers(0, 4, (1, 1, 16, 16)).astype(np.int64), axis, 2)),
            VectorSpec(f"uint8 codes ({axis}, 8 bits)", ("KiviPackOrder",),
                       _pack_case(rng.integers(0, 256, (1, 1, 4, 4)).astype(np.uint8), axis, 8)),
            VectorSpec(f"float codes are rejected ({axis})", (INVALID_INPUT,),
                       _pack_case(np.zeros((1, 1, 16, 16), np.float32), axis, 2), "invalid"),
            VectorSpec(f"no tokens ({axis}, 4 bits)", (EMPTY_INPUT,),
                       _pack_case(np.zeros((1, 1, 0, 8), np.int32), axis, 4)),
        ]
    # ADV15 (kivi): a negative code (its sign bits would fill the word) and 1 or 16 bits.
    neg = np.zeros((1, 1, 1, 16), np.int32)
    neg[..., 0] = -1
    specs += [VectorSpec("a negative code is rejected, not folded into the word (token)", (INVALID_INPUT,),
                         _pack_case(neg, "token", 2), "invalid")]
    specs += [VectorSpec(f"{b} bits is rejected (token)", (INVALID_INPUT,),
                         _pack_case(np.zeros((1, 1, 1, 32), np.int32), "token", b), "invalid") for b in (1, 16)]
    return specs


def unpack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.kivi.unpack"))
    specs = []
    for axis in ("channel", "token"):
        for bits in kivi.BITS:
            words = rng.integers(-2**31, 2**31, (1, 2, 2, 4), dtype=np.int64).astype(np.int32)
            specs.append(VectorSpec(f"random int32 words (negative ones too), {axis}, {bits} bits",
                                    ("KiviPackOrder", RANDOM), Case({"words": words}, {"axis": axis, "bits": bits})))
        specs.append(VectorSpec(f"uint32 words are rejected ({axis})", (INVALID_INPUT,),
                                Case({"words": np.zeros((1, 1, 1, 4), np.uint32)}, {"axis": axis, "bits": 2}),
                                "invalid"))
    # ADV15 (kivi): int64 words (a kernel that truncated them to the low word passed), words
    # of rank 5 and rank 3, and 1 or 16 bits.
    specs += [
        VectorSpec("int64 words are rejected, not truncated to their low 32 bits", (INVALID_INPUT,),
                   Case({"words": np.int64([[[[2**32 + 5]]]])}, {"axis": "token", "bits": 8}), "invalid"),
        VectorSpec("rank-5 words are rejected", (INVALID_INPUT,),
                   Case({"words": np.zeros((1, 1, 1, 1, 1), np.int32)}, {"axis": "token", "bits": 8}), "invalid"),
        VectorSpec("rank-3 words are rejected", (INVALID_INPUT,),
                   Case({"words": np.zeros((1, 1, 1), np.int32)}, {"axis": "token", "bits": 8}), "invalid"),
        *(VectorSpec(f"{b} bits is rejected", (INVALID_INPUT,),
                     Case({"words": np.zeros((1, 1, 1, 4), np.int32)}, {"axis": "token", "bits": b}), "invalid")
          for b in (1, 16)),
    ]
    return specs


def _same_dtype(expected, actual) -> Comparison:
    e, a = np.asarray(expected), np.asarray(actual)
    if a.dtype != e.dtype:
        return Comparison(False, e.size, e.size, np.inf, "dtype", problem=f"dtype: expected {e.dtype}, got {a.dtype}")
    return compare_values(e, a, str(e.dtype))


def _compare_quantized(expected, actual) -> Comparison:
    return compare_parts(expected, actual, names=("codes", "scale", "mn"),
                         comparators=(compare_exact, _same_dtype, _same_dtype))


@st.composite
def _quantize_case(draw, supported):
    params = draw(variant_params(supported), label="params")
    g = params["group"]
    blocks = draw(st.integers(0, 3), label="groups")
    other = draw(st.sampled_from([1, 2, 3, 8]), label="other axis")
    t, d = (g * blocks, other) if params["axis"] == "channel" else (other, g * blocks)
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]), label="dtype")
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    x = integers(np.random.default_rng(seed), (1, draw(st.integers(1, 2)), t, d), dtype,
                 span=draw(st.sampled_from([1, 3, 100, 2000])))
    return Case({"x": x}, params)


@st.composite
def _codes_case(draw, supported, dequant: bool):
    params = draw(variant_params(supported, only=("axis", "bits", "group") if dequant else ("axis", "bits")))
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    if dequant:
        g = params["group"]
        shape = (1, 2, 2 * g, 4) if params["axis"] == "channel" else (1, 2, 4, 2 * g)
        return _dq_case(rng, params["axis"], params["bits"], g, shape,
                        draw(st.sampled_from([np.float16, np.float32]), label="dtype"))
    per = 32 // params["bits"]
    n = per * draw(st.integers(0, 3), label="words")
    shape = (1, 2, n, 3) if params["axis"] == "channel" else (1, 2, 3, n)
    return _pack_case(rng.integers(0, 2**params["bits"], shape).astype(np.int32), params["axis"], params["bits"])


@st.composite
def _words_case(draw, supported):
    params = draw(variant_params(supported), label="params")
    words = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed")).integers(
        -2**31, 2**31, (1, 2, 3, 4), dtype=np.int64).astype(np.int32)
    return Case({"words": words}, params)


OPERATIONS = [
    AREA.exact("kivi.quantize", kivi.quantize, anchor="kivi",
               summary="x [B, H, T, D] -> (codes int32, scale, mn): min/max codes, keys per channel, values per token",
               variants=(AXIS, BITS, GROUP), vectors=quantize_vectors, examples=_quantize_case,
               compare=_compare_quantized, outputs=("codes", "scale", "mn")),
    AREA.exact("kivi.dequantize", kivi.dequantize, anchor="kivi",
               summary="(codes, scale, mn) -> code * scale + mn in the scale's dtype", variants=(AXIS, BITS, GROUP),
               vectors=dequantize_vectors, examples=partial(_codes_case, dequant=True), compare=_same_dtype),
    AREA.exact("kivi.pack", kivi.pack, anchor="kivi-pack",
               summary="codes -> int32 words, 32/b codes each, code j in bits [j*b, (j+1)*b)",
               variants=(AXIS, BITS), vectors=pack_vectors, examples=partial(_codes_case, dequant=False),
               compare=compare_exact),
    AREA.exact("kivi.unpack", kivi.unpack, anchor="kivi-pack", summary="int32 words -> codes",
               variants=(AXIS, BITS), vectors=unpack_vectors, examples=_words_case, compare=compare_exact),
]

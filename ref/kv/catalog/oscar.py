"""OSCAR's INT2 codec (spec/kv.md#oscar): exact, bit for bit.

  kv.oscar.quantize    x [..., D] -> (codes uint8 [..., D], scales, zeros float32 [..., D/G])
  kv.oscar.dequantize  (codes, scales, zeros) -> (code - zero) * scale, float32
  kv.oscar.pack        codes [..., D] -> bytes [..., D/4] (quarter-row interleave)
  kv.oscar.unpack      bytes [..., Q] -> codes [..., 4Q]

Inputs are integers times powers of two: exact in float16, bfloat16 and float32.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.kv import oscar
from ref.kv.catalog.common import AREA
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import Comparison, compare_exact, compare_parts, compare_values
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

GROUP = Variant("group", (128, 64, 32, 16), 128, "channels per scale and zero point (consecutive along D)")

FLAGS = {
    "OscarHalfUp": Flag("codes rounded half to even (np.round, torch.round) where the reference adds 1/2 and truncates",
                        "a value exactly between two levels takes the lower even code"),
    "OscarFloatZeroPoint": Flag("the zero point rounded to an integer (KIVI, GPTQ) where OSCAR keeps -min/scale as a "
                                "float", "the group minimum no longer decodes to itself; every code may move by one"),
    "OscarClipScope": Flag("the clip threshold taken over the whole tensor or per group instead of per token row",
                           "rows of small magnitude are not clipped, or rows of large magnitude are clipped hard"),
    "OscarClipRank": Flag("the threshold's rank off by one: round(ratio D), ceil, or ratio (D - 1) for floor(ratio D)",
                          "one more or one fewer entry per row is clamped, and the scale follows"),
    "OscarSpanFloor": Flag("a constant group's span 0 not floored at 1e-8: a division by zero",
                           "NaN or Inf codes and zero points for constant or all-zero rows"),
    "OscarQuarterInterleave": Flag("four consecutive codes per byte (sequential) where the reference packs channels "
                                   "j, j + D/4, j + D/2, j + 3D/4", "the unpacked row is permuted"),
    "OscarFloat32Codec": Flag("the codec in float64 where the reference computes in float32",
                              "codes at a step boundary flip; scales differ in the last bit"),
    "OscarTokenGroups": Flag("groups of G tokens of a channel (KIVI's keys) where OSCAR groups G channels of a token",
                             "scales pair with the wrong elements"),
}

_P = 2.0**-5


def _rows(rng, shape, lo=-40, hi=41) -> np.ndarray:
    """Integers in [lo, hi) times 2^-5 as float32, with channel 3 times 8 (an outlier)."""
    x = rng.integers(lo, hi, shape).astype(np.float64) * _P
    x[..., 3] *= 8
    return x.astype(np.float32)


def _ties() -> np.ndarray:
    """A row of 16 whose range is 3 steps of 2^-4 from -1.5 steps: x / scale + zero lands on
    m = 0, 1/2, 1, ..., 3, so half the entries are ties."""
    m = np.tile(np.arange(7) / 2.0, 3)[:16]
    m[0], m[1] = 0.0, 3.0
    return ((m - 1.5) * 2.0**-4).astype(np.float32)[None, :]


def _float32_boundary() -> np.ndarray:
    """Rows [4, 128] of integers times 2^-10 / 3 in float32 whose codes, groups of 16, differ when the
    steps x / scale + zero are taken in float64 (the first four such rows of a seeded draw)."""
    rng = np.random.default_rng(seed_for("kv.oscar.quantize/float32 steps"))
    rows = []
    while len(rows) < 4:
        x = (rng.integers(-(2**12), 2**12, 128) * 2.0**-10 / 3).astype(np.float32)
        codes = oscar.quantize(x, clip_ratio=0.0, group=16)[0]
        g = x.astype(np.float64).reshape(8, 16)
        lo, hi = g.min(axis=1, keepdims=True), g.max(axis=1, keepdims=True)
        s64 = np.maximum(hi - lo, 1e-8) / 3
        if (np.floor(g / s64 - lo / s64 + 0.5).reshape(-1) != codes).any():
            rows.append(x)
    return np.stack(rows)


def quantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.oscar.quantize"))
    x = _rows(rng, (4, 128))
    scaled = _rows(rng, (3, 64))
    scaled[0] *= 16  # a loud token: a per-tensor threshold clips the quiet rows less than per-token ones would
    fz = np.float32([-0.8125, 0.5, 0.25, -0.375] * 4)[None, :]  # -min / scale = 1.5: not an integer
    const = np.float32([[0.75] * 16, [0.0] * 16, [-3.0] * 16])
    v = VectorSpec
    return [
        v("random rows [4, 128], an outlier channel, K's clip 0.96 (rank 122)", ("Random", "OscarClipRank"),
          Case({"x": x}, {"clip_ratio": 0.96})),
        v("the same rows, V's clip 0.92 (rank 117)", ("Random", "OscarClipRank"), Case({"x": x}, {"clip_ratio": 0.92})),
        v("clip 0: no clipping, plain INT2", ("Random", "OscarFloatZeroPoint"), Case({"x": x}, {"clip_ratio": 0.0})),
        v("clip 1: rank D - 1, the row maximum: no value changes", ("OscarClipRank",),
          Case({"x": x}, {"clip_ratio": 1.0})),
        v("clip 0.5 on rows of 64: rank 32", ("OscarClipRank", "OscarClipScope"),
          Case({"x": scaled}, {"clip_ratio": 0.5, "group": 64})),
        v("rows of different loudness: the threshold is per token", ("OscarClipScope",),
          Case({"x": scaled}, {"clip_ratio": 0.9, "group": 64})),
        v("rows of different loudness, groups of 16: the threshold is per token, not per group", ("OscarClipScope",),
          Case({"x": scaled}, {"clip_ratio": 0.75, "group": 16})),
        v("ties: x / scale + zero = m + 1/2 rounds up", ("OscarHalfUp",), Case({"x": _ties()}, {"clip_ratio": 0.0,
                                                                                         "group": 16})),
        v("a zero point of 1.5 stays 1.5", ("OscarFloatZeroPoint",), Case({"x": fz}, {"clip_ratio": 0.0, "group": 16})),
        v("constant rows (3/4, 0, -3): span 0 floored to 1e-8, codes 0", ("OscarSpanFloor",),
          Case({"x": const}, {"clip_ratio": 0.0, "group": 16})),
        v("constant rows, clipped", ("OscarSpanFloor",), Case({"x": const}, {"clip_ratio": 0.96, "group": 16})),
        v("a row of 15 zeros and one 1: the threshold at rank 15 (ratio 0.96) is 1",
          ("OscarClipRank", "OscarSpanFloor"),
          Case({"x": np.float32([0] * 15 + [1])[None, :]}, {"clip_ratio": 0.96, "group": 16})),
    ] + [v(f"groups of {g} channels of each token", ("OscarTokenGroups", "Random"), Case({"x": x[:2]}, {"group": g}))
         for g in (64, 32, 16)] + [
        v("float16 rows (widened to float32)", ("OscarFloat32Codec",), Case({"x": x[:2].astype(np.float16)}, {})),
        v("float64 rows that float32 cannot hold: rounded to float32 first", ("OscarFloat32Codec",),
          Case({"x": (x[:2].astype(np.float64) / 3)}, {})),
        v("float32 rows divided by 3: float32 steps, not float64", ("OscarFloat32Codec", "Random"),
          Case({"x": (x[:2] / np.float32(3))}, {})),
        v("one token: 1-d x", ("OscarTokenGroups",), Case({"x": x[0]}, {})),
        v("a cache [B, H, T, D] = [1, 2, 3, 16]", ("OscarTokenGroups", "Random"),
          Case({"x": _rows(rng, (1, 2, 3, 16))}, {"group": 16})),
        v("no tokens: [0, 128]", ("EmptyInput",), Case({"x": x[:0]}, {})),
        v("NaN is rejected", ("InvalidInput", "NaN"),
          Case({"x": np.where(np.arange(128) == 5, np.float32(np.nan), x[0])[None, :]}, {}), "invalid"),
        v("Inf is rejected", ("InvalidInput",),
          Case({"x": np.where(np.arange(128) == 9, np.float32(np.inf), x[0])[None, :]}, {}), "invalid"),
        v("a group that does not divide D is rejected", ("InvalidInput", "OscarTokenGroups"),
          Case({"x": x[:, :96]}, {"group": 64}), "invalid"),
        v("integer x is rejected", ("InvalidInput",), Case({"x": np.ones((1, 128), np.int32)}, {}), "invalid"),
        v("a 0-d x is rejected", ("InvalidInput",), Case({"x": np.float32(1)}, {}), "invalid"),
        v("clip_ratio 1.5 is rejected", ("InvalidInput",), Case({"x": x[:1]}, {"clip_ratio": 1.5}), "invalid"),
        v("clip_ratio -0.1 is rejected (the reference's 'disabled' is 0)", ("InvalidInput",),
          Case({"x": x[:1]}, {"clip_ratio": -0.1}), "invalid"),
        v("a range that overflows float32 is rejected", ("InvalidInput",),
          Case({"x": np.float32([3e38, -3e38] * 8)[None, :]}, {"clip_ratio": 0.0, "group": 16}), "invalid"),
        v("float32 rows whose float64 steps give other codes", ("OscarFloat32Codec",),
          Case({"x": _float32_boundary()}, {"clip_ratio": 0.0, "group": 16})),
    ]


def dequantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.oscar.dequantize"))
    codes = rng.integers(0, 4, (3, 128)).astype(np.uint8)
    scales = (rng.integers(1, 200, (3, 2)) * 2.0**-10).astype(np.float32)
    zeros = (rng.integers(0, 49, (3, 2)) * 2.0**-4).astype(np.float32)  # float zero points in [0, 3]
    base = {"codes": codes, "scales": scales, "zeros": zeros}
    v = VectorSpec
    return [
        v("random codes, groups of 64, float zero points", ("OscarFloatZeroPoint", "Random"),
          Case(base, {"group": 64})),
        v("one group per row (128)", ("OscarTokenGroups",),
          Case({"codes": codes, "scales": scales[:, :1], "zeros": zeros[:, :1]}, {})),
        v("int64 codes", ("Random",), Case({**base, "codes": codes.astype(np.int64)}, {"group": 64})),
        v("no tokens", ("EmptyInput",), Case({"codes": codes[:0], "scales": scales[:0], "zeros": zeros[:0]},
                                             {"group": 64})),
        v("code 4 is rejected", ("InvalidInput",), Case({**base, "codes": codes + 1}, {"group": 64}), "invalid"),
        v("float codes are rejected", ("InvalidInput",),
          Case({**base, "codes": codes.astype(np.float32)}, {"group": 64}), "invalid"),
        v("float64 scales are rejected", ("InvalidInput",),
          Case({**base, "scales": scales.astype(np.float64)}, {"group": 64}), "invalid"),
        v("scales of the wrong shape are rejected", ("InvalidInput", "OscarTokenGroups"),
          Case({**base, "scales": scales[:, :1]}, {"group": 64}), "invalid"),
    ]


def pack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.oscar.pack"))
    v = VectorSpec
    distinct = np.uint8([0, 1, 2, 3, 1, 2, 3, 0, 2, 3, 0, 1, 3, 0, 1, 2])  # every byte differs by layout
    return [
        v("16 codes, every quarter distinct: byte j holds channels j, j+4, j+8, j+12", ("OscarQuarterInterleave",),
          Case({"codes": distinct}, {})),
        v("random codes [2, 3, 128]", ("OscarQuarterInterleave", "Random"),
          Case({"codes": rng.integers(0, 4, (2, 3, 128)).astype(np.uint8)}, {})),
        v("D = 4: one byte per row", ("OscarQuarterInterleave",),
          Case({"codes": np.uint8([[3, 2, 1, 0], [0, 1, 2, 3]])}, {})),
        v("no tokens", ("EmptyInput",), Case({"codes": np.zeros((0, 128), np.uint8)}, {})),
        v("code 4 is rejected, not masked", ("InvalidInput",), Case({"codes": np.uint8([4, 0, 0, 0])}, {}),
          "invalid"),
        v("D = 6, not a multiple of 4, is rejected", ("InvalidInput",), Case({"codes": np.zeros(6, np.uint8)}, {}),
          "invalid"),
        v("float codes are rejected", ("InvalidInput",), Case({"codes": np.zeros(8, np.float32)}, {}), "invalid"),
    ]


def unpack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.oscar.unpack"))
    v = VectorSpec
    return [
        v("every byte as one row of 256", ("OscarQuarterInterleave",),
          Case({"packed": np.arange(256, dtype=np.uint8)[None, :]}, {})),
        v("random bytes [2, 2, 32]", ("OscarQuarterInterleave", "Random"),
          Case({"packed": rng.integers(0, 256, (2, 2, 32)).astype(np.uint8)}, {})),
        v("no tokens", ("EmptyInput",), Case({"packed": np.zeros((0, 32), np.uint8)}, {})),
        v("int32 bytes are rejected", ("InvalidInput",), Case({"packed": np.zeros(4, np.int32)}, {}), "invalid"),
    ]


def _quantize_examples(supported):
    @st.composite
    def case(draw):
        params = draw(variant_params(supported), label="params")
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        d = draw(st.sampled_from([128, 256]), label="d")
        rows = draw(st.integers(0, 4), label="rows")
        x = _rows(rng, (rows, d), -(2**7), 2**7) * np.float32(2.0 ** draw(st.integers(-6, 6), label="exp"))
        ratio = draw(st.sampled_from([0.0, 0.5, 0.92, 0.96, 1.0]), label="clip_ratio")
        return Case({"x": x}, {**params, "clip_ratio": ratio})

    return case()


def _dequantize_examples(supported):
    @st.composite
    def case(draw):
        g = draw(st.sampled_from(list(supported["group"])), label="group")
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        rows = draw(st.integers(0, 3), label="rows")
        return Case({"codes": rng.integers(0, 4, (rows, 128)).astype(np.uint8),
                     "scales": (rng.integers(1, 2**10, (rows, 128 // g)) * 2.0**-12).astype(np.float32),
                     "zeros": (rng.integers(0, 97, (rows, 128 // g)) * 2.0**-5).astype(np.float32)}, {"group": g})

    return case()


def _pack_examples(supported):
    @st.composite
    def case(draw):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        shape = (draw(st.integers(0, 3), label="rows"), 4 * draw(st.integers(1, 40), label="quarter"))
        return Case({"codes": rng.integers(0, 4, shape).astype(np.uint8)}, {})

    return case()


def _unpack_examples(supported):
    @st.composite
    def case(draw):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        shape = (draw(st.integers(0, 3), label="rows"), draw(st.integers(1, 40), label="bytes"))
        return Case({"packed": rng.integers(0, 256, shape).astype(np.uint8)}, {})

    return case()


def _unsigned_zero(a) -> np.ndarray:
    a = np.asarray(a)
    return np.where(a == 0, np.zeros_like(a), a) if a.dtype.kind == "f" else a


def _float32(expected, actual) -> Comparison:
    """float32 values bit for bit, the sign of a zero not judged (-min/scale of min +0 is -0)."""
    if np.asarray(actual).dtype != np.float32:
        return Comparison(False, np.size(expected), np.size(expected), np.inf, "dtype",
                          problem=f"dtype: expected float32, got {np.asarray(actual).dtype}")
    return compare_values(_unsigned_zero(expected), _unsigned_zero(actual), "float32")


def _compare_quantized(expected, actual) -> Comparison:
    return compare_parts(expected, actual, names=("codes", "scales", "zeros"),
                         comparators=(compare_exact, _float32, _float32))


OPERATIONS = [
    AREA.exact("oscar.quantize", oscar.quantize, anchor="oscar",
               summary="x [..., D] -> (codes uint8, scales, zeros float32): per-token clip, INT2, float zero, half up",
               variants=(GROUP,), vectors=quantize_vectors, examples=_quantize_examples, compare=_compare_quantized,
               outputs=("codes", "scales", "zeros")),
    AREA.exact("oscar.dequantize", oscar.dequantize, anchor="oscar",
               summary="(codes, scales, zeros) -> (code - zero) * scale, float32", variants=(GROUP,),
               vectors=dequantize_vectors, examples=_dequantize_examples, compare=_float32),
    AREA.exact("oscar.pack", oscar.pack, anchor="oscar-pack", summary="INT2 codes [..., D] -> bytes [..., D/4], "
               "quarter rows interleaved", vectors=pack_vectors, examples=_pack_examples, compare=compare_exact),
    AREA.exact("oscar.unpack", oscar.unpack, anchor="oscar-pack", summary="bytes [..., Q] -> INT2 codes [..., 4Q]",
               vectors=unpack_vectors, examples=_unpack_examples, compare=compare_exact),
]

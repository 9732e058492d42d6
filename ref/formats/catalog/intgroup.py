"""Integer group codecs (spec/formats.md#int-groups): weight-only INT4/INT8 with a scale
and a zero point per group along the input axis, and GPTQ's and AWQ's int32 words.

  formats.intB_group.quantize    w [..., n] -> (codes, scales, zeros)   (B: 4 or 8)
  formats.intB_group.dequantize  (codes, scales, zeros) -> float32 weights
  formats.int4.pack_int32        codes [..., 8k] -> int32 words [..., k] (GPTQ or AWQ order)
  formats.int4.unpack_int32      words -> codes

All exact; the oracles are the `ref.formats.intgroup` functions, the bit width bound.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.formats import intgroup
from ref.formats.catalog.case_classes import ordered
from ref.testing.catalog_types import Area, Flag, Variant, seed_for
from ref.testing.compare import compare_exact, compare_parts, compare_values
from ref.testing.params import variant_params
from ref.testing.strategies import block_shapes, outlier_arrays, realistic_arrays, small_shapes
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FORMATS = Area("formats", spec="spec/formats.md")
SCHEMES = [s.value for s in intgroup.Scheme]

SCHEME = Variant("scheme", intgroup.Scheme, "asymmetric",
                 "asymmetric min-max with a zero point (GPTQ, AWQ) or symmetric amax / (2^(b-1) - 1)")
GROUP = Variant("group", intgroup.GROUP_SIZES[::-1], 128, "elements per scale along the input (last) axis")
ZERO_STORAGE = Variant("zero_storage", intgroup.ZeroStorage, "exact",
                       "zero points as they are (GPTQ v2, AWQ) or minus one modulo 2^b (GPTQ v1 checkpoints)")
WORD_ORDER = Variant("order", intgroup.WordOrder, "gptq",
                     "nibble order in an int32 word: sequential (GPTQ) or interleaved 0,2,4,6,1,3,5,7 (AWQ)")

# Flags only integer-group vectors carry; RaggedGroup is shared with the MX and NVFP4
# vectors (ZeroBlock: catalog.mx; element flags: the element catalog).
FLAGS = {
    "RaggedGroup": Flag("a last axis that is not a multiple of the group (or word) size padded or truncated "
                        "instead of rejected", "the tail of each row is quantized in a made-up group, or dropped"),
    "DegenerateGroup": Flag("a group whose scale underflows float32 (tiny or subnormal weights) divided by a "
                            "zero scale instead of the 2^-23 floor",
                            "codes come from casting NaN or Inf to an integer (platform-dependent); zeros miss "
                            "the zero point"),
    "ZeroPoint": Flag("zero point off by one (GPTQ v1's stored zero - 1 applied twice or not at all)",
                      "every weight of a group shifts by one quantization step"),
    "WordOrder": Flag("INT4 codes packed into int32 in GPTQ's order where AWQ's is declared, or the reverse",
                      "the eight weights of every word are permuted"),
}


def _ties(bits: int, scheme: str, rng) -> np.ndarray:
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


def _scheme_vectors(bits: int, scheme: str, w: np.ndarray, rng) -> list[VectorSpec]:
    specs = [VectorSpec(f"{scheme}, group {group}: weights with an outlier channel", ("Random",),
                        Case({"w": w}, {"scheme": scheme, "group": group})) for group in intgroup.GROUP_SIZES]
    one_sided = np.abs(w[:2, :128]) + 0.01
    steps = (np.arange(128) - 64).astype(np.float32) * np.float32(0.5)
    return specs + [
        VectorSpec(f"{scheme}: all-positive groups (the zero point meets its clamp)", ("ZeroPoint",),
                   Case({"w": np.concatenate([one_sided, -one_sided])}, {"scheme": scheme})),
        VectorSpec(f"{scheme}: zero points stored GPTQ v1 style (minus one, 0 wraps)", ("ZeroPoint",),
                   Case({"w": np.concatenate([one_sided, -one_sided])}, {"scheme": scheme, "zero_storage": "gptq_v1"})),
        VectorSpec(f"{scheme}: an all-zero group", ("ZeroBlock",),
                   Case({"w": np.zeros((1, 128), np.float32)}, {"scheme": scheme})),
        VectorSpec(f"{scheme}: values on half steps (rounding ties)", ("TiesToEven",),
                   Case({"w": steps[None, :]}, {"scheme": scheme})),
        VectorSpec(f"{scheme}: weights within 3 float32 ulps of (k + 1/2) * scale", ("TiesToEven",),
                   Case({"w": _ties(bits, scheme, rng)}, {"scheme": scheme})),
    ]


def quantize_vectors(bits: int) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.int{bits}_group.quantize"))
    w = (rng.standard_normal((8, 256)) * 0.02).astype(np.float32)
    w[:, 17] *= 30  # an outlier input channel
    specs = [s for scheme in SCHEMES for s in _scheme_vectors(bits, scheme, w, rng)]
    qmax = (1 << bits) - 1
    lo = np.float32(-6.5 / 16)  # scale exactly 1/16 and -lo/scale exactly 6.5 (a tie)
    # not linspace: its rounding varies by numpy version
    exact = (np.float64(lo) + np.arange(128) * (qmax / 16 / 127)).astype(np.float32)
    exact[0], exact[-1] = lo, np.float32(lo + np.float32(qmax / 16))
    specs.append(VectorSpec("asymmetric: the zero point -lo/scale is exactly k + 1/2 (rounds to even)",
                            ("ZeroPoint", "TiesToEven"), Case({"w": exact[None, :]}, {"scheme": "asymmetric"})))
    specs.append(VectorSpec("NaN weights are rejected", ("InvalidInput", "NaN"),
                            Case({"w": np.full((1, 128), np.nan, np.float32)}), "invalid"))
    return specs + _shape_vectors(w) + _degenerate_vectors()


def _shape_vectors(w: np.ndarray) -> list[VectorSpec]:
    """Every input dtype and rank intB_group.quantize accepts, and what it refuses."""
    specs = [
        VectorSpec("float16 weights (widened to float32 exactly)", ("Float16Input",),
                   Case({"w": w[:2].astype(np.float16)}, {"group": 64})),
        VectorSpec("one row: a 1-d weight vector", ("InputRank",), Case({"w": w[0]}, {"group": 64})),
        VectorSpec("a 3-d stack of weight matrices", ("InputRank",),
                   Case({"w": w[:4].reshape(2, 2, 256)}, {"group": 128})),
        VectorSpec("a 3-d float16 stack", ("InputRank", "Float16Input"),
                   Case({"w": w[:4, :64].reshape(2, 2, 64).astype(np.float16)}, {"group": 32})),
        VectorSpec("no rows: empty codes, scales and zero points", ("EmptyInput",),
                   Case({"w": np.zeros((0, 128), np.float32)})),
        VectorSpec("rows of no weights: no groups", ("EmptyInput",), Case({"w": np.zeros((2, 0), np.float32)})),
        VectorSpec("float64 weights are rejected, not narrowed", ("InvalidInput",),
                   Case({"w": w[:1].astype(np.float64)}), "invalid"),
        VectorSpec("integer weights are rejected", ("InvalidInput",), Case({"w": np.ones((1, 128), np.int32)}),
                   "invalid"),
        VectorSpec("a 0-d weight is rejected", ("InvalidInput", "InputRank"),
                   Case({"w": np.float32(1)}, {"group": 32}), "invalid"),
        VectorSpec("Inf weights are rejected", ("InvalidInput", "Infinity"),
                   Case({"w": np.where(np.arange(128) == 3, np.float32(np.inf), w[0, :128])[None, :]}), "invalid"),
        VectorSpec("a group whose range max - min overflows float32 is rejected", ("InvalidInput",),
                   Case({"w": np.float32([3e38, -3e38] * 64)[None, :]}, {"scheme": "asymmetric"}), "invalid"),
    ]
    for group in intgroup.GROUP_SIZES:
        for n in (group + group // 2, group // 2):
            specs.append(VectorSpec(f"a last axis of {n} with group {group} is rejected, not padded or cut",
                                    ("InvalidInput", "RaggedGroup"), Case({"w": w[:1, :n]}, {"group": group}),
                                    "invalid"))
    return specs


def _degenerate_vectors() -> list[VectorSpec]:
    """Groups whose scale (hi - lo) / qmax or amax / (2^(b-1) - 1) underflows float32, or
    falls below the 2^-23 floor: they take scale 2^-23 and quantize to the zero point."""
    subnormals = np.float32([-3e-45, 1e-45, 0.0, 4e-45] * 32)
    tiny = (np.sin(np.arange(128)) * 4e-7).astype(np.float32)  # a scale of about 5e-8 or 3e-9: below 2^-23
    normal = np.float32(np.linspace(-0.03, 0.05, 128))
    half = np.float16([6e-8, -1.2e-7, 0.0, 1.8e-7] * 8 + [6e-8, 0.0, 3e-5, -1e-5] * 8)[None, :]
    specs = []
    for scheme in SCHEMES:
        specs += [
            VectorSpec(f"{scheme}: a group of float32 subnormals (its scale underflows to 0)", ("DegenerateGroup",),
                       Case({"w": np.stack([subnormals, normal])}, {"scheme": scheme})),
            VectorSpec(f"{scheme}: a group of weights near 4e-7 (scale floored at 2^-23)", ("DegenerateGroup",),
                       Case({"w": np.stack([tiny, -tiny])}, {"scheme": scheme})),
            VectorSpec(f"{scheme}: float16 subnormals (widened exactly; their scale is floored too)",
                       ("DegenerateGroup", "Float16Input"), Case({"w": half}, {"scheme": scheme, "group": 32})),
        ]
    return specs


def dequantize_vectors(bits: int) -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for(f"formats.int{bits}_group.dequantize"))
    codes = rng.integers(0, 1 << bits, (4, 256)).astype(np.uint8)
    specs = []
    for group in intgroup.GROUP_SIZES:
        n = 256 // group
        scales = (rng.random((4, n)) * 0.01).astype(np.float32)
        zeros = rng.integers(0, 1 << bits, (4, n)).astype(np.uint8)
        for storage in (z.value for z in intgroup.ZeroStorage):
            specs.append(VectorSpec(f"random codes, group {group}, zero points {storage}", ("ZeroPoint", "Random"),
                                    Case({"codes": codes, "scales": scales, "zeros": zeros},
                                         {"group": group, "zero_storage": storage})))
    specs.append(VectorSpec("scales of the wrong shape are rejected", ("InvalidInput",),
                            Case({"codes": codes, "scales": np.ones((4, 3), np.float32),
                                  "zeros": np.zeros((4, 3), np.uint8)}), "invalid"))
    sc = (rng.random((4, 2)) * 0.01).astype(np.float32)
    z = rng.integers(0, 1 << bits, (4, 2)).astype(np.uint8)
    return specs + _dequantize_shape_vectors(codes, sc, z, bits)


def _dequantize_shape_vectors(codes, sc, z, bits: int) -> list[VectorSpec]:
    """Ranks dequantize accepts, and what it refuses: dtypes, ragged rows, dirty bits.
    codes [4, 256], sc and z [4, 2] (group 128)."""
    specs = [
        VectorSpec("one row: 1-d codes", ("InputRank",),
                   Case({"codes": codes[0], "scales": sc[0], "zeros": z[0]})),
        VectorSpec("a 3-d stack", ("InputRank",),
                   Case({"codes": codes.reshape(2, 2, 256), "scales": sc.reshape(2, 2, 2),
                         "zeros": z.reshape(2, 2, 2)})),
        VectorSpec("no rows", ("EmptyInput",), Case({"codes": codes[:0], "scales": sc[:0], "zeros": z[:0]})),
        VectorSpec("int32 codes are rejected", ("InvalidInput",),
                   Case({"codes": codes.astype(np.int32), "scales": sc, "zeros": z}), "invalid"),
        VectorSpec("float64 scales are rejected", ("InvalidInput",),
                   Case({"codes": codes, "scales": sc.astype(np.float64), "zeros": z}), "invalid"),
        VectorSpec("a last axis of 192 with group 128 is rejected, not padded or cut", ("InvalidInput", "RaggedGroup"),
                   Case({"codes": codes[:, :192], "scales": sc, "zeros": z}), "invalid"),
        VectorSpec("a last axis of 48 with group 32 is rejected, not padded or cut", ("InvalidInput", "RaggedGroup"),
                   Case({"codes": codes[:, :48], "scales": sc, "zeros": z}, {"group": 32}), "invalid"),
    ]
    for bit in ((bits, 7) if bits < 8 else ()):
        dirty, dirty_z = codes.copy(), z.copy()
        dirty[1, 5] |= 1 << bit
        dirty_z[2, 1] |= 1 << bit
        specs += [VectorSpec(f"a code with bit {bit} set is rejected, not masked", ("DirtyBits", "InvalidInput"),
                             Case({"codes": dirty, "scales": sc, "zeros": z}), "invalid"),
                  VectorSpec(f"a zero point with bit {bit} set is rejected, not masked", ("DirtyBits", "InvalidInput"),
                             Case({"codes": codes, "scales": sc, "zeros": dirty_z}), "invalid")]
    return specs


def _quantize_examples(supported):
    @st.composite
    def case(draw):
        params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
        shape = draw(block_shapes(block=params["group"], max_blocks=3), label="shape")
        dtype = st.just(draw(st.sampled_from([np.dtype(np.float32), np.dtype(np.float16)]), label="dtype"))
        # 1e-7 puts scales below the 2^-23 floor (degenerate groups); float16 stays finite at every scale.
        scale = st.sampled_from([1e-7, 1e-4, 1e-2, 0.1, 1.0, 10.0])
        w = draw(st.one_of(realistic_arrays(shape=st.just(shape), dtype=dtype, scale=scale),
                           outlier_arrays(shape=st.just(shape), dtype=dtype)), label="w")
        return Case({"w": w}, params)

    return case()


def _dequantize_examples(bits: int):
    def strategy(supported):
        @st.composite
        def case(draw):
            group = draw(st.sampled_from(list(supported["group"])), label="group")
            shape = draw(block_shapes(block=group, max_blocks=2), label="shape")
            n = (*shape[:-1], shape[-1] // group)
            c = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, (1 << bits) - 1)), label="codes")
            sc = draw(hnp.arrays(np.float32, n, elements=st.floats(2.0**-20, 10.0, width=32)), label="scales")
            z = draw(hnp.arrays(np.uint8, n, elements=st.integers(0, (1 << bits) - 1)), label="zeros")
            storage = draw(variant_params(supported, only=("zero_storage",)), label="params")
            return Case({"codes": c, "scales": sc, "zeros": z}, {"group": group, **storage})

        return case()

    return strategy


def _group_flags(case: Case) -> tuple[str, ...]:
    """ZeroPoint for the asymmetric scheme or zero points as input, DegenerateGroup for a
    group whose largest magnitude is below 2^-23 (its scale underflows), else Random."""
    params, inputs = case.params, case.inputs
    flags = []
    if params.get("scheme") == "asymmetric" or "zeros" in inputs:
        flags.append("ZeroPoint")
    w, group = inputs.get("w"), params.get("group")
    if w is not None and group and np.ndim(w) and np.shape(w)[-1] % group == 0 and np.size(w):
        amax = np.max(np.abs(np.asarray(w, dtype=np.float64).reshape(-1, group)), axis=-1)
        if np.any(amax < 2.0**-23):
            flags.append("DegenerateGroup")
    return ordered(flags)


_compare_quantized = partial(compare_parts, names=("codes", "scales", "zeros"),
                             comparators=(compare_exact, partial(compare_values, fmt="float32"), compare_exact))


def _group_ops(bits: int) -> list:
    return [
        FORMATS.exact(f"int{bits}_group.quantize", partial(intgroup.quantize, bits=bits), anchor="int-groups",
                      summary=f"float32 w [..., n] -> (INT{bits} codes, float32 scales, zero points) per group",
                      variants=(SCHEME, GROUP, ZERO_STORAGE), vectors=partial(quantize_vectors, bits),
                      examples=_quantize_examples, compare=_compare_quantized, outputs=("codes", "scales", "zeros"),
                      case_flags=_group_flags),
        FORMATS.exact(f"int{bits}_group.dequantize", partial(intgroup.dequantize, bits=bits), anchor="int-groups",
                      summary=f"(INT{bits} codes, scales, zeros) -> float32 weights", variants=(GROUP, ZERO_STORAGE),
                      vectors=partial(dequantize_vectors, bits), examples=_dequantize_examples(bits),
                      compare=compare_values, case_flags=_group_flags),
    ]


def _pack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.int4.pack_int32"))
    specs = []
    for order in (o.value for o in intgroup.WordOrder):
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


def _unpack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.int4.unpack_int32"))
    specs = []
    for order in (o.value for o in intgroup.WordOrder):
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
        return st.tuples(arrays, variant_params(supported, only=("order",))).map(
            lambda t: Case({name: t[0]}, t[1]))

    return strategy


_NIBBLES = st.integers(0, 15)

OPERATIONS = [
    FORMATS.exact("int4.pack_int32", intgroup.pack_int32, anchor="int-groups",
                  summary="INT4 codes [..., 8k] -> int32 words [..., k]", variants=(WORD_ORDER,),
                  vectors=_pack_vectors, compare=compare_exact, case_flags=lambda case: ("WordOrder",),
                  examples=_ordered("codes", hnp.arrays(np.uint8, block_shapes(block=8, max_blocks=4),
                                                        elements=_NIBBLES))),
    FORMATS.exact("int4.unpack_int32", intgroup.unpack_int32, anchor="int-groups",
                  summary="int32 words [..., k] -> INT4 codes [..., 8k]", variants=(WORD_ORDER,),
                  vectors=_unpack_vectors, compare=compare_exact, case_flags=lambda case: ("WordOrder",),
                  examples=_ordered("words", hnp.arrays(np.int32, small_shapes(max_dims=2, max_side=6)))),
] + _group_ops(4) + _group_ops(8)

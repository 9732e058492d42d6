"""The packed checkpoint layouts (spec/quant.md#packing): GPTQ's qweight, qzeros (v1 and
v2) and g_idx, the v1 repair, AWQ's interleaved words, compressed-tensors'
pack_to_int32, and the two loaders that turn a checkpoint's tensors into weights.

All exact; the oracles are the `ref.quant.packing` functions.
"""

from __future__ import annotations

import numpy as np

from ref.quant import packing as P
from ref.quant.catalog.common import AREA
from ref.quant.catalog.packing_examples import (awq_case, awq_dequantize_case, ct_case, examples, g_idx_case,
                                                gptq_codes_case, gptq_dequantize_case, words_case)
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact, compare_values
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

BITS = Variant("bits", P.GPTQ_BITS, 4, "bits per code in GPTQ's words: 2, 3, 4 or 8")
ZERO_FORMAT = Variant("zero_format", P.ZeroFormat, "v1",
                      "zero points stored minus one (v1: AutoGPTQ, checkpoint_format gptq) or as they are (v2)")
GROUP = Variant("group", (128, 64, 32, 16, 8, 4, 2, 1, -1), 128, "input channels per group; -1: one group")
STATIC = Variant("static_groups", (False, True), False,
                 "act-order groups fixed before the permutation (GPTQModel static_groups) or in quantization order")
CT_BITS = Variant("bits", tuple(range(1, 9)), 4, "bits per code in compressed-tensors' words: 1..8")
PACKED_DIM = Variant("packed_dim", (1, 0), 1, "the axis packed: 1 (along a row, the input axis) or 0")
LAYOUT = Variant("layout", P.CtLayout, "dense",
                 "one stream with codes across word boundaries (compressed-tensors 0.19) or 32 // b codes per word")

FLAGS = {
    "PackAxis": Flag("codes packed along the wrong dimension (GPTQ's qweight along the output axis, AWQ's along the "
                     "input axis)", "words hold codes of other channels: the checkpoint loads as another matrix"),
    "AwqOrder": Flag("AWQ's interleaved nibble order 0,2,4,6,1,3,5,7 replaced by the sequential one (or "
                        "inverted)", "the eight output channels of every word are permuted"),
    "Straddle3Bit": Flag("3-bit codes that cross a word boundary (codes 10 and 21 of 32) cut, dropped or placed "
                         "with the wrong shift", "one or two codes of every 32 read back wrong"),
    "WordSign": Flag("words read as signed: the top code sign-extended by an arithmetic shift",
                     "the top field of a word with its high bit set decodes negative"),
    "ZeroFormatV1": Flag("v1 zero points (stored minus one) read as v2 or written without the minus one",
                         "every weight shifts by one step"),
    "CarryRepair": Flag("the v1 repair done as one integer add per word (a field of all ones carries into the "
                        "next)", "the zero point 0 and its neighbour field come back wrong"),
    "GIdxOrder": Flag("g_idx computed in permuted order for static groups, or in quantization order for act-order, "
                      "or ignored by a loader (i // group)", "columns take another group's scale and zero"),
    "SignedOffset": Flag("compressed-tensors' signed codes packed as two's complement (the 2^(b-1) offset missing "
                         "or applied twice)", "every field differs in its top bit"),
    "CtLayout": Flag("compressed-tensors' padded layout (32 // b codes a word) where the dense stream is declared, "
                     "or the reverse", "3-, 5-, 6- and 7-bit words and ragged rows differ"),
}


def _rng(name: str):
    return np.random.default_rng(seed_for(f"quant.pack.{name}"))


def _straddle(bits: int) -> np.ndarray:
    """codes [2, 32]: all ones at the codes that straddle words at 3 bits (10, 21), zero
    elsewhere; and 0..31 mod 2^bits."""
    row = np.zeros(32, np.int64)
    row[[10, 21]] = (1 << bits) - 1
    return np.stack([row, np.arange(32) % (1 << bits)])


def _qweight_vectors():
    rng, specs = _rng("gptq_qweight"), []
    for bits in P.GPTQ_BITS:
        p = {"bits": bits}
        specs += [
            VectorSpec(f"{bits} bits: random codes [8, 64] (in = 64 along the packed axis)", ("PackAxis", "Random"),
                       Case({"codes": rng.integers(0, 1 << bits, (8, 64))}, p)),
            VectorSpec(f"{bits} bits: codes 10 and 21 all ones (they straddle words at 3 bits); 0..31",
                       ("Straddle3Bit", "WordSign"), Case({"codes": _straddle(bits)}, p)),
            VectorSpec(f"{bits} bits: uint8 codes [32, 32], every one 2^b - 1", ("WordSign",),
                       Case({"codes": np.full((32, 32), (1 << bits) - 1, np.uint8)}, p)),
            VectorSpec(f"{bits} bits: a code of 2^b is rejected", ("InvalidInput",),
                       Case({"codes": np.full((2, 32), 1 << bits)}, p), "invalid"),
            VectorSpec(f"{bits} bits: 16 input channels at 3 bits leave a partial word (rejected), or fill words",
                       ("InvalidInput",) if bits == 3 else ("PackAxis",),
                       Case({"codes": rng.integers(0, 1 << bits, (2, 16))}, p), "invalid" if bits == 3 else "valid"),
        ]
    specs += [VectorSpec("float codes are rejected", ("InvalidInput",), Case({"codes": np.ones((2, 32), np.float32)}),
                         "invalid"),
              VectorSpec("1-d codes are rejected", ("InvalidInput",), Case({"codes": np.ones(32, np.int64)}), "invalid"),
              VectorSpec("no output channels", ("EmptyInput",), Case({"codes": np.zeros((0, 32), np.int64)})),
              # added after issue 14's adversary round: GPTQ packs 2, 3, 4 or 8 bits only
              VectorSpec("bits 5 is rejected", ("InvalidInput",),
                         Case({"codes": np.zeros((1, 32), np.int64)}, {"bits": 5}), "invalid"),
              VectorSpec("bits 1 is rejected", ("InvalidInput",),
                         Case({"codes": np.zeros((1, 32), np.int64)}, {"bits": 1}), "invalid")]
    return specs


def _unpack_qweight_vectors():
    rng, specs = _rng("gptq_unpack_qweight"), []
    for bits in P.GPTQ_BITS:
        p = {"bits": bits}
        specs += [
            VectorSpec(f"{bits} bits: random words (64 input channels, 4 outputs)", ("PackAxis", "Random", "WordSign"),
                       Case({"qweight": rng.integers(-2**31, 2**31, (2 * bits, 4)).astype(np.int32)}, p)),
            VectorSpec(f"{bits} bits: words -1 and -2^31 (the sign bit set)", ("WordSign", "Straddle3Bit"),
                       Case({"qweight": np.int32([[-1, -2**31, 0x49249249 - 2**31]] * bits)}, p)),
        ]
    specs += [VectorSpec("uint32 words are rejected", ("InvalidInput",), Case({"qweight": np.zeros((4, 2), np.uint32)}),
                         "invalid"),
              VectorSpec("bits 5 is rejected", ("InvalidInput",),
                         Case({"qweight": np.zeros((5, 2), np.int32)}, {"bits": 5}), "invalid")]
    return specs


def _zeros_vectors(name: str):
    rng, specs = _rng(name), []
    for bits in P.GPTQ_BITS:
        for fmt in ("v1", "v2"):
            z = rng.integers(0, 1 << bits, (32, 3))
            z[:4, 0] = [0, (1 << bits) - 1, 1, 0]  # 0 wraps to all ones in v1
            z[10, 1], z[21, 2] = (1 << bits) - 1, 0
            p = {"bits": bits, "zero_format": fmt}
            if name == "gptq_qzeros":
                case = Case({"zeros": z}, p)
            else:
                case = Case({"qzeros": P.gptq_qzeros(z, bits=bits, zero_format=fmt)}, p)
            specs.append(VectorSpec(f"{bits} bits, {fmt}: zero points 0 and 2^b - 1, 32 outputs, 3 groups",
                                    ("ZeroFormatV1", "Straddle3Bit", "PackAxis"), case))
    if name == "gptq_qzeros":
        specs += [VectorSpec("16 outputs at 3 bits leave a partial word (rejected)", ("InvalidInput",),
                             Case({"zeros": np.zeros((16, 2), np.int64)}, {"bits": 3}), "invalid"),
                  VectorSpec("a zero point of 16 at 4 bits is rejected", ("InvalidInput",),
                             Case({"zeros": np.full((8, 1), 16)}, {"bits": 4}), "invalid")]
    else:
        specs += [VectorSpec("uint32 qzeros are rejected", ("InvalidInput",),
                             Case({"qzeros": np.zeros((2, 1), np.uint32)}, {"bits": 4}), "invalid"),
                  VectorSpec("1-d qzeros are rejected", ("InvalidInput",),
                             Case({"qzeros": np.zeros(4, np.int32)}, {"bits": 4}), "invalid")]
    key = "zeros" if name == "gptq_qzeros" else "qzeros"
    bad = np.zeros((32, 1), np.int64) if name == "gptq_qzeros" else np.zeros((1, 5), np.int32)
    specs.append(VectorSpec("bits 5 is rejected", ("InvalidInput",), Case({key: bad}, {"bits": 5}), "invalid"))
    return specs


def _repair_vectors():
    rng, specs = _rng("gptq_repair_v1"), []
    for bits in P.GPTQ_BITS:
        z = rng.integers(0, 1 << bits, (32, 2))
        z[::3, 0] = 0  # stored as all ones in v1: a whole-word add carries out of these fields
        specs.append(VectorSpec(f"{bits} bits: v1 zero points with zeros of 0 (fields of all ones)",
                                ("CarryRepair", "ZeroFormatV1"),
                                Case({"qzeros": P.gptq_qzeros(z, bits=bits, zero_format="v1")}, {"bits": bits})))
    return specs + [VectorSpec("int64 qzeros are rejected", ("InvalidInput",),
                               Case({"qzeros": np.zeros((2, 1), np.int64)}, {"bits": 4}), "invalid")]


def _g_idx_vectors():
    rng = _rng("gptq_g_idx")
    perm = rng.permutation(16)
    specs = [VectorSpec(f"act-order permutation, group 4, static_groups {s}", ("GIdxOrder",),
                        Case({"perm": perm}, {"group": 4, "static_groups": s})) for s in (False, True)]
    return specs + [
        VectorSpec("act-order permutation of 256, group 128 (the default)", ("GIdxOrder",),
                   Case({"perm": rng.permutation(256)})),
        VectorSpec("no act-order (the identity), group 4", ("GIdxOrder",), Case({"perm": np.arange(16)}, {"group": 4})),
        VectorSpec("act-order, one group (-1)", ("GIdxOrder",), Case({"perm": perm}, {"group": -1})),
        VectorSpec("act-order, groups of 1", ("GIdxOrder",), Case({"perm": perm}, {"group": 1})),
        VectorSpec("a repeated column is rejected", ("InvalidInput",),
                   Case({"perm": np.array([0, 1, 1, 3])}, {"group": 2}), "invalid"),
        VectorSpec("a group that does not divide the input dimension is rejected", ("InvalidInput",),
                   Case({"perm": np.arange(12)}, {"group": 8}), "invalid"),
        VectorSpec("a float permutation is rejected", ("InvalidInput",),
                   Case({"perm": np.arange(4, dtype=np.float32)}, {"group": 2}), "invalid"),
        # added after issue 14's adversary round
        VectorSpec("one group (-1) over 256 columns: all zeros (no group size of 128 assumed)", ("GIdxOrder",),
                   Case({"perm": rng.permutation(256)}, {"group": -1})),
        VectorSpec("static_groups 1 (an integer, not a bool) is rejected", ("InvalidInput",),
                   Case({"perm": np.array([1, 0])}, {"group": 1, "static_groups": 1}), "invalid"),
    ]


def _layer(rng, bits: int, out: int, inp: int, groups: int):
    codes = rng.integers(0, 1 << bits, (out, inp))
    zeros = rng.integers(0, 1 << bits, (out, groups))
    scales = (rng.integers(1, 1024, (groups, out)) * 2.0**-14).astype(np.float16)  # exact in float16
    return codes, zeros, scales


def _gptq_dequantize_vectors():
    rng, specs = _rng("gptq_dequantize"), []
    perm = rng.permutation(32)
    for bits in P.GPTQ_BITS:
        codes, zeros, scales = _layer(rng, bits, 32, 32, 4)
        for fmt in ("v1", "v2"):
            for static in (False, True):
                g_idx = P.gptq_g_idx(perm, group=8, static_groups=static)
                specs.append(VectorSpec(f"{bits} bits, {fmt}, act-order g_idx (static_groups {static}): 32 x 32",
                                        ("GIdxOrder", "ZeroFormatV1", "PackAxis", "Straddle3Bit"),
                                        Case({"qweight": P.gptq_qweight(codes, bits=bits),
                                              "qzeros": P.gptq_qzeros(zeros, bits=bits, zero_format=fmt),
                                              "scales": scales, "g_idx": g_idx}, {"bits": bits, "zero_format": fmt})))
    base = specs[8].case.inputs  # 4 bits, v1, static_groups False: the defaults
    return specs + [
        VectorSpec("float32 scales", ("Random",), Case({**base, "scales": base["scales"].astype(np.float32)})),
        VectorSpec("a g_idx beyond the groups is rejected", ("InvalidInput",),
                   Case({**base, "g_idx": np.full(32, 4, np.int32)}), "invalid"),
        VectorSpec("scales of the wrong shape are rejected", ("InvalidInput",),
                   Case({**base, "scales": base["scales"][:, :16]}), "invalid"),
        # added after issue 14's adversary round
        VectorSpec("a negative g_idx (-1) is rejected, not read as the last group", ("InvalidInput",),
                   Case({**base, "g_idx": np.where(np.arange(32) == 0, -1, base["g_idx"]).astype(np.int32)}),
                   "invalid"),
        VectorSpec("float64 scales are rejected (float16 or float32)", ("InvalidInput",),
                   Case({**base, "scales": base["scales"].astype(np.float64)}), "invalid"),
    ]


def _awq_vectors():
    rng = _rng("awq_pack")
    order = np.tile(np.arange(8), (2, 1)).T  # [8, 2]: output channel c holds code c
    return [
        VectorSpec("output channel c holds code c: one word 0x75316420 per input", ("AwqOrder",),
                   Case({"codes": order})),
        VectorSpec("random codes [16, 8]", ("AwqOrder", "PackAxis", "Random"),
                   Case({"codes": rng.integers(0, 16, (16, 8))})),
        VectorSpec("codes of 15 in the top nibble (the word's sign)", ("WordSign", "AwqOrder"),
                   Case({"codes": np.full((8, 3), 15, np.uint8)})),
        VectorSpec("12 output channels are rejected", ("InvalidInput",), Case({"codes": np.zeros((12, 4), np.int64)}),
                   "invalid"),
        VectorSpec("a code of 16 is rejected", ("InvalidInput",), Case({"codes": np.full((8, 1), 16)}), "invalid"),
        # added after issue 14's adversary round: out == in, so a transposed result has the right shape
        VectorSpec("a square layer [8, 8] of codes (8 o + i) mod 16", ("AwqOrder", "PackAxis"),
                   Case({"codes": np.arange(64).reshape(8, 8) % 16})),
    ]


def _awq_unpack_vectors():
    rng = _rng("awq_unpack")
    return [VectorSpec("words 0x75316420, -1 and random", ("AwqOrder", "WordSign", "Random"),
                       Case({"words": np.concatenate([np.int32([[0x75316420, -1]]),
                                                      rng.integers(-2**31, 2**31, (3, 2)).astype(np.int32)])})),
            VectorSpec("int64 words are rejected", ("InvalidInput",), Case({"words": np.zeros((2, 2), np.int64)}),
                       "invalid"),
            # added after issue 14's adversary round: words [8, 1] hold a square [8, 8] of codes
            VectorSpec("a square layer: words [8, 1] of codes (8 o + i) mod 16", ("AwqOrder", "PackAxis"),
                       Case({"words": P.awq_pack(np.arange(64).reshape(8, 8) % 16)}))]


def _awq_dequantize_vectors():
    rng, specs = _rng("awq_dequantize"), []
    for group, g in ((32, 2), (16, 4), (-1, 1)):
        codes, zeros, scales = _layer(rng, 4, 16, 64, g)
        specs.append(VectorSpec(f"16 x 64, group {group}", ("AwqOrder", "PackAxis", "GIdxOrder"),
                                Case({"qweight": P.awq_pack(codes), "qzeros": P.awq_pack(zeros), "scales": scales},
                                     {"group": group})))
    codes, zeros, scales = _layer(rng, 4, 8, 256, 2)
    specs.append(VectorSpec("8 x 256, group 128 (the default)", ("AwqOrder", "GIdxOrder"),
                            Case({"qweight": P.awq_pack(codes), "qzeros": P.awq_pack(zeros), "scales": scales})))
    base = specs[0].case.inputs
    codes, zeros, scales = _layer(rng, 4, 8, 64, 2)
    two = {"qweight": P.awq_pack(codes), "qzeros": P.awq_pack(zeros), "scales": scales}
    return specs + [VectorSpec("qzeros with the wrong group count are rejected", ("InvalidInput",),
                               Case(base, {"group": 16}), "invalid"),
                    # added after issue 14's adversary round
                    VectorSpec("a group larger than the file's (64 for 2 groups of 32) is rejected", ("InvalidInput",),
                               Case(two, {"group": 64}), "invalid"),
                    VectorSpec("one group (-1) for a file of 2 groups is rejected", ("InvalidInput",),
                               Case(two, {"group": -1}), "invalid"),
                    VectorSpec("a square layer 8 x 8, group 4", ("AwqOrder", "PackAxis"),
                               Case({"qweight": P.awq_pack(codes[:, :8]), "qzeros": P.awq_pack(zeros),
                                     "scales": scales}, {"group": 4})),
                    VectorSpec("float64 scales are rejected (float16 or float32)", ("InvalidInput",),
                               Case({**two, "scales": scales.astype(np.float64)}, {"group": 32}), "invalid"),
                    VectorSpec("float32 scales", ("Random",),
                               Case({**two, "scales": scales.astype(np.float32)}, {"group": 32}))]


def _ct_vectors(name: str):
    rng, specs = _rng(name), []
    for bits in range(1, 9):
        half = 1 << (bits - 1)
        v = rng.integers(-half, half, (3, 37)).astype(np.int8)
        v[0, :4] = [-half, half - 1, 0, -1]
        for layout in ("dense", "padded"):
            for dim in (1, 0):
                x = v if dim == 1 else np.ascontiguousarray(v.T)
                p = {"bits": bits, "layout": layout, "packed_dim": dim}
                flags = ("CtLayout", "SignedOffset", "PackAxis", "Random")
                if name == "ct_pack":
                    case = Case({"value": x}, p)
                else:
                    case = Case({"packed": P.ct_pack(x, bits=bits, layout=layout, packed_dim=dim),
                                 "count": np.int64(37)}, p)
                specs.append(VectorSpec(f"{bits} bits, {layout}, packed_dim {dim}: 37 codes a row (ragged)", flags,
                                        case))
    if name == "ct_pack":
        specs += [VectorSpec("a code of 8 at 4 bits is rejected", ("InvalidInput", "SignedOffset"),
                             Case({"value": np.int8([[8, 0]])}, {"bits": 4}), "invalid"),
                  VectorSpec("uint8 codes are rejected", ("InvalidInput",), Case({"value": np.zeros((2, 8), np.uint8)}),
                             "invalid"),
                  # added after issue 14's adversary round: bits 1..8 only
                  VectorSpec("bits 9 is rejected", ("InvalidInput",),
                             Case({"value": np.int8([[1, -2, 3, -4]])}, {"bits": 9}), "invalid"),
                  VectorSpec("bits 0 is rejected", ("InvalidInput",),
                             Case({"value": np.int8([[0, 0, 0, 0]])}, {"bits": 0}), "invalid")]
    else:
        specs.append(VectorSpec("a count beyond the words is rejected", ("InvalidInput",),
                                Case({"packed": np.zeros((2, 1), np.int32), "count": np.int64(9)},
                                     {"bits": 4, "packed_dim": 1, "layout": "dense"}),
                                "invalid"))
    return specs


def _op(name, oracle, summary, vectors, build, variants, compare=compare_exact):
    return AREA.exact(f"pack.{name}", oracle, anchor="packing", summary=summary, variants=variants,
                      vectors=vectors, examples=examples(build), compare=compare)


OPERATIONS = [
    _op("gptq_qweight", P.gptq_qweight, "codes [out, in] -> qweight [in*b/32, out] int32", _qweight_vectors,
        gptq_codes_case("codes", 1), (BITS,)),
    _op("gptq_unpack_qweight", P.gptq_unpack_qweight, "qweight [in*b/32, out] -> codes [out, in]",
        _unpack_qweight_vectors, words_case("qweight", True), (BITS,)),
    _op("gptq_qzeros", P.gptq_qzeros, "zero points [out, G] -> qzeros [G, out*b/32] (v1: minus one)",
        lambda: _zeros_vectors("gptq_qzeros"), gptq_codes_case("zeros", 0), (BITS, ZERO_FORMAT)),
    _op("gptq_unpack_qzeros", P.gptq_unpack_qzeros, "qzeros [G, out*b/32] -> zero points [out, G]",
        lambda: _zeros_vectors("gptq_unpack_qzeros"), words_case("qzeros", False), (BITS, ZERO_FORMAT)),
    _op("gptq_repair_v1", P.gptq_repair_v1, "v1 qzeros -> v2 qzeros (one added to every field, no carry)",
        _repair_vectors, words_case("qzeros", False), (BITS,)),
    _op("gptq_g_idx", P.gptq_g_idx, "quantization order perm [in] -> g_idx [in] int32", _g_idx_vectors,
        g_idx_case, (GROUP, STATIC)),
    _op("gptq_dequantize", P.gptq_dequantize, "(qweight, qzeros, scales, g_idx) -> float32 weights [out, in]",
        _gptq_dequantize_vectors, gptq_dequantize_case, (BITS, ZERO_FORMAT), compare=compare_values),
    _op("awq_pack", P.awq_pack, "INT4 codes [out, n] -> words [n, out/8] in AWQ's nibble order", _awq_vectors,
        awq_case, ()),
    _op("awq_unpack", P.awq_unpack, "words [n, out/8] -> INT4 codes [out, n]", _awq_unpack_vectors,
        words_case("words", False), ()),
    _op("awq_dequantize", P.awq_dequantize, "(qweight, qzeros, scales) -> float32 weights [out, in]",
        _awq_dequantize_vectors, awq_dequantize_case, (GROUP,), compare=compare_values),
    _op("ct_pack", P.ct_pack, "signed int8 codes -> int32 words (compressed-tensors pack_to_int32)",
        lambda: _ct_vectors("ct_pack"), ct_case(False), (CT_BITS, PACKED_DIM, LAYOUT)),
    _op("ct_unpack", P.ct_unpack, "int32 words -> signed int8 codes (unpack_from_int32)",
        lambda: _ct_vectors("ct_unpack"), ct_case(True), (CT_BITS, PACKED_DIM, LAYOUT)),
]

"""Implementations of the formats ops: correct alternatives and the bug corpus."""

from __future__ import annotations

from functools import partial

from corpus import table_codec as tc
from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation
from ref.formats import nvfp4


def _all_variants(names):
    """Declare every variant value of each op (the table codec implements them all)."""
    catalog = discover()
    return {n: catalog[n].variant_values for n in names if catalog[n].variants}


def table_codec(bugs=(), formats=tc.FORMAT_NAMES, kinds=("encode", "decode"), variants=None, name=None):
    ops = {}
    for f in formats:
        for kind in ("encode", "encode_stochastic", "decode"):
            if kind in kinds:
                ops[f"formats.{f}.{kind}"] = partial(getattr(tc, kind), fmt=f, bugs=bugs)
    if "pack" in kinds:
        ops["formats.float4_e2m1fn.pack"] = partial(tc.pack, bugs=bugs)
        ops["formats.float4_e2m1fn.unpack"] = partial(tc.unpack, bugs=bugs)
    declared = _all_variants(ops) if variants is None else variants
    return Implementation(name=name or f"table codec {'+'.join(bugs) or 'correct'}", ops=ops, variants=declared)


# name -> (bugs, formats, kinds, variants declared (None: all), the flag that must catch it)
BUGS = {
    "round half away from zero": (("half_away",), ("float8_e4m3fn",), ("encode",), {}, "TiesToEven"),
    "truncation instead of rounding": (("truncate",), ("float4_e2m1fn",), ("encode",), {}, "TiesToEven"),
    "overflow to NaN where the policy saturates": (("overflow_nan",), ("float8_e4m3fn",), ("encode",), {},
                                                   "OverflowBoundary"),
    "subnormals flushed to zero": (("ftz",), ("float8_e5m2",), ("encode",), {}, "Subnormal"),
    "-0 lost": (("lose_neg_zero",), ("bfloat16",), ("encode",), {}, "SignedZero"),
    "FNUZ zero keeps its sign (becomes NaN)": (("fnuz_neg_zero",), ("float8_e4m3fnuz",), ("encode",), {},
                                              "NoNegativeZero"),
    "float32 subnormal inputs treated as zero": (("daz",), ("bfloat16",), ("encode",), {}, "InputSubnormal"),
    "float64 rounded through float32": (("double_round",), ("float6_e3m2fn",), ("encode",), {}, "DoubleRounding"),
    "E8M0 .rp computed as floor": (("e8m0_floor",), ("float8_e8m0fnu",), ("encode",),
                                   {"formats.float8_e8m0fnu.encode": {"rounding": ["toward_positive"]}},
                                   "DirectedRounding"),
    "overflow threshold at max, not max + half ulp": (("sat_at_max",), ("float8_e4m3fn",), ("encode",),
                                                      {"formats.float8_e4m3fn.encode":
                                                       {"overflow": ["nonsaturating"]}}, "OverflowBoundary"),
    "Inf saturates under the nonsaturating policy": (("inf_to_max",), ("float8_e5m2",), ("encode",),
                                                     {"formats.float8_e5m2.encode":
                                                      {"overflow": ["nonsaturating"]}}, "Infinity"),
    "NaN encoded as zero": (("nan_to_zero",), ("float8_e4m3fn",), ("encode",), {}, "NaN"),
    # A nonsaturating kernel (torch's and ml_dtypes' casts) must meet the rounding vectors
    # too: they hold no value past max, so no overflow policy pins them.
    "float64 rounded through float32, nonsaturating": (("double_round",), ("float8_e5m2",), ("encode",),
                                                       {"formats.float8_e5m2.encode": {"overflow": ["nonsaturating"]}},
                                                       "DoubleRounding"),
    "round half away from zero, nonsaturating": (("half_away",), ("float8_e5m2",), ("encode",),
                                                 {"formats.float8_e5m2.encode": {"overflow": ["nonsaturating"]}},
                                                 "TiesToEven"),
    "stochastic carry needs strictly more than one": (("sr_strict",), ("float8_e4m3fn",), ("encode_stochastic",),
                                                      {}, "StochasticRounding"),
    "stochastic bits placed at the bottom": (("sr_lsb",), ("bfloat16",), ("encode_stochastic",), {},
                                             "StochasticRounding"),
    "stochastic bits broadcast from a shorter array": (("no_rbits_check",), ("float8_e5m2",), ("encode_stochastic",),
                                                       {}, "InvalidInput"),
    "FP4 sign written to bit 7": (("dirty_sign",), ("float4_e2m1fn",), ("encode",), {}, "SignedZero"),
    "decoder gives subnormals an implicit one": (("subnormal_as_normal",), ("float8_e4m3fn",), ("decode",), {},
                                                 "Exhaustive"),
    "FNUZ decoded with the OCP bias": (("bias_off_by_one",), ("float8_e4m3fnuz",), ("decode",), {},
                                       "Exhaustive"),
    "NaN code decoded as a number": (("nan_as_number",), ("float8_e4m3fn",), ("decode",), {}, "Exhaustive"),
    "FP4 nibble order swapped": (("swap",), (), ("pack",), {}, "NibbleOrder"),
    "FP4 pack accepts codes above 15": (("no_range_check",), (), ("pack",), {}, "DirtyBits"),
}


def bug(name):
    bugs, formats, kinds, variants, _ = BUGS[name]
    return table_codec(bugs, formats, kinds, variants, name=name)


# Loadable as --impl corpus.formats_impls:HALF_AWAY (the CLI and pytest plugin tests).
HALF_AWAY = bug("round half away from zero")
SWAPPED_NIBBLES = bug("FP4 nibble order swapped")
CORRECT = table_codec(kinds=("encode", "encode_stochastic", "decode", "pack"), name="table codec")


def mx_composed(bugs=(), elems=None, name=None, variants=None):
    """The independent MX codec (frexp scales, ml_dtypes element casts)."""
    from corpus import mx_composed as mc

    from ref.formats.catalog.mx import MX_NAMES

    ops = {}
    for elem, short in MX_NAMES.items():
        if elems and elem not in elems:
            continue
        ops[f"formats.{short}.quantize"] = partial(mc.quantize, elem=elem, bugs=bugs)
        ops[f"formats.{short}.dequantize"] = partial(mc.dequantize, elem=elem, bugs=bugs)
    declared = _all_variants(ops) if variants is None else variants
    return Implementation(name or f"mx composed {'+'.join(bugs) or 'correct'}", ops, variants=declared)


# name -> (bugs, elements, variants declared (None: all), the flag that must catch it)
MX_BUGS = {
    "MX elements rounded half away from zero (microxcaling's 'nearest')": (("half_away",), ("float8_e4m3fn",),
                                                                            None, "TiesToEven"),
    "RCEIL scale by truncating log2(amax/max)": (("rceil_floor",), ("float4_e2m1fn",), None, "ScaleRule"),
    "floor(log2) in float32 near a power of two": (("log2f",), ("float8_e5m2",), None, "Log2Float32"),
    "RCEIL by dividing amax by max instead of multiplying by fp32(1/max)": (("rceil_div",), ("int8",), None,
                                                                            "Log2Float32"),
    "NaN in a block ignored (nanmax)": (("nanmax",), ("float6_e2m3fn",), None, "NanBlock"),
    "elements not saturated after scaling": (("no_saturation",), ("float8_e4m3fn",), None, "ElementSaturation"),
    "an Inf block's scale read from the exponent bits of Inf": (("inf_exponent_bits",), ("float8_e4m3fn",), None,
                                                                "InfBlock"),
    "blocks at scale 2^-127 divided by float32's smallest normal": (("smallest_normal",), ("float6_e3m2fn",), None,
                                                                    "SmallestScale"),
    "scale code 0 read as x1 when scaling the elements": (("unit_at_zero",), ("float8_e5m2",), None,
                                                          "SmallestScale"),
    "float32 dequantize flushing subnormal results to zero": (("float32_ftz",), ("float8_e4m3fn",), None,
                                                              "Subnormal"),
    "FP4 codes with dirty high bits masked (& 0xF) instead of rejected": (("mask_dirty",), ("float4_e2m1fn",),
                                                                          None, "DirtyBits"),
    "FP6 codes with dirty high bits masked (& 0x3F) instead of rejected": (("mask_dirty",), ("float6_e3m2fn",),
                                                                           None, "DirtyBits"),
    "a kernel for [rows, n] only: 1-d and 3-d inputs come back as rows": (("rank2",), ("float8_e4m3fn",), None,
                                                                           "InputRank"),
    "a ragged last block padded with zeros instead of rejected": (("pad_ragged",), ("float6_e2m3fn",), None,
                                                                  "RaggedGroup"),
    "a quantizer that refuses float16 input": (("no_float16",), ("int8",), None, "Float16Input"),
}


def mx_bug(name):
    bugs, elems, variants, _ = MX_BUGS[name]
    return mx_composed(bugs, elems, name=name, variants=variants)


def nvfp4_composed(bugs=(), name=None, variants=None):
    """The independent NVFP4 codec (each recipe's steps with ml_dtypes casts)."""
    from corpus import nvfp4_composed as nc

    recipes = [r.value for r in nvfp4.Recipe]
    ops = {"formats.nvfp4.quantize": partial(nc.quantize, bugs=bugs),
           "formats.nvfp4.quantize_stochastic": partial(nc.quantize_stochastic, bugs=bugs),
           "formats.nvfp4.dequantize": partial(nc.dequantize, bugs=bugs)}
    every = {"recipe": recipes, "tile_2d": [False, True], "rht": [False, True]}
    declared = {"formats.nvfp4.quantize*": every,
                "formats.nvfp4.dequantize": {"recipe": recipes, "order": ["exact", "scale_first"]}} \
        if variants is None else variants
    return Implementation(name or f"nvfp4 composed {'+'.join(bugs) or 'correct'}", ops, variants=declared)


def _one_recipe(recipe):
    return {"formats.nvfp4.quantize": {"recipe": [recipe], "tile_2d": [False, True]}}


# name -> (bugs, variants declared, the flag that must catch it)
NVFP4_BUGS = {
    "TE scale from amax/6 without the E4M3 rounding": (("no_e4m3",), _one_recipe("transformer_engine"),
                                                        "E4M3Rounding"),
    "TE block scale with amax * g / 6 instead of amax * (g * (1/6))": (("no_recip_six",),
                                                                        _one_recipe("transformer_engine"),
                                                                        "RecipeOrder"),
    "torchao 0.13 multiplies by the reciprocal instead of dividing": (("reciprocal",), _one_recipe("torchao_0_13"),
                                                                       "RecipeOrder"),
    "torchao 0.17 claimed, 0.13's division computed": (("old_order",), _one_recipe("torchao_0_17"), "RecipeOrder"),
    "torchao without the 2^-6 block-scale floor": (("no_clamp",), _one_recipe("torchao_0_17"), "ScaleClamp"),
    "TransformerEngine with torchao's 2^-6 floor": (("clamp_2m6",), _one_recipe("transformer_engine"),
                                                    "ScaleClamp"),
    "torchao's p = amax / 2688 used as is for a zero, NaN or Inf tensor amax": (
        ("raw_global",), _one_recipe("torchao_0_17"), "GlobalAmax"),
    "dequantize in torchao's scale-first float32 order where the exact one is declared": (
        ("swapped_order",), {"formats.nvfp4.dequantize": {"order": ["exact"]}}, "DequantOrder"),
    "dequantize rounding the exact product once where torchao's order is declared": (
        ("swapped_order",), {"formats.nvfp4.dequantize": {"order": ["scale_first"]}}, "DequantOrder"),
    "Hadamard transform without TransformerEngine's signs": (
        ("no_signs",), {"formats.nvfp4.quantize": {"rht": [True]}}, "Hadamard"),
    "stochastic rounding reading all 32 random bits instead of the top 8": (("sr_all_bits",), None, "SrBoundary"),
    "stochastic rounding that ignores the random bits (round to nearest)": (("sr_nearest",), None,
                                                                             "StochasticRounding"),
    "vLLM claimed, TransformerEngine's order computed": ((), {"formats.nvfp4.quantize": {"recipe": ["vllm"]}},
                                                         "RecipeOrder"),
    "E2M1 codes with dirty high bits masked (& 0xF) instead of rejected": (("mask_dirty",), None, "DirtyBits"),
    "a kernel for [rows, n] only: 1-d and 3-d inputs come back as rows": (("rank2",), None, "InputRank"),
    "a ragged last block padded with zeros instead of rejected": (("pad_ragged",), None, "RaggedGroup"),
    "a quantizer that refuses float16 input": (("no_float16",), None, "Float16Input"),
}


def nvfp4_bug(name):
    bugs, variants, _ = NVFP4_BUGS[name]
    if name.startswith("vLLM claimed"):
        from corpus import nvfp4_composed as nc

        def te_as_vllm(x, recipe, tile_2d, rht):
            return nc.quantize(x, recipe="transformer_engine", tile_2d=tile_2d, rht=rht)

        return Implementation(name, {"formats.nvfp4.quantize": te_as_vllm}, variants=variants)
    return nvfp4_composed(bugs, name=name, variants=variants)

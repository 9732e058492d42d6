"""NVFP4 (spec/formats.md#nvfp4): E2M1 elements in blocks of 16, an E4M3 block scale and
an FP32 per-tensor scale, in each engine's float32 order.

  formats.nvfp4.quantize             x [..., R, 16k] -> (E2M1 codes, E4M3 scales [..., R, k], global scale)
  formats.nvfp4.quantize_stochastic  (x, rbits uint32) -> the same, elements rounded by the given bits
  formats.nvfp4.dequantize           (codes, scales, global scale) -> values (exact, or torchao's order)

All exact; the oracles are `ref.formats.nvfp4.quantize`, `quantize_stochastic` and
`dequantize` themselves. Vectors: catalog.nvfp4_vectors.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.formats import nvfp4
from ref.formats.catalog.case_classes import for_blocks, ordered
from ref.formats.catalog.mx import compare_at_output_precision
from ref.formats.catalog.nvfp4_vectors import dequantize_vectors, quantize_vectors, stochastic_vectors
from ref.formats.minifloat import get_format
from ref.testing.catalog_types import Area, Flag, Variant
from ref.testing.compare import Comparison, compare_block_codes, compare_values
from ref.testing.params import variant_params
from ref.testing.strategies import block_shapes, outlier_arrays, realistic_arrays
from ref.testing.vector_files import Case

__all__ = ["FLAGS", "OPERATIONS", "compare_quantized"]

FORMATS = Area("formats", spec="spec/formats.md")

RECIPE = Variant("recipe", nvfp4.Recipe, "transformer_engine",
                 "float32 operation order of the scales: TransformerEngine, vLLM/FlashInfer, torchao 0.13-0.16 "
                 "(x / f32(p * sb)), torchao 0.17 on (x * f32(f32(1/p) / sb))")
QUANTIZE_VARIANTS = (
    RECIPE,
    Variant("tile_2d", (False, True), False, "one scale per 16 elements, or per 16x16 tile (TE weights)"),
    Variant("rht", (False, True), False,
            "random Hadamard transform of each 16 elements before scaling (TE's recipe for wgrad inputs)"),
)
ORDER = Variant("order", nvfp4.DequantOrder, "exact",
                "exact (float64; a float32 output is the exact value rounded once), or torchao's float32 "
                "order f32(e * f32(d * sb)) (scale_first)")

# Flags only NVFP4 vectors carry (ZeroBlock and NanBlock: catalog.mx; RaggedGroup:
# catalog.intgroup; element flags: the element catalog).
FLAGS = {
    "RecipeOrder": Flag("another recipe's float32 operation order (or a fused/reassociated one)",
                        "block scales or codes differ from the declared recipe where intermediates meet a tie"),
    "E4M3Rounding": Flag("the block scale left in float32 instead of rounded to E4M3",
                         "elements are scaled by a value the stored scale cannot reproduce"),
    "ScaleClamp": Flag("torchao's 2^-6 floor on the block scale missing, or applied to a recipe without it",
                       "small-magnitude blocks get another scale (and zero blocks another code)"),
    "GlobalAmax": Flag("a tensor amax of 0, NaN or Inf used as is for the NVFP4 global scale",
                       "a division by zero or a NaN spreads to every block of the tensor"),
    "DequantOrder": Flag("a float32 dequantization in another order than declared (the scales multiplied "
                         "first, or the exact product rounded once)",
                         "values one float32 ulp off where an element of 1.5, 3 or 6 meets an inexact scale product"),
    "GlobalScale": Flag("a zero, negative, infinite or NaN NVFP4 global scale accepted",
                        "dequantized values silently become Inf or NaN, or change sign"),
    "Hadamard": Flag("the random Hadamard transform with another sign vector, order or scale, or the global "
                     "amax taken before it", "every code of the transformed tensor is off"),
}


def _quantize_examples(stochastic: bool):
    def strategy(supported):
        @st.composite
        def case(draw):
            rows = draw(st.sampled_from([16, 32]), label="rows")
            cols = 16 * draw(st.integers(1, 4), label="blocks")
            shape, f32 = st.just((rows, cols)), st.just(np.dtype(np.float32))
            x = draw(st.one_of(realistic_arrays(shape=shape, dtype=f32), outlier_arrays(shape=shape, dtype=f32)),
                     label="x")
            params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
            inputs = {"x": x}
            if stochastic:
                inputs["rbits"] = draw(hnp.arrays(np.uint32, x.shape), label="rbits")
            return Case(inputs, params)

        return case()

    return strategy


def _dequantize_examples(supported):
    @st.composite
    def case(draw):
        shape = draw(block_shapes(block=16, max_blocks=3), label="shape")
        c = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, 15)), label="codes")
        sc = draw(hnp.arrays(np.uint8, (*shape[:-1], shape[-1] // 16)), label="scales")
        gs = draw(st.floats(2.0**-20, 2.0**20, width=32), label="global_scale")
        return Case({"codes": c, "scales": sc, "global_scale": np.float32(gs)},
                    draw(variant_params(supported, only=("recipe", "order")), label="params"))

    return case()


def compare_quantized(expected, actual) -> Comparison:
    """(codes, scales, global scale): the global scale bit for bit, then the codes and
    E4M3 scales block by block (a NaN-scale block's codes are free)."""
    if not isinstance(actual, tuple) or len(actual) != 3:
        return Comparison(False, 0, 0, np.inf, "", problem="expected (codes, scales, global_scale)")
    cmp = compare_values(np.asarray(expected[2], dtype=np.float32), np.asarray(actual[2]))
    if not cmp.ok:
        return replace(cmp, part="global_scale")
    return compare_block_codes(expected[:2], tuple(actual[:2]), elem_fmt="float4_e2m1fn",
                               scale_fmt="float8_e4m3fn", block=16)


def _quantize_flags(case: Case) -> tuple[str, ...]:
    """Block classes of x, and GlobalAmax when the tensor's amax is 0, NaN or Inf."""
    x = np.asarray(case.inputs["x"], dtype=np.float64)
    amax = float(np.max(np.abs(x))) if x.size else 0.0
    blocks = for_blocks(16, elem="float4_e2m1fn")(case)
    return ordered((*(("GlobalAmax",) * (not 0 < amax < np.inf)), *(b for b in blocks if b != "Random")))


_dequantize_blocks = for_blocks(16, codes="float4_e2m1fn", scale_nan=get_format("float8_e4m3fn").is_nan_code)


def _dequantize_flags(case: Case) -> tuple[str, ...]:
    """Code classes, NanBlock for a NaN block scale, GlobalScale for a global scale that
    is not a positive finite number."""
    gs = float(np.asarray(case.inputs["global_scale"], dtype=np.float64))
    return ordered((*(("GlobalScale",) * (not 0 < gs < np.inf)), *_dequantize_blocks(case)))


def _array_format(name, arr):
    return {"codes": "float4_e2m1fn", "scales": "float8_e4m3fn"}.get(name)


_QUANTIZED = dict(variants=QUANTIZE_VARIANTS, compare=compare_quantized, outputs=("codes", "scales", "global_scale"),
                  array_format=_array_format, case_flags=_quantize_flags)

OPERATIONS = [
    FORMATS.exact("nvfp4.quantize", nvfp4.quantize, anchor="nvfp4",
                  summary="float32 or float16 [..., R, 16k] -> (E2M1 codes, E4M3 scales [..., R, k], FP32 "
                          "global scale)",
                  vectors=quantize_vectors, examples=_quantize_examples(False), **_QUANTIZED),
    FORMATS.exact("nvfp4.quantize_stochastic", nvfp4.quantize_stochastic, anchor="nvfp4",
                  summary="(x, rbits uint32) -> quantize's outputs, E2M1 elements rounded stochastically by the "
                          "top 8 bits of rbits (PTX cvt.rs.e2m1x4)",
                  vectors=stochastic_vectors, examples=_quantize_examples(True), **_QUANTIZED),
    FORMATS.exact("nvfp4.dequantize", nvfp4.dequantize, anchor="nvfp4",
                  summary="(E2M1 codes, E4M3 scales, global scale) -> values, exact at the output's precision",
                  variants=(RECIPE, ORDER), vectors=dequantize_vectors, examples=_dequantize_examples,
                  compare=compare_at_output_precision, array_format=_array_format, case_flags=_dequantize_flags),
]

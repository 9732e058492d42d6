"""quant.w4a16_gemm, quant.fp8_gemm, quant.mxfp4_gemm, quant.nvfp4_gemm: quantized
GEMMs, judged by the bounded rule against ref.quant.gemm_emulate.

  w4a16_gemm  (x [M, K], codes [N, K], scales [N, G], zeros [N, G], g_idx [K]?) -> y [M, N]
  fp8_gemm    (x_codes [M, K], x_scales [M]|[1], w_codes [N, K], w_scales [N]|[1]) -> y
  mxfp4_gemm  (a_codes [M, K], a_scales [M, K/32], b_codes [N, K], b_scales [N, K/32]) -> y
  nvfp4_gemm  (a_codes, a_scales [M, K/16], a_global, b_codes, b_scales, b_global) -> y

Inputs are built from integers scaled by powers of two (byte-stable across NumPy
versions), exact at bfloat16 and float16, and keep every output inside float16's
range, so kernels at every precision read the same numbers. The exceptions, at the
end of the list, are built to be inexact: a float32 activation and a weight product
off the bfloat16 grid (rounding by truncation), a scale that is a float16 subnormal.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.quant import gemm, gemm_emulate
from ref.quant.catalog.common import AREA
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["BITS", "FLAGS", "GEMM_BOUND", "OPERATIONS", "ZEROS_KIND"]

GEMM_BOUND = Bound(k=2.0, floor=2.0, scale="relative")
BITS = Variant("bits", gemm.BITS, 4, "bits per weight code (codes in [0, 2^bits - 1], one per element)")
ZEROS_KIND = Variant("zeros_kind", gemm.ZeroKind, "integer",
                     "zero points as integer codes (GPTQ, AWQ, Marlin) or floats in the code domain (HQQ)")

FLAGS = {
    "GemmAccumulation": Flag("a quantized GEMM accumulating its products in bfloat16 or float16",
                             "the sum stalls once it is 2^8 (bfloat16) or 2^11 (float16) times its terms: long "
                             "reductions (K in the thousands) lose most of their mass"),
    "GemmGroupIndex": Flag("the scale and zero group of input channel k taken off by one (k + 1) // g, "
                           "interleaved (k % G), or k // g where g_idx names it (act-order)",
                           "channels dequantized with another group's scale and zero"),
    "GemmZeroPoint": Flag("the zero point subtracted after scaling (q * s - z), dropped, or rounded to an integer "
                      "where it is a float (HQQ)", "every weight of a group shifted by a constant"),
    "GemmCodeBits": Flag("codes read at 4 bits whatever the declared width (masked to 4 bits, zero 8 assumed)",
                     "2-, 3- and 8-bit layers decode to other numbers"),
    "GemmActivationScale": Flag("the per-token activation scale applied per output column (x_scales[n]) or once "
                            "per tensor", "rows scaled by another token's scale"),
    "GemmWeightScale": Flag("the per-channel weight scale applied per row (w_scales[m]) or the first one for all",
                        "output columns scaled by another channel's scale"),
    "GemmBlockScale": Flag("an MX or NVFP4 block scale read from the wrong block (a 16-element block index for MX, "
                       "32 for NVFP4, or the next block)", "elements multiplied by a neighbouring block's scale"),
    "GemmGlobalScale": Flag("NVFP4's per-tensor decode scale left out, inverted, or applied to one operand only",
                        "every output off by the product of the global scales"),
    "GemmScaleDecode": Flag("a block scale decoded or applied wrong: each operand scaled apart in float32 (one "
                            "overflows though the product of both scales is in range), E8M0 code 0 read as 0 "
                            "(float32 bits s << 23) or a scale below float32's normal range flushed to zero, an "
                            "E4M3 block scale read unsigned (UE4M3)",
                            "outputs Inf, 0 or of the wrong sign where the exact product is an ordinary number"),
    "GemmScalePrecision": Flag("W4A16 scales (or the whole dequantization) held in float16 while the output is "
                               "declared bfloat16", "small scales lose bits as float16 subnormals"),
    "GemmRounding": Flag("activations or dequantized weights converted to bfloat16 by truncation (round toward "
                         "zero) instead of to nearest even, or partial sums (split-K slices) rounded to bfloat16",
                         "each converted value up to one bfloat16 unit off: hidden in same-sign sums, visible "
                         "where the output cancels"),
}


class _Vectors(list):
    def add(self, comment: str, flags, inputs, result: str = "valid", **params) -> None:
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def _ints(rng, lo: int, hi: int, shape, shift: int) -> np.ndarray:
    """Integers in [lo, hi] times 2^-shift, float32: exact at bfloat16 and float16 while
    |integer| < 256."""
    return (rng.integers(lo, hi + 1, shape) * 2.0**-shift).astype(np.float32)


# ---------------------------------------------------------------------------- W4A16

def w4a16_inputs(rng, m: int, n: int, k: int, groups: int, *, bits: int = 4, zeros_kind: str = "integer",
                 positive: bool = False) -> dict[str, np.ndarray]:
    """x [m, k] in +-127/64 (or 0..127/64), codes [n, k], scales [n, groups] in
    [1, 127] * 2^-(bits + 6) (one more halving past K = 1024: outputs stay in float16's
    range), zeros [n, groups] (integers, or sixteenths)."""
    top = 2**bits - 1
    x = _ints(rng, 0 if positive else -127, 127, (m, k), 6)
    codes = rng.integers(top // 2 + 1 if positive else 0, top + 1, (n, k)).astype(np.uint8)
    scales = _ints(rng, 1, 127, (n, groups), bits + 6 + (k > 1024))
    if zeros_kind == "integer":
        zeros = rng.integers(0, (top + 1) // 2 if positive else top + 1, (n, groups)).astype(np.uint8)
    else:
        zeros = _ints(rng, 0, 8 * (top + 1) if positive else 16 * top, (n, groups), 4)
    return {"x": x, "codes": codes, "scales": scales, "zeros": zeros}


def _w4a16_vectors() -> _Vectors:
    rng = np.random.default_rng(seed_for("quant.w4a16_gemm"))
    v = _Vectors()
    add = v.add
    add("4 x 6 from K = 256 in groups of 128, integer zeros", ["GemmZeroPoint", "GemmGroupIndex"],
        w4a16_inputs(rng, 4, 6, 256, 2))
    add("groups of 32 with one scale a power of two per group (2^-6 .. 2^-9): a group index off by one or "
        "interleaved reads another group's", ["GemmGroupIndex"],
        {**w4a16_inputs(rng, 3, 4, 128, 4), "scales": np.tile(2.0 ** -np.arange(6, 10, dtype=np.float32), (4, 1))})
    add("groups of 8 along K = 64, zeros spanning 0..15", ["GemmGroupIndex", "GemmZeroPoint"],
        w4a16_inputs(rng, 2, 5, 64, 8))
    add("per channel (one group, g = K = 96)", ["GemmGroupIndex"], w4a16_inputs(rng, 3, 3, 96, 1))
    add("groups of 1: a scale and zero per weight", ["GemmGroupIndex", "GemmZeroPoint"],
        w4a16_inputs(rng, 2, 3, 16, 16))
    add("zeros 15 against codes 0..15 (every weight <= 0): a zero subtracted after scaling stays visible",
        ["GemmZeroPoint"], {**w4a16_inputs(rng, 2, 4, 64, 2), "zeros": np.full((4, 2), 15, np.uint8)})
    for zk in ("integer", "float"):
        add(f"zeros_kind={zk}: sixteenths as float zeros, codes as integer ones", ["GemmZeroPoint"],
            w4a16_inputs(rng, 3, 4, 128, 4, zeros_kind=zk), zeros_kind=zk)
    for bits in (2, 3, 8):
        add(f"{bits}-bit codes (0..{2**bits - 1}) and zeros", ["GemmCodeBits", "GemmZeroPoint"],
            w4a16_inputs(rng, 3, 4, 128, 2, bits=bits), bits=bits)
    add("8-bit codes with float zeros", ["GemmCodeBits", "GemmZeroPoint"],
        w4a16_inputs(rng, 2, 3, 64, 2, bits=8, zeros_kind="float"), bits=8, zeros_kind="float")
    for k, comment in ((1024, "K = 1024, random signs"), (4096, "K = 4096, random signs")):
        add(f"{comment}: a bfloat16 accumulator's rounding error grows past the bound", ["GemmAccumulation"],
            w4a16_inputs(rng, 2, 3, k, k // 128))
    add("K = 4096, every product positive: a bfloat16 or float16 sum stalls near 2^8 of its terms",
        ["GemmAccumulation"], w4a16_inputs(rng, 2, 3, 4096, 32, positive=True))
    act = w4a16_inputs(rng, 3, 4, 128, 4)
    act["scales"] = np.tile(2.0 ** -np.arange(6, 10, dtype=np.float32), (4, 1))
    act["g_idx"] = (np.argsort(rng.permutation(128)) // 32).astype(np.int32)
    add("act-order g_idx (GPTQ desc_act: group of channel k = its rank in the visiting order // 32), a power of "
        "two per group: a kernel reading k // g instead uses other groups' scales", ["GemmGroupIndex"], act)
    add("g_idx = k // g, as a static-groups checkpoint stores it: the default grouping", ["GemmGroupIndex"],
        {**w4a16_inputs(rng, 2, 3, 64, 2), "g_idx": (np.arange(64) // 32).astype(np.int64)})
    odd = w4a16_inputs(rng, 2, 3, 96, 5)
    add("g_idx with 5 groups over K = 96 (G need not divide K when g_idx names each channel's group)",
        ["GemmGroupIndex"], {**odd, "g_idx": rng.integers(0, 5, 96).astype(np.int32)})
    wide = w4a16_inputs(rng, 2, 3, 64, 2)
    add("x as a float16 array, codes int32 (any integer dtype)", ["Random"],
        {**wide, "x": wide["x"].astype(np.float16), "codes": wide["codes"].astype(np.int32)})
    f64 = w4a16_inputs(rng, 2, 2, 32, 1)
    add("x as float64", ["Random"], {**f64, "x": f64["x"].astype(np.float64)})
    nan = w4a16_inputs(rng, 3, 4, 64, 2)
    nan["x"][1, 5] = np.nan
    nan["x"][2, 7] = np.inf
    add("NaN in row 1 of x: row 1 NaN; +Inf in row 2: +-Inf (or NaN where a weight is 0)", ["NaN"], nan)
    add("no rows (M = 0)", ["EmptyInput"], w4a16_inputs(rng, 0, 4, 64, 2))
    add("no output channels (N = 0)", ["EmptyInput"], w4a16_inputs(rng, 2, 0, 64, 2))
    add("M = N = 1, K = 1", ["EmptyInput"], w4a16_inputs(rng, 1, 1, 1, 1))
    add("random", ["Random"], w4a16_inputs(rng, 5, 7, 192, 3))
    bad = w4a16_inputs(rng, 2, 3, 64, 2)
    add("a code 16 at 4 bits", ["InvalidInput", "GemmCodeBits"],
        {**bad, "codes": np.full((3, 64), 16, np.uint8)}, result="invalid", bits=4)
    add("bits = 5", ["InvalidInput", "GemmCodeBits"], bad, result="invalid", bits=5)
    add("3 groups do not divide K = 64", ["InvalidInput", "GemmGroupIndex"],
        {**bad, "scales": np.ones((3, 3), np.float32), "zeros": np.zeros((3, 3), np.uint8)}, result="invalid")
    add("zeros of another shape than the scales", ["InvalidInput"],
        {**bad, "zeros": np.zeros((3, 4), np.uint8)}, result="invalid")
    add("x's K differs from the codes'", ["InvalidInput"], {**bad, "x": bad["x"][:, :32]}, result="invalid")
    add("float codes", ["InvalidInput"], {**bad, "codes": bad["codes"].astype(np.float32)}, result="invalid")
    add("float zeros where zeros_kind=integer", ["InvalidInput", "GemmZeroPoint"],
        {**bad, "zeros": bad["zeros"].astype(np.float32)}, result="invalid", zeros_kind="integer")
    add("a zero point 16 at 4 bits", ["InvalidInput", "GemmZeroPoint"],
        {**bad, "zeros": np.full((3, 2), 16, np.uint8)}, result="invalid", bits=4)
    add("x of rank 3", ["InvalidInput"], {**bad, "x": bad["x"][None]}, result="invalid")
    add("g_idx naming group 2 of 2", ["InvalidInput", "GemmGroupIndex"],
        {**bad, "g_idx": np.full(64, 2, np.int32)}, result="invalid")
    add("g_idx of length K - 1", ["InvalidInput", "GemmGroupIndex"],
        {**bad, "g_idx": np.zeros(63, np.int32)}, result="invalid")
    add("float g_idx", ["InvalidInput", "GemmGroupIndex"], {**bad, "g_idx": np.zeros(64, np.float32)},
        result="invalid")
    # Appended by issue 14's adversary review (gemm); ids above do not move.
    one = {"x": np.zeros((1, 32), np.float32), "codes": np.ones((1, 32), np.uint8),
           "zeros": np.zeros((1, 1), np.uint8), "scales": np.array([[1.375 * 2.0**-23]], np.float32)}
    one["x"][0] = 32.0
    add("a scale 1.375 * 2^-23 (exact in bfloat16, a float16 subnormal that rounds 9% up), 32 channels x = 32: "
        "y = 1.375 * 2^-13; a kernel declared bfloat16 that holds its scales in float16 is 9% off",
        ["GemmScalePrecision"], one)
    add("a negative g_idx (-1 is not a group; a kernel indexing Python-style reads the last group)",
        ["InvalidInput", "GemmGroupIndex"],
        {"x": np.ones((1, 2), np.float32), "codes": np.ones((1, 2), np.uint8), "scales": np.array([[1, 2]], np.float32),
         "zeros": np.zeros((1, 2), np.uint8), "g_idx": np.array([0, -1], np.int32)}, result="invalid")
    # Cancellation: +257 in the first quarter of K, -256 in the last; y = 1 exactly. A kernel that rounds its
    # split-K partial sums (2 or 4 slices) to bfloat16 gets 256 - 256 = 0.
    xs = np.zeros((1, 64), np.float32)
    xs[0, :16], xs[0, 0], xs[0, 48:] = 16.0, 17.0, 16.0
    codes = np.full((1, 64), 8, np.uint8)
    codes[0, :16], codes[0, 48:] = 9, 7  # weights +1, -1 (zero 8, scale 1)
    add("cancellation: x . w = 257 over the first quarter of K = 64, -256 over the last, y = 1; bfloat16 "
        "split-K partials (2 or 4 slices) give 256 - 256 = 0", ["GemmRounding", "GemmAccumulation"],
        {"x": xs, "codes": codes, "scales": np.ones((1, 2), np.float32), "zeros": np.full((1, 2), 8, np.uint8)})
    # Truncation (round toward zero) against round-to-nearest-even, visible where the output cancels.
    xt = np.zeros((1, 32), np.float32)
    xt[0, 0], xt[0, 1] = 1 + 2.0**-7 - 2.0**-14, -(1 + 2.0**-7)  # x[0] is float32, not exact in bfloat16
    add("float32 x[0] = 1 + 2^-7 - 2^-14 (bfloat16 nearest: 1 + 2^-7; truncated: 1) against x[1] = -(1 + 2^-7), "
        "weights 1: y = -2^-14; activations truncated to bfloat16 give -2^-7", ["GemmRounding"],
        {"x": xt, "codes": np.ones((1, 32), np.uint8), "scales": np.ones((1, 1), np.float32),
         "zeros": np.zeros((1, 1), np.uint8)})
    xw = np.zeros((1, 64), np.float32)
    xw[0, 0], xw[0, 32] = 1.0, -21.75
    cw = np.zeros((1, 64), np.uint8)
    cw[0, 0], cw[0, 32] = 15, 1
    add("weight (15 - 4) * 253/128 = 21.7421875 (bfloat16 nearest in either form, (q - z) * s or q * s - z * s: "
        "21.75; truncated: 21.625) against x = -21.75 on a weight 1: y = -2^-7; weights truncated to bfloat16 "
        "give -0.125", ["GemmRounding"],
        {"x": xw, "codes": cw, "scales": np.array([[253 / 128, 1.0]], np.float32),
         "zeros": np.array([[4, 0]], np.uint8)})
    return v


@st.composite
def w4a16_cases(draw, supported):
    """Random W4A16 calls: M 0-4, N 0-6, K = G * g with 1-4 groups of 1-128 channels,
    consecutive or (half the time) in an act-order g_idx."""
    params = draw(variant_params(supported))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    groups, g = draw(st.integers(1, 4), label="groups"), draw(st.sampled_from([1, 8, 32, 128]), label="g")
    m, n = draw(st.integers(0, 4), label="m"), draw(st.integers(0, 6), label="n")
    inputs = w4a16_inputs(rng, m, n, groups * g, groups, bits=params.get("bits", 4),
                          zeros_kind=params.get("zeros_kind", "integer"))
    if draw(st.booleans(), label="act-order g_idx"):
        inputs["g_idx"] = (np.argsort(rng.permutation(groups * g)) // g).astype(np.int32)
    return Case(inputs, params)


def _w4a16_flags(case) -> tuple[str, ...]:
    return ("GemmAccumulation",) if case.inputs["codes"].shape[1] >= 1024 else ("Random",)


OPERATIONS = [
    AREA.bounded(
        "w4a16_gemm", gemm.w4a16_gemm, anchor="w4a16-gemm",
        summary="weight-only INT2/3/4/8 GEMM with group scales and zeros: x @ ((q - z) * s)^T",
        variants=(BITS, ZEROS_KIND), vectors=_w4a16_vectors, examples=w4a16_cases,
        emulate=gemm_emulate.w4a16_gemm, bounds=GEMM_BOUND, case_flags=_w4a16_flags),
]

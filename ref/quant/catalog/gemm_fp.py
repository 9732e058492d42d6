"""quant.fp8_gemm, quant.mxfp4_gemm, quant.nvfp4_gemm: GEMMs whose operands are both
float codes with scales (W8A8 FP8 with per-token and per-channel scales, MXFP4 and
NVFP4 block-scaled), judged by the bounded rule against ref.quant.gemm_emulate.

Codes are drawn as fields (sign, exponent, mantissa) from a seeded generator, scales
as integers times powers of two: byte-stable inputs whose outputs stay inside
float16's range.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.quant import gemm, gemm_emulate
from ref.quant.catalog.common import AREA
from ref.quant.catalog.gemm import GEMM_BOUND
from ref.testing.catalog_types import seed_for
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "block_inputs", "fp8_inputs"]

FLAGS: dict = {}  # the flags are gemm's (ref.quant.catalog.gemm)


class _Vectors(list):
    def add(self, comment: str, flags, inputs, result: str = "valid", **params) -> None:
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def _e4m3(rng, shape, lo: int, hi: int, positive: bool = False) -> np.ndarray:
    """E4M3 codes with exponent fields in [lo, hi] (never the NaN codes 0x7F, 0xFF)."""
    sign = np.zeros(shape, np.int64) if positive else rng.integers(0, 2, shape)
    return (sign << 7 | rng.integers(lo, hi + 1, shape) << 3 | rng.integers(0, 8, shape)).astype(np.uint8)


def _scales(rng, shape, shift: int) -> np.ndarray:
    return (rng.integers(1, 128, shape) * 2.0**-shift).astype(np.float32)


def fp8_inputs(rng, m: int, n: int, k: int, *, per_token: bool = True, per_channel: bool = True,
               positive: bool = False) -> dict[str, np.ndarray]:
    """E4M3 codes of magnitude 2^-3 .. 15 (exponent fields 4 to 10), scales in
    [1, 127] * 2^-(12 + log2 K / 2)."""
    shift = 12 + int(np.log2(max(k, 1))) // 2
    return {"x_codes": _e4m3(rng, (m, k), 4, 10, positive), "x_scales": _scales(rng, (m if per_token else 1,), shift),
            "w_codes": _e4m3(rng, (n, k), 4, 10, positive), "w_scales": _scales(rng, (n if per_channel else 1,), 4)}


def block_inputs(rng, m: int, n: int, k: int, *, block: int, positive: bool = False) -> dict[str, np.ndarray]:
    """E2M1 codes (0..15, or 0..7 when positive) and block scales: E8M0 2^-4 .. 2^3
    (block 32, MX) or E4M3 0.25 .. 7.5 (block 16, NVFP4, with globals 2^-3 and 3 * 2^-5)."""
    top = 7 if positive else 15
    ka = k // block
    out = {"a_codes": rng.integers(0, top + 1, (m, k)).astype(np.uint8),
           "b_codes": rng.integers(0, top + 1, (n, k)).astype(np.uint8)}
    if block == gemm.MX_BLOCK:
        shift = 2 if k <= 1024 else 5
        out["a_scales"] = rng.integers(123 - shift, 131 - shift, (m, ka)).astype(np.uint8)
        out["b_scales"] = rng.integers(123 - shift, 131 - shift, (n, ka)).astype(np.uint8)
        return out
    out["a_scales"] = _e4m3(rng, (m, ka), 5, 9, positive=True)
    out["b_scales"] = _e4m3(rng, (n, ka), 5, 9, positive=True)
    return {"a_codes": out["a_codes"], "a_scales": out["a_scales"], "a_global": np.float32(2.0**-3),
            "b_codes": out["b_codes"], "b_scales": out["b_scales"], "b_global": np.float32(3 * 2.0**-5)}


# ---------------------------------------------------------------------------- fp8_gemm

def _fp8_vectors() -> _Vectors:
    rng = np.random.default_rng(seed_for("quant.fp8_gemm"))
    v = _Vectors()
    add = v.add
    add("per-token and per-channel scales, M = N = 5 (a scale applied along the wrong axis still runs)",
        ["GemmActivationScale", "GemmWeightScale"], fp8_inputs(rng, 5, 5, 64))
    add("per-token and per-channel scales, M = 3, N = 6", ["GemmActivationScale", "GemmWeightScale"],
        fp8_inputs(rng, 3, 6, 96))
    add("per-tensor activation scale [1], per-channel weight scales", ["GemmWeightScale"],
        fp8_inputs(rng, 4, 4, 32, per_token=False))
    add("per-token activation scales, per-tensor weight scale [1]", ["GemmActivationScale"],
        fp8_inputs(rng, 4, 4, 32, per_channel=False))
    add("both per tensor", ["Random"], fp8_inputs(rng, 2, 3, 48, per_token=False, per_channel=False))
    add("K = 4096, random signs", ["GemmAccumulation"], fp8_inputs(rng, 2, 3, 4096))
    add("K = 4096, every product positive: a narrow accumulator stalls", ["GemmAccumulation"],
        fp8_inputs(rng, 2, 3, 4096, positive=True))
    nan = fp8_inputs(rng, 3, 4, 32)
    nan["x_codes"][1, 3] = 0x7F
    nan["w_codes"][2, 9] = 0xFF
    add("the NaN codes 0x7F (x row 1) and 0xFF (w row 2): that row and that column are NaN", ["NaN"], nan)
    sub = fp8_inputs(rng, 2, 3, 32)
    sub["x_codes"][:, :8] = np.arange(1, 9, dtype=np.uint8)  # subnormals 2^-9 .. 2^-6 and the smallest normal
    add("subnormal E4M3 codes and the largest normal 448 (0x7E)", ["Random"],
        {**sub, "w_codes": np.where(np.arange(32) == 0, 0x7E, sub["w_codes"]).astype(np.uint8)})
    f = fp8_inputs(rng, 3, 2, 32)
    add("x_scales as float16, w_scales as float64 (any float dtype)", ["GemmActivationScale", "GemmWeightScale"],
        {**f, "x_scales": f["x_scales"].astype(np.float16), "w_scales": f["w_scales"].astype(np.float64)})
    add("no rows (M = 0)", ["EmptyInput"], fp8_inputs(rng, 0, 3, 32))
    add("no output channels (N = 0)", ["EmptyInput"], fp8_inputs(rng, 2, 0, 32))
    add("random", ["Random"], fp8_inputs(rng, 6, 7, 160))
    bad = fp8_inputs(rng, 3, 4, 32)
    add("x_scales of length M + 1", ["InvalidInput", "GemmActivationScale"],
        {**bad, "x_scales": np.ones(4, np.float32)}, result="invalid")
    add("w_scales [N, 1] instead of [N]", ["InvalidInput", "GemmWeightScale"],
        {**bad, "w_scales": np.ones((4, 1), np.float32)}, result="invalid")
    add("int8 codes", ["InvalidInput"], {**bad, "x_codes": bad["x_codes"].view(np.int8)}, result="invalid")
    add("K differs between x and w", ["InvalidInput"], {**bad, "w_codes": bad["w_codes"][:, :16]}, result="invalid")
    add("integer scales", ["InvalidInput"], {**bad, "x_scales": np.ones(3, np.int32)}, result="invalid")
    # Appended by issue 14's adversary review (gemm); ids above do not move.
    big = np.full((1, 8), 0x7E, np.uint8)
    add("x, w all 448 over K = 8, scales 2^-10: y = 8 * 448^2 * 2^-20 = 1.53125, but the accumulator (1605632) "
        "is past float16's range: a float16 accumulator (or float16 split-K partials) overflows to Inf",
        ["GemmAccumulation"], {"x_codes": big, "x_scales": np.array([2.0**-10], np.float32), "w_codes": big.copy(),
                               "w_scales": np.array([2.0**-10], np.float32)})
    xc, wc = np.zeros((1, 32), np.uint8), np.zeros((1, 32), np.uint8)
    xc[0, :2], wc[0, :2] = (0x58, 0x38), (0x58, 0x38)  # 16 * 16 + 1 * 1 = 257 in the first quarter of K
    xc[0, 24], wc[0, 24] = 0x58, 0xD8  # 16 * -16 = -256 in the last
    add("cancellation: 257 over the first quarter of K = 32, -256 over the last, y = 1; bfloat16 split-K "
        "partials give 256 - 256 = 0", ["GemmRounding", "GemmAccumulation"],
        {"x_codes": xc, "x_scales": np.ones(1, np.float32), "w_codes": wc, "w_scales": np.ones(1, np.float32)})
    return v


@st.composite
def fp8_cases(draw, supported):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    m, n, k = draw(st.integers(0, 5), label="m"), draw(st.integers(0, 6), label="n"), draw(
        st.sampled_from([1, 16, 64, 256]), label="k")
    return Case(fp8_inputs(rng, m, n, k, per_token=draw(st.booleans(), label="per_token"),
                           per_channel=draw(st.booleans(), label="per_channel")), {})


# ---------------------------------------------------------------------------- block-scaled

def _block_vectors(name: str, block: int) -> _Vectors:
    rng = np.random.default_rng(seed_for(name))
    v = _Vectors()
    add = v.add
    nv = block == gemm.NV_BLOCK
    scale_flags = ["GemmBlockScale", "GemmGlobalScale"] if nv else ["GemmBlockScale"]
    add(f"4 x 5 over K = {4 * block}: every block its own scale", scale_flags, block_inputs(rng, 4, 5, 4 * block,
                                                                                              block=block))
    wide = block_inputs(rng, 2, 3, 8 * block, block=block)
    steps = np.arange(8) % 2 * (8 if nv else 3)  # alternate scales a factor 2^3 (MX) or 8 E4M3 codes (NVFP4) apart
    wide["a_scales"] = (wide["a_scales"] + steps).astype(np.uint8)
    add("block scales alternating along K: another block's scale changes every output", scale_flags, wide)
    if nv:
        g = block_inputs(rng, 3, 3, 64, block=block)
        add("globals 2^-3 and 3 * 2^-5 (decode scales): left out, every output is 1/(3 * 2^-8) times too large",
            ["GemmGlobalScale"], g)
        add("globals 448 and 2^-20", ["GemmGlobalScale"], {**g, "a_global": np.float32(448.0),
                                                           "b_global": np.float32(2.0**-20)})
    add("K = 4096, random signs", ["GemmAccumulation"], block_inputs(rng, 2, 3, 4096, block=block))
    add("K = 4096, every product non-negative: a narrow accumulator stalls", ["GemmAccumulation"],
        block_inputs(rng, 2, 3, 4096, block=block, positive=True))
    nan = block_inputs(rng, 3, 4, 2 * block, block=block)
    nan["a_scales"][1, 1] = 0xFF if not nv else 0x7F
    add("a NaN block scale in row 1 of a: that row is NaN", ["NaN"], nan)
    add("no rows (M = 0)", ["EmptyInput"], block_inputs(rng, 0, 3, block, block=block))
    add("one block (K = block), M = N = 1", ["EmptyInput"], block_inputs(rng, 1, 1, block, block=block))
    add("random", ["Random"], block_inputs(rng, 5, 6, 6 * block, block=block))
    bad = block_inputs(rng, 2, 3, 2 * block, block=block)
    add(f"K = {block + block // 2}, not a multiple of {block}", ["InvalidInput"],
        {**block_inputs(rng, 2, 3, 2 * block, block=block), "a_codes": bad["a_codes"][:, :block + block // 2],
         "b_codes": bad["b_codes"][:, :block + block // 2]}, result="invalid")
    add("a code 16 (codes are one E2M1 per byte)", ["InvalidInput"],
        {**bad, "a_codes": np.full_like(bad["a_codes"], 16)}, result="invalid")
    add("scales of the other format's block size", ["InvalidInput", "GemmBlockScale"],
        {**bad, "b_scales": np.ones((3, 4 if nv else 1), np.uint8) * (127 if not nv else 0x38)}, result="invalid")
    if nv:
        add("a_global 0", ["InvalidInput", "GemmGlobalScale"], {**bad, "a_global": np.float32(0)}, result="invalid")
    # Appended by issue 14's adversary review (gemm); ids above do not move.
    one = 0x38 if nv else 127  # the scale code of 1.0
    extra = {"a_global": np.float32(1), "b_global": np.float32(1)} if nv else {}

    def pair(a, sa, b, sb):
        return {"a_codes": np.asarray(a, np.uint8), "a_scales": np.asarray(sa, np.uint8),
                "b_codes": np.asarray(b, np.uint8), "b_scales": np.asarray(sb, np.uint8), **extra}

    k = 4 * block
    ac, bc = np.zeros((1, k), np.uint8), np.zeros((1, k), np.uint8)
    ac[0, :9], bc[0, :9] = [7] * 7 + [4, 2], [7] * 7 + [4, 2]  # 7 * 36 + 4 + 1 = 257 in the first quarter of K
    ac[0, -8:], bc[0, -8:] = [7] * 7 + [4], [15] * 7 + [12]  # 7 * -36 + 2 * -2 = -256 in the last
    add(f"cancellation: 257 over the first quarter of K = {k}, -256 over the last, y = 1; bfloat16 split-K "
        "partials give 256 - 256 = 0", ["GemmRounding", "GemmAccumulation"], pair(ac, np.full((1, 4), one), bc,
                                                                             np.full((1, 4), one)))
    if nv:
        add("a's block scale -1.0 (E4M3 0xB8: the scales are signed E4M3, as the codec decodes them), all 1.0: "
            "y = -16; a kernel reading the scales unsigned (UE4M3) gives +16", ["GemmScaleDecode"],
            pair(np.full((1, 16), 2), [[0xB8]], np.full((1, 16), 2), [[0x38]]))
    else:
        add("a's scale 2^-126 (E8M0 1), b's 2^127 (254), every element 6: y = 32 * 36 * 2 = 2304; a kernel that "
            "scales each operand apart in float32 makes b Inf (6 * 2^127)", ["GemmScaleDecode"],
            pair(np.full((1, 32), 7), [[1]], np.full((1, 32), 7), [[254]]))
        add("a's scale 2^-127 (E8M0 0, below float32's normal range), b's 2^126, a 6 and b 2: y = 32 * 12 / 2 = "
            "192; scales built as float32 bits (s << 23) or flushed to zero give 0", ["GemmScaleDecode"],
            pair(np.full((1, 32), 7), [[0]], np.full((1, 32), 4), [[253]]))
        add("a's scale NaN (E8M0 0xFF) against every element 1.0 of one sign: y = NaN; 0xFF read as 2^128 (Inf) "
            "gives +Inf, since no zero or sign change turns Inf into NaN here", ["NaN"],
            pair(np.full((1, 32), 2), [[0xFF]], np.full((1, 32), 2), [[127]]))
    return v


@st.composite
def _block_cases(draw, supported, block):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    m, n, blocks = draw(st.integers(0, 4), label="m"), draw(st.integers(0, 5), label="n"), draw(
        st.integers(1, 12), label="blocks")
    return Case(block_inputs(rng, m, n, blocks * block, block=block), {})


def _k_flags(key: str):
    def flags(case) -> tuple[str, ...]:
        return ("GemmAccumulation",) if np.shape(case.inputs[key])[1] >= 1024 else ("Random",)
    return flags


OPERATIONS = [
    AREA.bounded(
        "fp8_gemm", gemm.fp8_gemm, anchor="fp8-gemm",
        summary="W8A8 FP8 GEMM: E4M3 codes, per-token activation and per-channel weight scales",
        vectors=_fp8_vectors, examples=fp8_cases, emulate=gemm_emulate.fp8_gemm, bounds=GEMM_BOUND,
        case_flags=_k_flags("x_codes")),
    AREA.bounded(
        "mxfp4_gemm", gemm.mxfp4_gemm, anchor="block-scaled-gemm",
        summary="MXFP4 x MXFP4 GEMM: E2M1 codes, E8M0 scales per 32 along K",
        vectors=lambda: _block_vectors("quant.mxfp4_gemm", gemm.MX_BLOCK),
        examples=lambda supported: _block_cases(supported, gemm.MX_BLOCK), emulate=gemm_emulate.mxfp4_gemm,
        bounds=GEMM_BOUND, case_flags=_k_flags("a_codes")),
    AREA.bounded(
        "nvfp4_gemm", gemm.nvfp4_gemm, anchor="block-scaled-gemm",
        summary="NVFP4 x NVFP4 GEMM: E2M1 codes, E4M3 scales per 16 along K, per-tensor decode scales",
        vectors=lambda: _block_vectors("quant.nvfp4_gemm", gemm.NV_BLOCK),
        examples=lambda supported: _block_cases(supported, gemm.NV_BLOCK), emulate=gemm_emulate.nvfp4_gemm,
        bounds=GEMM_BOUND, case_flags=_k_flags("a_codes")),
]

"""The golden vectors of the NVFP4 ops: per recipe, Gaussian data, tiles, the Hadamard
transform, zero and poisoned tensors, element ties (and, for quantize_stochastic, the
same inputs under given random bits); then the inputs where recipes part ways
(catalog.nvfp4_ties), and every shape and dtype the codecs accept or refuse."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from ref.formats import nvfp4
from ref.formats.minifloat import decode, encode
from ref.formats.catalog.nvfp4_ties import at_scale_ties, element_ties, recipe_ties, torchao_order_ties
from ref.testing.catalog_types import seed_for
from ref.testing.golden import Case, VectorSpec

__all__ = ["dequantize_vectors", "quantize_vectors", "stochastic_vectors"]

Recipe = nvfp4.Recipe
TORCHAO = {Recipe.TORCHAO_0_13.value, Recipe.TORCHAO_0_17.value}


def _spec(comment, flags, x, result="valid", rbits=None, **params) -> VectorSpec:
    inputs = {"x": np.asarray(x, dtype=np.float32)}
    if rbits is not None:
        inputs["rbits"] = rbits
    return VectorSpec(comment, tuple(flags), Case(inputs, params), result)


def _per_recipe(rng, gauss: np.ndarray) -> tuple[list[VectorSpec], list[VectorSpec]]:
    """(quantize's vectors, quantize_stochastic's) for each recipe, drawn from one
    stream so that both keep the inputs they have always had."""
    rne, sr = [], []
    for r in (r.value for r in Recipe):
        rne += [_spec(f"{r}: Gaussian 32x64 with an outlier channel", ["RecipeOrder", "Random"], gauss, recipe=r),
                _spec(f"{r}: 16x16 tiles (2D scaling)", ["RecipeOrder"], gauss, recipe=r, tile_2d=True),
                _spec(f"{r}: random Hadamard transform first (the outlier spreads over its 16)", ["Hadamard"],
                      gauss, recipe=r, rht=True)]
        tiny = rng.standard_normal((4, 32)) * np.array([[1e-6], [1e-3], [1.0], [1e3]])
        tiny[0] = 0.0
        rne += [_spec(f"{r}: blocks from zero to large, one all-zero row",
                      ["ZeroBlock", "ScaleClamp", "E4M3Rounding"], tiny, recipe=r),
                _spec(f"{r}: an all-zero tensor (amax 0: global scale 1)", ["ZeroBlock", "GlobalAmax"],
                      np.zeros((2, 32)), recipe=r)]
        poison = rng.standard_normal((3, 32))
        for value, what in ((np.nan, "NaN"), (np.inf, "Inf")):
            poisoned = poison.copy()
            poisoned[1, 20] = value
            rne.append(_spec(f"{r}: a {what} block (tensor amax {what}: global scale 1, the other blocks as usual)",
                             ["NanBlock", "GlobalAmax"], poisoned, recipe=r))
        ties = np.tile(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2, dtype=np.float32), (2, 1))
        ties[1] *= -1
        tie_x = np.concatenate([ties, np.full((1, 16), 6.0 * 448, np.float32)])
        rne.append(_spec(f"{r}: element ties (block amax 6 under a unit global scale: torchao's path without one)",
                         ["TiesToEven"], tie_x, recipe=r))
        sr.append(_spec(f"{r}: stochastic rounding with random bits", ["StochasticRounding"], gauss[:4], recipe=r,
                        rbits=rng.integers(0, 2**32, (4, 64), dtype=np.uint64).astype(np.uint32)))
        for rb, what in ((1 << 31, "carries (fraction 1/2 + 1/2 = 1)"), ((1 << 31) - (1 << 24), "does not carry")):
            sr.append(_spec(f"{r}: stochastic rounding on exact E2M1 midpoints, random byte at the boundary {what}",
                            ["StochasticRounding", "SrBoundary"], tie_x, recipe=r,
                            rbits=np.full(tie_x.shape, rb, dtype=np.uint32)))
    return rne, sr


def _boundary_rows(bam: np.ndarray, amax: float, fill: np.ndarray) -> np.ndarray:
    """Rows [global amax, 0...] then one block per searched block max `bam` (at index 0)."""
    rows = np.zeros((bam.size + 1, 16), np.float32)
    rows[0, 0] = amax  # fixes the global amax
    rows[1:, :] = fill * bam[:, None]
    rows[1:, 0] = bam
    return rows


def _searched(rng) -> list[VectorSpec]:
    """Inputs where the recipes' float32 orders meet an E4M3 or E2M1 tie."""
    specs = []
    for a, b in itertools.combinations([r.value for r in Recipe], 2):
        if {a, b} == TORCHAO:  # the same scales: their elements differ, below
            continue
        bam = recipe_ties(a, b, 100.0)
        if bam.size:
            rows = _boundary_rows(bam, 100.0, rng.uniform(-1, 1, (bam.size, 16)).astype(np.float32))
            specs += [_spec(f"{r}: block maxima where {a} and {b} choose different E4M3 scales", ["RecipeOrder"],
                            rows, recipe=r) for r in (a, b)]
    for r in Recipe:
        for amax in (1000.0, 77.7):  # 1000: f32(g / 6) != f32(g * f32(1/6))
            bam = at_scale_ties(r, amax)
            fill = np.concatenate([np.zeros((bam.size, 1), np.float32),
                                   rng.uniform(-1, 1, (bam.size, 15)).astype(np.float32)], axis=1)
            specs.append(_spec(f"{r.value}: block scale products within 2 float32 ulps of an E4M3 tie "
                               f"(global amax {amax:g})", ["RecipeOrder", "E4M3Rounding"],
                               _boundary_rows(bam, amax, fill), recipe=r.value))
    for r in Recipe:
        specs.append(_spec(f"{r.value}: elements whose scaled value lies within 2 float32 ulps of an E2M1 tie",
                           ["RecipeOrder", "TiesToEven"], element_ties(r, 100.0, rng), recipe=r.value))
    for amax in (100.0, 2688.0):  # 2688: p = 1, torchao without a global scale
        rows = torchao_order_ties(np.float32(amax), rng)
        specs += [_spec(f"{r}: elements where x / f32(p * sb) and x * f32(f32(1/p) / sb) pick different codes "
                        f"(global amax {amax:g})", ["RecipeOrder"], rows, recipe=r) for r in sorted(TORCHAO)]
    return specs


def _gauss(rng) -> np.ndarray:
    gauss = rng.standard_normal((32, 64)).astype(np.float32)
    gauss[:, 5] *= 40  # an outlier channel
    return gauss


def _sr_boundary(rng) -> tuple[np.ndarray, np.ndarray]:
    """Rows under a unit global and block scale (a row of 2688 sets the tensor amax,
    each block holds 6), so q = x in every recipe, and for each element the smallest
    top byte R with fraction + R / 256 >= 1, from exact rationals: (x, R << 24)."""
    x = rng.uniform(0.05, 5.95, (4, 16)).astype(np.float32) * rng.choice([-1, 1], (4, 16)).astype(np.float32)
    x[:, 0] = 6.0
    x = np.concatenate([x, np.full((1, 16), 2688.0, np.float32)])
    ax = np.abs(x)
    lo = decode(encode(ax, "float4_e2m1fn", rounding="toward_zero", overflow="saturate"), "float4_e2m1fn")
    hi = decode(encode(ax, "float4_e2m1fn", rounding="toward_positive", overflow="saturate"), "float4_e2m1fn")
    need = np.full(x.shape, 255, np.uint32)  # on the grid or saturated: no step to take
    for i in zip(*np.nonzero((hi > lo) & (ax < 6))):
        frac = (Fraction(float(ax[i])) - Fraction(float(lo[i]))) / (Fraction(float(hi[i])) - Fraction(float(lo[i])))
        need[i] = min(255, max(1, math.ceil((1 - frac) * 256)))
    return x, need << 24


def quantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.nvfp4.quantize"))
    gauss = _gauss(rng)
    specs = _per_recipe(rng, gauss)[0] + _searched(rng)
    specs.append(_spec("empty input", ["EmptyInput"], np.zeros((0, 16))))
    specs.append(VectorSpec("2D tiles need rows in multiples of 16", ("InvalidInput",),
                            Case({"x": np.ones((8, 16), np.float32)}, {"tile_2d": True}), "invalid"))
    return specs + _shape_vectors(gauss)


def stochastic_vectors() -> list[VectorSpec]:
    """quantize's per-recipe inputs (the same stream) under given random bits, then the
    rbits quantize_stochastic refuses."""
    rng = np.random.default_rng(seed_for("formats.nvfp4.quantize"))
    gauss = _gauss(rng)
    specs = _per_recipe(rng, gauss)[1]
    rng = np.random.default_rng(seed_for("formats.nvfp4.quantize_stochastic"))
    sx, carry = _sr_boundary(rng)
    for r in (r.value for r in Recipe):
        specs += [
            _spec(f"{r}: random bytes that just complete each element's fraction carry (q = x: unit scales)",
                  ["StochasticRounding", "SrBoundary"], sx, rbits=carry, recipe=r),
            _spec(f"{r}: one random step less, every ignored low bit set: no carry (a kernel reading more than "
                  f"the top 8 bits carries)", ["StochasticRounding", "SrBoundary"], sx,
                  rbits=carry - np.uint32(1), recipe=r),
        ]
    x = gauss[:16, :32]
    bits = rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
    specs += [
        _spec("16x16 tiles, Hadamard transform first, random bits", ["StochasticRounding", "Hadamard"], x,
              rbits=bits, tile_2d=True, rht=True),
        _spec("random bits with only their low 24 bits set: the top byte is 0, so every element truncates",
              ["StochasticRounding", "SrBoundary"], x, rbits=bits & np.uint32(0x00FFFFFF)),
        _spec("empty input and empty random bits", ["EmptyInput"], np.zeros((0, 16)),
              rbits=np.zeros((0, 16), np.uint32)),
        _spec("float random bits (torch.rand) are rejected", ["InvalidInput", "StochasticRounding"], x,
              "invalid", rbits=bits.astype(np.float32) / np.float32(2**32)),
        _spec("random bits of another shape are rejected, not broadcast", ["InvalidInput", "StochasticRounding"],
              x, "invalid", rbits=bits[:1]),
        _spec("a last axis of 24 is rejected", ["InvalidInput", "RaggedGroup"], gauss[:2, :24], "invalid",
              rbits=bits[:2, :24]),
    ]
    return specs


def _shape_vectors(x: np.ndarray) -> list[VectorSpec]:
    """Every input dtype and rank nvfp4.quantize accepts, and what it refuses; x: float32
    [32, 64]. (bfloat16 input has no golden representation: arrays are stored in NumPy's
    own dtypes.)"""
    half = np.float16([6e-8, -1.2e-7, 3e-5, 65504.0, -1.0, 0.0, 2.0**-14, -0.0] * 8)  # subnormals to max
    specs = [
        VectorSpec("float16 input (widened to float32 exactly)", ("Float16Input",),
                   Case({"x": np.concatenate([x[:2].astype(np.float16), half[None, :]])})),
        VectorSpec("one row: a 1-d input", ("InputRank",), Case({"x": x[0]})),
        VectorSpec("a 3-d float16 stack", ("InputRank", "Float16Input"),
                   Case({"x": x[:4].reshape(2, 2, 64).astype(np.float16)})),
        VectorSpec("a 3-d stack of two 16x32 matrices, 16x16 tiles", ("InputRank",),
                   Case({"x": x[:, :32].reshape(2, 16, 32)}, {"tile_2d": True})),
        VectorSpec("a 1-d empty input", ("EmptyInput", "InputRank"), Case({"x": np.zeros(0, np.float32)})),
        VectorSpec("rows of no values: no blocks", ("EmptyInput",), Case({"x": np.zeros((2, 0), np.float32)})),
        VectorSpec("float64 input is rejected, not narrowed", ("InvalidInput",),
                   Case({"x": x[:2].astype(np.float64)}), "invalid"),
        VectorSpec("integer input is rejected", ("InvalidInput",), Case({"x": np.ones((1, 16), np.int32)}),
                   "invalid"),
        VectorSpec("a 0-d input is rejected", ("InvalidInput", "InputRank"), Case({"x": np.float32(1)}), "invalid"),
    ]
    for n in (24, 8, 17):
        specs.append(VectorSpec(f"a last axis of {n} is rejected, not padded or cut to blocks of 16",
                                ("InvalidInput", "RaggedGroup"), Case({"x": x[:2, :n]}), "invalid"))
    return specs


def dequantize_vectors() -> list[VectorSpec]:
    orders_all = tuple(o.value for o in nvfp4.DequantOrder)
    rng = np.random.default_rng(seed_for("formats.nvfp4.dequantize"))
    codes = rng.integers(0, 16, (4, 32)).astype(np.uint8)
    scales = np.array([[0x00, 0x01], [0x38, 0x7E], [0x7F, 0xFE], [0x08, 0x40]], dtype=np.uint8)
    specs = []
    for r in Recipe:
        for gs, orders in ((1.0, ("exact",)), (0.0123, orders_all), (2688 / 3.0, orders_all)):
            for order in orders:
                specs.append(VectorSpec(f"{r.value}: random codes, extreme and NaN scales, global {gs:g} ({order})",
                                        ("Random", "NanBlock"),
                                        Case({"codes": codes, "scales": scales, "global_scale": np.float32(gs)},
                                             {"recipe": r.value, "order": order})))
    every = np.tile(np.arange(16, dtype=np.uint8), (8, 2))  # [8, 32]: every code under 16 scales
    many = rng.integers(1, 0x7F, (8, 2)).astype(np.uint8)
    for r in Recipe:
        for gs in (7.1e-3, 13.7):
            specs.append(VectorSpec(
                f"{r.value}: every code times E4M3 scales times global {gs:g}, float32 in torchao's order "
                f"f32(e * f32(d * sb)): 1.5, 3 and 6 round twice", ("DequantOrder",),
                Case({"codes": every, "scales": many, "global_scale": np.float32(gs)},
                     {"recipe": r.value, "order": "scale_first"})))
        specs.append(VectorSpec(
            f"{r.value}: every code times E4M3 scales, exact (a float32 output rounds it once)", ("DequantOrder",),
            Case({"codes": every, "scales": many, "global_scale": np.float32(13.7)},
                 {"recipe": r.value, "order": "exact"})))
    for gs, what in ((0.0, "zero"), (-1.0, "negative"), (np.inf, "infinite"), (np.nan, "NaN")):
        specs.append(VectorSpec(f"a {what} global scale is rejected", ("InvalidInput", "GlobalScale"),
                                Case({"codes": codes, "scales": scales, "global_scale": np.float32(gs)}),
                                "invalid"))
    specs.append(VectorSpec("scales of the wrong shape are rejected", ("InvalidInput",),
                            Case({"codes": codes, "scales": scales[:, :1], "global_scale": np.float32(1)}),
                            "invalid"))
    return specs + _dequantize_shape_vectors(codes, scales)


def _dequantize_shape_vectors(codes: np.ndarray, scales: np.ndarray) -> list[VectorSpec]:
    """Every rank nvfp4.dequantize accepts, and what it refuses: each of bits 4-7 set
    above an E2M1 code, wrong dtypes, a ragged last axis. codes [4, 32], scales [4, 2]."""
    one = np.float32(1.5)

    def case(c, s):
        return Case({"codes": c, "scales": s, "global_scale": one})

    finite = scales.copy()
    finite[(finite & 0x7F) == 0x7F] = 0x38  # no NaN scale: every value is compared
    c3, s3 = codes.reshape(2, 2, 32), finite.reshape(2, 2, 2)
    specs = [
        VectorSpec("one row: 1-d codes", ("InputRank",), case(codes[3], finite[3])),
        VectorSpec("a 3-d stack", ("InputRank",), case(c3, s3)),
        VectorSpec("no rows", ("EmptyInput",), case(codes[:0], finite[:0])),
        VectorSpec("rows of no codes: no blocks", ("EmptyInput",), case(codes[:, :0], finite[:, :0])),
        VectorSpec("int8 codes are rejected (uint8 expected)", ("InvalidInput",),
                   case(codes[:1, :16].view(np.int8), finite[:1, :1]), "invalid"),
        VectorSpec("float32 scales are rejected (E4M3 codes expected)", ("InvalidInput",),
                   case(codes[:1, :16], np.ones((1, 1), np.float32)), "invalid"),
        VectorSpec("0-d codes are rejected", ("InvalidInput", "InputRank"), case(codes[0, 0], finite[0, 0]),
                   "invalid"),
        VectorSpec("scales of a 2-d shape for 3-d codes are rejected", ("InvalidInput", "InputRank"),
                   case(c3, finite), "invalid"),
    ]
    for n, k, what in ((24, 2, "its padded"), (24, 1, "its whole"), (8, 1, "its padded")):
        specs.append(VectorSpec(f"a last axis of {n} is rejected (scales for {what} blocks: {k})",
                                ("InvalidInput", "RaggedGroup"), case(codes[:, :n], finite[:, :k]), "invalid"))
    for bit in range(4, 8):
        dirty = codes[:2, :16].copy()
        dirty[1, 5] |= 1 << bit
        specs.append(VectorSpec(f"a code with bit {bit} set (above its 4) is rejected, not masked",
                                ("DirtyBits", "InvalidInput"), case(dirty, finite[:2, :1]), "invalid"))
    return specs

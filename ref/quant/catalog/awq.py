"""AWQ's two searches and its quantizer (spec/quant.md#awq), the searches judged against
the float64 oracle with an agreement rule measured from a float32 implementation:

  quant.awq.search_scales  x [..., in], w [out, in] -> (s [in], choice, losses [n_grid])
  quant.awq.search_clip    x [..., in], w [out, in] -> max_val [out, in/g]
  quant.awq.quantize       w [out, in] -> (codes, scales, zeros): AWQ's quantizer, exact (float32)

Vector inputs are integers scaled by powers of two (byte-stable across NumPy
versions): activations with a few outlier channels (integers times 2^k), weights in
steps of 2^-9. The scale search's losses are mean squared output errors computed in
float64; a float32 kernel computes them with cancellation (the float output minus
the quantized one) and its W s rounds differently in the last place (a code that flips
moves one grid point's loss by a few percent in a small layer), so losses agree to
LOSS_RTOL but at most LOSS_FLIPS of them (the worst to LOSS_FLIP_RTOL, the next to
LOSS_SECOND_FLIP_RTOL), the choice is any grid point whose float64 loss is within
CHOICE_RTOL of the smallest, and the scales match to SCALE_RTOL where the choice is
the oracle's. The clip search's quantizer runs in float32 in both (the definition),
so a float32 kernel differs only where two shrink steps' errors tie to float32
rounding: at most CLIP_FLIPS groups plus CLIP_FRACTION of them.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.quant import awq
from ref.quant.catalog.awq_compare import (CHOICE_RTOL, CLIP_FLIPS, CLIP_FRACTION, LOSS_FLIP_RTOL, LOSS_FLIPS,
                                           LOSS_RTOL, LOSS_SECOND_FLIP_RTOL, SCALE_RTOL, compare_clip,
                                           compare_search)
from ref.quant.catalog.common import AREA
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact, compare_parts, compare_values
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["CHOICE_RTOL", "CLIP_FLIPS", "CLIP_FRACTION", "FLAGS", "LOSS_FLIPS", "LOSS_FLIP_RTOL", "LOSS_RTOL",
           "LOSS_SECOND_FLIP_RTOL", "OPERATIONS", "SCALE_RTOL",
           "compare_clip", "compare_search"]

BITS = Variant("bits", awq.BITS, 4, "bits per weight code")
GROUP = Variant("group", (-1, 32, 64, 128), 128, "input channels per quantization group (-1: one per row)")
DUO = Variant("duo_scaling", (False, True), False,
              "s = x_mean^alpha (the paper, llm-awq) or x_mean^alpha / w_mean^(1-alpha) (AutoAWQ, llm-compressor)")
GRID = Variant("grid", awq.Grid, "awq",
               "alpha = i/20, i < 20 (llm-awq, AutoAWQ) or i/19 (llm-compressor; with duo: 0 plain, then i/18 duo)")

FLAGS = {
    **{name: COMMON[name] for name in (EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM)},
    "Float16Input": Flag("float16 input reinterpreted or widened wrongly",
                         "half-precision activations encode to wrong codes"),
    "InputRank": Flag("an input of another rank (0-d, 1-d, 3-d and more) flattened, squeezed or refused",
                      "a single row or a batch of matrices comes back in another shape, or fails"),
    "ScaleSide": Flag("AWQ's scales applied to the wrong side (W / s quantized and x * s fed in)",
                      "the salient channels are shrunk instead of protected: the loss at every alpha > 0 grows"),
    "ScaleNorm": Flag("the scales not normalized by sqrt(max(s) min(s))",
                      "the quantized layer is the same up to rounding, but the scales folded into the previous "
                      "op (and stored) are off by a constant"),
    "LossOnOutput": Flag("the scale search's loss taken on the weights (W - Q(W s) / s) instead of the outputs",
                         "the activations no longer weigh the error: another alpha wins"),
    "ScaleGrid": Flag("the alpha grid off: 1.0 included or 0 left out (i / (n - 1), or i from 1)",
                      "every loss belongs to another alpha; alpha = 0 (plain RTN) may not be tried"),
    "DuoScaling": Flag("duo scaling's w_mean wrong (not normalized per group, or the exponent alpha instead of "
                       "1 - alpha)", "the scales of AutoAWQ's and llm-compressor's default differ"),
    "ScaleFloor": Flag("x_mean^alpha not clamped at 1e-4 before normalizing",
                       "a dead input channel gets s = 0 (and the others Inf or NaN)"),
    "ClipAxis": Flag("the clip threshold taken over the wrong axis (the output rows, or the whole row)",
                     "each group's clip comes from other weights"),
    "ClipGrid": Flag("the clip shrink grid off (1 - i / 20 from i = 1, or to 0.5 inclusive), or the search's "
                     "best error not started at the reference's 1e9",
                     "no clip (i = 0) is not tried, or a range the reference never tries wins"),
    "ClipSample": Flag("the clip search's tokens not sampled as the reference samples them (every "
                       "max(1, n // 512)-th)", "another subset of tokens judges the clip: other thresholds"),
    "ZeroRange": Flag("AWQ's quantizer given GPTQ's range (min(w, 0), max(w, 0)) or its zero point left unclamped",
                      "one-sided groups lose half their codes, or get a zero point outside the codes"),
    "RangeFloor": Flag("the quantizer's range not floored at 1e-5 (an all-zero or constant group)",
                       "a zero scale: NaN codes, or another scale and zero point stored"),
    "TiesToEven": Flag("ties rounded away from zero or up instead of to the even code",
                       "a half-ulp bias on every tie: systematic drift in accumulations"),
    "TieRule": Flag("of equal losses (or clip errors) the last, or another, kept instead of the first (<= for <, "
                    "an exactly-zero loss skipped, the choice started past grid point 0)",
                    "a layer whose grid points tie (all-zero weights, uniform activations, dead channels) gets a "
                    "larger alpha or a tighter clip than the reference's"),
    "TokenMean": Flag("x_mean not the mean over every token (the first chunk's sum, or the mean of unequal "
                      "chunks' means)", "past 1024 tokens the activation statistic, hence s, is another"),
    "ClipLoss": Flag("the clip error taken over the whole row (or on weights) instead of each group's partial "
                     "output, or summed over the tokens instead of averaged",
                     "groups are judged together, or errors measured on another scale against the 1e9 start: "
                     "other thresholds"),
}

F = np.float32


def _layer(seed: str, n: int, cin: int, cout: int, outliers: int = 3, dtype=np.float32, dead: int = 0):
    """x [n, cin]: integers in [-64, 64) / 64 with `outliers` channels times 2^3..2^5;
    w [cout, cin]: integers in [-16, 16) / 512, some rows with a large weight."""
    rng = np.random.default_rng(seed_for(seed))
    x = rng.integers(-64, 64, (n, cin)).astype(np.float64) / 64
    for j, k in zip(rng.choice(cin, outliers, replace=False), rng.integers(3, 6, outliers)):
        x[:, j] *= 2.0 ** k
    x[:, :dead] = 0
    w = rng.integers(-16, 16, (cout, cin)).astype(np.float64) / 512
    w[rng.integers(0, cout, cout // 4), rng.integers(0, cin, cout // 4)] *= 8
    return x.astype(dtype), w.astype(dtype)


def _search_vectors() -> list[VectorSpec]:
    x, w = _layer("search", 32, 64, 16)
    xw, ww = _layer("search wide", 32, 128, 16)
    teeth = ("Random", "ScaleSide", "ScaleNorm", "LossOnOutput", "ScaleGrid")
    specs = [VectorSpec("outlier channels, bits 4, group 128", teeth, Case({"x": xw, "w": ww}, {"bits": 4}))]
    specs += [VectorSpec(f"outlier channels, bits {b}, group {g}", teeth, Case({"x": x, "w": w}, {"bits": b, "group": g}))
              for b, g in ((4, 32), (3, 64), (2, 32), (8, 64), (4, -1))]
    for grid in ("awq", "llmcompressor"):
        specs += [VectorSpec(f"duo scaling, grid {grid}", ("DuoScaling", "ScaleGrid", "ScaleNorm"),
                             Case({"x": x, "w": w}, {"duo_scaling": True, "grid": grid, "group": 32})),
                  VectorSpec(f"plain scaling, grid {grid}", ("ScaleGrid", "ScaleSide"),
                             Case({"x": x, "w": w}, {"duo_scaling": False, "grid": grid, "group": 64}))]
    xd, wd = _layer("search dead", 32, 64, 16, dead=2)
    specs += [
        VectorSpec("two dead input channels (x_mean 0: clamped at 1e-4)", ("ScaleFloor",),
                   Case({"x": xd, "w": wd}, {"group": 32})),
        VectorSpec("two dead input channels, duo scaling", ("ScaleFloor", "DuoScaling"),
                   Case({"x": xd, "w": wd}, {"group": 32, "duo_scaling": True})),
        VectorSpec("x as [batch, seq, in] (tokens are every leading index)", ("InputRank", "ScaleSide"),
                   Case({"x": x.reshape(2, 16, 64), "w": w}, {"group": 64})),
        VectorSpec("float16 inputs (exact: integers over powers of two)", ("Float16Input", "ScaleSide"),
                   Case({"x": x.astype(np.float16), "w": w.astype(np.float16)}, {"group": 32})),
        VectorSpec("float64 inputs", ("ScaleSide",), Case({"x": x.astype(np.float64), "w": w.astype(np.float64)},
                                                          {"group": 64})),
        VectorSpec("one token", ("EmptyInput",), Case({"x": x[:1], "w": w}, {"group": 64})),
        VectorSpec("all-zero weights: every loss 0, alpha 0 chosen", ("ScaleNorm",),
                   Case({"x": x, "w": np.zeros_like(w)}, {"group": 64})),
    ]
    specs += _invalid(x[:4], w[:4], "search")
    # Appended after the first vectors (their ids stay): gaps the adversary's mutants found (issue 14).
    xu = np.where(np.arange(32 * 64).reshape(32, 64) % 3 == 0, F(-1), F(1))  # |x| = 1 everywhere
    xa, wa = _awkward_layer("search awkward", 64, 64, 16)
    xg, wg = _halves_layer("search halves")
    xt, wt = _long_layer("search long")
    return specs + [
        # Every x_mean is 1, so every s is 1 and every grid point quantizes the same W: 20 equal
        # losses, grid point 0 chosen (a last-of-equals or skip-zero pick chooses another).
        VectorSpec("uniform activations: every s is 1, every loss ties, alpha 0 chosen", ("TieRule",),
                   Case({"x": xu, "w": w}, {"group": 32})),
        # llm-compressor's first duo point is plain alpha 0; 8 bits make its loss the most sensitive.
        VectorSpec("duo scaling, grid llmcompressor, bits 8, group 64", ("DuoScaling", "ScaleGrid"),
                   Case({"x": x, "w": w}, {"duo_scaling": True, "grid": "llmcompressor", "bits": 8, "group": 64})),
        # 1536 tokens, an outlier channel in the last 512: x_mean is the mean over every token,
        # not the first 1024-token chunk's nor the mean of the two chunks' means.
        VectorSpec("1536 tokens, an outlier channel in the last 512 (x_mean over every token)",
                   ("TokenMean", "Float16Input"), Case({"x": xt, "w": wt}, {"group": -1})),
        # activations with 16 significant bits up to 2^8: float16 sums of |x| round.
        VectorSpec("activations beyond float16's precision (x_mean summed wider)", ("Float16Input",),
                   Case({"x": xa, "w": wa}, {"group": 32})),
        VectorSpec("group -1 with 256 inputs (one group per row, not 128)", ("Random",),
                   Case({"x": xg, "w": wg}, {"group": -1})),
        *_bad_bits(x[:4], w[:4], "search"),
    ]


def _invalid(x, w, op: str) -> list[VectorSpec]:
    bad_x = x.copy()
    bad_x[3, 5] = np.nan
    inf_w = w.copy()
    inf_w[1, 2] = np.inf
    inv = (INVALID_INPUT,)
    return [
        VectorSpec(f"{op}: NaN activations are rejected", (INVALID_INPUT, NAN),
                   Case({"x": bad_x, "w": w}, {"group": 32}), "invalid"),
        VectorSpec(f"{op}: Inf weights are rejected", inv, Case({"x": x, "w": inf_w}), "invalid"),
        VectorSpec(f"{op}: a group that does not divide the input dimension is rejected", inv,
                   Case({"x": x[:, :48], "w": w[:, :48]}, {"group": 32}), "invalid"),
        VectorSpec(f"{op}: x's channels not w's input dimension", inv, Case({"x": x[:, :32], "w": w}), "invalid"),
        VectorSpec(f"{op}: 1-d weights are rejected", inv, Case({"x": x, "w": w[0]}), "invalid"),
        VectorSpec(f"{op}: no tokens", (EMPTY_INPUT, INVALID_INPUT), Case({"x": x[:0], "w": w}), "invalid"),
        VectorSpec(f"{op}: integer activations are rejected", inv,
                   Case({"x": np.ones(x.shape, np.int32), "w": w}), "invalid"),
    ]


def _bad_bits(x, w, op: str) -> list[VectorSpec]:
    """bits outside {2, 3, 4, 8}: refused (5 to 7 too, though a quantizer could run them)."""
    inputs = {"w": w} if x is None else {"x": x, "w": w}
    return [VectorSpec(f"{op}: bits {b} is rejected", (INVALID_INPUT,), Case(inputs, {"bits": b, "group": 32}),
                       "invalid") for b in (1, 5, 16)]


def _awkward_layer(seed: str, n: int, cin: int, cout: int):
    """x [n, cin]: integers in [-2^15, 2^15) / 2^7 (16 significant bits, up to 256 in
    magnitude: a float16 running sum rounds); w [cout, cin] integers / 512."""
    rng = np.random.default_rng(seed_for(seed))
    x = rng.integers(-2**15, 2**15, (n, cin)).astype(np.float64) / 2**7
    x[:, rng.choice(cin, 3, replace=False)] *= 4
    w = rng.integers(-16, 16, (cout, cin)).astype(np.float64) / 512
    return x.astype(np.float32), w.astype(np.float32)


def _halves_layer(seed: str, cout: int = 8):
    """x [32, 256], w [cout, 256] whose first 128 inputs are 16 times smaller than the
    last 128: one group per row (group -1) and two groups of 128 quantize differently."""
    rng = np.random.default_rng(seed_for(seed))
    x = rng.integers(-64, 64, (32, 256)).astype(np.float64) / 64
    x[:, rng.choice(256, 3, replace=False)] *= 16
    w = rng.integers(-64, 64, (cout, 256)).astype(np.float64) / 1024
    w[:, 128:] *= 16
    return x.astype(np.float32), w.astype(np.float32)


def _long_layer(seed: str, n: int = 1536, cin: int = 8, cout: int = 8, late: int = 1024, k: int = 5):
    """x [n, cin] float16: integers in [-64, 64) / 64 with channel 1 times 2^k from token
    `late` on; w [cout, cin]: integers / 512, float16."""
    rng = np.random.default_rng(seed_for(seed))
    x = rng.integers(-64, 64, (n, cin)).astype(np.float64) / 64
    x[late:, 1] *= 2.0 ** k
    w = rng.integers(-16, 16, (cout, cin)).astype(np.float64) / 512
    w[rng.integers(0, cout, cout // 2), rng.integers(0, cin, cout // 2)] *= 8
    return x.astype(np.float16), w.astype(np.float16)


def _sampled_layer():
    """x [1030, 8] whose odd tokens are large in channels 4..7 and whose tokens from 512 on
    are large in channels 0..1: every second token, the first 512 and all of them each
    judge the clip differently. w [32, 8]."""
    rng = np.random.default_rng(seed_for("clip sampled"))
    x = rng.integers(-64, 64, (1030, 8)).astype(np.float64) / 64
    x[1::2, 4:] *= 8
    x[512:, :2] *= 8
    w = rng.integers(-16, 16, (32, 8)).astype(np.float64) / 512
    w[rng.integers(0, 32, 16), rng.integers(0, 8, 16)] *= 8
    return x.astype(np.float16), w.astype(np.float16)


def _clip_vectors() -> list[VectorSpec]:
    x, w = _layer("clip", 32, 64, 32)
    xw, ww = _layer("clip wide", 32, 128, 16)
    teeth = ("Random", "ClipAxis", "ClipGrid", "ClipLoss")
    specs = [VectorSpec("outlier weights, bits 4, group 128", teeth, Case({"x": xw, "w": ww}, {"bits": 4}))]
    specs += [VectorSpec(f"outlier weights, bits {b}, group {g}", teeth, Case({"x": x, "w": w}, {"bits": b, "group": g}))
              for b, g in ((4, 32), (3, 64), (2, 32), (8, 32), (4, -1))]
    xl, wl = _sampled_layer()
    wz = w.copy()
    wz[:4, :32] = 0
    specs += [
        VectorSpec("1030 tokens: every second token is read (1030 // 512 = 2)", ("ClipSample", "Float16Input"),
                   Case({"x": xl, "w": wl}, {"group": -1, "bits": 3})),
        VectorSpec("all-zero groups clip to 0", ("ClipGrid",), Case({"x": x, "w": wz}, {"group": 32})),
        VectorSpec("x as [batch, seq, in]", ("InputRank", "ClipAxis"),
                   Case({"x": x.reshape(2, 16, 64), "w": w}, {"group": 64})),
        VectorSpec("float64 inputs (the weights rounded to float32 for the quantizer)", ("ClipAxis",),
                   Case({"x": x.astype(np.float64), "w": w.astype(np.float64) * (1 + 2.0 ** -30)}, {"group": 64})),
    ]
    specs += _invalid(x[:4], w[:4], "clip")
    # Appended after the first vectors (their ids stay): gaps the adversary's mutants found (issue 14).
    xd = x.copy()
    xd[:, :32] = 0  # a dead group of inputs: every shrink step's error is 0, no clip (amax) kept
    xl, wl = _long_layer("clip long", n=1535, late=1000, k=4)
    xg, wg = _halves_layer("clip halves")
    return specs + [
        VectorSpec("a group of dead input channels: every error 0, the first (no clip) kept", ("TieRule", "ClipGrid"),
                   Case({"x": xd, "w": w}, {"group": 32})),
        # errors above 1e9: no shrink step beats the reference's start, so amax is kept (mean over tokens)
        VectorSpec("large magnitudes (x, w times 2^11): errors above the 1e9 start keep amax",
                   ("ClipLoss", "ClipGrid"), Case({"x": x * F(2**11), "w": w * F(2**11)}, {"group": 32})),
        # 1535 // 512 = 2: every second token, all 768 of them (not cut to 512)
        VectorSpec("1535 tokens: every second one, 768 in all (not the first 512 of them)", ("ClipSample",),
                   Case({"x": xl, "w": wl}, {"group": -1, "bits": 3})),
        VectorSpec("group -1 with 256 inputs (one group per row, not 128)", ("Random", "ClipAxis"),
                   Case({"x": xg, "w": wg}, {"group": -1})),
        *_bad_bits(x[:4], w[:4], "clip"),
    ]


def _quantize_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.awq.quantize"))
    w = rng.integers(-64, 64, (8, 128)).astype(np.float32) / 256
    w[:, 5] *= 16  # an outlier input channel
    specs = [VectorSpec(f"random weights, bits {b}, group {g}", ("Random", "ZeroRange"),
                        Case({"w": w}, {"bits": b, "group": g})) for b in awq.BITS for g in (-1, 32, 128)]
    one_sided = np.abs(w[:4, :64]) + F(1 / 64)
    special = np.concatenate([one_sided, -one_sided])  # [8, 64]
    special[0, :32], special[1, :32], special[2, 32:] = 0, F(0.375), F(-0.5)  # all-zero, constant c > 0, c < 0
    # range 7 over 2^3 - 1 codes: scale 1, -min / scale = 2.5 and every other w / scale a half
    steps = np.append(np.arange(15, dtype=np.float32) / 2 - F(2.5), F(0))
    specs += [
        VectorSpec(f"one-sided, all-zero and constant groups, bits {b}", ("ZeroRange", "RangeFloor"),
                   Case({"w": special}, {"bits": b, "group": 32})) for b in (3, 4, 8)]
    specs += [
        VectorSpec("weights on half steps (w / scale = k + 1/2): half to even", ("TiesToEven",),
                   Case({"w": steps[None, :]}, {"bits": 3, "group": -1})),
        VectorSpec("float16 weights (exact)", ("Float16Input", "ZeroRange"),
                   Case({"w": w.astype(np.float16)}, {"group": 32})),
        VectorSpec("float64 weights (rounded to float32 first)", ("ZeroRange",),
                   Case({"w": w.astype(np.float64) * (1 + 2.0 ** -40)}, {"group": 32})),
        VectorSpec("no rows", (EMPTY_INPUT,), Case({"w": w[:0]}, {"group": 32})),
        VectorSpec("1-d weights are rejected", (INVALID_INPUT, "InputRank"), Case({"w": w[0]}), "invalid"),
        VectorSpec("NaN weights are rejected", (INVALID_INPUT, NAN),
                   Case({"w": np.where(w == w[1, 1], np.nan, w).astype(np.float32)}), "invalid"),
        VectorSpec("a group that does not divide the input dimension is rejected", (INVALID_INPUT,),
                   Case({"w": w[:, :96]}, {"group": 64}), "invalid"),
        VectorSpec("integer weights are rejected", (INVALID_INPUT,), Case({"w": np.ones((2, 32), np.int32)},
                                                                          {"group": 32}), "invalid"),
        VectorSpec("float64 weights beyond float32's range are rejected", (INVALID_INPUT,),
                   Case({"w": np.full((1, 32), 2.0**129)}, {"group": 32}), "invalid"),
        VectorSpec("a group whose range overflows float32 is rejected", (INVALID_INPUT,),
                   Case({"w": np.float32([3e38, -3e38] * 16)[None, :]}, {"group": 32}), "invalid"),
    ]
    # Appended after the first vectors (their ids stay): gaps the adversary's mutants found (issue 14).
    halves = np.concatenate([np.arange(128) / 128, np.arange(128) / 8]).astype(np.float32)[None, :]
    tall = rng.integers(-64, 64, (32, 64)).astype(np.float32) / 256  # out >= group: a row-major layout matters
    return specs + [
        VectorSpec("group -1 with 256 inputs whose halves differ (one group per row, not 128)", ("Random",),
                   Case({"w": halves}, {"bits": 4, "group": -1})),
        VectorSpec("32 rows, group 32 (groups run along the inputs, not the rows)", ("Random", "ZeroRange"),
                   Case({"w": tall}, {"bits": 4, "group": 32})),
        *_bad_bits(None, w[:2, :32], "quantize"),
    ]


def _quantize_examples(supported):
    @st.composite
    def case(draw):
        params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
        rng = np.random.default_rng(draw(st.integers(0, 2**16), label="seed"))
        cin = 128 if params.get("group", 128) in (-1, 128) else 64
        scale = 2.0 ** draw(st.integers(-12, 2), label="scale exponent")
        shift = draw(st.sampled_from([0, 0, 64, -96]), label="shift")  # nonzero: one-sided groups
        w = ((rng.integers(-64, 64, (draw(st.integers(1, 6), label="rows"), cin)) + shift) * scale).astype(np.float32)
        return Case({"w": w}, params)

    return case()


def _examples(clip: bool):
    def strategy(supported):
        @st.composite
        def case(draw):
            params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
            g = params.get("group", 128)
            cin = draw(st.sampled_from([64, 128] if g in (-1, 32, 64) else [128]), label="in")
            seed = draw(st.integers(0, 2**16), label="seed")
            n = draw(st.sampled_from([8, 24, 64]), label="tokens")
            x, w = _layer(f"example {seed}", n, cin, draw(st.sampled_from([8, 16]), label="out"),
                          outliers=draw(st.integers(1, 4), label="outliers"))
            return Case({"x": x, "w": w}, params)

        return case()

    return strategy


def _search_flags(case: Case) -> tuple[str, ...]:
    return ("DuoScaling",) if case.params.get("duo_scaling") else ("Random",)


def _unsigned_zero(x):
    """x with -0.0 read as +0.0: AWQ's zero point clamp(-round(lo / scale), 0, 2^b - 1) of a
    group without negative weights is -0.0 or +0.0 as the clamp has it (numpy 2 and torch
    keep -0.0, numpy 1.24 gives +0.0); both are the zero point 0."""
    x = np.asarray(x)
    return x + x.dtype.type(0) if x.dtype.kind == "f" else x


_compare_quantized = partial(compare_parts, names=("codes", "scales", "zeros"),
                             comparators=(compare_exact, partial(compare_values, fmt="float32"),
                                          lambda e, a: compare_values(_unsigned_zero(e), _unsigned_zero(a),
                                                                      fmt="float32")))

OPERATIONS = [
    AREA.exact("awq.search_scales", awq.search_scales, anchor="awq", golden_float_bound=True,
               summary="x [..., in], w [out, in] -> (s [in], choice, losses [20]): AWQ's scale search",
               variants=(BITS, GROUP, DUO, GRID), vectors=_search_vectors, examples=_examples(False),
               compare=compare_search, outputs=("scales", "choice", "losses"), case_flags=_search_flags),
    AREA.exact("awq.search_clip", awq.search_clip, anchor="awq-clip", golden_float_bound=True,
               summary="x [..., in], W s [out, in] -> max_val [out, in/g]: AWQ's clip search",
               variants=(BITS, GROUP), vectors=_clip_vectors, examples=_examples(True), compare=compare_clip,
               case_flags=lambda case: ("Random",)),
    AREA.exact("awq.quantize", awq.quantize, anchor="awq-quantizer", golden_float_bound=True,
               summary="w [out, in] -> (codes, scales, zeros): AWQ's min-max quantizer in float32",
               variants=(BITS, GROUP), vectors=_quantize_vectors, examples=_quantize_examples,
               compare=_compare_quantized, outputs=("codes", "scales", "zeros"),
               case_flags=lambda case: ("ZeroRange",)),
]

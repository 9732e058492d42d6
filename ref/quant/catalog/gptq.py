"""GPTQ (spec/quant.md#gptq): the weight quantized column by column with error feedback
through the inverse Hessian's upper Cholesky factor.

  quant.gptq  (w [rows, cols], hessian [cols, cols], percdamp) ->
              (codes [rows, cols], scales [rows, groups], zeros [rows, groups], g_idx [cols], losses [rows])

The Hessian form is the contract: an engine that takes calibration inputs is wrapped
by its adapter (H = 2/n X^T X, `ref.quant.gptq.hessian`). Judged by the agreement rule
(ref.quant.catalog.agreement.GPTQ): a float32 run may take the other rounding of a
weight on a boundary, and its row then follows another valid trajectory.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.quant import gptq, rtn
from ref.quant.catalog.agreement import GPTQ
from ref.quant.catalog.common import AREA
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

BITS = Variant("bits", gptq.BITS, 4, "bits per code: 2, 3, 4 or 8")
GROUP = Variant("group", (-1, 128, 64, 32, 16, 8), -1,
                "input channels per scale (consecutive, or consecutive in act-order); -1: per-channel")
SCHEME = Variant("scheme", rtn.Scheme, "asymmetric", "the RTN scheme (ref.quant.rtn): asymmetric, GPTQ's symmetric, "
                 "compressed-tensors' symmetric (llm-compressor) or the restricted one")
SEARCH = Variant("search", rtn.Search, "minmax", "group ranges: min-max, or GPTQ's MSE shrink search")
ACT_ORDER = Variant("act_order", (False, True), False, "visit columns by descending Hessian diagonal (desc_act)")
GROUP_PARAMS = Variant("group_params", gptq.GroupParams, "dynamic",
                       "group scales from the updated weights at the group's first column (dynamic), as the "
                       "reference code reads them at the lazy block's start (block_start), or from the weights "
                       "before GPTQ (static: static_groups, llm-compressor; static_permuted: over groups of "
                       "visited columns, llm-compressor's actorder group)")
BLOCKSIZE = Variant("blocksize", (128, 64, 32, 16, 8, 1), 128,
                    "columns per lazy batch update; changes the result only with block_start groups")

FLAGS = {
    "ErrorFeedback": Flag("a column's rounding error not fed back to the later columns (plain RTN), or fed back "
                          "with the wrong sign or scale", "every row's later codes differ"),
    "Dampening": Flag("the dampening absolute (percdamp added to the diagonal) instead of relative "
                      "(percdamp * mean diag H)", "another inverse Hessian: other codes in most rows"),
    "InverseFactor": Flag("the Cholesky factor of H instead of H^-1, or the lower (U U^T) factorization instead of "
                          "the upper one (U^T U)", "wrong feedback weights: other codes in most rows"),
    "ActOrder": Flag("act-order's permutation not undone on the codes, ascending instead of descending, tied "
                     "diagonal entries not kept in column order, or the diagonal read before dead columns are set "
                     "to 1", "codes in the wrong columns"),
    "GIdx": Flag("g_idx of static groups computed in permuted order, or of act-order dynamic groups in the "
                 "original order", "columns read another group's scale"),
    "GroupParams": Flag("group scales from the original weights where the updated ones are declared (or the "
                        "reverse), or from the block's start where the updated weights are declared",
                        "other scales from the second group on"),
    "BlockUpdate": Flag("the lazy block's error not applied to the trailing columns at its end (feedback only "
                        "inside the block)", "columns past the first block quantized without feedback"),
    "Loss": Flag("the loss without the 1/2, without the division by d^2, or of the updated instead of the "
                 "original column", "losses off by a factor"),
    "HalfPrecision": Flag("an intermediate (the feedback product, the inverse Hessian's factor) held in float16",
                          "small weights underflow and ill-conditioned factors lose digits: other codes and losses"),
    "DeadColumns": Flag("a dead column (H_ii = 0) not zeroed, or its diagonal not set to 1",
                        "NaN from the Cholesky factorization, or a dead column's codes kept"),
}

_P = 2.0**-6


def _layer(rng, rows: int, cols: int, *, tokens: int | None = None, outliers=(3,), dead=(), scale: int = 0):
    """(w float32 [rows, cols], hessian float32 [cols, cols]): w integers in [-40, 40]
    times 2^-6 / 16, H = 2/n X^T X from integer calibration inputs X [n, cols] in
    [-4, 4] (n a power of two: H exact in float32), the `outliers` channels times 8,
    the `dead` channels zero, everything times 4^scale (the mean diagonal moves, the
    codes do not)."""
    n = tokens or 2 * cols
    x = rng.integers(-4, 5, (n, cols)).astype(np.float64)
    x[:, list(outliers)] *= 8
    x[:, list(dead)] = 0
    h = (2.0 / n) * (x.T @ x) * 4.0**scale
    w = rng.integers(-40, 41, (rows, cols)) * (_P / 16)
    return w.astype(np.float32), h.astype(np.float32)


def _case(w, h, percdamp=0.01, **params) -> Case:
    """A vector's case. The block size is pinned (128, the reference's, unless the vector
    sets it): left free, finding which axes the output depends on would run the oracle
    over every block size of every other free axis, 5x the generation time."""
    params.setdefault("blocksize", 128)
    return Case({"w": w, "hessian": h, "percdamp": np.float64(percdamp)}, params)


def _vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.gptq"))
    specs = []
    w, h = _layer(rng, 16, 32)
    specs.append(VectorSpec("per-channel 4-bit asymmetric: the reference defaults", ("ErrorFeedback", "Random"),
                            _case(w, h)))
    for bits in (2, 3, 8):
        w, h = _layer(rng, 8, 32)
        specs.append(VectorSpec(f"{bits} bits, group 16", ("ErrorFeedback", "Random"), _case(w, h, bits=bits, group=16)))
    for scheme in (s.value for s in rtn.Scheme if s is not rtn.Scheme.ASYMMETRIC):
        w, h = _layer(rng, 8, 32)
        specs.append(VectorSpec(f"{scheme}, group 16", ("ErrorFeedback",), _case(w, h, group=16, scheme=scheme)))
    w, h = _layer(rng, 8, 32, scale=5)
    specs.append(VectorSpec("mean diag H about 1000: relative dampening, not absolute", ("Dampening",),
                            _case(w, h, percdamp=0.1)))
    w, h = _layer(rng, 8, 32, scale=-4)
    specs.append(VectorSpec("mean diag H about 1/250, percdamp 0.05", ("Dampening",), _case(w, h, percdamp=0.05)))
    w, h = _layer(rng, 8, 32, outliers=(0, 9, 17, 30))
    specs.append(VectorSpec("the inverse Hessian's upper Cholesky factor (outlier channels couple the columns)",
                            ("InverseFactor", "ErrorFeedback"), _case(w, h, group=8)))
    w, h = _layer(rng, 8, 32, outliers=(5, 20, 21))
    for gp in (g.value for g in gptq.GroupParams):
        specs.append(VectorSpec(f"act-order, group 8, {gp} groups, blocksize 16", ("ActOrder", "GIdx", "GroupParams"),
                                _case(w, h, group=8, act_order=True, group_params=gp, blocksize=16)))
        specs.append(VectorSpec(f"group 8, {gp} groups, blocksize 16", ("GroupParams", "BlockUpdate"),
                                _case(w, h, group=8, group_params=gp, blocksize=16)))
    specs.append(VectorSpec("act-order per-channel", ("ActOrder",), _case(w, h, act_order=True)))
    w, h = _layer(rng, 8, 32, outliers=(2,))
    for bs in (8, 1):
        specs.append(VectorSpec(f"blocksize {bs}: the trailing update at every block's end", ("BlockUpdate",),
                                _case(w, h, group=16, blocksize=bs)))
    specs.append(VectorSpec("losses: (w - q)^2 / d^2 / 2 summed over each row", ("Loss",), _case(w, h, group=16)))
    w, h = _layer(rng, 8, 32, dead=(4, 5, 20))
    specs.append(VectorSpec("dead columns 4, 5, 20 (H_ii = 0): zeroed, H_ii = 1", ("DeadColumns",), _case(w, h)))
    specs.append(VectorSpec("dead columns, act-order, group 8 (every live H_ii is above 1: the dead 1s sort last)",
                            ("DeadColumns", "ActOrder"), _case(w, h, group=8, act_order=True)))
    w, h = _layer(rng, 8, 32)
    specs += [
        VectorSpec("MSE range search, group 16", ("GroupParams",), _case(w, h, group=16, search="mse")),
        VectorSpec("group 8 at 8 bits", ("Random",), _case(w, h, group=8, bits=8)),
        VectorSpec("float64 weights and Hessian", ("Random",), _case(w.astype(np.float64), h.astype(np.float64),
                                                                     group=16)),
        VectorSpec("one column", ("EmptyInput",), _case(w[:, :1], h[:1, :1])),
        VectorSpec("one row", ("EmptyInput",), _case(w[:1], h, group=16)),
        VectorSpec("all-zero weights: every group's range widened to [-1, 1]", ("DeadColumns",),
                   _case(np.zeros_like(w), h, group=16)),
        VectorSpec("every column dead: plain rounding of zeros", ("DeadColumns",),
                   _case(w, np.zeros_like(h), group=16)),
        VectorSpec("percdamp 0 on a positive definite Hessian", ("Dampening",), _case(w, h, percdamp=0.0)),
    ]
    bad = {
        "NaN in w": _case(np.where(np.arange(32) == 3, np.float32(np.nan), w), h),
        "Inf in the Hessian": _case(w, np.where(np.eye(32, dtype=bool), np.float32(np.inf), h)),
        "bits 5": _case(w, h, bits=5),
        "group 12 does not divide 32 columns": _case(w, h, group=12),
        "a Hessian that is not square": _case(w, h[:, :16]),
        "a Hessian of another size": _case(w, h[:16, :16]),
        "a Hessian that is not symmetric": _case(w, h + np.triu(np.ones_like(h), 1)),
        "a negative diagonal entry": _case(w, h - np.diag(np.diag(h)) * 2),
        "negative dampening": _case(w, h, percdamp=-0.01),
        "a singular Hessian with percdamp 0": _case(w, np.ones_like(h), percdamp=0.0),
        "1-d weights": _case(w[0], h),
        "integer weights": _case(w.astype(np.int32), h),
        "blocksize 0": _case(w, h, blocksize=0),
    }
    specs += [VectorSpec(f"{what} is rejected", ("InvalidInput",), case, "invalid") for what, case in bad.items()]
    specs += _edge_vectors(rng)
    return specs


def _rows(values, cols: int = 8, rows: int = 4) -> np.ndarray:
    """`rows` identical rows starting with `values`, zeros after: with H = I (no coupling
    between columns) every row takes the same decisions, so a wrong one diverges them all."""
    w = np.zeros((rows, cols), np.float32)
    w[:, :len(values)] = values
    return w


def _edge_vectors(rng) -> list[VectorSpec]:
    """Appended after the first vectors (their ids stay): the rounding ties, the range
    conventions, the dead-column orderings and the float16 intermediates that random
    layers do not reach (issue 14's adversary)."""
    eye = np.eye(8, dtype=np.float32)
    specs = [
        # scale 1.875 / 15 = 0.125: w / scale = 2.5 exactly, half to even 2 (half up: 3)
        VectorSpec("a weight exactly between two codes (H = I): half to even", ("RoundingTies",),
                   _case(_rows([0.3125, 1.875]), eye)),
        # -lo / scale = 0.3125 / 0.125 = 2.5: zero point 2 (half up: 3)
        VectorSpec("a zero point exactly between two integers (H = I): half to even", ("ZeroPointRounding",),
                   _case(_rows([-0.3125, 1.5625]), eye)),
        # compressed-tensors' asymmetric: w / scale + signed zero = 2.5 - 8 = -5.5, half to even -6
        VectorSpec("compressed-tensors' asymmetric: a code on a tie after the signed zero point (H = I)",
                   ("RoundingTies",), _case(_rows([0.3125, 1.875]), eye, scheme="asymmetric_compressed_tensors")),
        VectorSpec("GPTQ's symmetric on non-negative rows: lo stays 0 (H = I)", ("SymmetricConvention",),
                   _case(_rows([0.5, 1.0, 0.25, 0.75]), eye, scheme="symmetric")),
        # compressed-tensors keeps [0, 0]: the scale is float32's tiny, the asymmetric zero point 0 / 0 -> 0
        VectorSpec("all-zero weights, compressed-tensors' asymmetric: no [-1, 1] widening, zero point from 0 / 0",
                   ("AllZeroGroup",), _case(np.zeros((4, 8), np.float32), eye,
                                            scheme="asymmetric_compressed_tensors")),
        VectorSpec("all-zero weights, compressed-tensors' symmetric: no [-1, 1] widening",
                   ("AllZeroGroup",), _case(np.zeros((4, 8), np.float32), eye,
                                            scheme="symmetric_compressed_tensors")),
        # scales about 2^-32: above float32's tiny, far below its eps
        VectorSpec("weights about 2^-30: the scale floor is float32's tiny, not eps (H = I)", ("DegenerateScale",),
                   _case(_rows([2.0**-30, -(2.0**-29), 5 * 2.0**-34]), eye)),
    ]
    w, h = _layer(rng, 8, 32)
    specs += [VectorSpec(f"MSE range search at {b} bits, group 8", ("MseSearch", "GroupParams"),
                         _case(w, h, bits=b, group=8, search="mse")) for b in (3, 2)]
    # every even column dead and live diagonals about 0.2: the dead columns' 1 dominates the mean
    # diagonal (damping) and sorts before every live column (act-order)
    even = tuple(range(0, 32, 2))
    w, h = _layer(rng, 8, 32, outliers=(1,), dead=even, scale=-3)
    specs += [
        VectorSpec("dead even columns, live H_ii < 1, percdamp 0.1: the mean diagonal after the dead 1s",
                   ("Dampening", "DeadColumns"), _case(w, h, percdamp=0.1)),
        VectorSpec("dead even columns, live H_ii < 1, act-order, group 8: the dead 1s sort first",
                   ("ActOrder", "DeadColumns"), _case(w, h, percdamp=0.1, act_order=True, group=8)),
    ]
    w, h = _layer(rng, 8, 32, dead=(5, 9))
    w[:, 5] = 48 * (_P / 16)  # a dead column holds every row's maximum
    w[:, 9] = -48 * (_P / 16)  # and its minimum
    specs.append(VectorSpec("dead columns holding each row's extremes, per-channel: the range before zeroing",
                            ("DeadColumns", "GroupParams"), _case(w, h)))
    n = 64
    x = rng.integers(-4, 5, (n, 32)).astype(np.float64)
    x[:, 3] *= 2.0**-12  # H_33 about 2^-20: tiny, not dead
    w = (rng.integers(-40, 41, (8, 32)) * (_P / 16)).astype(np.float32)
    specs.append(VectorSpec("a nearly dead column (H_ii about 1e-6, not 0): kept, not zeroed", ("DeadColumns",),
                            _case(w, ((2.0 / n) * (x.T @ x)).astype(np.float32))))
    diag = np.array([1, 3, 2, 3, 2, 2, 3, 2, 3, 1, 2, 3, 1, 2, 3, 2], np.float32)
    w = (rng.integers(-40, 41, (4, 16)) * (_P / 16)).astype(np.float32)
    specs.append(VectorSpec("act-order with tied diagonal entries, group 8: ties keep column order (stable)",
                            ("ActOrder", "GIdx"), _case(w, np.diag(diag), act_order=True, group=8)))
    w, h = _layer(rng, 16, 64)
    specs.append(VectorSpec("weights about 2^-20 (below float16's normal range)", ("HalfPrecision",),
                            _case(w * np.float32(2.0**-14), h)))
    # an ill-conditioned Hessian (6 channels times 64 and a component shared by all): the
    # inverse factor rounded to float16 moves agreeing rows' losses by 2.4e-3 (the rule's
    # 1.5e-3); the float32 kernel by 8e-5. Its own generator: a layer chosen for that margin
    own = np.random.default_rng(1)
    x = own.integers(-4, 5, (64, 64)).astype(np.float64)
    x[:, :6] *= 64
    x += x[:, :1]
    w = (own.integers(-40, 41, (16, 64)) * (_P / 16)).astype(np.float32)
    specs.append(VectorSpec("an ill-conditioned Hessian (6 outlier channels and a shared one), group 16",
                            ("HalfPrecision", "InverseFactor"),
                            _case(w, ((2.0 / 64) * (x.T @ x)).astype(np.float32), group=16)))
    h = np.diag(np.array([2, 2, 2, -(2.0**-7)], np.float32))
    specs.append(VectorSpec("a small negative diagonal entry that dampening would mask is rejected",
                            ("InvalidInput",), _case(np.ones((2, 4), np.float32), h, percdamp=0.1), "invalid"))
    return specs


def _examples(supported):
    @st.composite
    def case(draw):
        params = draw(variant_params(supported), label="params")
        group = params["group"]
        cols = draw(st.sampled_from([c for c in (16, 32, 64) if group == -1 or c % group == 0] or [group]),
                    label="cols")
        rows = draw(st.sampled_from([1, 4, 8]), label="rows")
        seed = draw(st.integers(0, 2**32 - 1), label="seed")
        rng = np.random.default_rng(seed)
        outliers = tuple(rng.choice(cols, max(1, cols // 16), replace=False))
        dead = tuple(rng.choice(cols, draw(st.integers(0, 2), label="dead"), replace=False))
        w, h = _layer(rng, rows, cols, tokens=draw(st.sampled_from([2 * cols, 4 * cols]), label="tokens"),
                      outliers=outliers, dead=dead, scale=draw(st.integers(-3, 3), label="scale"))
        percdamp = draw(st.sampled_from([0.01, 0.05, 0.1]), label="percdamp")
        return _case(w, h, percdamp, **params)

    return case()


OPERATIONS = [
    AREA.exact("gptq", gptq.gptq, anchor="gptq", golden_float_bound=True,
               summary="(w [rows, cols], hessian [cols, cols]) -> (codes, scales, zeros, g_idx, losses) by GPTQ",
               variants=(BITS, GROUP, SCHEME, SEARCH, ACT_ORDER, GROUP_PARAMS, BLOCKSIZE), vectors=_vectors,
               examples=_examples, compare=GPTQ, outputs=("codes", "scales", "zeros", "g_idx", "losses")),
]

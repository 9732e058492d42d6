"""The oracles evaluated at a kernel's precision: the yardstick of the bounded rule.

A kernel at precision P (bfloat16, float16, float32) is judged by how far a
same-precision evaluation of the definition lands from the float64 oracle
(spec/conformance.md, "Bounded comparison"). These functions are that evaluation,
with the roundings a FlashAttention-style kernel makes and no others:

    inputs (q, k, v, sink logits)     rounded to P
    q * scale, then (q * scale) k^T   each stored at P (float32 accumulation), or
    q k^T, then (q k^T) * scale       each stored at P: whichever lands further
                                      from the oracle, output by output
    s / cap, tanh, * cap (softcap)    each stored at P
    softmax: max, exp, sum            float32
    probabilities before P V          rounded to P
    P V                               float32 accumulation, divided by the float32 sum
    output                            rounded to P; the LSE stays float32

The first order is FlashAttention's own test reference at the kernel's dtype
(`attention_ref(..., upcast=False)` in flash-attn's tests: q / sqrt(d) and the
einsum's scores in bf16, soft-capping in bf16, the softmax cast to bf16); the second
is Hugging Face's eager attention (`matmul(q, k^T) * scaling` in the activation
dtype). With k = 2 the rule is FlashAttention's; a kernel in either order is judged
by what its order can do. Fused kernels keep the logits in float32 and land well
inside.

`rounding` picks the rounding of every stored tensor: to nearest (the kernels' own,
and attention's yardstick), or IEEE 754's directed `up` (toward +inf) and `down`
(toward -inf). One round-to-nearest evaluation's error at an output is a single draw:
where the exact logit lies near the P grid its stored logit lands on it, and an
output with few elements (one query, one head) can be judged against an error near
zero. MLA's yardstick (few outputs, logits magnified by YaRN's mscale^2) therefore
also evaluates under both directed roundings, whose every rounding costs its full
size (spec/attention.md, "Tolerance").

At P = float64 each returns the oracle itself.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.attention import attend as _attend
from ref.formats.minifloat import PRECISIONS, Rounding, decode, encode, round_to

__all__ = ["ROUNDINGS", "attend_emulated", "rounder", "worse"]

# IEEE 754's round-to-nearest and its two directed rounding attributes.
ROUNDINGS = ("nearest", "up", "down")
_DIRECTED = {"up": Rounding.TOWARD_POSITIVE, "down": Rounding.TOWARD_NEGATIVE}


def _precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    return precision


def rounder(precision: str, rounding: str = "nearest") -> Callable[[ArrayLike], NDArray[np.float64]]:
    """x -> x stored at `precision` (float64 values), rounded to nearest-even or
    directed (`up` toward +inf, `down` toward -inf), overflowing as IEEE 754 says."""
    precision = _precision(precision)
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding: expected one of {ROUNDINGS}, got {rounding!r}")
    if rounding == "nearest" or precision == "float64":
        return partial(round_to, precision=precision)

    def rnd(x):
        codes = encode(np.asarray(x, np.float64), precision, rounding=_DIRECTED[rounding], overflow="nonsaturating")
        return decode(codes, precision).astype(np.float64)

    return rnd


def attend_emulated(precision: str, q, k, v, *, rounding: str = "nearest", sinks=None, mask=None, scale=None, causal=False, window_left=-1,
                    window_right=-1, sink_tokens=0, softcap=0.0, sink_in_lse="included", lse_base="e",
                    masked_lse="-inf") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` as a kernel at `precision` computes it (values returned as float64),
    every stored tensor rounded by `rounding` (one of ROUNDINGS)."""
    options = dict(sinks=sinks, mask=mask, scale=scale, causal=causal, window_left=window_left,
                   window_right=window_right, sink_tokens=sink_tokens, softcap=softcap, sink_in_lse=sink_in_lse,
                   lse_base=lse_base, masked_lse=masked_lse)
    exact = _attend.attend(q, k, v, **options)
    if _precision(precision) == "float64":
        return exact
    rnd = rounder(precision, rounding)
    both = [_attend._run(q, k, v, **options, work=np.float32, rnd=rnd, scale_first=first) for first in (True, False)]
    return worse(exact, *both)


def worse(exact, *evaluations):
    """Per output, the evaluation furthest from `exact` (largest error where exact is
    finite): the yardstick when an op has several standard low-precision forms."""
    picked = []
    for i, e in enumerate(exact):
        fin = np.isfinite(e)
        with np.errstate(invalid="ignore"):
            errors = [np.max(np.abs(ev[i] - e)[fin], initial=0.0) for ev in evaluations]
        picked.append(evaluations[int(np.argmax(errors))][i])
    return tuple(picked)

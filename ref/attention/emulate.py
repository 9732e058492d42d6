"""The oracles evaluated at a kernel's precision: the yardstick of the bounded rule.

A kernel at precision P (bfloat16, float16, float32) is judged by how far a
same-precision evaluation of the definition lands from the float64 oracle
(spec/conformance.md, "Bounded comparison"). These functions are that evaluation,
with the roundings a FlashAttention-style kernel makes and no others:

    inputs (q, k, v, sink logits)     rounded to P
    q k^T, scale, softcap, softmax    float32 (products of P values accumulate in float32)
    probabilities before P V          rounded to P (the kernel's P tile is in P)
    P V                               float32 accumulation, divided by the float32 sum
    output                            rounded to P; the LSE stays float32

At P = float64 each returns the oracle itself.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from numpy.typing import NDArray

from ref.attention import attend as _attend
from ref.formats.minifloat import PRECISIONS, round_to

__all__ = ["attend_emulated"]


def _precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    return precision


def attend_emulated(precision: str, q, k, v, *, sinks=None, mask=None, scale=None, causal=False, window_left=-1,
                    window_right=-1, sink_tokens=0, softcap=0.0, sink_in_lse="included", lse_base="e",
                    masked_lse="-inf") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` as a kernel at `precision` computes it (values returned as float64)."""
    options = dict(sinks=sinks, mask=mask, scale=scale, causal=causal, window_left=window_left,
                   window_right=window_right, sink_tokens=sink_tokens, softcap=softcap, sink_in_lse=sink_in_lse,
                   lse_base=lse_base, masked_lse=masked_lse)
    if _precision(precision) == "float64":
        return _attend.attend(q, k, v, **options)
    return _attend._run(q, k, v, **options, work=np.float32, rnd=partial(round_to, precision=precision))

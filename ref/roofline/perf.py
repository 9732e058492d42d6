"""The roofline: how long a phase of inference takes when compute and memory traffic
are the only costs, and what that implies for prefill, decode and batch size.

    phase_time(F, B, P, W) = max(F / P, B / W)      overlap="max" (the roofline)
                           = F / P + B / W          overlap="sum" (no overlap)
    ridge(hw, fmt)         = P / W                  FLOP per byte where the two meet

F: FLOPs of the phase, B: bytes it moves to or from memory, P: the hardware's dense
peak FLOP/s at the compute format, W: its memory bandwidth (bytes/s). A phase whose
intensity F / B is below the ridge is memory-bound (time B / W), above it
compute-bound (time F / P). Williams, Waterman, Patterson, "Roofline: an insightful
visual performance model for multicore architectures", CACM 52(4), 2009,
https://doi.org/10.1145/1498765.1498785.

Model level (Python floats; the accounting of ref.roofline.flops, kv and weights):
  prefill(model, hw, tokens)              flops of the prompt, weight bytes touched
                                          once plus the KV written, time, bound
  decode_step(model, hw, context, batch)  one token for each of `batch` sequences
                                          holding `context` tokens each
  max_batch(model, hw, context)           sequences of `context` tokens whose KV
                                          fits beside the weights
Not counted anywhere: activations (read and written between kernels), kernel launch
and scheduling overheads, communication; every figure is an upper bound on speed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import choice, integer, member
from ref.roofline.config import Model
from ref.roofline.flops import forward_flops
from ref.roofline.kv import kv_bytes, state_bytes
from ref.roofline.moe import moe_bytes_touched
from ref.roofline.operands import reals, same_shape
from ref.roofline.weights import weight_bytes

__all__ = ["Overlap", "PhaseEstimate", "decode_step", "max_batch", "phase_time", "prefill", "ridge"]

_OP = "roofline.phase_time"


class Overlap(enum.Enum):
    """How a phase's compute and memory times combine."""

    MAX = "max"  # the roofline: the two overlap perfectly, the slower one is the time
    SUM = "sum"  # no overlap: one waits for the other


def phase_time(flops: ArrayLike, bytes: ArrayLike, peak_flops: ArrayLike, bandwidth: ArrayLike, *,  # noqa: A002
               overlap: str = "max") -> NDArray[np.float64]:
    """Seconds a phase of `flops` FLOPs and `bytes` bytes of memory traffic takes on
    hardware of `peak_flops` FLOP/s and `bandwidth` bytes/s (elementwise, float64
    arrays of one shape; flops, bytes >= 0; peak_flops, bandwidth > 0): the larger of
    flops / peak_flops and bytes / bandwidth (overlap="max"), or their sum ("sum").
    No work takes no time."""
    how = member(overlap, Overlap, "overlap")
    f, b, p, w = reals(_OP, flops=flops, bytes=bytes, peak_flops=peak_flops, bandwidth=bandwidth)
    same_shape(_OP, flops=f, bytes=b, peak_flops=p, bandwidth=w)
    for name, arr, positive in (("flops", f, False), ("bytes", b, False), ("peak_flops", p, True),
                                ("bandwidth", w, True)):
        bad = arr <= 0 if positive else arr < 0
        if np.any(bad):
            what = "a positive rate" if positive else "a non-negative amount"
            raise ValueError(f"{_OP}: {name}: expected {what}, got {arr[bad].flat[0]}")
    with np.errstate(over="ignore"):
        compute, memory = f / p, b / w
        t = np.maximum(compute, memory) if how is Overlap.MAX else compute + memory
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{_OP}: flops, bytes, peak_flops, bandwidth: the time overflows float64")
    return t

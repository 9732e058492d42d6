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

from ref.arguments import integer, member, real
from ref.roofline.config import Model
from ref.roofline.flops import forward_flops
from ref.roofline.kv import kv_bytes, state_bytes
from ref.roofline.moe import moe_bytes_touched
from ref.roofline.counting import reals
from ref.roofline.weights import weight_bytes

__all__ = ["Overlap", "PhaseEstimate", "decode_step", "estimate", "max_batch", "phase_time", "prefill", "ridge"]

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
    f, b, p, w = reals(_OP, flops=flops, bytes=bytes, peak_flops=peak_flops, bandwidth=bandwidth).values()
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


def _peak(hw, fmt: str) -> float:
    if fmt not in hw.flops:
        raise ValueError(f"fmt: {hw.name} has no dense FLOP/s figure for {fmt!r}; it has {sorted(hw.flops)} "
                         "(fmt=None: the memory time alone)")
    return float(hw.flops[fmt])


def ridge(hw, fmt: str = "bfloat16") -> float:
    """The ridge point of `hw` at compute format `fmt` (a key of hw.flops): dense peak
    FLOP/s over memory bandwidth, in FLOP per byte. A phase of lower intensity is
    memory-bound there."""
    return _peak(hw, fmt) / float(hw.bandwidth)


@dataclass(frozen=True)
class PhaseEstimate:
    """A phase on the roofline: its FLOPs, the bytes it moves, the time the roofline
    allows (overlap "max"), which limit sets that time, and tokens per second (the
    tokens the phase produces or ingests, over the time)."""

    flops: float
    bytes: float
    time: float
    bound: str  # "compute" or "memory"
    tokens_per_s: float
    compute_time: float
    memory_time: float

    @property
    def intensity(self) -> float:
        """FLOP per byte moved."""
        return self.flops / self.bytes if self.bytes else float("inf")


def estimate(flops: float, nbytes: float, hw, fmt: str | None, tokens: int) -> PhaseEstimate:
    """The roofline estimate of a phase of `flops` FLOPs moving `nbytes` bytes on `hw`
    at compute format `fmt` (a key of hw.flops) that handles `tokens` tokens.
    fmt=None, for hardware without a published dense FLOP/s figure: the memory time
    alone (compute_time NaN, bound "memory"), a lower bound on the time."""
    bandwidth = float(hw.bandwidth)
    if fmt is None:
        t = float(nbytes) / bandwidth
        return PhaseEstimate(float(flops), float(nbytes), t, "memory", tokens / t if t > 0 else float("inf"),
                             float("nan"), t)
    peak = _peak(hw, fmt)
    t = float(phase_time(np.float64(flops), np.float64(nbytes), np.float64(peak), np.float64(bandwidth)))
    compute, memory = flops / peak, nbytes / bandwidth
    return PhaseEstimate(float(flops), float(nbytes), t, "compute" if compute >= memory else "memory",
                         tokens / t if t > 0 else float("inf"), compute, memory)


def prefill(model: Model, hw, tokens: int, *, fmt: str | None = "bfloat16", weight_format: str = "bfloat16",
            kv_bits: int = 16, state_bits: int = 32, causal: str = "exact", lm_head: str = "last",
            mla: str = "naive") -> PhaseEstimate:
    """A prompt of `tokens` tokens in one forward (no cache before it) on `hw` at compute
    format `fmt`: FLOPs from forward_flops(tokens, context 0, causal, lm_head, mla=...;
    MLA layers decompress their latents, as engines' prefill kernels do); bytes the
    weights touched once (each MoE layer's expected experts for `tokens` tokens) plus
    the KV cache and recurrent state written. tokens_per_s: prompt tokens per second.
    No tokens: no forward, zero FLOPs, bytes and time."""
    tokens = integer(tokens, "tokens", minimum=0)
    flops = forward_flops(model, tokens, 0, causal, lm_head, mla=mla)
    nbytes = 0 if tokens == 0 else (moe_bytes_touched(model, tokens, weight_format) + kv_bytes(model, tokens, kv_bits)
                                    + state_bytes(model, state_bits))  # no prompt: no forward
    return estimate(flops, nbytes, hw, fmt, tokens)


def decode_step(model: Model, hw, context: int, batch: int = 1, *, fmt: str | None = "bfloat16",
                weight_format: str = "bfloat16", kv_bits: int = 16, state_bits: int = 32,
                embedding: str = "rows", mla: str = "absorbed") -> PhaseEstimate:
    """One decode step of `batch` sequences, each with `context` tokens cached: FLOPs
    batch * forward_flops(1 token, context, mla=...: MLA layers absorbed by default, as
    FlashMLA and vLLM decode, instead of decompressing every cached latent at every
    step, which costs DeepSeek-V3 82 TFLOP a token at 40k); bytes read the weights touched
    (moe_bytes_touched(model, batch, weight_format, embedding=...): every matrix once,
    each MoE layer's expected distinct experts, the embedding rows looked up) plus,
    per sequence, its KV cache at `context` tokens (kv_bits per element) and its
    recurrent state (state_bits). The new token's KV write is not counted. tokens_per_s:
    batch / time, the generation rate of the whole batch."""
    context = integer(context, "context", minimum=0)
    batch = integer(batch, "batch", minimum=1)
    flops = batch * forward_flops(model, 1, context, mla=mla)
    per_sequence = kv_bytes(model, context, kv_bits) + state_bytes(model, state_bits)
    nbytes = moe_bytes_touched(model, batch, weight_format, embedding=embedding) + batch * per_sequence
    return estimate(flops, nbytes, hw, fmt, batch)


def max_batch(model: Model, hw, context: int, *, weight_format: str = "bfloat16", kv_bits: int = 16,
              state_bits: int = 32, reserve: float = 0.0) -> int:
    """How many sequences of `context` tokens fit in `hw`'s memory beside one copy of
    the weights: floor((capacity - reserve - weight_bytes) / (KV at context + state)),
    0 when the weights alone do not fit. `reserve`: bytes kept for activations and the
    runtime (0: none, an upper bound)."""
    context = integer(context, "context", minimum=0)
    reserve = real(reserve, "reserve", positive=False)
    if reserve < 0:
        raise ValueError(f"reserve: expected non-negative bytes, got {reserve}")
    per_sequence = kv_bytes(model, context, kv_bits) + state_bytes(model, state_bits)
    if per_sequence == 0:
        raise ValueError(f"context: {model.name} keeps nothing per sequence at context {context}: "
                         "the batch is unbounded by memory")
    free = float(hw.capacity) - reserve - weight_bytes(model, weight_format)
    return max(int(free // per_sequence), 0)

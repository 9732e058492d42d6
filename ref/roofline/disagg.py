"""Disaggregated serving: prefill on one machine, decode on another, the KV cache sent
between them. Sending pays when the transfer takes less time than recomputing the
prefill where the decode runs.

    transfer_time(B, link) = B / link.bytes_per_s   (one direction, no protocol overhead)
    handoff(model, hw, link, context)                the KV bytes, their transfer time and
                                                     the prefill's roofline time
    break_even(model, hw, link)                      the contexts where the winner changes

The prefill's time is the roofline's (perf.prefill): memory-bound for short prompts
(the weights read once), compute-bound for long ones, its attention growing as the
square of the context; the transfer grows linearly. So a slow link can lose to
recomputation for mid-length prompts and win again for long ones: `break_even` lists
every crossing. Overlapping the transfer with the prefill layer by layer (as
production systems do) hides part of it; not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from ref.arguments import integer, real
from ref.roofline.config import Model
from ref.roofline.kv import kv_bytes, state_bytes
from ref.roofline.perf import prefill

__all__ = ["Handoff", "break_even", "handoff", "transfer_time"]


def transfer_time(nbytes: float, link) -> float:
    """Seconds to send `nbytes` bytes one way over `link` (its per-direction
    bytes_per_s)."""
    nbytes = real(nbytes, "nbytes", positive=False)
    if nbytes < 0:
        raise ValueError(f"nbytes: expected non-negative bytes, got {nbytes}")
    return nbytes / real(link.bytes_per_s, "link.bytes_per_s")


@dataclass(frozen=True)
class Handoff:
    """One prompt's handoff: the cache sent (KV and recurrent state), how long it takes,
    and how long recomputing the prefill takes instead."""

    context: int
    kv_bytes: int
    transfer_s: float
    prefill_s: float

    @property
    def transfer_wins(self) -> bool:
        return self.transfer_s < self.prefill_s


def handoff(model: Model, hw, link, context: int, *, fmt: str = "bfloat16", weight_format: str = "bfloat16",
            kv_bits: int = 16, state_bits: int = 32) -> Handoff:
    """The cache of a `context`-token prompt sent over `link` against recomputing its
    prefill on `hw` at compute format `fmt` (perf.prefill, the roofline's time)."""
    context = integer(context, "context", minimum=0)
    cache = kv_bytes(model, context, kv_bits) + state_bytes(model, state_bits) * (context > 0)
    recompute = prefill(model, hw, context, fmt=fmt, weight_format=weight_format, kv_bits=kv_bits,
                        state_bits=state_bits).time
    return Handoff(context, cache, transfer_time(cache, link), recompute)


def break_even(model: Model, hw, link, *, fmt: str = "bfloat16", weight_format: str = "bfloat16",
               kv_bits: int = 16, state_bits: int = 32, max_context: int = 1 << 22) -> list[int]:
    """Every context c in [1, max_context] where the winner changes: transfer_wins at c
    differs from at c - 1 (context 1's winner is `handoff(..., 1).transfer_wins`). Found
    on a grid of powers of two, then bisected: a crossing between two grid points
    that cross back before the next one would be missed (the two curves are a line
    and a roofline of a quadratic, which cross at most a few times)."""
    max_context = integer(max_context, "max_context", minimum=1)

    def wins(c: int) -> bool:
        return handoff(model, hw, link, c, fmt=fmt, weight_format=weight_format, kv_bits=kv_bits,
                       state_bits=state_bits).transfer_wins

    grid = sorted({1 << i for i in range(max_context.bit_length()) if 1 << i <= max_context} | {max_context})
    found, prev_c, prev = [], grid[0], wins(grid[0])
    for c in grid[1:]:
        now = wins(c)
        if now != prev:
            lo, hi = prev_c, c  # wins(lo) == prev != wins(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if wins(mid) == prev else (lo, mid)
            found.append(hi)
        prev_c, prev = c, now
    return found

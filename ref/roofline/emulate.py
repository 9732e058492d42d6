"""The roofline's bounded ops evaluated at a kernel's precision: the yardstick of the
bounded rule (spec/conformance.md, "Bounded comparison").

Each function takes `precision` first and then exactly its oracle's arguments and
evaluates the oracle's formula step by step, every intermediate result stored at P
(a function such as log1p evaluated exactly on its stored argument, then its result
stored at P: a correctly rounded library). The inputs are read at float32 when P is
narrower (float16 cannot hold a FLOP count or a bandwidth, 65504 being its largest
value, and no kernel loads a token count as bfloat16), at P otherwise. At float64
each returns the oracle itself.

expected_experts   p = k / E, l = log1p(-p), t = B * l, r = -expm1(t), E * r
expected_tokens    l = log(alpha), t = (k + 1) * l, n = -expm1(t), d = 1 - alpha, n / d
                   (k + 1 where alpha is 1)
speedup            expected_tokens as above, then k * cost, + 1, the quotient
phase_time         F / P and B / W, then their max or sum

The forms are the stable ones the oracles use: a kernel at P that evaluates
(1 - k/E)^B or (1 - alpha^(k+1)) / (1 - alpha) as written cancels where the stable
form does not, and is judged by what the stable form achieves at P (the NearOne and
WithoutReplacement vectors).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ref.arguments import choice
from ref.formats.minifloat import PRECISIONS, round_to
from ref.roofline.moe import expected_experts as expected_experts_exact
from ref.roofline.perf import Overlap
from ref.roofline.perf import phase_time as phase_time_exact
from ref.roofline.specdec import expected_tokens as expected_tokens_exact
from ref.roofline.specdec import speedup as speedup_exact

__all__ = ["expected_experts", "expected_tokens", "phase_time", "speedup"]


def _steps(precision: str):
    """(read, store): inputs as a kernel at `precision` reads them, results as it stores them."""
    choice(precision, "precision", PRECISIONS)
    wide = precision if precision in ("float64", "float32") else "float32"

    def read(x) -> NDArray[np.float64]:
        return round_to(np.asarray(x, np.float64), wide)

    def store(x) -> NDArray[np.float64]:
        return round_to(x, precision)

    return read, store


def expected_experts(precision: str, experts, top_k, tokens) -> NDArray[np.float64]:
    exact = expected_experts_exact(experts, top_k, tokens)  # checks every argument
    if precision == "float64":
        return exact
    read, store = _steps(precision)
    e, k, b = read(experts), read(top_k), read(tokens)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_miss = store(np.log1p(-store(k / e)))
        t = np.where(b > 0, store(b * log_miss), 0.0)
        return store(e * store(np.abs(np.expm1(t))))


def _sum_of_powers(read, store, alpha, k) -> NDArray[np.float64]:
    a, n = read(alpha), read(np.asarray(k, np.float64) + 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        closed = store(store(-np.expm1(store(n * store(np.log(a))))) / store(1.0 - a))
    return np.where(a == 1.0, store(n), closed)


def expected_tokens(precision: str, alpha, k) -> NDArray[np.float64]:
    exact = expected_tokens_exact(alpha, k)
    if precision == "float64":
        return exact
    read, store = _steps(precision)
    return _sum_of_powers(read, store, alpha, k)


def speedup(precision: str, alpha, k, cost) -> NDArray[np.float64]:
    exact = speedup_exact(alpha, k, cost)
    if precision == "float64":
        return exact
    read, store = _steps(precision)
    tokens = _sum_of_powers(read, store, alpha, k)
    with np.errstate(over="ignore", invalid="ignore"):
        return store(tokens / store(store(read(k) * read(cost)) + 1.0))


def phase_time(precision: str, flops, bytes, peak_flops, bandwidth, *, overlap: str = "max"  # noqa: A002
               ) -> NDArray[np.float64]:
    exact = phase_time_exact(flops, bytes, peak_flops, bandwidth, overlap=overlap)
    if precision == "float64":
        return exact
    read, store = _steps(precision)
    with np.errstate(over="ignore", invalid="ignore"):
        compute = store(read(flops) / read(peak_flops))
        memory = store(read(bytes) / read(bandwidth))
        both = np.maximum(compute, memory) if Overlap(overlap) is Overlap.MAX else store(compute + memory)
    return both

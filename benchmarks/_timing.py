"""Shared by the benchmark scripts."""

from __future__ import annotations

import time


def best(fn, repeat: int) -> float:
    """The fastest of `repeat` wall-clock runs of fn(), in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)

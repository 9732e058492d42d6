"""The bounded comparison: judge a kernel at precision P by what P can do.

For each output of an op (attention's `out`, its `lse`), with E the float64 oracle,
M the oracle evaluated at P (the op's emulation: inputs and the technique's
intermediates rounded to P, accumulation as stated) and A the candidate:

    err(X) = max |X - E|            over the elements where E is finite
    pass   iff  err(A) <= k * err(M) + floor(P)

    unit(P): 2^-8 bfloat16, 2^-11 float16, 2^-20 float32 (many roundings, not
             one), 2^-44 float64 (room for another summation order)
    floor(P), by the bound's scale, with T = max |E|:
      "relative"  floor * unit(P) * T
      "absolute"  floor * unit(P) * max(1, T)
      "log"       floor * (unit(P) + min(unit(P), 2^-20) * T)   for log-sum-exps:
                  a normalizer summed at P is off by unit(P) in the log whatever its
                  size, while the log itself is kept in float32, so an LSE stored
                  at P (error unit(P) * T) is not excused

Where E is not finite the candidate must match it: NaN where E is NaN, the same
infinity where E is infinite, and a finite A must not be NaN or infinite anywhere
E is finite. This is the FlashAttention test rule (error at most twice that of a
same-precision PyTorch reference, plus a floor for pure rounding noise), made
precise; `k` and `floor` are per op, in the catalog, and stated in the spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ref.formats.minifloat import PRECISIONS
from ref.testing.compare import Comparison, Mismatch, float_bits

__all__ = ["Bound", "FLOOR_UNITS", "compare_bounded", "compare_bounded_parts", "precision_of", "ratio"]

FLOOR_UNITS = {"float64": 2.0**-44, "float32": 2.0**-20, "float16": 2.0**-11, "bfloat16": 2.0**-8}
_SCALES = ("relative", "absolute", "log")


@dataclass(frozen=True)
class Bound:
    """A bounded op's tolerance rule for one output: err <= k * err(emulated) + floor."""

    k: float = 2.0
    floor: float = 2.0  # in units of FLOOR_UNITS[precision] * scale
    scale: str = "relative"

    def __post_init__(self):
        if not (self.k >= 1 and self.floor >= 0):
            raise ValueError(f"Bound: expected k >= 1 and floor >= 0, got k={self.k}, floor={self.floor}")
        if self.scale not in _SCALES:
            raise ValueError(f"Bound.scale: expected one of {_SCALES}, got {self.scale!r}")

    def floor_at(self, precision: str, top: float) -> float:
        """The floor for a candidate at `precision` whose oracle output peaks at `top`."""
        unit = FLOOR_UNITS[precision]
        if self.scale == "relative":
            return self.floor * unit * top
        if self.scale == "absolute":
            return self.floor * unit * max(1.0, top)
        return self.floor * (unit + min(unit, FLOOR_UNITS["float32"]) * top)  # "log"


def precision_of(arr: ArrayLike) -> str:
    """The precision an output array was computed at, read from its dtype."""
    name = np.asarray(arr).dtype.name
    if name not in PRECISIONS:
        raise ValueError(f"output dtype {name} is not one of {PRECISIONS}; declare the precision "
                         f"(PRECISION in the implementation)")
    return name


def _float64(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and not arr.dtype.name.startswith(("bfloat16", "float")):
        raise TypeError(f"{name}: expected a float array, got {arr.dtype}")  # ml_dtypes' floats included
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: cannot read {arr.dtype} as float64 ({exc})") from None


def compare_bounded(
    expected: ArrayLike,
    emulated: ArrayLike,
    actual: ArrayLike,
    *,
    precision: str,
    bound: Bound = Bound(),
    part: str = "",
) -> Comparison:
    """Judge `actual` against the float64 `expected` by the bounded rule at `precision`.

    `worst` is err(actual) and `tolerance` the bound; the first mismatch is the
    element with the largest error (or the first non-finite disagreement).
    """
    if precision not in FLOOR_UNITS:
        raise ValueError(f"precision: expected one of {tuple(FLOOR_UNITS)}, got {precision!r}")
    unit = "abs error"
    e = _float64(expected, "expected")
    try:
        a = _float64(actual, "actual")
    except TypeError as exc:
        return Comparison(False, 0, 0, np.inf, unit, problem=str(exc), part=part)
    a_dtype = np.asarray(actual).dtype
    if a.shape != e.shape:
        return Comparison(False, 0, 0, np.inf, unit, part=part,
                          problem=f"shape {a.shape} differs from the expected {e.shape}")
    m = _float64(emulated, "emulated")
    if m.shape != e.shape:
        raise ValueError(f"emulated: expected shape {e.shape} like the oracle's output, got {m.shape}")

    finite = np.isfinite(e)
    special_bad = ~finite & ~((np.isnan(e) & np.isnan(a)) | (e == a))
    wild = finite & ~np.isfinite(a)
    if special_bad.any() or wild.any():
        idx = tuple(int(i) for i in np.argwhere(special_bad | wild)[0])
        n = int((special_bad | wild).sum())
        return Comparison(False, e.size, n, np.inf, unit, part=part,
                          first=Mismatch(idx, repr(float(e[idx])), repr(float(a[idx])),
                                         float_bits(e[idx], np.float64), float_bits(a[idx], a_dtype)),
                          problem=f"{n} of {e.size} elements are NaN or infinite where the oracle's are finite, "
                                  f"or miss the oracle's NaN or infinity (no tolerance applies)")
    if not finite.any():
        return Comparison(True, e.size, 0, 0.0, unit, 0.0, part=part)
    with np.errstate(invalid="ignore"):
        err_a = np.where(finite, np.abs(a - e), 0.0)
        err_m = float(np.max(np.where(finite, np.abs(m - e), 0.0)))
    top = float(np.max(np.abs(e[finite])))
    tol = bound.k * err_m + bound.floor_at(precision, top)
    worst = float(err_a.max())
    bad = err_a > tol
    if not bad.any():
        return Comparison(True, e.size, 0, worst, unit, tol, part=part)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(err_a)), e.shape))
    first = Mismatch(idx, repr(float(e[idx])),
                     f"{float(a[idx])!r} (a {precision} evaluation of the oracle gives {float(m[idx])!r})",
                     float_bits(e[idx], np.float64), float_bits(a[idx], a_dtype))
    return Comparison(False, e.size, int(bad.sum()), worst, unit, tol, first=first, part=part)


def compare_bounded_parts(
    expected: Sequence[ArrayLike],
    emulated: Sequence[ArrayLike],
    actual,
    *,
    names: Sequence[str],
    bounds: Mapping[str, Bound],
    precision: str,
) -> Comparison:
    """The bounded rule over several outputs (a tuple); the first failing output's
    comparison, else the one closest to its bound."""
    if not isinstance(actual, tuple) or len(actual) != len(names):
        return Comparison(False, 0, 0, np.inf, "abs error", problem=f"expected a tuple of outputs {tuple(names)}")
    best = None
    for name, e, m, a in zip(names, expected, emulated, actual):
        cmp = compare_bounded(e, m, a, precision=precision, bound=bounds[name], part=name)
        if not cmp.ok:
            return cmp
        if best is None or ratio(cmp) > ratio(best):
            best = cmp
    return best


def ratio(cmp: Comparison) -> float:
    """A bounded comparison's error as a fraction of its tolerance."""
    if cmp.worst == 0:
        return 0.0
    return cmp.worst / cmp.tolerance if cmp.tolerance > 0 else np.inf

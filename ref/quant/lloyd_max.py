"""Lloyd-Max codebooks for the standard Gaussian: the 2^b reconstruction levels and
2^b - 1 thresholds of the minimum-MSE scalar quantizer of X ~ N(0, 1), found by
Lloyd's iteration with exact Gaussian integrals (math.erf, math.exp).

  cells         (t_{i-1}, t_i], t_0 = -inf, t_{2^b} = +inf
  thresholds    t_i = (c_i + c_{i+1}) / 2                       (nearest level)
  levels        c_i = E[X | t_{i-1} < X <= t_i]
                    = (phi(t_{i-1}) - phi(t_i)) / (Phi(t_i) - Phi(t_{i-1}))   (centroid)
  MSE           sum_i int_{t_{i-1}}^{t_i} (x - c_i)^2 phi(x) dx
                int_a^b x^2 phi = (Phi(b) - Phi(a)) + a phi(a) - b phi(b)
                int_a^b x phi   = phi(a) - phi(b)

The iteration starts from the high-rate compander's levels (point density
proportional to phi^(1/3), Panter and Dite 1951: the quantiles (i + 1/2) / 2^b of
N(0, 3)); any start converges, the Gaussian being log-concave (a unique fixed point,
Fleischer 1964), this one in fewer rounds and stops when no level moves by more than
`tol` (default 1e-13) or after `max_iter` rounds (an error). The published MSEs
0.3634, 0.1175, 0.03454, 0.009497 (b = 1..4; Max 1960) are checks in the tests,
not inputs. Cells are evaluated on |x| by symmetry of the tails (erfc) so that
the outer cells keep their relative precision.

Reference: J. Max, "Quantizing for minimum distortion", IRE Trans. Inf. Theory 6(1),
1960; S. P. Lloyd, "Least squares quantization in PCM", IEEE Trans. Inf. Theory 28(2),
1982.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, real

__all__ = ["codebook", "gaussian_mse", "quantize"]

_ERFC = np.frompyfunc(math.erfc, 1, 1)
_EXP = np.frompyfunc(math.exp, 1, 1)
SQRT2 = math.sqrt(2.0)
_START = statistics.NormalDist(0.0, math.sqrt(3.0))  # point density phi^(1/3): the quantiles of N(0, 3)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _phi(t: NDArray) -> NDArray:
    """The standard normal density; 0 at +-inf."""
    out = np.zeros(t.shape)
    fin = np.isfinite(t)
    out[fin] = _EXP(-0.5 * t[fin] ** 2).astype(np.float64) * INV_SQRT_2PI
    return out


def _upper(t: NDArray) -> NDArray:
    """P(X > t) = erfc(t / sqrt 2) / 2, exact in the upper tail (1 at -inf, 0 at +inf)."""
    return (_ERFC(t / SQRT2).astype(np.float64) * 0.5) if t.size else np.zeros(0)


def _cells(thresholds: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """(p, m1, m2): each cell's probability, int x phi and int x^2 phi."""
    t = np.concatenate([[-np.inf], thresholds, [np.inf]])  # [L + 1]
    a, b = t[:-1], t[1:]
    p = _upper(a) - _upper(b)
    m1 = _phi(a) - _phi(b)
    with np.errstate(invalid="ignore"):
        ta = np.where(np.isfinite(a), a * _phi(a), 0.0)
        tb = np.where(np.isfinite(b), b * _phi(b), 0.0)
    return p, m1, p + ta - tb


def gaussian_mse(levels: ArrayLike, thresholds: ArrayLike) -> float:
    """E[(X - Q(X))^2] for X ~ N(0, 1), Q mapping cell i (between thresholds) to levels[i]."""
    c = np.asarray(levels, np.float64)
    t = np.asarray(thresholds, np.float64)
    if c.ndim != 1 or t.shape != (c.size - 1,) or np.any(np.diff(t) <= 0):
        raise ValueError(f"thresholds: expected {c.size - 1} increasing thresholds, got shape {t.shape}")
    p, m1, m2 = _cells(t)
    return float(np.sum(m2 - 2 * c * m1 + c * c * p))


def codebook(bits: int, *, tol: float = 1e-13, max_iter: int = 200000) -> tuple[NDArray, NDArray, float]:
    """The Lloyd-Max quantizer of N(0, 1) with 2^bits levels -> (levels [2^b], thresholds
    [2^b - 1], mse), levels increasing and symmetric about 0."""
    bits = integer(bits, "bits", minimum=1, maximum=6)  # 7 bits: about 17 s; Lloyd slows as levels multiply
    tol = real(tol, "tol")
    max_iter = integer(max_iter, "max_iter", minimum=1)
    n = 1 << bits
    c = np.array([_START.inv_cdf((i + 0.5) / n) for i in range(n)])  # [n] the compander's levels
    for _ in range(max_iter):
        t = (c[:-1] + c[1:]) / 2
        p, m1, _ = _cells(t)
        new = m1 / p
        new = (new - new[::-1]) / 2  # the exact symmetry, kept against rounding drift
        moved = np.max(np.abs(new - c))
        c = new
        if moved <= tol:
            t = (c[:-1] + c[1:]) / 2
            return c, t, gaussian_mse(c, t)
    raise ValueError(f"max_iter: Lloyd's iteration moved levels by {moved:.3g} after {max_iter} rounds")


def quantize(x: ArrayLike, levels: ArrayLike) -> NDArray[np.int64]:
    """x [...] -> the index of the nearest level [...]; a point exactly between two levels
    goes to the lower one (cells (t_{i-1}, t_i])."""
    c = np.asarray(levels, np.float64)
    if c.ndim != 1 or c.size < 1 or np.any(np.diff(c) <= 0):
        raise ValueError(f"levels: expected an increasing 1-d array, got {c!r}")
    x = np.asarray(x, np.float64)
    if np.any(np.isnan(x)):
        raise ValueError("x: NaN has no nearest level")
    t = (c[:-1] + c[1:]) / 2
    return np.searchsorted(t, x, side="left").astype(np.int64)

"""Lloyd-Max codebooks for one coordinate of a uniformly random point on the sphere
S^{d-1} (TurboQuant's scalar quantizer, spec/kv.md#turboquant-codebook).

  density       f_d(x) = (1 - x^2)^a / B(1/2, a + 1),  a = (d - 3) / 2,  x in [-1, 1]
                ((X + 1) / 2 ~ Beta(a + 1, a + 1); f_d tends to the N(0, 1/d) density)
  mass          P(s < X <= t) = I_{(1-s)/2}(a+1, a+1) - I_{(1-t)/2}(a+1, a+1)   (upper tails)
  first moment  int_s^t x f_d = [(1 - s^2)^(a+1) - (1 - t^2)^(a+1)] / (2 (a + 1) B(1/2, a + 1))
  second moment int_s^t x^2 f_d = P_a(s, t) - (a + 1) / (a + 3/2) * P_{a+1}(s, t)
                (x^2 = 1 - (1 - x^2), and B(1/2, a + 2) / B(1/2, a + 1) = (a + 1) / (a + 3/2))

Lloyd's iteration alternates thresholds t_i = (c_i + c_{i+1}) / 2 and levels
c_i = E[X | t_{i-1} < X <= t_i] from the quantiles (i + 1/2) / 2^b of f_d until no
level moves by more than `tol` (1e-14: below that, rounding noise of about
2e-15 at d = 2; a looser stop would let another scipy's last bits change where the
iteration stops). For d >= 3 the density is log-concave, so
the fixed point is unique (Fleischer 1964); for d = 2 (the arcsine law) it is the
fixed point this start reaches. bits = 0 is the one-level codebook {0} (the mean),
which TurboQuant_prod uses at b = 1.

The MSE is per coordinate; d times it is the MSE of a unit vector, D_mse(b, d),
which tends to the Gaussian Lloyd-Max MSE (0.3634, 0.1175, 0.03454, 0.009497 for
b = 1..4; ref.quant.lloyd_max) as d grows: a check in the tests, not an input.

Reference: A. Zandieh, M. Daliri, M. Hadian, V. Mirrokni, "TurboQuant: Online
Vector Quantization with Near-optimal Distortion Rate", arXiv 2504.19874 (Lemma 1,
eq. (4), Algorithm 1).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ref.arguments import integer, real

__all__ = ["MAX_BITS", "MAX_DIM", "coordinate_mse", "lloyd_codebook"]

MAX_BITS = 6  # 7 bits: about 15 s; Lloyd slows as levels multiply
MAX_DIM = 1 << 20


def _upper(t: NDArray, a: float) -> NDArray:
    """P(X > t) for the exponent a (1 at t <= -1, 0 at t >= 1)."""
    return special.betainc(a + 1, a + 1, np.clip((1 - t) / 2, 0.0, 1.0))


def _cells(thresholds: NDArray, a: float) -> tuple[NDArray, NDArray, NDArray]:
    """(p, m1, m2) of each cell: its mass, int x f_d and int x^2 f_d."""
    t = np.concatenate([[-1.0], thresholds, [1.0]])  # [L + 1]
    lo, hi = t[:-1], t[1:]
    p = _upper(lo, a) - _upper(hi, a)
    log_norm = special.betaln(0.5, a + 1) + math.log(2 * (a + 1))
    with np.errstate(divide="ignore"):
        g = np.exp((a + 1) * np.log1p(-np.minimum(t * t, 1.0)) - log_norm)  # (1 - t^2)^(a+1) / norm
    m1 = g[:-1] - g[1:]
    p_next = _upper(lo, a + 1) - _upper(hi, a + 1)
    m2 = p - (a + 1) / (a + 1.5) * p_next
    return p, m1, m2


def coordinate_mse(levels: NDArray, thresholds: NDArray, dim: int) -> float:
    """E[(X - Q(X))^2] for one coordinate X of a uniform point on S^{dim-1}."""
    a = (integer(dim, "dim", minimum=2, maximum=MAX_DIM) - 3) / 2
    c = np.asarray(levels, np.float64)
    p, m1, m2 = _cells(np.asarray(thresholds, np.float64), a)
    return float(np.sum(m2 - 2 * c * m1 + c * c * p))


def lloyd_codebook(bits: int, dim: int, *, tol: float = 1e-14,
                   max_iter: int = 1_000_000) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """The Lloyd-Max quantizer of one sphere coordinate -> (levels [2^b] increasing and
    symmetric about 0, thresholds [2^b - 1] (midpoints), per-coordinate MSE)."""
    bits = integer(bits, "bits", minimum=0, maximum=MAX_BITS)
    dim = integer(dim, "dim", minimum=2, maximum=MAX_DIM)
    tol = real(tol, "tol")
    max_iter = integer(max_iter, "max_iter", minimum=1)
    a = (dim - 3) / 2
    n = 1 << bits
    u = (np.arange(n) + 0.5) / n
    c = 2 * special.betaincinv(a + 1, a + 1, u) - 1  # [n] the quantiles of f_d
    for _ in range(max_iter):
        t = (c[:-1] + c[1:]) / 2
        p, m1, _ = _cells(t, a)
        new = m1 / p
        new = (new - new[::-1]) / 2  # exact symmetry, kept against rounding drift
        moved = float(np.max(np.abs(new - c)))
        c = new
        if moved <= tol:
            t = (c[:-1] + c[1:]) / 2
            return c, t, coordinate_mse(c, t, dim)
    raise ValueError(f"max_iter: Lloyd's iteration moved levels by {moved:.3g} after {max_iter} rounds")

"""TurboQuant for the default run, written independently of the oracles (this module
imports nothing from ref): the codebook by Lloyd's iteration with the cell integrals
taken by composite Gauss-Legendre quadrature in the angle theta (x = sin theta, where
the sphere-coordinate density becomes cos^(d-2) theta, smooth for every d >= 2), not
by incomplete beta functions; encoding rotates first and divides by the norm after.

The steps are public so that the bug corpus (tests/corpus/kv_turboquant.py) builds
its wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

NAME = "numpy TurboQuant (quadrature codebook)"
VERSION = np.__version__

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(32)
_PIECES = 8  # subintervals per cell
_CACHE: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _integrals(edges: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cell [x_i, x_{i+1}]: (int cos^(d-2) theta d theta, int sin theta cos^(d-2) theta d theta)
    over theta in [asin x_i, asin x_{i+1}] (the mass and first moment, unnormalized)."""
    th = np.arcsin(np.clip(edges, -1, 1))
    lo, hi = th[:-1, None], th[1:, None]  # [L, 1]
    k = np.arange(_PIECES)
    a = lo + (hi - lo) * k / _PIECES  # [L, P]
    h = (hi - lo) / _PIECES  # [L, 1]
    t = a[..., None] + h[..., None] * (_NODES + 1) / 2  # [L, P, N]
    w = _WEIGHTS * h[..., None] / 2
    dens = np.cos(t) ** (dim - 2)
    return np.sum(w * dens, axis=(1, 2)), np.sum(w * dens * np.sin(t), axis=(1, 2))


def levels_for(bits: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's iteration from the quantiles (i + 1/2) / 2^b of the coordinate law."""
    key = (bits, dim)
    if key in _CACHE:
        return _CACHE[key]
    n = 1 << bits
    a = (dim - 1) / 2  # (x + 1) / 2 ~ Beta((d - 1)/2, (d - 1)/2)
    c = 2 * stats.beta.ppf((np.arange(n) + 0.5) / n, a, a) - 1
    for _ in range(1_000_000):
        t = midpoints(c)
        p, m1 = _integrals(np.concatenate([[-1.0], t, [1.0]]), dim)
        new = m1 / p
        new = (new - new[::-1]) / 2
        done = np.max(np.abs(new - c)) <= 1e-14
        c = new
        if done:
            break
    _CACHE[key] = (c, midpoints(c))
    return _CACHE[key]


def midpoints(c: np.ndarray) -> np.ndarray:
    return (c[:-1] + c[1:]) / 2


def codebook(dim, *, bits=2):
    dim = np.asarray(dim)
    if dim.dtype.kind not in "iu" or dim.ndim:
        raise TypeError(f"dim: expected an integer, got {dim!r}")
    if int(dim) < 2:
        raise ValueError(f"dim: expected >= 2, got {int(dim)}")
    c, t = levels_for(int(bits), int(dim))
    return c.copy(), t.copy()


def _float(x, name: str, min_ndim: int = 1) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in (np.float16, np.float32, np.float64) or x.ndim < min_ndim:
        raise TypeError(f"{name}: expected a float array of rank >= {min_ndim}, got {x.dtype} {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name}: NaN or Inf")
    return x.astype(np.float64)


def rotation_matrix(rotation, d: int | None = None) -> np.ndarray:
    r = _float(rotation, "rotation", 2)
    d = r.shape[0] if d is None else d
    if r.shape != (d, d) or not np.allclose(r @ r.T, np.eye(d), rtol=0, atol=1e-9):
        raise ValueError("rotation: expected an orthogonal [d, d] matrix")
    return r


def rotate(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    return x @ r.T


def unrotate(y: np.ndarray, r: np.ndarray) -> np.ndarray:
    return y @ r


def unit_coordinates(px: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """(Pi x) / rho, 0 where rho = 0: no epsilon, so a key of norm 1e-15 keeps its unit coordinates."""
    return np.divide(px, norms[..., None], out=np.zeros_like(px), where=norms[..., None] > 0)


def nearest(y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the nearest level; on a threshold, the lower one."""
    return np.sum(y[..., None] > t, axis=-1).astype(np.int64)


def quantize_mse(x, rotation, *, bits=2):
    x = _float(x, "x")
    if x.shape[-1] < 2:
        raise ValueError("x: head dim < 2")
    r = rotation_matrix(rotation, x.shape[-1])
    norms = np.linalg.norm(x, axis=-1)
    y = unit_coordinates(rotate(x, r), norms)
    _, t = levels_for(bits, x.shape[-1])
    return nearest(y, t), norms


def dequantize_mse(codes, norms, rotation, *, bits=2):
    r = rotation_matrix(rotation)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or codes.ndim < 1 or codes.shape[-1] != r.shape[0]:
        raise TypeError(f"codes: expected integer codes [..., {r.shape[0]}]")
    if codes.size and (codes.min() < 0 or codes.max() >= 1 << bits):
        raise ValueError("codes: out of range")
    norms = _float(norms, "norms", 0)
    if norms.shape != codes.shape[:-1] or (norms < 0).any():
        raise ValueError("norms: wrong shape or negative")
    c, _ = levels_for(bits, r.shape[0])
    return unrotate(c[codes.astype(np.int64)], r) * norms[..., None]


def sign_bits(v: np.ndarray) -> np.ndarray:
    return np.where(v > 0, 1, -1).astype(np.int8)  # QJL's convention: 0 -> -1


def _projection(projection, d: int) -> np.ndarray:
    s = _float(projection, "projection", 2)
    if s.ndim != 2 or s.shape[1] != d or s.shape[0] < 1:
        raise ValueError(f"projection: expected [m, {d}]")
    return s


def mse_bits(bits: int) -> int:
    return bits - 1


def quantize_prod(x, rotation, projection, *, bits=3):
    x = _float(x, "x")
    s = _projection(projection, x.shape[-1])
    codes, norms = quantize_mse(x, rotation, bits=mse_bits(bits))
    res = x - dequantize_mse(codes, norms, rotation, bits=mse_bits(bits))
    return codes, norms, sign_bits(sketch(res, s)), np.linalg.norm(res, axis=-1)


def sketch(v: np.ndarray, s: np.ndarray) -> np.ndarray:
    """S v in float64 (a float32 sketch rounds a nearly cancelling S r to 0 or flips it)."""
    return v @ s.T


def qjl_scale(m: int, d: int) -> float:
    return math.sqrt(math.pi / 2) / m


def estimate_prod(q, codes, norms, signs, residual_norms, rotation, projection, *, bits=3):
    k_mse = dequantize_mse(codes, norms, rotation, bits=mse_bits(bits))  # [B, H, T, d]
    if k_mse.ndim != 4:
        raise ValueError("codes: expected [B, H, T, d]")
    b, h, t, d = k_mse.shape
    s = _projection(projection, d)
    z = np.asarray(signs)
    if z.dtype.kind not in "iu" or z.shape != (b, h, t, s.shape[0]) or not np.isin(z, (-1, 1)).all():
        raise ValueError("signs: expected +1/-1 [B, H, T, m]")
    gamma = _float(residual_norms, "residual_norms", 0)
    if gamma.shape != (b, h, t) or (gamma < 0).any():
        raise ValueError("residual_norms: wrong shape or negative")
    q = _float(q, "q")
    if q.ndim != 4 or q.shape[0] != b or q.shape[-1] != d or h == 0 or q.shape[1] % h:
        raise ValueError("q: expected [B, g H, Lq, d]")
    out = np.empty((b, q.shape[1], q.shape[2], t))
    g = q.shape[1] // h
    for hq in range(q.shape[1]):
        kv = head_of(hq, g, h)
        exact = np.einsum("bld,btd->blt", q[:, hq], k_mse[:, kv])
        dots = np.einsum("bld,btd->blt", sketch(q[:, hq], s), z[:, kv].astype(np.float64))
        out[:, hq] = exact + qjl_scale(s.shape[0], d) * gamma[:, kv][:, None, :] * dots
    return out


def dequantize_prod(codes, norms, signs, residual_norms, rotation, projection, *, bits=3):
    """x_mse + sqrt(pi/2)/m * gamma * S^T z, token by token's rows at once."""
    x_mse = dequantize_mse(codes, norms, rotation, bits=mse_bits(bits))
    s = _projection(projection, x_mse.shape[-1])
    z = np.asarray(signs)
    if z.dtype.kind not in "iu" or z.shape != x_mse.shape[:-1] + (s.shape[0],) or not np.isin(z, (-1, 1)).all():
        raise ValueError("signs: expected +1/-1 [..., m]")
    gamma = _float(residual_norms, "residual_norms", 0)
    if gamma.shape != x_mse.shape[:-1] or (gamma < 0).any():
        raise ValueError("residual_norms: wrong shape or negative")
    return x_mse + qjl_scale(s.shape[0], x_mse.shape[-1]) * gamma[..., None] * (z.astype(np.float64) @ s)


def head_of(hq: int, g: int, h: int) -> int:
    return hq // g


OPS = {"kv.turboquant.codebook": codebook, "kv.turboquant.quantize_mse": quantize_mse,
       "kv.turboquant.dequantize_mse": dequantize_mse, "kv.turboquant.quantize_prod": quantize_prod,
       "kv.turboquant.estimate_prod": estimate_prod, "kv.turboquant.dequantize_prod": dequantize_prod}
VARIANTS = {"kv.turboquant.codebook": {"bits": [0, 1, 2, 3, 4]},
            "kv.turboquant.quantize_mse": {"bits": [1, 2, 3, 4]},
            "kv.turboquant.dequantize_mse": {"bits": [1, 2, 3, 4]},
            "kv.turboquant.quantize_prod": {"bits": [1, 2, 3, 4, 5]},
            "kv.turboquant.estimate_prod": {"bits": [1, 2, 3, 4, 5]},
            "kv.turboquant.dequantize_prod": {"bits": [1, 2, 3, 4, 5]}}

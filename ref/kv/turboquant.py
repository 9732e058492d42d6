"""TurboQuant (spec/kv.md#turboquant): a random rotation, then each coordinate
quantized by the Lloyd-Max codebook of a sphere coordinate (TurboQuant_mse); for
inner products, b - 1 bits of that code plus a 1-bit QJL sketch of the residual
(TurboQuant_prod).

  codebook(bits, dim)          levels c [2^b], thresholds t [2^b - 1] (ref.kv.beta_lloyd)
  quantize_mse(x, Pi)          rho = ||x||, y = (Pi x) / rho (y = 0 where rho = 0),
                               idx_j = the nearest level of y_j (a tie to the lower level)
  dequantize_mse(idx, rho, Pi) x_mse = rho * Pi^T c[idx]
  quantize_prod(x, Pi, S)      idx, rho = quantize_mse(x, Pi) at b - 1 bits,
                               r = x - dequantize_mse(idx, rho, Pi), (z, gamma) = ref.kv.qjl.sketch(r, S):
                               z = +1 where S r > 0, else -1 (QJL's convention), gamma = ||r||
  dequantize_prod(...)         x_mse + sqrt(pi/2) / m * gamma * S^T z
  estimate_prod(q, ...)        <q, x_mse> + ref.kv.qjl.scores(q, S, z, gamma)  (= <q, dequantize_prod>)
                               where qjl.scores = sqrt(pi/2) / m * gamma * <S q, z>

Shapes: x [..., d] (a cache [B, H, T, D]); Pi [d, d] orthogonal (an INPUT: the paper
draws it by QR of a Gaussian matrix; a Hadamard with random signs also serves); S
[m, d] (an INPUT: i.i.d. N(0, 1) in the paper, m = d); codes int64 [..., d] in
[0, 2^b), rho and gamma float64 [...], z int8 [..., m] in {-1, +1}. estimate_prod takes
queries q [B, Hq, Lq, d] against a cache of [B, H, T] vectors, Hq = g H (GQA: query
head h reads cache head h // g), and returns scores [B, Hq, Lq, T]. All arithmetic in
float64 (float16 and float32 inputs are widened exactly).

The paper (arXiv 2504.19874, Algorithms 1 and 2) takes unit vectors; a general x
keeps its norm rho (float64 here; 16 bits in `bits_per_element`). For unit x,
E||x - x_mse||^2 = D_mse(b, d) = d * coordinate MSE; over a random Pi,
E[x_mse] = (1 - D_mse) x, so <q, x_mse> estimates (1 - D_mse) <q, x> (2/pi at b = 1 in
the Gaussian limit); TurboQuant_prod is unbiased for Gaussian S:
E_S <q, dequantize_prod> = <q, x>.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import choice, integer
from ref.kv import qjl
from ref.kv.beta_lloyd import MAX_BITS, coordinate_mse, lloyd_codebook

__all__ = ["MSE_BITS", "PROD_BITS", "bits_per_element", "codebook", "dequantize_mse", "dequantize_prod",
           "estimate_prod", "mse_bias", "quantize_mse", "quantize_prod", "unit_mse"]

MSE_BITS = (1, 2, 3, 4)  # the widths the catalog's vectors cover; the oracle takes up to MAX_BITS (6)
PROD_BITS = (1, 2, 3, 4, 5)  # b - 1 = 0..4 bits of MSE code plus the sign bit
SQRT_HALF_PI = qjl.SCALE  # sqrt(pi/2)
ORTHOGONAL_TOL = 1e-9  # max |Pi Pi^T - I| accepted (exact rotations give 0; a float64 QR about 1e-15)


@lru_cache(maxsize=64)
def _codebook(bits: int, dim: int) -> tuple[NDArray, NDArray]:
    c, t, _ = lloyd_codebook(bits, dim)
    c.setflags(write=False)
    t.setflags(write=False)
    return c, t


def codebook(bits, dim) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(levels [2^bits], thresholds [2^bits - 1]) of the Lloyd-Max quantizer of one
    coordinate of a uniform point on S^{dim-1}; bits 0..6, dim >= 2."""
    bits = integer(bits, "bits", minimum=0, maximum=MAX_BITS)
    dim = integer(dim, "dim", minimum=2)
    c, t = _codebook(bits, dim)
    return c.copy(), t.copy()


def unit_mse(bits: int, dim: int) -> float:
    """D_mse(b, d) = E||u - dequantize(quantize(u))||^2 for a unit vector u (d times the coordinate MSE)."""
    c, t = codebook(bits, dim)
    return dim * coordinate_mse(c, t, dim)


def mse_bias(bits: int, dim: int) -> float:
    """E[<q, x_mse>] / <q, x> over a uniformly random rotation: 1 - D_mse(b, d)
    (Lloyd-Max: E[Q(Y) Y] = E[Q(Y)^2] = E[Y^2] - MSE); 2/pi at b = 1 as d grows."""
    return 1.0 - unit_mse(bits, dim)


def bits_per_element(bits: int, dim: int, *, variant: str = "mse", sketch: int | None = None,
                     norm_bits: int = 16) -> float:
    """Storage per cache element: mse: b + norm_bits / d (the norm rho in bf16);
    prod: (b - 1) + m / d + 2 norm_bits / d (rho and gamma; m = sketch rows, default d)."""
    bits = integer(bits, "bits", minimum=1, maximum=MAX_BITS + 1)
    dim = integer(dim, "dim", minimum=2)
    variant = choice(variant, "variant", ("mse", "prod"))
    norm_bits = integer(norm_bits, "norm_bits", minimum=0)
    if variant == "mse":
        return bits + norm_bits / dim
    m = dim if sketch is None else integer(sketch, "sketch", minimum=1)
    return (bits - 1) + m / dim + 2 * norm_bits / dim


def _floats(x, name: str, min_ndim: int = 1) -> NDArray[np.float64]:
    x = np.asarray(x)
    if x.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{name}: expected float16, float32 or float64, got {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name}: expected at least {min_ndim} dimensions, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: NaN or Inf is not a vector TurboQuant can encode")
    return x.astype(np.float64)


def _rotation(rotation, dim: int | None = None) -> NDArray[np.float64]:
    pi = _floats(rotation, "rotation", 2)
    dim = pi.shape[0] if dim is None else dim
    if pi.shape != (dim, dim):
        raise ValueError(f"rotation: expected shape ({dim}, {dim}), got {pi.shape}")
    err = np.max(np.abs(pi @ pi.T - np.eye(dim))) if dim else 0.0
    if err > ORTHOGONAL_TOL:
        raise ValueError(f"rotation: expected an orthogonal matrix, |Pi Pi^T - I| reaches {err:.3g}")
    return pi


def _projection(projection, dim: int) -> NDArray[np.float64]:
    s = _floats(projection, "projection", 2)
    if s.ndim != 2 or s.shape[1] != dim or s.shape[0] < 1:
        raise ValueError(f"projection: expected shape (m, {dim}) with m >= 1, got {s.shape}")
    return s


def _vectors(x, name: str) -> NDArray[np.float64]:
    x = _floats(x, name)
    if x.shape[-1] < 2:
        raise ValueError(f"{name}: expected a last axis (the head dim) of at least 2, got {x.shape}")
    return x


def _codes(codes, bits: int, dim: int) -> NDArray[np.int64]:
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"codes: expected integer codes, got {codes.dtype}")
    if codes.ndim < 1 or codes.shape[-1] != dim:
        raise ValueError(f"codes: expected a last axis of {dim} (the rotation's size), got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() >= 1 << bits):
        raise ValueError(f"codes: expected codes in [0, {(1 << bits) - 1}] for {bits} bits, "
                         f"got [{codes.min()}, {codes.max()}]")
    return codes.astype(np.int64)


def _norms(norms, shape: tuple, name: str) -> NDArray[np.float64]:
    n = _floats(norms, name, 0)
    if n.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {n.shape}")
    if np.any(n < 0):
        raise ValueError(f"{name}: norms are non-negative, got {n.min()}")
    return n


def _nearest(y: NDArray, thresholds: NDArray) -> NDArray[np.int64]:
    """The index of the nearest level; a point on a threshold takes the lower level."""
    return np.searchsorted(thresholds, y, side="left").astype(np.int64)


def quantize_mse(x: ArrayLike, rotation: ArrayLike, *, bits: int = 2) -> tuple[NDArray[np.int64], NDArray]:
    """TurboQuant_mse's encoder: x [..., d] -> (codes int64 [..., d], norms float64 [...])."""
    bits = integer(bits, "bits", minimum=0, maximum=MAX_BITS)
    x = _vectors(x, "x")
    d = x.shape[-1]
    pi = _rotation(rotation, d)
    rho = np.sqrt(np.sum(x * x, axis=-1))  # [...]
    # y = Pi u = (Pi x) / rho, rotated first: Pi x is exact for dyadic x and an exact rotation, so a
    # coordinate that is 0 lies exactly on the middle threshold (u = x / rho first would round it off 0)
    px = x @ pi.T  # [..., d]
    y = np.divide(px, rho[..., None], out=np.zeros_like(px), where=rho[..., None] > 0)  # [..., d]
    _, t = _codebook(bits, d)
    return _nearest(y, t), rho


def dequantize_mse(codes: ArrayLike, norms: ArrayLike, rotation: ArrayLike, *, bits: int = 2) -> NDArray:
    """TurboQuant_mse's decoder: (codes [..., d], norms [...]) -> rho * Pi^T c[codes] [..., d] float64."""
    bits = integer(bits, "bits", minimum=0, maximum=MAX_BITS)
    pi = _rotation(rotation)
    d = pi.shape[0]
    idx = _codes(codes, bits, d)
    rho = _norms(norms, idx.shape[:-1], "norms")
    c, _ = _codebook(bits, d)
    return rho[..., None] * (c[idx] @ pi)  # [..., d]: (Pi^T c)^T = c^T Pi


def quantize_prod(x: ArrayLike, rotation: ArrayLike, projection: ArrayLike, *,
                  bits: int = 3) -> tuple[NDArray[np.int64], NDArray, NDArray[np.int8], NDArray]:
    """TurboQuant_prod's encoder: x [..., d] -> (codes [..., d] of b - 1 bits, norms [...],
    signs int8 [..., m], residual_norms [...])."""
    bits = integer(bits, "bits", minimum=1, maximum=MAX_BITS + 1)
    x = _vectors(x, "x")
    d = x.shape[-1]
    s = _projection(projection, d)
    codes, rho = quantize_mse(x, rotation, bits=bits - 1)
    r = x - dequantize_mse(codes, rho, rotation, bits=bits - 1)  # [..., d]
    signs, gamma = qjl.sketch(r.reshape(1, 1, -1, d), s)  # [1, 1, N, m], [1, 1, N]
    return codes, rho, signs.reshape(*r.shape[:-1], s.shape[0]), gamma.reshape(r.shape[:-1])


def _sketch_parts(signs, residual_norms, projection, lead: tuple, dim: int):
    s = _projection(projection, dim)
    z = np.asarray(signs)
    if z.dtype.kind not in "iu":
        raise TypeError(f"signs: expected integer signs (+1, -1), got {z.dtype}")
    if z.shape != (*lead, s.shape[0]):
        raise ValueError(f"signs: expected shape {(*lead, s.shape[0])} (the projection's m rows), got {z.shape}")
    if z.size and not np.all((z == 1) | (z == -1)):
        raise ValueError("signs: expected only +1 and -1")
    return s, z.astype(np.float64), _norms(residual_norms, lead, "residual_norms")


def dequantize_prod(codes: ArrayLike, norms: ArrayLike, signs: ArrayLike, residual_norms: ArrayLike,
                    rotation: ArrayLike, projection: ArrayLike, *, bits: int = 3) -> NDArray:
    """TurboQuant_prod's decoder: x_mse + sqrt(pi/2) / m * gamma * S^T z  [..., d] float64."""
    bits = integer(bits, "bits", minimum=1, maximum=MAX_BITS + 1)
    x_mse = dequantize_mse(codes, norms, rotation, bits=bits - 1)
    s, z, gamma = _sketch_parts(signs, residual_norms, projection, x_mse.shape[:-1], x_mse.shape[-1])
    return x_mse + (SQRT_HALF_PI / s.shape[0]) * gamma[..., None] * (z @ s)


def estimate_prod(q: ArrayLike, codes: ArrayLike, norms: ArrayLike, signs: ArrayLike, residual_norms: ArrayLike,
                  rotation: ArrayLike, projection: ArrayLike, *, bits: int = 3) -> NDArray:
    """Inner products of queries q [B, Hq, Lq, d] with a TurboQuant_prod cache of [B, H, T]
    vectors -> scores [B, Hq, Lq, T]: <q, x_mse> + sqrt(pi/2) / m * gamma <S q, z>."""
    bits = integer(bits, "bits", minimum=1, maximum=MAX_BITS + 1)
    x_mse = dequantize_mse(codes, norms, rotation, bits=bits - 1)  # [B, H, T, d]
    if x_mse.ndim != 4:
        raise ValueError(f"codes: expected a cache [B, H, T, d], got shape {np.shape(codes)}")
    s, z, gamma = _sketch_parts(signs, residual_norms, projection, x_mse.shape[:-1], x_mse.shape[-1])
    q = _vectors(q, "q")
    b, h, _, d = x_mse.shape
    if q.ndim != 4 or q.shape[0] != b or q.shape[-1] != d or h == 0 or q.shape[1] % h:
        raise ValueError(f"q: expected [B={b}, g*{h}, Lq, {d}], got shape {q.shape}")
    exact = q @ np.swapaxes(np.repeat(x_mse, q.shape[1] // h, axis=1), -1, -2)  # [B, Hq, Lq, T]: <q, x_mse>
    return exact + qjl.scores(q, s, z.astype(np.int8), gamma)  # + sqrt(pi/2) / m * gamma * <S q, z>

"""The floor: how many bits a weight needs, lossless or lossy, computed not quoted.

Lossless (bf16 weights). A bfloat16 code is sign (1 bit) | exponent (8) | mantissa (7).
`field_entropies` measures the empirical (order-0) Shannon entropy of each field and
of the whole 16-bit code over an array of weights:

  H(F) = -sum_v p_v log2 p_v,  p_v = count(F = v) / n

H(code) <= H(sign) + H(exponent) + H(mantissa), with equality when the fields are
independent; H(code) is the floor of any coder that codes weights one at a time
from their frequencies (Huffman/ANS on i.i.d. symbols), the "~10.6 bits" figure;
H(exponent) is the "~2.6 bits" figure (the only field far below its width).
`gaussian_bf16_entropies` gives the same numbers exactly (no sampling) for i.i.d.
N(0, sigma^2) weights rounded to bf16, from the probability of each code's
rounding cell.

Lossy (the rate-distortion gap). An entropy-coded uniform scalar quantizer (step
delta, cells [k delta - delta/2, k delta + delta/2), reconstruction at each cell's
centroid) of X ~ N(0, 1) spends H(Q) bits for a distortion D; Shannon's bound at
that distortion is R(D) = max(0, 1/2 log2(1 / D)). `ecsq_gap(delta)` returns
H(Q) - R(D), which tends to 1/2 log2(pi e / 6) = 0.2546 bit as delta -> 0 (Gish and
Pierce 1968): computed here from the quantizer's cells, never typed in.

References: Zhang et al., "70% Size, 100% Accuracy: lossless LLM compression ...
(DFloat11)", arXiv:2504.11651; Hershcovitch et al., "ZipNN: lossless compression for
AI models", arXiv:2411.05239; Gish and Pierce, "Asymptotically efficient quantizing",
IEEE Trans. Inf. Theory 14(5), 1968.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import real
from ref.formats.minifloat import decode

__all__ = ["bf16_fields", "ecsq_gap", "entropy_bits", "field_entropies", "gaussian_bf16_entropies"]

_ERFC = np.frompyfunc(math.erfc, 1, 1)
FIELDS = ("sign", "exponent", "mantissa", "code")


def entropy_bits(counts: ArrayLike) -> float:
    """The Shannon entropy in bits of the distribution counts / sum(counts) (0 log 0 = 0)."""
    c = np.asarray(counts, np.float64).ravel()
    if np.any(c < 0) or not np.all(np.isfinite(c)):
        raise ValueError("counts: expected finite non-negative counts or probabilities")
    total = c.sum()
    if total <= 0:
        raise ValueError("counts: nothing counted")
    p = c[c > 0] / total
    return float(-np.sum(p * np.log2(p)))


def bf16_fields(codes: ArrayLike) -> tuple[NDArray, NDArray, NDArray]:
    """bf16 codes (uint16) [...] -> (sign [...] 0/1, exponent [...] 0..255, mantissa [...] 0..127)."""
    c = np.asarray(codes)
    if c.dtype != np.uint16:
        raise TypeError(f"codes: expected uint16 bfloat16 codes, got dtype {c.dtype}")
    c = c.astype(np.int64)
    return c >> 15, (c >> 7) & 0xFF, c & 0x7F


def field_entropies(codes: ArrayLike) -> dict[str, float]:
    """The empirical entropy (bits per weight) of each bf16 field and of the whole code."""
    sign, exponent, mantissa = bf16_fields(codes)
    if sign.size == 0:
        raise ValueError("codes: no weights")
    full = np.asarray(codes).astype(np.int64).ravel()
    return {"sign": entropy_bits(np.bincount(sign.ravel(), minlength=2)),
            "exponent": entropy_bits(np.bincount(exponent.ravel(), minlength=256)),
            "mantissa": entropy_bits(np.bincount(mantissa.ravel(), minlength=128)),
            "code": entropy_bits(np.bincount(full, minlength=1 << 16))}


def _upper(t: NDArray) -> NDArray:
    """P(X > t) for X ~ N(0, 1), t >= 0, by erfc (full relative precision in the tail)."""
    return _ERFC(t / math.sqrt(2.0)).astype(np.float64) * 0.5


def gaussian_bf16_entropies(sigma: float) -> dict[str, float]:
    """The exact per-weight entropies of the fields of N(0, sigma^2) rounded to bf16 (round
    to nearest: each positive finite code owns the interval between the midpoints to its
    neighbours; the largest code takes everything above)."""
    sigma = real(sigma, "sigma")
    pos = np.arange(0, 0x7F80, dtype=np.uint16)  # +0 .. the largest finite bf16
    v = decode(pos, "bfloat16").astype(np.float64)  # [32640] increasing
    edges = np.concatenate([[0.0], (v[:-1] + v[1:]) / 2, [np.inf]]) / sigma
    tail = _upper(edges)  # [32641] P(X > edge)
    p = tail[:-1] - tail[1:]  # [32640] P(X rounds to +v_k) = P(X rounds to -v_k); +0 owns (0, v_1 / 2)
    probs = np.concatenate([p, p])  # [65280] codes with sign 0, then sign 1
    sign = np.repeat([0, 1], pos.size)
    code = np.concatenate([pos, pos | 0x8000]).astype(np.int64)
    exponent, mantissa = (code >> 7) & 0xFF, code & 0x7F
    return {"sign": entropy_bits(np.bincount(sign, weights=probs)),
            "exponent": entropy_bits(np.bincount(exponent, weights=probs)),
            "mantissa": entropy_bits(np.bincount(mantissa, weights=probs)),
            "code": entropy_bits(probs)}


def ecsq_gap(delta: float, *, span: float = 12.0) -> dict[str, float]:
    """The entropy-coded uniform quantizer of N(0, 1) at step `delta` -> {"rate": H(Q),
    "mse": D, "bound": R(D), "gap": H(Q) - R(D)} in bits; cells out to |x| = span + delta
    (the mass beyond 12 sigma, below 1e-32, is left out)."""
    delta = real(delta, "delta")
    k = np.arange(0, int(math.ceil(span / delta)) + 2)  # cell indices k >= 0
    a = np.maximum(k * delta - delta / 2, 0.0)  # [K] the cell [a, b) on the positive side
    b = k * delta + delta / 2
    up_a, up_b = _upper(a), _upper(b)
    phi_a = np.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    phi_b = np.exp(-b * b / 2) / math.sqrt(2 * math.pi)
    p = up_a - up_b  # [K] P(a <= X < b)
    m1 = phi_a - phi_b  # int_a^b x phi
    m2 = p + a * phi_a - b * phi_b  # int_a^b x^2 phi
    # cell 0 is [-delta/2, delta/2): twice the half [0, delta/2), centroid 0
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(p > 0, m1 / p, 0.0)
    d = np.where(p > 0, m2 - c * m1, 0.0)  # int (x - c)^2 phi = m2 - 2 c m1 + c^2 p, with c p = m1
    d[0] = m2[0]
    probs = np.concatenate([[2 * p[0]], p[1:], p[1:]])  # the cell around 0, then +k and -k
    mse = float(2 * np.sum(d))
    rate = entropy_bits(probs)
    bound = max(0.0, 0.5 * math.log2(1.0 / mse))
    return {"rate": rate, "mse": mse, "bound": bound, "gap": rate - bound}

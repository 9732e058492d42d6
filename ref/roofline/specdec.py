"""Speculative decoding (Leviathan, Kalman, Matias, "Fast Inference from Transformers
via Speculative Decoding", arXiv 2211.17192; Chen et al., arXiv 2302.01318): a draft
model proposes k tokens, the target model scores all of them in one forward, and the
longest accepted prefix plus one token from the target (the correction, or a bonus
token when all k are accepted) is kept.

    expected_tokens(alpha, k) = sum_{i=0..k} alpha^i = (1 - alpha^(k+1)) / (1 - alpha)
    speedup(alpha, k, c)      = expected_tokens(alpha, k) / (k c + 1)

alpha: the probability that one drafted token is accepted (i.i.d. per token, the
paper's assumption); k: tokens drafted per step; c: the draft's step time over the
target's. expected_tokens is the paper's Eq. (1) (tokens per target forward, k + 1
terms: the target always contributes one); speedup is its Theorem 3.8 (wall-time
improvement, assuming the target's forward over k + 1 tokens costs what one token's
does: a memory-bound decode).

alpha = 1 gives k + 1; near 1 the closed form's numerator and denominator both
vanish and float arithmetic cancels, so the sum is computed as
-expm1((k+1) log alpha) / (1 - alpha), whose parts are each accurate.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.roofline.counting import counts, reals, same_shape

__all__ = ["expected_tokens", "speedup"]


def _alpha_k(op: str, alpha: ArrayLike, k: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    a = reals(op, alpha=alpha)["alpha"]
    kk = counts(op, k=k)["k"].astype(np.int64)
    same_shape(op, alpha=a, k=kk)
    if np.any((a < 0) | (a > 1)):
        raise ValueError(f"{op}: alpha: expected an acceptance rate in [0, 1], got {a[(a < 0) | (a > 1)].flat[0]}")
    return a, kk


def _sum_of_powers(a: NDArray[np.float64], k: NDArray[np.int64]) -> NDArray[np.float64]:
    n = (k + 1).astype(np.float64)  # k + 1 terms
    with np.errstate(divide="ignore", invalid="ignore"):
        closed = -np.expm1(n * np.log(a)) / (1.0 - a)  # log(0) = -inf: the sum is 1
    return np.where(a == 1.0, n, closed)


def expected_tokens(alpha: ArrayLike, k: ArrayLike) -> NDArray[np.float64]:
    """Expected tokens per target forward with `k` drafted tokens accepted each with
    probability `alpha` (elementwise; alpha float64 in [0, 1], k int64 >= 0, one
    shape): sum_{i=0..k} alpha^i. k = 0 -> 1; alpha = 1 -> k + 1; alpha = 0 -> 1."""
    a, kk = _alpha_k("roofline.specdec.expected_tokens", alpha, k)
    return _sum_of_powers(a, kk)


def speedup(alpha: ArrayLike, k: ArrayLike, cost: ArrayLike) -> NDArray[np.float64]:
    """Leviathan et al.'s expected wall-time improvement (Theorem 3.8):
    expected_tokens(alpha, k) / (k * cost + 1), cost (float64 >= 0) the draft step's
    time over the target step's. cost = 0 -> expected_tokens."""
    op = "roofline.specdec.speedup"
    a, kk = _alpha_k(op, alpha, k)
    c = reals(op, cost=cost)["cost"]
    same_shape(op, alpha=a, cost=c)
    if np.any(c < 0):
        raise ValueError(f"{op}: cost: expected a non-negative time ratio, got {c[c < 0].flat[0]}")
    return _sum_of_powers(a, kk) / (kk.astype(np.float64) * c + 1.0)

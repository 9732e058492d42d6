"""A synthetic long context on which the KV codecs are compared (spec/kv.md, "Comparison").

  keys     k[b, h, t, :] = z + c u_h [t in the recent window],  z ~ N(0, I_D)
           then each of `outlier_channels` channels j of head h (chosen per head)
           becomes s_j (k[..., j] + m_j): s_j an integer in [outlier_scale], m_j = +-1
           (a large, signed channel offset: the per-channel structure KIVI observes)
  values   v[b, h, t, :] ~ N(0, I_D)
  queries  q[b, n, i, :] = z + a u_h,  z ~ N(0, I_D), n = h g + r (GQA, g query heads
           per KV head); u_h a unit vector per KV head, so that q . k is larger by
           about a c over the last `recent` tokens: decode queries attend the recent
           region more
  calibration: `calibration` more tokens of the same heads (the same u_h, outlier
           channels, scales and offsets), queries, keys and values drawn as above,
           the keys without the recent shift (OSCAR's offline calibration input)

Every array is float64 in the cache layout [B, H, T, D] (queries [B, Hq, Lq, D]); a seed
fixes them all (numpy's PCG64 `default_rng`). The rotation and projection helpers draw
the random inputs TurboQuant and QJL take (a Haar-random orthogonal matrix: the QR
factor of a Gaussian matrix with R's diagonal made positive; a Gaussian matrix).
These are comparison inputs, not golden-vector inputs (those are built from exact
rationals by each technique's catalog).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ref.arguments import integer, real

__all__ = ["Context", "context", "projection", "rotation"]


@dataclass(frozen=True)
class Context:
    """A synthetic context: queries, keys, values and the parameters that made them."""

    q: NDArray[np.float64]  # [B, Hq, Lq, D] decode queries
    k: NDArray[np.float64]  # [B, H, T, D]
    v: NDArray[np.float64]  # [B, H, T, D]
    calibration_q: NDArray[np.float64]  # [B, Hq, C, D] calibration queries, drawn as q
    calibration_k: NDArray[np.float64]  # [B, H, C, D] calibration keys (no recent shift)
    calibration_v: NDArray[np.float64]  # [B, H, C, D] calibration values
    outliers: NDArray[np.int64]  # [H, n] the outlier channels of each KV head
    seed: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, H, T, D) of the cache."""
        return self.k.shape  # type: ignore[return-value]


def context(*, batch: int = 1, kv_heads: int = 2, group: int = 2, tokens: int = 4096, head_dim: int = 128,
            queries: int = 16, calibration: int = 256, outlier_channels: int = 4,
            outlier_scale: tuple[int, int] = (10, 20), recent: int = 512, query_gain: float = 4.0,
            recent_gain: float = 8.0, seed: int = 0) -> Context:
    """The context of the module docstring: keys and values [batch, kv_heads, tokens,
    head_dim], queries [batch, kv_heads * group, queries, head_dim]."""
    b, h = integer(batch, "batch", minimum=1), integer(kv_heads, "kv_heads", minimum=1)
    g, t = integer(group, "group", minimum=1), integer(tokens, "tokens", minimum=0)
    d, lq = integer(head_dim, "head_dim", minimum=1), integer(queries, "queries", minimum=1)
    c = integer(calibration, "calibration", minimum=0)
    n = integer(outlier_channels, "outlier_channels", minimum=0, maximum=d)
    w = integer(recent, "recent", minimum=0)
    lo, hi = (integer(s, "outlier_scale", minimum=1) for s in outlier_scale)
    if hi < lo:
        raise ValueError(f"outlier_scale: expected (low, high) with low <= high, got {outlier_scale}")
    a, gain = real(query_gain, "query_gain", positive=False), real(recent_gain, "recent_gain", positive=False)
    rng = np.random.default_rng(integer(seed, "seed", minimum=0))
    u = rng.standard_normal((h, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)  # [H, D] unit topic directions
    outliers = np.stack([np.sort(rng.choice(d, n, replace=False)) for _ in range(h)]).astype(np.int64)  # [H, n]
    scales = rng.integers(lo, hi + 1, size=(h, n)).astype(np.float64)  # [H, n]
    offsets = rng.choice([-1.0, 1.0], size=(h, n))  # [H, n]
    mult, shift = np.ones((h, d)), np.zeros((h, d))  # [H, D]: 1 and 0 but on the outlier channels
    np.put_along_axis(mult, outliers, scales, axis=-1)
    np.put_along_axis(shift, outliers, offsets, axis=-1)
    topic = np.repeat(u, g, axis=0)  # [Hq, D]: query head n reads KV head n // g

    def draw(tokens: int, queries: int, window: int):
        z = rng.standard_normal((b, h, tokens, d))  # [B, H, T, D]
        z[:, :, max(tokens - window, 0):, :] += gain * u[None, :, None, :]
        k = mult[None, :, None, :] * (z + shift[None, :, None, :])  # [B, H, T, D]
        v = rng.standard_normal((b, h, tokens, d))  # [B, H, T, D]
        q = rng.standard_normal((b, h * g, queries, d)) + a * topic[None, :, None, :]  # [B, Hq, Lq, D]
        return q, k, v

    q, k, v = draw(t, lq, w)
    cq, ck, cv = draw(c, c, 0)
    return Context(q=q, k=k, v=v, calibration_q=cq, calibration_k=ck, calibration_v=cv, outliers=outliers,
                   seed=int(seed))


def rotation(d: int, *, seed: int = 0) -> NDArray[np.float64]:
    """A Haar-random orthogonal matrix [d, d]: Q of the QR factorization of a Gaussian
    matrix, its columns' signs set so that R's diagonal is positive (which makes the
    draw Haar and independent of the LAPACK's sign convention)."""
    d = integer(d, "d", minimum=1)
    a = np.random.default_rng(integer(seed, "seed", minimum=0)).standard_normal((d, d))
    qr, r = np.linalg.qr(a)
    return qr * np.where(np.diag(r) < 0, -1.0, 1.0)[None, :]


def projection(m: int, d: int, *, seed: int = 0) -> NDArray[np.float64]:
    """A Gaussian projection [m, d] with N(0, 1) entries (QJL's S)."""
    m, d = integer(m, "m", minimum=1), integer(d, "d", minimum=1)
    return np.random.default_rng(integer(seed, "seed", minimum=0)).standard_normal((m, d))

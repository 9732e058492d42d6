"""QJL (arXiv 2406.03482): 1-bit sign sketches of keys with their norms kept, and the
inner-product estimator that reads them (spec/kv.md#qjl).

A key k [D] is stored as the m signs of S k (S [m, D], the projection, an INPUT) and
its norm ||k||. A query q is projected by the same S, unquantized, and

    score(q, k) = sqrt(pi/2) / m * ||k|| * <S q, sign(S k)>

estimates <q, k> without bias when the rows of S are independent N(0, I_D). Signs
follow the reference (amirzandieh/QJL): bit = (S k > 0), so S k = 0 gives -1; they
are packed eight to a byte, row 8i + j in bit j of byte i (least significant first).

Outlier variant (the reference's treatment): in each group of G consecutive tokens
the `count` channels of largest norm over the group are outliers; the inlier part
k_in (outlier channels zeroed) is sketched with all m rows, the outlier part k_out
with the first m_out rows of S, and the score is the sum of both estimates, each with
its own norm: ||k_out||, and ||k_in|| = sqrt(||k||^2 - ||k_out||^2) from the stored
full norm (clamped at 0).

Layouts: keys [B, H, T, D], queries [B, Hq, Lq, D] with Hq = g * H (query head h
reads KV head h // g), scores [B, Hq, Lq, T] (not scaled by 1/sqrt(D)).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import gammaln

from ref.arguments import integer
from ref.formats.minifloat import round_to

__all__ = ["SCALE", "bits_per_element", "decode", "emulate_scores", "emulate_scores_outliers", "encode",
           "estimates", "estimator_variance", "outlier_channels", "pack_signs", "scores", "scores_outliers", "sketch",
           "sketch_outliers", "sphere_factor", "unbiasedness", "unpack_signs"]

SCALE = math.sqrt(math.pi / 2)  # sqrt(pi/2): 1 / E|g| for g ~ N(0, 1)


# ---------------------------------------------------------------------------- argument checks

def _floats(x: ArrayLike, name: str, ndim: int | None = None) -> NDArray[np.float64]:
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        raise TypeError(f"{name}: expected a float array, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected rank {ndim}, got shape {a.shape}")
    out = a.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name}: NaN or infinite values")
    return out


def _keys_and_projection(k, S) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    k = _floats(k, "k", 4)
    S = _floats(S, "S", 2)
    if S.shape[0] < 1 or S.shape[1] != k.shape[-1]:
        raise ValueError(f"S: expected shape [m >= 1, D = {k.shape[-1]}] for keys of head dim {k.shape[-1]}, "
                         f"got {S.shape}")
    return k, S


def _signs(signs: ArrayLike, name: str) -> NDArray[np.float64]:
    """Signs as int8 +-1, or packed uint8 bytes (unpacked here)."""
    a = np.asarray(signs)
    if a.dtype == np.uint8:
        return unpack_signs(a).astype(np.float64)
    if a.dtype != np.int8:
        raise TypeError(f"{name}: expected int8 signs (+1, -1) or uint8 packed bits, got {a.dtype}")
    if not np.all((a == 1) | (a == -1)):
        raise ValueError(f"{name}: signs must be +1 or -1")
    return a.astype(np.float64)


def _norms(norms: ArrayLike, name: str, shape: tuple[int, ...]) -> NDArray[np.float64]:
    n = _floats(norms, name)
    if n.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {n.shape}")
    if np.any(n < 0):
        raise ValueError(f"{name}: norms must be >= 0")
    return n


def _heads(q: NDArray, h: int) -> int:
    hq = q.shape[1]
    if h == 0 or hq % h:
        raise ValueError(f"q: {hq} query heads are not a multiple of {h} KV heads")
    return hq // h


# ---------------------------------------------------------------------------- sketch and packing

def _sign_bits(x: NDArray[np.float64]) -> NDArray[np.int8]:
    return np.where(x > 0, 1, -1).astype(np.int8)


def sketch(k: ArrayLike, S: ArrayLike) -> tuple[NDArray[np.int8], NDArray[np.float64]]:
    """k [B, H, T, D], S [m, D] -> (signs int8 [B, H, T, m], norms float64 [B, H, T]).

    signs = +1 where S k > 0, else -1 (0 gives -1, as the reference's `> 0`); S k is
    the exact product of the inputs read as float64; norms = ||k||, the correctly
    rounded square root of the float64 sum of squares.
    """
    k, S = _keys_and_projection(k, S)
    return _sign_bits(k @ S.T), np.sqrt(np.sum(k * k, axis=-1))


def pack_signs(signs: ArrayLike) -> NDArray[np.uint8]:
    """signs int8 [..., m] (+-1), m a multiple of 8 -> bytes uint8 [..., m / 8]: row
    8i + j is bit j of byte i (1 for +1), least significant bit first."""
    s = np.asarray(signs)
    if s.dtype != np.int8 or not np.all((s == 1) | (s == -1)):
        raise ValueError(f"signs: expected int8 +1 / -1, got {s.dtype}")
    if s.ndim < 1 or s.shape[-1] % 8:
        raise ValueError(f"signs: the last axis ({s.shape[-1:]}) must be a multiple of 8 to pack")
    bits = (s > 0).reshape(*s.shape[:-1], s.shape[-1] // 8, 8).astype(np.uint8)
    return np.sum(bits << np.arange(8, dtype=np.uint8), axis=-1, dtype=np.uint8)


def unpack_signs(packed: ArrayLike) -> NDArray[np.int8]:
    """bytes uint8 [..., n] -> signs int8 [..., 8 n], the inverse of `pack_signs`."""
    p = np.asarray(packed)
    if p.dtype != np.uint8 or p.ndim < 1:
        raise TypeError(f"packed: expected a uint8 array of rank >= 1, got {p.dtype} of rank {p.ndim}")
    bits = (p[..., None] >> np.arange(8, dtype=np.uint8)) & 1
    return np.where(bits.reshape(*p.shape[:-1], 8 * p.shape[-1]) == 1, 1, -1).astype(np.int8)


# ---------------------------------------------------------------------------- scores

def scores(q: ArrayLike, S: ArrayLike, signs: ArrayLike, norms: ArrayLike) -> NDArray[np.float64]:
    """q [B, Hq, Lq, D], S [m, D], signs [B, H, T, m] (int8 +-1, or uint8 packed
    [B, H, T, m/8]), norms [B, H, T] -> scores [B, Hq, Lq, T], float64:
    sqrt(pi/2) / m * norms * <S q, signs>; query head h reads KV head h // (Hq / H)."""
    q = _floats(q, "q", 4)
    S = _floats(S, "S", 2)
    s = _signs(signs, "signs")
    if s.ndim != 4 or s.shape[-1] != S.shape[0] or q.shape[-1] != S.shape[1] or q.shape[0] != s.shape[0]:
        raise ValueError(f"signs: expected [B, H, T, m = {S.shape[0]}] matching q {q.shape} and S {S.shape}, "
                         f"got {s.shape}")
    n = _norms(norms, "norms", s.shape[:3])
    g = _heads(q, s.shape[1])
    sq = q @ S.T  # [B, Hq, Lq, m]
    dots = np.einsum("bhgqm,bhtm->bhgqt", sq.reshape(q.shape[0], s.shape[1], g, q.shape[2], S.shape[0]), s)
    out = SCALE / S.shape[0] * dots * n[:, :, None, None, :]
    return out.reshape(q.shape[0], q.shape[1], q.shape[2], s.shape[2])


def emulate_scores(precision: str, q, S, signs, norms) -> NDArray[np.float64]:
    """`scores` at a kernel's precision P: q, S and norms rounded to P, S q rounded to P
    (the query sketch, as the reference stores it), <S q, signs> accumulated in float32
    (float64 at P = float64), the product rounded to P."""
    acc = "float64" if precision == "float64" else "float32"
    q, S, n = (round_to(_floats(a, name), precision) for a, name in ((q, "q"), (S, "S"), (norms, "norms")))
    sq = round_to(q @ S.T, precision)
    s = _signs(signs, "signs")
    g = _heads(q, s.shape[1])
    b, hq, lq, _ = q.shape
    dots = round_to(np.einsum("bhgqm,bhtm->bhgqt", sq.reshape(b, s.shape[1], g, lq, S.shape[0]), s), acc)
    out = round_to(round_to(SCALE / S.shape[0] * dots, acc) * n[:, :, None, None, :], precision)
    return out.reshape(b, hq, lq, s.shape[2])


# ---------------------------------------------------------------------------- outliers

def _groups_of(mask: NDArray[np.bool_], t: int, name: str = "outliers") -> int:
    n = mask.shape[2]
    if (n == 0) != (t == 0) or (n and t % n):
        raise ValueError(f"{name}: {n} groups do not divide T = {t} tokens")
    return t // n if n else 1


def outlier_channels(k: ArrayLike, group: int, count: int) -> NDArray[np.bool_]:
    """k [B, H, T, D] -> mask bool [B, H, T / group, D]: in each group of `group`
    consecutive tokens, the `count` channels of largest norm over the group's tokens
    (ties: the lower channel index first). T must be a multiple of `group`."""
    k = _floats(k, "k", 4)
    group = integer(group, "group", minimum=1)
    count = integer(count, "count", minimum=0, maximum=k.shape[-1])
    b, h, t, d = k.shape
    if t % group:
        raise ValueError(f"group: {group} does not divide T = {t}")
    energy = np.sum(k.reshape(b, h, t // group, group, d) ** 2, axis=3)  # [B, H, N, D]
    order = np.argsort(-energy, axis=-1, kind="stable")[..., :count]
    mask = np.zeros(energy.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return mask


def _token_mask(outliers: ArrayLike, shape: tuple[int, ...]) -> NDArray[np.float64]:
    m = np.asarray(outliers)
    if m.dtype != np.bool_ or m.ndim != 4 or m.shape[:2] != shape[:2] or m.shape[3] != shape[3]:
        raise ValueError(f"outliers: expected a bool mask [B, H, groups, D] for keys {shape}, got {m.dtype} "
                         f"{m.shape}")
    return np.repeat(m, _groups_of(m, shape[2]), axis=2).astype(np.float64)


def sketch_outliers(k: ArrayLike, S: ArrayLike, outliers: ArrayLike, outlier_dim: int):
    """k [B, H, T, D], S [m, D], outliers bool [B, H, T / G, D], outlier_dim m_out
    (1..m) -> (signs int8 [B, H, T, m] of the inlier part, norms [B, H, T] = ||k||
    (the whole key, as the reference keeps it), outlier_signs int8 [B, H, T, m_out]
    from the first m_out rows of S, outlier_norms [B, H, T] = ||k_out||)."""
    k, S = _keys_and_projection(k, S)
    mo = integer(outlier_dim, "outlier_dim", minimum=1, maximum=S.shape[0])
    mask = _token_mask(outliers, k.shape)
    k_in, k_out = k * (1 - mask), k * mask
    return (_sign_bits(k_in @ S.T), np.sqrt(np.sum(k * k, axis=-1)), _sign_bits(k_out @ S[:mo].T),
            np.sqrt(np.sum(k_out * k_out, axis=-1)))


def _outlier_parts(q, S, signs, norms, outliers, outlier_signs, outlier_norms):
    q = _floats(q, "q", 4)
    S = _floats(S, "S", 2)
    s, so = _signs(signs, "signs"), _signs(outlier_signs, "outlier_signs")
    if s.ndim != 4 or s.shape[-1] != S.shape[0] or q.shape[-1] != S.shape[1] or q.shape[0] != s.shape[0]:
        raise ValueError(f"signs: expected [B, H, T, m = {S.shape[0]}] matching q {q.shape} and S {S.shape}, "
                         f"got {s.shape}")
    if so.shape[:3] != s.shape[:3] or not 1 <= so.shape[-1] <= S.shape[0]:
        raise ValueError(f"outlier_signs: expected [B, H, T, m_out <= {S.shape[0]}] like signs {s.shape}, "
                         f"got {so.shape}")
    n = _norms(norms, "norms", s.shape[:3])
    no = _norms(outlier_norms, "outlier_norms", s.shape[:3])
    mask = _token_mask(outliers, (*s.shape[:3], q.shape[-1]))
    return q, S, s, n, so, no, mask, _heads(q, s.shape[1])


def scores_outliers(q, S, signs, norms, outliers, outlier_signs, outlier_norms) -> NDArray[np.float64]:
    """The reference's score with outliers [B, Hq, Lq, T]: sqrt(pi/2) / m * ||k_in|| *
    <S q_in, signs> + sqrt(pi/2) / m_out * ||k_out|| * <S_out q_out, outlier_signs>,
    q_in and q_out the query with the key group's outlier channels zeroed or kept,
    S_out the first m_out rows of S, ||k_in|| = sqrt(max(norms^2 - outlier_norms^2, 0))."""
    q, S, s, n, so, no, mask, g = _outlier_parts(q, S, signs, norms, outliers, outlier_signs, outlier_norms)
    b, hq, lq, d = q.shape
    h, t, m, mo = s.shape[1], s.shape[2], s.shape[3], so.shape[3]
    qg = q.reshape(b, h, g, lq, d)
    # per key token: the query's inlier and outlier projections
    sq_out = np.einsum("bhgqd,bhtd,md->bhgqtm", qg, mask, S[:mo])
    sq_in = np.einsum("bhgqd,md->bhgqm", qg, S)[:, :, :, :, None, :] - np.einsum(
        "bhgqd,bhtd,md->bhgqtm", qg, mask, S)
    n_in = np.sqrt(np.maximum(n * n - no * no, 0.0))[:, :, None, None, :]
    est = SCALE / m * n_in * np.einsum("bhgqtm,bhtm->bhgqt", sq_in, s) + SCALE / mo * no[:, :, None, None, :] \
        * np.einsum("bhgqtm,bhtm->bhgqt", sq_out, so)
    return est.reshape(b, hq, lq, t)


def emulate_scores_outliers(precision: str, q, S, signs, norms, outliers, outlier_signs, outlier_norms):
    """`scores_outliers` at precision P: q, S and the norms rounded to P, each projected
    query part rounded to P, the rest as the float64 oracle (a float32 sum at P <
    float64 is within the bound's floor)."""
    q, S, n, no = (round_to(_floats(a, name), precision) for a, name in
                   ((q, "q"), (S, "S"), (norms, "norms"), (outlier_norms, "outlier_norms")))
    return round_to(scores_outliers(q, S, signs, n, outliers, outlier_signs, no), precision)


# ---------------------------------------------------------------------------- encode / decode, bits

def encode(k: ArrayLike, S: ArrayLike) -> dict[str, NDArray]:
    """k [B, H, T, D] -> {"signs": packed uint8 [B, H, T, m/8], "norms": [B, H, T], "m": m}
    (m a multiple of 8)."""
    signs, norms = sketch(k, S)
    return {"signs": pack_signs(signs), "norms": norms, "m": signs.shape[-1]}


def decode(state: dict, S: ArrayLike) -> NDArray[np.float64]:
    """The unbiased key estimate k_hat = sqrt(pi/2) / m * ||k|| * S^T sign(S k), float64
    [B, H, T, D], so that <q, k_hat> = scores(q, S, signs, norms) for every q."""
    S = _floats(S, "S", 2)
    s = _signs(state["signs"], "signs")
    if s.shape[-1] != S.shape[0]:
        raise ValueError(f"S: {S.shape[0]} rows for signs of width {s.shape[-1]}")
    n = _norms(state["norms"], "norms", s.shape[:-1])
    return SCALE / S.shape[0] * n[..., None] * (s @ S)


def bits_per_element(T: int, D: int, *, m: int, outliers: int = 0, outlier_dim: int = 0, group: int = 32,
                     buffer: int = 0, norm_bits: int = 16) -> float:
    """Key-cache bits per element over T tokens of head dim D: per sketched token m sign
    bits and one norm (norm_bits, bf16/fp16: 16); with outliers, outlier_dim more signs,
    a second norm, and 8-bit channel indices (outliers per group of `group` tokens);
    the last T mod buffer tokens (buffer > 0) stay at 16 bits. Formula:
    (Ts (m + norm_bits + [outliers] (outlier_dim + norm_bits) ) + Ts / group * 8 outliers
    + 16 D (T - Ts)) / (T D), Ts = T - T mod buffer."""
    T, D, m = integer(T, "T", minimum=1), integer(D, "D", minimum=1), integer(m, "m", minimum=1)
    outliers = integer(outliers, "outliers", minimum=0, maximum=D)
    outlier_dim = integer(outlier_dim, "outlier_dim", minimum=0)
    group, buffer = integer(group, "group", minimum=1), integer(buffer, "buffer", minimum=0)
    ts = T - (T % buffer if buffer else 0)
    per_token = m + norm_bits + ((outlier_dim + norm_bits) if outliers else 0)
    return (ts * per_token + ts / group * 8 * outliers + 16 * D * (T - ts)) / (T * D)


# ---------------------------------------------------------------------------- the estimator's law

def estimator_variance(q: ArrayLike, k: ArrayLike, m: int) -> NDArray[np.float64]:
    """Var of sqrt(pi/2)/m ||k|| <S q, sign(S k)> over S with m i.i.d. N(0, I) rows:
    ((pi/2) ||q||^2 ||k||^2 - <q, k>^2) / m (per row X = sqrt(pi/2) ||k|| (s.q) sign(s.k)
    has E X = <q, k> and E X^2 = (pi/2) ||k||^2 ||q||^2). q, k [..., D]."""
    q, k = _floats(q, "q"), _floats(k, "k")
    m = integer(m, "m", minimum=1)
    qk = np.sum(q * k, axis=-1)
    return (math.pi / 2 * np.sum(q * q, axis=-1) * np.sum(k * k, axis=-1) - qk * qk) / m


def sphere_factor(D: int) -> float:
    """E[estimate] / <q, k> when each row of S is uniform on the sphere of radius sqrt(D)
    (the reference's QR-orthogonalized projection scaled by sqrt(D)) instead of
    Gaussian: sqrt(pi/2) sqrt(D) E|u_1| = sqrt(pi D / 2) Gamma(D/2) / (sqrt(pi)
    Gamma((D + 1)/2)), 1 + 1/(4D) + O(1/D^2) (a bias of 0.2% at D = 128)."""
    D = integer(D, "D", minimum=1)
    return math.sqrt(math.pi * D / 2) * math.exp(gammaln(D / 2) - gammaln((D + 1) / 2)) / math.sqrt(math.pi)


def estimates(q: ArrayLike, k: ArrayLike, projections: ArrayLike) -> NDArray[np.float64]:
    """The score of one query-key pair (q, k [D]) under each projection [N, m, D]: [N]."""
    q, k = _floats(q, "q", 1), _floats(k, "k", 1)
    P = _floats(projections, "projections", 3)
    if P.shape[2] != q.shape[0] or k.shape != q.shape:
        raise ValueError(f"projections: expected [N, m, {q.shape[0]}] for q, k of dim {q.shape[0]}, got {P.shape}")
    signs = np.where(P @ k > 0, 1.0, -1.0)
    return SCALE / P.shape[1] * math.sqrt(float(k @ k)) * np.sum((P @ q) * signs, axis=1)


def unbiasedness(q: ArrayLike, k: ArrayLike, projections: ArrayLike) -> tuple[float, float]:
    """z-scores of the mean and the variance of `estimates` over N independent Gaussian
    projections: z_mean = (mean - <q, k>) / sqrt(V / N), V = estimator_variance; z_var =
    (s^2 - V) / sqrt((m4 - s^4) / N) with s^2 and m4 the sample variance and fourth
    central moment (the variance of a sample variance, to first order). Both are
    asymptotically N(0, 1) when the estimator is unbiased with variance V: |z| > 5.33
    has probability 1e-7 for each."""
    e = estimates(q, k, projections)
    n = e.size
    if n < 2:
        raise ValueError("projections: at least 2 draws")
    v = float(estimator_variance(q, k, np.shape(projections)[1]))
    c = e - e.mean()
    s2, m4 = float(np.mean(c**2)), float(np.mean(c**4))
    z_mean = (float(e.mean()) - float(np.dot(_floats(q, "q"), _floats(k, "k")))) / math.sqrt(v / n)
    return z_mean, (s2 - v) / math.sqrt(max(m4 - s2 * s2, 1e-300) / n)

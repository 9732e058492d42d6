"""A float32 NumPy randomized Hadamard transform for `quant.hadamard_transform`, written
independently of the oracle: the small matrices are rebuilt from Legendre symbols
(Euler's criterion, every q the field uses being prime) and the Williamson first
rows, the power-of-two factor by repeated Kronecker products, and the whole
transform is one dense float32 matrix product with H_K (x) H_{2^m} (the oracle uses
a butterfly). Imports nothing from `ref`."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

NAME = "NumPy float32 dense Hadamard transform"
VERSION = np.__version__

_QUAROT_PALEY1 = {12: 11, 20: 19, 60: 59, 108: 107, 140: 139}  # order -> prime q = 3 mod 4
_QUAROT_PALEY2 = {28: 13, 36: 17}  # order -> prime q = 1 mod 4 (blocks of the conference matrix)
_WILLIAMSON = {  # first rows of A, B, C, D (Sloane's had.52/156/172.will; fast-hadamard-transform's 20, 28)
    ("quarot", 52): ("+-+--++++--+-", "+---++++++---", "++-+--++--+-+", "+----+--+----"),
    ("quarot", 156): ("+++--+-+-----+--++----++--+-----+-+--++", "++++---+--++----+-+--+-+----++--+---+++",
                      "+++--++-+---+-+--+----+--+-+---+-++--++", "+---++-+-+-----+++-++-+++-----+-+-++---"),
    ("quarot", 172): ("+---++--++++-+-+++-++--++-+++-+-++++--++---", "++-++++++----+-+--++-++-++--+-+----++++++-+",
                      "+++-+-++--+-+-++++-+----+-++++-+-+--++-+-++", "++---++++-+--+--++--------++--+--+-++++---+"),
    ("fast_hadamard_transform", 20): ("+----", "+----", "++--+", "+-++-"),
    ("fast_hadamard_transform", 28): ("+------", "++----+", "+-+--+-", "+--++--"),
}
_CT_ROWS = {  # compressed-tensors' arrays: (kind, doublings, first rows of A, B, C, D)
    92: ("will", 0, ("+++-+++-+------+-+++-++", "+++---++-+-++-+-++---++", "+-++-++--++++++--++-++-", "++---+---+-++-+---+---+")),
    100: ("will", 0, ("+-++++----++--++----++++-", "+++-+++---+-++-+---+++-++", "+-++-+++-++----++-+++-++-", "+--++-+-+--------+-+-++--")),
    116: ("will", 0, ("++--+--+-+++-++++-+++-+--+--+", "++++-++-+---++++++---+-++-+++", "+-+---++--+-++++++-+--++---+-", "+++---++--+-+----+-+--++---++")),
    244: ("will", 0, ("++--+--++--+-+-++++--+-----+------+-----+--++++-+-+--++--+--+", "++--+--++--+-+-++++--+-----+------+-----+--++++-+-+--++--+--+", "+---+-+-++++---++--+-++-+---++++++---+-++-+--++---++++-+-+---", "++++-+-+----+++--++-+--+-+++------+++-+--+-++--+++----+-+-+++")),
    188: ("gs", 0, ("+-+----+--+----++---++++---+-+----++++++--+---+", "-+-++++-++-++++--+++---+---+-+----++++++--+---+", "+---+--+-+-+++-++-+--++---+---+-----+++-+--+--+", "-+++-++-+-+---+--+-++-----+---+-----+++-+--+--+")),
    236: ("gs", 0, ("+++++-++++-+--++--++++-+---+-++++-+---+-++---+--++++-++++--", "-++++-++++-+--++--++++-+---+-++-++++-++++--+---++-+---+-++-", "-----+----+-++--++----+-+++-+-+++-+---+-++---+--++++-++++--", "-++++-++++-+--++--++++-+---+-+-+----+----++-+++--+-+++-+--+")),
    208: ("will2", 2, ("+-+--++++--+-", "-+++------+++", "--+-++--++-+-", "-++++-++-++++")),
    232: ("will2", 1, ("++--+--+-+++-++++-+++-+--+--+", "----+--+-+++------+++-+--+---", "-+-+++--++-+------+-++--+++-+", "---+++--++-+-++++-+-++--+++--")),
    248: ("will2", 1, ("+--+++-+--+----++----+--+-+++--", "-++---+-++-++++--++++-++-+---++", "-+++++---+-+-++--++-+-+---+++++", "------+++-+-+--++--+-+-+++-----")),
}
_CT_HALL_20 = ("++++++++++++++++++++", "++++++++++----------", "+++++-----+++++-----", "+-----++++-+++++----", "++---+++--+++---++--", "+-+--+++--+--++---++", "+--+-+--+++++-----++", "+---++--+++--++-++--", "--++-++-+-++-+-++---", "--++-+-+-++-+-++-+--", "-+--+++-+-+-+-++--+-", "-+--++-+-+++-+-+---+", "--+-+++--+-+++---++-", "--+-++-++--++-+-+--+", "-+-+-+-++--+-++--++-", "-+-+-++--+--+++-+--+", "---++-+++-+-++---+-+", "---++-++-+++--+-+-+-", "-++---+-++++--+--+-+", "-++----++++-++--+-+-")
_ORDERS = {"compressed_tensors": tuple(range(256, 3, -4)) + (2,),
           "quarot": (172, 156, 140, 108, 60, 52, 40, 36, 28, 20, 12),
           "spinquant": (172, 156, 140, 108, 60, 52, 44, 40, 36, 28, 20, 12),
           "fast_hadamard_transform": (40, 28, 20, 12)}


def _legendre(q: int) -> np.ndarray:
    """chi(d) for d = 0..q-1 by Euler's criterion d^((q-1)/2) mod q."""
    chi = np.array([pow(d, (q - 1) // 2, q) for d in range(q)], np.int64)
    return np.where(chi == q - 1, -1, chi)


def _jacobsthal(q: int) -> np.ndarray:
    i = np.arange(q)
    return _legendre(q)[(i[:, None] - i[None, :]) % q]


def _paley1(q: int) -> np.ndarray:
    """Sloane's orientation: the first row +, -, -, ...; the first column all +."""
    h = np.empty((q + 1, q + 1), np.int64)
    h[0, :], h[:, 0] = -1, 1
    h[1:, 1:] = _jacobsthal(q) + np.eye(q, dtype=np.int64)
    return h


def _conference(q: int) -> np.ndarray:
    c = np.ones((q + 1, q + 1), np.int64)
    c[0, 0] = 0
    c[1:, 1:] = _jacobsthal(q)
    return c


def _pm(rows) -> np.ndarray:
    return np.array([[1 if ch == "+" else -1 for ch in r] for r in rows], np.int64)


def _double(h: np.ndarray, times: int = 1) -> np.ndarray:
    for _ in range(times):
        h = np.block([[h, h], [h, -h]])
    return h


def _circulants(rows) -> list:
    return [np.stack([np.roll(r, i) for i in range(len(r))]) for r in _pm(rows)]


def _compressed_tensors(k: int) -> np.ndarray:
    """Sloane's library as compressed-tensors' hadamards.safetensors holds it."""
    if k & (k - 1) == 0 and k != 32:
        return _double(np.ones((1, 1), np.int64), k.bit_length() - 1)
    if k == 20:
        return _pm(_CT_HALL_20)
    if k == 40:
        return _double(_paley1(19))
    if k in _CT_ROWS:
        kind, times, rows = _CT_ROWS[k]
        A, B, C, D = _circulants(rows)
        if kind == "gs":
            R = np.eye(len(A), dtype=np.int64)[::-1]
            h = np.block([[A, B @ R, C @ R, D @ R], [-B @ R, A, -D.T @ R, C.T @ R], [-C @ R, D.T @ R, A, -B.T @ R],
                          [-D @ R, -C.T @ R, B.T @ R, A]])
        elif kind == "will2":
            h = np.block([[A, B, C, D], [-B, A, D, -C], [-C, -D, A, B], [-D, C, -B, A]])
        else:
            h = np.block([[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B], [-D, -C, B, A]])
        return _double(h, times)
    if k in (52, 156, 172):
        return _small("quarot", k)
    q = k - 1
    prime_q = q % 4 == 3 and all(q % d for d in range(2, int(q ** 0.5) + 1))
    if prime_q and q >= 211:  # Sloane's larger Paley I files: normalized, back-circulant core
        i = np.arange(q)
        core = _legendre(q)[(i[:, None] + i[None, :]) % q]
        h = np.ones((k, k), np.int64)
        h[1:, 1:] = np.where(core == 0, -1, core)
        return h
    if prime_q:
        return _paley1(q)
    half = k // 2 - 1  # Paley II of a prime half - 1, or doubled from the file's own k / 2
    if all(half % d for d in range(2, int(half ** 0.5) + 1)) and half % 4 == 1 and k not in (56, 112):
        c, i = _conference(half), np.eye(k // 2, dtype=np.int64)
        return np.block([[c + i, c - i], [c - i, -c - i]])
    return _double(_compressed_tensors(k // 2))


def _small(source: str, k: int) -> np.ndarray:
    if source == "compressed_tensors":
        return _compressed_tensors(k)
    key = ("quarot" if source == "spinquant" else source, k)
    if key in _WILLIAMSON:
        rows = [np.array([1 if ch == "+" else -1 for ch in r]) for r in _WILLIAMSON[key]]
        circ = [np.stack([np.roll(r, i) for i in range(len(r))]) for r in rows]
        A, B, C, D = circ
        return np.block([[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B], [-D, -C, B, A]])
    if k == 40:
        h = _paley1(19)
        return np.block([[h, h], [h, -h]])
    if source == "fast_hadamard_transform":  # 12: Paley II of GF(5), each entry of C a 2x2 block
        c = _conference(5)
        out = np.empty((12, 12), np.int64)
        out[0::2, 0::2], out[0::2, 1::2], out[1::2, 0::2], out[1::2, 1::2] = c, c, c, -c
        return out + np.kron(np.eye(6, dtype=np.int64), [[1, -1], [-1, -1]])
    if k in _QUAROT_PALEY2:
        c, i = _conference(_QUAROT_PALEY2[k]), np.eye(k // 2, dtype=np.int64)
        return np.block([[c + i, c - i], [c - i, -c - i]])
    return _paley1(_QUAROT_PALEY1.get(k, k - 1))  # 44 (SpinQuant): q = 43


@lru_cache(maxsize=64)
def _matrix(n: int, source: str) -> np.ndarray:
    """H_K (x) H_{2^m} / sqrt(n) in float32 (float64 products, rounded once)."""
    for k in _ORDERS[source] + (1,):
        p = n // k
        if n % k == 0 and p & (p - 1) == 0:
            break
    else:
        raise ValueError(f"x: a last axis of {n} is not K * 2^m for {source}")
    h2 = np.ones((1, 1))
    while h2.shape[0] < p:
        h2 = np.kron([[1.0, 1.0], [1.0, -1.0]], h2)
    small = np.ones((1, 1)) if k == 1 else _small(source, k).astype(np.float64)
    return (np.kron(small, h2) / math.sqrt(n)).astype(np.float32)


def hadamard_transform(x, signs, *, source="quarot", inverse=False):
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"x: expected a float array [..., n] with n >= 1, got {x.dtype} {x.shape}")
    n = x.shape[-1]
    s = np.asarray(signs)
    if s.shape != (n,) or not np.isin(s, (-1, 1)).all():
        raise ValueError(f"signs: expected {n} entries of +-1, got {s.shape}")
    h = _matrix(n, source)
    s = s.astype(np.float32)
    x32 = x.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        if inverse:
            return (x32 @ h) * s  # rows: H^T y, then the signs
        return (x32 * s) @ h.T


def small_hadamard(k, *, source="quarot"):
    if not isinstance(k, (int, np.integer)) and not (isinstance(k, np.ndarray) and k.dtype.kind in "iu"):
        raise TypeError(f"k: expected an integer, got {type(k).__name__}")
    k = int(k)
    if k != 1 and k not in _ORDERS[source]:
        raise ValueError(f"k: {k} is not one of {source}'s orders")
    return np.ones((1, 1), np.int8) if k == 1 else _small(source, k).astype(np.int8)


_SOURCES = ["quarot", "spinquant", "fast_hadamard_transform", "compressed_tensors"]
OPS = {"quant.hadamard_transform": hadamard_transform, "quant.small_hadamard": small_hadamard}
VARIANTS = {"quant.hadamard_transform": {"source": _SOURCES, "inverse": [False, True]},
            "quant.small_hadamard": {"source": _SOURCES}}

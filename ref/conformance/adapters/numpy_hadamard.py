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
_ORDERS = {"quarot": (172, 156, 140, 108, 60, 52, 40, 36, 28, 20, 12),
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


def _small(source: str, k: int) -> np.ndarray:
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


_SOURCES = ["quarot", "spinquant", "fast_hadamard_transform"]
OPS = {"quant.hadamard_transform": hadamard_transform, "quant.small_hadamard": small_hadamard}
VARIANTS = {"quant.hadamard_transform": {"source": _SOURCES, "inverse": [False, True]},
            "quant.small_hadamard": {"source": _SOURCES}}

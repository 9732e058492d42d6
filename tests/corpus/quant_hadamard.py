"""The Hadamard-transform bug corpus: wrong kernels written the way rotation code goes
wrong, each one step changed from the default run's dense float32 kernel
(ref.conformance.adapters.numpy_hadamard) or from a float32 butterfly, and correct
alternatives that must pass.

HADAMARD_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation;
CORRECT: name -> Implementation.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_hadamard as D
from ref.conformance.implementation import Implementation

OP, SMALL = "quant.hadamard_transform", "quant.small_hadamard"


def butterfly(x, signs, *, source="quarot", inverse=False, stride=None, scale=None, small=None, out=np.float32,
              fast_small=False):
    """A float32 butterfly kernel (fast-hadamard-transform's shape): the power-of-two
    stages on x [..., K, 2^m], then H_K on the slow index. The keywords make it wrong:
    `stride(h, p)` the pairing stride of each stage, `scale(n, k)` the normalization,
    `small(h)` the K matrix as used, `fast_small` H_K on the fast index."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError("x: expected a float array [..., n]")
    n = x.shape[-1]
    s = np.asarray(signs)
    if s.shape != (n,) or not np.isin(s, (-1, 1)).all():
        raise ValueError("signs: expected +-1 per column")
    k = next((k for k in D._ORDERS[source] + (1,) if n % k == 0 and (n // k) & (n // k - 1) == 0), None)
    if k is None:
        raise ValueError("x: n is not K * 2^m")
    p = n // k
    hk = np.ones((1, 1), np.float32) if k == 1 else D._small(source, k).astype(np.float32)
    hk = hk.T if inverse else hk
    hk = small(hk) if small else hk
    z = x.astype(np.float32) * (1 if inverse else s.astype(np.float32))
    z = z.reshape(*x.shape[:-1], p, k).swapaxes(-1, -2) if fast_small else z.reshape(*x.shape[:-1], k, p)
    h = 1
    with np.errstate(invalid="ignore", over="ignore"):
        while h < p:
            st = stride(h, p) if stride else h
            pairs = z.reshape(*z.shape[:-1], p // (2 * st), 2, st)
            z = np.stack([pairs[..., 0, :] + pairs[..., 1, :], pairs[..., 0, :] - pairs[..., 1, :]],
                         axis=-2).reshape(z.shape)
            h *= 2
        z = np.einsum("kj,...jm->...km", hk, z)
        z = z.swapaxes(-1, -2) if fast_small else z
        y = z.reshape(x.shape) * np.float32(scale(n, k) if scale else 1 / math.sqrt(n))
    return (y * s.astype(np.float32) if inverse else y).astype(out)


def _kernel(**wrong):
    def kernel(x, signs, *, source="quarot", inverse=False):
        return butterfly(x, signs, source=source, inverse=inverse, **wrong)
    return kernel


def _signs_after(x, signs, *, source="quarot", inverse=False):
    """diag(s) H x: the signs flipped on the way out (and, inverse, on the way in)."""
    s = np.asarray(signs).astype(np.float32)
    if inverse:
        return D.hadamard_transform(np.asarray(x, np.float32) * s, np.ones_like(s), source=source, inverse=True)
    return D.hadamard_transform(x, np.ones_like(s), source=source) * s


def _fht_twelve(hk):
    """Any order-12 matrix replaced by fast-hadamard-transform's (both Hadamard)."""
    return D._small("fast_hadamard_transform", 12).astype(np.float32) if hk.shape == (12, 12) else hk


def _unnormalized(original):
    def matrix(n, source):
        return (original(n, source) * np.float32(math.sqrt(n))).astype(np.float32)
    return matrix


def _wikipedia_paley1(original):
    """I + [[0, 1^T], [-1, Q]]: Wikipedia's border, D H D of Sloane's (both Hadamard)."""
    def paley1(q):
        h = original(q)
        h[0, 1:], h[1:, 0] = -h[0, 1:], -h[1:, 0]
        return h
    return paley1


def _small_interleaved(source="quarot", k=12):
    """Paley II with each conference-matrix entry a 2x2 block, where Sloane's blocks are meant."""
    if source != "fast_hadamard_transform" and k in (28, 36):
        c = D._conference(k // 2 - 1)
        out = np.kron(c, [[1, 1], [1, -1]]) + np.kron(np.eye(k // 2, dtype=np.int64), [[1, -1], [-1, -1]])
        return out
    return D._small(source, k)


HADAMARD_BUGS = {
    "Paley I with Wikipedia's border (D H D of the shipped matrix)": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_paley1", _wikipedia_paley1)),
    "Paley II interleaved where QuaRot's 28 and 36 are in blocks": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_small", lambda original: _small_interleaved)),
    "not normalized (no 1/sqrt(n))": (OP, "Unnormalized", _kernel(scale=lambda n, k: 1.0)),
    "dense kernel not normalized": (OP, "Unnormalized", patched(D.hadamard_transform, D, "_matrix", _unnormalized)),
    "normalized by 1/n": (OP, "Unnormalized", _kernel(scale=lambda n, k: 1.0 / n)),
    "normalized by the power-of-two part only": (OP, "Unnormalized", _kernel(scale=lambda n, k: 1 / math.sqrt(n // k))),
    "butterfly stride fixed at 1": (OP, "ButterflyStride", _kernel(stride=lambda h, p: 1)),
    "butterfly stride fixed at n/2": (OP, "ButterflyStride", _kernel(stride=lambda h, p: p // 2)),
    "signs applied after the transform": (OP, "SignsOrder", _signs_after),
    "Kronecker order swapped (H_K on the fast index)": (OP, "KroneckerOrder", _kernel(fast_small=True)),
    "small factor transposed (applied from the wrong side)": (OP, "SmallFactorSide", _kernel(small=lambda h: h.T)),
    "fast-hadamard-transform's H_12 where QuaRot's is meant": (
        OP, "SmallMatrix", _kernel(small=_fht_twelve)),
}


def bug(name: str) -> Implementation:
    op, _, kernel = HADAMARD_BUGS[name]
    return Implementation(name, {op: kernel}, variants={op: D.VARIANTS[op]})


CORRECT = {
    "float32 butterfly (fast-hadamard-transform's order)": Implementation(
        "float32 butterfly", {OP: _kernel()}, variants={OP: D.VARIANTS[OP]}),
    "bfloat16 output from a float32 butterfly": Implementation(
        "bfloat16 butterfly", {OP: _kernel(out=ml_dtypes.bfloat16)}, variants={OP: D.VARIANTS[OP]}),
    "float16 output from a float32 butterfly": Implementation(
        "float16 butterfly", {OP: _kernel(out=np.float16)}, variants={OP: D.VARIANTS[OP]}),
    "small matrices from the dense kernel's own constructions": Implementation(
        "numpy small matrices", {SMALL: D.small_hadamard}, variants={SMALL: D.VARIANTS[SMALL]}),
}

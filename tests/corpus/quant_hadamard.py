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


def butterfly(x, signs=None, *, source="quarot", inverse=False, stride=None, scale=None, small=None, out=np.float32,
              fast_small=False):
    """A float32 butterfly kernel (fast-hadamard-transform's shape): the power-of-two
    stages on x [..., K, 2^m], then H_K on the slow index. The keywords make it wrong:
    `stride(h, p)` the pairing stride of each stage, `scale(n, k)` the normalization,
    `small(h)` the K matrix as used, `fast_small` H_K on the fast index."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError("x: expected a float array [..., n]")
    n = x.shape[-1]
    s = np.ones(n, np.int8) if signs is None else np.asarray(signs)
    if s.dtype.kind not in "iuf" or s.shape != (n,) or not np.isin(s, (-1, 1)).all():
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
    def kernel(x, signs=None, *, source="quarot", inverse=False):
        return butterfly(x, signs, source=source, inverse=inverse, **wrong)
    return kernel


def _signs_after(x, signs=None, *, source="quarot", inverse=False):
    """diag(s) H x: the signs flipped on the way out (and, inverse, on the way in)."""
    s = np.ones(np.shape(x)[-1], np.float32) if signs is None else np.asarray(signs).astype(np.float32)
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


def _signs_read(read):
    """The default kernel with its signs check replaced by `read(s)`: the +-1 signs it then uses, or
    a ValueError. A sign of magnitude other than 1 scales its column (the transform is linear)."""
    def kernel(x, signs=None, *, source="quarot", inverse=False):
        s = np.asarray(read(np.ones(np.shape(x)[-1], np.int8) if signs is None else np.asarray(signs)))  # [n]
        mag = np.abs(s).astype(np.float32)
        if (mag == 0).any():
            raise ValueError("signs: a sign of 0")
        unit = np.sign(s).astype(np.int8)
        if inverse:
            return D.hadamard_transform(x, unit, source=source, inverse=True) * mag
        return D.hadamard_transform(np.asarray(x) * mag if (mag != 1).any() else x, unit, source=source)
    return kernel


def _random_when_left_out(x, signs=None, *, source="quarot", inverse=False):
    """Signs left out drawn at random (compressed-tensors' public random_hadamard_matrix draws its own)."""
    if signs is None:
        signs = np.random.default_rng(0).choice(np.int8([-1, 1]), np.shape(x)[-1])
    return D.hadamard_transform(x, signs, source=source, inverse=inverse)


def _ct_transform_small(k, wrong):
    """The default kernel's dense matrix with compressed-tensors' H_k replaced by `wrong` wherever n
    decomposes to K = k (built here, so that the kernel's matrix cache keeps only right matrices)."""
    def replacement(original):
        def matrix(n, source):
            if source != "compressed_tensors" or next(j for j in D._ORDERS[source] + (1,) if n % j == 0 and (
                    n // j) & (n // j - 1) == 0) != k:
                return original(n, source)
            return (np.kron(wrong, D._double(np.ones((1, 1)), (n // k).bit_length() - 1)) / math.sqrt(n)).astype(
                np.float32)
        return matrix
    return replacement


def _ct_order(k, build):
    """compressed-tensors' order k built by `build(original)` (the default kernel's builder
    `original(k)` otherwise)."""
    def replacement(original):
        return lambda j: build(original) if j == k else original(j)
    return replacement


def _ct_rows(k, edit):
    """compressed-tensors' rows data with the entry of order k changed by `edit(kind, times, rows)`."""
    return lambda original: {**original, k: edit(*original[k])}


def _flip(row: str, *at: int) -> str:
    return "".join(("+" if c == "-" else "-") if i in at else c for i, c in enumerate(row))


def _ct_orders(drop):
    """compressed-tensors' list without the orders in `drop` (a file with fewer matrices)."""
    return lambda original: {**original, "compressed_tensors": tuple(k for k in original["compressed_tensors"]
                                                                     if k not in drop)}


def _inverse_untransposed(which):
    """The inverse under the sources in `which` as s * H y (the transpose skipped: a symmetric H_K assumed)."""
    def kernel(x, signs=None, *, source="quarot", inverse=False):
        if not (inverse and source in which):
            return D.hadamard_transform(x, signs, source=source, inverse=inverse)
        n = np.shape(x)[-1]
        s = np.ones(n, np.int8) if signs is None else np.asarray(signs)
        return D.hadamard_transform(x, np.ones(n, np.int8), source=source) * s.astype(np.float32)
    return kernel


def _ct_inverse_with_quarots_k(x, signs=None, *, source="quarot", inverse=False):
    """The inverse under compressed_tensors decomposed with QuaRot's K where QuaRot has one (40 * 8, not 160 * 2)."""
    n = np.shape(x)[-1] if np.ndim(x) else 0
    quarot_k = any(n % k == 0 and (n // k) & (n // k - 1) == 0 for k in D._ORDERS["quarot"] + (1,))
    if inverse and source == "compressed_tensors" and quarot_k:
        source = "quarot"
    return D.hadamard_transform(x, signs, source=source, inverse=inverse)


def _spinquant_small(build):
    """SpinQuant's matrix of order k as `build(original, k)` (None: the default kernel's)."""
    def replacement(original):
        def small(source, k):
            h = build(original, k) if source == "spinquant" else None
            return original(source, k) if h is None else h
        return small
    return replacement


def _mod_q_paley2(q):
    """Paley II with the field of order q taken as the integers mod q (GF(25) is not Z/25)."""
    c, i = D._conference(q), np.eye(q + 1, dtype=np.int64)
    return np.block([[c + i, c - i], [c - i, -c - i]])


def _normalized_paley1(q):
    """Sloane's normalized Paley I, [[1, 1^T], [1, B]], B[i, j] = chi(i + j), -1 where i + j = 0 mod q."""
    i = np.arange(q)
    core = D._legendre(q)[(i[:, None] + i[None, :]) % q]
    h = np.ones((q + 1, q + 1), np.int64)
    h[1:, 1:] = np.where(core == 0, -1, core)
    return h


_CT, _HT = "compressed_tensors", D.hadamard_transform

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
    # issue 14's adversary (had): bugs no vector caught before
    "signs checked as nonzero only (a sign of 2 scales its column)": (
        OP, "InvalidInput", _signs_read(lambda s: s)),
    "signs checked as nonzero, then np.sign (a sign of 2 read as +1)": (
        OP, "InvalidInput", _signs_read(np.sign)),
    "signs of shape [1, n] flattened": (OP, "InvalidInput", lambda x, signs=None, **kw: _HT(
        x, None if signs is None else np.reshape(signs, -1), **kw)),
    "boolean signs read as +-1 (True +1, False -1)": (OP, "InvalidInput", lambda x, signs=None, **kw: _HT(
        x, np.where(signs, 1, -1).astype(np.int8) if np.asarray(signs).dtype == bool else signs, **kw)),
    "boolean signs accepted as they compare (True == 1)": (OP, "InvalidInput", lambda x, signs=None, **kw: _HT(
        x, np.asarray(signs).astype(np.int8) if np.asarray(signs).dtype == bool else signs, **kw)),
    "signs left out drawn at random": (OP, "SignsDefault", _random_when_left_out),
    "a power of two always Sylvester's H_n, even under compressed_tensors (its 32 is paley1(31))": (
        OP, "SmallMatrix", patched(_HT, D, "_matrix", lambda original: lambda n, source: original(
            n, "quarot" if n & (n - 1) == 0 else source))),
    "compressed-tensors' 32 as Sylvester's (had.32.pal ignored), in the transform": (
        OP, "SmallMatrix", patched(_HT, D, "_matrix", _ct_transform_small(32, D._double(np.ones((1, 1)), 5)))),
    "compressed-tensors' 20 as QuaRot's paley1(19), in the transform": (
        OP, "SmallMatrix", patched(_HT, D, "_matrix", _ct_transform_small(20, D._paley1(19)))),
    "compressed-tensors' 52 as Paley II of 25 taken mod 25 (not QuaRot's Williamson rows)": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_compressed_tensors", _ct_order(
            52, lambda original: _mod_q_paley2(25)))),
    "compressed-tensors' 92, one sign of Williamson row A wrong": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_CT_ROWS", _ct_rows(
            92, lambda kind, times, rows: (kind, times, (_flip(rows[0], 22),) + rows[1:])))),
    "compressed-tensors' 244, two symmetric signs of Williamson row D wrong": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_CT_ROWS", _ct_rows(
            244, lambda kind, times, rows: (kind, times, rows[:3] + (_flip(rows[3], 1, 60),))))),
    "compressed-tensors' .will in the second quaternion layout (the .twill one)": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_CT_ROWS", lambda original: {
            k: ("will2" if kind == "will" else kind, t, rows) for k, (kind, t, rows) in original.items()})),
    "compressed-tensors' normalized Paley from 200 (had.200.pal is plain)": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_compressed_tensors", _ct_order(
            200, lambda original: _normalized_paley1(199)))),
    "compressed-tensors' list without 256": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_ORDERS", _ct_orders({256}))),
    "compressed-tensors' list without 2": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_ORDERS", _ct_orders({2}))),
    "the inverse under compressed_tensors with QuaRot's K (40 * 8 where its 160 * 2 is meant)": (
        OP, "SmallMatrix", _ct_inverse_with_quarots_k),
    "the inverse under compressed_tensors without the transpose": (
        OP, "SmallFactorSide", _inverse_untransposed({_CT})),
    "the inverse under spinquant without the transpose": (OP, "SmallFactorSide", _inverse_untransposed({"spinquant"})),
    "SpinQuant's 52, 156, 172 as Paley I of K - 1 (QuaRot's Williamson rows not found under its name)": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_small", _spinquant_small(
            lambda original, k: D._paley1(k - 1) if k in (52, 156, 172) else None))),
    "SpinQuant's 12 from fast-hadamard-transform": (
        SMALL, "SmallMatrix", patched(D.small_hadamard, D, "_small", _spinquant_small(
            lambda original, k: original("fast_hadamard_transform", 12) if k == 12 else None))),
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

"""OSCAR's offline calibration (spec/kv.md#oscar-rotation): attention-aware covariance
targets for keys and values, and the rotation R = U H P_br built from their eigenvectors.

From calibration activations q [B, Hq, T, D], k, v [B, H, T, D] (GQA: query head j
belongs to KV head j // g, g = Hq / H), in float64, N = B T tokens:

    C_q,h = Q_h^T Q_h / (N g)            Q_h: the N g query rows of KV head h's group
    C_K   = mean_h C_q,h                 (the key target: E[q q^T], since logit error is
                                          (k - k_hat) q and E|.|^2 = e^T C e)
    w_t   = k_t^T C_q,h k_t,  w <- w N / sum(w)            (per head; sum floored at 1e-12)
    C_V   = mean_h sum_t w_t v_t v_t^T / N

    C = U diag(lambda) U^T  (eigh: lambda ascending; in each eigenvector the first entry
                             within 1e-9 of its largest magnitude made positive)
    R = U H P_br             H = Sylvester Hadamard / sqrt(D); P_br sends the eigenvalue of
                             rank i (descending) to column bitrev(i)

Rows are rotated as x R (keys and queries by R_K: q R_K . k R_K = q . k). The sign
convention is ours (eigenvectors are defined up to sign; the reference keeps whatever
torch.linalg.eigh returns): R^T C R = P_br^T H diag(lambda) H P_br does not depend on it.
Equal eigenvalues: rank order is eigh's ascending order reversed, so P_br is the fixed
permutation perm[bitrev(i)] = D - 1 - i; C does not determine U within a repeated
eigenvalue's eigenspace, so this is one valid answer, not a judged rule (spec).

Reference: arXiv 2605.17757 (Sections 3-4); FutureMLS-Lab/OSCAR@473ff3f
rotation/compute_kv_rotation.py (`compute_qqt`, `compute_sst`, `make_br_perm_matrix`,
`compose_rotation` "r_h_pbr").
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.kv.oscar import check_cache
from ref.quant.hadamard import hadamard_matrix

__all__ = ["SIGN_TIE", "Composition", "bit_reversal", "covariances", "eigen_permutation", "rotation"]

SIGN_TIE = 1e-9  # entries of a unit eigenvector this close to its largest magnitude tie for the sign rule


class Composition(enum.Enum):
    """How the eigenvectors U, the Hadamard H and the permutation P_br compose."""

    R_H_PBR = "r_h_pbr"  # U H P_br: the paper's and the reference's default
    R_H = "r_h"  # U H
    R_PBR = "r_pbr"  # U P_br (the reference's "br")
    PLAIN = "plain"  # U


def _log2(d: int, name: str) -> int:
    d = integer(d, name, minimum=1)
    if d & (d - 1):
        raise ValueError(f"{name}: expected a power of two, got {d}")
    return d.bit_length() - 1


def bit_reversal(d: int) -> NDArray[np.int64]:
    """The bit-reversal permutation of 0 .. d-1 (d a power of two): i -> i's log2(d) bits reversed."""
    bits = _log2(d, "d")
    idx = np.arange(d, dtype=np.int64)
    rev = np.zeros(d, dtype=np.int64)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    return rev


def eigen_permutation(d: int) -> NDArray[np.int64]:
    """perm with P_br = I[:, perm]: column bitrev(i) takes eigh's column D - 1 - i, the
    eigenvalue of descending rank i."""
    perm = np.empty(d, dtype=np.int64)
    perm[bit_reversal(d)] = np.arange(d - 1, -1, -1)
    return perm


def covariances(q: ArrayLike, k: ArrayLike, v: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(C_K, C_V) [D, D] from calibration q [B, Hq, T, D], k, v [B, H, T, D] (module docstring)."""
    q64, k64, v64 = (check_cache(a, n, "[B, heads, T, D]") for a, n in ((q, "q"), (k, "k"), (v, "v")))
    b, h, t, d = k64.shape
    if v64.shape != k64.shape:
        raise ValueError(f"v: expected the shape of k {k64.shape}, got {v64.shape}")
    if q64.shape[0] != b or q64.shape[2] != t or q64.shape[3] != d:
        raise ValueError(f"q: expected [{b}, Hq, {t}, {d}], got {q64.shape}")
    if h == 0 or q64.shape[1] % h or q64.shape[1] == 0:
        raise ValueError(f"q: expected a positive multiple of the {h} KV heads, got {q64.shape[1]} query heads")
    if b * t == 0:
        raise ValueError("k: expected at least one calibration token, got none")
    g, n = q64.shape[1] // h, b * t
    qg = q64.reshape(b, h, g, t, d).transpose(1, 0, 2, 3, 4).reshape(h, n * g, d)  # [H, N g, D]
    c_q = np.einsum("hnd,hne->hde", qg, qg) / (n * g)  # [H, D, D]
    kh = k64.transpose(1, 0, 2, 3).reshape(h, n, d)  # [H, N, D]
    vh = v64.transpose(1, 0, 2, 3).reshape(h, n, d)  # [H, N, D]
    w = np.einsum("hnd,hde,hne->hn", kh, c_q, kh)  # [H, N]: k_t^T C_q k_t >= 0
    w = w / np.maximum(w.sum(axis=1, keepdims=True), 1e-12) * n
    c_v = np.einsum("hn,hnd,hne->hde", w, vh, vh) / n  # [H, D, D]
    c_k, c_v = c_q.mean(axis=0), c_v.mean(axis=0)
    return (c_k + c_k.T) / 2, (c_v + c_v.T) / 2


def _covariance(c: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(c)
    if arr.dtype.kind != "f":
        raise TypeError(f"c: expected a float array, got {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"c: expected a square [D, D] matrix, got shape {arr.shape}")
    c64 = arr.astype(np.float64)
    if not np.isfinite(c64).all():
        raise ValueError("c: expected finite values, got NaN or Inf")
    if c64.size and np.abs(c64 - c64.T).max() > 1e-9 * max(1.0, np.abs(c64).max()):
        raise ValueError("c: expected a symmetric matrix")
    return c64


def rotation(c: ArrayLike, *, composition: Composition | str = Composition.R_H_PBR) -> NDArray[np.float64]:
    """c [D, D] symmetric (D a power of two) -> the orthogonal R [D, D], float64 (module docstring)."""
    comp = member(composition, Composition, "composition")
    c64 = _covariance(c)
    d = c64.shape[0]
    _log2(d, "c: the head dim")
    _, u = np.linalg.eigh(c64)  # columns: eigenvectors, eigenvalues ascending
    mag = np.abs(u)
    # [D]: the first entry within SIGN_TIE of the column's largest magnitude (an exact tie such as 1/sqrt(2)
    # twice comes back from a solver with either entry an ulp larger; the window makes it a tie for all)
    top = np.argmax(mag >= mag.max(axis=0, initial=0.0) - SIGN_TIE, axis=0)
    u = u * np.where(u[top, np.arange(d)] < 0, -1.0, 1.0)
    if comp in (Composition.R_H_PBR, Composition.R_H):
        u = u @ hadamard_matrix(d)
    if comp in (Composition.R_H_PBR, Composition.R_PBR):
        u = u[:, eigen_permutation(d)]
    return u

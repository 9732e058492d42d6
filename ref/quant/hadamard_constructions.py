"""Hadamard matrices from first principles: Sylvester doubling, Paley's two
constructions over a finite field GF(q) (q a prime or a prime power) and
Williamson's array of four circulants (spec/quant.md#hadamard-matrices).

A Hadamard matrix H of order n has entries +-1 and H H^T = n I. Orders the field
uses that are not powers of two (12, 20, 28, 36, 40, 52, 60, 108, 140, 156, 172)
come from these constructions, each in a stated orientation:

  sylvester(h)          [[h, h], [h, -h]]                           order 2n
  paley1(q)             q = 3 mod 4:  I + [[0, -1^T], [1, Q]]        order q + 1
  paley2(q)             q = 1 mod 4:  [[C + I, C - I], [C - I, -C - I]] with
                        C = [[0, 1^T], [1, Q]]                       order 2(q + 1)
                        (interleaved=True: C (x) [[1, 1], [1, -1]] + I (x) [[1, -1], [-1, -1]])
  williamson(a, b, c, d)  [[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B], [-D, -C, B, A]]
                        A..D circulant with first rows a..d          order 4m
                        (layout="second": [[A, B, C, D], [-B, A, D, -C], [-C, -D, A, B], [-D, C, -B, A]])
  goethals_seidel(a, b, c, d)  [[A, BR, CR, DR], [-BR, A, -D'R, C'R], [-CR, D'R, A, -B'R],
                        [-DR, -C'R, B'R, A]], R the back identity, ' the transpose    order 4m
  paley1_normalized(q)  q = 3 mod 4: [[1, 1^T], [1, B]], B[i, j] = chi(x_i + x_j), -1 where
                        x_i + x_j = 0 (back-circulant for prime q)      order q + 1

Q is the Jacobsthal matrix, Q[i, j] = chi(x_i - x_j) with chi the quadratic
character of GF(q) (0 at 0, +1 on the nonzero squares, -1 elsewhere) and x_0, x_1,
... the field's elements in the order `field_elements` gives. These orientations are
Sloane's library's (and so QuaRot's): Paley I with the border [[0, -1^T], [1, Q]]
(Wikipedia's [[0, 1^T], [-1, Q]] is D H D, D = diag(-1, 1, ..., 1)), Paley II in
2x2 blocks of C (Wikipedia's, and fast-hadamard-transform's order 12, interleave them). Reference: Paley,
"On orthogonal matrices", J. Math. Phys. 12 (1933); Williamson, Duke Math. J. 11 (1944).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, choice, integer

__all__ = ["field_elements", "goethals_seidel", "is_hadamard", "jacobsthal", "paley1", "paley1_normalized", "paley2",
           "prime_power", "quadratic_character", "sylvester", "williamson"]


def prime_power(q: int) -> tuple[int, int]:
    """(p, k) with q = p^k and p prime; ValueError naming q when q is not a prime power."""
    q = integer(q, "q", minimum=2)
    p = next(d for d in range(2, q + 1) if q % d == 0)  # the smallest prime factor
    k, rest = 0, q
    while rest % p == 0:
        rest, k = rest // p, k + 1
    if rest != 1:
        raise ValueError(f"q: expected a prime power, got {q}")
    return p, k


def _irreducible(p: int, k: int) -> NDArray[np.int64]:
    """The monic irreducible polynomial of degree k over GF(p) whose lower coefficients,
    read as base-p digits (constant term first), are smallest: coefficients [k + 1]."""
    for code in range(p ** k):
        low = np.array([(code // p ** i) % p for i in range(k)], np.int64)
        poly = np.append(low, 1)
        if low[0] != 0 and not _has_factor(poly, p):
            return poly
    raise AssertionError("unreachable: an irreducible polynomial of every degree exists")


def _has_factor(poly: NDArray[np.int64], p: int) -> bool:
    """Whether the monic `poly` over GF(p) has a monic factor of degree 1..deg/2."""
    k = len(poly) - 1
    for degree in range(1, k // 2 + 1):
        for code in range(p ** degree):
            factor = np.append([(code // p ** i) % p for i in range(degree)], 1).astype(np.int64)
            if not _remainder(poly, factor, p).any():
                return True
    return False


def _remainder(num: NDArray[np.int64], den: NDArray[np.int64], p: int) -> NDArray[np.int64]:
    """num mod den over GF(p) (den monic), coefficients constant term first."""
    num = num.copy() % p
    for shift in range(len(num) - len(den), -1, -1):
        lead = num[shift + len(den) - 1]
        num[shift:shift + len(den)] = (num[shift:shift + len(den)] - lead * den) % p
    return num[:len(den) - 1]


def field_elements(q: int) -> NDArray[np.int64]:
    """GF(q)'s elements as coefficient vectors [q, k] over GF(p): element i has the
    base-p digits of i (constant term first), so 0 is element 0 and 1 is element 1."""
    p, k = prime_power(q)
    i = np.arange(q)
    return np.stack([(i // p ** j) % p for j in range(k)], axis=1)  # [q, k]


def quadratic_character(q: int) -> NDArray[np.int64]:
    """chi over GF(q) in `field_elements` order: [q] of 0, +1 (nonzero squares), -1."""
    p, k = prime_power(q)
    if p == 2:
        raise ValueError(f"q: expected an odd prime power, got {q}")
    if k == 1:  # GF(p): the integers mod p
        squares = set(((np.arange(1, q) ** 2) % q).tolist())
    else:
        elems, modulus, squares = field_elements(q), _irreducible(p, k), set()
        for e in elems[1:]:
            padded = np.zeros(2 * k, np.int64)
            padded[:2 * k - 1] = np.convolve(e, e) % p  # the square as a polynomial
            squares.add(int(np.dot(_remainder(padded, modulus, p), p ** np.arange(k))))
    chi = np.array([1 if i in squares else -1 for i in range(q)], np.int64)
    chi[0] = 0
    return chi


def jacobsthal(q: int) -> NDArray[np.int64]:
    """Q [q, q]: Q[i, j] = chi(x_i - x_j) over GF(q)."""
    p, _ = prime_power(q)
    elems = field_elements(q)  # [q, k]
    diff = (elems[:, None, :] - elems[None, :, :]) % p  # [q, q, k]
    index = diff @ (p ** np.arange(elems.shape[1]))  # [q, q]: the difference's element number
    return quadratic_character(q)[index]


def paley1(q: int) -> NDArray[np.int64]:
    """Paley's first construction, order q + 1 for q = 3 mod 4: I + [[0, -1^T], [1, Q]]."""
    q = integer(q, "q", minimum=3)
    if q % 4 != 3:
        raise ValueError(f"q: Paley I needs q = 3 mod 4, got {q}")
    s = np.zeros((q + 1, q + 1), np.int64)
    s[0, 1:], s[1:, 0], s[1:, 1:] = -1, 1, jacobsthal(q)
    return np.eye(q + 1, dtype=np.int64) + s


def paley1_normalized(q: int) -> NDArray[np.int64]:
    """Paley I as Sloane's larger files (had.212.pal and up) write it: first row and
    column all +1, then B[i, j] = chi(x_i + x_j), with -1 where x_i + x_j = 0."""
    q = integer(q, "q", minimum=3)
    if q % 4 != 3:
        raise ValueError(f"q: Paley I needs q = 3 mod 4, got {q}")
    p, _ = prime_power(q)
    elems = field_elements(q)
    index = ((elems[:, None, :] + elems[None, :, :]) % p) @ (p ** np.arange(elems.shape[1]))  # [q, q]: x_i + x_j
    core = quadratic_character(q)[index]
    h = np.ones((q + 1, q + 1), np.int64)
    h[1:, 1:] = np.where(index == 0, -1, core)
    return h


def paley2(q: int, *, interleaved: bool = False) -> NDArray[np.int64]:
    """Paley's second construction, order 2(q + 1) for q = 1 mod 4, from the symmetric
    conference matrix C = [[0, 1^T], [1, Q]]: [[1, 1], [1, -1]] (x) C + [[1, -1], [-1, -1]] (x) I
    (four blocks of order q + 1), or with `interleaved` the Kronecker factors the other
    way round (each entry of C a 2x2 block: +-1 as +-[[1, 1], [1, -1]], 0 as [[1, -1], [-1, -1]])."""
    q = integer(q, "q", minimum=5)
    interleaved = boolean(interleaved, "interleaved")
    if q % 4 != 1:
        raise ValueError(f"q: Paley II needs q = 1 mod 4, got {q}")
    c = np.zeros((q + 1, q + 1), np.int64)
    c[0, 1:], c[1:, 0], c[1:, 1:] = 1, 1, jacobsthal(q)
    eye = np.eye(q + 1, dtype=np.int64)
    if interleaved:
        return np.kron(c, [[1, 1], [1, -1]]) + np.kron(eye, [[1, -1], [-1, -1]])
    return np.kron([[1, 1], [1, -1]], c) + np.kron([[1, -1], [-1, -1]], eye)


def sylvester(h: ArrayLike) -> NDArray[np.int64]:
    """[[h, h], [h, -h]]: a Hadamard matrix of twice h's order."""
    h = np.asarray(h, np.int64)
    return np.block([[h, h], [h, -h]])


def _circulant(row: NDArray[np.int64]) -> NDArray[np.int64]:
    """The circulant whose row i is `row` shifted right by i."""
    m = len(row)
    return row[(np.arange(m)[None, :] - np.arange(m)[:, None]) % m]


def _four(a, b, c, d) -> list[NDArray[np.int64]]:
    rows = [np.asarray(v, np.int64) for v in (a, b, c, d)]
    if len({r.shape for r in rows}) != 1 or rows[0].ndim != 1:
        raise ValueError(f"a, b, c, d: expected four rows of one length, got shapes {[r.shape for r in rows]}")
    return [_circulant(r) for r in rows]


def williamson(a: ArrayLike, b: ArrayLike, c: ArrayLike, d: ArrayLike, *, layout: str = "first") -> NDArray[np.int64]:
    """Williamson's array [[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B], [-D, -C, B, A]]
    of the circulants with first rows a, b, c, d (+-1 each, one length m): order 4m,
    Hadamard when A^2 + B^2 + C^2 + D^2 = 4m I (test it with `is_hadamard`). `layout`
    "second": [[A, B, C, D], [-B, A, D, -C], [-C, -D, A, B], [-D, C, -B, A]] (the other
    quaternion order; Sloane's had.208/232/248.twill halves)."""
    A, B, C, D = _four(a, b, c, d)
    if choice(layout, "layout", ("first", "second")) == "second":
        return np.block([[A, B, C, D], [-B, A, D, -C], [-C, -D, A, B], [-D, C, -B, A]])
    return np.block([[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B], [-D, -C, B, A]])


def goethals_seidel(a: ArrayLike, b: ArrayLike, c: ArrayLike, d: ArrayLike) -> NDArray[np.int64]:
    """The Goethals-Seidel array as Sloane's had.188.tur and had.236.od have it:
    [[A, BR, CR, DR], [-BR, A, -D'R, C'R], [-CR, D'R, A, -B'R], [-DR, -C'R, B'R, A]]
    with A..D circulant (first rows a..d), R the back identity, ' the transpose."""
    A, B, C, D = _four(a, b, c, d)
    R = np.eye(A.shape[0], dtype=np.int64)[::-1]
    return np.block([[A, B @ R, C @ R, D @ R], [-B @ R, A, -D.T @ R, C.T @ R], [-C @ R, D.T @ R, A, -B.T @ R],
                     [-D @ R, -C.T @ R, B.T @ R, A]])


def is_hadamard(h: ArrayLike) -> bool:
    """Whether h is square with entries +-1 and h h^T = n I (exact integer arithmetic)."""
    h = np.asarray(h)
    if h.ndim != 2 or h.shape[0] != h.shape[1] or not np.isin(h, (-1, 1)).all():
        return False
    h = h.astype(np.int64)
    return bool(np.array_equal(h @ h.T, h.shape[0] * np.eye(h.shape[0], dtype=np.int64)))

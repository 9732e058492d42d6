"""The E8/D8 decoder bug corpus: wrong decoders written the way lattice quantizers go
wrong, each one step changed from the default run's decoder
(ref.conformance.adapters.numpy_lattice), and correct alternatives that must pass.

LATTICE_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that
one op; `CORRECT`: name -> Implementation of both ops.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_lattice as L
from ref.conformance.implementation import Implementation

E8, D8 = "quant.e8.nearest", "quant.d8.nearest"


def _no_coset(v):
    """E8 decoded as D8 alone: the half-integer coset never tried."""
    return [Fraction(c) for c in L.d8_point(v)]


def _smallest_error(errors):
    """The parity repaired on the coordinate nearest its integer (the best, not the worst)."""
    return min(range(len(errors)), key=lambda i: abs(errors[i]))


def _last_coordinate(errors):
    """The parity repaired on the last coordinate, whatever the errors."""
    return len(errors) - 1


def _same_way(v, f):
    """The repair moves toward x's side of f's neighbour the wrong way round (down when x >= f)."""
    return f - 1 if v >= f else f + 1


def _last_of_equals(errors):
    """The worst coordinate found with >=: the last of equally bad coordinates."""
    best = 0
    for i, e in enumerate(errors):
        if abs(e) >= abs(errors[best]):
            best = i
    return best


def _half_to_even(v):
    """np.rint's halfway rule (to even) instead of toward zero."""
    lo = math.floor(v)
    rest = v - lo
    return lo + 1 if rest > L.HALF or (rest == L.HALF and lo % 2) else lo


def _half_up(v):
    """floor(x + 1/2): halfway always up."""
    return math.floor(v + L.HALF)


def _coset_on_ties(d_int, d_half):
    """The half-integer point wins ties too."""
    return d_half <= d_int


def _coset_plus_half(v):
    """The coset decoded as D8(x + 1/2) - 1/2: the same points, but halfway coordinates of x - 1/2
    then round away from where the spec sends them."""
    a = [Fraction(c) for c in L.d8_point(v)]
    b = [Fraction(c) - L.HALF for c in L.d8_point([c + L.HALF for c in v])]
    return b if L.prefer_coset(L.squared_distance(v, a), L.squared_distance(v, b)) else a


def _float_distances(v, p):
    """Squared distances summed in float64: one-ulp differences vanish."""
    return Fraction(sum((float(a) - float(b)) ** 2 for a, b in zip(v, p)))


def _swap(name, replacement):
    return lambda saved: replacement


def _kernel(op, helper, replacement):
    fn = L.OPS[op]
    return patched(fn, L, helper, _swap(helper, replacement))


LATTICE_BUGS = {
    "E8 without the half-integer coset": (E8, "E8Coset", _kernel(E8, "e8_point", _no_coset)),
    "parity repaired on the best coordinate (E8)": (E8, "ParityFix", _kernel(E8, "worst_coordinate", _smallest_error)),
    "parity repaired on the best coordinate (D8)": (D8, "ParityFix", _kernel(D8, "worst_coordinate", _smallest_error)),
    "parity repaired on the last coordinate": (D8, "ParityFix", _kernel(D8, "worst_coordinate", _last_coordinate)),
    "parity repair in the wrong direction": (E8, "ParityFix", _kernel(E8, "other_way", _same_way)),
    "the last of equally bad coordinates repaired": (E8, "LatticeTie", _kernel(E8, "worst_coordinate", _last_of_equals)),
    "halfway coordinates rounded to even (E8)": (E8, "LatticeTie", _kernel(E8, "nearest_integer", _half_to_even)),
    "halfway coordinates rounded to even (D8)": (D8, "LatticeTie", _kernel(D8, "nearest_integer", _half_to_even)),
    "halfway coordinates rounded up": (D8, "LatticeTie", _kernel(D8, "nearest_integer", _half_up)),
    "the coset preferred on D8/coset ties": (E8, "LatticeTie", _kernel(E8, "prefer_coset", _coset_on_ties)),
    "the coset decoded as D8(x + 1/2) - 1/2": (E8, "LatticeTie", _kernel(E8, "e8_point", _coset_plus_half)),
    "distances compared in float64": (E8, "NearTie", _kernel(E8, "squared_distance", _float_distances)),
}


def bug(name: str) -> Implementation:
    op, _, kernel = LATTICE_BUGS[name]
    return Implementation(name, {op: kernel})


def _float64_decoder(x, coset: bool):
    """A vectorized float64 decoder with exact rounding (np.modf) and float64 distances:
    correct wherever the two cosets' squared distances are not within rounding of each
    other (every vector but the NearTie ones)."""
    x = L.check(x)
    shape, x = x.shape, x.reshape(-1, 8)

    def d8(y):
        t = np.trunc(y)
        r = y - t
        f = t + np.where(np.abs(r) > 0.5, np.sign(r), 0.0)
        d = y - f
        odd = (f.sum(axis=1) % 2) != 0
        worst = np.argmax(np.abs(d), axis=1)
        rows = np.flatnonzero(odd)
        w = worst[rows]
        f[rows, w] += np.where(d[rows, w] >= 0, 1.0, -1.0)
        return f

    a = d8(x)
    if coset:
        b = d8(x - 0.5) + 0.5
        pick = ((x - b) ** 2).sum(axis=1) < ((x - a) ** 2).sum(axis=1)
        a = np.where(pick[:, None], b, a)
    return a.reshape(shape)


CORRECT = {
    "the default decoder": Implementation("numpy lattice", dict(L.OPS)),
}
FLOAT64 = Implementation("float64 decoder", {E8: lambda x: _float64_decoder(x, True),
                                             D8: lambda x: _float64_decoder(x, False)})

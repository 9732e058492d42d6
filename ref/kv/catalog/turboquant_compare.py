"""TurboQuant's comparators (spec/kv.md#turboquant): floats within a stated relative
tolerance, the codebook against its largest level with exact zeros, and tuples of
named outputs compared part by part (codes and signs bit for bit)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ref.testing.compare import Comparison, Mismatch, compare_exact, compare_parts, float_bits

__all__ = ["TOLERANCE", "close", "compare_codebook", "compare_named"]

TOLERANCE = {"codebook": 1e-9, "norms": 1e-13, "values": 1e-9}
# relative to the output's largest magnitude: the codebook is a fixed point two integration routes reach within
# 1e-10 (measured: 4.3e-11 at d = 4096, 4 bits); reconstructions, residual norms and scores inherit its 1e-9


def close(kind: str, scale_of: float | None = None):
    tol = TOLERANCE[kind]

    def compare(expected, actual) -> Comparison:
        e, a = np.asarray(expected, np.float64), np.asarray(actual)
        unit = "relative to the largest |value|" if scale_of is None else "relative to the largest |level|"
        if a.dtype.kind != "f":
            return Comparison(False, e.size, e.size, np.inf, unit, problem=f"dtype: expected floats, got {a.dtype}")
        if a.shape != e.shape:
            return Comparison(False, e.size, e.size, np.inf, unit,
                              problem=f"shape: expected {e.shape}, got {a.shape}")
        scale = max(float(np.max(np.abs(e))) if e.size else 0.0, 2.0**-60) if scale_of is None \
            else max(scale_of, 2.0**-60)
        with np.errstate(invalid="ignore"):
            err = np.abs(a.astype(np.float64) - e) / scale
        bad = ~(err <= tol)
        if not bad.any():
            return Comparison(True, e.size, 0, float(np.max(err)) if e.size else 0.0, unit, tolerance=tol)
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        first = Mismatch(i, repr(float(e[i])), repr(float(a[i])), float_bits(e[i], np.dtype(np.float64)),
                         float_bits(float(a[i]), np.dtype(np.float64)))
        worst = float(np.max(np.where(np.isnan(err), np.inf, err)))
        return Comparison(False, e.size, int(bad.sum()), worst, unit, tolerance=tol, first=first)
    return compare


def compare_codebook(expected, actual) -> Comparison:
    """Levels and thresholds within TOLERANCE["codebook"] of the largest reference level (not of each
    output's own largest value: at b = 1 the one threshold is 0); a value the reference has exactly 0
    (the middle threshold, the b = 0 level: the tie rule needs them exact) must be exactly 0."""
    names = ("levels", "thresholds")
    if not isinstance(actual, tuple) or len(actual) != 2:
        return Comparison(False, 0, 0, np.inf, "", problem=f"expected a tuple of outputs {names}")
    levels = np.asarray(expected[0], np.float64)
    scale = float(np.max(np.abs(levels))) if levels.size else 0.0
    last = None
    for name, e, a in zip(names, expected, actual):
        last = replace(close("codebook", scale)(e, a), part=name)
        if not last.ok:
            return last
        e, a = np.asarray(e, np.float64), np.asarray(a, np.float64)
        zero = (e == 0) & (a != 0)
        if zero.any():
            i = tuple(int(j) for j in np.argwhere(zero)[0])
            first = Mismatch(i, repr(float(e[i])), repr(float(a[i])), float_bits(e[i], np.dtype(np.float64)),
                             float_bits(float(a[i]), np.dtype(np.float64)))
            return Comparison(False, e.size, int(zero.sum()), float(np.max(np.abs(a[zero]))), "absolute",
                              tolerance=0.0, first=first, part=name,
                              problem="a middle threshold or a b = 0 level must be exactly 0 (the tie rule)")
    return last


def _parts(*kinds):
    comparators = tuple(compare_exact if k == "exact" else close(k) for k in kinds)
    return lambda expected, actual, names: compare_parts(expected, actual, names=names, comparators=comparators)


def compare_named(names, *kinds):
    parts = _parts(*kinds)
    return lambda expected, actual: parts(expected, actual, names)

"""How quant.hqq.quantize is judged (spec/quant.md#hqq-tolerance): `compare_quantized`, the
strict rule on conditioned inputs (codes exact, float32 rounding of scales and zeros),
and `agreement`, the looser rule for arbitrary layers (engine cross-checks), with the
figures measured in tests/test_quant_hqq.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ref.testing.compare import Comparison, Mismatch, compare_exact

__all__ = ["CODE_FRACTION", "CODE_MARGIN", "CODE_SLACK", "GAP", "SCALE_RTOL", "ZERO_PER_FLIP", "ZERO_RTOL",
           "ZERO_TIGHT", "agreement", "compare_quantized"]

CODE_MARGIN = 2.0 ** -20  # every w * s + z at least this times 2^b from a rounding boundary ...
GAP = 2.0 ** -16  # ... and every early-stop test decided by this relative gap (or a fixed point's exact tie)
ZERO_TIGHT = 2.0 ** -14  # then zeros within this times 1 + |zero| (measured 4.6e-6), codes exact
# The agreement rule for any input.
CODE_FRACTION = 2.0 ** -6  # codes that may differ by one step: this fraction of all ...
CODE_SLACK = 4  # ... plus this many
SCALE_RTOL = 2.0 ** -20  # scales relative (float32 1/s: measured 1.7e-7)
ZERO_RTOL = 2.0 ** -16  # zeros relative to 1 + |zero| where no code of the group moved
ZERO_PER_FLIP = 4.0  # plus this many 1/G for each differing code of the group, and for one more (a flip
# during the solver that the final codes no longer show, or a stop one step apart on a plateau of the error)


def _fail(part: str, n: int, bad: np.ndarray, worst: float, unit: str, tol: float, what: str, exp, act):
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return Comparison(False, n, int(bad.sum()), worst, unit, tol, Mismatch(idx, str(exp[idx]), str(act[idx])),
                      problem=None if what == "" else what, part=part)


def agreement(expected, actual) -> Comparison:
    """Codes within one step at no more than CODE_FRACTION of elements (+ CODE_SLACK);
    scales within SCALE_RTOL; each group's zero within ZERO_RTOL * (1 + |zero|) +
    ZERO_PER_FLIP * (m_g + 1) / G, m_g the group's differing codes, G its length."""
    if not isinstance(actual, tuple) or len(actual) != 3:
        return Comparison(False, 0, 0, np.inf, "", problem="expected a tuple of outputs (codes, scale, zero)")
    (c, s, z), (c2, s2, z2) = expected, (np.asarray(a) for a in actual)
    for part, e, a in (("codes", c, c2), ("scale", s, s2), ("zero", z, z2)):
        if a.shape != e.shape:
            return Comparison(False, e.size, e.size, np.inf, "", problem=f"shape: expected {e.shape}, got {a.shape}",
                              part=part)
    if c2.dtype.kind not in "ui":
        return Comparison(False, c.size, c.size, np.inf, "", problem=f"dtype: expected integer codes, got {c2.dtype}",
                          part="codes")
    d = np.abs(c.astype(np.int64) - c2.astype(np.int64))
    allowed = int(CODE_FRACTION * c.size) + CODE_SLACK
    if d.size and (d.max() > 1 or (d > 0).sum() > allowed):
        bad = d > (1 if d.max() > 1 else 0)
        return _fail("codes", c.size, bad, float(d.max()), "steps", allowed, "", c, c2)
    with np.errstate(all="ignore"):
        s2, z2 = s2.astype(np.float64), z2.astype(np.float64)
        rel = np.abs(s2 / s - 1)
    bad = ~(rel <= SCALE_RTOL)
    if bad.any():
        return _fail("scale", s.size, bad, float(np.nanmax(np.where(np.isnan(rel), np.inf, rel))), "relative",
                     SCALE_RTOL, "", s, s2)
    axis = 0 if z.shape[0] == 1 and c.shape[0] != 1 else 1
    group = c.shape[axis]
    flips = (d > 0).sum(axis=axis, keepdims=True)
    tol = ZERO_RTOL * (1 + np.abs(z)) + ZERO_PER_FLIP * (flips + 1) / group
    dz = np.abs(z2 - z)
    bad = ~(dz <= tol)
    if bad.any():
        worst = np.where(np.isnan(dz), np.inf, dz - tol)
        return _fail("zero", z.size, bad, float(worst.max()), "beyond tolerance", 0.0, "", z, z2)
    return Comparison(True, c.size + s.size + z.size, 0, 0.0, "")


def compare_quantized(expected, actual) -> Comparison:
    """On conditioned inputs: codes exact, scales within SCALE_RTOL, zeros within
    ZERO_TIGHT * (1 + |zero|)."""
    if not isinstance(actual, tuple) or len(actual) != 3:
        return Comparison(False, 0, 0, np.inf, "", problem="expected a tuple of outputs (codes, scale, zero)")
    codes = compare_exact(expected[0], actual[0])
    if not codes.ok:
        return replace(codes, part="codes")
    for part, e, a, tol in (("scale", expected[1], actual[1], None), ("zero", expected[2], actual[2], ZERO_TIGHT)):
        a = np.asarray(a)
        if a.shape != e.shape or a.dtype.kind != "f":
            return Comparison(False, e.size, e.size, np.inf, "", problem=f"expected float {e.shape}, got {a.dtype} "
                              f"{a.shape}", part=part)
        with np.errstate(all="ignore"):
            err = np.abs(a.astype(np.float64) / e - 1) if tol is None else np.abs(a - e) / (1 + np.abs(e))
        limit = SCALE_RTOL if tol is None else tol
        bad = ~(err <= limit)
        if bad.any():
            return _fail(part, e.size, bad, float(np.nanmax(np.where(np.isnan(err), np.inf, err))), "relative",
                         limit, "", e, a)
    return Comparison(True, sum(np.size(e) for e in expected), 0, 0.0, "")

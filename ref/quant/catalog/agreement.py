"""Judging the outputs of a quantization algorithm (GPTQ, AWQ, HQQ) run at float32
against its float64 oracle: the agreement rule.

Such an algorithm rounds thousands of weights, each decision taken on a value its
earlier decisions have changed. A float32 run computes those values a few units in
the last place away from the float64 ones, so a weight lying near a rounding boundary
can round the other way; where the error is fed back (GPTQ), the flip changes every
later weight of its row, and the row follows another, equally valid trajectory. Bit
equality is therefore not the contract; this is:

- every output has the oracle's shape; integer outputs its dtype, float outputs a
  floating-point dtype, or the oracle's own where the rule says so (GPTQ's float32
  scales and losses);
- outputs are split into `exact` ones (g_idx, a permutation: equal),
  `codes` (integers: codes, integer zero points) and `floats` (scales, float zero
  points, losses), and every code and float output has the same leading axis, the
  *unit* (a row of the weight for GPTQ; a group for HQQ). A unit *diverges* when any
  of its codes differs from the oracle's.
- at most `units * n + count` of the n units diverge (a fraction plus a small count);
- no code differs by more than `step` (quantization levels);
- in units that agree, each float is within `rtol * |expected| + atol` of the
  oracle's (its own (rtol, atol) per output); in diverged units, the floats named in
  `diverged` within their (looser) tolerances, the others not compared. A float named
  in `diverging` that leaves its tolerance makes its unit diverge (counted against the
  allowance) instead of failing: GPTQ's MSE range search can pick another shrink of a
  group's range on a near-tie of two errors with the codes unchanged.

The figures each algorithm uses are measured (the oracle at float64 against an
independent float32 implementation on many random layers; the largest seen times a
stated margin) and stated on its spec page with the measurement. A wrong algorithm
(no error feedback, a wrong dampening) changes every unit, or every float of the
agreeing ones, and fails.

GPTQ's figures (`GPTQ` below), measured on 800 random layers (rows 4/16/64, cols
16..256, bits 2/3/4/8, per-channel and groups 8..cols, both schemes, act-order on and
off, static and dynamic groups, percdamp 0.01..0.1, n = 2..8 x cols calibration tokens
of which a few channels are outliers scaled 8..64x and 5% dead; condition numbers of
the damped Hessian up to 9.0e3), the float64 oracle against the float32 unblocked
kernel ref.conformance.adapters.numpy_gptq: 82 of 21848 rows diverged, the most in one
layer 16 of 64, 5 of 16, 2 of 4 rows (nearly all in symmetric dynamic groups, whose
largest-magnitude weight sits on a rounding tie); no code differed by more than one
level, no zero point differed; in agreeing rows the scales were within 5.5e-5 relative
and the losses within 3.7e-4; a diverged row's loss within 18.2%. The rule: units
floor(0.375 n) + 2 rows, step 1, scales 2.5e-4 relative, losses 1.5e-3 relative +
1e-12 where the row agrees and 40% where it diverged (margins 1.5x on the rows, 4x on
the agreeing floats, 2x on the diverged loss). A second run over 250 layers with
every rtn scheme, the MSE search, block_start and static_permuted groups and
blocksizes 16 and 128: 5 of 5824 rows diverged, and the rule passed on every layer.
It holds for Hessians whose damped condition number stays below about 1e4; far worse
conditioned ones (fewer tokens than columns and percdamp 0.001) make float32 Cholesky
factors lose most of their digits, and whole rows then follow other trajectories.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ref.testing.compare import Comparison, Mismatch, compare_exact

__all__ = ["GPTQ", "agreement", "diverged_units"]

Tolerance = tuple[float, float]  # (rtol, atol)


def diverged_units(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> np.ndarray:
    """A bool per unit (leading index): whether any of its codes differs, over the code
    outputs given in pairs (each [units, ...], the same units)."""
    bad = None
    for e, a in zip(expected, actual):
        e, a = np.asarray(e), np.asarray(a)
        differs = (e.astype(np.int64) != a.astype(np.int64)).reshape(e.shape[0], -1).any(axis=1)
        bad = differs if bad is None else bad | differs
    return bad


def agreement(*, names: Sequence[str], codes: Sequence[str] = (), exact: Sequence[str] = (),
              floats: Mapping[str, Tolerance] | None = None, diverged: Mapping[str, Tolerance] | None = None,
              diverging: Sequence[str] = (), units: float = 0.0, count: int = 0,
              step: int = 1, float_dtypes: bool = False) -> Callable[[Any, Any], Comparison]:
    """The comparison `compare(expected, actual) -> Comparison` of an op whose outputs
    are the tuple `names`, each named once in `codes`, `exact` or `floats` (see the
    module docstring for the rule and its figures). `float_dtypes`: each float output
    must also have the oracle's dtype (where the spec fixes it, GPTQ's float32), not
    just any floating-point one."""
    floats, diverged = dict(floats or {}), dict(diverged or {})
    named = [*codes, *exact, *floats]
    if sorted(named) != sorted(names) or len(set(named)) != len(named):
        raise ValueError(f"agreement: every output of {tuple(names)} in exactly one of codes, exact, floats; "
                         f"got codes={tuple(codes)}, exact={tuple(exact)}, floats={tuple(floats)}")
    if (set(diverged) | set(diverging)) - set(floats):
        raise ValueError(f"agreement: diverged tolerances or diverging outputs that are not floats: "
                         f"{(set(diverged) | set(diverging)) - set(floats)}")
    if not codes:
        raise ValueError("agreement: at least one code output defines the units")
    if not (0 <= units <= 1) or count < 0 or step < 0:
        raise ValueError(f"agreement: expected 0 <= units <= 1, count >= 0, step >= 0; got {units}, {count}, {step}")
    index = {n: i for i, n in enumerate(names)}

    def compare(expected, actual) -> Comparison:
        if not isinstance(actual, tuple) or len(actual) != len(names):
            return Comparison(False, 0, 0, np.inf, "", problem=f"expected a tuple of outputs {tuple(names)}")
        exp = {n: np.asarray(expected[index[n]]) for n in names}
        act = {n: np.asarray(actual[index[n]]) for n in names}
        for n in names:
            problem = _structure(n, exp[n], act[n], integer=n in codes or n in exact or float_dtypes)
            if problem:
                return problem
        last = None
        for n in exact:
            last = _named(compare_exact(exp[n], act[n]), n)
            if not last.ok:
                return last
        nunits = exp[codes[0]].shape[0]
        if any(exp[n].ndim == 0 or exp[n].shape[0] != nunits for n in [*codes, *floats]):
            raise ValueError(f"agreement: the code and float outputs must share their leading axis ({nunits} units)")
        bad = diverged_units([exp[n] for n in codes], [act[n] for n in codes])
        for n in diverging:
            bad = bad | _outside(exp[n], act[n], floats[n]).reshape(nunits, -1).any(axis=1)
        allowed = int(np.floor(units * nunits)) + count
        for n in codes:
            last = _codes(n, exp[n], act[n], bad, allowed, step)
            if not last.ok:
                return last
        for n, tol in floats.items():
            last = _floats(n, exp[n], act[n], ~bad, tol, "agreeing")
            if not last.ok:
                return last
            if n in diverged:
                last = _floats(n, exp[n], act[n], bad, diverged[n], "diverged")
                if not last.ok:
                    return last
        return last

    return compare


def _named(cmp: Comparison, name: str) -> Comparison:
    return Comparison(cmp.ok, cmp.compared, cmp.mismatched, cmp.worst, cmp.unit, cmp.tolerance, cmp.first,
                      cmp.problem, part=name)


def _structure(name: str, e: np.ndarray, a: np.ndarray, *, integer: bool) -> Comparison | None:
    if a.shape != e.shape:
        return Comparison(False, e.size, e.size, np.inf, "", problem=f"shape: expected {e.shape}, got {a.shape}",
                          part=name)
    if integer and a.dtype != e.dtype:
        return Comparison(False, e.size, e.size, np.inf, "", problem=f"dtype: expected {e.dtype}, got {a.dtype}",
                          part=name)
    if not integer and a.dtype.kind != "f":
        return Comparison(False, e.size, e.size, np.inf, "",
                          problem=f"dtype: expected floating-point values, got {a.dtype}", part=name)
    return None


def _codes(name: str, e: np.ndarray, a: np.ndarray, bad: np.ndarray, allowed: int, step: int) -> Comparison:
    """One code output: no difference above `step`, at most `allowed` diverged units
    (`bad` also marks units diverged by a `diverging` float)."""
    diff = np.abs(e.astype(np.int64) - a.astype(np.int64))
    unit = "levels"
    worst = float(diff.max(initial=0))
    mismatched = int((diff > 0).sum())
    if worst > step:
        j = tuple(int(k) for k in np.argwhere(diff > step)[0])
        return Comparison(False, e.size, mismatched, worst, unit, float(step), Mismatch(j, str(int(e[j])), str(int(a[j]))),
                          problem=f"a code differs by {int(diff[j])} levels at {j} (expected {int(e[j])}, got "
                                  f"{int(a[j])}; at most {step} allowed)", part=name)
    if bad.sum() > allowed:
        first, where = None, "their floats left their tolerances"
        if mismatched:
            i = tuple(int(k) for k in np.argwhere(diff > 0)[0])
            first, where = Mismatch(i, str(int(e[i])), str(int(a[i]))), \
                f"first code at {i}: expected {int(e[i])}, got {int(a[i])}"
        return Comparison(False, e.size, max(mismatched, 1), worst, unit, float(step), first,
                          problem=f"{int(bad.sum())} of {bad.size} units (rows) diverge, at most {allowed} allowed; "
                                  f"{where}", part=name)
    return Comparison(True, e.size, 0, worst, unit, float(step), part=name)


def _outside(e: np.ndarray, a: np.ndarray, tol: Tolerance) -> np.ndarray:
    """Where a float output is outside its tolerance (a NaN matches a NaN)."""
    rtol, atol = tol
    with np.errstate(all="ignore"):
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        return ~(np.abs(a64 - e64) <= rtol * np.abs(e64) + atol) & ~(np.isnan(e64) & np.isnan(a64))


def _floats(name: str, e: np.ndarray, a: np.ndarray, where: np.ndarray, tol: Tolerance, which: str) -> Comparison:
    rtol, atol = tol
    with np.errstate(all="ignore"):
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        err = np.abs(a64 - e64)
        limit = rtol * np.abs(e64) + atol
        rel = err / np.where(e64 == 0, 1.0, np.abs(e64))
    mask = np.broadcast_to(where.reshape((-1,) + (1,) * (e.ndim - 1)), e.shape)
    out = mask & ~(err <= limit) & ~(np.isnan(e64) & np.isnan(a64))
    unit = "relative error"
    worst = float(rel[mask].max(initial=0.0)) if np.isfinite(rel[mask]).all() else np.inf
    if not out.any():
        return Comparison(True, int(mask.sum()), 0, worst, unit, rtol, part=name)
    i = tuple(int(k) for k in np.argwhere(out)[0])
    return Comparison(False, int(mask.sum()), int(out.sum()), worst, unit, rtol,
                      Mismatch(i, repr(float(e64[i])), repr(float(a64[i]))),
                      problem=f"in a unit whose codes {'agree' if which == 'agreeing' else 'differ'}, {name} at {i}: "
                              f"expected {float(e64[i])!r}, got {float(a64[i])!r} (relative error {float(rel[i]):.3g}, "
                              f"allowed {rtol:g} relative + {atol:g})", part=name)


GPTQ = agreement(names=("codes", "scales", "zeros", "g_idx", "losses"), codes=("codes", "zeros"), exact=("g_idx",),
                 floats={"scales": (2.5e-4, 0.0), "losses": (1.5e-3, 1e-12)}, diverged={"losses": (0.4, 1e-12)},
                 diverging=("scales",), units=0.375, count=2, step=1, float_dtypes=True)

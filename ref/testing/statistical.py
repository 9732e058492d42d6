"""The statistical kind: operations whose output is random by definition (a kernel
that draws its own random numbers), judged by a goodness-of-fit test against the
distribution the oracle gives.

The oracle returns, per element, the values the element may take and their
probabilities: `(outcomes [..., K], probabilities [..., K])`. One check of a case
calls the candidate `calls` times, each with its own seed (the keyword `seed`), and
tests what came back (spec/conformance.md, "Statistical operations"):

1. every sampled value must be an outcome of positive probability for its element;
   one that is not is a deterministic failure naming the element (no test needed);
2. elements with the same probabilities form a class, and each class's pooled
   counts (elements x calls) get an exact two-sided binomial test (K = 2), or a
   chi-square test (K > 2; Bonferroni-split exact binomial tests of each outcome
   where an expected count is below 5);
3. a "seed ignored" test: every call returned the same array, and the probability
   of that under the distribution is below the level;
4. the false-alarm rate `false_alarm` the op states for one conformance run is split
   over its checks and, within a check, over its tests (Bonferroni); a check that
   rejects is re-run once with fresh seeds and fails only if the re-run rejects too.
   The two runs are independent under the null hypothesis, so the per-check level is
   sqrt(false_alarm / checks): a correct sampler fails a check with probability at
   most false_alarm / checks, and a run with at most false_alarm.

There is no shrinking: a failing check is reported as drawn, with the class, its
counts and both p-values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ref.testing.catalog_types import Kind, Operation

__all__ = ["DISPERSION_MARGIN", "DISPERSION_MIN_VARIANCE", "Fit", "StatisticalOp", "binomial_pvalue", "check_level",
           "classes", "dispersion_pvalue", "fit", "multinomial_pvalue", "neighbour_groups",
           "same_value", "seeds", "stray"]



def _stats():
    """scipy.stats, imported when a test runs (its import takes about half a second,
    which every command that only lists the catalog would otherwise pay)."""
    from scipy import stats

    return stats

def same_value(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise equality in which NaN equals NaN (the default `StatisticalOp.same`)."""
    a, b = np.asarray(a), np.asarray(b)
    eq = a == b
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        eq |= np.isnan(a) & np.isnan(b)
    return eq


@dataclass(frozen=True, kw_only=True)
class StatisticalOp(Operation):
    """Judged by a goodness-of-fit test on `calls` samples per check (module doc).

    oracle(**inputs, **params) -> (outcomes [..., K], probabilities [..., K]); the
    candidate takes the same keywords plus `seed` (an int in [0, 2^32)) and returns
    one sample [...], in the outcomes' dtype. `same(outcome, sample)` says which
    values count as the same outcome, elementwise (all NaN codes, for codes).
    """

    kind: ClassVar[Kind] = Kind.STATISTICAL
    outputs: tuple[str, ...] = ("outcomes", "probabilities")
    calls: int = 64
    false_alarm: float = 1e-6
    same: Callable[[np.ndarray, np.ndarray], np.ndarray] = same_value

    def __post_init__(self):
        super().__post_init__()
        if self.outputs != ("outcomes", "probabilities"):
            raise ValueError(f"operation {self.name}: a statistical oracle returns (outcomes, probabilities)")
        if isinstance(self.calls, bool) or not isinstance(self.calls, int) or self.calls < 2:
            raise ValueError(f"operation {self.name}: calls must be an int >= 2, got {self.calls!r}")
        if not 0 < self.false_alarm < 1:
            raise ValueError(f"operation {self.name}: false_alarm must lie in (0, 1), got {self.false_alarm!r}")
        if any(v.latitude for v in self.variants):
            raise ValueError(f"operation {self.name}: a statistical op takes no latitude axes")

    def distribution(self, inputs, params) -> tuple[np.ndarray, np.ndarray]:
        """The oracle's (outcomes, probabilities), checked for shape and sum."""
        outcomes, probabilities = self.oracle(**inputs, **params)
        outcomes, probabilities = np.asarray(outcomes), np.asarray(probabilities, dtype=np.float64)
        if outcomes.shape != probabilities.shape or outcomes.ndim < 1:
            raise ValueError(f"{self.name}: outcomes {outcomes.shape} and probabilities {probabilities.shape} "
                             f"must share a shape [..., K]")
        if np.any(probabilities < 0) or np.any(np.abs(probabilities.sum(-1) - 1) > 1e-12):
            raise ValueError(f"{self.name}: probabilities must be >= 0 and sum to 1 per element")
        return outcomes, probabilities


def check_level(false_alarm: float, checks: int) -> float:
    """The rejection level of one check: sqrt(false_alarm / checks), so that a check
    confirmed by an independent re-run fails a correct sampler with probability at most
    false_alarm / checks, and a run of `checks` checks with at most false_alarm."""
    if checks < 1:
        raise ValueError(f"checks: expected a positive count, got {checks}")
    return math.sqrt(false_alarm / checks)


def seeds(base: int, check: int, attempt: int, calls: int) -> list[int]:
    """`calls` distinct seeds in [0, 2^32) for one attempt of one check (stable)."""
    state = np.random.SeedSequence([base & 0xFFFFFFFF, check, attempt]).generate_state(2 * calls, dtype=np.uint32)
    out = list(dict.fromkeys(int(s) for s in state))[:calls]
    if len(out) < calls:  # 2 * calls draws from 2^32 with too many repeats: astronomically unlikely
        raise RuntimeError("seeds: could not draw distinct seeds")
    return out


def binomial_pvalue(successes: int, trials: int, p: float) -> float:
    """Two-sided exact binomial test of `successes` in `trials` at probability p:
    the total probability of the outcomes no more likely than the one observed
    (`scipy.stats.binomtest`, whose relative tolerance 1e-7 it keeps)."""
    if trials == 0:
        return 1.0
    if p <= 0.0 or p >= 1.0:
        return 1.0 if successes == (trials if p >= 1.0 else 0) else 0.0
    if trials <= _DIRECT:  # the same p-value as binomtest's, summed in one vectorized call
        pmf = _stats().binom.pmf(np.arange(trials + 1), trials, p)
        return float(min(1.0, pmf[pmf <= pmf[successes] * (1 + 1e-7)].sum()))
    return float(_stats().binomtest(int(successes), int(trials), float(p)).pvalue)


_DIRECT = 4096  # up to this many trials, sum the probabilities no larger than the observed one


def multinomial_pvalue(counts: Sequence[int], probabilities: Sequence[float]) -> float:
    """Goodness of fit of `counts` to `probabilities` (outcomes of zero probability
    must have zero counts): chi-square when every expected count is at least 5, else
    the smallest exact binomial p-value of one outcome against the rest, times the
    number of outcomes (Bonferroni). Two outcomes: the exact binomial test."""
    counts = np.asarray(counts, dtype=np.int64)
    p = np.asarray(probabilities, dtype=np.float64)
    if np.any(counts[p == 0] > 0):
        return 0.0
    keep = p > 0
    counts, p = counts[keep], p[keep]
    n = int(counts.sum())
    if p.size <= 1 or n == 0:
        return 1.0
    if p.size == 2:
        return binomial_pvalue(int(counts[1]), n, float(p[1] / p.sum()))
    expected = n * p / p.sum()
    if expected.min() >= 5:
        return float(_stats().chisquare(counts, expected).pvalue)
    return min(1.0, p.size * min(binomial_pvalue(int(c), n, float(q / p.sum())) for c, q in zip(counts, p)))


def stray(outcomes: np.ndarray, probabilities: np.ndarray, samples: np.ndarray,
          same: Callable = same_value) -> tuple[np.ndarray, np.ndarray]:
    """(matched [calls, ..., K], strays [calls, ...]): which outcome of positive
    probability each sample equals (the first, where outcomes repeat), and the
    samples that equal none."""
    possible = probabilities > 0
    k = outcomes.shape[-1]
    hits = np.stack([same(outcomes[..., j], samples) & possible[..., j] for j in range(k)], axis=-1)
    first = np.cumsum(hits, axis=-1) == 1
    matched = hits & first
    return matched, ~hits.any(axis=-1)


def _merged(outcomes: np.ndarray, probabilities: np.ndarray, same: Callable) -> np.ndarray:
    """Probabilities with repeated outcomes of an element added into the first one."""
    p = probabilities.copy()
    k = outcomes.shape[-1]
    for j in range(1, k):
        for i in range(j):
            dup = same(outcomes[..., i], outcomes[..., j]) & (p[..., j] > 0)
            p[..., i] = np.where(dup, p[..., i] + p[..., j], p[..., i])
            p[..., j] = np.where(dup, 0.0, p[..., j])
    return p


def classes(probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows [C, K], label [...]): the distinct probability rows and each element's."""
    flat = probabilities.reshape(-1, probabilities.shape[-1])
    if flat.shape[0] == 0:
        return flat, np.zeros(probabilities.shape[:-1], dtype=np.int64)
    rows, label = np.unique(flat, axis=0, return_inverse=True)
    return rows, label.reshape(probabilities.shape[:-1])


@dataclass(frozen=True)
class Fit:
    """One attempt of one check: ok, what failed, the smallest p-value (Bonferroni
    adjusted within the check) and the level; `deterministic` for a failure no
    correct sampler can produce (a stray value, a malformed sample)."""

    ok: bool
    detail: str = ""
    pvalue: float = 1.0
    level: float = 1.0
    tests: int = 0
    deterministic: bool = False


def _describe_row(row: np.ndarray) -> str:
    return "P = (" + ", ".join(f"{q:.10g}" for q in row) + ")"


def _describe_class(row: np.ndarray, pooled: np.ndarray, members: np.ndarray, outcomes: np.ndarray,
                    calls: int, same: Callable) -> str:
    """A class's counts against their expectation, each by its outcome's value where
    every member has the same outcomes (a token id, a code), and where it sits."""
    n = int(pooled.sum())
    first = tuple(int(i) for i in np.argwhere(members)[0])
    values = outcomes[members]  # [members, K]
    where = f"{int(members.sum())} elements x {calls} calls, the first at index {first}"
    if bool(np.all(same(values, values[:1]))):
        shown = ", ".join(f"{v!r}: {int(k)} vs {n * q:.6g}"
                          for v, k, q in zip(outcomes[first].tolist(), pooled, row) if q > 0 or k > 0)
        return f"class {_describe_row(row)} ({where}): outcome: count vs expected {{{shown}}}"
    shown = ", ".join(f"{int(k)}" for k in pooled)
    expected = ", ".join(f"{n * q:.6g}" for q in row)
    return f"class {_describe_row(row)} ({where}): counts ({shown}), expected ({expected})"


def fit(outcomes: np.ndarray, probabilities: np.ndarray, samples: np.ndarray, level: float,
        same: Callable = same_value) -> Fit:
    """Test `samples` [calls, ...] against the per-element distribution at `level`
    (the check's level, split over its tests)."""
    calls = samples.shape[0]
    matched, strays = stray(outcomes, probabilities, samples, same)
    if strays.any():
        at = np.argwhere(strays)[0]
        call, index = int(at[0]), tuple(int(i) for i in at[1:])
        shown = ", ".join(repr(v) for v, q in zip(outcomes[index].tolist(), probabilities[index]) if q > 0)
        return Fit(False, f"call {call + 1}: element {index} is {samples[(call, *index)].item()!r}, not one of its "
                          f"possible values ({shown})", 0.0, level, 0, True)
    p = _merged(outcomes, probabilities, same)
    rows, label = classes(p)
    live = [c for c in range(rows.shape[0]) if rows[c].max() < 1.0]
    if not live:
        return Fit(True, "", 1.0, level, 0)
    spread = [c for c in live if _dispersion_applies(rows[c], int((label == c).sum()))]
    tests = len(live) + 1 + len(spread)
    per_test = level / tests
    counts = matched.sum(axis=0)  # [..., K]: how often each element took each outcome
    worst = (1.0, "")
    for c in live:
        members = label == c
        pooled = counts[members].sum(axis=0)
        pv = multinomial_pvalue(pooled, rows[c])
        if pv < worst[0] or not worst[1]:
            worst = (pv, _describe_class(rows[c], pooled, members, outcomes, calls, same) + f"; p-value {pv:.3g}")
    for c in spread:
        members = label == c
        q1 = float(rows[c][1])
        steps = matched[:, members, 1]  # [calls, n]: which members stepped, in memory order
        group = neighbour_groups(steps[0], q1)
        counts = np.stack([np.bincount(group, weights=row, minlength=group.max() + 1) for row in steps])
        pv = dispersion_pvalue(counts, np.bincount(group), q1)
        if pv < worst[0]:
            worst = (pv, f"class {_describe_row(rows[c])} ({int(members.sum())} elements in {counts.shape[1]} "
                         f"groups of neighbours): the step counts per call and group spread unlike independent "
                         f"elements (are random numbers shared between neighbours?); p-value {pv:.3g}")
    repeat = _repeat_pvalue(samples, p)
    if repeat < worst[0]:
        worst = (repeat, f"every one of the {calls} calls returned the same values (is the seed ignored?); "
                         f"the probability of that is {repeat:.3g}")
    adjusted = min(1.0, worst[0] * tests)
    ok = worst[0] > per_test
    detail = "" if ok else f"{worst[1]} < {per_test:.3g} (level {level:.3g} split over {tests} tests)"
    return Fit(ok, detail, adjusted, level, tests)


DISPERSION_MIN_VARIANCE = 10.0  # n p (1 - p) of a class's count in one call
DISPERSION_MARGIN = 4.0  # the approximation's p-values are multiplied by this


def _dispersion_applies(row: np.ndarray, members: int) -> bool:
    """A two-outcome class whose count per call varies enough for the chi-square form."""
    return row.shape[0] == 2 and members >= 2 and members * row[0] * row[1] >= DISPERSION_MIN_VARIANCE


def dispersion_pvalue(counts: np.ndarray, sizes: np.ndarray, p: float) -> float:
    """Two-sided p-value that per-call counts spread as independent elements make
    them spread: counts [calls, G] of the steps of G groups of neighbouring elements
    of one class (sizes [G]), each element stepping with probability p.

    Within one call a group's count is Binomial(size, p) when its elements draw
    independent random numbers, so sum (c - size p)^2 / (size p q) over calls and
    groups is close to chi-square with calls x G degrees of freedom. Neighbours
    sharing a random number (a pair or quad of one `cvt.rs` draw) double it or more; a
    stratified stream (counts too even) shrinks it. The statistic is moment-matched
    (a term's variance is 2 + (1 - 6 p q)/(size p q)) and its p-value multiplied by
    DISPERSION_MARGIN: simulated at size p q >= 10, the matched form rejects at most
    1.25 times its nominal rate at 10^-4 (tests/test_statistical.py checks its level)."""
    counts = np.asarray(counts, dtype=np.float64)
    sizes = np.asarray(sizes, dtype=np.float64)
    q = 1.0 - p
    variance = sizes * p * q  # [G]
    df = counts.size
    stat = float((((counts - sizes * p) ** 2) / variance).sum())
    excess = float(np.mean((1.0 - 6.0 * p * q) / variance))
    matched = df + (stat - df) * math.sqrt(2.0 / (2.0 + excess))
    tail = min(float(_stats().chi2.sf(matched, df)), float(_stats().chi2.cdf(matched, df)))
    return min(1.0, 2.0 * tail * DISPERSION_MARGIN)


def neighbour_groups(members: np.ndarray, p: float, most: int = 64) -> np.ndarray:
    """Group labels [n] for a class's members (in memory order): up to `most` runs of
    neighbouring elements, each with size p q >= DISPERSION_MIN_VARIANCE."""
    n = members.shape[0]
    groups = max(1, min(most, int(n * p * (1.0 - p) // DISPERSION_MIN_VARIANCE)))
    return (np.arange(n) * groups) // n


def _repeat_pvalue(samples: np.ndarray, p: np.ndarray) -> float:
    """P(every call gives the same array) under the distribution, when they all did."""
    first = samples[0]
    if not all(np.array_equal(first, s, equal_nan=first.dtype.kind in "fc") for s in samples[1:]):
        return 1.0
    calls = samples.shape[0]
    log = float(np.sum(np.log(np.sum(p ** calls, axis=-1))))
    return math.exp(log)


"""The exact distribution of a speculative step's emitted tokens, by integrating the
samplers of ref.specdec.rejection over their random inputs (spec/specdec.md#exactness).

For a small vocabulary and k, every draft sequence x is enumerated with its drafter
probability, and every random input is integrated piece by piece: the oracle's output
is piecewise constant in each uniform, with breakpoints the definition names (the
coin's p(x)/q(x); the inverse CDF's running masses C_v / S), so the ORACLE ITSELF is
evaluated at one point inside each piece and weighted by the piece's length. This
checks the code, not a formula. The exponential race is the one input integrated by
its law, P(token t wins) = r_t / sum(r) (`race_law`, proved separately by the 1-d
integral `race_win_probability`); the oracle is then evaluated with a noise vector
under which t wins (e_t = 1, every other e = 2^200) for each t of positive mass.

    law = step_law(target, draft, k=2, vocab=3, sampler="chain")    # {emitted tokens: probability}
    extended_law(law, target, k=2) == target_law(target, k=2, vocab=3)

`target(prefix)` and `draft(prefix)` give the next-token rows (float64 values, taken
as the exact rationals they are) after a tuple of tokens; a point-mass drafter's
`draft(prefix)` gives its token. Probabilities are Fractions: with rows summing to
exactly 1 (dyadic values, say) the equality above is exact.
"""

from __future__ import annotations

import enum
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from itertools import product

import numpy as np
from scipy import integrate

from ref.specdec.rejection import Draft, chain_sample, rejection_sample

__all__ = ["Sampler", "extended_law", "race_law", "race_win_probability", "step_law", "target_law"]

FAR = float(np.ldexp(1.0, 200))  # the noise of every token but the chosen winner


class Sampler(enum.Enum):
    """Which contract's oracle is integrated."""

    CHAIN = "chain"  # chain_sample: coins u * q < p, inverse-CDF residual and bonus
    VLLM = "vllm"  # rejection_sample: coins p / q >= u, exponential race, bonus handed in


def race_law(r: Sequence[float]) -> list[Fraction]:
    """P(argmax_v r_v / e_v = t) for independent e_v ~ Exp(1): r_t / sum(r) (0 for r_t = 0)."""
    rs = [Fraction(a) for a in r]
    total = sum(rs)
    return [a / total for a in rs]


def race_win_probability(r: Sequence[float], t: int) -> float:
    """P(r_t / e_t > r_i / e_i for every i != t) as the 1-d integral over e_t = s:
    the density e^-s times, for each rival, P(e_i > s r_i / r_t) = exp(-s r_i / r_t)."""
    if r[t] <= 0:
        return 0.0
    rivals = [a / r[t] for i, a in enumerate(r) if i != t]

    def density(s: float) -> float:
        return math.exp(-s) * math.prod(math.exp(-s * c) for c in rivals)

    value, _ = integrate.quad(density, 0, math.inf, epsabs=1e-15, epsrel=1e-13, limit=200)
    return value


def _drafts(draft: Callable, k: int, vocab: int, kind: Draft) -> Iterator[tuple[tuple[int, ...], Fraction]]:
    """Every draft sequence with its probability under the drafter."""
    if kind is Draft.POINT_MASS:
        xs: tuple[int, ...] = ()
        for _ in range(k):
            xs += (int(draft(xs)),)
        yield xs, Fraction(1)
        return
    for xs in product(range(vocab), repeat=k):
        w = Fraction(1)
        for j in range(k):
            w *= Fraction(float(draft(xs[:j])[xs[j]]))
            if not w:
                break
        if w:
            yield xs, w


def _inside(lo: Fraction, hi: Fraction) -> float:
    """A float strictly inside (lo, hi): the midpoint, rounded."""
    mid = float((lo + hi) / 2)
    if not lo < Fraction(mid) < hi:
        raise ValueError(f"a piece ({float(lo)}, {float(hi)}) too short for a float64 point strictly inside")
    return mid


def _pieces(r: Sequence[Fraction]) -> Iterator[tuple[Fraction, Fraction]]:
    """The inverse CDF's pieces of [0, 1) in u: token v's is [C_{v-1} / S, C_v / S)."""
    total, run = sum(r), Fraction(0)
    for a in r:
        if a:
            yield run / total, (run + a) / total
        run += a


def _residual(p: list[Fraction], q: list[Fraction] | None, x: int) -> list[Fraction]:
    if q is None:
        return [Fraction(0) if i == x else a for i, a in enumerate(p)]
    return [max(a - b, Fraction(0)) for a, b in zip(p, q)]


def step_law(target: Callable, draft: Callable, *, k: int, vocab: int, sampler: str | Sampler = Sampler.CHAIN,
             draft_kind: str | Draft = Draft.PROBS, kernel: Callable | None = None) -> dict[tuple[int, ...], Fraction]:
    """{emitted tokens: probability} of one step of `sampler`'s oracle with k drafts
    (`kernel`: another function of the same contract integrated instead, such as a
    wrong sampler whose law must then differ from the target's)."""
    sampler, kind = Sampler(sampler), Draft(draft_kind)
    frac = lambda row: [Fraction(float(a)) for a in row]  # noqa: E731
    calls: list[tuple[Fraction, tuple, list[float], float | list[float], int]] = []
    for xs, w in _drafts(draft, k, vocab, kind):
        p = [frac(target(xs[:j])) for j in range(k + 1)]
        q = None if kind is Draft.POINT_MASS else [frac(draft(xs[:j])) for j in range(k)]
        bounds = [min(p[j][x] / (Fraction(1) if q is None else q[j][x]), Fraction(1)) for j, x in enumerate(xs)]
        for a in range(k + 1):  # a drafts accepted: the coins' pieces [0, b) accept, [b, 1) reject
            weight = w * math.prod(bounds[:a], start=Fraction(1)) * (1 - bounds[a] if a < k else 1)
            if not weight:
                continue
            u = [_inside(Fraction(0), b) for b in bounds[:a]] + ([_inside(bounds[a], Fraction(1))] if a < k else [])
            u += [0.5] * (k - len(u))
            r = _residual(p[a], None if q is None else q[a], xs[a]) if a < k else p[k]
            if sampler is Sampler.CHAIN:
                calls += [(weight * (hi - lo), xs, u, _inside(lo, hi), -1) for lo, hi in _pieces(r)]
            elif a < k:  # the race: token t with probability r_t / sum(r), realized by a noise vector
                calls += [(weight * chance, xs, u, [1.0 if v == t else FAR for v in range(vocab)], 0)
                          for t, chance in enumerate(race_law(r)) if chance]
            else:  # the bonus comes in from the regular sampler: token t with probability p_k(t)
                calls += [(weight * pt, xs, u, [1.0] * vocab, t) for t, pt in enumerate(p[k]) if pt]
    out = _run(calls, target, draft, k, vocab, sampler, kind, kernel)
    law: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)
    for (weight, *_), row in zip(calls, out):
        law[tuple(int(t) for t in row if t != -1)] += weight
    return dict(law)


def _run(calls, target, draft, k, vocab, sampler: Sampler, kind: Draft, kernel: Callable | None) -> np.ndarray:
    """The oracle on every call at once: one request per call."""
    b = len(calls)
    xs = np.array([c[1] for c in calls], np.int64).reshape(b, k)
    rows = k + (sampler is Sampler.CHAIN)
    p = np.array([[target(c[1][:j]) for j in range(rows)] for c in calls], np.float64).reshape(b, rows, vocab)
    q = None if kind is Draft.POINT_MASS else \
        np.array([[draft(c[1][:j]) for j in range(k)] for c in calls], np.float64).reshape(b, k, vocab)
    common = dict(target_probs=p, draft_tokens=xs, num_draft=np.full(b, k, np.int64),
                  uniforms=np.array([c[2] for c in calls], np.float64).reshape(b, k), greedy=np.zeros(b, bool),
                  draft_probs=q, draft=kind.value)
    if sampler is Sampler.CHAIN:
        return (kernel or chain_sample)(final_uniforms=np.array([c[3] for c in calls], np.float64), **common)
    return (kernel or rejection_sample)(exponentials=np.array([c[3] for c in calls], np.float64).reshape(b, vocab),
                            bonus_tokens=np.array([c[4] for c in calls], np.int64), **common)


def target_law(target: Callable, *, k: int, vocab: int) -> dict[tuple[int, ...], Fraction]:
    """The target's joint law of k + 1 tokens: prod_j p(y_j | y_<j)."""
    law = {}
    for ys in product(range(vocab), repeat=k + 1):
        law[ys] = math.prod((Fraction(float(target(ys[:j])[ys[j]])) for j in range(k + 1)), start=Fraction(1))
    return law


def extended_law(law: dict[tuple[int, ...], Fraction], target: Callable, *, k: int) -> dict[tuple[int, ...], Fraction]:
    """The law of a step's tokens continued by sampling the target up to k + 1 tokens."""
    out: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)
    stack = list(law.items())
    while stack:
        ys, w = stack.pop()
        if len(ys) == k + 1:
            out[ys] += w
            continue
        stack += [(ys + (t,), w * Fraction(float(pt))) for t, pt in enumerate(target(ys)) if pt]
    return dict(out)

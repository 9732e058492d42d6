"""The statistical twin of speculative decoding, specdec.rejection_sample_rng: the
marginals oracle against an exact path enumeration in Fractions and against the
exactness theorem at the first position, its argument checks, the correct samplers
accepted and every corpus bug rejected by a vector carrying its flag. Under
HYPOTHESIS_PROFILE=deep (or -m deep): the false-alarm rate and the power against
each bug, measured (spec/specdec.md, "The statistical twin")."""

from __future__ import annotations

import dataclasses
import math
import os
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from corpus import specdec_stochastic as cs
from hypothesis import given, settings, strategies as st

from ref.conformance.judges.statistical import RERUN_NOTE, run_op
from ref.conformance.regenerate import build_vectors
from ref.conformance.report import Entry, OpReport
from ref.specdec.catalog.statistical import OPERATIONS, pattern
from ref.specdec.marginals import check_step, rejection_sample_marginals
from ref.testing.statistical import check_level

OP = OPERATIONS[0]
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
_VECTORS: list = []


def vectors():
    if not _VECTORS:
        _VECTORS.extend(build_vectors(OP))
    return _VECTORS


def judge(sampler, variants=None, *, calls=16, examples=3, seed_base=None, skips=(), with_vectors=True,
          stop_at_failure=False, op=None):
    op = dataclasses.replace(op or OP, calls=calls)
    impl = cs.implementation(op, sampler, variants)
    report = OpReport(op.name, op.kind.value, op.spec)
    settings_ = SimpleNamespace(examples=examples, skips=tuple(skips), xfails=(), golden=None, shrink=False,
                                large=False)
    run_op(op, impl.fn, impl, settings_, report, seed_base=seed_base, vectors=vectors() if with_vectors else [],
           stop_at_failure=stop_at_failure)
    return report


# --- the oracle ----------------------------------------------------------------------------------------------


def _paths(p, x, n, q, greedy):
    """Exact law of the whole output row of one request, by walking its paths in Fractions:
    {tuple(output): probability}. An independent formulation of the step."""
    k1, v = len(p), len(p[0])
    law: dict[tuple, Fraction] = {}

    def emit(prefix, weight):
        row = tuple(prefix) + (-1,) * (k1 - len(prefix))
        law[row] = law.get(row, Fraction(0)) + weight

    def draw(row):
        s = sum(row)
        return [(t, w / s) for t, w in enumerate(row) if w > 0]

    if greedy:
        out = []
        for j in range(n + 1):
            best = max(range(v), key=lambda t: (p[j][t], -t))
            out.append(best)
            if j == n or x[j] != best:
                break
        emit(out, Fraction(1))
        return law

    def walk(j, prefix, weight):
        if j == n:
            for t, w in draw(p[n]):
                emit(prefix + [t], weight * w)
            return
        t = x[j]
        qrow = [Fraction(int(i == t)) for i in range(v)] if q is None else q[j]
        a = Fraction(0) if t < 0 or qrow[t] == 0 else min(Fraction(1), p[j][t] / qrow[t])
        if a > 0:
            walk(j + 1, prefix + [t], weight * a)
        if a < 1:
            residual = [max(pi - qi, Fraction(0)) for pi, qi in zip(p[j], qrow)]
            for s, w in draw(residual if sum(residual) > 0 else p[j]):
                emit(prefix + [s], weight * (1 - a) * w)

    walk(0, [], Fraction(1))
    return law


@st.composite
def requests(draw):
    v, k = draw(st.integers(1, 4)), draw(st.integers(0, 3))
    row = st.lists(st.integers(0, 3), min_size=v, max_size=v).filter(lambda r: sum(r) > 0)
    p = [[Fraction(w, sum(r)) for w in r] for r in (draw(row) for _ in range(k + 1))]
    q = [[Fraction(w, sum(r)) for w in r] for r in (draw(row) for _ in range(k))]
    x = [draw(st.integers(-1, v - 1)) for _ in range(k)]
    return p, x, draw(st.integers(0, k)), q, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=30, deadline=None)
@given(requests())
def test_marginals_are_the_path_enumeration_summed(case):
    p, x, n, q, greedy, point_mass = case
    law = _paths(p, x, n, None if point_mass else q, greedy)
    k1, v = len(p), len(p[0])
    arr = lambda rows: np.array([[float(f) for f in r] for r in rows], dtype=np.float64).reshape(1, -1, v)
    outcomes, probs = rejection_sample_marginals(
        arr(p), np.array([x], dtype=np.int64).reshape(1, k1 - 1), np.array([n]), np.array([greedy]),
        None if point_mass else arr(q), draft="point_mass" if point_mass else "probs")
    assert outcomes[0, 0].tolist() == list(range(v)) + [-1]
    want = np.zeros((k1, v + 1))
    for row, w in law.items():
        for j, t in enumerate(row):
            want[j, t if t >= 0 else v] += float(w)
    np.testing.assert_allclose(probs[0], want, rtol=0, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6).flatmap(lambda v: st.tuples(
    st.lists(st.integers(0, 4), min_size=v, max_size=v).filter(any),
    st.lists(st.integers(0, 4), min_size=v, max_size=v).filter(any))))
def test_the_first_position_has_the_targets_law(rows):
    """The exactness theorem at position 0: with the draft x ~ q, the first emitted token
    is distributed as p (sum over x of q(x) times the oracle's marginal given x); with a
    point-mass drafter it is p for every x."""
    p, q = (np.asarray(r, dtype=np.float64) / sum(r) for r in rows)
    v = p.size
    tokens = np.arange(v)
    target = np.tile(np.stack([p, p]), (v, 1, 1))  # [V, 2, V]: one request per drafted token
    args = (target, tokens[:, None], np.ones(v, np.int64), np.zeros(v, bool))
    _, given_x = rejection_sample_marginals(*args, np.tile(q, (v, 1, 1)))
    np.testing.assert_allclose((q[:, None] * given_x[:, 0, :v]).sum(axis=0), p, atol=1e-12)
    _, point = rejection_sample_marginals(*args, draft="point_mass")
    np.testing.assert_allclose(point[:, 0, :v], np.tile(p, (v, 1)), atol=1e-12)


def test_edge_cases():
    p16 = [[6, 4, 4, 2], [1, 2, 4, 9]]
    # zero draft probability at the draft: rejected, the correction from max(p - q, 0) (x itself included)
    _, pr = rejection_sample_marginals(**_inputs(pattern(p=p16, x=[3], q=[[8, 4, 4, 0]], copies=1)))
    assert pr[0, 0].tolist() == [0, 0, 0, 1, 0]
    # p = q with q(x) = 0: zero residual mass, drawn from p
    _, pr = rejection_sample_marginals(**_inputs(pattern(p=[[0, 8, 8, 0], p16[1]], x=[3], q=[[0, 8, 8, 0]],
                                                         copies=1)))
    assert pr[0, 0].tolist() == [0, 0.5, 0.5, 0, 0] and pr[0, 1].tolist() == [0, 0, 0, 0, 1]
    # p(x) = 0 < q(x): never accepted (a uniform of 0 would accept it: u <= 0)
    _, pr = rejection_sample_marginals(**_inputs(pattern(p=[[8, 8, 0, 0], p16[1]], x=[2], q=[[4] * 4],
                                                         copies=1)))
    assert pr[0, 0, 2] == 0 and pr[0, 1, 4] == 1
    # V = 1, k = 0, B = 0
    _, pr = rejection_sample_marginals(**_inputs(pattern(p=[[16]] * 3, x=[0, 0], q=[[16]] * 2, copies=1)))
    assert pr[0].tolist() == [[1, 0]] * 3
    o, pr = rejection_sample_marginals(**_inputs(pattern(p=[p16[1]], x=[], q=np.zeros((0, 4)), copies=2)))
    assert o.shape == (2, 1, 5) and pr[0, 0].tolist() == [1 / 16, 2 / 16, 4 / 16, 9 / 16, 0]
    assert rejection_sample_marginals(**_inputs(pattern(p=p16, x=[1], q=p16[:1], copies=0)))[0].shape == (0, 2, 5)


def _inputs(d):
    return {**d, "draft": "probs" if "draft_probs" in d else "point_mass"}


@pytest.mark.parametrize("v", [v for v in vectors() if v.result == "invalid"], ids=lambda v: v.comment)
def test_invalid_inputs_are_refused_naming_the_argument(v):
    name = v.comment.split(":")[0]  # each invalid vector names the argument first
    with pytest.raises((ValueError, TypeError), match=name):
        rejection_sample_marginals(**v.inputs, **v.params)


def test_the_vectors_pool_each_pattern_into_large_classes():
    """Each valid vector's distinct live rows hold at least 32 elements (a class of 32 x
    calls samples) but the random one; the golden files stay small."""
    for v in vectors():
        if v.result != "valid" or "Random" in v.flags or not v.inputs["target_probs"].shape[0]:
            continue
        p = v.expected[1].reshape(-1, v.expected[1].shape[-1])
        rows, counts = np.unique(p, axis=0, return_counts=True)
        live = rows.max(axis=1) < 1
        assert not live.any() or counts[live].min() >= 32, v.comment


# --- the judge -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(cs.CORRECT))
def test_the_correct_samplers_pass(name):
    report = judge(cs.CORRECT[name], cs.BOTH, calls=8, examples=2)
    assert report.verdict == "pass", [f.describe() for f in report.failures]
    assert report.vectors_skipped == 0 and report.examples == 2


@pytest.mark.parametrize("name", sorted(cs.SPECDEC_RNG_BUGS))
def test_every_bug_is_rejected_by_a_vector_carrying_its_flag(name):
    """The corpus rule: without random examples, the vectors flagged for the bug reject it."""
    sampler, variants, flag = cs.SPECDEC_RNG_BUGS[name]
    skips = [Entry(OP.name, str(v.id), "not flagged") for v in vectors() if flag not in v.flags]
    report = judge(sampler, variants, examples=0, skips=skips, calls=8, stop_at_failure=True)
    assert report.verdict == "fail" and all(flag in f.flags for f in report.failures), name


# --- measured: power and false alarms (deep) -----------------------------------------------------------------


def measure_power(runs: int = 10, examples: int = 0) -> dict[str, float]:
    """Share of `runs` independent runs (fresh seeds) of the catalog's op (64 calls a check,
    every vector) that reject each bug; a run stops at its first failure."""
    return {name: sum(judge(sampler, variants, calls=OP.calls, examples=examples, seed_base=1000 + i,
                            stop_at_failure=True).verdict == "fail" for i in range(runs)) / runs
            for name, (sampler, variants, _) in sorted(cs.SPECDEC_RNG_BUGS.items())}


def measure_false_alarms(runs: int, false_alarm: float | None = None, calls: int = 64,
                         examples: int = 5) -> tuple[int, int, int]:
    """(failed runs, checks whose first attempt rejected, checks) of the correct inverse-CDF
    sampler over `runs` independent runs."""
    op = dataclasses.replace(OP, false_alarm=false_alarm or OP.false_alarm)
    failed = first = checks = 0
    for i in range(runs):
        report = judge(cs.inverse_philox, cs.BOTH, calls=calls, examples=examples, seed_base=70_000 + i, op=op)
        failed += report.verdict == "fail"
        checks += report.compared
        first += sum("re-run" in f.detail for f in report.failures)
        first += sum(int(n.split()[0]) for n in report.notes if n.endswith(RERUN_NOTE))
    return failed, first, checks


@pytest.mark.deep
def test_power_against_every_bug():
    power = measure_power()
    assert all(rate == 1.0 for rate in power.values()), power


@pytest.mark.deep
def test_false_alarm_rate_is_what_the_op_states():
    """At the op's rate (1e-6) no run of the correct sampler fails; at an inflated rate
    (0.2) the share of failing runs, and of checks rejected at their first attempt, stay
    within three standard deviations of the stated levels."""
    failed, _, _ = measure_false_alarms(5)
    assert failed == 0
    runs, rate = 60, 0.2
    failed, first, checks = measure_false_alarms(runs, false_alarm=rate, calls=8, examples=0)
    assert failed / runs <= rate + 3 * math.sqrt(rate * (1 - rate) / runs)
    level = check_level(rate, checks // runs)
    assert first / checks <= level + 3 * math.sqrt(level * (1 - level) / checks)


# --- the section-1 oracles as samplers (where ref.specdec.rejection is present) ---------------------------


def _oracle_sampler(which: str):
    """rejection_sample or chain_sample fed with numbers drawn from the seed: a correct
    sampler by section 1's contracts (the bonus, which vLLM takes from outside, drawn from
    row num_draft by inverse CDF)."""
    rejection = pytest.importorskip("ref.specdec.rejection")

    def sample(target_probs, draft_tokens, num_draft, greedy, draft_probs=None, *, seed, draft):
        check_step(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft=draft)  # the bonus row too
        p = np.asarray(target_probs, dtype=np.float64)
        n = np.asarray(num_draft).astype(np.int64)
        b, k1, v = p.shape
        rng = np.random.default_rng(seed)
        u = rng.random((b, k1 - 1))
        if which == "chain":
            return rejection.chain_sample(target_probs, draft_tokens, num_draft, u, rng.random(b), greedy,
                                          draft_probs, draft=draft)
        rows = np.nan_to_num(p[np.arange(b), np.clip(n, 0, k1 - 1)])  # [B, V]
        c = np.cumsum(rows, axis=-1)
        bonus = np.minimum((c <= rng.random(b)[:, None] * c[:, -1:]).sum(-1), v - 1)
        greedy_bonus = np.argmax(rows, axis=-1)
        bonus = np.where(np.asarray(greedy), greedy_bonus, bonus).astype(np.int64)
        e = rng.exponential(size=(b, v)) + 1e-300  # > 0
        return rejection.rejection_sample(np.asarray(target_probs)[:, :-1], draft_tokens, num_draft, u, e, bonus,
                                          greedy, draft_probs, draft=draft)  # (a) has no bonus row: [B, k, V]

    return sample


@pytest.mark.parametrize("which", ["vllm", "chain"])
def test_the_section_1_oracles_pass_as_samplers(which):
    """Section 1's oracles, fed random numbers drawn from the seed, are correct samplers of
    this op: they pass every vector but the zero-mass residual's (RngZeroResidual: vLLM's
    race gives token 0 there, the inverse CDF V - 1; a case of probability zero)."""
    sampler = _oracle_sampler(which)
    skips = [Entry(OP.name, "RngZeroResidual", "a degenerate case each contract decides its own way")]
    report = judge(sampler, cs.BOTH, calls=8, examples=2, skips=skips)
    assert report.verdict == "pass", [f.describe() for f in report.failures]

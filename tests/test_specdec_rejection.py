"""Speculative rejection sampling (spec/specdec.md): the two samplers' edge cases, the
exactness theorem proved by integrating the oracles over their random inputs
(ref.specdec.exact) for drafts hypothesis draws, the exponential race's law by its 1-d
integral, wrong samplers breaking the theorem, and the default kernel and the correct
alternatives passing the vectors."""

from __future__ import annotations

import functools
import itertools
from fractions import Fraction

import numpy as np
import pytest
from corpus import specdec_rejection as corpus
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.conformance.adapters import numpy_specdec
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.specdec.exact import extended_law, race_law, race_win_probability, step_law, target_law
from ref.specdec.rejection import chain_sample, rejection_sample

DEN = 16  # rows in sixteenths: exact in float64, summing to exactly 1


# ------------------------------------------------------------------ edge cases


def _one(p, q, x, u, *, e=None, uf=0.5, bonus=0, greedy=False, chain=False):
    """One request with len(x) drafts; p has len(x) + 1 rows."""
    k = len(x)
    args = dict(draft_tokens=np.array([x], np.int64), num_draft=np.array([k], np.int64),
                uniforms=np.array([u], np.float64).reshape(1, k), greedy=np.array([greedy]),
                draft_probs=None if q is None else np.array([q], np.float64).reshape(1, k, -1))
    p = np.array([p], np.float64)
    if chain:
        return chain_sample(p, final_uniforms=np.array([uf]), **args)[0].tolist()
    e = np.ones((1, p.shape[-1])) if e is None else np.array([e], np.float64)
    return rejection_sample(p[:, :k], exponentials=e, bonus_tokens=np.array([bonus], np.int64), **args)[0].tolist()


HALF = [0.5, 0.5, 0.0, 0.0]
EVEN = [0.25] * 4


def test_u_zero_keeps_a_zero_probability_draft_under_vllms_rule_only():
    p, q = [[0.0, 0.5, 0.5, 0.0], EVEN], [[0.5, 0.25, 0.25, 0.0]]
    assert _one(p, q, [0], [0.0], bonus=2) == [0, 2]  # 0 / (1/2) >= 0
    assert _one(p, q, [0], [0.0], uf=0.0, chain=True) == [1, -1]  # 0 * q < 0 is false; first positive residual


def test_zero_draft_probability_at_the_drafted_token_is_rejected():
    p, q = [[0.5, 0.5, 0.0, 0.0], EVEN], [[0.0, 0.5, 0.5, 0.0]]
    assert _one(p, q, [0], [0.0]) == [0, -1]  # rejected; the residual (1/2, 0, 0, 0) gives 0
    assert _one(p, q, [0], [0.0], chain=True) == [0, -1]


def test_an_all_zero_residual_gives_the_first_token_to_the_race_and_the_last_to_the_inverse_cdf():
    p, q = [EVEN, EVEN], [EVEN]
    assert _one(p, q, [-1], [0.5], e=[4.0, 1.0, 1.0, 1.0]) == [0, -1]
    assert _one(p, q, [-1], [0.5], uf=0.0, chain=True) == [3, -1]


def test_vocabulary_of_one_and_no_drafts_and_an_empty_batch():
    assert _one([[1.0], [1.0]], [[1.0]], [0], [0.75]) == [0, 0]
    assert _one([[1.0], [1.0]], None, [0], [0.75], chain=True) == [0, 0]
    assert _one([[0.25, 0.75]], None, [], [], bonus=1) == [1]
    assert _one([[0.25, 0.75]], None, [], [], uf=0.25, chain=True) == [1]
    empty = dict(draft_tokens=np.zeros((0, 2), np.int64), num_draft=np.zeros(0, np.int64),
                 uniforms=np.zeros((0, 2)), greedy=np.zeros(0, bool))
    assert rejection_sample(np.zeros((0, 2, 3)), exponentials=np.zeros((0, 3)), bonus_tokens=np.zeros(0, np.int64),
                            **empty).shape == (0, 3)
    assert chain_sample(np.zeros((0, 3, 3)), final_uniforms=np.zeros(0), **empty).shape == (0, 3)


def test_p_equal_to_q_accepts_every_draft():
    p = [EVEN, HALF, [0.0, 0.0, 0.0, 1.0]]
    assert _one(p, p[:2], [2, 1], [0.999, 0.999], bonus=1) == [2, 1, 1]
    assert _one(p, p[:2], [2, 1], [0.999, 0.999], uf=0.999, chain=True) == [2, 1, 3]


def test_invalid_inputs_name_the_argument():
    p, q = np.array([[EVEN, EVEN]]), np.array([[EVEN]])
    good = dict(target_probs=p, draft_tokens=np.array([[1]]), num_draft=np.array([1]), uniforms=np.array([[0.5]]),
                final_uniforms=np.array([0.5]), greedy=np.array([False]), draft_probs=q)
    for name, value in [("target_probs", p * 2), ("draft_probs", -q), ("draft_tokens", np.array([[4]])),
                        ("uniforms", np.array([[1.0]])), ("num_draft", np.array([2])),
                        ("final_uniforms", np.array([np.nan]))]:
        with pytest.raises(ValueError, match=name):
            chain_sample(**{**good, name: value})
    with pytest.raises(TypeError, match="uniforms"):
        chain_sample(**{**good, "uniforms": good["uniforms"].astype(np.float32)})


# ------------------------------------------------------------------ exactness


@functools.lru_cache(maxsize=None)
def _rows(v: int):
    """A row in sixteenths from sorted cut points: zeros and concentration come from coinciding cuts."""
    cuts = st.lists(st.integers(0, DEN), min_size=v - 1, max_size=v - 1).map(sorted)
    return cuts.map(lambda c: tuple(b - a for a, b in zip([0, *c], [*c, DEN])))


@st.composite
def tables(draw, v: int, k: int):
    """target(prefix) and draft(prefix) rows for every prefix: p free or a point mass (concentrated),
    q related to p by a drawn mode: free, disjoint from p's support where p leaves room, a point
    mass, or p itself."""
    mode = draw(st.sampled_from(["free", "disjoint", "point", "equal"]))
    concentrated = draw(st.booleans())  # p a point mass at every prefix
    p, q = {}, {}
    for n in range(k + 1):
        for prefix in itertools.product(range(v), repeat=n):
            if concentrated:
                t = draw(st.integers(0, v - 1))
                p[prefix] = tuple(DEN * (i == t) for i in range(v))
            else:
                p[prefix] = draw(_rows(v))
            if n == k:
                continue
            if mode == "point":
                t = draw(st.integers(0, v - 1))
                q[prefix] = tuple(DEN * (i == t) for i in range(v))
            elif mode == "equal":
                q[prefix] = p[prefix]
            elif mode == "disjoint" and 0 in p[prefix]:
                room = [i for i, a in enumerate(p[prefix]) if a == 0]
                t = draw(st.sampled_from(room))
                q[prefix] = tuple(DEN * (i == t) for i in range(v))
            else:
                q[prefix] = draw(_rows(v))
    return (lambda pre: np.array(p[pre]) / DEN), (lambda pre: np.array(q[pre]) / DEN)


@st.composite
def steps(draw):
    v, k = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    target, draft = draw(tables(v, k))
    return v, k, target, draft, draw(st.sampled_from(["chain", "vllm"])), draw(st.sampled_from(["probs", "point_mass"]))


def _holds(v, k, target, draft, sampler, kind, kernel=None) -> bool:
    if kind == "point_mass":
        rows = draft
        draft = lambda pre: int(np.argmax(rows(pre)))  # noqa: E731
    law = step_law(target, draft, k=k, vocab=v, sampler=sampler, draft_kind=kind, kernel=kernel)
    assert sum(law.values()) == 1
    want = {ys: w for ys, w in target_law(target, k=k, vocab=v).items() if w}
    return extended_law(law, target, k=k) == want


@given(steps())
def test_a_step_continued_by_the_target_has_the_targets_law(step):
    assert _holds(*step)


@pytest.mark.deep
@settings(max_examples=400)
@given(st.data())
def test_the_theorem_for_larger_steps(data):
    v, k = data.draw(st.integers(2, 4)), data.draw(st.integers(1, 3))
    target, draft = data.draw(tables(v, k))
    sampler, kind = data.draw(st.sampled_from(["chain", "vllm"])), data.draw(st.sampled_from(["probs", "point_mass"]))
    assert _holds(v, k, target, draft, sampler, kind)


def test_rows_of_thirds_give_the_target_within_rounding():
    p = {(): [1 / 3, 1 / 3, 1 / 3], **{(t,): [0.5, 0.25, 0.25] for t in range(3)}}
    q = {(): [0.6, 0.2, 0.2]}
    for sampler in ("chain", "vllm"):
        law = step_law(lambda pre: p[pre], lambda pre: q[pre], k=1, vocab=3, sampler=sampler)
        got = extended_law(law, lambda pre: p[pre], k=1)
        for ys, w in target_law(lambda pre: p[pre], k=1, vocab=3).items():
            assert abs(float(got.get(ys, 0)) - float(w)) < 1e-12


@pytest.mark.parametrize("r", [[0.5, 0.25, 0.25, 0.0], [1.0, 0.0], [0.1, 0.2, 0.3, 0.4], [3.0, 1e-3, 5.0]])
def test_the_races_law_is_its_integral(r):
    law = race_law(r)
    for t in range(len(r)):
        assert abs(race_win_probability(r, t) - float(law[t])) < 1e-12


EXAMPLE = (3, 1, lambda pre: np.array({(): [8, 4, 4], (0,): [4, 8, 4], (1,): [0, 8, 8], (2,): [16, 0, 0]}[pre]) / DEN,
           lambda pre: np.array([4, 8, 4]) / DEN)


@pytest.mark.parametrize("name", ["chain: accept when p >= q without a coin", "vllm: residual max(0, q - p)",
                                  "chain: residual not renormalized for the inverse CDF",
                                  "vllm: a recovered token past the vocabulary (padded lanes, last-lane ties)"])
def test_wrong_samplers_break_the_theorem(name):
    op, _, kernel = corpus.REJECTION_BUGS[name]
    sampler = "chain" if op == corpus.CHAIN else "vllm"
    if "vocabulary" in name:  # the bug shows on an all-zero residual only: p == q, a draft q never proposes
        assert _one([EVEN, EVEN], [EVEN], [-1], [0.5]) == [0, -1]
        assert kernel(np.array([[EVEN]]), np.array([[-1]]), np.array([1]), np.array([[0.5]]), np.ones((1, 4)),
                      np.array([0]), np.array([False]), np.array([[EVEN]]))[0, 0] >= 4
        return
    assert _holds(*EXAMPLE, sampler, "probs")
    assert not _holds(*EXAMPLE, sampler, "probs", kernel=kernel)


def test_the_default_kernel_integrates_to_the_target_too():
    for sampler, kernel in (("chain", numpy_specdec.chain_sample), ("vllm", numpy_specdec.rejection_sample)):
        assert _holds(*EXAMPLE, sampler, "probs", kernel=kernel)
        assert _holds(*EXAMPLE, sampler, "point_mass", kernel=kernel)


# ------------------------------------------------------------------ kernels on the vectors


def test_correct_kernels_pass():
    """The default kernel (on a few random batches too) and the correct alternatives (float32
    arithmetic as vLLM's; every verdict first): the vectors leave them no room to differ."""
    default = Implementation(numpy_specdec.NAME, numpy_specdec.OPS, variants=numpy_specdec.VARIANTS)
    for impl, examples in ((default, 3), *((impl, 0) for impl in corpus.CORRECT.values())):
        report = run(impl, ops=[corpus.VLLM, corpus.CHAIN], examples=examples)
        assert report.ok, (impl.name, [(f.where, f.flags) for r in report.ops for f in r.failures][:5])


@pytest.mark.deep
def test_the_default_kernel_agrees_on_many_random_batches():
    impl = Implementation(numpy_specdec.NAME, numpy_specdec.OPS, variants=numpy_specdec.VARIANTS)
    report = run(impl, ops=[corpus.VLLM, corpus.CHAIN], examples=1000)
    assert report.ok


def test_fractions_are_exact_on_dyadic_rows():
    law = step_law(*EXAMPLE[2:], k=1, vocab=3, sampler="chain")
    assert all(isinstance(w, Fraction) for w in law.values()) and sum(law.values()) == 1


@pytest.mark.parametrize("op", [corpus.VLLM, corpus.CHAIN])
def test_rows_past_num_draft_are_never_read(op):
    """Any values in the unused rows (NaN in the vectors, here garbage) leave the tokens unchanged."""
    from ref.conformance.catalog import discover

    entry = discover()[op]

    @settings(max_examples=25)
    @given(entry.examples({"draft": ["probs", "point_mass"]}), st.integers(0, 2**32 - 1))
    def check(case, seed):
        rng = np.random.default_rng(seed)
        inputs = dict(case.inputs)
        n = inputs["num_draft"]
        extra = 1 if op == corpus.CHAIN else 0
        for name, rows in (("target_probs", n + extra), ("draft_probs", n), ("uniforms", n)):
            if name in inputs:
                a = inputs[name].copy()
                unused = np.arange(a.shape[1]) >= rows[:, None]
                a[unused] = rng.uniform(-5, 5, a[unused].shape).astype(a.dtype)
                inputs[name] = a
        assert np.array_equal(entry.oracle(**inputs, **case.params), entry.oracle(**case.inputs, **case.params))

    check()


def test_one_row_sum_tolerance_for_the_area():
    """Every specdec oracle and default kernel checks rows at SUM_TOLERANCE = 1e-4: a row off by
    2^-14 passes each oracle, one off by 2^-11 is refused by each."""
    from ref.conformance.adapters import numpy_spec_trees, numpy_specdec_rng
    from ref.specdec import marginals, multi_draft, rejection, speedup

    tolerances = {rejection.SUM_TOLERANCE, multi_draft.PROB_TOLERANCE, marginals.ROW_SUM_TOLERANCE,
                  speedup.ROW_SUM_TOLERANCE, numpy_specdec.TOLERANCE, numpy_spec_trees.TOL,
                  numpy_specdec_rng._TOLERANCE}
    assert tolerances == {1e-4}
    for off, ok in ((2.0**-14, True), (2.0**-11, False)):
        row = np.array([0.5 + off, 0.5])
        calls = (lambda: multi_draft.check_probs(row[None], "p", (1, 2)),
                 lambda: speedup.acceptance(row, np.array([0.5, 0.5])),
                 lambda: rejection_sample(row[None, None], np.array([[0]]), np.array([1]), np.array([[0.5]]),
                                          np.ones((1, 2)), np.array([1]), np.array([False])))
        for call in calls:
            if ok:
                call()
            else:
                with pytest.raises(ValueError):
                    call()

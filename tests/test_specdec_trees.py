"""Token trees and multi-draft sampling (spec/specdec.md, the tree sections).

Exactness is proved, not sampled: every sampler here is piecewise constant in each of
its uniforms, so the law of its output is the sum, over the pieces of [0, 1) cut at
every value where the output can change, of the piece's length times the ORACLE's
output at a point inside it (and over the drafts, weighted by their probability).
The breakpoints are a superset computed from the inputs (every ratio and cumulative
mass the rule can compare a uniform with); a piece cut too finely costs time, never
correctness.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from corpus import specdec_trees
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ref.conformance.adapters import numpy_spec_trees as kernel
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.specdec.multi_draft import (
    tree_rejection_sample,
    tree_sample_target_only,
    typical_acceptance,
    typical_threshold,
)
from ref.specdec.tree import (
    ancestor_mask,
    depths,
    parents_from_choices,
    parents_from_links,
    parents_from_topk,
    tree_attention,
    tree_links,
    verify_tree_greedy,
)

# ------------------------------------------------------------------ exact laws by integration


def _pieces(breaks) -> list[tuple[float, float]]:
    """(midpoint, length) of the pieces of [0, 1) cut at `breaks`."""
    cuts = sorted({0.0, 1.0, *(float(b) for b in breaks if 0 < b < 1)})
    below_one = np.nextafter(1.0, 0.0)  # a piece of length 2^-53 below 1 has its midpoint round up to 1
    return [(min((a + b) / 2, below_one), b - a) for a, b in zip(cuts, cuts[1:])]


def _cum_breaks(rows) -> set[float]:
    out = set()
    for r in rows:
        r = np.asarray(r, np.float64)
        if r.sum() > 0:
            out |= set(np.cumsum(r) / r.sum())
    return out


def _residual_chain(p, q, tokens):
    """Every residual and draft row the rejection rule can reach at one node, both draft modes."""
    rows, ratios = [p], [set() for _ in tokens]
    for mode in ("iid", "without_replacement"):
        r, qq = p, q
        for i, x in enumerate(tokens):
            if qq[x] > 0:
                ratios[i].add(r[x] / qq[x])
            diff = np.maximum(r - qq, 0)
            r = diff / diff.sum() if diff.sum() > 0 else r
            rows.append(r)
            if mode == "without_replacement":
                qq = qq.copy()
                qq[x] = 0
                qq = qq / qq.sum() if qq.sum() > 0 else qq
    return rows, ratios


def _draft_tuples(q, m, mode):
    """(tokens, probability) of m siblings drawn from q: independently or without replacement."""
    v = len(q)
    for tokens in itertools.product(range(v), repeat=m):
        if mode == "iid":
            w = float(np.prod([q[x] for x in tokens]))
        else:
            w, left = 1.0, q.copy()
            for x in tokens:
                if left.sum() <= 0 or left[x] == 0:
                    w = 0.0
                    break
                w *= left[x] / left.sum()
                left[x] = 0
        if w > 0:
            yield tokens, w


def rejection_law(p, q, m, mode):
    """The exact law of the first emitted token of a root with m drafted children."""
    v = len(p)
    law = np.zeros(v)
    uniform = np.full(v, 1.0 / v)
    for tokens, w in _draft_tuples(q, m, mode):
        rows, ratios = _residual_chain(p, q, tokens)
        coin_pieces = [_pieces(r) for r in ratios]
        final_pieces = _pieces(_cum_breaks(rows + [uniform]))
        combos = list(itertools.product(*coin_pieces, final_pieces))
        b, n = len(combos), m + 1
        uniforms = np.array([[0.0] + [c[0] for c in combo[:-1]] for combo in combos])
        final = np.array([combo[-1][0] for combo in combos])
        weight = np.array([w * np.prod([c[1] for c in combo]) for combo in combos])
        out, _, _ = tree_rejection_sample(
            np.tile([-1] + [0] * m, (b, 1)), np.tile([0, *tokens], (b, 1)),
            np.tile(np.stack([p] + [uniform] * m), (b, 1, 1)), np.tile(np.stack([q] * n), (b, 1, 1)),
            uniforms.reshape(b, n), final, drafts=mode)
        np.add.at(law, out[:, 0], weight)
    return law


def target_only_law(p, tokens, threshold_acc=1.0):
    """The exact law of the first token of SGLang's target-only rule at a root with these children."""
    v = len(p)
    uniform = np.full(v, 1.0 / v)
    acc = np.cumsum([p[x] for x in tokens]) / threshold_acc
    left = [p.copy()]
    for x in tokens:
        nxt = left[-1].copy()
        nxt[x] = 0
        left.append(nxt)
    combos = list(itertools.product(_pieces(acc), _pieces(_cum_breaks(left + [p, uniform]))))
    b = len(combos)
    out, _, _ = tree_sample_target_only(
        np.tile([-1] + [0] * len(tokens), (b, 1)), np.tile([0, *tokens], (b, 1)),
        np.tile(np.stack([p] + [uniform] * len(tokens)), (b, 1, 1)),
        np.array([[c[0]] + [0.5] * len(tokens) for c, _ in combos]), np.array([f[0] for _, f in combos]),
        threshold_acc=threshold_acc)
    law = np.zeros(v)
    np.add.at(law, out[:, 0], [c[1] * f[1] for c, f in combos])
    return law


def _row(weights) -> np.ndarray:
    w = np.asarray(weights, np.float64)
    return w / w.sum()


rows = st.lists(st.integers(0, 4), min_size=2, max_size=4).filter(lambda w: sum(w) > 0)


@st.composite
def target_and_draft(draw, shape=None):
    """p and q over one vocabulary: zeros in q, p concentrated, q disjoint from p, point-mass q."""
    p = draw(rows)
    v = len(p)
    kind = draw(st.sampled_from(["any", "point_mass", "disjoint", "concentrated"]))
    if kind == "point_mass":
        q = [0] * v
        q[draw(st.integers(0, v - 1))] = 1
    elif kind == "disjoint":
        q = [0 if x else 1 for x in p] if any(x == 0 for x in p) else [1] + [0] * (v - 1)
    elif kind == "concentrated":
        p = [0] * v
        p[draw(st.integers(0, v - 1))] = 1
        q = draw(st.lists(st.integers(0, 4), min_size=v, max_size=v).filter(lambda w: sum(w) > 0))
    else:
        q = draw(st.lists(st.integers(0, 4), min_size=v, max_size=v).filter(lambda w: sum(w) > 0))
    return _row(p), _row(q)


@settings(max_examples=12, deadline=None)
@given(target_and_draft(), st.integers(1, 2), st.sampled_from(["iid", "without_replacement"]))
def test_multi_draft_rejection_emits_the_target(pq, m, mode):
    """Theorem (one node): for m >= 1 children drawn from q as `mode` says, the first
    emitted token follows p exactly, whatever q (float64 at 1e-12). Drawn without
    replacement, q must hold m tokens."""
    p, q = pq
    assume(mode == "iid" or (q > 0).sum() >= m)
    np.testing.assert_allclose(rejection_law(p, q, m, mode), p, atol=1e-12)


@pytest.mark.deep
@settings(max_examples=200, deadline=None)
@given(target_and_draft(), st.integers(1, 3), st.sampled_from(["iid", "without_replacement"]))
def test_multi_draft_rejection_emits_the_target_deep(pq, m, mode):
    p, q = pq
    assume(mode == "iid" or (q > 0).sum() >= m)
    np.testing.assert_allclose(rejection_law(p, q, m, mode), p, atol=1e-12)


def test_the_wrong_draft_model_is_not_exact():
    """The rule is exact only for drafts drawn as declared: drafts drawn without
    replacement judged by the iid rule (or the reverse) are biased, here by 0.133 and
    0.14 in the first token's probabilities (two siblings, p = (2, 2, 1)/5,
    q = (1, 2, 7)/10)."""
    p, q = _row([2, 2, 1]), _row([1, 2, 7])
    for drawn, judged, shift in (("without_replacement", "iid", 2 / 15), ("iid", "without_replacement", 0.14)):
        law = sum(w * _single_tuple_law(p, q, tokens, judged) for tokens, w in _draft_tuples(q, 2, drawn))
        assert abs(np.abs(law - p).max() - shift) < 1e-12


def _single_tuple_law(p, q, tokens, mode):
    v = len(p)
    law = np.zeros(v)
    rows_, ratios = _residual_chain(p, q, tokens)
    uniform = np.full(v, 1.0 / v)
    combos = list(itertools.product(*[_pieces(r) for r in ratios], _pieces(_cum_breaks(rows_ + [uniform]))))
    b, n = len(combos), len(tokens) + 1
    out, _, _ = tree_rejection_sample(
        np.tile([-1] + [0] * len(tokens), (b, 1)), np.tile([0, *tokens], (b, 1)),
        np.tile(np.stack([p] + [uniform] * len(tokens)), (b, 1, 1)), np.tile(np.stack([q] * n), (b, 1, 1)),
        np.array([[0.0] + [c[0] for c in combo[:-1]] for combo in combos]), np.array([c[-1][0] for c in combos]),
        drafts=mode)
    np.add.at(law, out[:, 0], [np.prod([c[1] for c in combo]) for combo in combos])
    return law


@settings(max_examples=15, deadline=None)
@given(rows, st.data())
def test_target_only_emits_the_target_for_distinct_siblings(weights, data):
    """Theorem (SGLang's target-only rule, thresholds 1): for siblings with distinct
    tokens the first emitted token follows p exactly, whatever the drafter."""
    p = _row(weights)
    m = data.draw(st.integers(1, len(p)))
    tokens = data.draw(st.permutations(range(len(p))))[:m]
    np.testing.assert_allclose(target_only_law(p, tokens), p, atol=1e-12)


def test_target_only_is_biased_by_duplicate_siblings():
    """Two siblings with one token: its mass is counted twice (1/4 -> 1/2 here)."""
    np.testing.assert_allclose(target_only_law(_row([1, 3]), [0, 0]), [0.5, 0.5], atol=1e-12)


def test_target_only_relaxation_shift():
    """threshold_acc = 1/2 doubles the accumulated mass: p = (1/2, 1/4, 1/4) with
    siblings 1, 2 emits 1 and 2 with 1/2 each and never 0 (TV 1/2)."""
    p = _row([2, 1, 1])
    law = target_only_law(p, [1, 2], threshold_acc=0.5)
    np.testing.assert_allclose(law, [0, 0.5, 0.5], atol=1e-12)


def test_multi_draft_is_exact_with_duplicate_siblings():
    """iid drafts repeat tokens; the recursive rule stays exact (the theorem covers it)."""
    p, q = _row([1, 3, 0]), _row([2, 1, 1])
    np.testing.assert_allclose(rejection_law(p, q, 3, "iid"), p, atol=1e-12)


def test_two_levels_give_the_target_joint_law():
    """Root -> 2 children -> 1 grandchild each, V = 2: the first two tokens (the second
    drawn from the target after the step when the step ends after one) follow
    p(t1) T[t1](t2), node rows depending only on their token."""
    p, T = _row([1, 2]), [_row([3, 1]), _row([1, 1])]
    q, Q = _row([1, 1]), [_row([1, 2]), _row([2, 1])]
    parents = [-1, 0, 0, 1, 2]
    law = np.zeros((2, 2))
    for toks in itertools.product(range(2), repeat=4):
        a, b, c, d = toks  # children a, b; a's child c, b's child d
        w = q[a] * q[b] * Q[a][c] * Q[b][d]
        tokens = [0, a, b, c, d]
        target = np.stack([p, T[a], T[b], T[c], T[d]])
        draft = np.stack([q, Q[a], Q[b], Q[c], Q[d]])
        breaks = [set() for _ in range(5)]
        for node, kids in ((0, [1, 2]), (1, [3]), (2, [4])):
            _, ratios = _residual_chain(target[node], draft[node], [tokens[k] for k in kids])
            for k, r in zip(kids, ratios):
                breaks[k] |= r
        rows_ = [target[i] for i in range(5)] + _residual_chain(p, q, [a, b])[0]
        pieces = [_pieces(breaks[i]) for i in range(1, 5)] + [_pieces(_cum_breaks(rows_))]
        combos = list(itertools.product(*pieces))
        n = len(combos)
        out, _, count = tree_rejection_sample(
            np.tile(parents, (n, 1)), np.tile(tokens, (n, 1)), np.tile(target, (n, 1, 1)),
            np.tile(draft, (n, 1, 1)), np.array([[0.0] + [c[0] for c in combo[:-1]] for combo in combos]),
            np.array([combo[-1][0] for combo in combos]))
        for (t1, t2, k), combo in zip(zip(out[:, 0], out[:, 1], count), combos):
            mass = w * np.prod([c[1] for c in combo])
            if k == 0:  # the step ended after one token: the next comes from the target
                law[t1] += mass * T[t1]
            else:
                law[t1, t2] += mass
    np.testing.assert_allclose(law, p[:, None] * np.stack(T), atol=1e-12)


def test_target_only_two_levels_give_the_target_joint_law():
    """Root -> 2 children with distinct tokens -> 1 grandchild each, V = 3, every token
    choice (the drafter does not matter): the first two tokens follow p(t1) T[t1](t2)."""
    p, T = _row([1, 2, 1]), [_row([3, 1, 0]), _row([1, 1, 2]), _row([0, 1, 1])]
    parents = [-1, 0, 0, 1, 2]
    for a, b, c, d in itertools.product(range(3), repeat=4):
        if a == b:
            continue
        tokens = [0, a, b, c, d]
        target = np.stack([p, T[a], T[b], T[c], T[d]])
        coin_breaks = [np.cumsum([p[a], p[b]]), [T[a][c]], [T[b][d]]]
        rows_ = list(target) + [np.where(np.isin(np.arange(3), [a, b]), 0.0, p)]
        rows_ += [np.where(np.arange(3) == x, 0.0, T[y]) for x, y in ((c, a), (d, b))]
        combos = list(itertools.product(*[_pieces(br) for br in coin_breaks], _pieces(_cum_breaks(rows_))))
        n = len(combos)
        out, _, count = tree_sample_target_only(
            np.tile(parents, (n, 1)), np.tile(tokens, (n, 1)), np.tile(target, (n, 1, 1)),
            np.array([[c0[0], c1[0], c2[0], 0.5, 0.5] for c0, c1, c2, _ in combos]),
            np.array([f[0] for *_, f in combos]))
        law = np.zeros((3, 3))
        for t1, t2, k, combo in zip(out[:, 0], out[:, 1], count, combos):
            mass = np.prod([piece[1] for piece in combo])
            if k == 0:
                law[t1] += mass * T[t1]
            else:
                law[t1, t2] += mass
        np.testing.assert_allclose(law, p[:, None] * np.stack(T), atol=1e-12, err_msg=str(tokens))


# ------------------------------------------------------------------ typical acceptance: the shift


def typical_law(p, q):
    """Medusa's first token when the draft x ~ q: x if typical, else the typical set's
    normalized target (exact: sums, no sampling)."""
    t = typical_threshold(p)
    keep = p > t
    restricted = np.where(p >= t, p, 0.0)
    return np.where(keep, q, 0.0) + q[~keep].sum() * restricted / restricted.sum()


TYPICAL_EXAMPLES = [  # (name, p, q, TV to p): the figures the spec quotes
    ("draft equal to the target, p = (0.7, 0.2, 0.1)", _row([7, 2, 1]), _row([7, 2, 1]), 0.0),
    ("p = (0.4, 0.3, 0.2, 0.1), a greedy (argmax) draft", _row([4, 3, 2, 1]), _row([1, 0, 0, 0]), 0.6),
    ("a flat target over 4, a point-mass draft", _row([1, 1, 1, 1]), _row([1, 0, 0, 0]), 0.75),
    ("p = (0.97, 0.01, 0.01, 0.01), draft = p", _row([97, 1, 1, 1]), _row([97, 1, 1, 1]), 0.03),
    ("p = (0.5, 16 x 1/32), draft = p", _row([16] + [1] * 16), _row([16] + [1] * 16), 0.5),
]


@pytest.mark.parametrize("name,p,q,tv", TYPICAL_EXAMPLES, ids=[e[0] for e in TYPICAL_EXAMPLES])
def test_typical_acceptance_shift(name, p, q, tv):
    """The total-variation distance between Medusa's emitted token and the target's, exactly."""
    law = typical_law(p, q)
    assert abs(law.sum() - 1) < 1e-12
    assert abs(0.5 * np.abs(law - p).sum() - tv) < 1e-12


def test_typical_law_matches_the_oracle():
    """typical_law's formula against the oracle integrated over its one uniform."""
    p, q = _row([7, 2, 1, 0]), _row([1, 1, 1, 1])
    law = np.zeros(4)
    for x in range(4):
        for mid, length in _pieces(_cum_breaks([np.where(p >= typical_threshold(p), p, 0.0), p])):
            out = typical_acceptance(np.stack([p, _row([1, 0, 0, 0])])[None], np.array([[x]]), np.array([1]),
                                     np.array([mid]))
            law[out[0, 0]] += q[x] * length
    np.testing.assert_allclose(law, typical_law(p, q), atol=1e-12)


# ------------------------------------------------------------------ tree structure


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_links_round_trip_and_mask_agrees_with_positions(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    parents = np.full((2, n), -1)
    for i in range(1, n):
        parents[:, i] = rng.integers(0, i, 2)
    _, first, sibling = tree_links(parents)
    np.testing.assert_array_equal(parents_from_links(first, sibling), parents)
    mask, pos = tree_attention(parents, [3, 0])
    np.testing.assert_array_equal(mask.sum(axis=2) - 1, depths(parents))
    np.testing.assert_array_equal(pos - np.array([[3], [0]]), depths(parents))
    assert (ancestor_mask(parents) == mask).all()


def test_greedy_on_a_chain_is_chain_verification():
    """A chain tree is greedy chain verification: accept while draft == target argmax."""
    parents = [[-1, 0, 1, 2]]
    tokens, nodes, count = verify_tree_greedy(parents, [[0, 5, 6, 9]], [[5, 6, 7, 8]])
    assert tokens.tolist() == [[5, 6, 7, -1]] and nodes.tolist() == [[0, 1, 2, -1]] and count.tolist() == [2]


def test_medusa_choices_become_parents():
    """Medusa's choices sorted by (length, path): the root, [0], [1], [0, 0], [0, 1], [1, 0]."""
    parents, order = parents_from_choices([[0, 1], [1], [0], [1, 0], [0, 0]])
    assert order == [(), (0,), (1,), (0, 0), (0, 1), (1, 0)]
    assert parents.tolist() == [-1, 0, 0, 1, 1, 2]
    with pytest.raises(ValueError, match="prefix"):
        parents_from_choices([[0, 0]])


def test_eagle_topk_encoding_becomes_parents():
    """Two EAGLE trees (top-2, depth 3) as build_tree_kernel_efficient reads them; SGLang
    0.5.23's Triton build gives these trees' mask, positions and links (checked once
    under TRITON_INTERPRET=1, see the spec)."""
    parents = parents_from_topk([[-1, 0, 1, 3, 4], [-1, 1, 0, 2, 5]], [[0, 1, 3, 4, 6, 9], [0, 1, 2, 3, 4, 6]],
                                topk=2)
    assert parents.tolist() == [[-1, 0, 0, 1, 2, 3, 4], [-1, 0, 0, 2, 2, 1, 3]]
    with pytest.raises(ValueError, match="not selected"):
        parents_from_topk([[-1, 0, 1]], [[0, 4]], topk=2)  # candidate 4 is a child of candidate 1, not chosen


def test_parents_from_links_refuses_a_cycle():
    with pytest.raises(ValueError, match="next_token"):
        parents_from_links([[1, 0]], [[-1, -1]])


# ------------------------------------------------------------------ the default kernel and the corpus


def test_the_default_kernel_passes():
    impl = Implementation(kernel.NAME, kernel.OPS, variants=kernel.VARIANTS)
    report = run(impl, ops=["specdec.tree_*", "specdec.verify_tree_greedy", "specdec.typical_acceptance"],
                 examples=2)
    assert report.ok, [(r.name, r.failures[:1]) for r in report.ops if r.failures]


def test_every_tree_op_has_a_bug():
    ops = {op for op, _, _ in specdec_trees.TREE_BUGS.values()}
    assert ops == set(kernel.OPS)


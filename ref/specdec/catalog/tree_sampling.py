"""Sampling over token trees, every random number an input.

  specdec.tree_rejection_sample    exact: multi-draft recursive rejection sampling (drafts: iid | without_replacement)
  specdec.tree_sample_target_only  exact: SGLang's one coin per node, sibling target masses accumulated
  specdec.typical_acceptance       exact: Medusa's typical acceptance on a chain (a non-exact sampler, replayed)
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.specdec.catalog.common import AREA, ROW_SUM_FLAG
from ref.specdec.catalog.trees import TREE_FLAGS, random_parents
from ref.specdec.multi_draft import Drafts, tree_rejection_sample, tree_sample_target_only
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact, compare_parts
from ref.testing.flags import EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "probability_row", "random_rows", "seeded"]

FLAGS = {
    **TREE_FLAGS,
    "ResidualUpdate": Flag("the residual not updated between siblings (each sibling tested against p), or updated "
                           "as max(q - p, 0) or left unnormalized",
                           "the emitted token no longer follows the target: tokens the draft favours come out too "
                           "often"),
    "DraftUpdate": Flag("drafts drawn without replacement tested against the unchanged q (or iid drafts against q "
                        "without the rejected token)", "a sibling accepted too rarely or too often: not exact"),
    "TreeInverseCDF": Flag("the final draw by cumulative mass >= u instead of > u, or over the unnormalized residual",
                           "a tie picks the token before; a residual of mass below 1 is sampled past its end"),
    "ZeroMass": Flag("a token of zero residual (or draft) mass accepted when the coin is 0, or a 0/0 ratio taken "
                     "as accepting", "a token the target never emits comes out"),
    "CoinAccumulate": Flag("target-only sampling comparing the coin with each sibling's own mass instead of the "
                           "accumulated mass", "later siblings accepted too rarely: not the target's law"),
    "CoinPerNode": Flag("target-only sampling using each child's own coin for its test, not its parent's",
                        "the coins of one level are no longer one draw: the target's law is lost"),
    "RemovedTokens": Flag("target-only's final draw not removing the rejected siblings' tokens (or removing them "
                          "at the bonus)", "a rejected token comes back: its mass is emitted twice"),
    "DuplicateMass": Flag("target-only sampling counting a sibling's mass once when its token repeats an earlier "
                          "sibling's (SGLang, whose rule the op replays, adds it again)",
                          "a repeated token is accepted less often than SGLang accepts it: replay diverges"),
    "CoinEquality": Flag("the tree's coin strict, r(x) / q(x) > u, where the contract keeps the draft at equality",
                         "replay diverges when u equals the ratio"),
    "RowSumTolerance": ROW_SUM_FLAG,
}

DRAFTS = Variant("drafts", Drafts, Drafts.IID,
                 "how a node's children were drawn from its draft distribution: independently (SpecInfer) or "
                 "without replacement (recursive speculative decoding, top-k drafters)")


def probability_row(*weights) -> np.ndarray:
    """A probability row from small integer weights (exact rationals, byte-stable)."""
    w = np.asarray(weights, np.float64)
    return w / w.sum()


def _rows(*rows) -> np.ndarray:
    return np.stack([probability_row(*r) for r in rows])


def _case(parents, tokens, target, uniforms, final, draft=None, **params) -> Case:
    inputs = {"parents": np.asarray(parents, np.int64), "draft_tokens": np.asarray(tokens, np.int64),
              "target_probs": np.asarray(target), "uniforms": np.asarray(uniforms, np.float64),
              "final_uniforms": np.asarray(final, np.float64)}
    if draft is not None:
        inputs["draft_probs"] = np.asarray(draft)
    return Case(inputs, params)


def random_tree_case(rng: np.random.Generator, b: int, n: int, vocab: int, *, with_draft: bool,
                     distinct: bool, dyadic: bool = True) -> dict[str, np.ndarray]:
    """Inputs of b random trees of n nodes: target and draft rows from integer weights in
    [0, 3] (zeros included), each node's children drawn from its parent's draft row
    (distinct tokens if `distinct`, where the row has enough), uniforms k / 2^16."""
    parents = random_parents(rng, b, n)
    target = random_rows(rng, (b, n, vocab))
    draft = random_rows(rng, (b, n, vocab))
    tokens = np.zeros((b, n), np.int64)
    for r in range(b):
        for node in range(n):
            kids = np.flatnonzero(parents[r] == node)
            if not len(kids):
                continue
            row = draft[r, node]
            if distinct:
                order = rng.choice(vocab, vocab, replace=False, p=row) if (row > 0).sum() == vocab else None
                picks = order if order is not None else _distinct(rng, row, vocab)
                tokens[r, kids] = picks[np.arange(len(kids)) % vocab]
            else:
                tokens[r, kids] = rng.choice(vocab, len(kids), p=row)
    if dyadic:
        uniforms, final = rng.integers(0, 2 ** 16, (b, n)) / 2.0 ** 16, rng.integers(0, 2 ** 16, b) / 2.0 ** 16
    else:
        uniforms, final = rng.random((b, n)), rng.random(b)
    out = {"parents": parents, "draft_tokens": tokens, "target_probs": target, "uniforms": uniforms,
           "final_uniforms": final}
    if with_draft:
        out["draft_probs"] = draft
    return out


def random_rows(rng, shape) -> np.ndarray:
    w = rng.integers(0, 4, shape).astype(np.float64)
    w[..., 0] += w.sum(axis=-1) == 0  # no all-zero row
    return w / w.sum(axis=-1, keepdims=True)


def _distinct(rng, row, vocab) -> np.ndarray:
    """Tokens of positive mass in draw order (without replacement), then the others."""
    live = np.flatnonzero(row > 0)
    first = rng.choice(live, len(live), replace=False, p=row[live] / row[live].sum())
    return np.concatenate([first, np.setdiff1d(np.arange(vocab), first)])


# ------------------------------------------------------------------ tree_rejection_sample

def _rejection_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("specdec.tree_rejection_sample"))
    star = [[-1, 0, 0]]
    uniform4 = probability_row(1, 1, 1, 1)
    out: list[VectorSpec] = []

    def v(comment, flags, case, result="valid"):
        out.append(VectorSpec(comment, tuple(flags), case, result))

    # p = [1/4, 1/4, 1/2, 0], q = [1/2, 1/2, 0, 0]: child 1 (token 0, ratio 1/2) rejected at u = 3/4; the residual
    # is then [0, 0, 1, 0], so child 2 (token 1) has no mass left and token 2 comes out
    p, q = probability_row(1, 1, 2, 0), probability_row(1, 1, 0, 0)
    v("the residual after a rejection: the second sibling's token has no mass left", ("ResidualUpdate",),
      _case(star, [[0, 0, 1]], [[p, uniform4, uniform4]], [[0, 0.75, 0.25]], [0.5], [[q, q, q]]))
    # chain accepted to its leaf: p == q accepts any u < 1; the leaf's row puts all mass on token 3
    v("a chain accepted to its leaf: one more token from the leaf's target row", ("TreeBonus", "TreeShape"),
      _case([[-1, 0, 1]], [[2, 0, 1]], [[probability_row(1, 1, 0, 0), probability_row(0, 1, 1, 0), probability_row(0, 0, 0, 1)]],
            [[0, 0.875, 0.875]], [0.5], [[probability_row(1, 1, 0, 0), probability_row(0, 1, 1, 0), uniform4]]))
    # both siblings rejected; residual [1/2, 1/2, 0, 0] and u = 1/2: the first token whose cumulative mass exceeds
    # 1/2 is token 1 (>= would give token 0)
    v("the final draw at a cumulative tie (u = 1/2): the token after it", ("TreeInverseCDF",),
      _case(star, [[3, 2, 2]], [[probability_row(1, 1, 0, 0), uniform4, uniform4]], [[0, 0.5, 0.5]], [0.5],
            [[probability_row(0, 0, 1, 0), uniform4, uniform4]]))
    v("a token of zero target mass with the coin 0 is rejected; then one of zero draft mass at coin 0",
      ("ZeroMass",), _case(star, [[0, 3, 0]], [[probability_row(1, 1, 0, 0), uniform4, uniform4]], [[0, 0, 0]], [0.25],
                           [[probability_row(0, 0, 1, 1), uniform4, uniform4]]))
    v("p == q and a drafted token neither can give: the residual stays p", ("ZeroMass", "ResidualUpdate"),
      _case([[-1, 0]], [[0, 3]], [[probability_row(1, 3, 0, 0), uniform4]], [[0, 0.5]], [0.5], [[probability_row(1, 3, 0, 0), uniform4]]))
    # p = [2/3, 1/6, 1/6], q = [1/5, 4/5, 0]: both siblings rejected; the second residual update subtracts q
    # (iid) or q without token 1, [1, 0, 0] (without replacement): token 0 or token 2 comes out
    p3, q3, u3 = probability_row(4, 1, 1), probability_row(1, 4, 0), probability_row(1, 1, 1)
    for drafts in DRAFTS.values:
        v(f"the draft row after a rejection: q kept (iid) or q without the rejected token ({drafts})",
          ("DraftUpdate", "ResidualUpdate"), _case(star, [[0, 1, 2]], [[p3, u3, u3]], [[0, 0.375, 0.625]], [0.5],
                                                    [[q3, u3, u3]], drafts=drafts))
    v("a coin below the ratio accepts a token the draft favours (r(x) = 1/4 < q(x) = 1/2, u = 1/4)",
      ("ResidualUpdate",), _case([[-1, 0]], [[0, 0]], [[probability_row(1, 3, 0, 0), uniform4]], [[0, 0.25]], [0.75],
                                 [[probability_row(1, 1, 0, 0), uniform4]]))
    v("a root alone: one token from the root's row", (EMPTY_INPUT, "TreeBonus"),
      _case([[-1]], [[1]], [[probability_row(0, 1, 1, 0)]], [[0.5]], [0.5], [[uniform4]]))
    v("a vocabulary of one: everything accepted, the bonus token 0", (EMPTY_INPUT, "TreeBonus"),
      _case([[-1, 0, 1]], [[0, 0, 0]], [[[1.0]] * 3], [[0, 0.99, 0.99]], [0.99], [[[1.0]] * 3]))
    v("no requests", (EMPTY_INPUT,), _case(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros((0, 2, 4)),
                                           np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2, 4))))
    for drafts, distinct in (("iid", False), ("without_replacement", True)):
        case = random_tree_case(rng, 48, 6, 4, with_draft=True, distinct=distinct)
        flags = (RANDOM, "ResidualUpdate", "DraftUpdate", "SiblingOrder", "TreeBonus", "TreeInverseCDF")
        v(f"random trees of 6 nodes over 4 tokens, drafts drawn {drafts}", flags, Case(case, {"drafts": drafts}))
        f32 = {**case, "target_probs": case["target_probs"].astype(np.float32),
               "draft_probs": case["draft_probs"].astype(np.float32)}
        v(f"float32 probabilities, drafts drawn {drafts}", flags, Case(f32, {"drafts": drafts}))
        i32 = {**case, "parents": case["parents"].astype(np.int32),
               "draft_tokens": case["draft_tokens"].astype(np.int32)}
        v(f"int32 parents and tokens, drafts drawn {drafts}", flags, Case(i32, {"drafts": drafts}))
    base = _case(star, [[0, 0, 1]], [[p, uniform4, uniform4]], [[0, 0.75, 0.25]], [0.5], [[q, q, q]]).inputs
    for comment, change, extra in _invalid_changes(base):
        v(comment, (INVALID_INPUT,) + extra, Case({**base, **change}, {}), "invalid")
    # appended below: earlier vector ids keep their numbers
    # p = (1/2, 1/4, 1/4), q = (1/8, 1/8, 3/4), three siblings of token 2: the residual goes (3/4, 1/4, 0), then
    # (5/6, 1/6, 0), then (17/18, 1/18, 0); u = 13/16 gives token 0 (from p again at the third: (3/4, 1/4), token 1)
    rows = np.stack([probability_row(2, 1, 1)] + [probability_row(1, 1, 2)] * 3)
    v("three siblings rejected in turn: the residual chained through all of them, never recomputed from p",
      ("ResidualUpdate",), _case([[-1, 0, 0, 0]], [[0, 2, 2, 2]], [rows],
                                 [[0, 0.5, 0.5, 0.5]], [0.8125], [np.stack([probability_row(1, 1, 6)] + [probability_row(1, 1, 2)] * 3)]))
    v("r(x) / q(x) = 1/2 equal to the coin 1/2: the draft is kept (>=)", ("CoinEquality",),
      _case([[-1, 0]], [[0, 0]], [[probability_row(1, 1), probability_row(1, 1)]], [[0, 0.5]], [0.0], [[probability_row(1, 0), probability_row(1, 1)]]))
    nudge = np.zeros((1, 3, 4))
    nudge[0, 0, 0] = 2.0 ** -14
    v("rows off 1 by 2^-14 (6.1e-5, inside the tolerance 1e-4): valid, sampled as given", ("RowSumTolerance",),
      Case({**base, "target_probs": base["target_probs"] + nudge, "draft_probs": base["draft_probs"] - nudge}, {}))
    v("a target row off 1 by 2^-11 (4.9e-4, past the tolerance 1e-4) is rejected", (INVALID_INPUT, "RowSumTolerance"),
      Case({**base, "target_probs": base["target_probs"] + 8 * nudge}, {}), "invalid")
    return out


def _invalid_changes(base):
    t, u = base["target_probs"], base["uniforms"]
    yield "NaN target probabilities are rejected", {"target_probs": np.where(t == t.max(), np.nan, t)}, (NAN,)
    yield "+inf draft probabilities are rejected", {"draft_probs": np.full_like(base["draft_probs"], np.inf)}, ()
    yield "negative probabilities are rejected", {"target_probs": t * np.array([1, -1, 1, 1])}, ()
    yield "rows summing to 1.25 are rejected", {"target_probs": t * 1.25}, ()
    yield "a token id past the vocabulary is rejected", {"draft_tokens": np.int64([[0, 0, 4]])}, ()
    yield "a negative token id is rejected", {"draft_tokens": np.int64([[0, -1, 1]])}, ()
    yield "a uniform of 1 is rejected", {"uniforms": np.where(u == u.max(), 1.0, u)}, ()
    yield "a negative uniform is rejected", {"final_uniforms": np.float64([-0.25])}, ()
    yield "float32 uniforms are rejected", {"uniforms": u.astype(np.float32)}, ()
    yield "int probabilities are rejected", {"target_probs": np.ones_like(t, np.int64)}, ()
    yield "target_probs of another node count are rejected", {"target_probs": t[:, :2]}, ()
    yield "final_uniforms not one per request are rejected", {"final_uniforms": np.float64([0.5, 0.5])}, ()
    yield "a parent not before its child is rejected", {"parents": np.int64([[-1, 2, 0]])}, ()
    yield "int16 token ids are rejected (int32 or int64 ids)", {"draft_tokens": np.int16([[0, 0, 1]])}, ()


def _rejection_example(seed: int, drafts: str) -> Case:
    rng = np.random.default_rng(seed)
    b, n, vocab = int(rng.integers(0, 4)), int(rng.integers(1, 7)), int(rng.integers(1, 5))
    case = random_tree_case(rng, b, n, vocab, with_draft=True, distinct=drafts == "without_replacement",
                            dyadic=False)
    return Case(case, {"drafts": drafts})


def _rejection_examples(supported):
    return st.tuples(st.integers(0, 2**32 - 1), variant_params(supported)).map(
        lambda t: _rejection_example(t[0], t[1]["drafts"]))


# ------------------------------------------------------------------ tree_sample_target_only

def _target_only_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("specdec.tree_sample_target_only"))
    star = [[-1, 0, 0]]
    p = probability_row(1, 2, 1, 0)  # tokens 0, 1, 2 with 1/4, 1/2, 1/4
    u4 = probability_row(1, 1, 1, 1)
    out: list[VectorSpec] = []

    def v(comment, flags, case, result="valid", **thresholds):
        if thresholds:
            case = Case({**case.inputs, **{k: np.float64(x) for k, x in thresholds.items()}}, case.params)
        out.append(VectorSpec(comment, tuple(flags), case, result))

    v("siblings accumulate: coin 0.625 rejects token 0 (1/4) and accepts token 1 (1/4 + 1/2)", ("CoinAccumulate",),
      _case(star, [[3, 0, 1]], [[p, u4, u4]], [[0.625, 0.9375, 0.9375]], [0.125]))
    v("the root's coin decides the first level, each accepted node's coin the next", ("CoinPerNode", "TreeBonus"),
      _case([[-1, 0, 1]], [[3, 1, 2]], [[p, probability_row(1, 0, 1, 0), u4]], [[0.5, 0.875, 0.0625]], [0.875]))
    v("all siblings rejected: the final draw leaves their tokens out", ("RemovedTokens", "TreeInverseCDF"),
      _case(star, [[3, 0, 1]], [[p, u4, u4]], [[0.875, 0.5, 0.5]], [0.125]))
    v("all siblings rejected, the final draw at a cumulative tie: [1/4, 0, 1/4] and u = 1/2 give token 2",
      ("TreeInverseCDF", "RemovedTokens"), _case(star, [[3, 1, 3]], [[p, u4, u4]], [[0.875, 0.5, 0.5]], [0.5]))
    v("a leaf reached: the bonus from its whole row (nothing removed)", ("RemovedTokens", "TreeBonus"),
      _case([[-1, 0]], [[3, 1]], [[p, probability_row(1, 1, 0, 0)]], [[0.5, 0.5]], [0.25]))
    v("siblings tried in index order: coin 3/16 accepts the first (1/2), not the second (1/4)", ("SiblingOrder",),
      _case(star, [[3, 1, 0]], [[p, u4, u4]], [[0.1875, 0.5, 0.5]], [0.5]))
    v("SGLang's coin 0 accepts a first sibling of zero target mass (coin <= 0)", ("ZeroMass",),
      _case(star, [[0, 3, 1]], [[p, u4, u4]], [[0.0, 0.5, 0.5]], [0.5]))
    v("threshold_single 1/2: a sibling of mass 1/2 accepted whatever the coin", ("CoinAccumulate",),
      _case(star, [[3, 0, 1]], [[p, u4, u4]], [[0.96875, 0.5, 0.5]], [0.5]), threshold_single=0.5)
    v("threshold_acc 1/2: the accumulated mass doubled", ("CoinAccumulate",),
      _case(star, [[3, 0, 2]], [[p, u4, u4]], [[0.4375, 0.5, 0.5]], [0.5]), threshold_acc=0.5)
    v("a root alone: one token from its row", (EMPTY_INPUT, "TreeBonus"),
      _case([[-1]], [[2]], [[p]], [[0.5]], [0.5]))
    v("no requests", (EMPTY_INPUT,), _case(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3, 2)),
                                           np.zeros((0, 3)), np.zeros(0)))
    case = random_tree_case(rng, 48, 6, 4, with_draft=False, distinct=True)
    flags = (RANDOM, "CoinAccumulate", "CoinPerNode", "RemovedTokens", "SiblingOrder", "TreeBonus")
    v("random trees of 6 nodes over 4 tokens, distinct siblings", flags, Case(case, {}))
    v("random trees, float32 probabilities", flags,
      Case({**case, "target_probs": case["target_probs"].astype(np.float32)}, {}))
    v("random trees, int32 parents and tokens", flags,
      Case({**case, "parents": case["parents"].astype(np.int32), "draft_tokens": case["draft_tokens"].astype(np.int32)},
           {}))
    base = _case(star, [[3, 0, 1]], [[p, u4, u4]], [[0.625, 0.9375, 0.9375]], [0.125]).inputs
    base = {**base, "draft_probs": np.zeros_like(base["target_probs"])}
    for comment, change, extra in _invalid_changes(base):
        if "draft_probs" not in change:
            inputs = {k: x for k, x in {**base, **change}.items() if k != "draft_probs"}
            v(comment, (INVALID_INPUT,) + extra, Case(inputs, {}), "invalid")
    plain = {k: x for k, x in base.items() if k != "draft_probs"}
    v("threshold_acc of 0 is rejected", (INVALID_INPUT,), Case(plain, {}), "invalid", threshold_acc=0.0)
    v("threshold_single above 1 is rejected", (INVALID_INPUT,), Case(plain, {}), "invalid", threshold_single=1.5)
    # appended below: earlier vector ids keep their numbers
    v("siblings repeating a token: each adds its mass again (SGLang); coin 3/8 rejects the first (1/4), accepts the "
      "second (1/2)", ("DuplicateMass", "CoinAccumulate"),
      _case(star, [[0, 0, 0]], [[probability_row(1, 3)] * 3], [[0.375, 0.0, 0.0]], [0.0]))
    nudge = np.zeros((1, 3, 4))
    nudge[0, 0, 1] = 2.0 ** -14
    v("a row off 1 by 2^-14 (6.1e-5, inside the tolerance 1e-4): valid, sampled as given", ("RowSumTolerance",),
      Case({**plain, "target_probs": plain["target_probs"] + nudge}, {}))
    v("a row off 1 by 2^-11 (4.9e-4, past the tolerance 1e-4) is rejected", (INVALID_INPUT, "RowSumTolerance"),
      Case({**plain, "target_probs": plain["target_probs"] + 8 * nudge}, {}), "invalid")
    return out


def _target_only_example(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    b, n, vocab = int(rng.integers(0, 4)), int(rng.integers(1, 7)), int(rng.integers(1, 5))
    return Case(random_tree_case(rng, b, n, vocab, with_draft=False, distinct=True, dyadic=False), {})


def seeded(make):
    return lambda supported: st.integers(0, 2**32 - 1).map(make)


_PARTS = partial(compare_parts, names=("tokens", "nodes", "num_accepted"), comparators=(compare_exact,) * 3)

OPERATIONS = [
    AREA.exact("tree_rejection_sample", tree_rejection_sample, anchor="tree-rejection-sample",
               summary="parents, draft_tokens [B, N], target_probs, draft_probs [B, N, V], uniforms [B, N], "
                       "final_uniforms [B] -> (tokens, nodes, num_accepted)",
               variants=(DRAFTS,), vectors=_rejection_vectors, examples=_rejection_examples,
               outputs=("tokens", "nodes", "num_accepted"), compare=_PARTS),
    AREA.exact("tree_sample_target_only", tree_sample_target_only, anchor="tree-sample-target-only",
               summary="parents, draft_tokens [B, N], target_probs [B, N, V], uniforms [B, N], final_uniforms [B]"
                       " (threshold_single, threshold_acc) -> (tokens, nodes, num_accepted)",
               vectors=_target_only_vectors, examples=seeded(_target_only_example),
               outputs=("tokens", "nodes", "num_accepted"), compare=_PARTS),
]

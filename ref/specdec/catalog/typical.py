"""Medusa's typical acceptance (specdec.typical_acceptance, spec/specdec.md#typical-acceptance):
a named non-exact acceptance rule on a chain, its vectors and random examples."""

from __future__ import annotations

import numpy as np

from ref.specdec.catalog.common import AREA, ROW_SUM_FLAG
from ref.specdec.catalog.tree_sampling import probability_row, random_rows, seeded
from ref.specdec.multi_draft import typical_acceptance
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.compare import compare_exact
from ref.testing.flags import EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "TypicalThreshold": Flag("Medusa's threshold as max(eps, ...), the entropy in bits, or p >= t accepted",
                             "another set of drafts accepted than Medusa's"),
    "TypicalFallback": Flag("the token after a typical run drawn from the whole target, not its typical set",
                            "a low-probability token Medusa never emits comes out"),
    "DraftPadding": Flag("a -1 draft inside num_draft accepted, rows past num_draft read, or a draft other than -1 "
                         "past num_draft not refused",
                         "padding becomes a token, or NaN rows of unused positions poison the step"),
    "RowSumTolerance": ROW_SUM_FLAG,
}


def _chain(target, draft, num, final) -> Case:
    return Case({"target_probs": np.asarray(target), "draft_tokens": np.asarray(draft, np.int64),
                 "num_draft": np.asarray(num, np.int64), "final_uniforms": np.asarray(final, np.float64)}, {})


def _typical_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("specdec.typical_acceptance"))
    peaked = probability_row(97, 1, 1, 1)
    mixed = probability_row(7, 2, 1, 0)  # H = 0.80 nats: t = min(0.09, 0.3 * 0.449) = 0.09
    flat17 = probability_row(16, *[1] * 16)  # p0 = 1/2, 16 tokens of 1/32: H = 3 bits = 2.079 nats; t = 0.0375
    edge = probability_row(91, 9, 0, 0)  # p(1) = 0.09 = eps exactly: refused (p > t is strict)
    nan = np.full(4, np.nan)
    out: list[VectorSpec] = []

    def v(comment, flags, case, result="valid"):
        out.append(VectorSpec(comment, tuple(flags), case, result))

    v("token 2 of mass 0.1 accepted: t = min(eps, alpha e^-H) = 0.09, not the max 0.135", ("TypicalThreshold",),
      _chain([[mixed, peaked]], [[2]], [1], [0.5]))
    v("a token of 1/32 refused under a 17-token distribution (t = 0.0375; entropy in bits gives 0.0149)",
      ("TypicalThreshold",), _chain([np.stack([flat17, flat17])], [[5]], [1], [0.75]))
    v("p(x) equal to eps = 0.09 is refused (p > t strictly)", ("TypicalThreshold",),
      _chain([[edge, peaked]], [[1]], [1], [0.5]))
    v("after a refusal the token comes from the typical set: u = 0.995 still gives token 0", ("TypicalFallback",),
      _chain([[peaked, peaked]], [[1]], [1], [0.995]))
    v("a run of 1 then a refusal (token 3 has no mass); the row past num_draft unused (NaN)",
      ("DraftPadding", "TypicalFallback"),
      _chain([[mixed, mixed, peaked, nan]], [[0, 3, -1]], [2], [0.5]))
    v("every draft accepted: the bonus from the row after them, typical set only", ("TypicalFallback",),
      _chain([[mixed, mixed, peaked]], [[0, 0]], [2], [0.999]))
    v("a -1 draft inside num_draft is refused; -1 past it; NaN rows past num_draft", ("DraftPadding",),
      _chain([[probability_row(2, 1, 0, 7), mixed, nan], [mixed, nan, nan]], [[-1, -1], [-1, -1]], [1, 0], [0.5, 0.25]))
    v("k = 0: one token from the typical set", (EMPTY_INPUT,), _chain([[flat17]], np.zeros((1, 0)), [0], [0.999]))
    v("a vocabulary of one", (EMPTY_INPUT,), _chain([[[1.0], [1.0]]], [[0]], [1], [0.5]))
    v("no requests", (EMPTY_INPUT,), _chain(np.zeros((0, 2, 3)), np.zeros((0, 1)), np.zeros(0), np.zeros(0)))
    b, k, vocab = 32, 3, 6
    target = random_rows(rng, (b, k + 1, vocab))
    num = rng.integers(0, k + 1, b)
    draft = np.where(np.arange(k)[None, :] < num[:, None], rng.integers(0, vocab, (b, k)), -1)
    final = rng.integers(0, 2 ** 16, b) / 2.0 ** 16
    v("random chains of up to 3 drafts over 6 tokens", (RANDOM, "TypicalThreshold", "TypicalFallback"),
      _chain(target, draft, num, final))
    v("random chains, float32 probabilities", (RANDOM, "TypicalThreshold", "TypicalFallback"),
      _chain(target.astype(np.float32), draft, num, final))
    i32 = _chain(target, draft, num, final)
    v("random chains, int32 tokens and counts", (RANDOM, "TypicalThreshold", "DraftPadding"),
      Case({**i32.inputs, "draft_tokens": draft.astype(np.int32), "num_draft": num.astype(np.int32)}, {}))
    base = _chain([[mixed, peaked]], [[2]], [1], [0.5]).inputs

    def bad(comment, change, extra=()):
        v(comment, (INVALID_INPUT,) + extra, Case({**base, **change}, {}), "invalid")

    bad("NaN in a row that is read is rejected", {"target_probs": np.array([[nan, peaked]])}, (NAN,))
    bad("negative probabilities are rejected", {"target_probs": np.array([[probability_row(1, 1, 1, 1) * [1, -1, 1, 1], peaked]])})
    bad("a row summing to 1.25 is rejected", {"target_probs": np.array([[mixed * 1.25, peaked]])})
    bad("a draft past the vocabulary is rejected", {"draft_tokens": np.int64([[4]])})
    bad("num_draft above k is rejected", {"num_draft": np.int64([2])})
    bad("a uniform of 1 is rejected", {"final_uniforms": np.float64([1.0])})
    bad("float32 uniforms are rejected", {"final_uniforms": np.float32([0.5])})
    bad("draft_tokens of another shape are rejected", {"draft_tokens": np.int64([[2, 0]])})
    bad("int probabilities are rejected", {"target_probs": np.ones((1, 2, 4), np.int64)})
    bad("uint8 draft tokens are rejected (int32 or int64 ids)", {"draft_tokens": np.uint8([[2]])})
    # appended below: earlier vector ids keep their numbers
    # V = 16: rows 0 and 2 uniform (t = 0.3 / 16 = 0.01875), row 1 (15/16, 1/16, 0, ...) (t = eps = 0.09): draft 1 at
    # position 1 (p = 1/16) is refused by its own row's threshold, and the final draw from row 1 keeps token 0 only
    flat16 = np.full(16, 1 / 16)
    peak16 = np.zeros(16)
    peak16[:2] = [15 / 16, 1 / 16]
    v("each position judged by its own row's threshold; the final draw restricted by its own row's",
      ("TypicalThreshold", "TypicalFallback"), _chain([[flat16, peak16, flat16]], [[0, 1]], [2], [0.96875]))
    v("the final draw keeps p == t: posterior_threshold 1/8 and p = (7/8, 1/8) give t = 1/8 exactly; u = 15/16 "
      "draws token 1", ("TypicalFallback",),
      Case({**_chain([[probability_row(7, 1)]], np.zeros((1, 0)), [0], [0.9375]).inputs,
            "posterior_threshold": np.float64(0.125)}, {}))
    bad("a draft other than -1 past num_draft is rejected (as rejection_sample)", {"num_draft": np.int64([0])},
        ("DraftPadding",))
    dyadic = np.array([[[0.75 + 2.0 ** -14, 0.125, 0.125, 0], [0.625, 0.125, 0.125, 0.125]]])
    v("a row off 1 by 2^-14 (6.1e-5, inside the tolerance 1e-4): valid, judged as given", ("RowSumTolerance",),
      _chain(dyadic, [[0]], [1], [0.5]))
    bad("a row off 1 by 2^-11 (4.9e-4, past the tolerance 1e-4) is rejected",
        {"target_probs": dyadic + np.array([0, 0, 0, 7 * 2.0 ** -14])}, ("RowSumTolerance",))
    return out


def _typical_example(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    b, k, vocab = int(rng.integers(0, 4)), int(rng.integers(0, 4)), int(rng.integers(1, 6))
    target = rng.dirichlet(np.full(vocab, 0.5), (b, k + 1)) if vocab > 1 else np.ones((b, k + 1, 1))
    num = rng.integers(0, k + 1, b)
    argmax = target[:, :k].argmax(axis=-1) if k else np.zeros((b, 0), np.int64)
    guess = np.where(rng.random((b, k)) < 0.6, argmax, rng.integers(0, vocab, (b, k)))
    draft = np.where(np.arange(k)[None, :] < num[:, None], guess, -1)
    return _chain(target, draft, num, rng.random(b))


OPERATIONS = [
    AREA.exact("typical_acceptance", typical_acceptance, anchor="typical-acceptance",
               summary="target_probs [B, k+1, V], draft_tokens [B, k], num_draft [B], final_uniforms [B] "
                       "-> tokens [B, k+1] (Medusa: not exact)",
               vectors=_typical_vectors, examples=seeded(_typical_example), compare=compare_exact),
]

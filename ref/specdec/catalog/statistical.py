"""One speculative-decoding step by a kernel that draws its own random numbers:
`specdec.rejection_sample_rng`, a statistical op. The candidate takes target_probs
[B, k+1, V], draft_tokens [B, k], num_draft [B], greedy [B], draft_probs [B, k, V] (with
draft="probs") and a `seed`, and returns one output [B, k+1] int64 (-1 after the emitted
tokens); the oracle, `rejection_sample_marginals`, gives each element's law over the V
tokens and -1. spec/specdec.md, "The statistical twin".

Every vector repeats a few request patterns many times in the batch, so that the
judge pools each pattern's element into a class of (copies x calls) samples. Inputs
are multiples of 1/16 (exact in float32 and float64 on every NumPy).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.specdec.catalog.common import ROW_SUM_FLAG
from ref.specdec.marginals import Draft, rejection_sample_marginals
from ref.testing.catalog_types import Area, Flag, Variant, seed_for
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.statistical import StatisticalOp
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "pattern"]

AREA = Area("specdec", spec="spec/specdec.md")
NAME = "rejection_sample_rng"
COPIES = 128  # each request pattern repeated: a class of COPIES x calls samples

FLAGS = {
    **COMMON,
    "RngCoin": Flag("the acceptance coin wrong: accepting whenever p(x) >= q(x) with no coin, comparing u with p "
                    "alone, or with q / p", "drafts are kept too often or too rarely"),
    "RngResidual": Flag("the correction drawn from the wrong distribution: max(p - q, 0) not renormalized, "
                        "max(q - p, 0), or the target p itself", "the token after a rejection is biased toward "
                                                                 "tokens the draft already offered"),
    "RngBonus": Flag("no bonus token after all drafts are accepted, or the bonus drawn from the wrong row",
                     "the step emits one token too few, or the bonus has the last draft position's law"),
    "RngLength": Flag("acceptance length off by one: the correction skipped, a draft emitted after the "
                      "rejection, or num_draft ignored", "the emitted prefix has the wrong length"),
    "RngPosition": Flag("the draft probability read at the wrong position (j + 1 or j - 1)",
                        "acceptance rates of neighbouring positions swapped"),
    "RngGreedy": Flag("greedy requests sampled (or random ones decided by argmax)",
                      "a temperature-0 request gets random tokens"),
    "RngPadding": Flag("a padded draft (-1) accepted or skipped instead of rejected",
                       "the padding token is emitted, or the step goes on past it"),
    "RngShared": Flag("one acceptance uniform reused for every position of a request (or for every request)",
                      "acceptances are correlated: later positions are reached too often"),
    "RngZeroDraft": Flag("a draft token of zero draft probability divided by zero, or accepted",
                         "NaN ratios accept or crash; vLLM rejects such a draft"),
    "RowSumTolerance": ROW_SUM_FLAG,
    "RngZeroResidual": Flag("a residual of zero mass (p = q, the draft outside q's support) drawn from as if it had "
                            "mass: the first index (vLLM's race) or the last (an inverse CDF)",
                            "a token the target gives probability 0 is emitted in a case of probability 0"),
}

# A request pattern (V = 4, k = 3) whose rows all differ, in sixteenths: position j drafts x_j with
# a_j = min(1, p/q) = 1/2, 2/3, 1/2, and each residual has two tokens (an inverse CDF over an
# unnormalized residual runs off its end); the bonus row differs from every other row.
_P = [[6, 4, 4, 2], [3, 1, 8, 4], [4, 4, 4, 4], [1, 2, 4, 9]]
_Q = [[2, 8, 2, 4], [2, 4, 4, 6], [8, 2, 2, 4]]
_X = [1, 3, 0]


def pattern(p, x, n=None, q=None, greedy=False, copies: int = COPIES, dtype=np.float64, int_dtype=np.int64,
            nan_past: bool = True) -> dict[str, np.ndarray]:
    """Inputs of one request repeated `copies` times: p [k+1][V] and q [k][V] in sixteenths,
    x [k], n drafts (default k). Rows past n are NaN (nan_past) and drafts past n are -1."""
    p = np.asarray(p, dtype=np.float64) / 16
    k = p.shape[0] - 1
    n = k if n is None else n
    x = np.array(list(x[:n]) + [-1] * (k - n), dtype=np.int64)
    if nan_past:
        p[n + 1:] = np.nan
    out = {"target_probs": p, "draft_tokens": x, "num_draft": np.int64(n), "greedy": np.bool_(greedy)}
    if q is not None:
        qq = np.asarray(q, dtype=np.float64).reshape(k, p.shape[1]) / 16
        if nan_past:
            qq[n:] = np.nan
        out["draft_probs"] = qq
    return {name: np.repeat(np.asarray(a)[None], copies, axis=0).astype(
        dtype if name.endswith("probs") else (int_dtype if name != "greedy" else bool)) for name, a in out.items()}


def _stack(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _spec(comment, flags, inputs, draft="probs", result="valid") -> VectorSpec:
    if draft == "point_mass":
        inputs = {k: v for k, v in inputs.items() if k != "draft_probs"}
    return VectorSpec(comment, tuple(flags), Case(inputs, {"draft": draft}), result)


def _valid() -> list[VectorSpec]:
    base = dict(p=_P, x=_X, q=_Q)
    out = [
        _spec("k = 3, rows all different: acceptance 1/2, 2/3, 1/2, two-token residuals, a bonus row of its own",
              ["RngCoin", "RngResidual", "RngBonus", "RngLength", "RngPosition", "RngShared"], pattern(**base)),
        _spec("the same, float32 probabilities and int32 token ids", ["RngCoin", "RngResidual", "RngBonus"],
              pattern(**base, dtype=np.float32, int_dtype=np.int32)),
        _spec("point-mass drafter (no draft_probs): acceptance p(x), the correction from p with x masked out",
              ["RngCoin", "RngResidual", "RngBonus", "RngLength", "RngShared"], pattern(**base), "point_mass"),
        _spec("per-request draft lengths 0, 1, 2, 3 in one batch: rows past num_draft are NaN, drafts -1; "
              "the bonus comes from row num_draft", ["RngLength", "RngBonus", NAN],
              _stack(*(pattern(**base, n=n, copies=COPIES // 2) for n in range(4)))),
        _spec("per-request draft lengths, point-mass drafter", ["RngLength", "RngBonus"],
              _stack(*(pattern(**base, n=n, copies=COPIES // 2) for n in range(4))), "point_mass"),
        _spec("every draft accepted (p = q at each position): the bonus is always emitted",
              ["RngBonus", "RngLength", "RngCoin"], pattern(p=_P, x=_X, q=_P[:3])),
        _spec("a padded draft (-1) at position 1 of 3 is rejected: the correction from max(p - q, 0)",
              ["RngPadding", "RngLength"], pattern(p=_P, x=[1, -1, 0], q=_Q)),
        _spec("a padded draft (-1) with a point-mass drafter: the correction from p itself",
              ["RngPadding", "RngLength"], pattern(p=_P, x=[3, -1, 0], q=_Q), "point_mass"),
        _spec("greedy and random requests mixed: greedy ones keep drafts equal to the argmax (first on ties) and "
              "emit the argmax at the first mismatch", ["RngGreedy", "RngBonus", "RngLength"],
              _stack(pattern(**base, copies=COPIES // 4),
                     pattern(p=_P, x=[0, 2, 0], q=_Q, greedy=True, copies=COPIES // 4),  # all match: bonus 3
                     pattern(p=_P, x=[0, 1, 0], q=_Q, greedy=True, copies=COPIES // 4),  # mismatch at 1: emits 2
                     pattern(p=_P, x=[0, 2], n=2, q=_Q, greedy=True, copies=COPIES // 4))),  # bonus from row 2
        _spec("a draft token of zero draft probability is always rejected (vLLM: draft_prob > 0 is required)",
              ["RngZeroDraft", "RngCoin"], pattern(p=_P, x=[3, 3, 0], q=[[2, 8, 6, 0], *_Q[1:]])),
        _spec("zero target probability at the draft (p(x) = 0 < q(x)): never accepted, whatever the uniform",
              ["RngCoin", "RngResidual"], pattern(p=[[8, 8, 0, 0], *_P[1:]], x=[2, 3, 0], q=[[4, 4, 4, 4], *_Q[1:]])),
        _spec("p = q with q(x) = 0: a residual of zero mass, the correction drawn from p (vLLM emits token 0)",
              ["RngZeroResidual"], pattern(p=[[0, 8, 8, 0], *_P[1:]], x=[3, 3, 0], q=[[0, 8, 8, 0], *_Q[1:]])),
        _spec("V = 1: every draft is token 0 and accepted", ["RngBonus"],
              pattern(p=[[16]] * 4, x=[0, 0, 0], q=[[16]] * 3)),
        _spec("k = 0: no drafts, the bonus drawn from the single target row", ["RngBonus"],
              pattern(p=[_P[3]], x=[], q=np.zeros((0, 4)))),
        _spec("k = 0 with a point-mass drafter", ["RngBonus"], pattern(p=[_P[3]], x=[]), "point_mass"),
        _spec("an empty batch (B = 0)", [EMPTY_INPUT], pattern(**base, copies=0)),
    ]
    rng = np.random.default_rng(seed_for(f"specdec.{NAME}"))
    parts = []
    for _ in range(4):
        v = int(rng.integers(2, 7))
        weights = rng.integers(0, 5, size=(7, v))
        weights[:, 0] += 1  # every row has mass
        p = [_sixteenths(w) for w in weights[:4]]
        q = [_sixteenths(w) for w in weights[4:]]
        x = [int(rng.choice(v, p=np.asarray(r) / 16)) for r in q]
        parts.append(pattern(p=p, x=x, q=q, n=int(rng.integers(0, 4)), copies=COPIES // 4))
        parts[-1]["target_probs"] = np.pad(parts[-1]["target_probs"], ((0, 0), (0, 0), (0, 6 - v)))
        parts[-1]["draft_probs"] = np.pad(parts[-1]["draft_probs"], ((0, 0), (0, 0), (0, 6 - v)))
    out.append(_spec("random rows in sixteenths (V = 6, zeros padded), random draft lengths", [RANDOM],
                     _stack(*parts)))
    return out


def _sixteenths(w: np.ndarray) -> list[int]:
    """Integer weights turned into sixteenths summing to 16 (largest remainder)."""
    exact = w * 16 / w.sum()
    base = np.floor(exact).astype(int)
    base[np.argsort(base - exact)[: 16 - base.sum()]] += 1
    return base.tolist()


def _invalid() -> list[VectorSpec]:
    good = pattern(p=_P, x=_X, q=_Q, copies=2)
    out = []

    def bad(comment, **change):
        out.append(_spec(comment, [INVALID_INPUT], {**good, **change}, result="invalid"))

    def poke(name, index, value):
        a = good[name].copy()
        a[index] = value
        return a

    bad("target_probs: NaN in a row that is read", target_probs=poke("target_probs", (0, 1, 2), np.nan))
    bad("draft_probs: +Inf in a row that is read", draft_probs=poke("draft_probs", (1, 0, 0), np.inf))
    bad("target_probs: a negative probability (the row still sums to 1)",
        target_probs=poke("target_probs", (0, 0, slice(0, 2)), [12 / 16, -2 / 16]))
    bad("target_probs: a row summing to 15/16", target_probs=poke("target_probs", (0, 3, 3), 8 / 16))
    bad("draft_probs: a row summing to 17/16", draft_probs=poke("draft_probs", (1, 2, 0), 9 / 16))
    bad("draft_tokens: a token id V (past the vocabulary)", draft_tokens=poke("draft_tokens", (0, 1), 4))
    bad("draft_tokens: a token id -2", draft_tokens=poke("draft_tokens", (1, 0), -2))
    bad("num_draft: a count > k", num_draft=np.array([3, 4]))
    bad("num_draft: a negative count", num_draft=np.array([-1, 3]))
    bad("draft_tokens: shape [B, k + 1]", draft_tokens=np.pad(good["draft_tokens"], ((0, 0), (0, 1))))
    bad("draft_probs: a vocabulary of 3", draft_probs=good["draft_probs"][..., :3])
    bad("num_draft: shape [B + 1]", num_draft=np.array([3, 3, 3]))
    bad("target_probs: rank 2", target_probs=good["target_probs"][:, 0])
    bad("target_probs: int64", target_probs=good["target_probs"].astype(np.int64))
    bad("draft_tokens: float64", draft_tokens=good["draft_tokens"].astype(np.float64))
    bad("greedy: int64 flags", greedy=good["greedy"].astype(np.int64))
    out.append(_spec("draft_probs: missing with draft='probs'", [INVALID_INPUT],
                     {k: v for k, v in good.items() if k != "draft_probs"}, result="invalid"))
    out.append(VectorSpec("draft_probs: given with draft='point_mass'", (INVALID_INPUT,),
                          Case(good, {"draft": "point_mass"}), "invalid"))
    return out


def _added() -> list[VectorSpec]:
    """Vectors added after the first lists (appended, so that earlier vector ids keep their numbers)."""
    good = pattern(p=_P, x=_X, q=_Q, copies=COPIES // 4)
    off = np.zeros_like(good["target_probs"])
    off[:, 0, 0] = 2.0 ** -14
    draft_off = np.zeros_like(good["draft_probs"])
    draft_off[:, 1, 3] = 2.0 ** -14
    return [
        _spec("target_probs row 0 off 1 by +2^-14, draft_probs row 1 by -2^-14 (6.1e-5, inside the tolerance "
              "1e-4): valid",
              ["RowSumTolerance"], {**good, "target_probs": good["target_probs"] + off,
                                    "draft_probs": good["draft_probs"] - draft_off}),
        _spec("target_probs: row 0 off 1 by 2^-11 (4.9e-4, past the tolerance 1e-4)",
              [INVALID_INPUT, "RowSumTolerance"], {**good, "target_probs": good["target_probs"] + 8 * off},
              result="invalid"),
        _spec("draft_probs: NaN in a greedy request's row inside num_draft (the checks are positional: a greedy "
              "row does not read it, yet it must be valid, as for the exact ops)", [INVALID_INPUT, NAN],
              {**good, "greedy": np.ones_like(good["greedy"]),
               "draft_probs": np.where(np.arange(good["draft_probs"].shape[-1]) == 0, np.nan, good["draft_probs"])},
              result="invalid"),
        _spec("draft_tokens: int16 ids (int32 or int64 only)", [INVALID_INPUT],
              {**good, "draft_tokens": good["draft_tokens"].astype(np.int16)}, result="invalid"),
    ]


def _vectors() -> list[VectorSpec]:
    return _valid() + _invalid() + _added()


@st.composite
def _example(draw, supported) -> Case:
    """A few random request patterns (V 1..6, k 0..4), each repeated 16..64 times."""
    draft = draw(st.sampled_from(list(supported.get("draft", ("probs",)))), label="draft")
    v, k = draw(st.integers(1, 6), label="V"), draw(st.integers(0, 4), label="k")
    parts = []
    for _ in range(draw(st.integers(1, 3), label="patterns")):
        rows = [draw(st.lists(st.integers(0, 4), min_size=v, max_size=v)) for _ in range(2 * k + 1)]
        rows = [_sixteenths(np.asarray(r) + (np.arange(v) == draw(st.integers(0, v - 1)))) for r in rows]
        p, q = rows[: k + 1], rows[k + 1:]
        x = [draw(st.sampled_from([t for t in range(v) if r[t] > 0] + ([-1] if k > 1 else []))) for r in q]
        parts.append(pattern(p=p, x=x, q=q if k else np.zeros((0, v)), n=draw(st.integers(0, k)),
                             greedy=draw(st.booleans()), copies=draw(st.integers(16, 64)),
                             dtype=draw(st.sampled_from([np.float32, np.float64]))))
    dtype = parts[0]["target_probs"].dtype
    inputs = _stack(*({**p, "target_probs": p["target_probs"].astype(dtype),
                       "draft_probs": p["draft_probs"].astype(dtype)} for p in parts))
    if draft == Draft.POINT_MASS.value:
        inputs.pop("draft_probs")
    return Case(inputs, {"draft": draft})


OPERATIONS = [
    AREA.declare(
        StatisticalOp, NAME, rejection_sample_marginals, anchor="statistical-twin",
        summary="target_probs [B, k+1, V], draft_tokens [B, k], num_draft [B], greedy [B], draft_probs, seed "
                "-> output [B, k+1] int64 drawn with the kernel's own random numbers",
        vectors=_vectors, examples=_example,
        variants=(Variant("draft", Draft, Draft.PROBS.value,
                          "draft probabilities given (a draft model, EAGLE), or a point-mass drafter (n-gram, "
                          "argmax drafts: q is one-hot at the drafted token)"),),
        calls=64, false_alarm=1e-6,
    ),
]

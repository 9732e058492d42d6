"""Rejection sampling with every random number an input (exact), spec/specdec.md.

  specdec.rejection_sample  vLLM's contract: coins p/q >= u, exponential race, bonus from outside
  specdec.chain_sample      the paper's / SGLang's: coins u * q < p, inverse-CDF residual and bonus

Both take the variant `draft` (probs | point_mass). Vectors are batches of requests
written once (`Request`) and laid out for each op: NaN in every row past a request's
num_draft (target, draft and uniforms), so a kernel that reads one fails. Inputs are
dyadic (probabilities in sixteenths or 64ths, uniforms on a 2^-12 grid, noise in
sixteenths): exact in float32 too, byte-stable, and no coin, race or inverse-CDF step
lands within float32 rounding of a boundary except where a vector sets one on purpose.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from ref.specdec.catalog.common import AREA, ROW_SUM_FLAG
from ref.specdec.catalog.requests import Request, batch, random_request
from ref.specdec.rejection import Draft, chain_sample, rejection_sample
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["DRAFT", "FLAGS", "OPERATIONS"]

FLAGS = {
    **{name: COMMON[name] for name in (EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM)},
    "NoCoin": Flag("a draft token accepted when p(x) >= q(x) and rejected otherwise, without a coin",
                   "drafts the target finds less likely than the draft are never kept: fewer tokens per step, "
                   "and the output is no longer the target's distribution"),
    "ResidualSign": Flag("the residual taken as max(0, q - p) instead of max(0, p - q)",
                         "after a rejection the token comes from where the draft over-proposed: the target's law "
                         "is lost"),
    "ResidualNorm": Flag("the inverse CDF run on the residual max(0, p - q) without dividing by its mass",
                         "the uniform is compared with an unnormalized running sum: later tokens too likely, "
                         "or no token found"),
    "Bonus": Flag("no bonus token after every draft is accepted (or the bonus from the wrong row)",
                  "a full acceptance emits k tokens instead of k + 1, or the bonus has the wrong distribution"),
    "AcceptLength": Flag("the number of accepted drafts off by one (the rejected draft kept, or the last accepted "
                         "dropped)",
                         "a rejected token emitted, or the recovered token written over an accepted one"),
    "DraftPosition": Flag("q read at another position (j + 1 or j - 1) than the draft token's",
                          "the coin uses the wrong ratio: accepted where it should be rejected"),
    "Noise": Flag("the race's noise vector shared by all requests, or a different one per position",
                  "replay diverges; with one vector for all requests, their recovered tokens are correlated"),
    "Float32Uniforms": Flag("uniforms rounded to float32 (2^-160 becomes 0, 1 - 2^-40 becomes 1)",
                            "a u of 0 accepts a token of zero target probability; a u of 1 rejects a sure one"),
    "AcceptEquality": Flag("the coin's comparison strict where the contract has u <= p/q (vLLM), or the reverse "
                           "(the chain contract has u * q < p)",
                           "replay diverges when u equals p/q; at u = 0 the chain contract never keeps a zero-p token"),
    "VocabRange": Flag("a recovered token outside [0, V) (an all-zero residual, a tie, or a padded tile's lane)",
                       "an id past the vocabulary reaches the detokenizer (out-of-bounds read)"),
    "CdfBoundary": Flag("the inverse CDF taking the first C_v >= u * S instead of C_v > u * S",
                        "at u = 0 a token of zero mass is drawn"),
    "Ties": Flag("argmax ties broken to the last index (greedy rows, equal race scores)",
                 "replay diverges from the engines, which take the first"),
    "RowsPastDraft": Flag("target or draft rows past num_draft read (a loop to k instead of num_draft, the bonus "
                          "from row k)", "a padded position decides the step: NaN garbage or the wrong bonus"),
    "GreedyPath": Flag("greedy rows run through the random coins instead of argmax matching",
                       "a temperature-0 request samples"),
    "RowSumTolerance": ROW_SUM_FLAG,
    "PaddedDraft": Flag("a padded draft id (-1) inside num_draft accepted (read as token V - 1) or skipped",
                    "a -1 is emitted as a token, or the step runs past the padding"),
}

DRAFT = Variant("draft", Draft, Draft.PROBS, "the drafter's probabilities given (EAGLE, draft models), or only "
                "its tokens (n-gram, suffix, argmax drafts: q = 1 at the drafted token)")

# ------------------------------------------------------------------ hand-made requests

EVEN = (4, 4, 4, 4)
ONES = (1.0, 1.0, 1.0, 1.0)
# accepted by the coin at p < q (1/2 >= 3/8), rejected at position 1 (1/4 < 1/2); residual (0, 0, 2, 6)/16
CHAIN = Request(p=((8, 4, 2, 2), (2, 2, 4, 8), EVEN), q=((4, 8, 2, 2), (8, 4, 2, 2)), x=(1, 0), u=(0.375, 0.5),
                e=(1.0, 1.0, 0.25, 1.0), uf=0.125, bonus=3)
# every draft accepted (ratios 1): the bonus; its inverse CDF lands on a boundary C_2 = 1/2 = u
FULL = Request(p=(EVEN, (8, 8, 0, 0), (2, 2, 4, 8)), q=(EVEN, (8, 8, 0, 0)), x=(2, 1), u=(0.875, 0.5),
               e=(1.0, 2.0, 3.0, 4.0), uf=0.5, bonus=2)
# u = p/q exactly (1/4 / 1/2): vLLM accepts (>=), the chain contract rejects (u * q < p is false)
EQUAL = Request(p=(EVEN, EVEN), q=((8, 4, 2, 2),), x=(0,), u=(0.5,), e=(1.0, 0.5, 1.0, 1.0), uf=0.75, bonus=1)
# p(x) = 0, u = 2^-160: rejected; as float32 u is 0 and 0 >= 0 accepts (vLLM); residual (0, 8, 8, 0)
TINY_U = Request(p=((0, 8, 8, 0), EVEN), q=((8, 4, 4, 0),), x=(0,), u=(float(np.ldexp(1.0, -160)),),
                 e=(1.0, 1.0, 0.5, 1.0), uf=0.25, bonus=0)
# p(x)/q(x) = 1 - 2^-41 against u = 1 - 2^-40: accepted; as float32 u is 1 and nothing is accepted
NEAR_ONE = Request(p=((2**41 - 1, 2**41 + 1, 0, 0), (2**40,) * 4), q=((2**41, 2**41, 0, 0),), x=(0,),
                   u=(float(1 - np.ldexp(1.0, -40)),), e=ONES, uf=0.5, bonus=3, den=2**42)
# a padded draft (-1) inside num_draft: rejected; the residual is (0, 0, 0, 4)/16, p(V-1)/q(V-1) = 2
PADDED = Request(p=((2, 2, 4, 8), EVEN, EVEN), q=(EVEN, EVEN), x=(-1, 1), u=(0.25, 0.25),
                 e=(1.0, 1.0, 2.0, 1.0), uf=0.5, bonus=1)
# a padded draft with p == q: the residual is all zero (race: token 0; inverse CDF: V - 1)
ZERO_RESIDUAL = Request(p=(EVEN, EVEN), q=(EVEN,), x=(-1,), u=(0.5,), e=(1.0, 1.0, 1.0, 0.5), uf=0.5, bonus=1)
# q(x) = 0 at the drafted token: rejected without dividing; residual (8, 0, 0, 0)
ZERO_Q = Request(p=((8, 8, 0, 0), EVEN), q=((0, 8, 8, 0),), x=(0,), u=(0.5,), e=ONES, uf=0.5, bonus=2)
# q read at position 1 would accept x = 2 (p/q = 1): at position 0 the ratio is 1/4 < 1/2
POSITION = Request(p=((8, 4, 2, 2), (2, 4, 8, 2), EVEN), q=((2, 4, 8, 2), (4, 8, 2, 2)), x=(2, 2),
                   u=(0.5, 0.5), e=(1.0, 0.5, 1.0, 1.0), uf=0.75, bonus=0)
# p < q with u under the ratio (1/8 < 1/4): kept by the coin, never by "p >= q"
COIN = Request(p=((4, 2, 2, 8), (8, 4, 2, 2), EVEN), q=((4, 8, 2, 2), (4, 4, 4, 4)), x=(1, 3), u=(0.125, 0.75),
               e=(1.0, 1.0, 1.0, 2.0), uf=0.625, bonus=2)
# greedy: x_0 is the argmax, x_1 not (argmax 2 emitted); the random coins would keep both
GREEDY = Request(p=((2, 8, 4, 2), (4, 4, 8, 0), EVEN), q=((0, 2, 8, 6), (2, 8, 4, 2)), x=(1, 0), u=(0.5, 0.5),
                 e=ONES, uf=0.5, bonus=3, greedy=True)
# greedy with a tied argmax (tokens 0..3 at 1/4): the first index, 0, is the argmax; x = 3 is rejected
GREEDY_TIE = Request(p=(EVEN, EVEN), q=((0, 0, 0, 16),), x=(3,), u=(0.5,), e=ONES, uf=0.5, bonus=3, greedy=True)
# a race tie: residual (0, 4, 4, 0) with e = 1: tokens 1 and 2 tie, the first (1) wins; the CDF tie at C_1 = u * S
RACE_TIE = Request(p=((4, 8, 4, 0), EVEN), q=((4, 4, 0, 8),), x=(3,), u=(0.5,), e=ONES, uf=0.5, bonus=0)
# u = 0 and p(x) = 0: vLLM's >= keeps a token the target never emits (probability 2^-53 per float64 coin)
ZERO_U = Request(p=((0, 8, 8, 0), EVEN), q=((8, 4, 4, 0),), x=(0,), u=(0.0,), e=(1.0, 0.5, 1.0, 1.0), uf=0.0, bonus=2)
# u_final = 0 on a residual whose first token has no mass: the first positive C_v is token 1, not 0
CDF_ZERO = Request(p=((0, 4, 4, 8), EVEN), q=((0, 0, 16, 0),), x=(2,), u=(0.5,), e=ONES, uf=0.0, bonus=2)


def _noise_pair() -> list[Request]:
    """Two requests rejecting at position 1 whose noise rows pick different tokens."""
    a = Request(p=(EVEN, (8, 8, 0, 0), EVEN), q=(EVEN, (0, 0, 8, 8)), x=(0, 2), u=(0.25, 0.5),
                e=(1.0, 2.0, 1.0, 1.0), uf=0.75, bonus=3)
    b = Request(p=(EVEN, (8, 8, 0, 0), EVEN), q=(EVEN, (0, 0, 8, 8)), x=(3, 3), u=(0.25, 0.5),
                e=(2.0, 1.0, 1.0, 1.0), uf=0.25, bonus=3)
    return [a, b]


def _point_mass(r: Request) -> Request:
    return replace(r, q=None)


def _random_batch(rng, *, b: int, v: int, k: int, point_mass: bool) -> list[Request]:
    return [random_request(rng, v, int(rng.integers(0, k + 1)), point_mass=point_mass,
                           greedy=bool(rng.integers(0, 4) == 0)) for _ in range(b)]


# ------------------------------------------------------------------ vectors


def _flags(op: str, *flags: str, chain: tuple[str, ...] = (), vllm: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(flags) + (chain if op == "chain" else vllm)


def _valid(op: str, draft: str) -> list[VectorSpec]:
    pm = draft == "point_mass"
    fix = _point_mass if pm else (lambda r: r)
    out = []

    def add(comment, flags, requests, **kw):
        if pm and op == "rejection" and any(r is CHAIN for r in requests):
            flags += ("Ties",)  # CHAIN as a point mass: a race whose two best scores tie (the first index wins)
        out.append(VectorSpec(f"{comment} ({draft})", flags, batch([fix(r) for r in requests], op, draft=draft, **kw)))

    add("a draft kept by the coin at p < q, the next rejected: the residual's token" if not pm else
        "the first draft rejected by its coin (p(x) < u): the residual's token" + (
            ", where the race's two best scores tie (the first index wins)" if op == "rejection" else ""), _flags(
        op, "NoCoin", "AcceptLength", "ResidualSign", chain=("ResidualNorm",)), [CHAIN])
    add("every draft accepted: the bonus token follows", _flags(op, "Bonus", "AcceptLength", chain=("CdfBoundary",)),
        [FULL])
    add("u equal to p(x)/q(x): vLLM keeps the draft, the chain contract rejects it", ("AcceptEquality",), [EQUAL])
    add("p(x) = 0 and u = 2^-160: rejected (float32 rounds u to 0)", ("Float32Uniforms",), [TINY_U])
    if not pm:
        add("p(x)/q(x) = 1 - 2^-41 and u = 1 - 2^-40: accepted (float32 rounds u to 1)", ("Float32Uniforms",),
            [NEAR_ONE])
        add("q(x) = 0 at the drafted token: rejected, never divided by", ("NoCoin",), [ZERO_Q])
        add("a padded draft with p == q: the residual is all zero (race: token 0, inverse CDF: V - 1)",
            ("VocabRange", "PaddedDraft"), [ZERO_RESIDUAL])
        add("q read at another position would accept: q of the draft's own position rejects", ("DraftPosition",),
            [POSITION])
        add("a tie in the residual: the first index wins the race, the CDF's boundary the next",
            ("Ties", "CdfBoundary"), [RACE_TIE])
        add("u_final = 0 with no residual mass on token 0: the first token of positive mass", ("CdfBoundary",),
            [CDF_ZERO])
    add("a padded draft (-1) inside num_draft is rejected, never read as token V - 1", ("PaddedDraft",), [PADDED])
    add("p < q with u under the ratio: kept by the coin, never by a p >= q test", ("NoCoin", "AcceptLength"), [COIN])
    add("u = 0 and p(x) = 0: vLLM's u <= p/q keeps the draft; the chain's u * q < p does not", ("AcceptEquality",),
        [ZERO_U])
    add("greedy rows: argmax matching, the argmax emitted at the first mismatch; a random row beside them",
        ("GreedyPath", "AcceptLength"), [GREEDY, CHAIN, replace(FULL, greedy=True)])
    add("a greedy row whose argmax is tied: the first index", ("Ties", "GreedyPath"), [GREEDY_TIE])
    add("two requests rejecting at position 1, each with its own noise row", ("Noise",), _noise_pair())
    no_drafts = replace(FULL, x=(), u=(), p=FULL.p[2:], q=())
    one_draft = replace(COIN, x=COIN.x[:1], u=COIN.u[:1], p=COIN.p[:1] + COIN.p[2:], q=COIN.q[:1])
    add("per-request draft lengths (2, 0, 1) of k = 3: rows past num_draft are NaN and never read",
        ("RowsPastDraft", "Bonus", NAN), [FULL, no_drafts, one_draft], k=3)
    add("k = 0: the bonus alone", ("Bonus", EMPTY_INPUT),
        [no_drafts, replace(COIN, x=(), u=(), p=COIN.p[2:], q=(), greedy=True)])
    add("an empty batch", (EMPTY_INPUT,), [], k=2)
    add("V = 1: every token is 0", ("VocabRange",), [Request(p=((16,), (16,)), q=((16,),), x=(0,), u=(0.5,), e=(1.0,),
                                                             uf=0.5, bonus=0)])
    add("float32 probabilities: the same steps", ("NoCoin", "ResidualSign", "Bonus"), [CHAIN, FULL, COIN],
        dtype=np.float32)
    base = batch([fix(r) for r in (CHAIN, FULL, COIN)], op, draft=draft)
    for ints, flags in ((np.int32, ("AcceptLength", "Bonus")), (np.uint16, ("Bonus",))):
        names = ("draft_tokens", "num_draft", "bonus_tokens") if ints is np.int32 else ("num_draft", "bonus_tokens")
        cast = {name: base.inputs[name].astype(ints) for name in names if name in base.inputs}
        out.append(VectorSpec(f"{', '.join(cast)} as {np.dtype(ints).name} (ids and counts of any integer dtype; "
                              f"vLLM's are int32) ({draft})", flags, Case({**base.inputs, **cast}, base.params)))
    if not pm:
        mixed = {**base.inputs, "target_probs": base.inputs["target_probs"].astype(np.float32)}
        out.append(VectorSpec("float32 target rows beside float64 draft rows (probs)", ("NoCoin", "ResidualSign"),
                              Case(mixed, base.params)))
    rng = np.random.default_rng(seed_for(f"specdec.{op}.{draft}"))
    for i, (b, v, k) in enumerate(((6, 5, 4), (8, 3, 3), (4, 8, 5))):
        add(f"random batch {i + 1}: B={b}, V={v}, k={k}, greedy and random rows mixed", (RANDOM,),
            _random_batch(rng, b=b, v=v, k=k, point_mass=pm), dtype=np.float32 if i == 1 else np.float64)
    return out


def _invalid(op: str) -> list[VectorSpec]:
    base = batch([CHAIN, FULL], op)
    x = dict(base.inputs)
    out = []

    def add(comment, **change):
        out.append(VectorSpec(comment, (INVALID_INPUT,), Case({**x, **change}, {"draft": "probs"}), "invalid"))

    def at(name, value, index=(0, 0, 1)):
        a = x[name].copy()
        a[index] = value
        return a

    add("NaN in a used target row is rejected", target_probs=at("target_probs", np.nan))
    add("+inf in a used draft row is rejected", draft_probs=at("draft_probs", np.inf))
    add("a negative probability is rejected (its row still sums to 1)",
        target_probs=at("target_probs", -0.25, (0, 0, 0)) + 0 * at("target_probs", 0.0, (0, 0, 1)))
    add("a target row summing to 1/2 is rejected", target_probs=at("target_probs", 0.0, (0, 0, 0)))
    add("a draft row summing to 3/2 is rejected", draft_probs=at("draft_probs", 0.75, (0, 1, 3)))
    add("a draft token id past the vocabulary is rejected", draft_tokens=at("draft_tokens", 4, (0, 1)))
    add("a draft token id of -2 is rejected (-1 is padding)", draft_tokens=at("draft_tokens", -2, (0, 1)))
    add("a uniform of 1.0 is rejected ([0, 1))", uniforms=at("uniforms", 1.0, (0, 1)))
    add("a negative uniform is rejected", uniforms=at("uniforms", -0.25, (1, 0)))
    add("a NaN uniform inside num_draft is rejected", uniforms=at("uniforms", np.nan, (1, 1)))
    add("float32 uniforms are rejected (TypeError)", uniforms=x["uniforms"].astype(np.float32))
    add("num_draft past k is rejected", num_draft=np.array([2, 3], np.int64))
    add("a negative num_draft is rejected", num_draft=np.array([-1, 2], np.int64))
    add("float16 probabilities are rejected (TypeError)", target_probs=x["target_probs"].astype(np.float16))
    add("draft_tokens of another shape than [B, k] are rejected", draft_tokens=x["draft_tokens"][:, :1])
    add("draft_probs of another vocabulary are rejected", draft_probs=x["draft_probs"][..., :3])
    add("greedy as int64 is rejected (TypeError)", greedy=np.array([0, 1], np.int64))
    add("num_draft as float64 is rejected (TypeError)", num_draft=np.array([2.0, 2.0]))
    add("a draft token other than -1 past num_draft is rejected", num_draft=np.array([1, 2], np.int64))
    add("target_probs without the batch axis are rejected", target_probs=x["target_probs"][0])
    add("a 0-d num_draft is rejected", num_draft=np.array(2, np.int64))
    add("bool draft_tokens are rejected (TypeError)", draft_tokens=x["draft_tokens"] > 0)
    if op == "chain":
        add("a final uniform of 1.0 is rejected", final_uniforms=np.array([0.5, 1.0]))
        add("final_uniforms of shape [B, 1] are rejected", final_uniforms=x["final_uniforms"][:, None])
        add("a target of k rows (no bonus row) is rejected", target_probs=x["target_probs"][:, :2])
        add("NaN in the bonus row (row num_draft, read after a full acceptance) is rejected",
            target_probs=at("target_probs", np.nan, (1, 2, 0)))
    else:
        add("a zero exponential is rejected", exponentials=at("exponentials", 0.0, (1, 2)))
        add("an infinite exponential is rejected", exponentials=at("exponentials", np.inf, (1, 2)))
        add("exponentials of shape [B, V + 1] are rejected", exponentials=np.ones((2, 5)))
        add("a bonus token past the vocabulary is rejected", bonus_tokens=np.array([3, 4], np.int64))
    out.append(VectorSpec("draft = point_mass with draft_probs given is rejected", (INVALID_INPUT,),
                          Case(x, {"draft": "point_mass"}), "invalid"))
    no_q = {k: v for k, v in x.items() if k != "draft_probs"}
    out.append(VectorSpec("draft = probs without draft_probs is rejected", (INVALID_INPUT,),
                          Case(no_q, {"draft": "probs"}), "invalid"))
    return out


# greedy, every draft the argmax: vLLM emits the bonus token it is handed (2), the chain contract argmax p_n (3);
# neither is argmax p_{n-1} (0) nor the last draft (0)
GREEDY_FULL = Request(p=((2, 8, 4, 2), (8, 4, 2, 2), (2, 2, 4, 8)), q=((0, 2, 8, 6), (2, 8, 4, 2)), x=(1, 0),
                      u=(0.5, 0.5), e=ONES, uf=0.5, bonus=2, greedy=True)


def _scaled(r: Request, factor: int = 1024) -> Request:
    """The same request in units of 1/(den * factor), so that one unit can be moved off a row's sum."""
    def up(rows):
        return None if rows is None else tuple(tuple(c * factor for c in row) for row in rows)
    return replace(r, p=up(r.p), q=up(r.q), den=r.den * factor)


def _nudged(r: Request, where: str, row: int, token: int, units: int) -> Request:
    rows = [list(a) for a in getattr(r, where)]
    rows[row][token] += units
    return replace(r, **{where: tuple(tuple(a) for a in rows)})


# target row 0 summing to 1 + 2^-14 and draft row 1 to 1 - 2^-14 (|sum - 1| = 6.1e-5 <= 1e-4: valid); the steps
# are those of CHAIN (every coin, race and inverse CDF clear of a boundary)
OFF_VALID = _nudged(_nudged(_scaled(CHAIN), "p", 0, 0, 1), "q", 1, 3, -1)


def _added(op: str) -> list[VectorSpec]:
    """Vectors added after the first list (appended, so that earlier vector ids keep their numbers)."""
    out = []
    for draft in DRAFT.values:
        fix = _point_mass if draft == "point_mass" else (lambda r: r)
        one = replace(GREEDY_FULL, x=GREEDY_FULL.x[:1], p=GREEDY_FULL.p[:1] + GREEDY_FULL.p[2:],
                      q=GREEDY_FULL.q[:1], u=GREEDY_FULL.u[:1])
        out.append(VectorSpec(f"greedy rows matching every draft (n = k = 2, and n = 1 < k): the bonus token "
                              f"(vLLM: bonus_tokens; chain: argmax of row n), not argmax of row n - 1 ({draft})",
                              _flags(op, "Bonus", "GreedyPath"), batch([fix(GREEDY_FULL), fix(one)], op, draft=draft)))
    out.append(VectorSpec("rows off 1 by 2^-14 (6.1e-5, inside the tolerance 1e-4): valid, sampled as given (probs)",
                          ("RowSumTolerance",), batch([OFF_VALID, FULL], op)))
    bad = _nudged(_scaled(CHAIN), "p", 0, 0, 8)
    out.append(VectorSpec("a target row off 1 by 2^-11 (4.9e-4, past the tolerance 1e-4) is rejected",
                          (INVALID_INPUT, "RowSumTolerance"), batch([bad, FULL], op), "invalid"))
    nan_greedy = batch([replace(FULL, greedy=True), FULL], op)
    nan_greedy.inputs["draft_probs"][0, 0, 0] = np.nan
    out.append(VectorSpec("NaN in a greedy request's draft row inside num_draft is rejected: the checks are "
                          "positional (a greedy row does not read it, yet it must be valid)", (INVALID_INPUT, NAN),
                          nan_greedy, "invalid"))
    return out


def _vectors(op: str):
    return lambda: [s for d in DRAFT.values for s in _valid(op, d)] + _invalid(op) + _added(op)


def _examples(op: str):
    def case(seed: int, params: dict) -> Case:
        rng = np.random.default_rng(seed)
        b, v, k = (int(a) for a in rng.integers((0, 1, 0), (5, 7, 5)))
        draft = params.get("draft", DRAFT.default)
        requests = _random_batch(rng, b=b, v=v, k=k, point_mass=draft == "point_mass")
        dtype = np.float32 if rng.integers(0, 2) else np.float64
        if not requests:
            return batch([], op, k=k, dtype=dtype, draft=draft)
        return batch(requests, op, k=k, dtype=dtype, draft=draft)

    return lambda supported: st.tuples(st.integers(0, 2**32 - 1), variant_params(supported)).map(lambda t: case(*t))


OPERATIONS = [
    AREA.exact("rejection_sample", rejection_sample, anchor="rejection-sample",
               summary="vLLM's rejection sampler, random numbers as inputs -> tokens [B, k + 1]", variants=(DRAFT,),
               vectors=_vectors("rejection"), examples=_examples("rejection"), compare=compare_exact),
    AREA.exact("chain_sample", chain_sample, anchor="chain-sample",
               summary="the paper's chain sampler with inverse-CDF draws (SGLang) -> tokens [B, k + 1]",
               variants=(DRAFT,), vectors=_vectors("chain"), examples=_examples("chain"), compare=compare_exact),
]

"""The requests the specdec.rejection_sample and specdec.chain_sample vectors and
examples are built from: one `Request` written once, laid out for either op by
`batch`, and `random_request`, random requests whose every step is clear of a
boundary (so that float32 kernels and any summation order agree with the oracle)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ref.testing.vector_files import Case

__all__ = ["NAN_ROW", "Request", "batch", "random_request"]

NAN_ROW = float("nan")


@dataclass(frozen=True)
class Request:
    """One request: p has n + 1 rows (the last is the bonus distribution), q has n
    rows (None for a point-mass drafter), in units of 1/den; x, u per draft; e the
    race's noise; uf the final uniform; bonus the token vLLM's sampler hands in."""

    p: tuple
    x: tuple
    u: tuple
    e: tuple
    uf: float
    bonus: int
    q: tuple | None = None
    greedy: bool = False
    den: int = 16


def _rows(rows, den: int, n: int, v: int) -> np.ndarray:
    out = np.full((n, v), NAN_ROW)
    for i, r in enumerate(rows):
        out[i] = np.asarray(r, np.float64) / den
    return out


def batch(requests, op: str, *, k: int | None = None, dtype=np.float64, draft: str = "probs") -> Case:
    """The Case of `op` ("rejection" or "chain") for `requests` padded to k drafts
    (default: the longest), NaN past each num_draft, in `dtype` probabilities."""
    v = len(requests[0].e) if requests else 4
    k = max((len(r.x) for r in requests), default=0) if k is None else k
    rows = k + (op == "chain")
    b = len(requests)
    p = np.full((b, rows, v), NAN_ROW)
    q = np.full((b, k, v), NAN_ROW)
    x = np.full((b, k), -1, np.int64)
    u = np.full((b, k), NAN_ROW)
    for i, r in enumerate(requests):
        n = len(r.x)
        p[i, :min(n + 1, rows)] = _rows(r.p, r.den, n + 1, v)[:rows]
        if draft == "probs":
            q[i, :n] = _rows(r.q, r.den, n, v)
        x[i, :n], u[i, :n] = r.x, r.u
    inputs = {"target_probs": p.astype(dtype), "draft_tokens": x,
              "num_draft": np.array([len(r.x) for r in requests], np.int64), "uniforms": u}
    if op == "chain":
        inputs["final_uniforms"] = np.array([r.uf for r in requests], np.float64)
    else:
        inputs["exponentials"] = np.array([r.e for r in requests], np.float64).reshape(b, v)
        inputs["bonus_tokens"] = np.array([r.bonus for r in requests], np.int64)
    inputs["greedy"] = np.array([r.greedy for r in requests], bool)
    if draft == "probs":
        inputs["draft_probs"] = q.astype(dtype)
    return Case(inputs, {"draft": draft})


# ------------------------------------------------------------------ random requests


def _counts(rng: np.random.Generator, v: int, den: int) -> list[int]:
    """A random row of `den` units on a random support (zeros and concentration come often)."""
    support = rng.integers(0, v, int(rng.integers(1, v + 1)))
    counts = np.bincount(support[rng.integers(0, support.size, den)], minlength=v)
    return [int(c) for c in counts]


def _pick(rng: np.random.Generator, counts: list[int]) -> int:
    """A token drawn from a row of counts (one unit drawn at random)."""
    return int(np.searchsorted(np.cumsum(counts), int(rng.integers(0, sum(counts))), side="right"))


def _margins(r: Request, point_mass: bool) -> bool:
    """No coin, race or inverse-CDF step at (or within float32 rounding of) a boundary."""
    p = [[Fraction(c, r.den) for c in row] for row in r.p]
    q = None if point_mass else [[Fraction(c, r.den) for c in row] for row in r.q]
    e = [Fraction(v).limit_denominator(64) for v in r.e]
    uf = Fraction(r.uf)
    for j, x in enumerate(r.x):
        px, qx = (p[j][x], Fraction(1) if q is None else q[j][x]) if x >= 0 else (0, 0)
        if qx > 0 and Fraction(r.u[j]) * qx == px:
            return False
        res = ([0 if i == x else a for i, a in enumerate(p[j])] if q is None
               else [max(a - b, 0) for a, b in zip(p[j], q[j])])
        if not _clear(res, e, uf):
            return False
    return _clear(p[len(r.x)], e, uf)


def _clear(res, e, uf) -> bool:
    scores = sorted((a / b for a, b in zip(res, e)), reverse=True)
    total, run = sum(res), Fraction(0)
    for a in res:
        run += a
        if total and run == uf * total:
            return False
    return len(scores) < 2 or scores[0] == 0 or scores[0] != scores[1]


def random_request(rng: np.random.Generator, v: int, n: int, *, point_mass: bool = False, greedy: bool = False,
                   den: int = 64) -> Request:
    """A request of n drafts over V tokens: rows in 64ths on random supports, drafts
    drawn from q (now and then a padded -1 or a token q never proposes), uniforms on a
    2^-12 grid, noise in sixteenths; a third of the draft rows equal to the target's
    (always accepted), so that runs get long; redrawn until no step sits on a boundary."""
    while True:
        p = tuple(tuple(_counts(rng, v, den)) for _ in range(n + 1))
        q = tuple(p[j] if rng.integers(0, 3) == 0 else tuple(_counts(rng, v, den)) for j in range(n))  # q = p: kept
        x = []
        for j in range(n):
            odd = int(rng.integers(0, 8))
            x.append(-1 if odd == 0 else int(rng.integers(0, v)) if odd == 1 or point_mass and odd < 4
                     else _pick(rng, q[j]))
        r = Request(p=p, q=None if point_mass else q, x=tuple(x),
                    u=tuple(int(a) / 4096 for a in rng.integers(0, 4096, n)),
                    e=tuple(int(a) / 16 for a in rng.integers(1, 64, v)), uf=int(rng.integers(0, 4096)) / 4096,
                    bonus=int(rng.integers(0, v)), greedy=greedy, den=den)
        if _margins(r, point_mass):
            return r

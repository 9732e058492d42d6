"""Speculative rejection sampling for the default run, written the way a sampling kernel
is written and independently of the oracles (this module imports nothing from ref):
one request at a time (a GPU program per request), its drafts in order, Python floats
(float64) for every comparison; the exponential race as a running maximum of r / e over
the vocabulary (a division where the oracle multiplies by 1 / e); the inverse CDF as a
running sum compared with u times the residual's mass, stopping at the first token
past it. The steps are public so that the bug corpus (tests/corpus/specdec_rejection.py)
builds its wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import math

import numpy as np

NAME = "numpy specdec"
VERSION = np.__version__

TOLERANCE = 1e-4  # |sum - 1| of a probability row


def check_probs(a, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name} must be float32 or float64, got {a.dtype}")
    if a.ndim != 3 or (shape is not None and a.shape != shape):
        raise ValueError(f"{name} has shape {a.shape}, expected {shape or '3 dimensions'}")
    return a


def check_row(row: np.ndarray, name: str) -> list[float]:
    values = [float(v) for v in row]
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"{name}: a row with NaN, Inf or a negative probability")
    if abs(math.fsum(values) - 1) > TOLERANCE:
        raise ValueError(f"{name}: a row that does not sum to 1")
    return values


def check_ints(a, name: str, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}, expected {shape}")
    return a


def check_uniforms(a, name: str, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.float64:
        raise TypeError(f"{name} must be float64, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}, expected {shape}")
    return a


def check_uniform(u: float, name: str) -> float:
    if not 0 <= u < 1:
        raise ValueError(f"{name}: {u} is not in [0, 1)")
    return u


def argmax(values) -> int:
    """The first index of the largest value."""
    best, where = -math.inf, 0
    for i, v in enumerate(values):
        if v > best:
            best, where = v, i
    return where


def vllm_coin(p: float, q: float, u: float) -> bool:
    return q > 0 and p / q >= u


def chain_coin(p: float, q: float, u: float) -> bool:
    return q > 0 and u * q < p


def residual(p: list[float], q: list[float] | None, x: int) -> list[float]:
    if q is None:
        return [0.0 if i == x else a for i, a in enumerate(p)]
    return [a - b if a > b else 0.0 for a, b in zip(p, q)]


def race(r: list[float], e: list[float]) -> int:
    """The token whose r / e is largest (the first on ties): the exponential race."""
    best, token = -math.inf, 0
    for i, (a, b) in enumerate(zip(r, e)):
        score = a / b
        if score > best:
            best, token = score, i
    return min(token, len(r) - 1)


def inverse_cdf(r: list[float], u: float) -> int:
    """The first token whose running sum passes u times the total (the last if none)."""
    target, run = u * sum(r), 0.0
    for i, a in enumerate(r):
        run += a
        if run > target:
            return i
    return len(r) - 1


def _common(target_probs, draft_tokens, num_draft, uniforms, greedy, draft_probs, draft, extra_rows):
    t = check_probs(target_probs, "target_probs")
    b, m, v = t.shape
    k = m - extra_rows
    if k < 0 or v < 1:
        raise ValueError(f"target_probs has shape {t.shape}")
    n = check_ints(num_draft, "num_draft", (b,))
    x = check_ints(draft_tokens, "draft_tokens", (b, k))
    u = check_uniforms(uniforms, "uniforms", (b, k))
    g = np.asarray(greedy)
    if g.dtype != np.bool_ or g.shape != (b,):
        raise TypeError(f"greedy must be bools of shape {(b,)}, got {g.dtype} {g.shape}")
    if (draft == "probs") != (draft_probs is not None):
        raise ValueError(f"draft={draft!r} and draft_probs disagree")
    q = None if draft_probs is None else check_probs(draft_probs, "draft_probs", (b, k, v))
    requests = []
    for i in range(b):
        ni = int(n[i])
        if not 0 <= ni <= k:
            raise ValueError(f"num_draft[{i}] = {ni} not in [0, {k}]")
        xs = [int(a) for a in x[i]]
        if any(a != -1 for a in xs[ni:]) or any(not -1 <= a < v for a in xs[:ni]):
            raise ValueError(f"draft_tokens[{i}] has an id outside the vocabulary or -1 padding")
        # rows past num_draft are kept unchecked (NaN in the vectors): a kernel reading one goes wrong
        ps = [check_row(t[i, j], "target_probs") if j < ni + extra_rows else [float(a) for a in t[i, j]]
              for j in range(m)]
        qs = None if q is None else [check_row(q[i, j], "draft_probs") if j < ni else [float(a) for a in q[i, j]]
                                     for j in range(k)]
        us = [check_uniform(float(a), "uniforms") if j < ni else float(a) for j, a in enumerate(u[i])]
        requests.append((ni, xs, ps, qs, us, bool(g[i])))
    return b, k, v, requests


def verify(ni, xs, ps, qs, us, greedy, coin) -> tuple[list[int], int | None]:
    """The accepted drafts, and the position of the first rejection (None: all accepted)."""
    out = []
    for j in range(ni):
        x = xs[j]
        if greedy:
            ok = x == argmax(ps[j])
        else:
            ok = x >= 0 and coin(ps[j][x], 1.0 if qs is None else qs[j][x], us[j])
        if not ok:
            return out, j
        out.append(x)
    return out, None


def emit(kept: list[int], last: int, j: int | None, xs: list[int]) -> list[int]:
    """The accepted drafts and one more token: the recovered one at j, or the bonus."""
    return kept + [last]


def noise_row(i: int, j: int, b: int) -> int:
    """The race's noise row for request i at position j: the request's own."""
    return i


def bonus_row(ni: int, k: int) -> int:
    """The chain's bonus distribution: the target row after the last draft."""
    return ni


def _row(tokens: list[int], k: int) -> list[int]:
    return tokens + [-1] * (k + 1 - len(tokens))


def rejection_sample(target_probs, draft_tokens, num_draft, uniforms, exponentials, bonus_tokens, greedy,
                     draft_probs=None, *, draft=None, coin=vllm_coin, recover=race, resid=residual, accept=verify,
                     out=emit, noise=noise_row, drafts=lambda ni, k: ni):
    draft = draft or ("point_mass" if draft_probs is None else "probs")
    b, k, v, requests = _common(target_probs, draft_tokens, num_draft, uniforms, greedy, draft_probs, draft, 0)
    e = check_uniforms(exponentials, "exponentials", (b, v))
    if not np.all(np.isfinite(e) & (e > 0)):
        raise ValueError("exponentials must be finite and positive")
    bonus = check_ints(bonus_tokens, "bonus_tokens", (b,))
    if np.any((bonus < 0) | (bonus >= v)):
        raise ValueError("bonus_tokens outside the vocabulary")
    rows = []
    for i, (ni, xs, ps, qs, us, g) in enumerate(requests):
        kept, j = accept(drafts(ni, k), xs, ps, qs, us, g, coin)
        if j is None:
            last = int(bonus[i])
        elif g:
            last = argmax(ps[j])
        else:
            last = recover(resid(ps[j], None if qs is None else qs[j], xs[j]), [float(a) for a in e[noise(i, j, b)]])
        rows.append(_row(out(kept, last, j, xs), k))
    return np.array(rows, np.int64).reshape(b, k + 1)


def chain_sample(target_probs, draft_tokens, num_draft, uniforms, final_uniforms, greedy, draft_probs=None, *,
                 draft=None, coin=chain_coin, recover=inverse_cdf, resid=residual, accept=verify, out=emit,
                 bonus_at=bonus_row):
    draft = draft or ("point_mass" if draft_probs is None else "probs")
    b, k, v, requests = _common(target_probs, draft_tokens, num_draft, uniforms, greedy, draft_probs, draft, 1)
    uf = check_uniforms(final_uniforms, "final_uniforms", (b,))
    rows = []
    for i, (ni, xs, ps, qs, us, g) in enumerate(requests):
        u = check_uniform(float(uf[i]), "final_uniforms")
        kept, j = accept(ni, xs, ps, qs, us, g, coin)
        at = bonus_at(ni, k) if j is None else j
        if g:
            last = argmax(ps[at])
        elif j is None:
            last = recover(ps[at], u)
        else:
            last = recover(resid(ps[j], None if qs is None else qs[j], xs[j]), u)
        rows.append(_row(out(kept, last, j, xs), k))
    return np.array(rows, np.int64).reshape(b, k + 1)


OPS = {
    "specdec.rejection_sample": rejection_sample,
    "specdec.chain_sample": chain_sample,
}
VARIANTS = {name: {"draft": ["probs", "point_mass"]} for name in OPS}

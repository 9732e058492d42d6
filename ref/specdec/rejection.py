"""Speculative rejection sampling with every random number an input (spec/specdec.md).

A draft proposes up to k tokens per request; the target verifies them in one pass.
Draft token x at position j is accepted with probability min(1, p_j(x) / q_j(x)); at
the first rejection one token is drawn from the residual norm(max(0, p_j - q_j)); if
all n drafts are accepted one bonus token is drawn from the target's next
distribution p_n. The emitted tokens are then distributed exactly as the target's
(Leviathan et al., arXiv:2211.17192, Theorem 1; Chen et al., arXiv:2302.01318).

Two contracts, differing in how the residual and bonus draws are made:

- `rejection_sample` (vLLM's): accept iff q(x) > 0 and p(x) / q(x) >= u; the token
  after a rejection is argmax_v max(p - q, 0)_v * (1 / e_v), e ~ Exp(1), one noise
  vector e per request shared by its positions (an exponential race: token v wins
  with probability r_v / sum(r)); the bonus token comes in from outside.
- `chain_sample` (the paper's inverse CDF, SGLang's): accept iff q(x) > 0 and
  u * q(x) < p(x); the token after a rejection, or the bonus, is the first v whose
  cumulative mass C_v exceeds u_final * C_{V-1} (one final uniform per request).

Point-mass drafters (n-gram, argmax drafts; `draft_probs` None) have q = 1 at the
drafted token: accept iff p(x) >= u (vLLM) or u < p(x) (chain), and the residual is p
with the drafted token's mass removed. Greedy rows accept iff x == argmax p_j (first
index on ties) and emit argmax p_j at the first mismatch, the bonus (vLLM) or argmax
p_n (chain) after full acceptance. A draft id of -1 inside num_draft is a padded draft:
always rejected (its residual is max(p - q, 0) with the row's q; point mass: p). The
output is int64 [B, k + 1]: the accepted drafts, then one more token, then -1.

Degenerate residual (all zero: p == q and the drafted token outside q's support, or
a padded draft with p == q): vLLM's race gives the first index, 0; the inverse CDF finds
no C_v > 0 and gives the last, V - 1. Both events have probability zero.
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["Draft", "PLACEHOLDER", "SUM_TOLERANCE", "chain_sample", "check_distributions", "rejection_sample"]

PLACEHOLDER = -1  # after the emitted tokens, and a padded draft
SUM_TOLERANCE = 1e-4  # |sum(row) - 1| allowed in every specdec op (float32 softmax over 2^17 tokens: ~1e-5)


class Draft(enum.Enum):
    """What the drafter hands over: its probabilities, or only its tokens (q = 1 at them)."""

    PROBS = "probs"
    POINT_MASS = "point_mass"


# ------------------------------------------------------------------ checks


def _floats(x, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: expected float32 or float64 probabilities, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return a


def _ints(x, name: str, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integers, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    return a.astype(np.int64)


def _uniforms(x, name: str, shape: tuple[int, ...], used: np.ndarray) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.float64:
        raise TypeError(f"{name}: expected float64 uniforms (float32 ones round tiny values to 0), got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    inside = (a[used] >= 0) & (a[used] < 1)
    if not np.all(inside):
        raise ValueError(f"{name}: expected values in [0, 1) where used, got {a[used][~inside][:3]}")
    return a


def check_distributions(probs: np.ndarray, name: str, used: np.ndarray | None = None) -> np.ndarray:
    """probs [..., V] as float64, its used rows (a boolean mask over the leading axes;
    None: every row) checked: finite, >= 0, summing to 1 within SUM_TOLERANCE. The one
    row check of every specdec op (samplers, trees, the statistical twin, the speed-up
    model), so that all of them refuse the same rows."""
    probs = np.asarray(probs)
    rows = (probs[used] if used is not None else probs.reshape(-1, probs.shape[-1])).astype(np.float64)
    if not np.all(np.isfinite(rows)):
        raise ValueError(f"{name}: NaN or Inf in a used row")
    if np.any(rows < 0):
        raise ValueError(f"{name}: a negative probability in a used row")
    sums = rows.sum(-1)
    if np.any(np.abs(sums - 1) > SUM_TOLERANCE):
        raise ValueError(f"{name}: a used row sums to {sums[np.abs(sums - 1) > SUM_TOLERANCE][0]!r}, "
                         f"not 1 within {SUM_TOLERANCE}")
    return probs.astype(np.float64)


def _inputs(target_probs, draft_tokens, num_draft, uniforms, greedy, draft_probs, draft, rows: int):
    """Checked inputs; `rows` is how many target rows a request has beyond its k drafts (0 or 1)."""
    target = _floats(target_probs, "target_probs", 3)
    b, m, v = target.shape
    k = m - rows
    if k < 0:
        raise ValueError(f"target_probs: expected [B, k + {rows}, V], got shape {target.shape}")
    if v < 1:
        raise ValueError("target_probs: expected a vocabulary of at least one token (V >= 1)")
    n = _ints(num_draft, "num_draft", (b,))
    if np.any((n < 0) | (n > k)):
        raise ValueError(f"num_draft: expected values in [0, k={k}], got {n[(n < 0) | (n > k)][:3]}")
    x = _ints(draft_tokens, "draft_tokens", (b, k))
    inside = np.arange(k) < n[:, None]  # [B, k]
    outside = inside & ((x < -1) | (x >= v))
    if np.any(outside):
        raise ValueError(f"draft_tokens: expected ids in [0, V={v}) or -1 (padding), got {x[outside][:3]}")
    if np.any(~inside & (x != PLACEHOLDER)):
        raise ValueError("draft_tokens: expected -1 beyond each request's num_draft")
    g = np.asarray(greedy)
    if g.dtype != np.bool_:
        raise TypeError(f"greedy: expected bools, got {g.dtype}")
    if g.shape != (b,):
        raise ValueError(f"greedy: expected shape {(b,)}, got {g.shape}")
    u = _uniforms(uniforms, "uniforms", (b, k), inside)
    kind = _draft_kind(draft, draft_probs)
    used = np.arange(m) < (n + rows)[:, None]  # [B, m]: the target rows a request reads
    p = check_distributions(target, "target_probs", used)
    q = None
    if kind is Draft.PROBS:
        qa = _floats(draft_probs, "draft_probs", 3)
        if qa.shape != (b, k, v):
            raise ValueError(f"draft_probs: expected shape {(b, k, v)}, got {qa.shape}")
        q = check_distributions(qa, "draft_probs", inside)
    return p, x, n, u, g, q, inside


def _draft_kind(draft, draft_probs) -> Draft:
    if draft is None:
        return Draft.POINT_MASS if draft_probs is None else Draft.PROBS
    if isinstance(draft, Draft):
        kind = draft
    elif isinstance(draft, str) and draft in [d.value for d in Draft]:
        kind = Draft(draft)
    else:
        raise ValueError(f"draft: expected one of {[d.value for d in Draft]}, got {draft!r}")
    if (kind is Draft.PROBS) != (draft_probs is not None):
        raise ValueError(f"draft_probs: draft={kind.value!r} needs draft_probs "
                         f"{'given' if kind is Draft.PROBS else 'absent (None)'}")
    return kind


# ------------------------------------------------------------------ the steps


def draft_probabilities(p: np.ndarray, x: np.ndarray, q: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """p_j(x_j) and q_j(x_j) [B, k] (q = 1 for a point-mass drafter; 0 at a padded draft)."""
    idx = np.maximum(x, 0)[..., None]  # [B, k, 1]
    k = x.shape[1]
    px = np.take_along_axis(p[:, :k], idx, -1)[..., 0]
    qx = np.ones_like(px) if q is None else np.take_along_axis(q, idx, -1)[..., 0]
    pad = x == PLACEHOLDER
    return np.where(pad, 0.0, px), np.where(pad, 0.0, qx)


def accepted_count(accept: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """How many leading drafts are accepted [B]: the first rejection ends the run."""
    run = np.cumprod(accept & inside, axis=1)  # [B, k]
    return run.sum(1).astype(np.int64)


def greedy_accept(p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x_j == argmax p_j [B, k] (the first index on ties)."""
    k = x.shape[1]
    return x == np.argmax(np.nan_to_num(p[:, :k], nan=-1.0), axis=-1)


def residual(p_row: np.ndarray, q_row: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """max(0, p - q) [B, V] at the rejected position; a point-mass drafter: p with x's mass removed."""
    if q_row is not None:
        return np.maximum(p_row - q_row, 0.0)
    keep = np.arange(p_row.shape[-1]) != x[:, None]  # x = -1 removes nothing
    return np.where(keep, p_row, 0.0)


def race(r: np.ndarray, exponentials: np.ndarray) -> np.ndarray:
    """argmax_v r_v * (1 / e_v) [B] (the first index on ties): token v with probability r_v / sum(r)."""
    return np.argmax(r * (1.0 / exponentials), axis=-1).astype(np.int64)


def inverse_cdf(r: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The first v with C_v > u * C_{V-1}, C the running sum of r [B, V] (V - 1 if none)."""
    c = np.cumsum(r, axis=-1)  # [B, V], left to right
    over = c > (u * c[:, -1])[:, None]
    return np.where(over.any(-1), np.argmax(over, axis=-1), r.shape[-1] - 1).astype(np.int64)


def _row(a: np.ndarray, j: np.ndarray) -> np.ndarray:
    """a[b, j[b]] for each request: [B, m, V] -> [B, V]."""
    return np.take_along_axis(a, j[:, None, None], 1)[:, 0]


def _emit(x: np.ndarray, count: np.ndarray, last: np.ndarray, k: int) -> np.ndarray:
    """[B, k + 1]: the `count` accepted drafts, the `last` token, then -1."""
    cols = np.arange(k + 1)
    padded = np.concatenate([x, np.full((x.shape[0], 1), PLACEHOLDER, np.int64)], 1)
    out = np.where(cols < count[:, None], padded, PLACEHOLDER)
    return np.where(cols == count[:, None], last[:, None], out).astype(np.int64)


# ------------------------------------------------------------------ the samplers


def rejection_sample(target_probs, draft_tokens, num_draft, uniforms, exponentials, bonus_tokens, greedy,
                     draft_probs=None, *, draft: str | None = None) -> np.ndarray:
    """vLLM's rejection sampler with its random numbers as inputs -> int64 [B, k + 1].

    target_probs [B, k, V] float32/64 (rows past num_draft unread); draft_tokens [B, k]
    (-1 past num_draft; -1 inside: a padded draft); num_draft [B] in [0, k]; uniforms
    [B, k] float64 in [0, 1); exponentials [B, V] float64 > 0 (one per request);
    bonus_tokens [B] in [0, V); greedy [B] bool; draft_probs [B, k, V] or None.
    `draft`: "probs" or "point_mass", which must agree with draft_probs (None: from it).
    """
    p, x, n, u, g, q, inside = _inputs(target_probs, draft_tokens, num_draft, uniforms, greedy, draft_probs,
                                       draft, rows=0)
    b, k, v = p.shape
    e = np.asarray(exponentials)
    if e.dtype != np.float64:
        raise TypeError(f"exponentials: expected float64, got {e.dtype}")
    if e.shape != (b, v):
        raise ValueError(f"exponentials: expected shape {(b, v)}, got {e.shape}")
    if not np.all(np.isfinite(e) & (e > 0)):
        raise ValueError("exponentials: expected finite values > 0")
    bonus = _ints(bonus_tokens, "bonus_tokens", (b,))
    if np.any((bonus < 0) | (bonus >= v)):
        raise ValueError(f"bonus_tokens: expected ids in [0, V={v}), got {bonus[(bonus < 0) | (bonus >= v)][:3]}")
    px, qx = draft_probabilities(p, x, q)
    with np.errstate(divide="ignore", invalid="ignore"):
        coin = (qx > 0) & (np.divide(px, qx, out=np.zeros_like(px), where=qx > 0) >= u)
    count = accepted_count(np.where(g[:, None], greedy_accept(p, x), coin), inside)  # [B]
    j = np.minimum(count, max(k - 1, 0))  # the rejected position (any row when all are accepted)
    rejected = count < n
    last = bonus.copy()
    if k and b:
        p_row = np.nan_to_num(_row(p, j), nan=0.0)  # [B, V]: rows past num_draft are never used below
        q_row = None if q is None else np.nan_to_num(_row(q, j), nan=0.0)
        xj = np.take_along_axis(x, j[:, None], 1)[:, 0]
        recovered = np.where(g, np.argmax(p_row, -1), race(residual(p_row, q_row, xj), e))
        last = np.where(rejected, recovered, bonus)
    return _emit(x, count, last, k)


def chain_sample(target_probs, draft_tokens, num_draft, uniforms, final_uniforms, greedy, draft_probs=None, *,
                 draft: str | None = None) -> np.ndarray:
    """The paper's chain sampler with inverse-CDF draws (SGLang's contract) -> int64 [B, k + 1].

    target_probs [B, k + 1, V] (row num_draft[b] is the bonus distribution; later rows
    unread); final_uniforms [B] float64 in [0, 1): the inverse-CDF uniform of the residual
    at the first rejection, or of the bonus row after full acceptance. The other inputs
    as in `rejection_sample`.
    """
    p, x, n, u, g, q, inside = _inputs(target_probs, draft_tokens, num_draft, uniforms, greedy, draft_probs,
                                       draft, rows=1)
    b, m, v = p.shape
    k = m - 1
    uf = _uniforms(final_uniforms, "final_uniforms", (b,), np.ones(b, bool))
    px, qx = draft_probabilities(p, x, q)
    coin = (qx > 0) & (u * qx < px)
    count = accepted_count(np.where(g[:, None], greedy_accept(p, x), coin), inside)  # [B]
    rejected = count < n
    p_row = np.nan_to_num(_row(p, count), nan=0.0)  # [B, V]: the rejected position's row, or the bonus row
    r = p_row
    if k and b:
        j = np.minimum(count, k - 1)
        q_row = None if q is None else np.nan_to_num(_row(q, j), nan=0.0)
        xj = np.take_along_axis(x, j[:, None], 1)[:, 0]
        r = np.where(rejected[:, None], residual(p_row, q_row, xj), p_row)
    last = np.where(g, np.argmax(p_row, -1), inverse_cdf(r, uf)) if b else np.zeros(0, np.int64)
    return _emit(x, count, last, k)

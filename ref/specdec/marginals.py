"""The law of one speculative-decoding step for a sampler that draws its own random
numbers: each output element's marginal distribution over the V tokens and -1
(spec/specdec.md, "The statistical twin"). The oracle of `specdec.rejection_sample_rng`.

Computed from the definition (Leviathan et al., arXiv:2211.17192, Algorithm 1; Chen et
al., arXiv:2302.01318), not by running a sampler. For a random request b with n =
num_draft[b] drafts x_j, target rows p_j and draft rows q_j (the one-hot row of x_j for a
point-mass drafter):

    a_j = min(1, p_j(x_j) / q_j(x_j))      the acceptance probability of draft j
          (0 for a padded draft x_j = -1, or where q_j(x_j) = 0: rejected, as vLLM does)
    r_j = norm(max(p_j - q_j, 0))           the residual the correction is drawn from
          (the point-mass drafter: p_j with x_j's entry zeroed; a residual of zero mass,
          reachable only when q_j(x_j) = 0 and p_j <= q_j, is replaced by norm(p_j))
    A_j = a_0 a_1 ... a_{j-1}               position j is reached (A_0 = 1)

    P(out[b, j] = t)  = A_j (a_j [t = x_j] + (1 - a_j) r_j(t)),   P(out[b, j] = -1) = 1 - A_j   (j < n)
    P(out[b, n] = t)  = A_n norm(p_n)(t),                          P(out[b, n] = -1) = 1 - A_n
    P(out[b, j] = -1) = 1                                                                          (j > n)

A greedy request is deterministic: g_j = argmax p_j (first index on ties); the drafts are
kept while x_j = g_j, the first mismatch m emits g_m (m = n: the bonus g_n), -1 after.

Ratios use the rows as given; only the distributions drawn from are normalized. Target
rows past num_draft[b] and draft rows at or past it are never read (NaN allowed there).
"""

from __future__ import annotations

import enum

import numpy as np

from ref.specdec.rejection import SUM_TOLERANCE, check_distributions

__all__ = ["Draft", "check_step", "rejection_sample_marginals", "ROW_SUM_TOLERANCE"]

ROW_SUM_TOLERANCE = SUM_TOLERANCE  # the area's one tolerance (ref.specdec.rejection)


class Draft(enum.Enum):
    """Where the draft's probabilities come from."""

    PROBS = "probs"  # draft_probs [B, k, V] given (EAGLE, a draft model)
    POINT_MASS = "point_mass"  # no draft_probs: q_j is the one-hot row of x_j (n-gram, argmax drafters)


def _floats(name: str, arr) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: expected float32 or float64 probabilities, got {a.dtype}")
    return a


def _ints(name: str, arr) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype not in (np.int32, np.int64):
        raise TypeError(f"{name}: expected int32 or int64, got {a.dtype}")
    return a.astype(np.int64)


def check_step(target_probs, draft_tokens, num_draft, greedy, draft_probs=None, *, draft: str = "probs"):
    """The inputs checked and converted: (p [B, k+1, V] float64, x [B, k] int64, n [B] int64,
    greedy [B] bool, q [B, k, V] float64 or None). A bad input raises naming it."""
    how = Draft(draft) if draft in {d.value for d in Draft} else None
    if how is None:
        raise ValueError(f"draft: expected one of {[d.value for d in Draft]}, got {draft!r}")
    p = _floats("target_probs", target_probs)
    x = _ints("draft_tokens", draft_tokens)
    n = _ints("num_draft", num_draft)
    g = np.asarray(greedy)
    if g.dtype != np.bool_:
        raise TypeError(f"greedy: expected bool, got {g.dtype}")
    if p.ndim != 3 or p.shape[1] < 1 or p.shape[2] < 1:
        raise ValueError(f"target_probs: expected [B, k+1, V] with V >= 1, got shape {p.shape}")
    b, k1, v = p.shape
    if x.shape != (b, k1 - 1):
        raise ValueError(f"draft_tokens: expected shape {(b, k1 - 1)} (target_probs is {p.shape}), got {x.shape}")
    for name, arr in (("num_draft", n), ("greedy", g)):
        if arr.shape != (b,):
            raise ValueError(f"{name}: expected shape {(b,)}, got {arr.shape}")
    if np.any((n < 0) | (n > k1 - 1)):
        raise ValueError(f"num_draft: expected values in [0, {k1 - 1}], got {n[(n < 0) | (n > k1 - 1)][0]}")
    if np.any((x < -1) | (x >= v)):
        raise ValueError(f"draft_tokens: expected token ids in [-1, {v}) (-1: padding), got "
                         f"{x[(x < -1) | (x >= v)][0]}")
    pos = np.arange(k1)
    check_distributions(p, "target_probs", pos[None, :] <= n[:, None])
    q = None
    if how is Draft.PROBS:
        if draft_probs is None:
            raise ValueError("draft_probs: required when draft='probs' (draft='point_mass' takes none)")
        q = _floats("draft_probs", draft_probs)
        if q.shape != (b, k1 - 1, v):
            raise ValueError(f"draft_probs: expected shape {(b, k1 - 1, v)}, got {q.shape}")
        check_distributions(q, "draft_probs", pos[None, :-1] < n[:, None])  # positional: greedy rows too, as the exact ops
        q = q.astype(np.float64)
    elif draft_probs is not None:
        raise ValueError("draft_probs: given while draft='point_mass' (pass draft='probs')")
    return p.astype(np.float64), x, n, g.astype(bool), q


def _normalized(rows: np.ndarray) -> np.ndarray:
    s = rows.sum(axis=-1, keepdims=True)
    return rows / np.where(s > 0, s, 1.0)


def _acceptance(p: np.ndarray, x: np.ndarray, q: np.ndarray | None) -> np.ndarray:
    """a [B, k]: min(1, p_j(x_j) / q_j(x_j)); 0 for x_j = -1 or q_j(x_j) = 0."""
    xi = np.maximum(x, 0)[..., None]  # [B, k, 1]
    px = np.take_along_axis(p[:, :-1], xi, axis=-1)[..., 0]  # [B, k]
    qx = np.ones_like(px) if q is None else np.take_along_axis(q, xi, axis=-1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.minimum(1.0, np.where(qx > 0, px / np.where(qx > 0, qx, 1.0), 0.0))
    return np.where(x >= 0, a, 0.0)


def _residual(p: np.ndarray, x: np.ndarray, q: np.ndarray | None) -> np.ndarray:
    """r [B, k, V]: norm(max(p_j - q_j, 0)), norm(p_j) where that has no mass."""
    pj = p[:, :-1]  # [B, k, V]
    if q is None:
        onehot = (np.arange(p.shape[-1]) == x[..., None]) & (x[..., None] >= 0)
        r = np.where(onehot, 0.0, pj)
    else:
        r = np.maximum(pj - q, 0.0)
    empty = r.sum(axis=-1, keepdims=True) <= 0
    return _normalized(np.where(empty, pj, r))


def _greedy_rows(p: np.ndarray, x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The deterministic output [B, k+1] of greedy requests (-1 after the emitted tokens)."""
    b, k1, _ = p.shape
    pos = np.arange(k1)
    g = np.argmax(np.where(pos[None, :, None] <= n[:, None, None], p, 0.0), axis=-1)  # [B, k+1]
    match = np.concatenate([x == g[:, :-1], np.zeros((b, 1), bool)], axis=1) & (pos[None, :] < n[:, None])
    m = np.argmin(match, axis=1)  # the first mismatch (or n: all drafts kept)
    return np.where(pos[None, :] <= m[:, None], g, -1)


def rejection_sample_marginals(target_probs, draft_tokens, num_draft, greedy, draft_probs=None, *,
                               draft: str = "probs") -> tuple[np.ndarray, np.ndarray]:
    """Per-element law of one speculative step's output [B, k+1] (module docstring):
    (outcomes [B, k+1, V+1] int64 = (0, 1, ..., V-1, -1) per element, probabilities
    [B, k+1, V+1] float64).

    target_probs [B, k+1, V] float32/float64 (row num_draft[b] is the bonus
    distribution); draft_tokens [B, k] int32/int64 in [-1, V); num_draft [B] in [0, k];
    greedy [B] bool; draft_probs [B, k, V] with draft="probs", None with "point_mass"."""
    p, x, n, g, q = check_step(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft=draft)
    b, k1, v = p.shape
    pos = np.arange(k1)
    read = pos[None, :] <= n[:, None]  # [B, k+1]: rows that exist
    p = np.where(read[..., None], p, 0.0)  # rows past num_draft (NaN allowed) never enter
    drafted = pos[None, :-1] < n[:, None]  # [B, k]: positions holding a draft
    if q is not None:
        q = np.where(drafted[..., None], q, 0.0)
    a = np.where(drafted, _acceptance(p, x, q), 0.0)  # [B, k]
    reach = np.concatenate([np.ones((b, 1)), np.cumprod(a, axis=1)], axis=1)  # A_j [B, k+1]
    probs = np.zeros((b, k1, v + 1))
    xs = (np.arange(v) == x[..., None]) & (x[..., None] >= 0)  # [B, k, V] one-hot of the draft
    emitted = a[..., None] * xs + (1.0 - a[..., None]) * _residual(p, x, q)  # [B, k, V]
    probs[:, :-1, :v] = np.where(drafted[..., None], emitted, 0.0)
    bonus = pos[None, :] == n[:, None]  # [B, k+1]
    probs[:, :, :v] = np.where(bonus[..., None], _normalized(p), probs[:, :, :v])
    probs[:, :, :v] *= np.where(read, reach, 0.0)[..., None]
    probs[:, :, v] = 1.0 - probs[:, :, :v].sum(axis=-1)
    probs[:, :, v] = np.where(probs[:, :, v] < 1e-15, 0.0, probs[:, :, v])  # rounding, never a live outcome
    greedy_out = _greedy_rows(p, x, n)  # [B, k+1]
    det = np.zeros_like(probs)
    np.put_along_axis(det, np.where(greedy_out >= 0, greedy_out, v)[..., None], 1.0, axis=-1)
    probs = np.where(g[:, None, None], det, probs)
    probs /= probs.sum(axis=-1, keepdims=True)
    outcomes = np.broadcast_to(np.append(np.arange(v), -1).astype(np.int64), probs.shape).copy()
    return outcomes, probs

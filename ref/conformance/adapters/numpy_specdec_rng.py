"""A speculative-decoding step that draws its own random numbers, for the statistical
op `specdec.rejection_sample_rng`, written for the default run independently of the
oracle (which gives marginals, not samples): position by position, vectorized over
the batch, NumPy's PCG64 stream seeded by `seed`, the acceptance coin as u * q(x) <= p(x)
with u in (0, 1]
(the same event as u' <= p/q for u' = 1 - u in [0, 1)), and every draw from a
distribution by the Gumbel-max trick (argmax of log w - log(-log v)) instead of an
inverse CDF. Greedy requests take argmaxes and draw nothing.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy Gumbel-max speculative sampler"
VERSION = np.__version__

_TOLERANCE = 1e-4


def _check_rows(name, rows, used):
    r = rows[used].astype(np.float64)
    if not np.isfinite(r).all():
        raise ValueError(f"{name}: NaN or Inf in a row that is used")
    if (r < 0).any():
        raise ValueError(f"{name}: negative probability")
    if (np.abs(r.sum(-1) - 1) > _TOLERANCE).any():
        raise ValueError(f"{name}: a row does not sum to 1")


def _checked(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft):
    p, x, n, g = (np.asarray(a) for a in (target_probs, draft_tokens, num_draft, greedy))
    if draft not in ("probs", "point_mass"):
        raise ValueError(f"draft: unknown value {draft!r}")
    for name, a, kinds in (("target_probs", p, "f"), ("draft_tokens", x, "i"), ("num_draft", n, "i"),
                           ("greedy", g, "b")):
        if a.dtype.kind != kinds or (kinds in "fi" and a.dtype.itemsize not in (4, 8)):
            raise TypeError(f"{name}: unsupported dtype {a.dtype}")
    if p.ndim != 3 or min(p.shape[1:]) < 1:
        raise ValueError(f"target_probs: expected [B, k+1, V], got {p.shape}")
    b, k1, v = p.shape
    if x.shape != (b, k1 - 1) or n.shape != (b,) or g.shape != (b,):
        raise ValueError(f"draft_tokens, num_draft, greedy: shapes {x.shape}, {n.shape}, {g.shape} do not fit "
                         f"target_probs {p.shape}")
    if ((n < 0) | (n >= k1)).any():
        raise ValueError("num_draft: out of [0, k]")
    if ((x < -1) | (x >= v)).any():
        raise ValueError("draft_tokens: token id out of the vocabulary")
    steps = np.arange(k1)
    _check_rows("target_probs", p, steps <= n[:, None])
    q = None
    if draft == "probs":
        if draft_probs is None:
            raise ValueError("draft_probs: missing")
        q = np.asarray(draft_probs)
        if q.dtype.kind != "f" or q.dtype.itemsize not in (4, 8):
            raise TypeError(f"draft_probs: unsupported dtype {q.dtype}")
        if q.shape != (b, k1 - 1, v):
            raise ValueError(f"draft_probs: shape {q.shape}, expected {(b, k1 - 1, v)}")
        _check_rows("draft_probs", q, steps[:-1] < n[:, None])  # every request, greedy too
    elif draft_probs is not None:
        raise ValueError("draft_probs: given with draft='point_mass'")
    return p, x.astype(np.int64), n.astype(np.int64), g, q


def _gumbel_pick(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per row of weights [B, V] (each with a positive entry), an index drawn with
    probability proportional to the weights: argmax of log w + Gumbel noise."""
    v = 1.0 - rng.random(weights.shape)  # (0, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        keys = np.log(weights) - np.log(-np.log(v))  # -inf where the weight is 0
    keys = np.where(weights > 0, np.where(v == 1.0, np.inf, keys), -np.inf)
    return np.argmax(keys, axis=-1)


def _random_requests(p, x, n, q, rng):
    """Every request as a random one, position by position, vectorized over the batch."""
    b, k1, v = p.shape
    out = np.full((b, k1), -1, dtype=np.int64)
    alive = np.ones(b, dtype=bool)
    rows = np.arange(b)
    for j in range(k1):
        pj = np.where((j <= n)[:, None], p[:, j].astype(np.float64), 0.0)  # rows past num_draft never read
        bonus = alive & (n == j)
        if bonus.any():
            out[bonus, j] = _gumbel_pick(np.where(bonus[:, None], pj, 1.0), rng)[bonus]
        alive &= n > j
        if j == k1 - 1 or not alive.any():
            break
        t = x[:, j]
        ti = np.maximum(t, 0)
        if q is None:
            qj = (np.arange(v) == t[:, None]).astype(np.float64)
        else:
            qj = np.where(alive[:, None], q[:, j].astype(np.float64), 0.0)
        u = 1.0 - rng.random(b)  # (0, 1]
        qt, pt = qj[rows, ti], pj[rows, ti]
        accept = alive & (t >= 0) & (qt > 0) & (u * qt <= pt)
        out[accept, j] = t[accept]
        reject = alive & ~accept
        if reject.any():
            w = np.maximum(pj - qj, 0.0)
            w = np.where((w > 0).any(axis=1)[:, None], w, pj)
            out[reject, j] = _gumbel_pick(np.where(reject[:, None], w, 1.0), rng)[reject]
        alive &= accept
    return out


def _greedy_requests(p, x, n):
    b, k1, _ = p.shape
    best = np.argmax(np.where((np.arange(k1) <= n[:, None])[..., None], p, 0.0), axis=-1)  # [B, k+1]
    out = np.full((b, k1), -1, dtype=np.int64)
    going = np.ones(b, dtype=bool)
    for j in range(k1):
        out[going, j] = best[going, j]
        going &= (j < n) & (x[:, j] == best[:, j]) if j < k1 - 1 else False
    return out


def rejection_sample_rng(target_probs, draft_tokens, num_draft, greedy, draft_probs=None, *, seed,
                         draft="probs"):
    p, x, n, g, q = _checked(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft)
    rng = np.random.Generator(np.random.PCG64(seed))
    out = _random_requests(p, x, n, q, rng)
    return np.where(g[:, None], _greedy_requests(p, x, n), out)


OPS = {"specdec.rejection_sample_rng": rejection_sample_rng}
VARIANTS = {"specdec.rejection_sample_rng": {"draft": ["probs", "point_mass"]}}

"""Sampling over token trees and multiple drafts, every random number an input.

Three rules, all over the parent arrays of `ref.specdec.tree` (node 0 the root, a
node's children tried in ascending index, the sibling order):

- `tree_rejection_sample`: multi-draft recursive rejection sampling (SpecInfer's
  multi-step speculative sampling, arXiv:2305.09781; recursive speculative decoding,
  arXiv:2402.14160). At a node with target p and draft q (the distribution its
  children were drawn from), r = p; child c with token x is accepted iff q(x) > 0,
  r(x) > 0 and r(x) / q(x) >= u_c; a rejection updates r = norm(max(r - q, 0)) (and, drafts drawn
  without replacement, removes x from q and renormalizes it) before the next sibling.
  After the last rejection one token is drawn from r; at a leaf, from the leaf's p.
  Exact: for drafts drawn as `drafts` says, each emitted token follows the target.
- `tree_sample_target_only`: SGLang's tree sampling without draft probabilities: one
  coin per accepted node; its children's target masses accumulate, and child c is
  accepted iff coin <= acc / threshold_acc or p(x_c) >= threshold_single; after the
  last sibling, one token from p with the rejected siblings' tokens removed. Exact
  (threshold 1) for siblings with distinct tokens.
- `typical_acceptance`: Medusa's typical acceptance on a chain (not exact): draft x
  accepted iff p(x) > min(eps, alpha exp(-H(p))); the token after the accepted run is
  drawn from p restricted to {y : p(y) >= that threshold}.

The final draw is an inverse CDF: the first token whose cumulative mass exceeds
u * (the total mass), the last token of positive mass when rounding leaves none.
Outputs as `ref.specdec.tree.verify_tree_greedy`'s: tokens [B, N], nodes [B, N],
num_accepted [B], int64, -1 after the emitted tokens.
"""

from __future__ import annotations

import enum

import numpy as np

from ref.arguments import member, real
from ref.specdec.rejection import SUM_TOLERANCE, check_distributions
from ref.specdec.tree import PAD, check_ids, check_parents, children

__all__ = ["PROB_TOLERANCE", "Drafts", "check_probs", "inverse_cdf", "tree_rejection_sample",
           "tree_sample_target_only", "typical_acceptance", "typical_threshold"]

PROB_TOLERANCE = SUM_TOLERANCE  # |sum(row) - 1| allowed: the area's one tolerance (ref.specdec.rejection)


class Drafts(enum.Enum):
    """How a node's children were drawn from its draft distribution q."""

    IID = "iid"  # independently, with replacement (SpecInfer): q unchanged between siblings
    WITHOUT_REPLACEMENT = "without_replacement"  # each from q without the earlier ones (RSD, top-k drafters)


def check_probs(x, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """x as float64 after the checks: float32 or float64, `shape` (V >= 1 last), finite,
    >= 0, every row summing to 1 within PROB_TOLERANCE."""
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: expected float32 or float64 probabilities, got dtype {a.dtype}")
    if a.shape != shape or a.shape[-1] < 1:
        raise ValueError(f"{name}: expected shape {shape} with a vocabulary of at least 1, got {a.shape}")
    return check_distributions(a, name)


def _uniforms(x, name: str, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.float64:
        raise TypeError(f"{name}: expected float64 uniforms, got dtype {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    if not ((a >= 0) & (a < 1)).all():
        raise ValueError(f"{name}: expected uniforms in [0, 1)")
    return a


def _tokens(x, name: str, shape: tuple[int, ...], vocab: int) -> np.ndarray:
    a = check_ids(x, name, len(shape))
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    if ((a < 0) | (a >= vocab)).any():
        raise ValueError(f"{name}: token ids outside the vocabulary [0, {vocab})")
    return a


def inverse_cdf(mass: np.ndarray, u: float) -> int:
    """The first token whose cumulative mass exceeds u * total; the last token of
    positive mass if rounding leaves none. mass [V] >= 0 with a positive total."""
    cum = np.cumsum(mass)
    past = cum > u * cum[-1]
    return int(np.argmax(past)) if past.any() else int(np.flatnonzero(mass > 0)[-1])


def _normalized(r: np.ndarray) -> np.ndarray:
    return r / r.sum()


def _outputs(b: int, n: int):
    return np.full((b, n), PAD, np.int64), np.full((b, n), PAD, np.int64), np.zeros(b, np.int64)


def _tree_inputs(parents, draft_tokens, target_probs, uniforms, final_uniforms):
    p = check_parents(parents)
    b, n = p.shape
    target = np.asarray(target_probs)
    vocab = target.shape[-1] if target.ndim == 3 else 0
    target = check_probs(target, "target_probs", (b, n, vocab))
    tokens = _tokens(draft_tokens, "draft_tokens", (b, n), vocab)
    return (p, tokens, target, _uniforms(uniforms, "uniforms", (b, n)),
            _uniforms(final_uniforms, "final_uniforms", (b,)))


def tree_rejection_sample(parents, draft_tokens, target_probs, draft_probs, uniforms, final_uniforms, *,
                          drafts: str = "iid") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Multi-draft recursive rejection sampling over token trees.

    parents [B, N]; draft_tokens [B, N] (node i's token, in [0, V)); target_probs
    [B, N, V] (the target after node i); draft_probs [B, N, V] (the distribution node
    i's children were drawn from); uniforms [B, N] float64 in [0, 1) (node i's
    acceptance coin; the root's unused); final_uniforms [B] float64 in [0, 1) (the
    residual's or the leaf's inverse CDF). `drafts`: Drafts."""
    mode = member(drafts, Drafts, "drafts")
    p, tokens, target, u, final = _tree_inputs(parents, draft_tokens, target_probs, uniforms, final_uniforms)
    b, n = p.shape
    q_all = check_probs(draft_probs, "draft_probs", target.shape)
    kids = children(p)
    out, nodes, accepted = _outputs(b, n)
    for r in range(b):  # each request walks its own path: sequential by nature
        node, depth = 0, 0
        nodes[r, 0] = 0
        while True:
            residual, q, taken = target[r, node], q_all[r, node], None
            for c in kids[r][node]:
                x = tokens[r, c]
                if q[x] > 0 and residual[x] > 0 and residual[x] / q[x] >= u[r, c]:
                    taken = c
                    break
                residual = _reject(residual, q)
                if mode is Drafts.WITHOUT_REPLACEMENT:
                    q = _without(q, x)
            if taken is None:
                out[r, depth] = inverse_cdf(residual, final[r])
                break
            out[r, depth], node, depth = tokens[r, taken], taken, depth + 1
            nodes[r, depth] = taken
        accepted[r] = depth
    return out, nodes, accepted


def _reject(residual: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(residual - q, 0)); an all-zero difference (residual == q, reached only
    by rejecting a token q cannot draw) leaves the residual as it was."""
    diff = np.maximum(residual - q, 0)
    return _normalized(diff) if diff.sum() > 0 else residual


def _without(q: np.ndarray, x: int) -> np.ndarray:
    """q with token x removed, renormalized (all zero once nothing is left)."""
    q = q.copy()
    q[x] = 0
    s = q.sum()
    return q / s if s > 0 else q


def tree_sample_target_only(parents, draft_tokens, target_probs, uniforms, final_uniforms, *,
                            threshold_single=1.0, threshold_acc=1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SGLang's tree sampling from target probabilities only (the drafts' unused).

    Inputs as `tree_rejection_sample` without draft_probs; uniforms[b, i] is node i's
    coin for its children (the root's used first). threshold_single, threshold_acc in
    (0, 1]: 1 is exact; smaller accept more (SGLang's relaxations)."""
    single = real(np.asarray(threshold_single)[()], "threshold_single")
    acc_scale = real(np.asarray(threshold_acc)[()], "threshold_acc")
    if single > 1 or acc_scale > 1:
        raise ValueError("threshold_single, threshold_acc: expected values in (0, 1]")
    p, tokens, target, u, final = _tree_inputs(parents, draft_tokens, target_probs, uniforms, final_uniforms)
    b, n = p.shape
    kids = children(p)
    out, nodes, accepted = _outputs(b, n)
    for r in range(b):
        node, depth = 0, 0
        nodes[r, 0] = 0
        while True:
            coin, acc, residual, taken = u[r, node], 0.0, target[r, node].copy(), None
            for c in kids[r][node]:
                mass = target[r, node, tokens[r, c]]
                acc += mass
                if coin <= acc / acc_scale or mass >= single:
                    taken = c
                    break
                residual[tokens[r, c]] = 0
            if taken is None:
                left = residual if residual.sum() > 0 else target[r, node]
                out[r, depth] = inverse_cdf(left, final[r])
                break
            out[r, depth], node, depth = tokens[r, taken], taken, depth + 1
            nodes[r, depth] = taken
        accepted[r] = depth
    return out, nodes, accepted


def typical_threshold(probs, *, posterior_threshold: float = 0.09, posterior_alpha: float = 0.3) -> np.ndarray:
    """min(eps, alpha * exp(-H(p))) for rows of probs [..., V] (H in nats, 0 log 0 = 0)."""
    probs = np.asarray(probs, np.float64)
    logs = np.log(np.where(probs > 0, probs, 1.0))
    entropy = -(probs * logs).sum(axis=-1)
    return np.minimum(posterior_threshold, posterior_alpha * np.exp(-entropy))


def typical_acceptance(target_probs, draft_tokens, num_draft, final_uniforms, *,
                       posterior_threshold=0.09, posterior_alpha=0.3) -> np.ndarray:
    """Medusa's typical acceptance on a chain: output [B, k+1] int64, -1 after.

    target_probs [B, k+1, V] (row j: the target after j accepted drafts); draft_tokens
    [B, k] (-1 beyond num_draft[b]; a -1 inside is rejected); num_draft [B] in [0, k];
    final_uniforms [B] float64 in [0, 1). Drafts are accepted while p(x) > t, t =
    min(posterior_threshold, posterior_alpha exp(-H(p))); at the first refusal (or
    after num_draft acceptances) one token is drawn from p restricted to p >= t."""
    eps = real(np.asarray(posterior_threshold)[()], "posterior_threshold")
    alpha = real(np.asarray(posterior_alpha)[()], "posterior_alpha")
    target = np.asarray(target_probs)
    if target.dtype not in (np.float32, np.float64):
        raise TypeError(f"target_probs: expected float32 or float64 probabilities, got dtype {target.dtype}")
    if target.ndim != 3 or target.shape[1] < 1:
        raise ValueError(f"target_probs: expected shape [B, k+1, V], got {target.shape}")
    b, k1, vocab = target.shape
    k = k1 - 1
    draft = check_ids(draft_tokens, "draft_tokens", 2)
    if draft.shape != (b, k):
        raise ValueError(f"draft_tokens: expected shape {(b, k)}, got {draft.shape}")
    count = check_ids(num_draft, "num_draft", 1)
    if count.shape != (b,):
        raise ValueError(f"num_draft: expected shape {(b,)}, got {count.shape}")
    if ((count < 0) | (count > k)).any():
        raise ValueError(f"num_draft: expected counts in [0, {k}]")
    inside = np.arange(k)[None, :] < count[:, None]  # [B, k]
    if ((draft < -1) | (draft >= vocab) | (~inside & (draft != PAD))).any():
        raise ValueError(f"draft_tokens: expected ids in [0, {vocab}) or -1 inside num_draft, -1 beyond it")
    final = _uniforms(final_uniforms, "final_uniforms", (b,))
    rows = np.arange(b)[:, None]
    used = np.arange(k1)[None, :] <= count[:, None]  # [B, k+1]: the rows a request reads
    probs = check_probs(np.where(used[..., None], target, 1.0 / vocab), "target_probs", (b, k1, vocab))
    t = typical_threshold(probs, posterior_threshold=eps, posterior_alpha=alpha)  # [B, k+1]
    p_draft = np.where(draft >= 0, probs[rows, np.arange(k)[None, :], np.maximum(draft, 0)], 0.0)  # [B, k]
    ok = inside & (draft >= 0) & (p_draft > t[:, :k])
    run = np.cumprod(ok, axis=1).sum(axis=1) if k else np.zeros(b, np.int64)  # [B]: the accepted run
    out = np.where(np.arange(k1)[None, :] < run[:, None], np.concatenate([draft, np.full((b, 1), PAD)], 1), PAD)
    for r in range(b):
        row = probs[r, run[r]]
        out[r, run[r]] = inverse_cdf(np.where(row >= t[r, run[r]], row, 0.0), final[r])
    return out.astype(np.int64)

"""The token-tree bug corpus: wrong tree kernels and samplers written the way engines
and papers' reference code go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_spec_trees).

TREE_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_spec_trees as K
from ref.conformance.implementation import Implementation

# ------------------------------------------------------------------ tree_attention


def _mask_bug(change):
    def kernel(parents, prefix_lens):
        mask, pos = K.tree_attention(parents, prefix_lens)
        return change(np.asarray(parents, np.int64), mask, pos)
    return kernel


def _siblings_visible(p, mask, pos):
    """A node also sees the nodes that share its parent (top-k siblings scored together)."""
    same = (p[:, :, None] == p[:, None, :]) & (p[:, :, None] >= 0)
    return mask | same, pos


def _by_depth(p, mask, pos):
    """Every node of a smaller depth visible (a level-by-level causal mask): cousins leak."""
    d = pos - pos[:, :1]
    return (d[:, None, :] < d[:, :, None]) | mask, pos


def _causal(p, mask, pos):
    """The chain's lower-triangular mask whatever the tree."""
    n = p.shape[1]
    return np.broadcast_to(np.tril(np.ones((n, n), bool)), mask.shape).copy(), pos


def _transposed(p, mask, pos):
    return np.swapaxes(mask, 1, 2).copy(), pos


def _depth_from_one(p, mask, pos):
    return mask, pos + 1


def _position_by_index(p, mask, pos):
    """prefix_len + node index: the chain's positions for a tree."""
    return mask, pos[:, :1] + np.arange(p.shape[1])[None, :]


# ------------------------------------------------------------------ tree_links

def _links_descending(parents):
    """Nodes inserted first to last at the head of the list: siblings come out descending."""
    p = K.tree(parents)
    b, n = p.shape
    first = np.full((b, n), -1, np.int64)
    sibling = np.full((b, n), -1, np.int64)
    for r in range(b):
        for i in range(1, n):
            sibling[r, i] = first[r, p[r, i]]
            first[r, p[r, i]] = i
    return np.arange(b * n, dtype=np.int64).reshape(b, n), first, sibling


def _links_local_index(parents):
    """retrieve_index as the node's index within its request (no b * N offset)."""
    index, first, sibling = K.tree_links(parents)
    n = index.shape[1]
    return index % max(n, 1), first, sibling


# ------------------------------------------------------------------ verify_tree_greedy

def _last_of_ties(first, sibling, ok):
    best = [0]
    stack = [[0]]
    while stack:
        path = stack.pop()
        if len(path) > len(best) or (len(path) == len(best) and path[-1] > best[-1]):
            best = path
        stack += [path + [c] for c in K.kids(first, sibling, path[-1]) if ok[c]]
    return best


def _descending_first_match(first, sibling, ok):
    path = [0]
    while True:
        nxt = [c for c in K.kids(first, sibling, path[-1]) if ok[c]]
        if not nxt:
            return path
        path.append(nxt[-1])


def _greedy_with(search):
    def kernel(parents, draft_tokens, target_tokens, *, path="longest"):
        chosen = search if path == "longest" else K.first_match_path
        return K.verify_tree_greedy(parents, draft_tokens, target_tokens, path=path, search=chosen)
    return kernel


def _greedy_order(search):
    def kernel(parents, draft_tokens, target_tokens, *, path="longest"):
        chosen = K.longest_path if path == "longest" else search
        return K.verify_tree_greedy(parents, draft_tokens, target_tokens, path=path, search=chosen)
    return kernel


def _greedy_change(change):
    def kernel(parents, draft_tokens, target_tokens, *, path="longest"):
        tokens, nodes, count = K.verify_tree_greedy(parents, draft_tokens, target_tokens, path=path)
        return change(np.asarray(parents, np.int64), np.asarray(target_tokens, np.int64), tokens, nodes, count)
    return kernel


def _no_bonus(p, target, tokens, nodes, count):
    tokens = tokens.copy()
    tokens[np.arange(len(count)), count] = -1
    return tokens, nodes, count


def _bonus_from_parent(p, target, tokens, nodes, count):
    """The token after the path read from the last node's parent's row (the row before)."""
    tokens = tokens.copy()
    rows = np.arange(len(count))
    last = nodes[rows, count]
    parent = np.where(count > 0, p[rows, last], last)
    tokens[rows, count] = target[rows, np.maximum(parent, 0)]
    return tokens, nodes, count


def _root_checked(parents, draft_tokens, target_tokens, *, path="longest"):
    """Node 0 taken as a draft: nothing is accepted unless the root's token equals the target's at the root."""
    tokens, nodes, count = K.verify_tree_greedy(parents, draft_tokens, target_tokens, path=path)
    d, t = np.asarray(draft_tokens, np.int64), np.asarray(target_tokens, np.int64)
    for r in np.flatnonzero(d[:, 0] != t[:, 0]) if d.size else ():
        tokens[r], nodes[r], count[r] = -1, -1, 0
        tokens[r, 0], nodes[r, 0] = t[r, 0], 0
    return tokens, nodes, count



# ------------------------------------------------------------------ tree_rejection_sample

def _no_update(residual, q):
    return residual


def _q_minus_p(residual, q):
    """max(q - p, 0): the residual written the wrong way round."""
    diff = np.maximum(q - residual, 0)
    return diff / diff.sum() if diff.sum() > 0 else residual


def _unnormalized(residual, q):
    diff = np.maximum(residual - q, 0)
    return diff if diff.sum() > 0 else residual


def _zero_mass_accepted(residual, q, x, u):
    """vLLM's chain rule as is: ratio >= u, so a coin of 0 accepts a token of no residual mass."""
    return bool(q[x] > 0 and residual[x] / q[x] >= u)


def _inf_ratio(residual, q, x, u):
    """p / q with q = 0 taken as +inf (accepted) instead of refused."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return bool(residual[x] > 0 and residual[x] / q[x] >= u)


def _no_coin(residual, q, x, u):
    """Accept when r >= q, reject otherwise: no coin at all."""
    return bool(q[x] > 0 and residual[x] > 0 and residual[x] >= q[x])


def _q_never_updated(q, x, drafts):
    return q


def _q_always_updated(q, x, drafts):
    return K.q_after(q, x, "without_replacement")


def _rejection(**steps):
    return partial(K.tree_rejection_sample, **steps)


def _ge_sample(mass, u):
    """The final draw with running mass >= u * total: a tie picks the token before."""
    run = np.cumsum(mass)
    hit = np.flatnonzero(run >= u * run[-1])
    return int(hit[0])


def _with_sample(fn, sampler):
    return patched(fn, K, "sample", lambda _: sampler)


def _reversed_children(fn):
    return patched(fn, K, "kids", lambda kids: lambda first, sibling, i: kids(first, sibling, i)[::-1])


def _leaf_bonus_from_parent(parents, draft_tokens, target_probs, draft_probs, uniforms, final_uniforms, *,
                            drafts="iid"):
    """At a leaf the bonus drawn from the leaf's parent's row (the row that verified it)."""
    t = np.asarray(target_probs)
    p = np.asarray(parents, np.int64)
    shifted = t.copy()
    if p.size:
        rows = np.arange(p.shape[0])[:, None]
        shifted = t[rows, np.maximum(p, 0)]
    return K.tree_rejection_sample(parents, draft_tokens, shifted, draft_probs, uniforms, final_uniforms,
                                   drafts=drafts)


# ------------------------------------------------------------------ tree_sample_target_only

def _own_mass(target_row, coin, tokens, children, single, acc_scale):
    """Each sibling's own mass compared with the coin (no accumulation)."""
    rejected = []
    for c in children:
        mass = target_row[tokens[c]]
        if coin <= mass / acc_scale or mass >= single:
            return c, rejected
        rejected.append(int(tokens[c]))
    return None, rejected


_TO = K.tree_sample_target_only

# ------------------------------------------------------------------ typical_acceptance


def _max_threshold(row, eps, alpha):
    return max(eps, K.medusa_threshold(row, 1.0, alpha))


def _bits_threshold(row, eps, alpha):
    return K.medusa_threshold(row, eps, alpha, log=np.log2)


def _padding_accepted(target_probs, draft_tokens, num_draft, final_uniforms, **kw):
    """-1 inside num_draft read as the last token id (Python's index -1)."""
    t = np.asarray(target_probs)
    d = np.asarray(draft_tokens, np.int64).copy()
    inside = np.arange(d.shape[1])[None, :] < np.asarray(num_draft)[:, None]
    d[(d == -1) & inside] = t.shape[-1] - 1
    out = K.typical_acceptance(target_probs, d, num_draft, final_uniforms, **kw)
    return out


_TY = K.typical_acceptance


def _typical_rows(accept_row=lambda j: j, final_row=lambda j: j, keep=lambda p, t: p >= t):
    """Medusa's rule with the draft at position j judged by row accept_row(j)'s threshold and the final draw at
    position j restricted to keep(p, t), t row final_row(j)'s threshold (the contract: each row its own
    threshold, and p >= t kept)."""
    def kernel(target_probs, draft_tokens, num_draft, final_uniforms, *, posterior_threshold=0.09,
               posterior_alpha=0.3):
        out = _TY(target_probs, draft_tokens, num_draft, final_uniforms, posterior_threshold=posterior_threshold,
                  posterior_alpha=posterior_alpha)  # the adapter's checks; the tokens are recomputed below
        eps, alpha = float(np.asarray(posterior_threshold)), float(np.asarray(posterior_alpha))
        t_all, x, num = np.asarray(target_probs, np.float64), np.asarray(draft_tokens), np.asarray(num_draft)
        u = np.asarray(final_uniforms)
        out[:] = -1
        for r in range(out.shape[0]):
            rows = t_all[r]
            j = 0
            while j < num[r] and x[r, j] >= 0 and rows[j, x[r, j]] > K.medusa_threshold(rows[accept_row(j)], eps,
                                                                                        alpha):
                out[r, j] = x[r, j]
                j += 1
            t = K.medusa_threshold(rows[final_row(j)], eps, alpha)
            out[r, j] = K.sample(np.where(keep(rows[j], t), rows[j], 0.0), float(u[r]))
        return out
    return kernel


def _padding_unchecked(target_probs, draft_tokens, num_draft, final_uniforms, **kw):
    """Drafts past num_draft never looked at (so never refused when they are not -1)."""
    d = np.asarray(draft_tokens).copy()
    n = np.asarray(num_draft)
    if d.ndim == 2 and n.shape == (d.shape[0],):
        d[np.arange(d.shape[1])[None, :] >= n[:, None]] = -1
    return _TY(target_probs, d, num_draft, final_uniforms, **kw)


def _dedup_mass(target_row, coin, tokens, children, single, acc_scale):
    """A sibling repeating a rejected sibling's token adds no mass (SGLang adds it again)."""
    acc, rejected = 0.0, []
    for c in children:
        mass = target_row[tokens[c]]
        acc += 0.0 if int(tokens[c]) in rejected else mass
        if coin <= acc / acc_scale or mass >= single:
            return c, rejected
        rejected.append(int(tokens[c]))
    return None, rejected


def _residual_from_p():
    """After the first rejection at a node, each later one recomputes norm(max(p - q, 0)) from the node's p instead
    of chaining the residual (the residual the previous update returned is recognised by identity)."""
    state = {"last": None, "base": None}

    def update(residual, q):
        if residual is not state["last"]:
            state["base"] = residual  # the first rejection at this node: residual is still p
        state["last"] = K.residual_after(state["base"], q)
        return state["last"]
    return update


def _rejection_fresh_state(**kw):
    def kernel(*args, **kwargs):
        return K.tree_rejection_sample(*args, **kwargs, update=_residual_from_p())
    return kernel


def _strict_test(residual, q, x, u):
    """r(x) / q(x) > u: the draft rejected at equality, where the contract keeps it."""
    return bool(q[x] > 0 and residual[x] > 0 and residual[x] / q[x] > u)


def _with_tolerance(fn, tolerance):
    """The adapter's row-sum check at another tolerance than the spec's 1e-4."""
    return patched(fn, K, "TOL", lambda _: tolerance)


TREE_BUGS = {
    "mask: siblings visible": ("specdec.tree_attention", "SiblingVisible", _mask_bug(_siblings_visible)),
    "mask: every shallower node visible (cousins)": ("specdec.tree_attention", "SiblingVisible",
                                                     _mask_bug(_by_depth)),
    "mask: the chain's causal mask": ("specdec.tree_attention", "SiblingVisible", _mask_bug(_causal)),
    "mask transposed": ("specdec.tree_attention", "MaskTransposed", _mask_bug(_transposed)),
    "positions: depth from 1": ("specdec.tree_attention", "PositionOffset", _mask_bug(_depth_from_one)),
    "positions: by node index": ("specdec.tree_attention", "PositionOffset", _mask_bug(_position_by_index)),
    "links: siblings descending": ("specdec.tree_links", "SiblingLinks", _links_descending),
    "links: retrieve_index without the batch offset": ("specdec.tree_links", "SiblingLinks", _links_local_index),
    "greedy: first match instead of the longest path": ("specdec.verify_tree_greedy", "LongestPath",
                                                         _greedy_with(K.first_match_path)),
    "greedy: ties to the larger index": ("specdec.verify_tree_greedy", "LongestPath", _greedy_with(_last_of_ties)),
    "greedy: siblings tried last first": ("specdec.verify_tree_greedy", "SiblingOrder",
                                          _greedy_order(_descending_first_match)),
    "greedy: no token after the path": ("specdec.verify_tree_greedy", "TreeBonus", _greedy_change(_no_bonus)),
    "greedy: the token after the path from the parent's row": ("specdec.verify_tree_greedy", "TreeBonus",
                                                                _greedy_change(_bonus_from_parent)),
    "greedy: the root checked as a draft": ("specdec.verify_tree_greedy", "TreeShape", _root_checked),
    "rejection: residual not updated between siblings": ("specdec.tree_rejection_sample", "ResidualUpdate",
                                                          _rejection(update=_no_update)),
    "rejection: residual max(q - p, 0)": ("specdec.tree_rejection_sample", "ResidualUpdate",
                                          _rejection(update=_q_minus_p)),
    "rejection: residual not renormalized": ("specdec.tree_rejection_sample", "ResidualUpdate",
                                             _rejection(update=_unnormalized)),
    "rejection: q never updated (without replacement)": ("specdec.tree_rejection_sample", "DraftUpdate",
                                                         _rejection(q_update=_q_never_updated)),
    "rejection: q updated for iid drafts": ("specdec.tree_rejection_sample", "DraftUpdate",
                                            _rejection(q_update=_q_always_updated)),
    "rejection: coin 0 accepts a zero-mass token": ("specdec.tree_rejection_sample", "ZeroMass",
                                                    _rejection(test=_zero_mass_accepted)),
    "rejection: q = 0 read as an infinite ratio": ("specdec.tree_rejection_sample", "ZeroMass",
                                                   _rejection(test=_inf_ratio)),
    "rejection: accept when p >= q without a coin": ("specdec.tree_rejection_sample", "ResidualUpdate",
                                                     _rejection(test=_no_coin)),
    "rejection: final draw with >=": ("specdec.tree_rejection_sample", "TreeInverseCDF",
                                      _with_sample(K.tree_rejection_sample, _ge_sample)),
    "rejection: siblings last first": ("specdec.tree_rejection_sample", "SiblingOrder",
                                       _reversed_children(K.tree_rejection_sample)),
    "rejection: leaf bonus from the parent's row": ("specdec.tree_rejection_sample", "TreeBonus",
                                                    _leaf_bonus_from_parent),
    "target-only: no accumulation": ("specdec.tree_sample_target_only", "CoinAccumulate",
                                     partial(_TO, level_rule=_own_mass)),
    "target-only: each child's own coin": ("specdec.tree_sample_target_only", "CoinPerNode",
                                           partial(_TO, coin_of=lambda node, child: child)),
    "target-only: rejected tokens not removed": ("specdec.tree_sample_target_only", "RemovedTokens",
                                                 partial(_TO, remove=False)),
    "target-only: siblings last first": ("specdec.tree_sample_target_only", "SiblingOrder",
                                         _reversed_children(_TO)),
    "target-only: final draw with >=": ("specdec.tree_sample_target_only", "TreeInverseCDF",
                                        _with_sample(_TO, _ge_sample)),
    "typical: max(eps, ...) threshold": ("specdec.typical_acceptance", "TypicalThreshold",
                                         partial(_TY, threshold=_max_threshold)),
    "typical: entropy in bits": ("specdec.typical_acceptance", "TypicalThreshold",
                                 partial(_TY, threshold=_bits_threshold)),
    "typical: p >= t accepted": ("specdec.typical_acceptance", "TypicalThreshold",
                                 partial(_TY, accept=lambda px, t: px >= t)),
    "typical: fallback from the whole target": ("specdec.typical_acceptance", "TypicalFallback",
                                                partial(_TY, restrict=False)),
    "typical: -1 inside num_draft read as the last id": ("specdec.typical_acceptance", "DraftPadding",
                                                         _padding_accepted),
    "typical: every draft judged by row 0's threshold": ("specdec.typical_acceptance", "TypicalThreshold",
                                                         _typical_rows(accept_row=lambda j: 0)),
    "typical: the final draw restricted by row 0's threshold": ("specdec.typical_acceptance", "TypicalFallback",
                                                                _typical_rows(final_row=lambda j: 0)),
    "typical: the final draw keeps p > t (drops p == t)": ("specdec.typical_acceptance", "TypicalFallback",
                                                           _typical_rows(keep=lambda p, t: p > t)),
    "typical: drafts past num_draft not checked": ("specdec.typical_acceptance", "DraftPadding", _padding_unchecked),
    "typical: rows checked to 1e-3": ("specdec.typical_acceptance", "RowSumTolerance", _with_tolerance(_TY, 1e-3)),
    "typical: rows checked to 1e-5": ("specdec.typical_acceptance", "RowSumTolerance", _with_tolerance(_TY, 1e-5)),
    "target-only: a repeated sibling token's mass counted once": ("specdec.tree_sample_target_only", "DuplicateMass",
                                                                   partial(_TO, level_rule=_dedup_mass)),
    "target-only: rows checked to 1e-3": ("specdec.tree_sample_target_only", "RowSumTolerance",
                                          _with_tolerance(_TO, 1e-3)),
    "target-only: rows checked to 1e-5": ("specdec.tree_sample_target_only", "RowSumTolerance",
                                          _with_tolerance(_TO, 1e-5)),
    "rejection: residual recomputed from p at each later sibling": ("specdec.tree_rejection_sample", "ResidualUpdate",
                                                                    _rejection_fresh_state()),
    "rejection: strict r / q > u": ("specdec.tree_rejection_sample", "CoinEquality", _rejection(test=_strict_test)),
    "rejection: rows checked to 1e-3": ("specdec.tree_rejection_sample", "RowSumTolerance",
                                        _with_tolerance(K.tree_rejection_sample, 1e-3)),
    "rejection: rows checked to 1e-5": ("specdec.tree_rejection_sample", "RowSumTolerance",
                                        _with_tolerance(K.tree_rejection_sample, 1e-5)),
}


def bug(name: str) -> Implementation:
    op, _, kernel = TREE_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: K.VARIANTS[op]} if op in K.VARIANTS else {})


"""The token-tree bug corpus: wrong tree kernels and samplers written the way engines
and papers' reference code go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_spec_trees).

TREE_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

from functools import partial

import numpy as np

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
}


def bug(name: str) -> Implementation:
    op, _, kernel = TREE_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: K.VARIANTS[op]} if op in K.VARIANTS else {})


CORRECT = {"numpy token trees": partial(Implementation, "numpy token trees", K.OPS, variants=K.VARIANTS)}

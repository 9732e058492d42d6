"""Token trees (SpecInfer, EAGLE, Medusa): the attention mask and position ids of a
draft tree, SGLang's linked-list layout of it, and greedy tree verification.

A request's tree is a parent array over N nodes: node 0 is the root, the last token
already committed (not a draft), and every other node i has a parent in [0, i):
parents are numbered before their children, as every engine builds its trees.

    mask[i, j]   = j is i or an ancestor of i            (each node sees its path)
    positions[i] = prefix_len + depth(i)                  (the root at prefix_len)

The prefix's columns (the committed tokens before the root) are visible to every
node and left out of `mask`. Greedy verification accepts the longest path from the
root whose every token equals the target's argmax at its parent, then emits the
target's argmax at the path's last node:

    accepted(i) = all(draft[j] == target[parent[j]] for j on the path root -> i, j != root)
    tokens      = [draft[n_1], ..., draft[n_L], target[n_L]]

Shapes: parents, draft_tokens, target_tokens [B, N] (N >= 1: the same node count for
every request, as engines pad their trees); outputs [B, N] padded with -1.

References: Miao et al., SpecInfer (arXiv:2305.09781); Li et al., EAGLE
(arXiv:2401.15077); Cai et al., Medusa (arXiv:2401.10774); SGLang's
`build_tree_kernel_efficient` and `verify_tree_greedy` (retrieve_index,
retrieve_next_token, retrieve_next_sibling).
"""

from __future__ import annotations

import enum

import numpy as np

from ref.arguments import member

__all__ = ["PAD", "PathRule", "check_ids", "check_parents", "depths", "ancestor_mask", "tree_attention", "tree_links",
           "parents_from_links", "parents_from_choices", "parents_from_topk", "verify_tree_greedy",
           "children"]

PAD = -1  # an unused output slot, an absent link, the root's parent


class PathRule(enum.Enum):
    """Which accepted path greedy verification returns."""

    LONGEST = "longest"  # the deepest accepted node; ties: the smallest node index (Medusa, EAGLE: argmax of lengths)
    FIRST_MATCH = "first_match"  # descend from the root, at each level the first matching child (SGLang)


def check_ids(x, name: str, ndim: int) -> np.ndarray:
    """`x` as an int32 or int64 array of `ndim` axes (engines' id types; others refused), as int64."""
    a = np.asarray(x)
    if a.dtype not in (np.int32, np.int64):
        raise TypeError(f"{name}: expected an int32 or int64 array, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} axes, got shape {a.shape}")
    return a.astype(np.int64)


def check_parents(parents) -> np.ndarray:
    """parents [B, N] as int64 after the checks: N >= 1, parents[:, 0] == -1 and
    0 <= parents[:, i] < i for i >= 1 (a parent before its child: no cycles)."""
    p = check_ids(parents, "parents", 2)
    if p.shape[1] < 1:
        raise ValueError(f"parents: a tree has at least its root (N >= 1), got shape {p.shape}")
    if (p[:, 0] != PAD).any():
        raise ValueError("parents: the root (node 0) has parent -1")
    index = np.arange(p.shape[1])
    if ((p[:, 1:] < 0) | (p[:, 1:] >= index[1:])).any():
        raise ValueError("parents: node i >= 1 needs a parent in [0, i)")
    return p


def _same_shape(a: np.ndarray, name: str, shape: tuple[int, ...]) -> None:
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} (the parents'), got {a.shape}")


def depths(parents) -> np.ndarray:
    """depth [B, N] int64: the root 0, a child its parent's depth + 1."""
    p = check_parents(parents)
    depth = np.zeros(p.shape, np.int64)
    rows = np.arange(p.shape[0])[:, None]  # [B, 1]
    up = p.copy()
    for _ in range(p.shape[1] - 1):  # one pass per possible level: an ancestor more each time
        depth += up >= 0
        up = np.where(up >= 0, p[rows, np.maximum(up, 0)], PAD)
    return depth


def ancestor_mask(parents) -> np.ndarray:
    """mask [B, N, N] bool: mask[b, i, j] iff node j is node i or one of its ancestors."""
    p = check_parents(parents)
    b, n = p.shape
    mask = np.broadcast_to(np.eye(n, dtype=bool), (b, n, n)).copy()
    rows, nodes = np.arange(b)[:, None], np.arange(n)[None, :]  # [B, 1], [1, N]
    up = p.copy()
    for _ in range(n - 1):
        has = up >= 0
        mask[np.broadcast_to(rows, up.shape)[has], np.broadcast_to(nodes, up.shape)[has], up[has]] = True
        up = np.where(has, p[rows, np.maximum(up, 0)], PAD)
    return mask


def tree_attention(parents, prefix_lens) -> tuple[np.ndarray, np.ndarray]:
    """The tree's attention mask [B, N, N] bool and position ids [B, N] int64
    (prefix_lens[b] + depth): what the target model is run with to score every node
    in one pass. prefix_lens [B]: the committed tokens before the root, >= 0."""
    p = check_parents(parents)
    lens = check_ids(prefix_lens, "prefix_lens", 1)
    _same_shape(lens, "prefix_lens", p.shape[:1])
    if (lens < 0).any():
        raise ValueError("prefix_lens: expected lengths >= 0")
    return ancestor_mask(p), lens[:, None] + depths(p)


def children(parents) -> list[list[list[int]]]:
    """children[b][i]: node i's children in ascending index (the sibling order)."""
    p = check_parents(parents)
    out = [[[] for _ in range(p.shape[1])] for _ in range(p.shape[0])]
    for b, i in zip(*np.nonzero(p >= 0)):  # np.nonzero goes row by row, i ascending
        out[b][p[b, i]].append(int(i))
    return out


def tree_links(parents) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SGLang's layout of the trees: retrieve_index [B, N] (b * N + i, a node's row in
    the flattened batch), retrieve_next_token [B, N] (a node's first child: the
    smallest index, -1 for a leaf) and retrieve_next_sibling [B, N] (the next child of
    the same parent by index, -1 for the last), all int64."""
    p = check_parents(parents)
    b, n = p.shape
    index = np.arange(b * n, dtype=np.int64).reshape(b, n)
    first = np.full((b, n), PAD, np.int64)
    sibling = np.full((b, n), PAD, np.int64)
    # a node's next sibling: the smallest later node with the same parent
    same = (p[:, :, None] == p[:, None, :]) & (np.arange(n)[None, :, None] < np.arange(n)[None, None, :])
    same[:, 0, :] = False  # the root has no siblings
    has = same.any(axis=2)
    sibling[has] = np.argmax(same, axis=2)[has]
    # a node's first child: the smallest node whose parent it is
    child = p[:, None, :] == np.arange(n)[None, :, None]  # [B, parent, child]
    has = child.any(axis=2)
    first[has] = np.argmax(child, axis=2)[has]
    return index, first, sibling


def parents_from_links(next_token, next_sibling) -> np.ndarray:
    """The parent array [B, N] of trees given as first-child / next-sibling links
    (SGLang's retrieve_next_token and retrieve_next_sibling): the inverse of tree_links.
    Refuses links that do not form a tree numbered parents first."""
    first = check_ids(next_token, "next_token", 2)
    sib = check_ids(next_sibling, "next_sibling", 2)
    _same_shape(sib, "next_sibling", first.shape)
    b, n = first.shape
    parents = np.full((b, n), -2, np.int64)
    parents[:, 0] = PAD if n else parents[:, 0]
    for r in range(b):
        for i in range(n):
            c = first[r, i]
            while c != PAD:
                if not 0 < c < n or parents[r, c] != -2:
                    raise ValueError(f"next_token/next_sibling: row {r}: node {c} is not a fresh node")
                parents[r, c] = i
                c = sib[r, c]
    if (parents == -2).any():
        raise ValueError("next_token/next_sibling: a node no parent links to")
    return check_parents(parents)


def parents_from_choices(choices) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """A tree given as Medusa's / EAGLE's `choices` (every node a path of top-k ranks
    from the root, e.g. [[0], [1], [0, 0]]) as a parent array [N] (N = len(choices) + 1)
    and the node order: the root, then the paths sorted by (length, path), as Medusa's
    generate_medusa_buffers orders them. Every prefix of a path must be a choice too."""
    paths = [tuple(int(r) for r in c) for c in choices]
    if any(len(c) == 0 or min(c) < 0 for c in paths) or len(set(paths)) != len(paths):
        raise ValueError("choices: expected distinct non-empty paths of ranks >= 0")
    order = [()] + sorted(paths, key=lambda c: (len(c), c))
    index = {c: i for i, c in enumerate(order)}
    missing = [c for c in paths if c[:-1] not in index]
    if missing:
        raise ValueError(f"choices: the prefix of {list(missing[0])} is not a choice")
    parents = np.array([PAD] + [index[c[:-1]] for c in order[1:]], np.int64)
    return parents, order


def parents_from_topk(parent_list, selected_index, *, topk: int) -> np.ndarray:
    """EAGLE's (and SGLang's build_tree_kernel_efficient's) tree encoding as parents [B, N].

    The drafter scores `topk` children per expanded node, flattened: candidates
    [0, topk) are the root's; block t >= 1 (candidates [t*topk, (t+1)*topk)) holds the
    children of the candidate `parent_list[b, t]`. selected_index [B, N-1]: the chosen
    candidates, node i = selected_index[i-1]. A node's parent is the root for block 0,
    else the node whose candidate is parent_list[b, block]; it must have been chosen."""
    plist = check_ids(parent_list, "parent_list", 2)
    sel = check_ids(selected_index, "selected_index", 2)
    if plist.shape[0] != sel.shape[0]:
        raise ValueError(f"parent_list, selected_index: {plist.shape[0]} and {sel.shape[0]} requests")
    k = int(topk)
    if k < 1 or k != topk:
        raise ValueError(f"topk: expected an integer >= 1, got {topk!r}")
    b, n = sel.shape[0], sel.shape[1] + 1
    block = sel // k  # [B, N-1]
    if (sel < 0).any() or (block >= plist.shape[1]).any():
        raise ValueError("selected_index: a candidate outside parent_list's blocks")
    rows = np.arange(b)[:, None]
    wanted = np.where(block > 0, plist[rows, block], PAD)  # [B, N-1]: the parent's candidate
    match = sel[:, None, :] == wanted[:, :, None]  # [B, node, candidate position]
    found = match.any(axis=2)
    if ((block > 0) & ~found).any():
        raise ValueError("selected_index: a node whose parent candidate was not selected")
    parents = np.full((b, n), PAD, np.int64)
    parents[:, 1:] = np.where(block > 0, np.argmax(match, axis=2) + 1, 0)
    return check_parents(parents)


def verify_tree_greedy(parents, draft_tokens, target_tokens, *,
                       path: str = "longest") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy tree verification.

    parents [B, N]; draft_tokens [B, N] int (node i's token; the root's is the last
    committed token and is not checked); target_tokens [B, N] int (the target's argmax
    after node i). Returns tokens [B, N] (the accepted drafts, then the target's argmax
    at the last accepted node, -1 after), nodes [B, N] (0, then the accepted nodes in
    order, -1 after) and num_accepted [B], all int64. `path`: PathRule."""
    rule = member(path, PathRule, "path")
    p = check_parents(parents)
    draft = check_ids(draft_tokens, "draft_tokens", 2)
    target = check_ids(target_tokens, "target_tokens", 2)
    _same_shape(draft, "draft_tokens", p.shape)
    _same_shape(target, "target_tokens", p.shape)
    if (target < 0).any() or (draft[:, 1:] < 0).any():  # -1 pads the outputs: a token id is never negative
        raise ValueError("draft_tokens, target_tokens: token ids must be >= 0 (the root's draft token is not read)")
    b, n = p.shape
    rows = np.arange(b)[:, None]
    match = np.ones((b, n), bool)  # [B, N]: node i's token is the target's argmax at its parent
    match[:, 1:] = draft[:, 1:] == target[rows, p[:, 1:]]
    last = _longest(p, match) if rule is PathRule.LONGEST else _first_match(p, match)
    return _emit(p, draft, target, last)


def _longest(p: np.ndarray, match: np.ndarray) -> np.ndarray:
    """[B]: the deepest node whose whole path matches (the smallest index on ties)."""
    mask = ancestor_mask(p)  # [B, N, N]
    accepted = ~(mask & ~match[:, None, :]).any(axis=2)  # [B, N]: no mismatch on the path
    score = np.where(accepted, depths(p), -1)
    return np.argmax(score, axis=1)  # first index of the largest depth


def _first_match(p: np.ndarray, match: np.ndarray) -> np.ndarray:
    """[B]: descend from the root, taking at each level the first child (by index) that matches."""
    b, n = p.shape
    cur = np.zeros(b, np.int64)
    nodes = np.arange(n)[None, :]
    for _ in range(n - 1):
        candidate = (p == cur[:, None]) & match & (nodes > 0)  # [B, N]
        found = candidate.any(axis=1)
        cur = np.where(found, np.argmax(candidate, axis=1), cur)
    return cur


def _emit(p: np.ndarray, draft: np.ndarray, target: np.ndarray, last: np.ndarray):
    """The outputs for each request's accepted path ending at node last[b]."""
    b, n = p.shape
    rows = np.arange(b)[:, None]  # [B, 1]
    path = np.full((b, n), PAD, np.int64)  # [B, N]: last, its parent, ..., the root, then -1
    cur = last.copy()
    for j in range(n):
        path[:, j] = cur
        cur = np.where(cur >= 0, p[rows[:, 0], np.maximum(cur, 0)], PAD)
    accepted = (path >= 0).sum(axis=1) - 1  # [B]: the path's nodes but the root
    src = accepted[:, None] - np.arange(n)[None, :]  # nodes[b, d] = path[b, accepted - d]
    nodes = np.where(src >= 0, path[rows, np.maximum(src, 0)], PAD)
    after = np.concatenate([nodes[:, 1:], np.full((b, 1), PAD, np.int64)], axis=1)  # [B, N]: the next node
    tokens = np.where(after >= 0, draft[rows, np.maximum(after, 0)], PAD)
    tokens[rows[:, 0], accepted] = target[rows[:, 0], last]
    return tokens, nodes, accepted.astype(np.int64)

"""Token-tree kernels for the default run, written the way an engine's host code
walks its trees and independently of the oracles (this module imports nothing from
ref):

- the mask and positions by walking each node's parent pointers to the root;
- SGLang's links by inserting nodes from the last to the first at the head of their
  parent's child list (what build_tree_kernel_efficient does);
- greedy verification by a depth-first search over those links (longest) or a
  descent through them (first match);
- the samplers per request over the links, one level at a time, the final draw by
  a running sum over the vocabulary.

The steps are public so the bug corpus (tests/corpus/specdec_trees.py) composes its
wrong kernels from the same code with one step changed.
"""

from __future__ import annotations

import math

import numpy as np

NAME = "numpy token trees"
VERSION = np.__version__
TOL = 1e-4  # |sum - 1| of a probability row (the spec's one tolerance)


# ------------------------------------------------------------------ checks

def ints(x, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in (np.int32, np.int64):
        raise TypeError(f"{name}: int32/int64 expected, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: {ndim} axes expected, got {a.shape}")
    return a.astype(np.int64)


def tree(parents) -> np.ndarray:
    p = ints(parents, "parents", 2)
    if p.shape[1] == 0:
        raise ValueError("parents: no root")
    for row in p:
        if row[0] != -1 or any(not 0 <= row[i] < i for i in range(1, len(row))):
            raise ValueError("parents: not a tree numbered parents first")
    return p


def shaped(a: np.ndarray, name: str, shape) -> np.ndarray:
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: shape {a.shape}, expected {tuple(shape)}")
    return a


def probs(x, name: str, shape) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: float32/float64 expected, got {a.dtype}")
    a = shaped(a, name, shape).astype(np.float64)
    if not np.isfinite(a).all() or (a < 0).any():
        raise ValueError(f"{name}: not probabilities")
    for row in a.reshape(-1, a.shape[-1]) if a.size else ():
        if abs(math.fsum(row) - 1) > TOL:
            raise ValueError(f"{name}: a row does not sum to 1")
    return a


def coins(x, name: str, shape) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.float64:
        raise TypeError(f"{name}: float64 expected, got {a.dtype}")
    a = shaped(a, name, shape)
    if ((a < 0) | (a >= 1)).any() or np.isnan(a).any():
        raise ValueError(f"{name}: outside [0, 1)")
    return a


# ------------------------------------------------------------------ tree structure

def ancestors(row: np.ndarray, i: int) -> list[int]:
    """i and its ancestors, i first."""
    out = [i]
    while row[out[-1]] >= 0:
        out.append(int(row[out[-1]]))
    return out


def tree_attention(parents, prefix_lens):
    p = tree(parents)
    lens = shaped(ints(prefix_lens, "prefix_lens", 1), "prefix_lens", p.shape[:1])
    if (lens < 0).any():
        raise ValueError("prefix_lens: negative")
    b, n = p.shape
    mask = np.zeros((b, n, n), bool)
    pos = np.zeros((b, n), np.int64)
    for r in range(b):
        for i in range(n):
            path = ancestors(p[r], i)
            mask[r, i, path] = True
            pos[r, i] = lens[r] + len(path) - 1
    return mask, pos


def links(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First child and next sibling: nodes from last to first, each put at the head
    of its parent's list, so lists come out in ascending index."""
    n = len(row)
    first = np.full(n, -1, np.int64)
    sibling = np.full(n, -1, np.int64)
    for i in range(n - 1, 0, -1):
        sibling[i] = first[row[i]]
        first[row[i]] = i
    return first, sibling


def tree_links(parents):
    p = tree(parents)
    b, n = p.shape
    pairs = [links(row) for row in p]
    first = np.array([f for f, _ in pairs], np.int64).reshape(b, n)
    sibling = np.array([s for _, s in pairs], np.int64).reshape(b, n)
    return np.arange(b * n, dtype=np.int64).reshape(b, n), first, sibling


def kids(first: np.ndarray, sibling: np.ndarray, i: int) -> list[int]:
    out, c = [], int(first[i])
    while c != -1:
        out.append(c)
        c = int(sibling[c])
    return out


def emit(path: list[int], draft_row, after_token: int, n: int):
    tokens = np.full(n, -1, np.int64)
    nodes = np.full(n, -1, np.int64)
    nodes[:len(path)] = path
    tokens[:len(path) - 1] = [draft_row[c] for c in path[1:]]
    tokens[len(path) - 1] = after_token
    return tokens, nodes, len(path) - 1


def longest_path(first, sibling, ok) -> list[int]:
    """Depth-first over the accepted nodes: the deepest, the smallest index on ties."""
    best = [0]
    stack = [[0]]
    while stack:
        path = stack.pop()
        if len(path) > len(best) or (len(path) == len(best) and path[-1] < best[-1]):
            best = path
        stack += [path + [c] for c in kids(first, sibling, path[-1]) if ok[c]]
    return best


def first_match_path(first, sibling, ok) -> list[int]:
    path = [0]
    while True:
        nxt = [c for c in kids(first, sibling, path[-1]) if ok[c]]
        if not nxt:
            return path
        path.append(nxt[0])


def verify_tree_greedy(parents, draft_tokens, target_tokens, *, path="longest", search=None):
    if path not in ("longest", "first_match"):
        raise ValueError(f"path: unknown {path!r}")
    p = tree(parents)
    draft = shaped(ints(draft_tokens, "draft_tokens", 2), "draft_tokens", p.shape)
    target = shaped(ints(target_tokens, "target_tokens", 2), "target_tokens", p.shape)
    if target.min(initial=0) < 0 or draft[:, 1:].min(initial=0) < 0:
        raise ValueError("token ids: negative")
    search = search or (longest_path if path == "longest" else first_match_path)
    b, n = p.shape
    out = (np.full((b, n), -1, np.int64), np.full((b, n), -1, np.int64), np.zeros(b, np.int64))
    for r in range(b):
        first, sibling = links(p[r])
        ok = [i == 0 or draft[r, i] == target[r, p[r, i]] for i in range(n)]
        nodes = search(first, sibling, ok)
        out[0][r], out[1][r], out[2][r] = emit(nodes, draft[r], int(target[r, nodes[-1]]), n)
    return out


# ------------------------------------------------------------------ samplers

def sample(mass: np.ndarray, u: float) -> int:
    """Inverse CDF: the first token whose running mass passes u * total."""
    cut = u * np.cumsum(mass)[-1]
    run = np.cumsum(mass)
    for token in range(len(mass)):
        if run[token] > cut:
            return token
    return int(np.flatnonzero(mass > 0)[-1])


def sampler_inputs(parents, draft_tokens, target_probs, uniforms, final_uniforms):
    p = tree(parents)
    b, n = p.shape
    t = np.asarray(target_probs)
    v = t.shape[-1] if t.ndim == 3 else -1
    target = probs(t, "target_probs", (b, n, v))
    draft = shaped(ints(draft_tokens, "draft_tokens", 2), "draft_tokens", (b, n))
    if ((draft < 0) | (draft >= v)).any():
        raise ValueError("draft_tokens: outside the vocabulary")
    return p, draft, target, coins(uniforms, "uniforms", (b, n)), coins(final_uniforms, "final_uniforms", (b,))


def accept_test(residual, q, x, u) -> bool:
    return bool(q[x] > 0 and residual[x] > 0 and residual[x] / q[x] >= u)


def residual_after(residual, q):
    diff = np.maximum(residual - q, 0)
    return diff / diff.sum() if diff.sum() > 0 else residual


def q_after(q, x, drafts):
    if drafts == "iid":
        return q
    q = q.copy()
    q[x] = 0
    return q / q.sum() if q.sum() > 0 else q


def walk(p_row, first, sibling, level):
    """Runs level(node, children) -> (child or None, token) from the root; the outputs."""
    n = len(p_row)
    tokens, nodes = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    node, depth = 0, 0
    nodes[0] = 0
    while True:
        child, token = level(node, kids(first, sibling, node))
        tokens[depth] = token
        if child is None:
            return tokens, nodes, depth
        depth += 1
        node = nodes[depth] = child


def tree_rejection_sample(parents, draft_tokens, target_probs, draft_probs, uniforms, final_uniforms, *,
                          drafts="iid", test=accept_test, update=residual_after, q_update=q_after):
    if drafts not in ("iid", "without_replacement"):
        raise ValueError(f"drafts: unknown {drafts!r}")
    p, draft, target, u, final = sampler_inputs(parents, draft_tokens, target_probs, uniforms, final_uniforms)
    qs = probs(draft_probs, "draft_probs", target.shape)
    b, n = p.shape
    out = (np.full((b, n), -1, np.int64), np.full((b, n), -1, np.int64), np.zeros(b, np.int64))
    for r in range(b):
        first, sibling = links(p[r])

        def level(node, children, r=r):
            residual, q = target[r, node], qs[r, node]
            for c in children:
                x = draft[r, c]
                if test(residual, q, x, u[r, c]):
                    return c, int(x)
                residual, q = update(residual, q), q_update(q, x, drafts)
            return None, sample(residual, final[r])

        out[0][r], out[1][r], out[2][r] = walk(p[r], first, sibling, level)
    return out


def target_only_level(target_row, coin, tokens, children, single, acc_scale):
    """One level of SGLang's target-only rule: (accepted child or None, the rejected tokens)."""
    acc, rejected = 0.0, []
    for c in children:
        mass = target_row[tokens[c]]
        acc += mass
        if coin <= acc / acc_scale or mass >= single:
            return c, rejected
        rejected.append(int(tokens[c]))
    return None, rejected


def tree_sample_target_only(parents, draft_tokens, target_probs, uniforms, final_uniforms, *,
                            threshold_single=1.0, threshold_acc=1.0, level_rule=target_only_level,
                            coin_of=lambda node, child: node, remove=True):
    single, acc_scale = float(np.asarray(threshold_single)), float(np.asarray(threshold_acc))
    if not (0 < single <= 1 and 0 < acc_scale <= 1):
        raise ValueError("thresholds: outside (0, 1]")
    p, draft, target, u, final = sampler_inputs(parents, draft_tokens, target_probs, uniforms, final_uniforms)
    b, n = p.shape
    out = (np.full((b, n), -1, np.int64), np.full((b, n), -1, np.int64), np.zeros(b, np.int64))
    for r in range(b):
        first, sibling = links(p[r])

        def level(node, children, r=r):
            coin = u[r, coin_of(node, children[0] if children else node)]
            child, rejected = level_rule(target[r, node], coin, draft[r], children, single, acc_scale)
            if child is not None:
                return child, int(draft[r, child])
            left = target[r, node].copy()
            if remove:
                left[rejected] = 0
            return None, sample(left if left.sum() > 0 else target[r, node], final[r])

        out[0][r], out[1][r], out[2][r] = walk(p[r], first, sibling, level)
    return out


def medusa_threshold(row, eps, alpha, log=np.log):
    live = row[row > 0]
    return min(eps, alpha * math.exp(-float(-(live * log(live)).sum())))


def typical_acceptance(target_probs, draft_tokens, num_draft, final_uniforms, *, posterior_threshold=0.09,
                       posterior_alpha=0.3, threshold=medusa_threshold, accept=lambda px, t: px > t,
                       restrict=True):
    eps, alpha = float(np.asarray(posterior_threshold)), float(np.asarray(posterior_alpha))
    t_all = np.asarray(target_probs)
    if t_all.dtype not in (np.float32, np.float64):
        raise TypeError("target_probs: float32/float64 expected")
    if t_all.ndim != 3 or t_all.shape[1] < 1:
        raise ValueError("target_probs: [B, k+1, V] expected")
    b, k1, v = t_all.shape
    draft = shaped(ints(draft_tokens, "draft_tokens", 2), "draft_tokens", (b, k1 - 1))
    num = shaped(ints(num_draft, "num_draft", 1), "num_draft", (b,))
    final = coins(final_uniforms, "final_uniforms", (b,))
    if ((num < 0) | (num > k1 - 1)).any():
        raise ValueError("num_draft: outside [0, k]")
    out = np.full((b, k1), -1, np.int64)
    for r in range(b):
        if any(not (-1 <= x < v) for x in draft[r, :num[r]]) or (draft[r, num[r]:] != -1).any():
            raise ValueError("draft_tokens: bad ids or padding")
        rows = probs(t_all[r, :num[r] + 1], "target_probs", (num[r] + 1, v))
        j = 0
        while j < num[r]:
            x = draft[r, j]
            if x < 0 or not accept(rows[j, x], threshold(rows[j], eps, alpha)):
                break
            out[r, j] = x
            j += 1
        t = threshold(rows[j], eps, alpha)
        out[r, j] = sample(np.where(rows[j] >= t, rows[j], 0.0) if restrict else rows[j], final[r])
    return out


OPS = {
    "specdec.tree_attention": tree_attention,
    "specdec.tree_links": tree_links,
    "specdec.verify_tree_greedy": verify_tree_greedy,
    "specdec.tree_rejection_sample": tree_rejection_sample,
    "specdec.tree_sample_target_only": tree_sample_target_only,
    "specdec.typical_acceptance": typical_acceptance,
}
VARIANTS = {"specdec.verify_tree_greedy": {"path": ["longest", "first_match"]},
            "specdec.tree_rejection_sample": {"drafts": ["iid", "without_replacement"]}}

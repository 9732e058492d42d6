"""Token-tree kernels for the default run, written the way an engine's host code
walks its trees and independently of the oracles (this module imports nothing from
ref):

- the mask and positions by walking each node's parent pointers to the root;
- SGLang's links by inserting nodes from the last to the first at the head of their
  parent's child list (what build_tree_kernel_efficient does);
- greedy verification by a depth-first search over those links (longest) or a
  descent through them (first match);
- the samplers per request over the links, the residual kept unnormalized and
  divided out where it is read.

The steps are public so the bug corpus (tests/corpus/specdec_trees.py) composes its
wrong kernels from the same code with one step changed.
"""

from __future__ import annotations

import math

import numpy as np

NAME = "numpy token trees"
VERSION = np.__version__
TOL = 1e-5


# ------------------------------------------------------------------ checks

def ints(x, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: integer array expected, got {a.dtype}")
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
    search = search or (longest_path if path == "longest" else first_match_path)
    b, n = p.shape
    out = (np.full((b, n), -1, np.int64), np.full((b, n), -1, np.int64), np.zeros(b, np.int64))
    for r in range(b):
        first, sibling = links(p[r])
        ok = [i == 0 or draft[r, i] == target[r, p[r, i]] for i in range(n)]
        nodes = search(first, sibling, ok)
        out[0][r], out[1][r], out[2][r] = emit(nodes, draft[r], int(target[r, nodes[-1]]), n)
    return out


OPS = {
    "specdec.tree_attention": tree_attention,
    "specdec.tree_links": tree_links,
    "specdec.verify_tree_greedy": verify_tree_greedy,
}
VARIANTS = {"specdec.verify_tree_greedy": {"path": ["longest", "first_match"]}}

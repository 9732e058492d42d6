"""Token trees: the attention mask and positions, SGLang's links, greedy verification.

  specdec.tree_attention      exact: parents [B, N], prefix_lens [B] -> (mask [B, N, N], positions [B, N])
  specdec.tree_links          exact: parents [B, N] -> SGLang's (retrieve_index, next_token, next_sibling)
  specdec.verify_tree_greedy  exact: parents, draft_tokens, target_tokens [B, N] -> (tokens, nodes, num_accepted)

Flags shared with tree_sampling.py are explained here (TREE_FLAGS) and imported there.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.specdec.catalog.common import AREA
from ref.specdec.tree import PathRule, tree_attention, tree_links, verify_tree_greedy
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact, compare_parts
from ref.testing.flags import EMPTY_INPUT, INVALID_INPUT, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "TREE_FLAGS", "random_parents", "TREE"]

TREE_FLAGS = {
    "TreeShape": Flag("a tree walked by depth or by its first branch only, or node 0 treated as a draft",
                      "a valid tree's nodes get another path: wrong tokens accepted or emitted"),
    "TreeBonus": Flag("no token after the accepted path, or the one at the wrong node (the parent's, the root's)",
                       "a step emits one token too few, or a token the target did not predict there"),
    "SiblingOrder": Flag("siblings tried in another order than their index (descending, by token id)",
                         "another sibling is accepted: the output differs from the engine's with the same numbers"),
}

FLAGS = {
    **TREE_FLAGS,
    "SiblingVisible": Flag("the tree mask lets a node see a sibling or a cousin (a node off its path)",
                           "a draft token attends to another branch's tokens: the target scores a context that "
                           "does not exist"),
    "MaskTransposed": Flag("the mask stored as (key, query): a node sees its descendants instead of its ancestors",
                           "every draft but the root is scored without its own prefix"),
    "PositionOffset": Flag("position ids off by one: depth counted from 1, or the root at prefix_len - 1",
                           "RoPE rotates every draft token by the wrong angle"),
    "SiblingLinks": Flag("SGLang's links built another way: the first child the last one, siblings in descending "
                         "order, retrieve_index not offset by b * N",
                         "the engine's verify kernel walks siblings in another order or reads another request"),
    "LongestPath": Flag("greedy verification taking the first matching child at each level, or the first path with "
                        "a match, instead of the longest accepted path",
                        "fewer tokens accepted per step than the tree allows (a slower, still valid, output)"),
}

TREE = {  # an EAGLE-shaped tree of 7 nodes: two children of the root, cousins at depth 2, a depth-3 leaf
    "parents": [-1, 0, 0, 1, 1, 2, 3],
}
PATH = Variant("path", PathRule, PathRule.LONGEST,
               "which accepted path greedy verification returns: the longest (Medusa, EAGLE) or the first matching "
               "child at each level (SGLang's verify_tree_greedy)")


def random_parents(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    """[B, N] int64: node i's parent drawn uniformly from [0, i)."""
    out = np.full((b, n), -1, np.int64)
    for i in range(1, n):
        out[:, i] = rng.integers(0, i, b)
    return out


def _ints(**arrays) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.int64) for k, v in arrays.items()}


# ------------------------------------------------------------------ tree_attention

def _attention_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("specdec.tree_attention"))
    mask_flags = ("SiblingVisible", "MaskTransposed", "PositionOffset")

    def v(comment, flags, parents, lens, result="valid", dtype=np.int64):
        return VectorSpec(comment, tuple(flags), Case({"parents": np.asarray(parents, dtype),
                                                       "prefix_lens": np.asarray(lens, dtype)}, {}), result)

    return [
        v("a chain of 4: the mask is lower triangular, positions prefix_len..prefix_len+3", mask_flags,
          [[-1, 0, 1, 2]], [7]),
        v("a star (3 children of the root): siblings never see each other", mask_flags, [[-1, 0, 0, 0]], [3]),
        v("an EAGLE-shaped tree beside a chain: cousins hidden, per-request prefix lengths 0 and 5",
          mask_flags + ("TreeShape",), [TREE["parents"], [-1, 0, 1, 2, 3, 4, 5]], [0, 5]),
        v("a parent far back (node 5 under node 1): depth is not the index", mask_flags,
          [[-1, 0, 1, 2, 0, 1]], [2]),
        v("a root alone: mask [[True]], position prefix_len", (EMPTY_INPUT, "PositionOffset"), [[-1]], [9]),
        v("no requests", (EMPTY_INPUT,), np.zeros((0, 3)), np.zeros(0)),
        v("int32 parents and lengths", mask_flags, [TREE["parents"]], [4], dtype=np.int32),
        v("random trees of 12 nodes", (RANDOM,) + mask_flags, random_parents(rng, 3, 12), rng.integers(0, 100, 3)),
        v("a parent not before its child is rejected", (INVALID_INPUT,), [[-1, 2, 0]], [0], "invalid"),
        v("a root with a parent is rejected", (INVALID_INPUT,), [[0, 0]], [0], "invalid"),
        v("a second root (parent -1 at node 2) is rejected", (INVALID_INPUT,), [[-1, 0, -1]], [0], "invalid"),
        v("a negative prefix length is rejected", (INVALID_INPUT,), [[-1, 0]], [-1], "invalid"),
        v("prefix_lens not one per request is rejected", (INVALID_INPUT,), [[-1, 0]], [1, 2], "invalid"),
        v("a tree of no nodes is rejected", (INVALID_INPUT, EMPTY_INPUT), np.zeros((2, 0)), [0, 0], "invalid"),
        VectorSpec("float parents are rejected", (INVALID_INPUT,),
                   Case({"parents": np.float64([[-1, 0]]), "prefix_lens": np.int64([0])}, {}), "invalid"),
        v("1-d parents are rejected", (INVALID_INPUT,), [-1, 0, 1], [0], "invalid"),
        v("int16 parents and lengths are rejected (int32 or int64 ids)", (INVALID_INPUT,), [[-1, 0]], [0], "invalid",
          dtype=np.int16),
    ]


def _attention_example(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    b, n = int(rng.integers(0, 4)), int(rng.integers(1, 12))
    return Case(_ints(parents=random_parents(rng, b, n), prefix_lens=rng.integers(0, 50, b)), {})


def _seeded(make):
    return lambda supported: st.integers(0, 2**32 - 1).map(make)


# ------------------------------------------------------------------ tree_links

def _links_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("specdec.tree_links"))

    def v(comment, flags, parents, result="valid", dtype=np.int64):
        return VectorSpec(comment, tuple(flags), Case({"parents": np.asarray(parents, dtype)}, {}), result)

    return [
        v("an EAGLE-shaped tree: first children and sibling lists in index order", ("SiblingLinks", "TreeShape"),
          [TREE["parents"]]),
        v("a star of 4 children: one sibling list 1 -> 2 -> 3 -> 4", ("SiblingLinks",), [[-1, 0, 0, 0, 0]]),
        v("two requests: retrieve_index runs on across the batch (b * N + i)", ("SiblingLinks",),
          [[-1, 0, 0], [-1, 0, 1]]),
        v("a root alone: no links", (EMPTY_INPUT,), [[-1]]),
        v("no requests", (EMPTY_INPUT,), np.zeros((0, 4))),
        v("int32 parents", ("SiblingLinks",), [TREE["parents"]], dtype=np.int32),
        v("random trees of 10 nodes", (RANDOM, "SiblingLinks"), random_parents(rng, 3, 10)),
        v("a parent not before its child is rejected", (INVALID_INPUT,), [[-1, 1]], "invalid"),
        v("1-d parents are rejected", (INVALID_INPUT,), [-1, 0], "invalid"),
        VectorSpec("bool parents are rejected", (INVALID_INPUT,), Case({"parents": np.array([[True, False]])}, {}),
                   "invalid"),
    ]


def _links_example(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    return Case(_ints(parents=random_parents(rng, int(rng.integers(0, 4)), int(rng.integers(1, 12)))), {})


# ------------------------------------------------------------------ verify_tree_greedy

def _verify_case(parents, draft, target, path=None, dtype=np.int64) -> Case:
    arrays = {"parents": parents, "draft_tokens": draft, "target_tokens": target}
    return Case({k: np.asarray(a, dtype) for k, a in arrays.items()}, {} if path is None else {"path": path})


def _verify_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("specdec.verify_tree_greedy"))
    tree = TREE["parents"]
    # duplicate siblings: nodes 1 and 2 both carry the target's token 5; only node 2's subtree goes on
    dup = [-1, 0, 0, 1, 2, 4]
    dup_draft, dup_target = [0, 5, 5, 8, 6, 7], [5, 9, 6, 1, 7, 3]
    out = [
        VectorSpec("a tree whose accepted path runs through a cousin branch (depth 3)",
                   ("LongestPath", "TreeBonus", "TreeShape"), _verify_case([tree], [[9, 4, 5, 6, 7, 8, 1]],
                                                                           [[4, 6, 3, 1, 0, 0, 2]])),
        VectorSpec("nothing accepted: the target's token at the root", ("TreeBonus",),
                   _verify_case([tree], [[9, 4, 5, 6, 7, 8, 1]], [[3, 6, 3, 1, 0, 0, 2]])),
        VectorSpec("a whole chain accepted: the bonus is the target's token at the leaf", ("TreeBonus",),
                   _verify_case([[-1, 0, 1, 2]], [[0, 1, 2, 3]], [[1, 2, 3, 4]])),
        VectorSpec("the root's own token is not checked (it is the committed token)", ("TreeShape",),
                   _verify_case([[-1, 0]], [[7, 1]], [[1, 2]])),
        VectorSpec("the second sibling matches, the first does not", ("SiblingOrder", "LongestPath"),
                   _verify_case([[-1, 0, 0, 1, 2]], [[0, 3, 4, 5, 6]], [[4, 5, 6, 0, 0]])),
        VectorSpec("two accepted leaves of one depth: the smaller index wins", ("LongestPath",),
                   _verify_case([[-1, 0, 0, 1, 1]], [[0, 2, 3, 4, 4]], [[2, 4, 0, 1, 9]], path="longest")),
        VectorSpec("two requests, different trees and outcomes", ("LongestPath", "TreeBonus"),
                   _verify_case([tree, [-1, 0, 1, 1, 0, 4, 5]], [[9, 4, 5, 6, 7, 8, 1], [0, 1, 2, 3, 2, 3, 4]],
                                [[5, 6, 3, 1, 0, 8, 2], [2, 3, 9, 9, 3, 4, 5]])),
        VectorSpec("a root alone: only the target's token", (EMPTY_INPUT, "TreeBonus"),
                   _verify_case([[-1]], [[3]], [[8]])),
        VectorSpec("no requests", (EMPTY_INPUT,), _verify_case(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)))),
        VectorSpec("int32 inputs", ("LongestPath", "TreeBonus"),
                   _verify_case([tree], [[9, 4, 5, 6, 7, 8, 1]], [[4, 6, 3, 1, 0, 0, 2]], dtype=np.int32)),
    ]
    for path in PATH.values:
        out.append(VectorSpec(f"duplicate siblings: the longest path runs through the second ({path})",
                              ("LongestPath", "SiblingOrder"),
                              _verify_case([dup], [dup_draft], [dup_target], path=path)))
    b, n = 4, 12
    parents = random_parents(rng, b, n)
    draft = rng.integers(0, 3, (b, n))
    target = rng.integers(0, 3, (b, n))
    for path in PATH.values:
        out.append(VectorSpec(f"random trees over 3 tokens ({path})", (RANDOM, "LongestPath", "TreeBonus"),
                              _verify_case(parents, draft, target, path=path)))
    bad = lambda comment, case: out.append(VectorSpec(comment, (INVALID_INPUT,), case, "invalid"))  # noqa: E731
    bad("draft_tokens of another shape are rejected", _verify_case([[-1, 0]], [[1, 2, 3]], [[1, 2]]))
    bad("target_tokens of another shape are rejected", _verify_case([[-1, 0]], [[1, 2]], [[1]]))
    bad("float tokens are rejected", Case({"parents": np.int64([[-1, 0]]), "draft_tokens": np.float64([[1, 2]]),
                                           "target_tokens": np.int64([[1, 2]])}, {}))
    bad("a parent not before its child is rejected", _verify_case([[-1, 1]], [[1, 2]], [[1, 2]]))
    bad("uint8 tokens are rejected (int32 or int64 ids)", Case({"parents": np.int64([[-1, 0]]),
        "draft_tokens": np.uint8([[1, 2]]), "target_tokens": np.int64([[1, 2]])}, {}))
    bad("a negative target token is rejected (-1 pads the outputs)", _verify_case([[-1, 0]], [[1, 2]], [[-5, 2]]))
    bad("a negative draft token below the root is rejected", _verify_case([[-1, 0]], [[1, -1]], [[1, 2]]))
    return out


def _verify_example(seed: int, path: str) -> Case:
    rng = np.random.default_rng(seed)
    b, n, vocab = int(rng.integers(0, 4)), int(rng.integers(1, 12)), int(rng.integers(1, 4))
    return _verify_case(random_parents(rng, b, n), rng.integers(0, vocab, (b, n)), rng.integers(0, vocab, (b, n)),
                        path=path)


def _verify_examples(supported):
    return st.tuples(st.integers(0, 2**32 - 1), variant_params(supported)).map(
        lambda t: _verify_example(t[0], t[1]["path"]))


def _parts(*names):
    return partial(compare_parts, names=names, comparators=(compare_exact,) * len(names))


OPERATIONS = [
    AREA.exact("tree_attention", tree_attention, anchor="tree-attention",
               summary="parents [B, N], prefix_lens [B] -> (mask [B, N, N] bool: ancestors and self, "
                       "positions [B, N] = prefix_len + depth)",
               vectors=_attention_vectors, examples=_seeded(_attention_example), outputs=("mask", "positions"),
               compare=_parts("mask", "positions")),
    AREA.exact("tree_links", tree_links, anchor="tree-links",
               summary="parents [B, N] -> SGLang's (retrieve_index, retrieve_next_token, retrieve_next_sibling) [B, N]",
               vectors=_links_vectors, examples=_seeded(_links_example),
               outputs=("retrieve_index", "next_token", "next_sibling"),
               compare=_parts("retrieve_index", "next_token", "next_sibling")),
    AREA.exact("verify_tree_greedy", verify_tree_greedy, anchor="verify-tree-greedy",
               summary="parents, draft_tokens, target_tokens [B, N] -> (tokens [B, N], nodes [B, N], num_accepted [B])",
               variants=(PATH,), vectors=_verify_vectors, examples=_verify_examples,
               outputs=("tokens", "nodes", "num_accepted"), compare=_parts("tokens", "nodes", "num_accepted")),
]

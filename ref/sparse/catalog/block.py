"""The sparse area's block operations (spec/sparse.md#block-sparse):

  sparse.block.mask        (exact)    per-row block lists [B, H, R, S] (+ counts) -> bool [B, H, Lq, Lk]
  sparse.block.attend      (bounded)  q, k, v + the lists -> (out, lse) = masked dense attend
  sparse.block.to_csr      (exact)    per-row lists (+ counts) -> (indptr, indices)
  sparse.block.attend_csr  (bounded)  q, k, v + FlashInfer's BSR (indptr, indices) -> (out, lse)

Sizes, block sizes and `causal` travel in a vector's params. Values are multiples of
1/8 in [-2, 2], exact at bfloat16 and float16; the lists are drawn from integers.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.attention.catalog.common import OUT_LSE
from ref.sparse import block
from ref.sparse.catalog.common import AREA
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.compare import compare_exact, compare_parts
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "block_lists", "values"]

FLAGS = {
    "BlockCount": Flag("slots past the row's count (kv_num_blocks) read because they hold valid-looking indices",
                       "a row attends blocks the caller never selected: stale indices from an earlier step"),
    "BlockUnused": Flag("-1 (an unused slot) read as block 0, or as the last block by negative indexing",
                        "a row attends the first or the last block of the cache although it did not select it"),
    "BlockCausal": Flag("the causal mask aligned top-left (j <= i) instead of bottom-right (j <= i + Lk - Lq), or "
                        "applied per block rather than per token",
                        "a decode or chunked-prefill row loses keys it should see, or sees future keys of its "
                        "own block"),
    "BlockPartial": Flag("the last key block taken whole when Lk is not a multiple of the block size (positions "
                         "past Lk clamped or wrapped)", "the last key counted several times, or keys of another "
                         "sequence read"),
    "BlockRows": Flag("query rows mapped to list rows with the wrong division (by the key block size, rounded up, "
                      "or from the bottom row)", "rows read another row block's list"),
    "BlockHeads": Flag("lists of H heads applied to query heads without the group mapping (list head h % H, or "
                       "KV head h % Hkv)", "a query head attends the blocks another group selected"),
    "BlockEmptyRow": Flag("a row whose list is empty (all -1, count 0, or causally nothing) divides 0 by 0 or "
                          "keeps a stale output", "NaN or another row's values where the output is 0 and the "
                          "LSE -inf"),
    "BlockUnread": Flag("values at keys not selected multiplied by a zero weight instead of never read",
                        "a NaN or Inf in an unselected block (or a causally masked key) turns the row NaN"),
    "BlockCsr": Flag("CSR rows read off by one (indptr[m + 1] as the start), the last row dropped, or the lists "
                     "sorted or compacted in another order", "row blocks attend their neighbour's blocks, or the "
                     "CSR indices differ from the lists' order"),
}

_CMP_CSR = partial(compare_parts, names=("indptr", "indices"), comparators=(compare_exact, compare_exact))


def values(rng: np.random.Generator, shape, dtype=np.float32) -> np.ndarray:
    """Multiples of 1/8 in [-2, 2] (exact at bfloat16 and float16), from integers."""
    return (rng.integers(-16, 17, shape) / 8).astype(dtype)


def qkv(rng, b, lq, lk, hq, hkv, d=8, dv=None, dtype=np.float32) -> dict[str, np.ndarray]:
    dv = d if dv is None else dv
    return {"q": values(rng, (b, lq, hq, d), dtype), "k": values(rng, (b, lk, hkv, d), dtype),
            "v": values(rng, (b, lk, hkv, dv), dtype)}


def block_lists(rng: np.random.Generator, b: int, h: int, r: int, s: int, num_blocks: int, *, counts: bool = False,
                dtype=np.int32) -> dict[str, np.ndarray]:
    """Per-row lists [b, h, r, s]: each row a random number of distinct blocks in random slots, -1 elsewhere.
    With `counts`, the count is a random prefix length and the slots past it hold valid-looking garbage
    (indices in range, repeats of the read ones): a kernel that reads them is wrong."""
    keys = rng.random((b, h, r, max(num_blocks, 1))).argsort(axis=-1)[..., :s]  # distinct blocks per row
    if keys.shape[-1] < s:
        keys = np.concatenate([keys, np.full((b, h, r, s - keys.shape[-1]), -1)], axis=-1)
    n = rng.integers(0, min(s, num_blocks) + 1, (b, h, r))  # blocks per row
    inside = np.arange(s) < n[..., None]  # [b, h, r, s]
    picked = np.where(inside, keys, -1)
    if counts:
        picked = np.where(inside & (rng.random(picked.shape) < 0.2), -1, picked)  # unused slots inside the count
        if num_blocks:
            picked = np.where(inside, picked, rng.integers(0, num_blocks, picked.shape))  # garbage past it
        return {"block_indices": picked.astype(dtype), "counts": n.astype(dtype)}
    order = rng.random(picked.shape).argsort(axis=-1)  # the unused slots anywhere
    return {"block_indices": np.take_along_axis(picked, order, axis=-1).astype(dtype)}


class _Vectors(list):
    def add(self, comment, flags, inputs, result="valid", **params):
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))


def _i(rows) -> np.ndarray:
    return np.asarray(rows, np.int32)


def _mask_vectors():
    rng = np.random.default_rng(seed_for("sparse.block.mask"))
    v = _Vectors()
    rows = _i([[[[1, -1, 2], [-1, 0, -1], [3, -1, -1], [-1, -1, -1]]]])
    v.add("per query row (block_size_q = 1), Lq = 4, Lk = 16, C = 4: -1 between used slots; row 0 reads blocks 1 "
          "and 2 (not 0, not the last), row 3 none", ["BlockUnused", "BlockEmptyRow"], {"block_indices": rows},
          lq=4, lk=16, block_size_q=1, block_size_k=4, causal=False)
    v.add("counts: row 0 reads 1 slot, row 1 two, row 2 none; the slots past the counts hold in-range blocks, a "
          "repeat and an index past the cache (never read, so valid)", ["BlockCount", "BlockEmptyRow"],
          {"block_indices": _i([[[[2, 0, 3], [1, 3, 3], [0, 2, 9]]]]), "counts": _i([[[1, 2, 0]]])},
          lq=3, lk=16, block_size_q=1, block_size_k=4, causal=False)
    v.add("causal, Lq = 4 < Lk = 16, row blocks of 2: query i sees keys j <= i + 12 of its blocks (bottom-right)",
          ["BlockCausal", "BlockRows"], {"block_indices": _i([[[[0, 3], [3, 1]]]])}, lq=4, lk=16, block_size_q=2,
          block_size_k=4, causal=True)
    v.add("causal, Lq = 6 > Lk = 4: query rows 0 and 1 see no key", ["BlockCausal", "BlockEmptyRow"],
          {"block_indices": np.tile(_i([0, 1]), (1, 1, 6, 1))}, lq=6, lk=4, block_size_q=1, block_size_k=2,
          causal=True)
    v.add("block_size_q = 3 over Lq = 7 (the last row block holds one row), C = 4", ["BlockRows"],
          {"block_indices": _i([[[[0, -1], [2, 1], [-1, 1]]]])}, lq=7, lk=12, block_size_q=3, block_size_k=4,
          causal=False)
    v.add("Lk = 10, C = 4: block 2 is partial (keys 8 and 9) and a valid index", ["BlockPartial"],
          {"block_indices": _i([[[[2], [0]], [[1], [2]]]])}, lq=2, lk=10, block_size_q=1, block_size_k=4,
          causal=False)
    v.add("the default block sizes (1 x 64): Lk = 130 has 3 blocks, the last holding 2 keys", ["BlockPartial"],
          {"block_indices": _i([[[[2, -1], [0, 2]]]])}, lq=2, lk=130)
    v.add("B = 2, H = 3, random lists, int64 indices", ["Random", "BlockUnused"],
          block_lists(rng, 2, 3, 5, 3, 4, dtype=np.int64), lq=5, lk=14, block_size_q=1, block_size_k=4,
          causal=False)
    v.add("random lists with counts and garbage past them, causal, row blocks of 2", ["Random", "BlockCount"],
          block_lists(rng, 2, 2, 3, 4, 6, counts=True), lq=6, lk=23, block_size_q=2, block_size_k=4, causal=True)
    v.add("Lq = 0 (no rows)", ["EmptyInput"], {"block_indices": np.zeros((1, 2, 0, 2), np.int32)}, lq=0, lk=8,
          block_size_q=1, block_size_k=4, causal=False)
    v.add("Lk = 0 (no blocks: every slot -1)", ["EmptyInput", "BlockEmptyRow"],
          {"block_indices": np.full((1, 1, 3, 2), -1, np.int32)}, lq=3, lk=0, block_size_q=1, block_size_k=4,
          causal=True)
    v.add("S = 0 slots", ["EmptyInput", "BlockEmptyRow"], {"block_indices": np.zeros((1, 1, 2, 0), np.int32)},
          lq=2, lk=8, block_size_q=1, block_size_k=4, causal=False)
    good = dict(lq=2, lk=16, block_size_q=1, block_size_k=4, causal=False)
    for comment, inputs, params in [
        ("index 4 = NB read (out of range)", {"block_indices": _i([[[[4], [0]]]])}, good),
        ("index -2 read", {"block_indices": _i([[[[-2], [0]]]])}, good),
        ("a row names block 1 twice", {"block_indices": _i([[[[1, 1], [0, -1]]]])}, good),
        ("a repeat inside the count", {"block_indices": _i([[[[1, 1], [0, 2]]]]), "counts": _i([[[2, 1]]])}, good),
        ("3 rows for Lq = 2", {"block_indices": _i([[[[0], [1], [2]]]])}, good),
        ("float indices", {"block_indices": np.zeros((1, 1, 2, 1), np.float32)}, good),
        ("a count past S", {"block_indices": _i([[[[0], [1]]]]), "counts": _i([[[1, 2]]])}, good),
        ("a negative count", {"block_indices": _i([[[[0], [1]]]]), "counts": _i([[[1, -1]]])}, good),
        ("counts of shape [1, 1]", {"block_indices": _i([[[[0], [1]]]]), "counts": _i([[1]])}, good),
        ("block_size_k = 0", {"block_indices": _i([[[[0], [1]]]])}, {**good, "block_size_k": 0}),
        ("causal given as the integer 1", {"block_indices": _i([[[[0], [1]]]])}, {**good, "causal": 1}),
        ("counts of shape [1, 1, 1] for 2 rows (would broadcast)", {"block_indices": _i([[[[0], [1]]]]),
                                                                    "counts": _i([[[1]]])}, good),
    ]:
        v.add(comment, ["InvalidInput"], inputs, result="invalid", **params)
    return v


def _attend_vectors():
    rng = np.random.default_rng(seed_for("sparse.block.attend"))
    v = _Vectors()
    decode = {**qkv(rng, 1, 1, 64, 4, 2), "block_indices": _i([[[[5, 0, 7]], [[2, 6, 3]]]]),
              "counts": _i([[[2], [1]]])}
    v.add("decode: Lq = 1 over Lk = 64 (8 blocks of 8), lists per KV head (GQA 4/2), counts 2 and 1 with valid "
          "blocks past them", ["BlockHeads", "BlockCount"], decode, block_size_q=1, block_size_k=8, causal=False)
    v.add("causal prefill Lq = Lk = 12, row blocks of 4, C = 4, one list per query head (Hq = 2, Hkv = 1)",
          ["BlockCausal", "BlockRows", "BlockHeads"],
          {**qkv(rng, 1, 12, 12, 2, 1), "block_indices": _i([[[[0, -1], [0, 1], [2, 0]], [[-1, -1], [1, -1],
                                                                                       [1, 2]]]])},
          block_size_q=4, block_size_k=4, causal=True)
    v.add("causal chunked prefill Lq = 5 < Lk = 16: query i sees keys <= i + 11 of its blocks",
          ["BlockCausal"], {**qkv(rng, 1, 5, 16, 2, 2), **block_lists(rng, 1, 2, 5, 2, 4)}, block_size_q=1,
          block_size_k=4, causal=True)
    v.add("-1 slots before and between used ones; no row reads block 0 or the last block 3",
          ["BlockUnused"], {**qkv(rng, 1, 3, 16, 1, 1), "block_indices": _i([[[[-1, 1], [2, -1], [-1, -1]]]])},
          block_size_q=1, block_size_k=4, causal=False)
    v.add("Lk = 10, C = 4: every row reads the partial block 2 (keys 8, 9)", ["BlockPartial"],
          {**qkv(rng, 1, 3, 10, 2, 1), "block_indices": _i([[[[2, -1], [0, 2], [2, 1]]]])},
          block_size_q=1, block_size_k=4, causal=False)
    empty = {**qkv(rng, 1, 6, 4, 1, 1), "block_indices": _i([[[[0, 1]] * 2 + [[-1, -1]] + [[0, 1]] * 3]]),
             "counts": _i([[[2, 2, 2, 0, 2, 2]]])}
    v.add("empty rows: causal Lq = 6 > Lk = 4 (rows 0, 1), row 2 all -1, row 3 count 0", ["BlockEmptyRow"],
          empty, block_size_q=1, block_size_k=2, causal=True)
    nan = qkv(rng, 1, 2, 12, 1, 1)
    nan["k"][0, 0:4, 0, 0] = np.nan  # block 0: selected by no row
    nan["v"][0, 1, 0, 1] = np.nan
    nan["v"][0, 11, 0, 2] = np.nan  # block 2, key 11: causally hidden from row 0 only
    nan["k"][0, 11, 0, 3] = np.nan
    nan["block_indices"] = _i([[[[2, 1], [1, -1]]]])
    v.add("NaN in k and v in block 0 (not selected) and at key 11 (row 0's selected block, causally hidden): "
          "never read; row 1 reads key 11 and is NaN", ["BlockUnread", "NaN"], nan, block_size_q=1,
          block_size_k=4, causal=True)
    v.add("Lq = 0", ["EmptyInput"], {**qkv(rng, 1, 0, 8, 2, 1), "block_indices": np.zeros((1, 1, 0, 2), np.int32)},
          block_size_q=1, block_size_k=4, causal=True)
    v.add("Lk = 0 (every slot -1): out 0, LSE -inf", ["EmptyInput", "BlockEmptyRow"],
          {**qkv(rng, 1, 2, 0, 2, 2), "block_indices": np.full((1, 2, 2, 1), -1, np.int32)}, block_size_q=1,
          block_size_k=4, causal=False)
    v.add("float64 inputs, B = 2, counts", ["Random", "BlockCount"],
          {**qkv(rng, 2, 4, 20, 2, 1, dtype=np.float64), **block_lists(rng, 2, 1, 2, 3, 5, counts=True)},
          block_size_q=2, block_size_k=4, causal=False)
    v.add("float16 inputs, Dv = 4 != D = 8, scale 0.5", ["Random"],
          {**qkv(rng, 1, 3, 12, 2, 2, dv=4, dtype=np.float16), **block_lists(rng, 1, 2, 3, 2, 3)},
          block_size_q=1, block_size_k=4, causal=False, scale=0.5)
    v.add("MQA: one list (H = 1) shared by 3 query heads over one KV head", ["BlockHeads"],
          {**qkv(rng, 1, 2, 16, 3, 1), "block_indices": _i([[[[3, 0], [1, -1]]]])}, block_size_q=1,
          block_size_k=4, causal=False)
    v.add("GQA 4/2 with one list per query head: query head h reads KV head h // 2", ["BlockHeads"],
          {**qkv(rng, 1, 2, 12, 4, 2), "block_indices": _i([[[[0], [1]], [[1], [2]], [[2], [0]], [[0], [2]]]])},
          block_size_q=1, block_size_k=4, causal=False)
    v.add("the default block sizes (1 x 64): Lk = 150, the last block holds 22 keys", ["BlockPartial"],
          {**qkv(rng, 1, 2, 150, 1, 1), "block_indices": _i([[[[2, -1], [0, 2]]]])})
    good = {**qkv(rng, 1, 2, 8, 4, 2), "block_indices": _i([[[[0], [1]], [[1], [0]]]])}
    for comment, inputs in [
        ("lists of 3 heads for 4 query heads", {**good, "block_indices": np.zeros((1, 3, 2, 1), np.int32)}),
        ("index 2 = NB read", {**good, "block_indices": _i([[[[2], [1]], [[1], [0]]]])}),
        ("a block named twice", {**good, "block_indices": _i([[[[0, 0], [1, -1]], [[1, -1], [0, -1]]]])}),
        ("1 list row for Lq = 2", {**good, "block_indices": _i([[[[0]], [[1]]]])}),
        ("lists of batch 2 for q of batch 1", {**good, "block_indices": np.zeros((2, 2, 2, 1), np.int32)}),
        ("v of 7 keys for k of 8", {**good, "v": good["v"][:, :7]}),
        ("a count past S", {**good, "counts": _i([[[1, 2], [1, 1]]])}),
        ("counts of shape [1, 2, 1] for 2 rows (would broadcast)", {**good, "counts": _i([[[1], [1]]])}),
    ]:
        v.add(comment, ["InvalidInput"], inputs, result="invalid", block_size_q=1, block_size_k=4, causal=False)
    return v


def _to_csr_vectors():
    rng = np.random.default_rng(seed_for("sparse.block.to_csr"))
    v = _Vectors()
    v.add("-1 before, between and after used slots; a row with none", ["BlockUnused", "BlockCsr", "BlockEmptyRow"],
          {"block_indices": _i([[[[-1, 4, -1, 2], [0, -1, -1, -1], [-1, -1, -1, -1], [3, 1, 0, -1]]]])})
    v.add("counts 1, 3, 0 with valid-looking slots, a repeat and 99 past them", ["BlockCount", "BlockCsr"],
          {"block_indices": _i([[[[5, 2, 7], [1, -1, 6], [3, 3, 99]]]]), "counts": _i([[[1, 3, 0]]])})
    v.add("B = 2, H = 2, R = 2, unsorted rows: rows in (b, h, r) order, each in list order", ["BlockCsr"],
          {"block_indices": _i([[[[3, 1], [0, 2]], [[2, -1], [1, 0]]], [[[-1, 0], [4, 3]], [[1, 2], [-1, -1]]]])})
    v.add("every row empty: nnz = 0", ["EmptyInput", "BlockEmptyRow"],
          {"block_indices": np.full((1, 2, 3, 2), -1, np.int32)})
    v.add("R = 0 rows", ["EmptyInput"], {"block_indices": np.zeros((2, 1, 0, 3), np.int32)})
    v.add("random int64 lists with counts", ["Random", "BlockCount"], block_lists(rng, 2, 2, 4, 5, 8, counts=True,
                                                                                 dtype=np.int64))
    for comment, inputs in [
        ("a row names block 2 twice", {"block_indices": _i([[[[2, 2]]]])}),
        ("index -2", {"block_indices": _i([[[[-2, 0]]]])}),
        ("float indices", {"block_indices": np.zeros((1, 1, 1, 2), np.float64)}),
        ("a count past S", {"block_indices": _i([[[[0, 1]]]]), "counts": _i([[[3]]])}),
        ("lists of rank 3", {"block_indices": _i([[[0, 1]]])}),
        ("counts of shape [1, 1, 1] for 2 rows (would broadcast)", {"block_indices": _i([[[[0, 1], [1, 0]]]]),
                                                                    "counts": _i([[[1]]])}),
    ]:
        v.add(comment, ["InvalidInput"], inputs, result="invalid")
    return v


def _csr_qkv(rng, lq, lk, hq, hkv, dtype=np.float32):
    x = qkv(rng, 1, lq, lk, hq, hkv, dtype=dtype)
    return {name: a[0] for name, a in x.items()}


def _attend_csr_vectors():
    rng = np.random.default_rng(seed_for("sparse.block.attend_csr"))
    v = _Vectors()
    v.add("Lq = 8, Lk = 24, R = 2, C = 4, GQA 2/1: row blocks read 2, 1, 3 and 1 blocks", ["BlockCsr"],
          {**_csr_qkv(rng, 8, 24, 2, 1), "indptr": _i([0, 2, 3, 6, 7]), "indices": _i([5, 0, 3, 1, 4, 2, 0])},
          block_size_q=2, block_size_k=4, causal=False)
    v.add("causal, Lq = 6 < Lk = 16, R = 2, C = 4", ["BlockCausal", "BlockCsr"],
          {**_csr_qkv(rng, 6, 16, 1, 1), "indptr": _i([0, 2, 4, 6]), "indices": _i([3, 0, 1, 3, 2, 3])},
          block_size_q=2, block_size_k=4, causal=True)
    v.add("empty row blocks (indptr repeats) in the middle and at the end", ["BlockEmptyRow", "BlockCsr"],
          {**_csr_qkv(rng, 8, 12, 2, 2), "indptr": _i([0, 1, 1, 3, 3]), "indices": _i([2, 0, 1])},
          block_size_q=2, block_size_k=3, causal=False)
    v.add("Lk = 10, C = 4: the partial block 2", ["BlockPartial", "BlockCsr"],
          {**_csr_qkv(rng, 2, 10, 1, 1), "indptr": _i([0, 1, 3]), "indices": _i([2, 2, 0])},
          block_size_q=1, block_size_k=4, causal=False)
    nan = {**_csr_qkv(rng, 2, 12, 1, 1), "indptr": _i([0, 1, 2]), "indices": _i([1, 2])}
    nan["k"][0:4, 0, 1] = np.nan
    nan["v"][1, 0, 0] = np.nan
    v.add("NaN in block 0, which no row block reads", ["BlockUnread", "NaN"], nan, block_size_q=1,
          block_size_k=4, causal=False)
    v.add("Lq = 0: indptr [0]", ["EmptyInput"],
          {**_csr_qkv(rng, 0, 8, 1, 1), "indptr": _i([0]), "indices": np.zeros(0, np.int32)},
          block_size_q=2, block_size_k=4, causal=False)
    v.add("float64 inputs, R = 3 over Lq = 7", ["Random"],
          {**_csr_qkv(rng, 7, 20, 2, 1, np.float64), "indptr": _i([0, 3, 5, 6]), "indices": _i([4, 1, 0, 2, 3, 4])},
          block_size_q=3, block_size_k=4, causal=True)
    good = {**_csr_qkv(rng, 4, 8, 1, 1), "indptr": _i([0, 1, 2]), "indices": _i([0, 1])}
    for comment, inputs in [
        ("indptr one entry short", {**good, "indptr": _i([0, 2])}),
        ("indptr ends at 1 for 2 indices", {**good, "indptr": _i([0, 1, 1])}),
        ("indptr starting at 1", {**good, "indptr": _i([1, 1, 2])}),
        ("a negative index (CSR has no unused marker)", {**good, "indices": _i([0, -1])}),
        ("index 2 = NB", {**good, "indices": _i([0, 2])}),
        ("a row block naming block 1 twice", {**good, "indptr": _i([0, 1, 3]), "indices": _i([0, 1, 1])}),
    ]:
        v.add(comment, ["InvalidInput"], inputs, result="invalid", block_size_q=2, block_size_k=4, causal=False)
    return v


@st.composite
def _case(draw, kind):
    """A random case of `kind` ("mask", "attend", "to_csr", "attend_csr"): small shapes, lists with or without
    counts (garbage past them), any row and key block sizes, causal or not."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    b = 1 if kind == "attend_csr" else draw(st.integers(1, 2), label="batch")
    hkv = draw(st.integers(1, 2), label="hkv")
    hq = hkv * draw(st.integers(1, 3), label="group")
    h = 1 if kind == "attend_csr" else draw(st.sampled_from(sorted({1, hkv, hq})), label="list heads")
    lq, lk = draw(st.integers(0, 9), label="lq"), draw(st.integers(0, 24), label="lk")
    bq, bk = draw(st.integers(1, 4), label="block_size_q"), draw(st.integers(1, 8), label="block_size_k")
    r, nb = -(-lq // bq), -(-lk // bk)
    s = draw(st.integers(0, 4), label="slots")
    lists = block_lists(rng, b, h, r, s, nb, counts=kind != "attend_csr" and draw(st.booleans(), label="counts"),
                        dtype=draw(st.sampled_from([np.int32, np.int64]), label="index dtype"))
    params = {"block_size_q": bq, "block_size_k": bk, "causal": draw(st.booleans(), label="causal")}
    if kind == "mask":
        return Case(lists, {**params, "lq": lq, "lk": lk})
    if kind == "to_csr":
        return Case(lists)
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16]), label="dtype")
    x = qkv(rng, b, lq, lk, hq, hkv, d=draw(st.sampled_from([4, 8, 16]), label="d"), dtype=dtype)
    if kind == "attend":
        return Case({**x, **lists}, params)
    indptr, indices = block.to_csr(lists["block_indices"])
    return Case({**{name: a[0] for name, a in x.items()}, "indptr": indptr, "indices": indices}, params)


def _examples(kind):
    return lambda supported: _case(kind)


OPERATIONS = [
    AREA.exact("block.mask", block.block_mask, anchor="block-mask",
               summary="per-row block lists [B, H, R, S] (-1 unused, slots past counts never read) -> bool mask "
                       "[B, H, Lq, Lk], causal bottom-right",
               vectors=_mask_vectors, examples=_examples("mask"), compare=compare_exact),
    AREA.bounded("block.attend", block.attend, anchor="block-attend",
                 summary="attention over the key blocks each row's list names = attend with block_mask",
                 vectors=_attend_vectors, examples=_examples("attend"), emulate=block.emulate_attend,
                 bounds=OUT_LSE, outputs=("out", "lse")),
    AREA.exact("block.to_csr", block.to_csr, anchor="block-to-csr",
               summary="per-row lists (+ counts) -> CSR (indptr, indices), rows in (b, h, r) order, list order",
               vectors=_to_csr_vectors, examples=_examples("to_csr"), compare=_CMP_CSR,
               outputs=("indptr", "indices")),
    AREA.bounded("block.attend_csr", block.attend_csr, anchor="block-attend-csr",
                 summary="block-sparse attention in FlashInfer's BSR layout (indptr, indices, R x C blocks)",
                 vectors=_attend_csr_vectors, examples=_examples("attend_csr"), emulate=block.emulate_attend_csr,
                 bounds=OUT_LSE, outputs=("out", "lse")),
]

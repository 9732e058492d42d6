"""cache.paged_attention: attention reading K and V through block tables (bounded).

  q [T, Hq, D], key_cache [blocks, B, Hkv, D], value_cache [blocks, B, Hkv, Dv],
  block_tables [S, M], seq_lens [S], cu_seqlens_q [S+1] -> (out [T, Hq, Dv], lse [Hq, T])

Equal by definition to attention.attend_varlen on the gathered keys and values, so the
attention area's tolerance rule, bounds and emulation apply (emulated on the gathered
keys). Every vector's cache holds NaN wherever no sequence owns a slot: the tail of each
last block, the null block 0 the tables are padded with, and spare blocks; a kernel
that reads a key the sequence does not own returns NaN.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.attention import emulate
from ref.attention.catalog.attend import FLAGS as ATTEND_FLAGS
from ref.attention.catalog.common import OUT_LSE, Vectors
from ref.cache.catalog.common import AREA
from ref.cache.paged_attention import gather_kv, paged_attention
from ref.testing.attention_cases import grid
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.vector_files import Case

__all__ = ["FLAGS", "OPERATIONS", "paged_attention_cases", "paged_inputs"]

FLAGS = {
    "PagedLength": Flag("keys read past a sequence's length: the whole last block, or every block the table's "
                        "width allows, instead of seq_lens[s] tokens",
                        "slots the sequence does not own (stale keys of freed requests in an engine) enter "
                        "its softmax"),
    "BlockTable": Flag("a token's block taken from the wrong table entry (pos // B off by one, the row of "
                       "another sequence) or blocks assumed contiguous in the pool",
                       "a sequence attends to another block's keys"),
    **{name: ATTEND_FLAGS[name] for name in ("CausalAlignment", "GroupMapping", "EmptyRow", "Scale", "HeadDim")},
}


def paged_inputs(rng: np.random.Generator, seq_lens, q_lens, hq: int, hkv: int, d: int, block_size: int, *,
                 dv: int | None = None, shared_blocks: int = 0, pad: int = 0, spare: int = 2,
                 std: float = 1.0) -> dict[str, np.ndarray]:
    """paged_attention's inputs: sequence s has seq_lens[s] keys and its last q_lens[s]
    positions as queries. Physical blocks are handed out in a shuffled order from 1
    (block 0 is vLLM's null block); every sequence after the first lists the first
    `shared_blocks` blocks of sequence 0 (a shared prefix). Tables are one entry wider
    than needed and padded with `pad`. Every slot no sequence owns holds NaN (float32
    caches; values from `grid`, exact at bfloat16 and float16)."""
    dv = d if dv is None else dv
    lens = [int(n) for n in seq_lens]
    need = [-(-n // block_size) for n in lens]
    own = [n - (shared_blocks if s else 0) for s, n in enumerate(need)]
    if shared_blocks and min(lens[1:], default=lens[0]) < shared_blocks * block_size:
        raise ValueError("shared_blocks: every sequence must hold the shared blocks in full")
    total = 1 + sum(own) + spare
    ids = iter(1 + rng.permutation(total - 1))
    width = max(need, default=0) + 1
    tables = np.full((len(lens), width), pad, np.int32)
    for s, n in enumerate(need):
        start = shared_blocks if s else 0
        tables[s, :start] = tables[0, :start]
        tables[s, start:n] = [next(ids) for _ in range(start, n)]
    k_cache = np.full((total, block_size, hkv, d), np.nan, np.float32)
    v_cache = np.full((total, block_size, hkv, dv), np.nan, np.float32)
    for s, n in enumerate(lens):
        pos = np.arange(n)
        fresh = pos >= (shared_blocks * block_size if s else 0)  # shared slots are written once, by sequence 0
        blocks, offsets = tables[s, pos[fresh] // block_size], pos[fresh] % block_size
        k_cache[blocks, offsets] = grid(rng, (int(fresh.sum()), hkv, d), std)
        v_cache[blocks, offsets] = grid(rng, (int(fresh.sum()), hkv, dv))
    return {"q": grid(rng, (sum(q_lens), hq, d), std), "key_cache": k_cache, "value_cache": v_cache,
            "block_tables": tables, "seq_lens": np.array(lens, np.int32),
            "cu_seqlens_q": np.cumsum([0, *q_lens]).astype(np.int32)}


def _emulate(precision: str, q, key_cache, value_cache, block_tables, seq_lens, cu_seqlens_q, *, scale=None,
             causal=True):
    """The attention area's emulation of attend_varlen on the gathered keys and values
    (paged_attention's defaults: causal, unlike attend_varlen's)."""
    kv = gather_kv(key_cache, value_cache, block_tables, seq_lens)
    return emulate.attend_varlen(precision, q, kv.k, kv.v, cu_seqlens_q, kv.cu_seqlens_k, scale=scale,
                                 causal=causal)


def _vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("cache.paged_attention"))
    v = Vectors()
    add = v.add

    def case(*args, **kwargs):
        return paged_inputs(rng, *args, **kwargs)

    add("decode batch, B = 16, contexts 5, 16, 37 (last blocks partly filled, NaN past each length), GQA 4/2",
        ["PagedLength", "BlockTable", "CausalAlignment"], case([5, 16, 37], [1, 1, 1], 4, 2, 8, 16))
    add("decode batch, B = 32, contexts 1, 33, 64, 95, MQA 8/1", ["PagedLength", "BlockTable", "GroupMapping"],
        case([1, 33, 64, 95], [1, 1, 1, 1], 8, 1, 8, 32))
    add("prefill chunk of 7 queries after 38 cached tokens beside a whole prompt of 20 (bottom-right causal)",
        ["CausalAlignment", "PagedLength", "BlockTable"], case([45, 20], [7, 20], 4, 2, 8, 16))
    add("mixed batch: decode, a chunk of 5 over 50 keys, decode; GQA 6/2 (groups of 3)",
        ["GroupMapping", "CausalAlignment", "PagedLength"], case([9, 50, 17], [1, 5, 1], 6, 2, 8, 16))
    add("GQA 8/4 decode: query heads 2h and 2h+1 read KV head h", ["GroupMapping"],
        case([21, 12], [1, 1], 8, 4, 8, 16))
    add("prefix sharing: three sequences list the same first 2 blocks (32 tokens), then their own",
        ["BlockTable", "PagedLength"], case([40, 35, 32], [1, 1, 1], 4, 2, 8, 16, shared_blocks=2))
    add("prefix-cache hit: a chunk of 6 queries after 32 shared tokens, beside the sequence that owns them",
        ["BlockTable", "CausalAlignment"], case([48, 38], [1, 6], 2, 1, 8, 16, shared_blocks=2))
    add("block size 1: every token its own block, chunks of 2 and 3", ["BlockTable", "CausalAlignment"],
        case([3, 7], [2, 3], 2, 1, 8, 1))
    add("contexts 0 (a padded decode slot: output 0, LSE -inf), 12, and 0 with no query",
        ["EmptyRow", "PagedLength"], case([0, 12, 0], [1, 1, 0], 2, 2, 8, 16))
    add("tables padded with -1 instead of the null block, contexts 17 and 3", ["PagedLength", "BlockTable"],
        case([17, 3], [1, 1], 2, 1, 8, 16, pad=-1))
    add("not causal: a chunk of 3 queries sees all 20 keys", ["CausalAlignment"],
        case([20], [3], 2, 1, 8, 16), causal=False)
    add("explicit scale 0.5 and value dim 4 (Dv != D)", ["Scale", "HeadDim"],
        case([19, 30], [1, 2], 4, 2, 8, 16, dv=4), scale=0.5)
    late = case([300], [1], 2, 1, 8, 16)
    late["key_cache"][late["block_tables"][0, 18], 10] = 4 * late["q"][0, :1]  # the top logit in the last block
    add("decode over 300 keys in 19 blocks, the row maximum in the last, partly filled block", ["PagedLength"],
        late)
    add("no sequences", ["EmptyInput"], case([], [], 2, 1, 8, 16))
    add("sequences but no queries", ["EmptyInput"], case([4, 20], [0, 0], 2, 1, 8, 16))
    nan = case([10, 18], [1, 2], 4, 2, 8, 16)
    nan["q"][1, 3, 2] = np.nan
    add("NaN in one query row of head 3: that row is NaN, the others are not", ["NaN"], nan)
    add("random: GQA 4/2, B = 16, a shared block, a chunk and two decodes", ["Random"],
        case([23, 40, 16], [1, 4, 1], 4, 2, 8, 16, shared_blocks=1))

    def bad(change, comment):
        x = case([10, 20], [1, 2], 2, 2, 8, 16)
        add(comment, ["InvalidInput"], {**x, **change(x)}, result="invalid")

    bad(lambda x: {"block_tables": np.where(x["block_tables"] == x["block_tables"][1, 1], 99,
                                            x["block_tables"]).astype(np.int32)},
        "a block id past the cache's blocks where a token lives")
    bad(lambda x: {"seq_lens": np.array([10, 60], np.int32)}, "a length past the table's capacity (3 x 16)")
    bad(lambda x: {"seq_lens": np.array([-1, 20], np.int32)}, "a negative length")
    bad(lambda x: {"cu_seqlens_q": np.array([0, 3], np.int32)}, "query offsets for one sequence, two tables")
    bad(lambda x: {"value_cache": x["value_cache"][:, :8]}, "value_cache with another block size")
    bad(lambda x: {"block_tables": x["block_tables"].astype(np.float32)}, "float block tables")
    bad(lambda x: {"q": grid(rng, (3, 3, 8))}, "3 query heads over 2 KV heads")
    bad(lambda x: {"key_cache": np.zeros(x["key_cache"].shape, np.int32)}, "an integer key cache")
    # adv12 #29: block id -1 where a token lives is refused (read as Python's last block it gives a finite answer)
    bad(lambda x: {"block_tables": np.where(np.arange(x["block_tables"].shape[1]) == 0, -1,
                                            x["block_tables"]).astype(np.int32)},
        "block id -1 in a position holding tokens")
    # adv12 #28: the default scale is 1/sqrt(D), the query/key head dim, not 1/sqrt(Dv)
    add("default scale with value dim 3 beside head dim 8: 1/sqrt(D), not 1/sqrt(Dv)", ["Scale", "HeadDim"],
        case([19, 30], [1, 2], 4, 2, 8, 16, dv=3))
    # adv12 #30: block 1 is sequence 0's partial last block (2 tokens) and sequence 1's full first block: a kernel
    # caching a block's K/V by id within a call reuses sequence 0's 2 keys for sequence 1's 4
    shared = case([5], [1], 2, 1, 8, 4)  # block table [b1, b2, pad]: b1 full, b2 holds 1 token
    tables = np.zeros((2, 2), np.int32)
    tables[0, 0] = tables[1, 0] = shared["block_tables"][0, 0]
    tables[1, 1] = shared["block_tables"][0, 1]
    add("one block is one sequence's partial last block (2 tokens) and another's full first block, B = 4",
        ["BlockTable", "PagedLength"], {**shared, "q": grid(rng, (2, 2, 8)), "block_tables": tables,
                                        "seq_lens": np.array([2, 5], np.int32),
                                        "cu_seqlens_q": np.array([0, 1, 2], np.int32)})
    return v


@st.composite
def _paged_case(draw, supported):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    hkv = draw(st.integers(1, 2), label="hkv")
    hq = hkv * draw(st.integers(1, 3), label="group")
    d = draw(st.sampled_from([4, 8, 16]), label="d")
    size = draw(st.sampled_from([1, 2, 4, 16]), label="block_size")
    n = draw(st.integers(0, 3), label="sequences")
    lens = [draw(st.integers(0, 40), label="seq_len") for _ in range(n)]
    queries = [draw(st.integers(0, min(length, 4)), label="queries") for length in lens]
    shared = draw(st.integers(0, min(lens, default=0) // size), label="shared_blocks") if n > 1 else 0
    inputs = paged_inputs(rng, lens, queries, hq, hkv, d, size, shared_blocks=shared,
                          pad=draw(st.sampled_from([0, -1]), label="pad"))
    params = {"causal": draw(st.booleans(), label="causal")}
    if draw(st.booleans(), label="scale?"):
        params["scale"] = draw(st.sampled_from([0.125, 0.5, 1.0]), label="scale")
    return Case(inputs, params)


def paged_attention_cases(supported=None) -> st.SearchStrategy:
    """Random paged-attention `Case`s: up to 3 sequences of up to 40 keys, up to 4
    queries each, block sizes 1 to 16, shared prefix blocks, NaN in unowned slots."""
    return _paged_case(supported)


def _case_flags(case) -> tuple[str, ...]:
    lens = np.asarray(case.inputs["seq_lens"])
    queries = np.diff(np.asarray(case.inputs["cu_seqlens_q"]))
    return ("EmptyRow",) if np.any((lens == 0) & (queries > 0)) else ("Random",)


OPERATIONS = [
    AREA.bounded(
        "paged_attention", paged_attention, anchor="paged-attention",
        summary="attention over keys and values read through block tables -> (out, lse)",
        vectors=_vectors, examples=paged_attention_cases, outputs=("out", "lse"),
        emulate=_emulate, bounds=OUT_LSE, case_flags=_case_flags),
]

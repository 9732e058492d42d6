"""The sparse area's traffic operations (spec/sparse.md#traffic): bytes one decode step
reads, exact int64.

  sparse.traffic.dense  (tokens, kv_heads, head_dim, v_head_dim, element_bits)
  sparse.traffic.block  (tokens, block_size, blocks, kv_heads, head_dim, v_head_dim, element_bits,
                         index_bits); variants last, layout
  sparse.traffic.nsa    (tokens, cmp_block, cmp_stride, sel_block, selected, local, window, kv_heads,
                         head_dim, v_head_dim, element_bits); variant overlap
  sparse.traffic.moba   (tokens, chunk_size, top_k, kv_heads, head_dim, v_head_dim, element_bits);
                         variant gating
  sparse.traffic.dsa    (tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim,
                         index_bits, index_group, index_scale_bits)

Every input is an integer array, all of one shape; a vector stacks several
configurations as 1-d arrays (golden/ stays small) and names each in its comment.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.roofline.catalog.common import SHARED_FLAGS
from ref.roofline.catalog.kv import int_case
from ref.sparse import traffic
from ref.sparse.catalog.common import AREA
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "NAMES", "OPERATIONS"]

FLAGS = {
    **{name: SHARED_FLAGS[name] for name in ("Int64", "CeilOnce")},
    **{name: COMMON[name] for name in (RANDOM, EMPTY_INPUT, INVALID_INPUT)},
    "TrafficPartialBlock": Flag("the last, partial block (or chunk) counted as a full one, or dropped",
                                "a step is off by up to a block of tokens per KV head whenever the block "
                                "size does not divide the context"),
    "TrafficClip": Flag("more blocks, chunks or top-k tokens than the context holds counted as read",
                        "short contexts are charged for keys that do not exist"),
    "TrafficIndexReads": Flag("the block list's reads left out, or its count (indptr) entries miscounted",
                              "block-sparse decode looks cheaper than the indices it must read"),
    "TrafficWindow": Flag("the sliding window counted as w tokens before the context is that long "
                          "(not min(w, L))", "NSA's short contexts read more than the whole cache"),
    "TrafficCompressedCount": Flag("NSA's compressed entries counted off by one (floor((L - l) / d), L / d) "
                                   "or with the incomplete block", "a compressed key and value per KV head "
                                                                   "too many or too few"),
    "TrafficOverlap": Flag("NSA's window and forced local blocks counted twice under union (or once under "
                           "reread)", "a fused kernel's saving is missed, or the paper's count is undercut"),
    "TrafficCurrentChunk": Flag("MoBA's top-k read as k chunks besides the current one",
                                "a chunk of keys and values too many per step"),
    "TrafficGating": Flag("MoBA's gate reads left out, read with values, or cached means counted for "
                          "the current chunk too", "the gating cost, all L keys in the reference, is lost"),
    "TrafficIndexerBits": Flag("DSA's indexer keys counted at the attention cache's width (bf16) not "
                               "index_bits (FP8)", "the indexer, the bulk of DSA's reads at long context, "
                                                   "doubles"),
    "TrafficScaleGroups": Flag("DSA's indexer scales counted per element, per tensor, or with a floored "
                               "group count", "the FP8 key cache's scale bytes are wrong"),
    "TrafficMlaTwice": Flag("MLA's latent counted as a key and again as a value",
                            "an absorbed-MLA step reads the latent once: the bytes nearly double"),
}

NAMES = {
    "dense": ("tokens", "kv_heads", "head_dim", "v_head_dim", "element_bits"),
    "block": ("tokens", "block_size", "blocks", "kv_heads", "head_dim", "v_head_dim", "element_bits", "index_bits"),
    "nsa": ("tokens", "cmp_block", "cmp_stride", "sel_block", "selected", "local", "window", "kv_heads",
            "head_dim", "v_head_dim", "element_bits"),
    "moba": ("tokens", "chunk_size", "top_k", "kv_heads", "head_dim", "v_head_dim", "element_bits"),
    "dsa": ("tokens", "top_k", "kv_lora_rank", "qk_rope_head_dim", "element_bits", "index_head_dim", "index_bits",
            "index_group", "index_scale_bits"),
}
MINIMA = {"tokens": 1, "block_size": 1, "blocks": 1, "cmp_block": 1, "cmp_stride": 1, "sel_block": 1,
          "selected": 1, "local": 1, "chunk_size": 1, "top_k": 1, "index_group": 1}
GQA = dict(kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16)  # Qwen3-8B's attention layer (config.json)
ONE = dict(kv_heads=1, head_dim=1, v_head_dim=0, element_bits=8)  # one byte per entry: bytes = entries read
NSA = dict(cmp_block=32, cmp_stride=16, sel_block=64, selected=16, local=2, window=512)  # arXiv 2502.11089, 4.1
FLA = dict(cmp_block=64, cmp_stride=64, sel_block=64, selected=16, local=1)  # fla's one block size
MOBA = dict(chunk_size=4096, top_k=12)  # MoBA's examples/llama.py
DSA = dict(top_k=2048, kv_lora_rank=512, qk_rope_head_dim=64, element_bits=16, index_head_dim=128, index_bits=8,
           index_group=128, index_scale_bits=32)  # DeepSeek-V3.2-Exp: config.json, inference/model.py's Indexer
_P53 = (1 << 53) + 1  # odd: float64 cannot hold it


def _stack(*rows: dict) -> dict:
    return {k: [r[k] for r in rows] for k in rows[0]}


def _spec(comment: str, flags, result: str = "valid", params: dict | None = None, **inputs) -> VectorSpec:
    """A vector of int64 arrays (scalars 0-d); an np.ndarray input keeps its dtype."""
    kept = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
    case = int_case(params, **{k: v for k, v in inputs.items() if k not in kept})
    return VectorSpec(comment, tuple(flags), Case({k: kept.get(k, case.inputs.get(k)) for k in inputs},
                                                  case.params), result)


def _random_rows(op: str, n: int = 8) -> list[dict]:
    """Seeded random small configurations (not the published ones)."""
    rng = np.random.default_rng(seed_for(f"sparse.traffic.{op}"))
    rows = [{k: int(rng.integers(MINIMA.get(k, 0), {"tokens": 3000}.get(k, 70) + 1)) for k in NAMES[op]}
            for _ in range(n)]
    for r in rows:
        if "local" in r:
            r["local"] = min(r["local"], r["selected"])
    return rows


def _main(op: str, comment: str, flags, rows: list[dict], ceil: dict, exact: list[dict],
          params: dict | None = None) -> VectorSpec:
    """One stacked vector: the op's named rows, then a sub-byte row (bits rounded once),
    rows past 2^53 (and past 2^63 bits), and seeded random rows; each input in the
    narrowest of uint8, int32 and int64 that holds its values."""
    stacked = {k: np.asarray(v, np.int64) for k, v in _stack(*rows, ceil, *exact, *_random_rows(op)).items()}
    narrow = {k: v.astype(np.uint8 if v.max() < 256 else np.int32 if v.max() < 1 << 31 else np.int64)
              for k, v in stacked.items()}
    return _spec(comment + "; + a sub-byte row, 2^53 and 2^63-bit rows, 8 random rows",
                 (*flags, "CeilOnce", "Int64", RANDOM), params=params, **narrow)


def _common(op: str, base: dict, big: dict, huge: dict, zero: tuple[str, dict]) -> list[VectorSpec]:
    """Every traffic op's dtype, empty and invalid vectors, from a valid `base` config, a
    `big` one whose bits pass 2^32, a `huge` one past int64 bytes and an op-specific `zero`
    (golden/ is kept small: the generic refusals, bool, negative, float and broadcast
    counts, are the roofline area's, tested on the default kernel in tests)."""
    names = NAMES[op]
    mixed = {k: np.asarray(big[k], np.uint32 if k == "tokens" else np.int32 if big[k] > 255 else np.uint8)
             for k in names}
    return [
        _spec("0-d, mixed dtypes: tokens uint32, counts past 255 int32, the rest uint8; bits past 2^32", ("Int64",),
              **mixed),
        _spec("empty arrays: an empty int64 output", (EMPTY_INPUT,), **{k: np.zeros(0, np.int64) for k in names}),
        _spec(zero[0], (INVALID_INPUT,), "invalid", **{**base, **zero[1]}),
        _spec("a result past 2^63 - 1 is rejected, not wrapped", ("Int64", INVALID_INPUT), "invalid", **huge),
    ]


def dense_vectors() -> list[VectorSpec]:
    base = dict(tokens=4, **GQA)
    return _common("dense", base, dict(tokens=1 << 20, **GQA), dict(tokens=1 << 62, **GQA),
                   ("tokens 0 is rejected (>= 1: a decode step attends its own key)", {"tokens": 0})) + [
        _main("dense", "Qwen3-8B's layer at 8k, 32k, 128k and 1 token (its own key); DeepSeek-V3.2's MLA entry (one "
              "head of 512 + 64, values 0: the latent read once) at 128k, bf16 and fp8", ("TrafficMlaTwice",),
              [dict(tokens=t, **GQA) for t in (8192, 32768, 131072, 1)]
              + [dict(tokens=131072, kv_heads=1, head_dim=576, v_head_dim=0, element_bits=b) for b in (16, 8)],
              dict(tokens=1, kv_heads=3, head_dim=1, v_head_dim=0, element_bits=3),
              [dict(tokens=_P53, **ONE), dict(tokens=1 << 60, **ONE)]),
    ]


def block_vectors() -> list[VectorSpec]:
    base = dict(tokens=100, block_size=64, blocks=3, index_bits=32, **GQA)
    rows = [dict(base, tokens=t, blocks=n) for t, n in ((100, 2), (129, 3), (191, 2), (128, 2), (1, 1), (64, 1))]
    rows += [dict(base, tokens=t, blocks=16) for t in (100, 1000, 1024)]
    rows += [dict(base, tokens=t, head_dim=0, v_head_dim=0, index_bits=b) for t, b in ((100, 32), (1000, 64))]
    ceil = dict(tokens=1, block_size=1, blocks=1, kv_heads=3, head_dim=1, v_head_dim=0, element_bits=3, index_bits=1)
    exact = [dict(ONE, tokens=_P53, block_size=1 << 40, blocks=1, index_bits=0),
             dict(ONE, tokens=1 << 60, block_size=1, blocks=1 << 60, index_bits=0)]
    flags = ("TrafficPartialBlock", "TrafficClip", "TrafficIndexReads")
    what = ("decode at 128k with 1/16 of the blocks of 64 (128 int32 indices); the query's block partial (100, "
            "129, 191 tokens), full (128, 64), alone (1); 16 blocks asked of 2, 16, 16; index reads alone")
    top = [dict(base, tokens=131072, blocks=128)] + rows
    return _common("block", base, dict(base, tokens=1 << 20, blocks=1 << 12),
                   dict(base, tokens=1 << 62, blocks=1 << 57),
                   ("blocks 0 is rejected (>= 1: the query's own block)", {"blocks": 0})) + [
        _main("block", what, flags, top, ceil, exact),
        _main("block", "the previous vector's rows, the query's block unselected (full blocks only)", flags, top,
              ceil, exact, {"last": "unselected"}),
        _main("block", "the previous vector's rows in the CSR layout (two indptr entries, not one count)", flags, top,
              ceil, exact, {"layout": "csr"}),
    ]


def nsa_vectors() -> list[VectorSpec]:
    base = dict(tokens=600, **NSA, **ONE)
    rows = [dict(base, tokens=t) for t in (8192, 16384, 32768, 65536)]  # the paper's Table 4
    rows += [dict(base, tokens=t) for t in (1, 31, 32, 33, 47, 48, 64, 65, 511, 512, 2000)]
    rows += [dict(base, window=32), dict(base, window=0), dict(base, selected=2), dict(base, tokens=2000, selected=3,
                                                                                       local=3)]
    rows += [dict(tokens=t, window=w, **FLA, **ONE) for t, w in ((64, 0), (1000, 256), (131072, 512))]
    rows += [dict(tokens=131072, **NSA, **GQA)]
    ceil = dict(base, tokens=1, kv_heads=3, element_bits=3)
    exact = [dict(base, tokens=_P53), dict(base, tokens=1 << 62, element_bits=1, cmp_block=1 << 62)]
    what = ("one byte per entry: the paper's Table 4 contexts (2047, 2559, 3583, 5631; its L / d compressed tokens "
            "give 2048, 2560, 3584, 5632); short contexts (no complete compression block below 32, the window "
            "min(512, L), the last selection block partial); window 32 and 0, n = local; fla's one block size 64; "
            "Qwen3-8B's layer at 128k")
    flags = ("TrafficCompressedCount", "TrafficWindow", "TrafficPartialBlock", "TrafficClip", "TrafficOverlap")
    return _common("nsa", base, dict(base, tokens=1 << 22, **GQA), dict(base, tokens=1 << 61, **GQA),
                   ("local > selected is rejected (the forced blocks are among the selected)",
                    {"selected": 1, "local": 2})) + [
        _main("nsa", what, flags, rows, ceil, exact),
        _main("nsa", "the previous vector's rows, union (the window's forced local blocks once)", flags, rows, ceil,
              exact,
              {"overlap": "union"}),
    ]


def moba_vectors() -> list[VectorSpec]:
    base = dict(tokens=10000, **MOBA, **ONE)
    rows = [dict(base, tokens=t) for t in (1, 4096, 4097, 10000, 131072, 1 << 20)]
    rows += [dict(base, head_dim=3, v_head_dim=5), dict(base, top_k=1, head_dim=3, v_head_dim=5),
             dict(base, tokens=32768, chunk_size=2048, top_k=3, head_dim=3, v_head_dim=5)]
    ceil = dict(base, tokens=1, kv_heads=3, element_bits=3)
    exact = [dict(base, tokens=_P53, top_k=1), dict(base, tokens=1 << 60, chunk_size=1, top_k=1 << 60)]
    what = ("the examples' chunks of 4096, top-12 (the current chunk among the 12, partial when 4096 does not "
            "divide L) at 1 to 2^20 tokens, 1 byte a key; keys of 3 and values of 5 elements (the gate reads keys "
            "only), top-1, the README's 2048 x top-3 at 32k")
    flags = ("TrafficCurrentChunk", "TrafficPartialBlock", "TrafficGating", "TrafficClip")
    return _common("moba", base, dict(base, tokens=1 << 20, **GQA),
                   dict(base, tokens=1 << 62, top_k=1 << 62, **GQA),
                   ("tokens 0 is rejected (>= 1)", {"tokens": 0})) + [
        _main("moba", "the gate recomputing the means from every key: " + what, flags, rows, ceil, exact),
        _main("moba", "the previous vector's rows, cached means (one per complete past chunk)", flags, rows, ceil,
              exact,
              {"gating": "cached"}),
    ]


def dsa_vectors() -> list[VectorSpec]:
    base = dict(tokens=4096, **DSA)
    rows = [dict(base, tokens=t) for t in (8192, 32768, 131072, 1, 100, 2048)]
    rows += [dict(base, index_group=64), dict(base, index_group=100), dict(base, index_scale_bits=8),
             dict(base, element_bits=8)]
    ceil = dict(base, tokens=1, kv_lora_rank=0, qk_rope_head_dim=0, index_head_dim=3, index_bits=3,
                index_scale_bits=0)
    exact = [dict(base, tokens=_P53, index_head_dim=1, index_bits=8, index_scale_bits=0, top_k=1, kv_lora_rank=0,
                  qk_rope_head_dim=0),
             dict(base, tokens=1 << 60, index_head_dim=1, index_bits=8, index_scale_bits=0, top_k=1,
                  kv_lora_rank=0, qk_rope_head_dim=0)]
    return _common("dsa", base, dict(base, tokens=1 << 22), dict(base, tokens=1 << 58),
                   ("tokens 0 is rejected (>= 1)", {"tokens": 0})) + [
        _main("dsa", "DeepSeek-V3.2 at 8k, 32k, 128k (132 indexer bytes a token, 2048 latents of 512 + 64), "
              "shorter than top-k (1, 100, 2048: every token attended); scale groups of 64 and 100 (ceil(128 / 100)"
              " = 2 scales), UE8M0 8-bit scales, an fp8 latent", ("TrafficIndexerBits", "TrafficScaleGroups",
                                                                  "TrafficMlaTwice", "TrafficClip"),
              rows, ceil, exact),
    ]


def _examples(op: str, maxima: dict):
    """Configurations of 0-d (n = -1) or 1-d arrays of n elements, local <= selected."""
    names = NAMES[op]

    @st.composite
    def case(draw, supported):
        n = draw(st.integers(-1, 4), label="n")
        values = {k: draw(st.lists(st.integers(MINIMA.get(k, 0), maxima.get(k, 300)), min_size=max(n, 1),
                                   max_size=max(n, 1)), label=k) for k in names}
        inputs = {k: np.asarray(v[0] if n < 0 else v, np.int64) for k, v in values.items()}
        if "local" in inputs:
            inputs["local"] = np.minimum(inputs["local"], inputs["selected"])
        return Case(inputs, draw(variant_params(supported)))
    return case


_MAX = {"tokens": 1 << 20, "element_bits": 16, "index_bits": 64, "index_scale_bits": 32, "kv_heads": 64,
        "head_dim": 600, "v_head_dim": 256, "index_head_dim": 256}
LAST = Variant("last", traffic.Last, "selected",
               "the query's own (last, partial) block among the selected (decode) or not")
LAYOUT = Variant("layout", traffic.Layout, "lists",
                 "the block list: indices + a count (lists) or + two indptr entries (csr)")
OVERLAP = Variant("overlap", traffic.Overlap, "reread",
                  "NSA's window and selected tokens that coincide: read by each branch (reread) or once (union)")
GATING = Variant("gating", traffic.Gating, "recompute",
                 "MoBA's gate: chunk means recomputed from all L keys (the reference) or cached per past chunk")


def _op(name: str, oracle, summary: str, vectors, variants=()):
    return AREA.exact(f"traffic.{name}", oracle, anchor=f"traffic-{name}", summary=summary, vectors=vectors,
                      variants=variants, compare=compare_exact, examples=_examples(name, _MAX))


OPERATIONS = [
    _op("dense", traffic.dense_bytes, "bytes a dense decode step reads (every key and value)", dense_vectors),
    _op("block", traffic.block_bytes, "bytes a block-sparse decode step reads (blocks, partial last, block list)",
        block_vectors, (LAST, LAYOUT)),
    _op("nsa", traffic.nsa_bytes, "bytes an NSA decode step reads (compressed, selected, window)", nsa_vectors,
        (OVERLAP,)),
    _op("moba", traffic.moba_bytes, "bytes a MoBA decode step reads (top-k chunks and the gate)", moba_vectors,
        (GATING,)),
    _op("dsa", traffic.dsa_bytes, "bytes a DSA decode step reads (FP8 indexer keys, top-k MLA entries)",
        dsa_vectors),
]

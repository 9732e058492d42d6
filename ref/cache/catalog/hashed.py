"""vLLM v1's hash-chained block cache.

  cache.block_hash     exact: one full block's hash from its parent's, its tokens, its extra keys
  cache.prefix_blocks  stateful: the BlockPool + KVCacheManager prefix cache (lookup,
                       allocate, append, free, the free queue)
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.cache.block_hash import HashFunction, block_hash
from ref.cache.catalog.common import AREA
from ref.cache.prefix_blocks import FreeOrder, PrefixBlockCache
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact
from ref.testing.params import variant_params
from ref.testing.stateful import StatefulOp, TraceSpec
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "HashChain": Flag("a block hashed without its parent's hash (or with the wrong parent)",
                      "equal tokens under different prefixes collide: a request reuses another prefix's KV"),
    "ExtraKeys": Flag("the LoRA adapter, a multimodal item or the cache salt left out of the hash (or the salt on "
                      "every block)", "requests with different adapters, images or salts share KV blocks"),
    "NoneHash": Flag("the first block's parent taken as empty bytes or zeros instead of H(seed)",
                     "hashes differ from vLLM's: no cache hit across engines or processes"),
    "Serialisation": Flag("the triple serialised another way (non-canonical CBOR, another pickle protocol, tokens "
                          "as int64 arrays)", "hashes differ from the engine's: prefix sharing silently lost"),
    "FullBlocksOnly": Flag("a partial block hashed and cached", "a later request reuses a block whose KV is missing "
                           "tokens"),
    "LastToken": Flag("a cache hit covering the whole prompt", "no token is left to compute: the first output token "
                      "has no logits"),
    "Leak": Flag("a block not returned to the free queue (on free, or a touched hit not released)",
                 "the pool shrinks until every request is refused"),
    "EvictionOrder": Flag("the free queue in the wrong order: by insertion not last use, head first not tail first, "
                          "unhashed blocks appended", "useful prefixes evicted before stale ones"),
    "LazyEviction": Flag("a freed block's hash dropped before the block is reused (at free, or by a refused "
                         "request), or never dropped at reuse",
                         "no reuse after a request ends, or a reused block still served as the old prefix"),
    "RefusedState": Flag("a refused allocate, append or free that changed the state before refusing: hit blocks "
                         "touched, new blocks taken, hashes evicted, the request registered, its tokens recorded, "
                         "a valid prefix cached",
                         "every refused request (a full pool, a bad token) leaks blocks, loses cached prefixes or "
                         "blocks its id: the pool degrades under load"),
}

HASH = Variant("hash_function", HashFunction, HashFunction.SHA256_CBOR,
               "serialisation before SHA-256: canonical CBOR (vLLM's sha256_cbor) or pickle protocol 5 (vLLM's "
               "default sha256)")
ORDER = Variant("free_order", FreeOrder, FreeOrder.PREPEND_UNHASHED,
                "where freed blocks join the free queue: unhashed at the front (vLLM 0.33) or all at the back "
                "(v1 before vLLM PR #42656)")
EMPTY = np.zeros(0, np.uint8)


def _utf8(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), np.uint8).copy()


def _case(parent, tokens, fn: str, **extra) -> Case:
    return Case({"parent": np.asarray(parent, np.uint8), "tokens": np.asarray(tokens, np.int64), **extra},
                {"hash_function": fn})


def _hash_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("cache.block_hash"))
    toks = rng.integers(0, 150_000, 16)
    specs = []
    for fn in HASH.values:
        first = block_hash(EMPTY, toks, hash_function=fn)
        other = block_hash(EMPTY, toks[::-1].copy(), hash_function=fn)
        v = lambda c, flags, case, result="valid": specs.append(VectorSpec(f"{c} ({fn})", flags, case, result))  # noqa: E731
        v("the first block: parent NONE_HASH", ("NoneHash", "Serialisation"), _case(EMPTY, toks, fn))
        v("a second block under a first", ("HashChain",), _case(first, toks, fn))
        v("the same tokens under another parent", ("HashChain",), _case(other, toks, fn))
        v("tokens past 2^16 and 2^32 (CBOR's longer heads; pickle's BININT and LONG1)", ("Serialisation",),
          _case(first, [0, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**40], fn))
        v("a block of one token", ("Serialisation",), _case(EMPTY, [7], fn))
        lora = {"lora_name": _utf8("sql-adapter"), "lora_path": _utf8("/adapters/sql")}
        v("a LoRA adapter on the first block", ("ExtraKeys",), _case(EMPTY, toks, fn, **lora))
        v("a LoRA adapter on a later block", ("ExtraKeys",), _case(first, toks, fn, **lora))
        v("the cache salt on the first block", ("ExtraKeys",), _case(EMPTY, toks, fn, cache_salt=_utf8("tenant-7")))
        v("the cache salt is ignored on a later block", ("ExtraKeys",),
          _case(first, toks, fn, cache_salt=_utf8("tenant-7")))
        mm = {"mm_ids": np.stack([_utf8("img-aaaa"), _utf8("img-bbbb")]), "mm_offsets": np.int64([-3, 9])}
        v("two multimodal items, one begun in an earlier block", ("ExtraKeys",), _case(first, toks, fn, **mm))
        v("LoRA, an item and the salt together, in that order", ("ExtraKeys",),
          _case(EMPTY, toks, fn, **lora, cache_salt=_utf8("s"), mm_ids=_utf8("img-aaaa")[None],
                mm_offsets=np.int64([0])))
        v("a non-ASCII salt (UTF-8)", ("ExtraKeys", "Serialisation"), _case(EMPTY, toks, fn, cache_salt=_utf8("sél")))
        bad = lambda c, case, flags=("InvalidInput",): v(c, flags, case, "invalid")  # noqa: E731
        bad("an empty block is rejected", _case(EMPTY, np.zeros(0), fn))
        bad("a negative token is rejected", _case(EMPTY, [1, -1], fn))
        bad("a parent of 31 bytes is rejected", _case(first[:31], toks, fn))
        bad("float tokens are rejected", Case({"parent": EMPTY, "tokens": toks.astype(np.float64)},
                                              {"hash_function": fn}))
        bad("a LoRA path without a name is rejected", _case(EMPTY, toks, fn, lora_path=_utf8("/p")))
        # adv12 #4: a LoRA named without a path is keyed ("lora", name, ""), the empty path kept
        v("a LoRA name with an empty path keeps the path in the key", ("ExtraKeys",),
          _case(EMPTY, [1, 2, 3, 4], fn, lora_name=_utf8("a")))
        bad("mm offsets not matching the ids are rejected",
            _case(EMPTY, toks, fn, mm_ids=_utf8("img-aaaa")[None], mm_offsets=np.int64([1, 2])))
    return specs


def _hash_examples(supported):
    tokens = st.lists(st.integers(0, 2**34), min_size=1, max_size=20).map(lambda t: np.asarray(t, np.int64))
    parent = st.one_of(st.just(EMPTY), st.binary(min_size=32, max_size=32).map(
        lambda b: np.frombuffer(b, np.uint8).copy()))
    salt = st.text(max_size=6).map(_utf8)
    return st.tuples(parent, tokens, salt, variant_params(supported)).map(
        lambda t: Case({"parent": t[0], "tokens": t[1], "cache_salt": t[2]}, t[3]))


# ------------------------------------------------------------------ the stateful op

def _p(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def _traces() -> list[TraceSpec]:
    A, L, F, Q, N, P = "allocate", "lookup", "free", "free_queue", "num_free", "append"
    sys16 = _p(8, 100)  # a shared "system prompt" of two blocks of 4
    return [
        TraceSpec("a prompt is allocated, freed tail first, and its prefix hit again", ("Leak", "EvictionOrder"),
                  ((A, {"request_id": "a", "tokens": sys16 + [1, 2, 3]}), (Q, {}),
                   (F, {"request_id": "a"}), (Q, {}),
                   (L, {"tokens": sys16 + [5, 6]}),
                   (A, {"request_id": "b", "tokens": sys16 + [5, 6]}), (Q, {}), (N, {}))),
        TraceSpec("equal tokens under another prefix do not hit", ("HashChain",),
                  ((A, {"request_id": "a", "tokens": _p(4, 10) + _p(4, 20) + [0]}),
                   (L, {"tokens": _p(4, 30) + _p(4, 20) + [0]}), (L, {"tokens": _p(4, 20) + [0]}),
                   (A, {"request_id": "b", "tokens": _p(4, 30) + _p(4, 20) + [0]}))),
        TraceSpec("only full blocks are cached: a partial block never hits", ("FullBlocksOnly",),
                  ((A, {"request_id": "a", "tokens": _p(6)}), (F, {"request_id": "a"}),
                   (L, {"tokens": _p(7)}), (L, {"tokens": _p(9)}), (A, {"request_id": "b", "tokens": _p(9)}))),
        TraceSpec("the hit never covers the last prompt token", ("LastToken",),
                  ((A, {"request_id": "a", "tokens": _p(8)}), (L, {"tokens": _p(8)}), (L, {"tokens": _p(9)}),
                   (A, {"request_id": "b", "tokens": _p(8)}), (Q, {}))),
        TraceSpec("a LoRA adapter and a cache salt isolate, the salt only through the first block", ("ExtraKeys",),
                  ((A, {"request_id": "a", "tokens": _p(9)}),
                   (L, {"tokens": _p(9), "lora_name": "sql", "lora_path": "/sql"}),
                   (L, {"tokens": _p(9), "cache_salt": "t1"}),
                   (A, {"request_id": "b", "tokens": _p(9), "cache_salt": "t1"}),
                   (L, {"tokens": _p(9), "cache_salt": "t1"}),
                   (A, {"request_id": "c", "tokens": _p(9), "lora_name": "sql", "lora_path": "/sql"}),
                   (L, {"tokens": _p(9), "lora_name": "sql", "lora_path": "/sql"})), params={"num_blocks": 10}),
        TraceSpec("freed hashed blocks stay cached until reused; reuse evicts them oldest first",
                  ("LazyEviction", "EvictionOrder"),
                  ((A, {"request_id": "a", "tokens": _p(9)}), (F, {"request_id": "a"}), (Q, {}),
                   (A, {"request_id": "b", "tokens": _p(9, 50)}), (F, {"request_id": "b"}), (Q, {}),
                   (A, {"request_id": "c", "tokens": _p(25, 200)}), (L, {"tokens": _p(9)}),
                   (L, {"tokens": _p(9, 50)}), (Q, {})), params={"num_blocks": 10}),
        TraceSpec("a hit refreshes a block: the eviction order is by last use, not by insertion", ("EvictionOrder",),
                  ((A, {"request_id": "a", "tokens": _p(5)}), (F, {"request_id": "a"}),
                   (A, {"request_id": "b", "tokens": _p(5, 40)}), (F, {"request_id": "b"}),
                   (A, {"request_id": "c", "tokens": _p(5)}), (F, {"request_id": "c"}), (Q, {}),
                   (A, {"request_id": "d", "tokens": _p(13, 80)}), (L, {"tokens": _p(5)}),
                   (L, {"tokens": _p(5, 40)})), params={"num_blocks": 6}),
        TraceSpec("a shared prefix is referenced twice and freed only by its last holder", ("Leak",),
                  ((A, {"request_id": "a", "tokens": sys16 + [1]}), (A, {"request_id": "b", "tokens": sys16 + [2]}),
                   (N, {}), (F, {"request_id": "a"}), (N, {}), (Q, {}), (F, {"request_id": "b"}), (Q, {}))),
        TraceSpec("decode tokens fill a block, which is then cached", ("FullBlocksOnly", "Leak"),
                  ((A, {"request_id": "a", "tokens": _p(3)}), (P, {"request_id": "a", "tokens": [3]}),
                   (P, {"request_id": "a", "tokens": [4, 5]}), (F, {"request_id": "a"}), (Q, {}),
                   (L, {"tokens": _p(6)}))),
        TraceSpec("earlier releases append the unhashed tail too", ("EvictionOrder",),
                  ((A, {"request_id": "a", "tokens": _p(10)}), (F, {"request_id": "a"}), (Q, {})),
                  params={"free_order": "append_all"}),
        TraceSpec("pickle hashes (vLLM's default) show in the evicted hashes", ("Serialisation", "NoneHash"),
                  ((A, {"request_id": "a", "tokens": _p(8)}), (F, {"request_id": "a"}),
                   (A, {"request_id": "b", "tokens": _p(12, 9)})),
                  params={"num_blocks": 4, "hash_function": "sha256_pickle"}),
        TraceSpec("CBOR hashes show in the evicted hashes", ("Serialisation", "NoneHash", "ExtraKeys"),
                  ((A, {"request_id": "a", "tokens": _p(8), "cache_salt": "x"}), (F, {"request_id": "a"}),
                   (A, {"request_id": "b", "tokens": _p(12, 9)})), params={"num_blocks": 4}),
        # adv12 #5: a 2B prompt allocated twice recomputes its last full block, so two blocks hold one
        # hash; a hit must return the first cached (vLLM's cached_block_hash_to_block takes the first)
        TraceSpec("two blocks hold one hash (a 2B prompt recomputes its last full block): a hit returns the first cached", ("HashChain",),
                  ((A, {"request_id": "a", "tokens": _p(8)}), (A, {"request_id": "b", "tokens": _p(8)}),
                   (L, {"tokens": _p(9)}), (F, {"request_id": "a"}), (F, {"request_id": "b"}),
                   (L, {"tokens": _p(9)}))),
        # adv12 (search only): the duplicate block must be registered too, so it still hits once the
        # first holder of the hash is evicted
        TraceSpec("a second block with a cached hash is registered: it hits after the first is evicted",
                  ("HashChain", "LazyEviction"),
                  ((A, {"request_id": "a", "tokens": _p(8)}), (A, {"request_id": "b", "tokens": _p(8)}),
                   (F, {"request_id": "a"}), (A, {"request_id": "c", "tokens": _p(8, 50)}),
                   (L, {"tokens": _p(9)})), params={"num_blocks": 5}),
        # adv12 #6: the salt is added to the first block's keys with or without a LoRA adapter
        TraceSpec("the cache salt isolates a LoRA request too", ("ExtraKeys",),
                  ((A, {"request_id": "a", "tokens": _p(8), "lora_name": "L", "lora_path": "/p", "cache_salt": "s1"}),
                   (L, {"tokens": _p(9), "lora_name": "L", "lora_path": "/p", "cache_salt": "s2"}),
                   (L, {"tokens": _p(9), "lora_name": "L", "lora_path": "/p", "cache_salt": "s1"}))),
        # adv12 #7: a block filled by append is hashed with the request's own salt (and LoRA)
        TraceSpec("a block filled by decode is hashed under the request's salt", ("ExtraKeys", "HashChain"),
                  ((A, {"request_id": "a", "tokens": _p(6), "cache_salt": "s"}), (P, {"request_id": "a", "tokens": [6, 7]}),
                   (L, {"tokens": _p(9), "cache_salt": "s"}))),
        # adv12 #8: num_free counts freed cached blocks (they stay in the free queue, evicted lazily)
        TraceSpec("freed cached blocks still count as free (they are reused lazily)", ("LazyEviction",),
                  ((A, {"request_id": "a", "tokens": _p(8)}), (F, {"request_id": "a"}), (N, {}))),
        TraceSpec("more blocks than are free is refused", ("InvalidInput",),
                  ((A, {"request_id": "a", "tokens": _p(20)}), (A, {"request_id": "b", "tokens": _p(13, 50)})),
                  result="invalid"),
        TraceSpec("freeing an unknown request is refused", ("InvalidInput", "Leak"),
                  ((A, {"request_id": "a", "tokens": _p(3)}), (F, {"request_id": "a"}), (F, {"request_id": "a"})),
                  result="invalid"),
        TraceSpec("a pool of only the null block is refused", ("InvalidInput",), (), params={"num_blocks": 1},
                  result="invalid"),
        # adv12 #9, #10: a LoRA path without a name, an empty prompt
        TraceSpec("a LoRA path without a name is refused", ("InvalidInput",),
                  ((A, {"request_id": "a", "tokens": _p(5), "lora_path": "/p"}),), result="invalid"),
        TraceSpec("an empty prompt is refused", ("InvalidInput",), ((A, {"request_id": "a", "tokens": []}),),
                  result="invalid"),
        # adv12 (search only): append needing one block more than are free is refused
        TraceSpec("an append needing one block more than are free is refused", ("InvalidInput",),
                  ((A, {"request_id": "a", "tokens": _p(4)}), (A, {"request_id": "b", "tokens": _p(4, 50)}),
                   (P, {"request_id": "a", "tokens": _p(5, 4)})), params={"num_blocks": 4}, result="invalid"),
        # issue 12: a refusal in the middle of a trace, then the state it could have corrupted probed
        TraceSpec("a refused allocate touches no hit, takes no block, evicts no hash and registers no request",
                  ("RefusedState", "Leak", "EvictionOrder", "LazyEviction"),
                  ((A, {"request_id": "a", "tokens": _p(9)}), (A, {"request_id": "x", "tokens": _p(5, 60)}),
                   (F, {"request_id": "a"}), (F, {"request_id": "x"}), (Q, {}),
                   (A, {"request_id": "b", "tokens": _p(8) + _p(20, 50)}),
                   (Q, {}), (N, {}), (L, {"tokens": _p(9)}), (A, {"request_id": "b", "tokens": _p(9)}), (Q, {})),
                  params={"num_blocks": 7}, result="invalid", refused=(6,)),
        TraceSpec("a refused allocate with no hit takes no block: the next request gets the free ones",
                  ("RefusedState", "Leak"),
                  ((A, {"request_id": "a", "tokens": _p(8)}), (A, {"request_id": "b", "tokens": _p(16, 50)}),
                   (N, {}), (A, {"request_id": "c", "tokens": _p(12, 80)}), (N, {})),
                  params={"num_blocks": 6}, result="invalid", refused=(2,)),
        TraceSpec("a refused allocate evicts nothing: the freed prefix still hits after it",
                  ("RefusedState", "LazyEviction"),
                  ((A, {"request_id": "a", "tokens": _p(8)}), (F, {"request_id": "a"}),
                   (A, {"request_id": "b", "tokens": _p(20, 50)}), (Q, {}), (L, {"tokens": _p(9)}),
                   (A, {"request_id": "c", "tokens": _p(9)})),
                  params={"num_blocks": 5}, result="invalid", refused=(3,)),
        TraceSpec("a refused append takes no block and records no token", ("RefusedState", "Leak"),
                  ((A, {"request_id": "a", "tokens": _p(4)}), (A, {"request_id": "b", "tokens": _p(4, 50)}),
                   (P, {"request_id": "a", "tokens": _p(5, 4)}), (N, {}),
                   (P, {"request_id": "a", "tokens": [4, 5, 6]}), (P, {"request_id": "a", "tokens": [7]}),
                   (F, {"request_id": "a"}), (Q, {}), (L, {"tokens": _p(9)})),
                  params={"num_blocks": 4}, result="invalid", refused=(3,)),
        TraceSpec("a prompt with a bad token in a later block is refused before any block is taken or cached",
                  ("RefusedState", "Leak", "FullBlocksOnly"),
                  ((A, {"request_id": "a", "tokens": _p(4, 50)}),
                   (A, {"request_id": "b", "tokens": _p(9) + [-1, 3]}), (N, {}), (L, {"tokens": _p(9)}),
                   (A, {"request_id": "c", "tokens": _p(9)}), (N, {})),
                  result="invalid", refused=(2,)),
        TraceSpec("a second allocate of a live request id is refused before its hits are touched",
                  ("RefusedState", "Leak"),
                  ((A, {"request_id": "a", "tokens": sys16 + [1]}), (A, {"request_id": "a", "tokens": sys16 + [2]}),
                   (N, {}), (F, {"request_id": "a"}), (Q, {}), (N, {})),
                  result="invalid", refused=(2,)),
        TraceSpec("freeing an unknown request registers nothing: the id is allocated after it", ("RefusedState",),
                  ((A, {"request_id": "a", "tokens": _p(5)}), (F, {"request_id": "b"}),
                   (P, {"request_id": "c", "tokens": [1]}),
                   (A, {"request_id": "b", "tokens": _p(5)}), (A, {"request_id": "c", "tokens": _p(5, 20)}),
                   (F, {"request_id": "b"}), (N, {})),
                  result="invalid", refused=(2, 3)),
        TraceSpec("a LoRA path without a name is refused before any block is taken", ("RefusedState", "InvalidInput"),
                  ((A, {"request_id": "a", "tokens": _p(9)}),
                   (A, {"request_id": "b", "tokens": _p(9), "lora_path": "/p"}), (N, {}),
                   (A, {"request_id": "b", "tokens": _p(9)}), (N, {})),
                  result="invalid", refused=(2,)),
    ]


# (which step, a prompt family, a length, the extra keys, a pick, which refusal): which == 6 (one step in
# seven) is a step the reference refuses, drawn once the cache has state, so the search meets refusals in
# the middle of a trace and the steps after them show a refusal that changed something
_DRAW = st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(1, 14), st.integers(0, 2), st.integers(0, 7),
                  st.integers(0, 5))
_EXTRAS = ({}, {"cache_salt": "s"}, {"lora_name": "l", "lora_path": "/l"})


def _refusal(cache: PrefixBlockCache, live: list[str], tokens: list[int], extra: int, pick: int, kind: int):
    """A step the reference refuses: a prompt longer than the pool can hold whatever it hits (its first
    blocks likely cached: hits to touch, blocks to evict), a live id allocated again, an append past the
    free blocks, a bad token in a later block, an idle id freed or appended to, a LoRA path alone or an
    empty prompt."""
    extras = _EXTRAS[extra]
    if kind == 0 or (kind in (1, 2) and not live):
        long = tokens + [1000 + i for i in range(len(tokens), 2 * cache.num_blocks * cache.block_size)]
        return "allocate", {"request_id": f"r{pick}", "tokens": long, **extras}
    if kind == 1:
        return "allocate", {"request_id": live[pick % len(live)], "tokens": tokens, **extras}
    if kind == 2:
        too_many = [7] * (cache.num_free() + 1) * cache.block_size
        return "append", {"request_id": live[pick % len(live)], "tokens": too_many}
    if kind == 3:
        return "allocate", {"request_id": f"r{pick}", "tokens": tokens + [-1] + tokens, **extras}
    if kind == 4:  # an id not live now, which a later allocate may well use
        idle = [r for r in (f"r{i}" for i in range(8)) if r not in live]
        rid = idle[pick % len(idle)] if idle else "u"
        return ("free", {"request_id": rid}) if extra else ("append", {"request_id": rid, "tokens": [1]})
    if extra:
        return "allocate", {"request_id": f"r{pick}", "tokens": tokens, "lora_path": "/l"}
    return "allocate", {"request_id": f"r{pick}", "tokens": []}


def _step(cache: PrefixBlockCache, draw) -> tuple[str, dict]:
    which, prefix, length, extra, pick, kind = draw
    live = cache.requests()
    tokens = [prefix * 10 + (i % 3 if prefix else i) for i in range(length)]  # few prefixes: many hits
    extras = _EXTRAS[extra]
    if which == 6 and (live or cache.snapshot()["cached"]):
        return _refusal(cache, live, tokens, extra, pick, kind)
    if which in (0, 1, 6):
        return "allocate", {"request_id": f"r{pick}", "tokens": tokens, **extras}
    if which == 2 and live:
        return "free", {"request_id": live[pick % len(live)]}
    if which == 3 and live:
        return "append", {"request_id": live[pick % len(live)], "tokens": tokens[:pick % 5 + 1]}
    if which == 4:
        return "lookup", {"tokens": tokens, **extras}
    return ("num_free", {}) if pick % 3 == 0 else ("free_queue", {})


def _snapshot(cache):
    """The reference's state as JSON, with what its own snapshot leaves out and a refusal
    could still corrupt: each request's token count (an append's tokens recorded before
    its check), the blocks holding each hash in the order a hit picks them, the hit
    tokens served. The generator compares it before and after every refused step."""
    if not isinstance(cache, PrefixBlockCache):
        return cache.snapshot() if hasattr(cache, "snapshot") else repr(cache)
    return {**cache.snapshot(), "tokens": {k: len(v["tokens"]) for k, v in cache._requests.items()},
            "holders": {h.hex()[:12]: list(b) for h, b in cache._cached.items() if len(b) > 1},
            "served": cache.tokens_served()}


OPERATIONS = [
    AREA.exact("block_hash", block_hash, anchor="block-hash",
               summary="a full block's hash: SHA-256 of (parent hash, tokens, extra keys) as vLLM v1 chains it",
               variants=(HASH,), vectors=_hash_vectors, compare=compare_exact, examples=_hash_examples),
    AREA.declare(StatefulOp, "prefix_blocks", PrefixBlockCache, anchor="prefix-blocks",
                 summary="vLLM v1's hash-chained prefix cache: lookup, allocate, append, free, the free queue",
                 variants=(HASH, ORDER),
                 methods=("lookup", "allocate", "append", "free", "free_queue", "num_free"),
                 vectors=_traces,
                 examples=lambda supported: st.tuples(st.sampled_from((4, 6, 8)), st.sampled_from((2, 4)),
                                                      variant_params(supported, only=("hash_function", "free_order"))).map(
                     lambda t: {"num_blocks": t[0], "block_size": t[1], **t[2]}),
                 steps=lambda cache: _DRAW.map(lambda d: _step(cache, d)),
                 snapshot=_snapshot,
                 identifiers=("lookup.observation.blocks[*]", "allocate.observation.blocks[*]",
                              "append.observation.blocks[*]", "free_queue.observation[*]"),
                 max_steps=25),
]

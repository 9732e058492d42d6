"""SGLang's radix prefix cache as a stateful op (ref.cache.radix):

  cache.radix_cache   RadixCache(page_size, policy): insert, match_prefix, lock, unlock,
                      evict, evictable_size, protected_size

Node handles are the cache's choice (compared up to renaming); an evicted node's
handle is released. The traces name the bug class each one targets.
"""

from __future__ import annotations

from hypothesis import strategies as st

from ref.cache.catalog.common import AREA
from ref.cache.radix import Policy, RadixCache
from ref.testing.catalog_types import Flag, Variant
from ref.testing.flags import COMMON
from ref.testing.stateful import StatefulOp, TraceSpec

__all__ = ["FLAGS", "OPERATIONS", "RADIX_CACHE", "steps"]

PAGE_SIZES = (1, 2, 4, 16)
METHODS = ("insert", "match_prefix", "lock", "unlock", "evict", "evictable_size", "protected_size")

FLAGS = {
    "InvalidInput": COMMON["InvalidInput"],
    "PrefixLength": Flag("insert's or match's length counted wrongly (the new tokens, not those already cached; "
                         "a match that stops at the first node; a refused insert that cached the whole pages "
                         "before its bad token)",
                         "a scheduler reuses too little or too much KV cache"),
    "SplitOffset": Flag("a node split at the wrong offset when a match or insert ends inside it, or split by a "
                        "refused match or insert (one that walked its key before checking it)",
                        "a prefix is cached under the wrong tokens: later matches are too long or too short"),
    "LockedEvicted": Flag("eviction that ignores lock counts",
                          "the KV cache of a running request is freed under it"),
    "InternalEvicted": Flag("a node evicted while it still has children (a parent pushed as a leaf too early)",
                            "cached descendants become unreachable: their memory leaks"),
    "LruAccess": Flag("LRU ordered by insertion (creation) time instead of last access, or a refused insert or "
                      "match that touched the nodes it walked",
                      "a hot shared prefix (a system prompt) is evicted before cold ones"),
    "PageTruncation": Flag("a key not truncated to whole pages (page_size > 1)",
                           "a match or insert ends inside a page: a partial page is shared"),
    "ExtraKey": Flag("the extra key (LoRA id, cache salt) left out of a node's key",
                     "requests of different adapters or salts share KV cache"),
    "LockCount": Flag("lock counts or the evictable/protected sizes kept wrongly (a node counted once per lock, "
                      "a split head without its tail's count, an unlock judged by a node's count rather than the "
                      "locks taken on it, the root's unlock refused; a refused unlock that released the path first, "
                      "a refused lock of an evicted node that locked its stale parents)",
                      "the scheduler's memory accounting drifts; locked tokens are counted as evictable"),
    "Policy": Flag("an eviction policy other than the one configured (LFU, FIFO, MRU, FILO, priority), or a "
                   "refused insert that raised the hits or priorities of its path",
                   "the wrong prefixes are kept under memory pressure"),
    "RadixRefusal": Flag("a refused step that changed the cache before refusing (an evict that freed leaves "
                         "before checking its count, an insert or match that walked, split or cached part of its "
                         "key, a lock or unlock that moved lock counts): the traces go on past the refusal",
                         "a request the engine refused still costs cache: prefixes vanish or appear, the "
                         "accounting drifts"),
}


def _traces() -> list[TraceSpec]:
    i, m, lk, ul, ev = "insert", "match_prefix", "lock", "unlock", "evict"
    es, ps = ("evictable_size", {}), ("protected_size", {})
    lru, filo = {"policy": "lru", "page_size": 1}, {"policy": "filo", "page_size": 1}
    lfu, prio = {"policy": "lfu", "page_size": 1}, {"policy": "priority", "page_size": 1}
    return [
        TraceSpec("insert returns the length already cached; match the longest cached prefix", ("PrefixLength",),
                  ((i, {"tokens": [1, 2, 3, 4]}), (i, {"tokens": [1, 2, 3, 4, 5, 6]}),
                   (i, {"tokens": [1, 2, 3, 4]}), (m, {"tokens": [1, 2, 3, 4, 5, 6, 7]}), (m, {"tokens": [2]}), es),
                  params=lru),
        TraceSpec("a match ending inside a node splits it there; the tail keeps its handle", ("SplitOffset",),
                  ((i, {"tokens": [1, 2, 3, 4, 5]}), (m, {"tokens": [1, 2, 3, 9]}), (m, {"tokens": [1, 2, 3]}),
                   (m, {"tokens": [1, 2, 3, 4, 5]}), (i, {"tokens": [1, 2, 3, 7]}), (ev, {"num_tokens": 1}),
                   (m, {"tokens": [1, 2, 3, 4]}), (m, {"tokens": [1, 2, 3, 7]}), es), params=lru),
        TraceSpec("an insert ending inside a node splits it; both halves evict whole", ("SplitOffset",),
                  ((i, {"tokens": [5, 6, 7, 8]}), (i, {"tokens": [5, 6]}), (m, {"tokens": [5, 6, 7, 8]}),
                   (ev, {"num_tokens": 1}), (m, {"tokens": [5, 6, 7, 8]}), (ev, {"num_tokens": 1}), es),
                  params=lru),
        TraceSpec("a locked path is never evicted; unlocked it is", ("LockedEvicted", "LockCount"),
                  ((i, {"tokens": [1, 2, 3]}), (i, {"tokens": [5, 6]}), (m, {"tokens": [1, 2, 3]}),
                   (lk, {"node": 1}), (ev, {"num_tokens": 100}), es, ps, (ul, {"node": 1}), es, ps,
                   (ev, {"num_tokens": 100}), es), params=lru),
        TraceSpec("locking a deep node protects its ancestors too", ("LockedEvicted",),
                  ((i, {"tokens": [1, 2, 3, 4]}), (i, {"tokens": [1, 2, 8, 9]}), (m, {"tokens": [1, 2, 8, 9]}),
                   (lk, {"node": 3}), (ev, {"num_tokens": 100}), ps, es), params=lru),
        TraceSpec("a parent is evicted only after its last child (FILO: the split head is newer than the tail)",
                  ("InternalEvicted",),
                  ((i, {"tokens": [1, 2, 3]}), (i, {"tokens": [1, 2, 4]}), (ev, {"num_tokens": 2}),
                   (m, {"tokens": [1, 2, 3]}), (ev, {"num_tokens": 1}), es), params=filo),
        TraceSpec("parents become leaves in turn within one evict", ("InternalEvicted",),
                  ((i, {"tokens": [1, 2, 3, 4]}), (i, {"tokens": [1, 2, 5, 6]}), (ev, {"num_tokens": 1}),
                   (m, {"tokens": [1, 2]}), (ev, {"num_tokens": 3}), es, (m, {"tokens": [1, 2, 5, 6]})),
                  params=lru),
        TraceSpec("LRU evicts the least recently accessed, not the first inserted", ("LruAccess",),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [3, 4]}), (i, {"tokens": [5, 6]}),
                   (m, {"tokens": [1, 2]}), (ev, {"num_tokens": 1}), (m, {"tokens": [3, 4]}),
                   (ev, {"num_tokens": 2}), es), params=lru),
        TraceSpec("page size 4: keys are truncated to whole pages, matches end at a page boundary",
                  ("PageTruncation",),
                  ((i, {"tokens": [1, 2, 3, 4, 5, 6]}), es, (i, {"tokens": [1, 2, 3, 4, 5, 6, 7, 8]}),
                   (m, {"tokens": [1, 2, 3, 4, 5, 6]}), (m, {"tokens": [1, 2, 3, 4, 5, 6, 9, 9]}),
                   (m, {"tokens": [1, 2, 3]}), (i, {"tokens": [1, 2, 3, 4, 5, 6, 9, 9]}), es),
                  params={"policy": "lru", "page_size": 4}),
        TraceSpec("page size 2: a split lands on a page boundary", ("PageTruncation", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3, 4, 5, 6]}), (m, {"tokens": [1, 2, 3, 9, 5, 6]}),
                   (ev, {"num_tokens": 1}), (m, {"tokens": [1, 2, 3, 4]}), es),
                  params={"policy": "lru", "page_size": 2}),
        TraceSpec("extra keys never share nodes", ("ExtraKey",),
                  ((i, {"tokens": [1, 2, 3], "extra_key": "lora-a"}), (m, {"tokens": [1, 2, 3]}),
                   (m, {"tokens": [1, 2, 3], "extra_key": "lora-b"}), (m, {"tokens": [1, 2, 3], "extra_key": "lora-a"}),
                   (i, {"tokens": [1, 2, 3]}), (i, {"tokens": [1, 2], "extra_key": "salt"}), es,
                   (m, {"tokens": [1, 2, 3], "extra_key": "salt"})), params=lru),
        TraceSpec("lock counts nest: a node stays protected while any lock holds it", ("LockCount",),
                  ((i, {"tokens": [1, 2, 3, 4]}), (m, {"tokens": [1, 2]}), (lk, {"node": 2}),
                   (m, {"tokens": [1, 2, 3, 4]}), (lk, {"node": 1}), (lk, {"node": 1}), es, ps,
                   (ul, {"node": 2}), (ul, {"node": 1}), ps, (ev, {"num_tokens": 10}), (ul, {"node": 1}), es, ps),
                  params=lru),
        TraceSpec("a split of a locked node keeps both halves locked", ("LockCount", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3, 4]}), (m, {"tokens": [1, 2, 3, 4]}), (lk, {"node": 1}),
                   (m, {"tokens": [1, 2, 7]}), ps, (ul, {"node": 1}), es, ps), params=lru),
        TraceSpec("evict frees whole nodes, possibly more than asked; 0 frees nothing", ("InternalEvicted",),
                  ((i, {"tokens": [1, 2, 3, 4, 5]}), (ev, {"num_tokens": 0}), es, (ev, {"num_tokens": 1}), es,
                   (ev, {"num_tokens": 1})), params=lru),
        TraceSpec("LFU: fewest inserts first, then least recently accessed", ("Policy",),
                  ((i, {"tokens": [1]}), (i, {"tokens": [2]}), (i, {"tokens": [1]}), (m, {"tokens": [2]}),
                   (i, {"tokens": [3]}), (ev, {"num_tokens": 2}), es), params={"policy": "lfu", "page_size": 1}),
        TraceSpec("FIFO: the oldest created first, however recently used", ("Policy",),
                  ((i, {"tokens": [1]}), (i, {"tokens": [2]}), (m, {"tokens": [1]}), (ev, {"num_tokens": 1})),
                  params={"policy": "fifo", "page_size": 1}),
        TraceSpec("MRU: the most recently accessed first", ("Policy",),
                  ((i, {"tokens": [1]}), (i, {"tokens": [2]}), (m, {"tokens": [1]}), (ev, {"num_tokens": 1})),
                  params={"policy": "mru", "page_size": 1}),
        TraceSpec("priority: the lowest insert priority first, a path taking the highest", ("Policy",),
                  ((i, {"tokens": [1, 2], "priority": 5}), (i, {"tokens": [3]}), (m, {"tokens": [3]}),
                   (i, {"tokens": [3, 4], "priority": 1}), (ev, {"num_tokens": 1}), (ev, {"num_tokens": 1}),
                   (ev, {"num_tokens": 1})), params={"policy": "priority", "page_size": 1}),
        # adv12 #16: a match ending inside a node touches the tail it splits, not only the new head
        TraceSpec("a match ending inside a node touches the tail it splits (LRU)", ("LruAccess", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3]}), (i, {"tokens": [5]}), (m, {"tokens": [1, 2]}),
                   (ev, {"num_tokens": 1}), (ev, {"num_tokens": 1})), params=lru),
        # adv12 #17: the split head is a new node, created at the split (FIFO frees the older [5] first)
        TraceSpec("a split head is created at the split, not when its tail was (FIFO)", ("Policy", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3]}), (i, {"tokens": [5]}), (m, {"tokens": [1, 2]}),
                   (ev, {"num_tokens": 1}), (ev, {"num_tokens": 1})), params={"policy": "fifo", "page_size": 1}),
        # adv12 #18: the split head's access time is the split's, not the tail's old one
        TraceSpec("a split head's access time is the split's, not the tail's old one (LRU)",
                  ("LruAccess", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3]}), (i, {"tokens": [5]}), (m, {"tokens": [1, 2]}), (lk, {"node": 2}),
                   (ev, {"num_tokens": 1}), (ul, {"node": 2}), (ev, {"num_tokens": 1})), params=lru),
        # adv12 #19: the split head keeps its tail's hit count (not 0)
        TraceSpec("LFU: a split head inherits its tail's hit count", ("Policy", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3]}), (i, {"tokens": [1, 2, 3]}), (i, {"tokens": [5]}),
                   (m, {"tokens": [1, 2]}), (lk, {"node": 2}), (ev, {"num_tokens": 1}), (ul, {"node": 2}),
                   (ev, {"num_tokens": 1})), params={"policy": "lfu", "page_size": 1}),
        # adv12 #20: the split head keeps its tail's priority (not the default 0)
        TraceSpec("priority: a split head inherits its tail's priority", ("Policy", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3], "priority": 5}), (m, {"tokens": [1, 2]}),
                   (i, {"tokens": [7], "priority": 3}), (lk, {"node": 3}), (ev, {"num_tokens": 1}),
                   (ul, {"node": 3}), (ev, {"num_tokens": 1})), params=prio),
        # adv12 #21: an insert raises the priority of every node on its path, not only the new leaf
        TraceSpec("priority: an insert raises every node on its path, not only its leaf", ("Policy",),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [1, 2, 3], "priority": 5}),
                   (i, {"tokens": [9], "priority": 2}), (lk, {"node": 3}), (ev, {"num_tokens": 1}),
                   (ul, {"node": 3}), (ev, {"num_tokens": 1})), params=prio),
        # adv12 #22: a node's priority is the max of its inserts', never overwritten by a lower one
        TraceSpec("priority: a lower-priority insert never lowers a node's priority", ("Policy",),
                  ((i, {"tokens": [1, 2], "priority": 5}), (i, {"tokens": [9], "priority": 2}),
                   (i, {"tokens": [1, 2], "priority": 0}), (ev, {"num_tokens": 1})), params=prio),
        # adv12 #23: an insert touches every node on its path (LRU), not only the node it ends at
        TraceSpec("LRU: an insert touches every ancestor on its path, not only the node it ends at", ("LruAccess",),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [1, 2, 3]}), (i, {"tokens": [9]}),
                   (i, {"tokens": [1, 2, 3]}), (lk, {"node": 3}), (ev, {"num_tokens": 1}), (ul, {"node": 3}),
                   (ev, {"num_tokens": 1})), params=lru),
        # adv12 #24: an insert counts a hit on every node on its path (LFU), not only the deepest
        TraceSpec("LFU: an insert raises the hit count of every node on its path", ("Policy",),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [1, 2, 3]}), (i, {"tokens": [1, 2, 3]}),
                   (i, {"tokens": [9]}), (i, {"tokens": [9]}), (lk, {"node": 3}), (ev, {"num_tokens": 1}),
                   (ul, {"node": 3}), (ev, {"num_tokens": 1})), params=lfu),
        # adv12 #25: equal priorities fall back to the last access, not the creation time
        TraceSpec("priority: equal priorities fall back to last access, not creation", ("Policy",),
                  ((i, {"tokens": [1]}), (i, {"tokens": [2]}), (m, {"tokens": [1]}), (ev, {"num_tokens": 1})),
                  params=prio),
        # adv12 (search only): equal hit counts fall back to the last access, not the creation time
        TraceSpec("LFU: equal hit counts fall back to last access, not creation", ("Policy",),
                  ((i, {"tokens": [1]}), (i, {"tokens": [2]}), (m, {"tokens": [1]}), (ev, {"num_tokens": 1})),
                  params=lfu),
        # adv12 (search only): the root (a match of nothing) may be locked and unlocked like any node
        TraceSpec("the root a match of nothing returns can be locked and unlocked", ("LockCount",),
                  ((i, {"tokens": [1, 2]}), (m, {"tokens": [5]}), (lk, {"node": 0}), es, ps, (ul, {"node": 0}),
                   es, ps), params=lru),
        # adv12 (search only): unlock checks the locks taken on that node, not its lock count (which a
        # lock on a descendant raises)
        TraceSpec("unlocking a node locked only through a descendant is refused", ("InvalidInput", "LockCount"),
                  ((i, {"tokens": [1, 2, 3, 4]}), (m, {"tokens": [1, 2]}), (lk, {"node": 1}), (ul, {"node": 2})),
                  params=lru, result="invalid"),
        # adv12 #27: a float token count is refused, not truncated or compared as a float
        TraceSpec("evicting a fractional number of tokens is refused", ("InvalidInput",),
                  ((i, {"tokens": [1, 2]}), (ev, {"num_tokens": 1.5})), params=lru, result="invalid"),
        TraceSpec("unlocking a node that holds no lock is refused", ("InvalidInput", "LockCount"),
                  ((i, {"tokens": [1, 2]}), (ul, {"node": 1})), params=lru, result="invalid"),
        TraceSpec("locking an evicted node is refused", ("InvalidInput",),
                  ((i, {"tokens": [1, 2]}), (ev, {"num_tokens": 1}), (lk, {"node": 1})), params=lru,
                  result="invalid"),
        TraceSpec("evicting a negative number of tokens is refused", ("InvalidInput",),
                  ((ev, {"num_tokens": -1}),), params=lru, result="invalid"),
        TraceSpec("a negative token id is refused", ("InvalidInput",),
                  ((i, {"tokens": [1, -2]}),), params=lru, result="invalid"),
        TraceSpec("a page size of 0 is refused", ("InvalidInput",), (), params={"policy": "lru", "page_size": 0},
                  result="invalid"),
        # issue 12: a refused step changes nothing. Each trace refuses a step in its middle and goes on, probing
        # what a cache that mutated first and checked later would have changed.
        TraceSpec("a refused insert caches nothing, not even the whole pages before its bad token",
                  ("InvalidInput", "RadixRefusal", "PrefixLength"),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [1, 2, 3, 4, -1]}), (m, {"tokens": [1, 2, 3, 4]}), es,
                   (i, {"tokens": [1, 2, 3, 4]}), es), params=lru, result="invalid", refused=(2,)),
        TraceSpec("a refused insert touches nothing on its path (LRU)", ("InvalidInput", "RadixRefusal", "LruAccess"),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [3, 4]}), (i, {"tokens": [1, 2, 5], "priority": 1.5}),
                   (ev, {"num_tokens": 1}), es), params=lru, result="invalid", refused=(3,)),
        TraceSpec("priority: a refused insert raises no priority on its path",
                  ("InvalidInput", "RadixRefusal", "Policy"),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [3], "priority": 1}),
                   (i, {"tokens": [1, 2, -1], "priority": 5}), (ev, {"num_tokens": 1}), es),
                  params=prio, result="invalid", refused=(3,)),
        TraceSpec("a refused match touches nothing on its path (LRU)", ("InvalidInput", "RadixRefusal", "LruAccess"),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [3, 4]}), (m, {"tokens": [1, 2, -1]}),
                   (ev, {"num_tokens": 1}), es), params=lru, result="invalid", refused=(3,)),
        TraceSpec("a refused match splits no node: the node still evicts whole",
                  ("InvalidInput", "RadixRefusal", "SplitOffset"),
                  ((i, {"tokens": [1, 2, 3, 4, 5]}), (m, {"tokens": [1, 2, -1]}), (ev, {"num_tokens": 1}), es,
                   (m, {"tokens": [1, 2]})), params=lru, result="invalid", refused=(2,)),
        TraceSpec("a refused unlock releases nothing: neither the path a descendant's lock holds nor an unlocked node",
                  ("InvalidInput", "RadixRefusal", "LockCount"),
                  ((i, {"tokens": [1, 2, 3, 4]}), (m, {"tokens": [1, 2]}), (lk, {"node": 1}), (ul, {"node": 2}), es,
                   ps, (ul, {"node": 1}), es, ps, (ul, {"node": 1}), (lk, {"node": 1}), ps, (ul, {"node": 1}), es),
                  params=lru, result="invalid", refused=(4, 10)),
        TraceSpec("a refused lock of an evicted node locks none of its old ancestors",
                  ("InvalidInput", "RadixRefusal", "LockCount"),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [1, 2, 3]}), (ev, {"num_tokens": 1}), (lk, {"node": 2}),
                   ps, es, (ev, {"num_tokens": 10}), es), params=lru, result="invalid", refused=(4,)),
        TraceSpec("a refused evict frees nothing", ("InvalidInput", "RadixRefusal"),
                  ((i, {"tokens": [1, 2]}), (i, {"tokens": [3]}), (ev, {"num_tokens": 1.5}), es,
                   (ev, {"num_tokens": 1}), (ev, {"num_tokens": -1}), es), params=lru, result="invalid",
                  refused=(3, 6)),
    ]


# (which step, tokens, extra key, a pick, a count, which refusal): drawn once, read against the cache's state
_DRAW = st.tuples(st.integers(0, 11), st.lists(st.integers(1, 3), max_size=7), st.sampled_from([None, None, "a"]),
                  st.integers(0, 63), st.integers(0, 9), st.sampled_from(range(6)))


def _cached_key(cache: RadixCache, pick: int, count: int) -> dict | None:
    """A cached path's tokens (with its extra key) cut inside its last node: a key that a
    refused insert or match walks down, touching and splitting, before its bad token."""
    nodes = [n for _, n in sorted(cache._nodes.items()) if n is not cache.root]
    if not nodes:
        return None
    node = nodes[pick % len(nodes)]
    extra = next(k[0] for k, c in node.parent.children.items() if c is node)
    tokens, x = [], node
    while x is not cache.root:
        tokens[:0], x = x.tokens, x.parent
    pages = len(node.tokens) // cache.page_size  # cut at a page boundary inside it when it has two pages
    tokens = tokens[:len(tokens) - cache.page_size * (1 + count % (pages - 1) if pages > 1 else count % 2)]
    return {"tokens": tokens} if extra is None else {"tokens": tokens, "extra_key": extra}


def _refused(cache: RadixCache, kind, tokens, extra, pick, count) -> tuple[str, dict]:
    """A step the cache refuses, of one of six kinds, aimed at what a cache that mutates
    before it checks would change: an insert or match of a cached path cut inside a
    node, then a bad token (what it walks it could touch, split, count or cache); an
    insert of such a path whose priority is not an integer; a fractional evict; a lock
    of an evicted node (whose old parents may be live) or an unlock of a node that holds
    no lock (mostly one a descendant's lock holds)."""
    keyed = _cached_key(cache, pick, count) or (
        {"tokens": tokens} if extra is None else {"tokens": tokens, "extra_key": extra})
    bad = {**keyed, "tokens": keyed["tokens"] + [-1]}
    if kind == 0:  # the path, new tokens after it, then the bad one
        bad["tokens"][-1:] = tokens + [-1]
        return "insert", {**bad, "priority": count % 3 + 1} if cache.policy is Policy.PRIORITY else bad
    if kind == 1:
        return "insert", {**keyed, "priority": count + 0.5}
    if kind == 2:
        return "match_prefix", bad
    live = {n["node"]: n["lock"] for n in cache.snapshot()["nodes"]}
    gone = [h for h in cache.handed_out() if h not in live and h != cache.root.handle]
    if kind == 4 and gone:  # (a handle never handed out could be one the candidate uses)
        return "lock", {"node": gone[-1 - pick % len(gone)]}  # mostly the latest evicted
    idle = [h for h in cache.handed_out() if h not in cache.locked()]
    held = [h for h in idle if live.get(h)] if count % 3 else []  # locked through a descendant
    if kind >= 4 and (held or idle):
        return "unlock", {"node": (held or idle)[pick % len(held or idle)]}
    return "evict", {"num_tokens": count + 0.5}


def _step(cache: RadixCache, draw) -> tuple[str, dict]:
    which, tokens, extra, pick, count, kind = draw
    handles, locked = cache.handed_out(), cache.locked()
    if which >= 10:  # a refusal, once the cache holds something; else an insert
        if cache.evictable_size() + cache.protected_size():
            return _refused(cache, kind, tokens, extra, pick, count)
        which = 0
    if which <= 2:
        args = {"tokens": tokens} if extra is None else {"tokens": tokens, "extra_key": extra}
        if which == 2 and (cached := _cached_key(cache, pick, count)):  # a cached path, cut, then new tokens
            args = {**cached, "tokens": cached["tokens"] + tokens}
        return "insert", ({**args, "priority": count % 3} if cache.policy is Policy.PRIORITY else args)
    if which == 4 and (cached := _cached_key(cache, pick, count)):  # a cached path, cut, then new tokens
        return "match_prefix", {**cached, "tokens": cached["tokens"] + tokens}
    if which <= 4:
        return "match_prefix", {"tokens": tokens} if extra is None else {"tokens": tokens, "extra_key": extra}
    if which == 5 and handles:  # sometimes an evicted node's handle: refused
        return "lock", {"node": handles[pick % len(handles)]}
    if which == 6 and handles:  # mostly a locked node; sometimes any (refused when it holds no lock)
        pool = [h for h in locked if h in handles] if pick % 4 else []
        pool = pool or handles
        return "unlock", {"node": pool[pick % len(pool)]}
    if which <= 7:
        return "evict", {"num_tokens": count + 1 if pick % 4 else count}  # sometimes 0
    return ("evictable_size", {}) if which == 8 else ("protected_size", {})


def steps(cache: RadixCache) -> st.SearchStrategy:
    """The next step: insert or match a short key over 3 token values (so keys share
    prefixes and split nodes), lock a node, unlock one (sometimes one holding no
    lock), evict 0 to 9 tokens, or read a size; one step in six, once something is
    cached, a refused one (`_refused`), so the search meets refusals mid-trace and the
    steps after them show what a refusal changed."""
    return _DRAW.map(lambda draw: _step(cache, draw))


def _examples(supported):
    return st.fixed_dictionaries({"page_size": st.sampled_from(list(supported.get("page_size", PAGE_SIZES))[:3]),
                                  "policy": st.sampled_from(list(supported.get("policy", [p.value for p in Policy])))})


def _snapshot(cache) -> dict:
    """The reference's tree, each node with what its policy reads (access and creation
    times, hits, priority), and the locks taken on each handle: all a refused step
    could corrupt, since the generator checks that a refusal leaves the oracle's
    snapshot as it was (the clock alone may move: a tick keeps every order). A
    candidate's sizes."""
    if not isinstance(cache, RadixCache):
        return {"evictable": cache.evictable_size(), "protected": cache.protected_size()}
    snap = cache.snapshot()
    for entry in snap["nodes"]:
        node = cache._nodes[entry["node"]]
        entry.update(access=node.last_access, created=node.created, hits=node.hits, priority=node.priority)
    snap["held"] = {str(h): n for h, n in sorted(cache._held.items()) if n}
    return snap


RADIX_CACHE = AREA.declare(
    StatefulOp, "radix_cache", RadixCache, anchor="radix-cache",
    summary="SGLang's radix prefix cache: insert, match (splitting nodes), lock, evict by policy",
    variants=(Variant("page_size", PAGE_SIZES, 1, "tokens per page: keys are truncated to whole pages"),
              Variant("policy", Policy, "lru", "which unlocked leaf evict frees first")),
    methods=METHODS, vectors=_traces, examples=_examples, steps=steps,
    snapshot=_snapshot,
    identifiers=("insert.observation.node", "match_prefix.observation.node", "lock.args.node",
                 "unlock.args.node", "evict.observation.nodes[*]"),
    releases=("evict.observation.nodes[*]",),
    max_steps=25,
)

OPERATIONS = [RADIX_CACHE]

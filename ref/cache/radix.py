"""SGLang's radix prefix cache (RadixAttention), as a stateful reference object.

A radix tree of token sequences: each node holds a segment of tokens (a whole
number of pages), the path from the root to a node spells a cached prefix, and
the KV cache of those tokens lives as long as the node does. The operations are
those of SGLang 0.5.23's `RadixCache` (python/sglang/srt/mem_cache/radix_cache.py):

  insert(tokens, extra_key, priority) -> {"prefix": tokens already cached, "node": handle}
  match_prefix(tokens, extra_key)     -> {"length": longest cached prefix, "node": handle}
  lock(node) / unlock(node)           -> the change of evictable_size (inc/dec_lock_ref)
  evict(num_tokens)                   -> {"evicted": tokens freed, "nodes": [handles, in order]}
  evictable_size(), protected_size()  -> token counts

Keys are truncated to whole pages (`page_size`), as SGLang's `page_aligned` does.
A match that ends inside a node splits it: a new node takes the matched head, the
old node (its handle unchanged) keeps the tail. Eviction frees whole unlocked
leaves, the policy's smallest key first, a parent becoming a leaf in its turn, until
at least `num_tokens` are freed (it may free more). `extra_key` (a LoRA id, a cache
salt) namespaces a key: keys under different extra keys never share a node.

Time is a logical clock, never wall time: every method call reads it once (the
access time of the nodes it touches), and every node created reads it again (its
creation time, also its first access time), so no two evictable leaves ever have
the same time and every policy's order is total. Node handles are ints the cache
chooses (the root is 0); a conforming cache may choose others (compared up to
renaming), but a handle names the same node for the node's whole life.

Reference: Zheng et al., "SGLang: Efficient Execution of Structured Language Model
Programs" (arXiv:2312.07104), section 3 (RadixAttention).
"""

from __future__ import annotations

import enum
import heapq
import numbers
from typing import Any

from ref.arguments import integer, member

__all__ = ["Policy", "RadixCache"]


class Policy(enum.Enum):
    """Which unlocked leaf `evict` frees first (SGLang's `--radix-eviction-policy`)."""

    LRU = "lru"  # least recently accessed (the default)
    LFU = "lfu"  # fewest inserts through the node, then least recently accessed
    FIFO = "fifo"  # oldest created
    MRU = "mru"  # most recently accessed
    FILO = "filo"  # newest created
    PRIORITY = "priority"  # lowest insert priority, then least recently accessed


class _Node:
    """A segment of tokens; `hits` counts the inserts that passed through it."""

    def __init__(self, handle: int, tokens: tuple, parent: _Node | None, now: int, priority: int):
        self.handle, self.tokens, self.parent = handle, tokens, parent
        self.children: dict[Any, _Node] = {}  # child key (extra key, first page) -> child
        self.lock_ref = 0
        self.last_access = self.created = now
        self.hits = 0
        self.priority = priority


def _policy_key(policy: Policy, node: _Node) -> tuple:
    """The order `evict` frees leaves in: the smallest key first."""
    return {Policy.LRU: (node.last_access,), Policy.LFU: (node.hits, node.last_access),
            Policy.FIFO: (node.created,), Policy.MRU: (-node.last_access,),
            Policy.FILO: (-node.created,), Policy.PRIORITY: (node.priority, node.last_access)}[policy]


def _tokens(tokens, name: str) -> tuple[int, ...]:
    if not isinstance(tokens, (list, tuple)):
        raise TypeError(f"{name}: expected a list of token ids, got {type(tokens).__name__}")
    bad = next((i for i, t in enumerate(tokens)
                if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 0), None)
    if bad is not None:
        integer(tokens[bad], f"{name}[{bad}]", minimum=0)  # raises, naming the token
    return tuple(int(t) for t in tokens)


def _extra(extra_key) -> str | None:
    if extra_key is not None and not isinstance(extra_key, str):
        raise TypeError(f"extra_key: expected a string or None, got {type(extra_key).__name__} {extra_key!r}")
    return extra_key


class RadixCache:
    """The radix tree (module docstring): `RadixCache(page_size=1, policy="lru")`."""

    def __init__(self, page_size: int = 1, policy: str = "lru"):
        self.page_size = integer(page_size, "page_size", minimum=1)
        self.policy = member(policy, Policy, "policy")
        self._clock = 0
        self._handles = 0  # the next handle: never reused, so a handle names one node
        self._nodes: dict[int, _Node] = {}  # handle -> node, every node in the tree
        self._handed: set[int] = set()  # the handles insert and match_prefix returned
        self._held: dict[int, int] = {}  # handle -> locks taken by lock(handle) and not yet released
        self.root = self._new_node((), None, priority=-(1 << 63))
        self.root.lock_ref = 1  # the root is never evicted
        self._evictable = self._protected = 0

    # --- the clock and the tree's bookkeeping ---------------------------------------

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _new_node(self, tokens: tuple, parent: _Node | None, priority: int) -> _Node:
        node = _Node(self._handles, tokens, parent, self._tick(), priority)
        self._handles += 1
        self._nodes[node.handle] = node
        return node

    def _child_key(self, extra_key: str | None, tokens: tuple) -> tuple:
        """A child's key in its parent: the extra key and the first page."""
        return extra_key, tokens[:self.page_size]

    def _aligned(self, tokens: tuple) -> tuple:
        """The whole pages of a key (SGLang's page_aligned)."""
        return tokens[:len(tokens) // self.page_size * self.page_size]

    def _common(self, tokens: tuple, key: tuple, at: int) -> int:
        """The length of the common prefix of `tokens` and `key[at:]`, in whole pages."""
        n, most = 0, min(len(tokens), len(key) - at)
        while n < most and tokens[n] == key[at + n]:
            n += 1
        return n // self.page_size * self.page_size

    def _split(self, node: _Node, at: int, extra_key: str | None) -> _Node:
        """Split `node` after `at` tokens: a new node takes the head (and the node's
        lock count, hits and priority), `node` keeps the tail and its handle."""
        head = self._new_node(node.tokens[:at], node.parent, node.priority)
        head.lock_ref, head.hits = node.lock_ref, node.hits
        node.parent.children[self._child_key(extra_key, node.tokens)] = head
        node.tokens = node.tokens[at:]
        node.parent = head
        head.children[self._child_key(extra_key, node.tokens)] = node
        return head

    def _walk(self, key: tuple, extra_key: str | None, now: int, on_node=None) -> tuple[_Node, int]:
        """Follow `key` down from the root, touching every node on the way (and the
        node a partial match splits); (the last node of the matched prefix, its length)."""
        node, matched = self.root, 0
        node.last_access = now
        while matched < len(key) and (child := node.children.get(
                self._child_key(extra_key, key[matched:matched + self.page_size]))):
            child.last_access = now
            common = self._common(child.tokens, key, matched)
            matched += common
            node = self._split(child, common, extra_key) if common < len(child.tokens) else child
            if on_node is not None:
                on_node(node)
        return node, matched

    def _node(self, node) -> _Node:
        handle = integer(node, "node")
        if handle not in self._nodes:
            raise ValueError(f"node: {handle} is not in the cache (never handed out, or evicted)")
        return self._nodes[handle]

    # --- the methods a trace calls ------------------------------------------------------

    def insert(self, tokens, extra_key=None, priority=0) -> dict[str, int]:
        """Cache the whole pages of `tokens`; the length already cached (SGLang's
        prefix_len) and the node that ends the key. Nodes on the path take the larger
        priority and count a hit; a new leaf holds the rest, evictable."""
        key, extra_key = self._aligned(_tokens(tokens, "tokens")), _extra(extra_key)
        priority = integer(priority, "priority")
        now = self._tick()
        self.root.priority = max(self.root.priority, priority)

        def on_node(node: _Node) -> None:
            node.priority = max(node.priority, priority)
            node.hits += 1

        node, prefix = self._walk(key, extra_key, now, on_node if key else None)
        if prefix < len(key):
            leaf = self._new_node(key[prefix:], node, priority)
            leaf.hits = 1
            node.children[self._child_key(extra_key, leaf.tokens)] = leaf
            self._evictable += len(leaf.tokens)
            node = leaf
        self._handed.add(node.handle)
        return {"prefix": prefix, "node": node.handle}

    def match_prefix(self, tokens, extra_key=None) -> dict[str, int]:
        """The longest cached prefix of `tokens` (whole pages) and the node that ends
        it (the root for none), splitting a node the match ends inside."""
        key, extra_key = self._aligned(_tokens(tokens, "tokens")), _extra(extra_key)
        now = self._tick()
        node, length = self._walk(key, extra_key, now) if key else (self.root, 0)  # SGLang: no touch for none
        self._handed.add(node.handle)
        return {"length": length, "node": node.handle}

    def lock(self, node) -> int:
        """inc_lock_ref: one more lock on every node from `node` up to the root;
        minus the tokens that stop being evictable."""
        delta, x = 0, self._node(node)
        self._tick()
        while x is not self.root:
            if x.lock_ref == 0:
                self._evictable -= len(x.tokens)
                self._protected += len(x.tokens)
                delta -= len(x.tokens)
            x.lock_ref += 1
            x = x.parent
        self._held[int(node)] = self._held.get(int(node), 0) + 1
        return delta

    def unlock(self, node) -> int:
        """dec_lock_ref: release a lock that lock(node) took, one lock fewer on every
        node of the path; the tokens that become evictable. Releasing a lock never
        taken on this node is refused (SGLang does not check: its counts go negative)."""
        delta, x = 0, self._node(node)
        if self._held.get(x.handle, 0) == 0:
            raise ValueError(f"node: no lock taken on node {x.handle} is left to release")
        self._tick()
        self._held[x.handle] -= 1
        while x is not self.root:
            if x.lock_ref == 1:
                self._evictable += len(x.tokens)
                self._protected -= len(x.tokens)
                delta += len(x.tokens)
            x.lock_ref -= 1
            x = x.parent
        return delta

    def _evictable_leaves(self) -> list[_Node]:
        return [n for n in self._nodes.values() if n is not self.root and not n.children and n.lock_ref == 0]

    def evict(self, num_tokens) -> dict[str, Any]:
        """Free unlocked leaves, the policy's first first, until `num_tokens` are freed
        or none is left; a parent left without children and unlocked joins them."""
        want = integer(num_tokens, "num_tokens", minimum=0)
        self._tick()
        heap = [(_policy_key(self.policy, n), n.handle) for n in self._evictable_leaves()]
        heapq.heapify(heap)
        freed, order = 0, []
        while freed < want and heap:
            _, handle = heapq.heappop(heap)
            victim = self._nodes.pop(handle)
            parent = victim.parent
            del parent.children[next(k for k, c in parent.children.items() if c is victim)]
            self._evictable -= len(victim.tokens)
            freed += len(victim.tokens)
            order.append(handle)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (_policy_key(self.policy, parent), parent.handle))
        return {"evicted": freed, "nodes": order}

    def evictable_size(self) -> int:
        """Tokens in unlocked nodes."""
        return self._evictable

    def protected_size(self) -> int:
        """Tokens in locked nodes."""
        return self._protected

    # --- for strategies, properties and failure reports (not traced) --------------------

    def handed_out(self) -> list[int]:
        """The handles insert and match_prefix returned, evicted ones included (a
        caller knows no others)."""
        return sorted(self._handed)

    def locked(self) -> list[int]:
        """The handles that locks were taken on and not yet released."""
        return sorted(h for h, n in self._held.items() if n > 0)

    def snapshot(self) -> dict[str, Any]:
        """The tree as JSON: each node's handle, parent, tokens and lock count."""
        nodes = [{"node": n.handle, "parent": n.parent.handle, "tokens": list(n.tokens), "lock": n.lock_ref}
                 for n in sorted(self._nodes.values(), key=lambda n: n.handle) if n is not self.root]
        return {"evictable": self._evictable, "protected": self._protected, "nodes": nodes}

"""The radix prefix cache bug corpus: wrong caches written the way radix trees go
wrong, each the reference (ref.cache.radix.RadixCache) with one piece of
bookkeeping changed.

RADIX_BUGS: name -> (factory, flag). `implementation(name)` is the Implementation
of that one op, with every variant value supported.
"""

from __future__ import annotations

import heapq

from ref.cache.radix import Policy, RadixCache
from ref.conformance.adapters import python_radix
from ref.conformance.implementation import Implementation


class LockedEvicted(RadixCache):
    """Eviction picks leaves without looking at lock counts."""

    def _evictable_leaves(self):
        return [n for n in self._nodes.values() if n is not self.root and not n.children]


class LockNotPropagated(RadixCache):
    """lock() locks the node itself, not its ancestors: a locked request's shared
    prefix is evicted once its own leaf is the only thing protecting it."""

    def lock(self, node):
        self._tick()
        x = self._node(node)
        self._held[x.handle] = self._held.get(x.handle, 0) + 1
        if x is self.root:
            return 0
        x.lock_ref += 1
        if x.lock_ref == 1:
            self._evictable -= len(x.tokens)
            self._protected += len(x.tokens)
            return -len(x.tokens)
        return 0


class InternalEvicted(RadixCache):
    """After freeing a leaf, its parent is pushed onto the heap if unlocked, whether
    or not other children remain: an internal node is evicted under its children."""

    def evict(self, num_tokens):
        want = num_tokens
        self._tick()
        heap = [(self._key(n), n.handle) for n in self._evictable_leaves()]
        heapq.heapify(heap)
        freed, order = 0, []
        while freed < want and heap:
            _, handle = heapq.heappop(heap)
            if handle not in self._nodes:
                continue
            victim = self._nodes.pop(handle)
            parent = victim.parent
            del parent.children[next(k for k, c in parent.children.items() if c is victim)]
            self._evictable -= len(victim.tokens)
            freed += len(victim.tokens)
            order.append(handle)
            if parent is not self.root and parent.lock_ref == 0:
                heapq.heappush(heap, (self._key(parent), parent.handle))
        return {"evicted": freed, "nodes": order}

    def _key(self, node):
        return {Policy.LRU: (node.last_access,), Policy.FILO: (-node.created,), Policy.FIFO: (node.created,),
                Policy.MRU: (-node.last_access,), Policy.LFU: (node.hits, node.last_access),
                Policy.PRIORITY: (node.priority, node.last_access)}[self.policy]


class SplitOffByOne(RadixCache):
    """A node is split one token past the end of the match: the head holds a token
    the key does not have."""

    def _split(self, node, at, extra_key):
        return super()._split(node, at + 1, extra_key) if at + 1 < len(node.tokens) else super()._split(
            node, at, extra_key)


class LruByInsertion(RadixCache):
    """LRU ordered by creation time: a match does not refresh a node."""

    def evict(self, num_tokens):
        saved = {h: n.last_access for h, n in self._nodes.items()}
        for n in self._nodes.values():
            n.last_access = n.created
        try:
            return super().evict(num_tokens)
        finally:
            for h, t in saved.items():
                if h in self._nodes:
                    self._nodes[h].last_access = t


class MatchNotTruncated(RadixCache):
    """The common length of a key and a node is not rounded down to whole pages:
    a match (and the split it makes) ends inside a page."""

    def _common(self, tokens, key, at):
        n = 0
        while n < min(len(tokens), len(key) - at) and tokens[n] == key[at + n]:
            n += 1
        return n


class ExtraKeyIgnored(RadixCache):
    """A child's key is its first page alone: different LoRA ids or cache salts share nodes."""

    def _child_key(self, extra_key, tokens):
        return None, tokens[:self.page_size]


class SplitLosesLocks(RadixCache):
    """A split head starts unlocked, though its tail is locked: the head's tokens are
    counted as evictable while a request holds them."""

    def _split(self, node, at, extra_key):
        head = super()._split(node, at, extra_key)
        if head.lock_ref:
            self._evictable += len(head.tokens)
            self._protected -= len(head.tokens)
            head.lock_ref = 0
        return head


RADIX_BUGS = {
    "evicting a locked node": (LockedEvicted, "LockedEvicted"),
    "lock not propagated to ancestors": (LockNotPropagated, "LockedEvicted"),
    "evicting an internal node": (InternalEvicted, "InternalEvicted"),
    "splitting at the wrong offset": (SplitOffByOne, "SplitOffset"),
    "LRU by insertion instead of access": (LruByInsertion, "LruAccess"),
    "match not truncated to pages": (MatchNotTruncated, "PageTruncation"),
    "extra key ignored": (ExtraKeyIgnored, "ExtraKey"),
    "split head loses its locks": (SplitLosesLocks, "LockCount"),
}


def implementation(name: str) -> Implementation:
    """The Implementation of cache.radix_cache by the bug `name`."""
    return Implementation(name, {"cache.radix_cache": RADIX_BUGS[name][0]}, variants=python_radix.VARIANTS)

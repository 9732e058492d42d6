"""The radix prefix cache bug corpus: wrong caches written the way radix trees go
wrong, each the reference (ref.cache.radix.RadixCache) with one piece of
bookkeeping changed.

RADIX_BUGS: name -> (factory, flag). `implementation(name)` is the Implementation
of that one op, with every variant value supported.
"""

from __future__ import annotations

import heapq
import math

from ref.arguments import integer
from ref.cache.radix import Policy, RadixCache, _extra, _tokens
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


class _TieByCreation(RadixCache):
    """Under `POLICY`, eviction reads each node's creation time where it should read its
    last access (LRU ordered by insertion; priority and LFU ties broken by creation)."""

    POLICY = None

    def evict(self, num_tokens):
        if self.policy is not self.POLICY:
            return super().evict(num_tokens)
        saved = {h: n.last_access for h, n in self._nodes.items()}
        for n in self._nodes.values():
            n.last_access = n.created
        try:
            return super().evict(num_tokens)
        finally:
            for h, t in saved.items():
                if h in self._nodes:
                    self._nodes[h].last_access = t


class LruByInsertion(_TieByCreation):
    """LRU ordered by creation time: a match does not refresh a node."""

    POLICY = Policy.LRU


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


# --- adv12: bugs the cache adversary's mutants showed the suite accepted (or only the search caught)


class SplitTailNotTouched(RadixCache):
    """adv12 #16: a match ending inside a node touches the new head but not the tail
    it splits off: LRU evicts the tail as if it were not just read."""

    def _walk(self, key, extra_key, now, on_node=None):
        node, matched = self.root, 0
        node.last_access = now
        while matched < len(key) and (child := node.children.get(
                self._child_key(extra_key, key[matched:matched + self.page_size]))):
            old = child.last_access
            child.last_access = now
            common = self._common(child.tokens, key, matched)
            matched += common
            if common < len(child.tokens):
                child.last_access = old
                node = self._split(child, common, extra_key)
            else:
                node = child
            if on_node is not None:
                on_node(node)
        return node, matched


class SplitHeadOldCreation(RadixCache):
    """adv12 #17: a split head copies its tail's creation time (FIFO, FILO)."""

    def _split(self, node, at, extra_key):
        head = super()._split(node, at, extra_key)
        head.created = node.created
        return head


class SplitHeadOldAccess(RadixCache):
    """adv12 #18: a split head copies its tail's access time from before the split."""

    def _walk(self, key, extra_key, now, on_node=None):
        self._before = {h: n.last_access for h, n in self._nodes.items()}
        return super()._walk(key, extra_key, now, on_node)

    def _split(self, node, at, extra_key):
        head = super()._split(node, at, extra_key)
        head.last_access = self._before.get(node.handle, head.last_access)
        return head


class SplitHeadNoHits(RadixCache):
    """adv12 #19: a split head starts with no hits (LFU frees it too early)."""

    def _split(self, node, at, extra_key):
        head = super()._split(node, at, extra_key)
        head.hits = 0
        return head


class SplitHeadNoPriority(RadixCache):
    """adv12 #20: a split head starts at the default priority 0."""

    def _split(self, node, at, extra_key):
        head = super()._split(node, at, extra_key)
        head.priority = 0
        return head


class _InsertBug(RadixCache):
    """The reference insert with its per-node update a method (`_on_path`)."""

    def insert(self, tokens, extra_key=None, priority=0):
        key, extra_key = self._aligned(_tokens(tokens, "tokens")), _extra(extra_key)
        priority = integer(priority, "priority")
        now = self._tick()
        self.root.priority = max(self.root.priority, priority)
        node, prefix = self._walk(key, extra_key, now, (lambda n: self._on_path(n, priority)) if key else None)
        if prefix < len(key):
            leaf = self._new_node(key[prefix:], node, priority)
            leaf.hits = 1
            node.children[self._child_key(extra_key, leaf.tokens)] = leaf
            self._evictable += len(leaf.tokens)
            node = leaf
        self._handed.add(node.handle)
        return {"prefix": prefix, "node": node.handle}

    def _on_path(self, node, priority):
        node.priority = max(node.priority, priority)
        node.hits += 1


class PriorityLeafOnly(_InsertBug):
    """adv12 #21: an insert sets the priority of its new leaf only, not of the cached
    nodes on its path."""

    def _on_path(self, node, priority):
        node.hits += 1


class PriorityOverwritten(_InsertBug):
    """adv12 #22: an insert overwrites the priority of the nodes on its path, lowering it."""

    def _on_path(self, node, priority):
        node.priority = priority
        node.hits += 1


class _LastNodeOnly(RadixCache):
    """An insert whose update of `FIELD` reaches only the node it ends at."""

    FIELD = ""

    def insert(self, tokens, extra_key=None, priority=0):
        saved = {h: getattr(n, self.FIELD) for h, n in self._nodes.items()}
        out = super().insert(tokens, extra_key, priority)
        for h, v in saved.items():
            if h in self._nodes and h != out["node"]:
                setattr(self._nodes[h], self.FIELD, v)
        return out


class InsertTouchesLastOnly(_LastNodeOnly):
    """adv12 #23: an insert refreshes the access time of the node it ends at only (LRU):
    the shared prefix above it ages."""

    FIELD = "last_access"


class InsertHitsLastOnly(_LastNodeOnly):
    """adv12 #24: an insert counts a hit on the node it ends at only (LFU)."""

    FIELD = "hits"


class PriorityTieByCreation(_TieByCreation):
    """adv12 #25: equal priorities ordered by creation, not last access."""

    POLICY = Policy.PRIORITY


class LfuTieByCreation(_TieByCreation):
    """adv12 (search only): equal hit counts ordered by creation, not last access."""

    POLICY = Policy.LFU


class UnlockByCount(RadixCache):
    """adv12 (search only): unlock checks the node's lock count (raised by a lock on any
    descendant) instead of the locks taken on that node."""

    def unlock(self, node):
        x = self._node(node)
        if self._held.get(x.handle, 0) == 0 and x.lock_ref > 0 and x is not self.root:
            self._held[x.handle] = 1
        return super().unlock(node)


class UnlockRootRefused(RadixCache):
    """adv12 (search only): unlocking the root (what a match of nothing returns) is refused."""

    def unlock(self, node):
        if self._node(node) is self.root:
            raise ValueError("node: the root cannot be unlocked")
        return super().unlock(node)


class FractionalEvict(RadixCache):
    """adv12 #27: a float num_tokens accepted by evict (freeing until at least that many)."""

    def evict(self, num_tokens):
        if isinstance(num_tokens, float) and num_tokens >= 0:
            return super().evict(math.ceil(num_tokens))
        return super().evict(num_tokens)


# --- issue 12: refusals that change the cache. Each refuses what the reference refuses, but
# only after doing part of the work; the traces go on past the refusal and show it.


def _first_bad(tokens):
    """The index of the first token that is not an id >= 0 (None: all good, or not a list)."""
    if not isinstance(tokens, (list, tuple)):
        return None
    return next((k for k, t in enumerate(tokens) if isinstance(t, bool) or not isinstance(t, int) or t < 0), None)


class InsertCachesValidPrefix(RadixCache):
    """An insert that reads its tokens as it stores them: the whole pages before the first
    bad token are cached (the path touched, its hits counted) before it refuses."""

    def insert(self, tokens, extra_key=None, priority=0):
        bad = _first_bad(tokens)
        if bad is not None:
            super().insert(list(tokens[:bad]), extra_key, priority)
        return super().insert(tokens, extra_key, priority)


class InsertWalksBeforeTokenCheck(RadixCache):
    """An insert that walks the cached part of its key (touching, counting hits, raising
    priorities, splitting) and refuses when it reaches a bad token, creating nothing."""

    def insert(self, tokens, extra_key=None, priority=0):
        bad = _first_bad(tokens)
        if bad is not None:
            key, extra = self._aligned(tuple(tokens[:bad])), _extra(extra_key)
            level = integer(priority, "priority")
            now = self._tick()
            self.root.priority = max(self.root.priority, level)

            def on_node(node):
                node.priority = max(node.priority, level)
                node.hits += 1

            if key:
                self._walk(key, extra, now, on_node)
        return super().insert(tokens, extra_key, priority)


class PriorityCheckedLate(RadixCache):
    """An insert that walks its key (touching and counting hits) before it checks the
    priority, which it needs only for the nodes it updates and creates."""

    def insert(self, tokens, extra_key=None, priority=0):
        if isinstance(priority, bool) or not isinstance(priority, int):
            key, extra = self._aligned(_tokens(tokens, "tokens")), _extra(extra_key)
            now = self._tick()
            if key:
                self._walk(key, extra, now, lambda node: setattr(node, "hits", node.hits + 1))
        return super().insert(tokens, extra_key, priority)


class MatchWalksBeforeCheck(RadixCache):
    """match_prefix walks the key as far as it matches (touching and splitting) and
    checks the tokens after: a bad token stops the walk, then the match is refused."""

    def match_prefix(self, tokens, extra_key=None):
        bad = _first_bad(tokens)
        if bad is not None:
            key, extra = self._aligned(tuple(tokens[:bad])), _extra(extra_key)
            now = self._tick()
            if key:
                self._walk(key, extra, now)
        return super().match_prefix(tokens, extra_key)


class UnlockReleasesBeforeCheck(RadixCache):
    """unlock releases the path (dec_lock_ref) and only then finds no lock was taken on
    the node: a descendant's lock loses its hold on the path, or counts go negative."""

    def unlock(self, node):
        x = self._node(node)
        if self._held.get(x.handle, 0) == 0:
            while x is not self.root:
                if x.lock_ref == 1:
                    self._evictable += len(x.tokens)
                    self._protected -= len(x.tokens)
                x.lock_ref -= 1
                x = x.parent
        return super().unlock(node)


class LockThroughEvictedNode(RadixCache):
    """Handles stay bound to node objects after eviction (as SGLang's are); lock walks up
    from an evicted node's stale parent pointer, locking its live ancestors, and checks
    after the walk that the node itself is gone."""

    def __init__(self, page_size=1, policy="lru"):
        super().__init__(page_size, policy)
        self._gone = {}

    def evict(self, num_tokens):
        before = dict(self._nodes)
        out = super().evict(num_tokens)
        self._gone.update((h, before[h]) for h in out["nodes"])
        return out

    def lock(self, node):
        x = self._gone.get(node) if isinstance(node, int) else None
        if x is not None:
            while x is not self.root:
                if x.lock_ref == 0 and x.handle in self._nodes:
                    self._evictable -= len(x.tokens)
                    self._protected += len(x.tokens)
                x.lock_ref += 1
                x = x.parent
        return super().lock(node)


class EvictCountCheckedLate(RadixCache):
    """evict frees leaves while it has freed less than asked, and checks that the count is
    an integer only when it reports it: a fractional count is refused after freeing."""

    def evict(self, num_tokens):
        if isinstance(num_tokens, float) and num_tokens > 0 and math.isfinite(num_tokens):
            super().evict(math.ceil(num_tokens))
        return super().evict(num_tokens)


RADIX_BUGS = {
    "evicting a locked node": (LockedEvicted, "LockedEvicted"),
    "lock not propagated to ancestors": (LockNotPropagated, "LockedEvicted"),
    "evicting an internal node": (InternalEvicted, "InternalEvicted"),
    "splitting at the wrong offset": (SplitOffByOne, "SplitOffset"),
    "LRU by insertion instead of access": (LruByInsertion, "LruAccess"),
    "match not truncated to pages": (MatchNotTruncated, "PageTruncation"),
    "extra key ignored": (ExtraKeyIgnored, "ExtraKey"),
    "split head loses its locks": (SplitLosesLocks, "LockCount"),
    "split tail not touched by a match": (SplitTailNotTouched, "LruAccess"),
    "split head keeps its tail's creation time": (SplitHeadOldCreation, "Policy"),
    "split head keeps its tail's old access time": (SplitHeadOldAccess, "LruAccess"),
    "split head's hit count reset": (SplitHeadNoHits, "Policy"),
    "split head's priority reset": (SplitHeadNoPriority, "Policy"),
    "priority raised on the new leaf only": (PriorityLeafOnly, "Policy"),
    "priority overwritten instead of raised": (PriorityOverwritten, "Policy"),
    "insert touches only the node it ends at": (InsertTouchesLastOnly, "LruAccess"),
    "insert counts a hit on the node it ends at only": (InsertHitsLastOnly, "Policy"),
    "priority ties broken by creation": (PriorityTieByCreation, "Policy"),
    "LFU ties broken by creation": (LfuTieByCreation, "Policy"),
    "unlock checks the lock count, not the locks taken": (UnlockByCount, "LockCount"),
    "unlocking the root refused": (UnlockRootRefused, "LockCount"),
    "fractional num_tokens accepted by evict": (FractionalEvict, "InvalidInput"),
    "refused insert caches its valid pages": (InsertCachesValidPrefix, "PrefixLength"),
    "refused insert walks its path": (InsertWalksBeforeTokenCheck, "Policy"),
    "insert checks its priority after walking": (PriorityCheckedLate, "LruAccess"),
    "refused match walks and splits": (MatchWalksBeforeCheck, "SplitOffset"),
    "refused unlock releases the path": (UnlockReleasesBeforeCheck, "LockCount"),
    "refused lock of an evicted node locks its old ancestors": (LockThroughEvictedNode, "LockCount"),
    "refused evict frees first": (EvictCountCheckedLate, "RadixRefusal"),
}


def implementation(name: str) -> Implementation:
    """The Implementation of cache.radix_cache by the bug `name`."""
    return Implementation(name, {"cache.radix_cache": RADIX_BUGS[name][0]}, variants=python_radix.VARIANTS)

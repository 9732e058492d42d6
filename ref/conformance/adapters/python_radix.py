"""The radix prefix cache for the default run, written independently of the oracle
(this module imports nothing from ref): a plain trie with one edge per page of
tokens, in which the pages that end a node (SGLang's compressed segment) carry a
mark and that node's counters (handle, lock count, access and creation times, hits,
priority). A split is a mark set on an inner page; eviction removes the pages of a
marked leaf back to the mark above it; the evictable and protected sizes are summed
over the marks when asked, not kept as running counters; eviction picks the policy's
smallest leaf by a scan, not a heap. Handles count from 1000 (the root's).
"""

from __future__ import annotations

NAME = "python radix trie"
VERSION = "1"

ROOT = 1000
POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority")


class _Page:
    def __init__(self, parent, edge):
        self.parent, self.edge = parent, edge  # edge: (extra key, page tokens) from the parent
        self.children = {}
        self.mark = None  # the node's counters when this page ends a node


class _Mark:
    def __init__(self, handle, now, priority):
        self.handle, self.lock, self.access, self.created = handle, 0, now, now
        self.hits, self.priority = 0, priority


def _ints(tokens):
    if not isinstance(tokens, (list, tuple)) or any(isinstance(t, bool) or not isinstance(t, int) for t in tokens):
        raise TypeError(f"tokens: expected a list of ints, got {tokens!r}")
    if any(t < 0 for t in tokens):
        raise ValueError(f"tokens: token ids must be >= 0, got {tokens!r}")
    return list(tokens)


class RadixTrie:
    def __init__(self, page_size=1, policy="lru"):
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size: expected an int >= 1, got {page_size!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy: expected one of {POLICIES}, got {policy!r}")
        self.page, self.policy, self.time, self.next = page_size, policy, 0, ROOT + 1
        self.root = _Page(None, None)
        self.root.mark = _Mark(ROOT, 0, -(2 ** 63))
        self.by_handle = {ROOT: self.root}
        self.taken = []  # handles lock() was called on, one entry a lock

    def _now(self):
        self.time += 1
        return self.time

    def _mark(self, page, priority):
        page.mark = _Mark(self.next, self._now(), priority)
        self.by_handle[self.next] = page
        self.next += 1
        return page.mark

    def _pages(self, tokens, extra_key):
        if extra_key is not None and not isinstance(extra_key, str):
            raise TypeError(f"extra_key: expected a str or None, got {extra_key!r}")
        t = _ints(tokens)
        whole = len(t) - len(t) % self.page
        return [(extra_key, tuple(t[i:i + self.page])) for i in range(0, whole, self.page)]

    def _segment_end(self, page):
        """The marked page at or below `page` that ends its node (pages between marks
        have exactly one child)."""
        while page.mark is None:
            (page,) = page.children.values()
        return page

    def _marks_above(self, page):
        """The marks from `page` (included) up to the root (excluded)."""
        out = []
        while page is not self.root:
            if page.mark is not None:
                out.append(page.mark)
            page = page.parent
        return out

    def _length(self, page):
        """Tokens in the node a marked page ends."""
        n, page = 0, page
        while True:
            n += self.page
            page = page.parent
            if page.mark is not None:
                return n

    def _descend(self, edges, now):
        """Follow the edges; touch every node met; split (mark) where the walk stops
        inside a node. (the last page reached, pages matched, the marks on the way)."""
        page, depth = self.root, 0
        while depth < len(edges) and edges[depth] in page.children:
            page = page.children[edges[depth]]
            depth += 1
        met = self._marks_above(page)
        for mark in met:
            mark.access = now
        if page is not self.root and page.mark is None:
            below = self._segment_end(page).mark
            below.access = now
            head = self._mark(page, below.priority)  # created after the call's time: newer
            head.lock, head.hits = below.lock, below.hits
            met = [head] + met
        return page, depth, met

    def insert(self, tokens, extra_key=None, priority=0):
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority: expected an int, got {priority!r}")
        edges = self._pages(tokens, extra_key)
        now = self._now()
        self.root.mark.priority = max(self.root.mark.priority, priority)
        if not edges:
            return {"prefix": 0, "node": ROOT}
        page, depth, met = self._descend(edges, now)
        for mark in met:
            mark.hits += 1
            mark.priority = max(mark.priority, priority)
        if depth < len(edges):
            for edge in edges[depth:]:
                page.children[edge] = page = _Page(page, edge)
            self._mark(page, priority).hits = 1
        return {"prefix": depth * self.page, "node": page.mark.handle}

    def match_prefix(self, tokens, extra_key=None):
        edges = self._pages(tokens, extra_key)
        now = self._now()
        if not edges:
            return {"length": 0, "node": ROOT}
        page, depth, _ = self._descend(edges, now)
        return {"length": depth * self.page, "node": page.mark.handle}

    def _page(self, node):
        if isinstance(node, bool) or not isinstance(node, int):
            raise TypeError(f"node: expected an int handle, got {node!r}")
        if node not in self.by_handle:
            raise ValueError(f"node: no node {node} in the trie")
        return self.by_handle[node]

    def lock(self, node):
        marks = self._marks_above(self._page(node))
        self._now()
        delta = 0
        for mark in marks:
            page = self.by_handle[mark.handle]
            delta -= self._length(page) if mark.lock == 0 else 0
            mark.lock += 1
        self.taken.append(node)
        return delta

    def unlock(self, node):
        marks = self._marks_above(self._page(node))
        if node not in self.taken:
            raise ValueError(f"node: {node} was not locked")
        self._now()
        self.taken.remove(node)
        delta = 0
        for mark in marks:
            mark.lock -= 1
            delta += self._length(self.by_handle[mark.handle]) if mark.lock == 0 else 0
        return delta

    def _order(self, mark):
        return {"lru": (mark.access,), "lfu": (mark.hits, mark.access), "fifo": (mark.created,),
                "mru": (-mark.access,), "filo": (-mark.created,), "priority": (mark.priority, mark.access)}[self.policy]

    def evict(self, num_tokens):
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int):
            raise TypeError(f"num_tokens: expected an int, got {num_tokens!r}")
        if num_tokens < 0:
            raise ValueError(f"num_tokens: expected >= 0, got {num_tokens}")
        self._now()
        freed, gone = 0, []
        while freed < num_tokens:
            leaves = [p for h, p in self.by_handle.items() if h != ROOT and not p.children and p.mark.lock == 0]
            if not leaves:
                break
            victim = min(leaves, key=lambda p: self._order(p.mark))
            freed += self._length(victim)
            gone.append(victim.mark.handle)
            del self.by_handle[victim.mark.handle]
            page = victim
            while True:  # unhook the node's pages up to the mark above
                parent = page.parent
                del parent.children[page.edge]
                if parent.mark is not None:
                    break
                page = parent
        return {"evicted": freed, "nodes": gone}

    def _sizes(self):
        free = held = 0
        for h, page in self.by_handle.items():
            if h != ROOT:
                if page.mark.lock:
                    held += self._length(page)
                else:
                    free += self._length(page)
        return free, held

    def evictable_size(self):
        return self._sizes()[0]

    def protected_size(self):
        return self._sizes()[1]


OPS = {"cache.radix_cache": RadixTrie}
VARIANTS = {"cache.radix_cache": {"page_size": [1, 2, 4, 16], "policy": list(POLICIES)}}

"""SGLang 0.5.23's own `RadixCache` (python/sglang/srt/mem_cache/radix_cache.py) as
`cache.radix_cache`: `python -m ref conform --impl ref.conformance.adapters.sglang_radix
--xfails-file ref/conformance/adapters/sglang_radix.xfails --ops 'cache.*'`.

SGLang is imported when this module is; nothing in `ref` imports it. Its install is
6 GB with torchvision (spec/cache.md, "Radix prefix cache", gives the commands); the
cache itself needs torch and SGLang's pure-Python modules only, so when torchvision
is missing (or broken) this module stands a placeholder in for it, which the radix
cache never calls.

How the catalog's calls map onto SGLang's:
- the cache is `RadixCache.create_simulated(mock_allocator=A, page_size=p)` with a
  mock allocator whose `free_segment` does nothing, and the eviction strategy of the
  `policy` variant (`get_eviction_strategy`);
- the logical clock: the module's `time` is replaced by one whose `monotonic()`
  counts (1, 2, 3, ...), so access and creation times are SGLang's own reads of
  the clock, in SGLang's order, without wall time;
- insert: `insert(InsertParams(key=RadixKey(array("q", tokens), extra_key), priority))`
  -> `prefix_len` and `last_device_node.id`; match_prefix: `match_prefix(
  MatchPrefixParams(key=...))` -> `device_prefix_len` and `last_device_node.id`;
- lock / unlock: `inc_lock_ref(node).delta` / `dec_lock_ref(node).delta`;
- evict: `evict(EvictParams(num_tokens=n)).num_tokens_evicted`, and the ids of the
  nodes `_delete_leaf` removed, in order;
- node handles are SGLang's `TreeNode.id` (compared up to renaming); a handle stays
  mapped to its node after eviction, so a stale handle reaches SGLang as the node.

SGLang checks none of the misuses the spec refuses (unlocking a node no lock was
taken on, locking an evicted node, a negative count or token id): sglang_radix.xfails
lists those traces. `GUARDED` (`--impl ref.conformance.adapters.sglang_radix:GUARDED`)
is SGLang as its scheduler calls it: the adapter refuses those misuses itself, and
everything else, the property search included, is SGLang's own behaviour.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import itertools
import sys
import time
import types
from array import array

from ref.conformance.implementation import Implementation


def _stand_in_for_torchvision() -> None:
    """Make `import torchvision` succeed with placeholders (see the module doc)."""

    class Placeholder(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Placeholder(name, (), {"__init__": lambda self, *a, **k: None})

    class Module(types.ModuleType):
        __path__: list = []

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Placeholder(name, (), {"__init__": lambda self, *a, **k: None})

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name == "torchvision" or name.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            return Module(spec.name)

        def exec_module(self, module):
            module.__version__ = "0.29.1"

    sys.meta_path.insert(0, Finder())


try:
    import torchvision  # noqa: F401
except Exception:  # absent, or built for another torch ("operator torchvision::nms does not exist")
    for _name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[_name]
    _stand_in_for_torchvision()

import sglang  # noqa: E402
from sglang.srt.mem_cache import radix_cache as _radix  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.utils import get_eviction_strategy  # noqa: E402

NAME = "SGLang RadixCache"
VERSION = getattr(sglang, "__version__", "?")

_TICKS = itertools.count(1)
_radix.time = types.SimpleNamespace(monotonic=lambda: next(_TICKS), perf_counter=time.perf_counter)


class _Allocator:
    device = "cpu"

    def free_segment(self, value, start_pos=0):
        pass

    def free(self, value):
        pass


class SGLangRadix:
    """The catalog's methods on one SGLang RadixCache."""

    def __init__(self, page_size=1, policy="lru"):
        self.cache = _radix.RadixCache.create_simulated(mock_allocator=_Allocator(), page_size=page_size)
        self.cache.eviction_policy = policy
        self.cache.eviction_strategy = get_eviction_strategy(policy, None)
        self.nodes = {self.cache.root_node.id: self.cache.root_node}
        self.deleted: list[int] = []
        delete = self.cache._delete_leaf

        def delete_leaf(node):
            self.deleted.append(node.id)
            return delete(node)

        self.cache._delete_leaf = delete_leaf

    def _key(self, tokens, extra_key):
        return _radix.RadixKey(array("q", tokens), extra_key=extra_key)

    def _handle(self, node):
        self.nodes[node.id] = node
        return node.id

    def insert(self, tokens, extra_key=None, priority=0):
        out = self.cache.insert(InsertParams(key=self._key(tokens, extra_key), priority=priority))
        return {"prefix": int(out.prefix_len), "node": self._handle(out.last_device_node)}

    def match_prefix(self, tokens, extra_key=None):
        out = self.cache.match_prefix(MatchPrefixParams(key=self._key(tokens, extra_key)))
        return {"length": int(out.device_prefix_len), "node": self._handle(out.last_device_node)}

    def lock(self, node):
        return int(self.cache.inc_lock_ref(self.nodes[node]).delta)

    def unlock(self, node):
        return int(self.cache.dec_lock_ref(self.nodes[node]).delta)

    def evict(self, num_tokens):
        self.deleted.clear()
        out = self.cache.evict(EvictParams(num_tokens=num_tokens))
        return {"evicted": int(out.num_tokens_evicted), "nodes": list(self.deleted)}

    def evictable_size(self):
        return int(self.cache.evictable_size())

    def protected_size(self):
        return int(self.cache.protected_size())


class GuardedRadix(SGLangRadix):
    """The misuses SGLang's scheduler never makes, refused before SGLang sees them."""

    def __init__(self, page_size=1, policy="lru"):
        if page_size < 1:
            raise ValueError(f"page_size: expected >= 1, got {page_size}")
        super().__init__(page_size, policy)
        self.held: dict[int, int] = {}

    def _alive(self, node) -> bool:
        while node is not self.cache.root_node:
            if node.parent is None or node not in node.parent.children.values():
                return False
            node = node.parent
        return True

    @staticmethod
    def _check(tokens, extra_key=None):
        if not isinstance(tokens, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0
                                               for t in tokens):
            raise ValueError(f"tokens: expected a list of non-negative token ids, got {tokens!r}")
        if extra_key is not None and not isinstance(extra_key, str):
            raise TypeError(f"extra_key: expected a string or None, got {extra_key!r}")

    def insert(self, tokens, extra_key=None, priority=0):
        self._check(tokens, extra_key)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority: expected an int, got {priority!r}")
        return super().insert(tokens, extra_key, priority)

    def match_prefix(self, tokens, extra_key=None):
        self._check(tokens, extra_key)
        return super().match_prefix(tokens, extra_key)

    def lock(self, node):
        if isinstance(node, bool) or node not in self.nodes or not self._alive(self.nodes[node]):
            raise ValueError(f"node: {node} is not in the cache")
        self.held[node] = self.held.get(node, 0) + 1
        return super().lock(node)

    def unlock(self, node):
        if not self.held.get(node):
            raise ValueError(f"node: no lock taken on {node}")
        self.held[node] -= 1
        return super().unlock(node)

    def evict(self, num_tokens):
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens: expected >= 0, got {num_tokens}")
        return super().evict(num_tokens)


OPS = {"cache.radix_cache": SGLangRadix}
VARIANTS = {"cache.radix_cache": {"page_size": [1, 2, 4, 16],
                                  "policy": ["lru", "lfu", "fifo", "mru", "filo", "priority"]}}
GUARDED = Implementation(f"{NAME} {VERSION}, misuse refused by the adapter", {"cache.radix_cache": GuardedRadix},
                         variants=VARIANTS, version=VERSION, source=f"{__name__}:GUARDED")

"""vLLM v1's hash-chained prefix cache over a pool of KV blocks (BlockPool +
KVCacheManager with one full-attention group: vllm/v1/core/block_pool.py,
kv_cache_manager.py, single_type_kv_cache_manager.py), as a stateful object.

State: `num_blocks` blocks, block 0 the null block (never handed out); each block
has a reference count and at most one hash; a map hash -> the blocks holding it
(first cached first); a free queue of the blocks with no reference, evicted from
its front.

- lookup(tokens, ...) = get_computed_blocks: the request's full-block hashes
  (ref.cache.block_hash) looked up in order up to the first miss, over at most
  (len(tokens) - 1) // B blocks, so the last prompt token is always computed (its
  logits are needed). No state changes.
- allocate(request_id, tokens, ...) = the scheduler's first allocate_slots for a
  whole prompt: the hit blocks touched (reference count up; a free one leaves the
  free queue), ceil(len / B) - hits new blocks popped from the queue's front, each
  popped block's old hash dropped then (lazy eviction: "evicted"), and every full
  block of the prompt cached under its hash. Too few free blocks: ValueError,
  nothing changed.
- append(request_id, tokens): decode tokens; new blocks as needed, and the blocks
  they fill cached.
- free(request_id): the request's blocks released in reverse order (the tail first);
  those whose count reaches 0 join the free queue, by `free_order`:
    "prepend_unhashed" (vLLM 0.33): unhashed blocks at the front (reused first),
                        hashed ones at the back (kept longest: LRU)
    "append_all"       (v1 before vLLM PR #42656, May 2026): all at the back, in that
                        reverse order
- free_queue(), num_free(): the queue front to back, and its length.

Accounting: `tokens_served()` sums the hit tokens of every allocate; `prefill_flops_saved`
is what a hit of h of a prompt's n tokens saves, by ref.roofline.flops.forward_flops:
F(n tokens after 0) - F(n - h tokens after h), which under the "exact" causal count
equals the prefill of the h cached tokens alone with no logits, F(h after 0, lm_head none).
"""

from __future__ import annotations

import enum
from collections import deque

from ref.arguments import integer, member
from ref.cache.block_hash import DEFAULT_SEED, HashFunction, request_block_hashes
from ref.roofline.config import Model
from ref.roofline.flops import forward_flops

__all__ = ["FreeOrder", "PrefixBlockCache", "prefill_flops_saved"]


def prefill_flops_saved(model: Model, prompt_tokens: int, hit_tokens: int, causal: str = "exact") -> int:
    """FLOPs a prefix-cache hit of `hit_tokens` saves on a prompt of `prompt_tokens`:
    the full prefill's minus the prefill of the rest after the cached context."""
    n = integer(prompt_tokens, "prompt_tokens", minimum=0)
    h = integer(hit_tokens, "hit_tokens", minimum=0, maximum=max(n - 1, 0))
    return forward_flops(model, n, 0, causal) - forward_flops(model, n - h, h, causal)


class FreeOrder(enum.Enum):
    """Where freed blocks join the free queue."""

    PREPEND_UNHASHED = "prepend_unhashed"
    APPEND_ALL = "append_all"


def _tokens(tokens, name: str = "tokens") -> list[int]:
    if not isinstance(tokens, list):
        raise TypeError(f"{name}: expected a list of token ids, got {type(tokens).__name__}")
    return [integer(t, name, minimum=0) for t in tokens]


def _text(value, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name}: expected a str or None, got {type(value).__name__}")
    return value or None


class PrefixBlockCache:
    """The reference object; see the module docstring."""

    def __init__(self, num_blocks=8, block_size=4, hash_function="sha256_cbor", free_order="prepend_unhashed"):
        self.num_blocks = integer(num_blocks, "num_blocks", minimum=2)  # the null block and one more
        self.block_size = integer(block_size, "block_size", minimum=1)
        self.hash_function = member(hash_function, HashFunction, "hash_function").value
        self.free_order = member(free_order, FreeOrder, "free_order")
        self._refs = [0] * self.num_blocks
        self._hash: list[bytes | None] = [None] * self.num_blocks
        self._cached: dict[bytes, list[int]] = {}
        self._queue = deque(range(1, self.num_blocks))  # block 0: the null block
        self._requests: dict[str, dict] = {}
        self._served = 0

    # ----------------------------------------------------------------- hashing
    def _hashes(self, tokens: list[int], lora, salt, known: list[bytes] = ()) -> list[bytes]:
        return request_block_hashes(tokens, self.block_size, lora=lora, cache_salt=salt,
                                    hash_function=self.hash_function, seed=DEFAULT_SEED, known=known)

    @staticmethod
    def _extras(lora_name, lora_path, cache_salt):
        name, path = _text(lora_name, "lora_name"), _text(lora_path, "lora_path")
        if path and not name:
            raise ValueError("lora_path: given without a lora_name")
        return ((name, path or "") if name else None), _text(cache_salt, "cache_salt")

    def _hits(self, hashes: list[bytes], num_tokens: int) -> list[int]:
        """The cached blocks of the longest prefix, never covering the last token."""
        hits = []
        for h in hashes[:max(num_tokens - 1, 0) // self.block_size]:
            if h not in self._cached:
                break
            hits.append(self._cached[h][0])
        return hits

    # ---------------------------------------------------------------- the pool
    def _pop_free(self, n: int) -> tuple[list[int], list[str]]:
        blocks, evicted = [self._queue.popleft() for _ in range(n)], []
        for b in blocks:
            if self._hash[b] is not None:  # lazy eviction: the hash goes when the block is reused
                evicted.append(self._hash[b].hex())
                owners = self._cached[self._hash[b]]
                owners.remove(b)
                if not owners:
                    del self._cached[self._hash[b]]
                self._hash[b] = None
            self._refs[b] = 1
        return blocks, evicted

    def _cache_full(self, req: dict) -> None:
        full = min(len(req["tokens"]) // self.block_size, len(req["blocks"]))
        for i in range(req["num_cached"], full):
            b, h = req["blocks"][i], req["hashes"][i]
            if self._hash[b] is None:
                self._hash[b] = h
                self._cached.setdefault(h, []).append(b)
        req["num_cached"] = max(req["num_cached"], full)

    # ----------------------------------------------------------------- methods
    def lookup(self, tokens, lora_name=None, lora_path=None, cache_salt=None):
        """{"hit_tokens", "blocks"}: the cached prefix a new request would reuse."""
        tokens = _tokens(tokens)
        lora, salt = self._extras(lora_name, lora_path, cache_salt)
        hits = self._hits(self._hashes(tokens, lora, salt), len(tokens))
        return {"hit_tokens": len(hits) * self.block_size, "blocks": hits}

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        """{"hit_tokens", "blocks" (the request's whole table), "evicted" (hex hashes)}."""
        if not isinstance(request_id, str):
            raise TypeError(f"request_id: expected a str, got {type(request_id).__name__}")
        if request_id in self._requests:
            raise ValueError(f"request_id: {request_id!r} is already allocated")
        tokens = _tokens(tokens)
        if not tokens:
            raise ValueError("tokens: a prompt has at least one token")
        lora, salt = self._extras(lora_name, lora_path, cache_salt)
        hashes = self._hashes(tokens, lora, salt)
        hits = self._hits(hashes, len(tokens))
        new = -(-len(tokens) // self.block_size) - len(hits)
        free_hits = sum(1 for b in hits if self._refs[b] == 0)
        if new + free_hits > len(self._queue):
            raise ValueError(f"tokens: {new} new blocks needed (and {free_hits} cached ones taken from the free "
                             f"queue), {len(self._queue)} free")
        for b in hits:  # touch
            if self._refs[b] == 0:
                self._queue.remove(b)
            self._refs[b] += 1
        blocks, evicted = self._pop_free(new)
        req = {"tokens": tokens, "blocks": hits + blocks, "hashes": hashes, "num_cached": len(hits),
               "lora": lora, "salt": salt}
        self._requests[request_id] = req
        self._cache_full(req)
        self._served += len(hits) * self.block_size
        return {"hit_tokens": len(hits) * self.block_size, "blocks": list(req["blocks"]), "evicted": evicted}

    def _request(self, request_id) -> dict:
        if not isinstance(request_id, str):
            raise TypeError(f"request_id: expected a str, got {type(request_id).__name__}")
        if request_id not in self._requests:
            raise ValueError(f"request_id: {request_id!r} is not allocated")
        return self._requests[request_id]

    def append(self, request_id, tokens):
        """Decode tokens appended: {"blocks" (new ones), "evicted"}."""
        req = self._request(request_id)
        tokens = _tokens(tokens)
        total = req["tokens"] + tokens
        new = -(-len(total) // self.block_size) - len(req["blocks"])
        if new > len(self._queue):
            raise ValueError(f"tokens: {new} new blocks needed, {len(self._queue)} free")
        blocks, evicted = self._pop_free(new)
        req["tokens"], req["blocks"] = total, req["blocks"] + blocks
        req["hashes"] = self._hashes(total, req["lora"], req["salt"], known=req["hashes"])  # the new full blocks
        self._cache_full(req)
        return {"blocks": blocks, "evicted": evicted}

    def free(self, request_id):
        """Release the request's blocks, tail first."""
        req = self._request(request_id)
        del self._requests[request_id]
        front, back = [], []
        for b in reversed(req["blocks"]):
            self._refs[b] -= 1
            if self._refs[b] == 0:
                unhashed_first = self.free_order is FreeOrder.PREPEND_UNHASHED and self._hash[b] is None
                (front if unhashed_first else back).append(b)
        self._queue.extendleft(reversed(front))
        self._queue.extend(back)

    def free_queue(self):
        """The free blocks, the next to be reused first."""
        return list(self._queue)

    def num_free(self):
        return len(self._queue)

    def tokens_served(self) -> int:
        """Prompt tokens served from the cache so far (the sum of allocate's hit tokens;
        not a traced method)."""
        return self._served

    def requests(self) -> list[str]:
        """The allocated request ids, sorted (for strategies; not a traced method)."""
        return sorted(self._requests)

    def snapshot(self) -> dict:
        """The state as JSON (failure reports)."""
        return {"free_queue": list(self._queue),
                "refs": {str(b): r for b, r in enumerate(self._refs) if r},
                "cached": {str(b): h.hex()[:12] for b, h in enumerate(self._hash) if h is not None},
                "requests": {k: v["blocks"] for k, v in self._requests.items()}}

"""The hash-chained prefix cache bug corpus: wrong block hashers and wrong prefix
caches written the way engines' cache managers go wrong, each one step changed from
the default run's (ref.conformance.adapters.python_prefix_blocks).

HASHED_BUGS: name -> (op, flag, kernel or factory). `bug(name)` is the
Implementation of that one op.
"""

from __future__ import annotations

import hashlib
import pickle

import numpy as np

from ref.conformance.adapters import python_prefix_blocks as product
from ref.conformance.implementation import Implementation

P = product


# ------------------------------------------------------------------ block_hash

def _unchained(parent, tokens, **kw):
    """The parent ignored: every block hashed as a first block (salt aside)."""
    return P.block_hash(np.zeros(0, np.uint8), tokens, **{k: v for k, v in kw.items() if k != "cache_salt"})


def _no_extra_keys(parent, tokens, lora_name=None, lora_path=None, cache_salt=None, mm_ids=None, mm_offsets=None,
                   *, hash_function="sha256_cbor"):
    """LoRA, items and salt checked, then left out of the hash."""
    P.block_hash(parent, tokens, lora_name, lora_path, cache_salt, mm_ids, mm_offsets, hash_function=hash_function)
    return P.block_hash(parent, tokens, hash_function=hash_function)


def _salt_everywhere(parent, tokens, lora_name=None, lora_path=None, cache_salt=None, mm_ids=None, mm_offsets=None,
                     *, hash_function="sha256_cbor"):
    """The cache salt on every block, not only the first."""
    out = P.block_hash(parent, tokens, lora_name, lora_path, cache_salt, mm_ids, mm_offsets,
                       hash_function=hash_function)
    salt = b"" if cache_salt is None else bytes(np.asarray(cache_salt))
    if np.asarray(parent).size and salt:
        return np.frombuffer(P.digest((bytes(out), salt.decode()), hash_function), np.uint8).copy()
    return out


def _zero_none_hash(parent, tokens, *args, hash_function="sha256_cbor", **kw):
    """The first block's parent taken as 32 zero bytes instead of H(seed)."""
    parent = np.asarray(parent)
    if parent.size == 0:
        P.block_hash(parent, tokens, *args, hash_function=hash_function, **kw)  # the checks
        parent = np.zeros(32, np.uint8)
    return P.block_hash(parent, tokens, *args, hash_function=hash_function, **kw)


def _pickle_protocol_4(parent, tokens, lora_name=None, lora_path=None, cache_salt=None, mm_ids=None,
                       mm_offsets=None, *, hash_function="sha256_cbor"):
    """pickle protocol 4 (an older HIGHEST_PROTOCOL) where vLLM pickles with 5."""
    out = P.block_hash(parent, tokens, lora_name, lora_path, cache_salt, mm_ids, mm_offsets,
                       hash_function=hash_function)  # the checks, and the CBOR variant as it is
    if hash_function != "sha256_pickle":
        return out
    text = lambda a: "" if a is None else bytes(np.asarray(a)).decode()  # noqa: E731
    first = np.asarray(parent).size == 0
    mm = [] if mm_ids is None else [(bytes(r).decode(), int(o)) for r, o in zip(np.asarray(mm_ids), mm_offsets)]
    name = text(lora_name)
    keys = P.keys_for(first, (name, text(lora_path)) if name else None, mm, text(cache_salt))
    prev = hashlib.sha256(pickle.dumps(P.SEED, protocol=4)).digest() if first else bytes(np.asarray(parent))
    triple = (prev, tuple(int(t) for t in np.asarray(tokens)), keys)
    return np.frombuffer(hashlib.sha256(pickle.dumps(triple, protocol=4)).digest(), np.uint8).copy()


def _lora_empty_path_dropped(parent, tokens, lora_name=None, lora_path=None, cache_salt=None, mm_ids=None,
                             mm_offsets=None, *, hash_function="sha256_cbor"):
    """A LoRA named without a path keyed ("lora", name), the empty path dropped (adv12 #4)."""
    out = P.block_hash(parent, tokens, lora_name, lora_path, cache_salt, mm_ids, mm_offsets,
                       hash_function=hash_function)  # the checks, and every other case as it is
    text = lambda a: "" if a is None else bytes(np.asarray(a)).decode()  # noqa: E731
    name, path = text(lora_name), text(lora_path)
    if not name or path:
        return out
    first = np.asarray(parent).size == 0
    mm = [] if mm_ids is None else [(bytes(r).decode(), int(o)) for r, o in zip(np.asarray(mm_ids), mm_offsets)]
    keys = P.keys_for(first, (name,), mm, text(cache_salt))
    prev = P.digest(P.SEED, hash_function) if first else bytes(np.asarray(parent))
    triple = (prev, tuple(int(t) for t in np.asarray(tokens)), keys)
    return np.frombuffer(P.digest(triple, hash_function), np.uint8).copy()


# ------------------------------------------------------------------ prefix_blocks

class PartialBlockCached(P.PrefixCache):
    """The trailing partial block hashed and cached too."""

    def _chain(self, tokens, lora, salt):
        out = super()._chain(tokens, lora, salt)
        rest = tokens[len(out) * self.B:]
        if rest:
            parent = out[-1] if out else P.digest(P.SEED, self.fn)
            out.append(P.digest((parent, tuple(rest), P.keys_for(not out, lora, [], salt)), self.fn))
        return out

    def _store(self, r):
        r["chain"] = self._chain(r["tokens"], r["lora"], r["salt"])
        for i in range(r["cached"], min(len(r["chain"]), len(r["blocks"]))):
            b = r["blocks"][i]
            if b not in self.block_hash:
                self.block_hash[b] = r["chain"][i]
                self.by_hash.setdefault(r["chain"][i], []).append(b)
            r["cached"] = i + (len(r["tokens"]) >= (i + 1) * self.B)


class WholePromptHit(P.PrefixCache):
    """The lookup covers every full block, the last prompt token included."""

    def _hit(self, chain, n):
        return super()._hit(chain, n + 1)


class LeakOnFree(P.PrefixCache):
    """free drops the request but returns only its hashed blocks to the queue."""

    def free(self, request_id):
        blocks = self.reqs.get(request_id, {}).get("blocks", [])
        super().free(request_id)
        for b in blocks:
            if b not in self.block_hash and b in self.free_q:
                del self.free_q[b]


class InsertionLru(P.PrefixCache):
    """A hit block leaving the free queue keeps its old place when freed again (LRU by first insertion)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.first_freed = {}
        self.clock = 0

    def free(self, request_id):
        super().free(request_id)
        for b in self.free_q:
            self.clock += 1
            self.first_freed.setdefault(b, self.clock)
        unhashed = [b for b in self.free_q if b not in self.block_hash]
        hashed = sorted((b for b in self.free_q if b in self.block_hash), key=self.first_freed.get)
        self.free_q.clear()
        for b in unhashed + hashed:
            self.free_q[b] = None

    def _take(self, n):
        taken, gone = super()._take(n)
        for b in taken:
            self.first_freed.pop(b, None)
        return taken, gone


class HeadFirstFree(P.PrefixCache):
    """Blocks freed in table order (head first), so a prefix's head is evicted before its tail."""

    def free(self, request_id):
        if request_id in self.reqs:
            self.reqs[request_id]["blocks"].reverse()
        super().free(request_id)


class EagerEviction(P.PrefixCache):
    """Hashes dropped when a block is freed, not when it is reused: nothing survives its request."""

    def free(self, request_id):
        blocks = self.reqs.get(request_id, {}).get("blocks", [])
        super().free(request_id)
        for b in blocks:
            if b in self.free_q and b in self.block_hash:
                h = self.block_hash.pop(b)
                self.by_hash[h].remove(b)
                if not self.by_hash[h]:
                    del self.by_hash[h]


class UnchainedCache(P.PrefixCache):
    """Each block hashed from its own tokens only: equal blocks under other prefixes hit."""

    def _chain(self, tokens, lora, salt):
        return [P.digest((b"", tuple(tokens[i * self.B:(i + 1) * self.B]), P.keys_for(i == 0, lora, [], salt)),
                         self.fn) for i in range(len(tokens) // self.B)]


class IgnoresExtraKeys(P.PrefixCache):
    """LoRA and salt never reach the hash."""

    def _chain(self, tokens, lora, salt):
        return super()._chain(tokens, None, None)


class HitNewestCopy(P.PrefixCache):
    """A hit returns the newest block holding a hash, not the first cached (adv12 #5)."""

    def _hit(self, chain, n):
        got = []
        for h in chain[:(n - 1) // self.B if n else 0]:
            if h not in self.by_hash:
                break
            got.append(self.by_hash[h][-1])
        return got


class DuplicateNotRegistered(P.PrefixCache):
    """A block whose hash is already cached is not registered: it never hits (adv12, search only)."""

    def _store(self, r):
        for i in range(r["cached"], min(len(r["tokens"]) // self.B, len(r["blocks"]))):
            b = r["blocks"][i]
            if b not in self.block_hash and r["chain"][i] not in self.by_hash:
                self.block_hash[b] = r["chain"][i]
                self.by_hash.setdefault(r["chain"][i], []).append(b)
            r["cached"] = i + 1


class SaltDroppedWithLora(P.PrefixCache):
    """The cache salt left out of the first block's keys when a LoRA is present (adv12 #6)."""

    def _chain(self, tokens, lora, salt):
        return super()._chain(tokens, lora, None if lora else salt)


class DecodeBlocksUnsalted(P.PrefixCache):
    """Blocks filled by append hashed without the request's salt (adv12 #7)."""

    _old = None

    def _chain(self, tokens, lora, salt):
        if self._old is None:
            return super()._chain(tokens, lora, salt)
        return self._old + super()._chain(tokens, lora, None)[len(self._old):]

    def append(self, request_id, tokens):
        r = self.reqs.get(request_id)
        self._old = list(r["chain"]) if r else None
        try:
            return super().append(request_id, tokens)
        finally:
            self._old = None


class NumFreeWithoutCached(P.PrefixCache):
    """num_free leaves out the freed blocks still holding a hash (adv12 #8)."""

    def num_free(self):
        return sum(b not in self.block_hash for b in self.free_q)


class LoraPathWithoutName(P.PrefixCache):
    """A LoRA path without a name accepted (and ignored) (adv12 #9)."""

    @staticmethod
    def _check(tokens, *texts):
        if len(texts) > 1 and not texts[0] and type(texts[1]) is str:
            texts = (texts[0], None) + texts[2:]
        P.PrefixCache._check(tokens, *texts)


class EmptyPromptAccepted(P.PrefixCache):
    """An empty prompt accepted as a request with no blocks (adv12 #10)."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        if tokens == [] and type(request_id) is str and request_id not in self.reqs:
            self._check(tokens, lora_name, lora_path, cache_salt)
            self.reqs[request_id] = {"tokens": [], "blocks": [], "chain": [], "cached": 0,
                                     "lora": (lora_name, lora_path or "") if lora_name else None, "salt": cache_salt}
            return {"hit_tokens": 0, "blocks": [], "evicted": []}
        return super().allocate(request_id, tokens, lora_name, lora_path, cache_salt)


class AppendCapacityOffByOne(P.PrefixCache):
    """append's capacity check one block short: an append one block past the pool is accepted, its table
    a block short (adv12, search only)."""

    def append(self, request_id, tokens):
        self._check(tokens)
        if request_id not in self.reqs:
            raise ValueError("request_id: unknown")
        r = self.reqs[request_id]
        need = (len(r["tokens"]) + len(tokens) + self.B - 1) // self.B - len(r["blocks"])
        if need > len(self.free_q) + 1:
            raise ValueError("tokens: not enough free blocks")
        new, gone = self._take(min(need, len(self.free_q)))
        r["tokens"] += tokens
        r["blocks"] += new
        r["chain"] = self._chain(r["tokens"], r["lora"], r["salt"])
        self._store(r)
        return {"blocks": new, "evicted": gone}


# ------------------------------------------------------------------ refusals that change state (issue 12)
# Each refuses the step the reference refuses, but changes something first; the
# golden traces go on after the refusal and probe it.

def _begin(cache, request_id, tokens, lora_name, lora_path, cache_salt):
    """allocate's checks and lookup, as the product does them: (lora, chain, hits, new blocks needed)."""
    cache._check(tokens, lora_name, lora_path, cache_salt)
    if type(request_id) is not str or request_id in cache.reqs or not tokens:
        raise ValueError("request_id: new, and tokens: not empty")
    lora = (lora_name, lora_path or "") if lora_name else None
    chain = cache._chain(tokens, lora, cache_salt)
    got = cache._hit(chain, len(tokens))
    return lora, chain, got, (len(tokens) + cache.B - 1) // cache.B - len(got)


def _touch(cache, got):
    for b in got:
        cache.free_q.pop(b, None)
        cache.refs[b] += 1


def _finish(cache, request_id, tokens, lora, salt, chain, got, new, gone):
    """The request registered with its table, its full blocks cached."""
    r = cache.reqs[request_id] = {"tokens": list(tokens), "blocks": got + new, "chain": chain, "cached": len(got),
                                  "lora": lora, "salt": salt}
    cache._store(r)
    return {"hit_tokens": cache.B * len(got), "blocks": list(r["blocks"]), "evicted": gone}


class HitsTouchedBeforeCapacity(P.PrefixCache):
    """The hits touched before the capacity check, which then counts only the new blocks: a refused
    request leaves its hit blocks out of the free queue, their counts raised (vLLM's allocate_slots
    has touched computed blocks before checking in some releases)."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        lora, chain, got, need = _begin(self, request_id, tokens, lora_name, lora_path, cache_salt)
        _touch(self, got)
        if need > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        return _finish(self, request_id, tokens, lora, cache_salt, chain, got, *self._take(need))


class HitsRequeuedAtBack(P.PrefixCache):
    """Hits touched before the capacity check and released again on refusal, the way free releases
    them: at the queue's back, so a refused request refreshes its prefix in the LRU."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        lora, chain, got, need = _begin(self, request_id, tokens, lora_name, lora_path, cache_salt)
        _touch(self, got)
        if need > len(self.free_q):
            for b in got:
                self.refs[b] -= 1
                if not self.refs[b]:
                    self.free_q[b] = None
            raise ValueError("tokens: not enough free blocks")
        return _finish(self, request_id, tokens, lora, cache_salt, chain, got, *self._take(need))


class NewBlocksTakenOneByOne(P.PrefixCache):
    """No capacity check up front: the hits touched, then new blocks popped one at a time, refused when
    the queue runs dry, and every block already taken kept (the popped ones' hashes evicted)."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        lora, chain, got, need = _begin(self, request_id, tokens, lora_name, lora_path, cache_salt)
        _touch(self, got)
        new, gone = [], []
        for _ in range(need):
            if not self.free_q:
                raise ValueError("tokens: the free queue ran out")
            taken, dropped = self._take(1)
            new += taken
            gone += dropped
        return _finish(self, request_id, tokens, lora, cache_salt, chain, got, new, gone)


class EvictedBeforeCapacity(P.PrefixCache):
    """The blocks to reuse popped (their hashes dropped) before the capacity check; refused, they go
    back to the queue's front in order, but the cached prefixes they held are lost."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        lora, chain, got, need = _begin(self, request_id, tokens, lora_name, lora_path, cache_salt)
        if need + sum(b in self.free_q for b in got) > len(self.free_q):
            taken, _ = self._take(min(need, len(self.free_q)))
            for b in reversed(taken):
                self.refs[b] = 0
                self.free_q[b] = None
                self.free_q.move_to_end(b, last=False)
            raise ValueError("tokens: not enough free blocks")
        _touch(self, got)
        return _finish(self, request_id, tokens, lora, cache_salt, chain, got, *self._take(need))


class RegisteredBeforeCapacity(P.PrefixCache):
    """The request registered (an empty table) before the capacity check: refused, its id stays
    taken, so the retried request is refused as a duplicate."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        lora, chain, got, need = _begin(self, request_id, tokens, lora_name, lora_path, cache_salt)
        self.reqs[request_id] = {"tokens": [], "blocks": [], "chain": [], "cached": 0, "lora": lora,
                                 "salt": cache_salt}
        if need + sum(b in self.free_q for b in got) > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        del self.reqs[request_id]
        return super().allocate(request_id, tokens, lora_name, lora_path, cache_salt)


class AppendTokensFirst(P.PrefixCache):
    """append records the decoded tokens before the capacity check: refused, the request is longer
    than its table, and its next append or cached block is wrong."""

    def append(self, request_id, tokens):
        self._check(tokens)
        if request_id not in self.reqs:
            raise ValueError("request_id: unknown")
        r = self.reqs[request_id]
        r["tokens"] += tokens
        need = (len(r["tokens"]) + self.B - 1) // self.B - len(r["blocks"])
        if need > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        new, gone = self._take(need)
        r["blocks"] += new
        r["chain"] = self._chain(r["tokens"], r["lora"], r["salt"])
        self._store(r)
        return {"blocks": new, "evicted": gone}


class AppendKeepsTakenBlocks(P.PrefixCache):
    """append pops its new blocks one at a time into the request's table and refuses when the queue
    runs dry, keeping those it took."""

    def append(self, request_id, tokens):
        self._check(tokens)
        if request_id not in self.reqs:
            raise ValueError("request_id: unknown")
        r = self.reqs[request_id]
        need = (len(r["tokens"]) + len(tokens) + self.B - 1) // self.B - len(r["blocks"])
        new, gone = [], []
        for _ in range(max(need, 0)):
            if not self.free_q:
                raise ValueError("tokens: the free queue ran out")
            taken, dropped = self._take(1)
            r["blocks"] += taken
            new += taken
            gone += dropped
        r["tokens"] += tokens
        r["chain"] = self._chain(r["tokens"], r["lora"], r["salt"])
        self._store(r)
        return {"blocks": new, "evicted": gone}


class TokensCheckedWhileCaching(P.PrefixCache):
    """allocate checks each block's tokens only as it hashes and caches the block, after the blocks
    were taken: a bad token in a later block refuses the request, but its blocks stay taken and the
    valid full blocks before it stay cached."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        bad = next((i for i, t in enumerate(tokens) if type(t) is int and t < 0), None) \
            if type(tokens) is list else None
        if bad is None or bad < self.B:
            return super().allocate(request_id, tokens, lora_name, lora_path, cache_salt)
        lora, chain, got, need = _begin(self, request_id, tokens[:bad], lora_name, lora_path, cache_salt)
        need = (len(tokens) + self.B - 1) // self.B - len(got)
        if need > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        _touch(self, got)
        new, _ = self._take(need)
        self._store({"tokens": tokens[:bad], "blocks": got + new, "chain": chain, "cached": len(got)})
        raise ValueError(f"tokens: {tokens[bad]} at {bad} is negative")


class LiveIdCheckedLate(P.PrefixCache):
    """A live request id checked only when the table is stored, after the hits were touched and the
    new blocks taken: a second allocate of a live id is refused, its blocks kept."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        if type(request_id) is not str or request_id not in self.reqs:
            return super().allocate(request_id, tokens, lora_name, lora_path, cache_salt)
        saved, self.reqs = self.reqs, {}
        try:
            lora, chain, got, need = _begin(self, request_id, tokens, lora_name, lora_path, cache_salt)
        finally:
            self.reqs = saved
        if need + sum(b in self.free_q for b in got) > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        _touch(self, got)
        self._take(need)
        raise ValueError(f"request_id: {request_id!r} is already allocated")


class UnknownIdRegistered(P.PrefixCache):
    """Requests kept in a defaultdict: free or append of an unknown id refuses (no blocks) but leaves
    an empty entry, so that id's later allocate is refused as a duplicate (and its free accepted)."""

    def free(self, request_id):
        if type(request_id) is str and not self.reqs.get(request_id, {}).get("blocks"):
            self.reqs.setdefault(request_id, {"tokens": [], "blocks": [], "chain": [], "cached": 0, "lora": None,
                                              "salt": None})
            raise ValueError("request_id: unknown")
        super().free(request_id)

    def append(self, request_id, tokens):
        if type(request_id) is str and not self.reqs.get(request_id, {}).get("blocks"):
            self.reqs.setdefault(request_id, {"tokens": [], "blocks": [], "chain": [], "cached": 0, "lora": None,
                                              "salt": None})
            raise ValueError("request_id: unknown")
        return super().append(request_id, tokens)


class LoraPathCheckedLate(P.PrefixCache):
    """A LoRA path without a name found only when the request is stored, after its blocks were taken
    (hits touched, new blocks popped): refused, they stay taken."""

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        if not (type(lora_path) is str and lora_path and not lora_name):
            return super().allocate(request_id, tokens, lora_name, lora_path, cache_salt)
        lora, chain, got, need = _begin(self, request_id, tokens, None, None, cache_salt)
        if need + sum(b in self.free_q for b in got) > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        _touch(self, got)
        self._take(need)
        raise ValueError("lora_path: without lora_name")


# the prefix caches above that refuse as the reference does but change state first (issue 12)
STATE_CHANGING_REFUSALS = (HitsTouchedBeforeCapacity, HitsRequeuedAtBack, NewBlocksTakenOneByOne,
                           EvictedBeforeCapacity, RegisteredBeforeCapacity, AppendTokensFirst, AppendKeepsTakenBlocks,
                           TokensCheckedWhileCaching, LiveIdCheckedLate, UnknownIdRegistered, LoraPathCheckedLate)


H, C = "cache.block_hash", "cache.prefix_blocks"
HASHED_BUGS = {
    "unchained block hash": (H, "HashChain", _unchained),
    "block hash without extra keys": (H, "ExtraKeys", _no_extra_keys),
    "cache salt on every block": (H, "ExtraKeys", _salt_everywhere),
    "NONE_HASH as zero bytes": (H, "NoneHash", _zero_none_hash),
    "pickle protocol 4": (H, "Serialisation", _pickle_protocol_4),
    "unchained hashes in the cache": (C, "HashChain", UnchainedCache),
    "cache ignoring LoRA and salt": (C, "ExtraKeys", IgnoresExtraKeys),
    "partial block cached": (C, "FullBlocksOnly", PartialBlockCached),
    "lookup covers the last prompt token": (C, "LastToken", WholePromptHit),
    "unhashed blocks leaked on free": (C, "Leak", LeakOnFree),
    "LRU by insertion, not last use": (C, "EvictionOrder", InsertionLru),
    "freed head first": (C, "EvictionOrder", HeadFirstFree),
    "hashes dropped at free": (C, "LazyEviction", EagerEviction),
    # closed from the cache adversary's report (adv12)
    "LoRA name with an empty path dropped from the key": (H, "ExtraKeys", _lora_empty_path_dropped),
    "hit on the newest block holding a hash": (C, "HashChain", HitNewestCopy),
    "duplicate-hash block not registered": (C, "HashChain", DuplicateNotRegistered),
    "cache salt dropped with a LoRA": (C, "ExtraKeys", SaltDroppedWithLora),
    "decode-filled blocks hashed without the salt": (C, "ExtraKeys", DecodeBlocksUnsalted),
    "num_free without the freed cached blocks": (C, "LazyEviction", NumFreeWithoutCached),
    "LoRA path without a name accepted": (C, "InvalidInput", LoraPathWithoutName),
    "empty prompt accepted": (C, "InvalidInput", EmptyPromptAccepted),
    "append capacity check off by one": (C, "InvalidInput", AppendCapacityOffByOne),
    # refusals that change state (issue 12): caught by the traces that go on after a refusal
    "hits touched before the capacity check": (C, "Leak", HitsTouchedBeforeCapacity),
    "refused hits requeued at the back": (C, "EvictionOrder", HitsRequeuedAtBack),
    "new blocks taken one by one, kept on refusal": (C, "Leak", NewBlocksTakenOneByOne),
    "hashes evicted by a refused allocate": (C, "LazyEviction", EvictedBeforeCapacity),
    "request registered before the capacity check": (C, "RefusedState", RegisteredBeforeCapacity),
    "append's tokens recorded before the capacity check": (C, "RefusedState", AppendTokensFirst),
    "append keeps the blocks it took": (C, "Leak", AppendKeepsTakenBlocks),
    "bad token found while caching: the valid prefix cached": (C, "RefusedState", TokensCheckedWhileCaching),
    "live request id checked after its blocks are taken": (C, "Leak", LiveIdCheckedLate),
    "unknown id registered by a refused free": (C, "RefusedState", UnknownIdRegistered),
    "LoRA path checked after the blocks are taken": (C, "RefusedState", LoraPathCheckedLate),
}


def bug(name: str) -> Implementation:
    op, _, kernel = HASHED_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: P.VARIANTS[op]})

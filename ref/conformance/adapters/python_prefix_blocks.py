"""vLLM v1's hash-chained prefix cache for the default run, written independently of
the oracles (this module imports nothing from ref):

- block hashes: the CBOR bytes built by int.to_bytes on each head, the pickle bytes
  by the standard library's pickle (protocol 5), then SHA-256;
- the cache: an OrderedDict as the free queue (popitem from the front, move_to_end
  for the back), a dict from hash to the block ids holding it, reference counts in
  a dict, each request's table and its number of cached blocks.
"""

from __future__ import annotations

import hashlib
import pickle
import sys
from collections import OrderedDict

import numpy as np

NAME = "python prefix blocks"
VERSION = f"python {sys.version_info.major}.{sys.version_info.minor}"
SEED = "vllm-none-hash"


def _cbor_head(major: int, n: int) -> bytes:
    if n <= 23:
        return bytes([(major << 5) + n])
    size = next(s for s in (1, 2, 4, 8) if n < 256 ** s)  # StopIteration past 64 bits
    return bytes([(major << 5) + {1: 24, 2: 25, 4: 26, 8: 27}[size]]) + n.to_bytes(size, "big")


def cbor(item) -> bytes:
    if item is None:
        return bytes([0xF6])
    if type(item) is int:
        return _cbor_head(0, item) if item >= 0 else _cbor_head(1, ~item)
    if type(item) is bytes:
        return _cbor_head(2, len(item)) + item
    if type(item) is str:
        raw = item.encode()
        return _cbor_head(3, len(raw)) + raw
    return _cbor_head(4, len(item)) + b"".join(map(cbor, item))


def digest(item, fn: str) -> bytes:
    if fn not in ("sha256_cbor", "sha256_pickle"):
        raise ValueError(f"hash_function: unknown {fn!r}")
    return hashlib.sha256(cbor(item) if fn == "sha256_cbor" else pickle.dumps(item, protocol=5)).digest()


def keys_for(first: bool, lora, mm, salt):
    out = ([("lora",) + tuple(lora)] if lora else []) + [("mm", i, o) for i, o in mm]
    if first and salt:
        out.append(("cache_salt", salt))
    return tuple(out) if out else None


def _utf8(a, name):
    a = np.asarray(a)
    if a.dtype != np.uint8 or a.ndim != 1:
        raise TypeError(f"{name}: uint8 bytes expected")
    return bytes(a).decode()


def block_hash(parent, tokens, lora_name=None, lora_path=None, cache_salt=None, mm_ids=None, mm_offsets=None, *,
               hash_function="sha256_cbor"):
    parent, tokens = np.asarray(parent), np.asarray(tokens)
    if parent.dtype != np.uint8 or parent.ndim != 1 or parent.size not in (0, 32):
        raise TypeError("parent: 32 bytes or none")
    if tokens.dtype.kind not in "iu" or tokens.ndim != 1 or tokens.size == 0 or (tokens < 0).any():
        raise ValueError("tokens: a non-empty 1-d array of token ids >= 0")
    empty = np.zeros(0, np.uint8)
    name = _utf8(empty if lora_name is None else lora_name, "lora_name")
    path = _utf8(empty if lora_path is None else lora_path, "lora_path")
    salt = _utf8(empty if cache_salt is None else cache_salt, "cache_salt")
    ids = np.zeros((0, 0), np.uint8) if mm_ids is None else np.asarray(mm_ids)
    offs = np.zeros(0, np.int64) if mm_offsets is None else np.asarray(mm_offsets)
    if ids.dtype != np.uint8 or ids.ndim != 2 or offs.ndim != 1 or offs.dtype.kind not in "iu" \
            or len(ids) != len(offs):
        raise ValueError("mm_ids, mm_offsets: one offset per identifier")
    if path and not name:
        raise ValueError("lora_path: without lora_name")
    mm = [(bytes(r).decode(), int(o)) for r, o in zip(ids, offs)]
    first = parent.size == 0
    prev = digest(SEED, hash_function) if first else bytes(parent)
    key = keys_for(first, (name, path) if name else None, mm, salt)
    return np.frombuffer(digest((prev, tuple(map(int, tokens)), key), hash_function), np.uint8).copy()


class PrefixCache:
    def __init__(self, num_blocks=8, block_size=4, hash_function="sha256_cbor", free_order="prepend_unhashed"):
        for name, v, low in (("num_blocks", num_blocks, 2), ("block_size", block_size, 1)):
            if type(v) is not int or v < low:
                raise ValueError(f"{name}: an int >= {low}")
        if hash_function not in ("sha256_cbor", "sha256_pickle") or \
                free_order not in ("prepend_unhashed", "append_all"):
            raise ValueError("hash_function or free_order: unknown")
        self.B, self.fn, self.order = block_size, hash_function, free_order
        self.free_q = OrderedDict((b, None) for b in range(1, num_blocks))
        self.refs = {b: 0 for b in range(num_blocks)}
        self.block_hash = {}
        self.by_hash = {}
        self.reqs = {}

    def _chain(self, tokens, lora, salt):
        out, prev = [], digest(SEED, self.fn)
        for i in range(len(tokens) // self.B):
            prev = digest((prev, tuple(tokens[i * self.B:(i + 1) * self.B]), keys_for(i == 0, lora, [], salt)),
                          self.fn)
            out.append(prev)
        return out

    @staticmethod
    def _check(tokens, *texts):
        if type(tokens) is not list or any(type(t) is not int or t < 0 for t in tokens):
            raise ValueError("tokens: a list of ints >= 0")
        if any(t is not None and type(t) is not str for t in texts):
            raise TypeError("lora_name, lora_path, cache_salt: str or None")
        if texts and texts[1] and not texts[0]:
            raise ValueError("lora_path: without lora_name")

    def _hit(self, chain, n):
        got = []
        for h in chain[:(n - 1) // self.B if n else 0]:
            if h not in self.by_hash:
                break
            got.append(self.by_hash[h][0])
        return got

    def lookup(self, tokens, lora_name=None, lora_path=None, cache_salt=None):
        self._check(tokens, lora_name, lora_path, cache_salt)
        got = self._hit(self._chain(tokens, (lora_name, lora_path or "") if lora_name else None, cache_salt),
                        len(tokens))
        return {"hit_tokens": self.B * len(got), "blocks": got}

    def _take(self, n):
        taken, gone = [], []
        for _ in range(n):
            b, _ = self.free_q.popitem(last=False)
            h = self.block_hash.pop(b, None)
            if h is not None:
                gone.append(h.hex())
                self.by_hash[h].remove(b)
                if not self.by_hash[h]:
                    del self.by_hash[h]
            self.refs[b] = 1
            taken.append(b)
        return taken, gone

    def _store(self, r):
        for i in range(r["cached"], min(len(r["tokens"]) // self.B, len(r["blocks"]))):
            b = r["blocks"][i]
            if b not in self.block_hash:
                self.block_hash[b] = r["chain"][i]
                self.by_hash.setdefault(r["chain"][i], []).append(b)
            r["cached"] = i + 1

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        self._check(tokens, lora_name, lora_path, cache_salt)
        if type(request_id) is not str or request_id in self.reqs or not tokens:
            raise ValueError("request_id: new, and tokens: not empty")
        lora = (lora_name, lora_path or "") if lora_name else None
        chain = self._chain(tokens, lora, cache_salt)
        got = self._hit(chain, len(tokens))
        need = (len(tokens) + self.B - 1) // self.B - len(got)
        if need + sum(b in self.free_q for b in got) > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        for b in got:
            self.free_q.pop(b, None)
            self.refs[b] += 1
        new, gone = self._take(need)
        r = self.reqs[request_id] = {"tokens": list(tokens), "blocks": got + new, "chain": chain,
                                     "cached": len(got), "lora": lora, "salt": cache_salt}
        self._store(r)
        return {"hit_tokens": self.B * len(got), "blocks": list(r["blocks"]), "evicted": gone}

    def append(self, request_id, tokens):
        self._check(tokens)
        if request_id not in self.reqs:
            raise ValueError("request_id: unknown")
        r = self.reqs[request_id]
        need = (len(r["tokens"]) + len(tokens) + self.B - 1) // self.B - len(r["blocks"])
        if need > len(self.free_q):
            raise ValueError("tokens: not enough free blocks")
        new, gone = self._take(need)
        r["tokens"] += tokens
        r["blocks"] += new
        r["chain"] = self._chain(r["tokens"], r["lora"], r["salt"])
        self._store(r)
        return {"blocks": new, "evicted": gone}

    def free(self, request_id):
        if type(request_id) is not str or request_id not in self.reqs:
            raise ValueError("request_id: unknown")
        released = []
        for b in self.reqs.pop(request_id)["blocks"][::-1]:
            self.refs[b] -= 1
            if not self.refs[b]:
                released.append(b)
        front = [b for b in released if self.order == "prepend_unhashed" and b not in self.block_hash]
        for b in released:
            self.free_q[b] = None
        for b in reversed(front):
            self.free_q.move_to_end(b, last=False)

    def free_queue(self):
        return list(self.free_q)

    def num_free(self):
        return len(self.free_q)


OPS = {"cache.block_hash": block_hash, "cache.prefix_blocks": PrefixCache}
VARIANTS = {"cache.block_hash": {"hash_function": ["sha256_cbor", "sha256_pickle"]},
            "cache.prefix_blocks": {"hash_function": ["sha256_cbor", "sha256_pickle"],
                                    "free_order": ["prepend_unhashed", "append_all"]}}

"""vLLM 0.33's own prefix cache as a candidate (the real engine; imports nothing from ref).

  cache.block_hash     vllm.v1.core.kv_cache_utils.hash_block_tokens, after
                       init_none_hash, with vllm.utils.hashing.sha256_cbor or sha256
                       (pickle); the extra keys passed in vLLM's tagged form
  cache.prefix_blocks  vllm.v1.core.kv_cache_manager.KVCacheManager over one full-attention
                       group: lookup = get_computed_blocks; allocate = get_computed_blocks +
                       allocate_slots for the whole prompt (as the scheduler's first step);
                       append = append_output_token_ids + allocate_slots; free = free; the
                       free queue read from block_pool.free_block_queue; the hashes
                       dropped at reuse recorded around BlockPool._maybe_evict_cached_block.
                       Requests are built with vLLM's Request, LoRARequest and
                       get_request_block_hasher, so the extra keys are vLLM's own.

Run (spec/cache.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.vllm_prefix \
      --xfails-file ref/conformance/adapters/vllm_prefix.xfails --ops 'cache.*'
in a virtual environment with vLLM 0.33.0 installed as spec/cache.md ("Engines") says.
PYTHONHASHSEED must be unset (it replaces vLLM's NONE_HASH seed).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from vllm import SamplingParams
from vllm.lora.request import LoRARequest
from vllm.utils.hashing import sha256, sha256_cbor
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request

import vllm

NAME = "vLLM prefix cache"
VERSION = f"vllm {vllm.__version__}"
FUNCTIONS = {"sha256_cbor": sha256_cbor, "sha256_pickle": sha256}

if os.environ.get("PYTHONHASHSEED") is not None:
    raise RuntimeError("vllm_prefix: unset PYTHONHASHSEED (it replaces vLLM's NONE_HASH seed)")


def _function(name):
    if name not in FUNCTIONS:
        raise ValueError(f"hash_function: {name!r}")
    kv_cache_utils.init_none_hash(FUNCTIONS[name])  # NONE_HASH is a module global
    return FUNCTIONS[name]


def block_hash(parent, tokens, lora_name=None, lora_path=None, cache_salt=None, mm_ids=None, mm_offsets=None, *,
               hash_function="sha256_cbor"):
    fn = _function(hash_function)
    parent, tokens = np.asarray(parent), np.asarray(tokens)
    if parent.dtype != np.uint8 or parent.shape not in ((0,), (32,)):
        raise TypeError("parent: 32 bytes or none")
    if tokens.dtype.kind not in "iu" or tokens.ndim != 1 or not tokens.size or (tokens < 0).any():
        raise ValueError("tokens")
    text = lambda a: b"" if a is None else np.asarray(a, np.uint8).tobytes()  # noqa: E731
    name, path, salt = text(lora_name).decode(), text(lora_path).decode(), text(cache_salt).decode()
    if path and not name:
        raise ValueError("lora_path without lora_name")
    ids = [] if mm_ids is None else [bytes(r).decode() for r in np.asarray(mm_ids)]
    offs = [] if mm_offsets is None else [int(o) for o in np.asarray(mm_offsets)]
    if len(ids) != len(offs):
        raise ValueError("mm_offsets")
    keys = ([("lora", name, path)] if name else []) + [("mm", i, o) for i, o in zip(ids, offs)]
    if salt and not parent.size:
        keys.append(("cache_salt", salt))
    h = kv_cache_utils.hash_block_tokens(fn, parent.tobytes() or None, [int(t) for t in tokens],
                                         tuple(keys) or None)
    return np.frombuffer(h, np.uint8).copy()


class VllmPrefixCache:
    def __init__(self, num_blocks=8, block_size=4, hash_function="sha256_cbor", free_order="prepend_unhashed"):
        if free_order != "prepend_unhashed":
            raise NotImplementedError("vLLM 0.33 prepends unhashed blocks")
        if type(num_blocks) is not int or type(block_size) is not int or num_blocks < 2 or block_size < 1:
            raise ValueError("num_blocks, block_size")
        self.hash_function, self.block_size = hash_function, block_size
        self.fn = _function(hash_function)
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
        config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                               kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
        self.manager = KVCacheManager(config, max_model_len=1 << 20, scheduler_block_size=block_size,
                                      hash_block_size=block_size, enable_caching=True)
        self.hasher = kv_cache_utils.get_request_block_hasher(block_size, self.fn)
        self.requests: dict[str, Request] = {}
        self.evicted: list[str] = []
        pool = self.manager.block_pool
        original = pool._maybe_evict_cached_block

        def evict(block):
            before = block.block_hash
            done = original(block)
            if done and before is not None:
                self.evicted.append(kv_cache_utils.get_block_hash(before).hex())
            return done

        pool._maybe_evict_cached_block = evict

    def _request(self, request_id, tokens, lora_name, lora_path, cache_salt):
        if type(tokens) is not list or any(type(t) is not int or t < 0 for t in tokens):
            raise ValueError("tokens")
        if (lora_path and not lora_name) or any(v is not None and type(v) is not str
                                               for v in (lora_name, lora_path, cache_salt)):
            raise ValueError("lora_name, lora_path, cache_salt")
        _function(self.hash_function)  # NONE_HASH is global: another instance may have set another
        lora = LoRARequest(lora_name, 1, lora_path or "") if lora_name else None
        return Request(request_id, list(tokens), SamplingParams(max_tokens=1 << 20), None, lora_request=lora,
                       cache_salt=cache_salt or None, block_hasher=self.hasher)

    def lookup(self, tokens, lora_name=None, lora_path=None, cache_salt=None):
        req = self._request("lookup", tokens, lora_name, lora_path, cache_salt)
        blocks, hit = self.manager.get_computed_blocks(req)[:2]
        return {"hit_tokens": hit, "blocks": list(blocks.get_block_ids()[0])}

    def allocate(self, request_id, tokens, lora_name=None, lora_path=None, cache_salt=None):
        if type(request_id) is not str or request_id in self.requests or not tokens:
            raise ValueError("request_id, tokens")
        req = self._request(request_id, tokens, lora_name, lora_path, cache_salt)
        computed, hit = self.manager.get_computed_blocks(req)[:2]
        self.evicted = []
        if self.manager.allocate_slots(req, len(tokens) - hit, hit, computed) is None:
            raise ValueError("tokens: not enough free blocks")
        req.num_computed_tokens = len(tokens)
        self.requests[request_id] = req
        return {"hit_tokens": hit, "blocks": list(self.manager.get_block_ids(request_id)[0]),
                "evicted": self.evicted}

    def append(self, request_id, tokens):
        if request_id not in self.requests or type(tokens) is not list:
            raise ValueError("request_id")
        req = self.requests[request_id]
        before = list(self.manager.get_block_ids(request_id)[0])
        need = -(-(req.num_tokens + len(tokens)) // self.block_size) - len(before)
        if need > self.manager.block_pool.get_num_free_blocks():
            raise ValueError("tokens: not enough free blocks")  # checked before the tokens join the request
        _function(self.hash_function)
        req.append_output_token_ids(list(tokens))
        self.evicted = []
        if self.manager.allocate_slots(req, len(tokens)) is None:
            raise RuntimeError("allocate_slots refused after the check")
        req.num_computed_tokens += len(tokens)
        return {"blocks": list(self.manager.get_block_ids(request_id)[0])[len(before):], "evicted": self.evicted}

    def free(self, request_id):
        if request_id not in self.requests:
            raise ValueError("request_id")
        self.manager.free(self.requests.pop(request_id))

    def free_queue(self):
        return [b.block_id for b in self.manager.block_pool.free_block_queue.get_all_free_blocks()]

    def num_free(self):
        return self.manager.block_pool.get_num_free_blocks()


OPS = {"cache.block_hash": block_hash, "cache.prefix_blocks": VllmPrefixCache}
VARIANTS = {"cache.block_hash": {"hash_function": ["sha256_cbor", "sha256_pickle"]},
            "cache.prefix_blocks": {"hash_function": ["sha256_cbor", "sha256_pickle"],
                                    "free_order": ["prepend_unhashed"]}}

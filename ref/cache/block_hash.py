"""Block hashes as vLLM v1's prefix cache chains them (vllm/v1/core/kv_cache_utils.py,
`hash_block_tokens`, `generate_block_hash_extra_keys`, `init_none_hash`).

A full block of B tokens is identified by

    hash_i = H((hash_{i-1}, tuple(tokens_i), extra_keys_i))      hash_{-1} = NONE_HASH = H(seed)

so equal tokens under different prefixes hash differently (the chain), and the
block's extra keys (a LoRA adapter, multimodal items, the cache salt) enter the
hash too. H serialises the triple and takes SHA-256 of the bytes:

    sha256_cbor     canonical CBOR (RFC 8949): language-neutral, reproducible from this
                    spec alone (the default here; vLLM's `--prefix-caching-hash-algo
                    sha256_cbor`)
    sha256_pickle   Python's pickle, protocol 5: vLLM's default ("sha256"); Python-specific

The triple is a 3-element array: the parent hash (bytes), the tokens (an array of
integers) and the extra keys (null, or an array of arrays), where each extra key is
    ("lora", name, path)            the request's LoRA adapter, on every block
    ("mm", identifier, offset)      a multimodal item overlapping the block; offset is
                                    the item's start minus the block's first position
                                    (negative when it began in an earlier block)
    ("cache_salt", salt)            the request's salt, on the first block only
in that order (LoRA, then the items by position, then the salt); no key at all is
null, not an empty array. NONE_HASH is H(seed), seed the text "vllm-none-hash"
(vLLM's fixed seed for SHA-256 when PYTHONHASHSEED is unset; a set PYTHONHASHSEED
replaces it, so two vLLM processes share hashes only under the same setting).
"""

from __future__ import annotations

import enum
import hashlib
import pickle
import struct
from collections.abc import Sequence

import numpy as np

from ref.arguments import member

__all__ = ["DEFAULT_SEED", "HashFunction", "block_hash", "cbor", "extra_keys", "hash_triple", "none_hash",
           "request_block_hashes"]

DEFAULT_SEED = "vllm-none-hash"
PICKLE_PROTOCOL = 5  # pickle.HIGHEST_PROTOCOL on Python 3.8 to 3.13, which vLLM passes


class HashFunction(enum.Enum):
    """How the (parent, tokens, extra keys) triple becomes bytes before SHA-256."""

    SHA256_CBOR = "sha256_cbor"
    SHA256_PICKLE = "sha256_pickle"


def _head(major: int, n: int) -> bytes:
    """A CBOR item head: major type and argument in the shortest form (RFC 8949 4.2.1)."""
    if n < 24:
        return bytes([major << 5 | n])
    for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | extra]) + struct.pack(fmt, n)
    raise ValueError(f"cbor: integer {n} needs more than 64 bits")


def cbor(value) -> bytes:
    """Canonical CBOR of None, ints, bytes, str and tuples/lists of them (the only
    types a block hash's triple holds)."""
    if value is None:
        return b"\xf6"
    if isinstance(value, bool):
        raise TypeError("cbor: a block hash holds no booleans")
    if isinstance(value, int):
        return _head(0, value) if value >= 0 else _head(1, -1 - value)
    if isinstance(value, bytes):
        return _head(2, len(value)) + value
    if isinstance(value, str):
        data = value.encode("utf-8")
        return _head(3, len(data)) + data
    if isinstance(value, (tuple, list)):
        return _head(4, len(value)) + b"".join(cbor(v) for v in value)
    raise TypeError(f"cbor: {type(value).__name__} is not one of None, int, bytes, str, tuple")


def hash_triple(value, hash_function: str = "sha256_cbor") -> bytes:
    """SHA-256 of `value` serialised as `hash_function` says."""
    fn = member(hash_function, HashFunction, "hash_function")
    data = cbor(value) if fn is HashFunction.SHA256_CBOR else pickle.dumps(value, protocol=PICKLE_PROTOCOL)
    return hashlib.sha256(data).digest()


def none_hash(hash_function: str = "sha256_cbor", seed: str = DEFAULT_SEED) -> bytes:
    """The parent hash of a request's first block: H(seed)."""
    if not isinstance(seed, str):
        raise TypeError(f"seed: expected a str, got {type(seed).__name__}")
    return hash_triple(seed, hash_function)


def extra_keys(*, first: bool, lora: tuple[str, str] | None = None, mm: Sequence[tuple[str, int]] = (),
               cache_salt: str | None = None) -> tuple | None:
    """A block's extra keys: LoRA (name, path), the multimodal (identifier, offset)
    items in the block, the cache salt when `first`; None when there are none."""
    keys: list[tuple] = []
    if lora is not None:
        keys.append(("lora", str(lora[0]), str(lora[1])))
    keys += [("mm", str(ident), int(offset)) for ident, offset in mm]
    if first and cache_salt:
        keys.append(("cache_salt", str(cache_salt)))
    return tuple(keys) or None


def _text(a, name: str) -> str:
    a = np.asarray(a)
    if a.dtype != np.uint8 or a.ndim != 1:
        raise TypeError(f"{name}: expected a 1-d uint8 array (UTF-8 bytes), got {a.dtype} of shape {a.shape}")
    try:
        return a.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: not UTF-8 ({exc.reason})") from None


def _ints(a, name: str, ndim: int = 1) -> list[int]:
    a = np.asarray(a)
    if a.dtype.kind not in "iu" or a.ndim != ndim:
        raise TypeError(f"{name}: expected a {ndim}-d integer array, got {a.dtype} of shape {a.shape}")
    return [int(v) for v in a.reshape(-1)]


_EMPTY = np.zeros(0, np.uint8)


def block_hash(parent, tokens, lora_name=_EMPTY, lora_path=_EMPTY, cache_salt=_EMPTY,
               mm_ids=np.zeros((0, 0), np.uint8), mm_offsets=np.zeros(0, np.int64), *,
               hash_function: str = "sha256_cbor") -> np.ndarray:
    """The hash of one full block, as vLLM's hash_block_tokens computes it.

    parent: uint8 [32], the previous block's hash, or [0]: the first block (NONE_HASH
    is its parent, and the cache salt enters its extra keys); tokens: int [B];
    lora_name, lora_path, cache_salt: UTF-8 bytes, uint8 [n] (empty: none; a LoRA
    key when lora_name is not empty); mm_ids: uint8 [k, L] (k identifiers of L
    UTF-8 bytes), mm_offsets: int [k] (each item's start minus the block's first
    position). Returns uint8 [32].
    """
    parent = np.asarray(parent)
    if parent.dtype != np.uint8 or parent.shape not in ((0,), (32,)):
        raise TypeError(f"parent: expected uint8 of shape (32,) or (0,), got {parent.dtype} of shape {parent.shape}")
    toks = _ints(tokens, "tokens")
    if not toks:
        raise ValueError("tokens: a block holds at least one token")
    if min(toks) < 0:
        raise ValueError(f"tokens: token ids are >= 0, got {min(toks)}")
    ids = np.asarray(mm_ids)
    if ids.dtype != np.uint8 or ids.ndim != 2:
        raise TypeError(f"mm_ids: expected a 2-d uint8 array, got {ids.dtype} of shape {ids.shape}")
    offsets = _ints(mm_offsets, "mm_offsets")
    if len(offsets) != ids.shape[0]:
        raise ValueError(f"mm_offsets: {len(offsets)} offsets for {ids.shape[0]} mm_ids")
    name = _text(lora_name, "lora_name")
    path = _text(lora_path, "lora_path")
    if path and not name:
        raise ValueError("lora_path: given without a lora_name")
    first = parent.size == 0
    mm = [(_text(row, "mm_ids"), off) for row, off in zip(ids, offsets)]
    keys = extra_keys(first=first, lora=(name, path) if name else None, mm=mm,
                      cache_salt=_text(cache_salt, "cache_salt") or None)
    prev = none_hash(hash_function) if first else parent.tobytes()
    digest = hash_triple((prev, tuple(toks), keys), hash_function)
    return np.frombuffer(digest, np.uint8).copy()


def request_block_hashes(tokens: Sequence[int], block_size: int, *, lora: tuple[str, str] | None = None,
                         cache_salt: str | None = None, hash_function: str = "sha256_cbor",
                         seed: str = DEFAULT_SEED, known: Sequence[bytes] = ()) -> list[bytes]:
    """The chain of a request's full blocks (a trailing partial block has no hash).
    `known`: the chain's first hashes, already computed for these tokens (a decode step
    hashes only the blocks it fills, as vLLM's request block hasher does)."""
    out: list[bytes] = list(known)
    prev = out[-1] if out else none_hash(hash_function, seed)
    for start in range(len(out) * block_size, len(tokens) - block_size + 1, block_size):
        keys = extra_keys(first=start == 0, lora=lora, cache_salt=cache_salt)
        prev = hash_triple((prev, tuple(int(t) for t in tokens[start:start + block_size]), keys), hash_function)
        out.append(prev)
    return out

"""Paged KV storage for the default run, written the way a kernel and a scheduler
write it and independently of the oracles (this module imports nothing from ref):

- slot mapping: one token at a time (a GPU thread per token), Python ints, so no
  width wraps; the slot checked against int64 at the end;
- reshape_and_cache: one token at a time, each layout's index order from a table
  (where a token's (block, offset, head) lands in the cache array), bits copied by
  viewing every float array as unsigned integers;
- FlashInfer's page table: a running count per sequence;
- the block manager: reference counts in a NumPy array, free blocks on a stack (the
  most recently freed reused first: the reference uses a queue, and ids are compared
  up to renaming), copy-on-write as a scheduler does it.

The steps are public so the bug corpus (tests/corpus/cache_paged.py) builds its wrong
kernels from the same code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy paged KV storage"
VERSION = np.__version__

INT64_MAX = (1 << 63) - 1


def _ints(x, name):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got {a.dtype}")
    return a


def slot_of(row, pos: int, block_size: int) -> int:
    """The slot of token `pos` of the sequence whose block table is `row`."""
    column = pos // block_size
    if pos < 0 or column >= len(row):
        raise ValueError(f"position {pos} outside the block table")
    block = int(row[column])
    if block < 0:
        raise ValueError(f"position {pos} is in an unallocated block")
    return block * block_size + pos % block_size


def slot_mapping(block_tables, seq_ids, positions, *, block_size, slot=slot_of):
    tables, seqs, pos = _ints(block_tables, "block_tables"), _ints(seq_ids, "seq_ids"), _ints(positions, "positions")
    if isinstance(block_size, bool) or int(block_size) != block_size or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size}")
    if tables.ndim != 2 or seqs.ndim != 1 or seqs.shape != pos.shape:
        raise ValueError("expected block_tables [S, M], seq_ids [T] and positions [T]")
    out = []
    for s, p in zip(seqs.tolist(), pos.tolist()):
        if s == -1:
            out.append(-1)
        elif 0 <= s < tables.shape[0]:
            out.append(slot(tables[s], p, int(block_size)))
        else:
            raise ValueError(f"sequence id {s} is neither -1 nor a table row")
    if any(v > INT64_MAX for v in out):
        raise ValueError("a slot past int64")
    return np.array(out, dtype=np.int64)


# layout -> (where K sits in the array given, where V sits, the order of (block, offset, head) in it)
LAYOUTS = {
    "vllm": (("key_cache", ()), ("value_cache", ()), "bth"),
    "vllm_stacked": (("kv_cache", (0,)), ("kv_cache", (1,)), "bth"),
    "flashinfer_nhd": (("kv_cache", (slice(None), 0)), ("kv_cache", (slice(None), 1)), "bth"),
    "flashinfer_hnd": (("kv_cache", (slice(None), 0)), ("kv_cache", (slice(None), 1)), "bht"),
}


def _bits(a):
    a = np.asarray(a)
    if a.dtype not in (np.float16, np.float32, np.uint16):
        raise TypeError(f"cache and K/V arrays are float16, float32 or uint16 bits, got {a.dtype}")
    return a.view(f"u{a.dtype.itemsize}")


def write_token(cache, block: int, offset: int, rows, order: str) -> None:
    """Write one token's [Hkv, D] rows at (block, offset) of a cache in `order`."""
    for h in range(rows.shape[0]):
        where = {"b": block, "t": offset, "h": h}
        cache[tuple(where[c] for c in order)] = rows[h]


def token_place(slot: int, block_size: int, num_slots: int):
    """(block, offset) of a slot, or None for the skip mark -1."""
    if slot == -1:
        return None
    if not 0 <= slot < num_slots:
        raise ValueError(f"slot {slot} outside the cache")
    return divmod(slot, block_size)


def reshape_and_cache(key, value, slots, key_cache=None, value_cache=None, kv_cache=None, *, layout="vllm",
                      place=token_place, layouts=LAYOUTS):
    if layout not in layouts:
        raise ValueError(f"unknown layout {layout!r}")
    given = {"key_cache": key_cache, "value_cache": value_cache, "kv_cache": kv_cache}
    (k_name, k_at), (v_name, v_at), order = layouts[layout]
    if {n for n, a in given.items() if a is not None} != {k_name, v_name}:
        raise ValueError(f"layout {layout} takes {sorted({k_name, v_name})}")
    arrays = {n: _bits(given[n]).copy() for n in {k_name, v_name}}
    dtypes = {np.asarray(given[n]).dtype for n in arrays} | {np.asarray(key).dtype, np.asarray(value).dtype}
    if len(dtypes) != 1:
        raise TypeError(f"K, V and the caches must share one dtype, got {sorted(map(str, dtypes))}")
    k_cache, v_cache = arrays[k_name][k_at], arrays[v_name][v_at]
    if k_cache.ndim != 4 or v_cache.ndim != 4:
        raise ValueError("each cache is [blocks, B, Hkv, D] or [blocks, Hkv, B, D]")
    k, v, slots = _bits(key), _bits(value), _ints(slots, "slots")
    block_size = k_cache.shape[order.index("t")]
    heads = k_cache.shape[order.index("h")]
    if (k.ndim != 3 or v.ndim != 3 or k.shape[1:] != (heads, k_cache.shape[3]) or v.shape[0] != k.shape[0]
            or v.shape[1:] != (heads, v_cache.shape[3]) or slots.shape != (k.shape[0],)
            or v_cache.shape[:3] != k_cache.shape[:3]):
        raise ValueError("key [T, Hkv, D], value [T, Hkv, Dv] and slots [T] must fit the caches")
    seen = set()
    num_slots = k_cache.shape[0] * block_size
    for t, s in enumerate(slots.tolist()):
        where = place(s, block_size, num_slots)
        if where is None:
            continue
        if s in seen:
            raise ValueError(f"slot {s} written twice")
        seen.add(s)
        write_token(k_cache, *where, k[t], order)
        write_token(v_cache, *where, v[t], order)
    dtype = np.asarray(key).dtype
    return arrays[k_name][k_at].view(dtype), arrays[v_name][v_at].view(dtype)


def last_page_len(length: int, pages: int, block_size: int) -> int:
    """Tokens in a sequence's last page."""
    return length - (pages - 1) * block_size if pages else 0


def paged_kv_indices(block_tables, seq_lens, *, block_size, last=last_page_len):
    tables, lens = _ints(block_tables, "block_tables"), _ints(seq_lens, "seq_lens")
    if tables.ndim != 2 or lens.shape != (tables.shape[0],):
        raise ValueError("expected block_tables [S, M] and seq_lens [S]")
    if isinstance(block_size, bool) or int(block_size) != block_size or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size}")
    indptr, indices, lasts = [0], [], []
    for row, n in zip(tables.tolist(), lens.tolist()):
        if n < 0:
            raise ValueError(f"negative sequence length {n}")
        pages = (n + block_size - 1) // block_size
        if pages > len(row) or any(b < 0 for b in row[:pages]):
            raise ValueError(f"a sequence of {n} tokens has no block for every page")
        indices += row[:pages]
        indptr.append(indptr[-1] + pages)
        lasts.append(last(n, pages, block_size))
    return (np.array(indptr, np.int64), np.array(indices, np.int64), np.array(lasts, np.int64))


class BlockManager:
    """A scheduler's block manager: refcounts in an array, a free stack."""

    def __init__(self, num_blocks, block_size=16, null_block=False):
        for name, v in (("num_blocks", num_blocks), ("block_size", block_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(null_block, bool) or (null_block and num_blocks < 2):
            raise ValueError("null_block is a bool, and needs a second block")
        self.block_size, self.null_block = block_size, null_block
        self.refs = np.zeros(num_blocks, np.int64)
        self.stack = list(range(num_blocks - 1, 0 if null_block else -1, -1))  # pop() hands out the lowest first
        self.tables, self.lengths = {}, {}

    def _check(self, seq, exists):
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValueError(f"a sequence id is an int >= 0, got {seq!r}")
        if (seq in self.tables) != exists:
            raise ValueError(f"sequence {seq} {'does not exist' if exists else 'exists'}")

    def _count(self, tokens):
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens is an int >= 0, got {tokens!r}")
        return tokens

    def take(self, n):
        if n > len(self.stack):
            raise ValueError(f"{n} blocks needed, {len(self.stack)} free")
        out = [self.stack.pop() for _ in range(n)]
        self.refs[out] = 1
        return out

    def drop(self, block):
        """One reference fewer; True when the block is free again."""
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.stack.append(block)
            return True
        return False

    def add_sequence(self, seq, tokens):
        self._check(seq, False)
        n = self._count(tokens)
        self.tables[seq], self.lengths[seq] = self.take(-(-n // self.block_size)), n
        return list(self.tables[seq])

    def copy_on_write(self, table):
        """Give the sequence its own copy of its shared last block: [[src, dst]]."""
        src = table[-1]
        (dst,) = self.take(1)
        self.drop(src)
        table[-1] = dst
        return [[src, dst]]

    def append(self, seq, tokens):
        self._check(seq, True)
        n = self._count(tokens)
        table, length = self.tables[seq], self.lengths[seq]
        needed = -(-(length + n) // self.block_size) - len(table)
        shared = n > 0 and length % self.block_size != 0 and self.refs[table[-1]] > 1
        if needed + shared > len(self.stack):
            raise ValueError(f"{needed + shared} blocks needed, {len(self.stack)} free")
        copies = self.copy_on_write(table) if shared else []
        new = self.take(needed)
        table.extend(new)
        self.lengths[seq] = length + n
        return {"new": new, "copies": copies}

    def fork(self, parent, child):
        self._check(parent, True)
        self._check(child, False)
        self.tables[child], self.lengths[child] = list(self.tables[parent]), self.lengths[parent]
        self.refs[self.tables[child]] += 1
        return list(self.tables[child])

    def free(self, seq):
        self._check(seq, True)
        del self.lengths[seq]
        return [b for b in self.tables.pop(seq) if self.drop(b)]

    def table(self, seq):
        self._check(seq, True)
        return list(self.tables[seq])

    def null(self):
        return 0 if self.null_block else None

    def num_free(self):
        return len(self.stack)


OPS = {
    "cache.slot_mapping": slot_mapping,
    "cache.reshape_and_cache": reshape_and_cache,
    "cache.paged_kv_indices": paged_kv_indices,
    "cache.block_manager": BlockManager,
}
VARIANTS = {
    "cache.reshape_and_cache": {"layout": list(LAYOUTS)},
    "cache.block_manager": {"null_block": [False, True]},
}

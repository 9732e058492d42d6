"""The paged KV storage bug corpus: wrong kernels and block managers written the way
engines have gone wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_paged).

PAGED_BUGS: name -> (op, flag, kernel or factory). `bug(name)` is the Implementation
of that one op.
"""

from __future__ import annotations

import numpy as np

from ref.conformance.adapters import numpy_paged as P
from ref.conformance.implementation import Implementation

# ------------------------------------------------------------------ slot mapping


def _slot_off_by_one(row, pos, block_size):
    """Decode's newest token taken as position seq_len rather than seq_len - 1."""
    return P.slot_of(row, pos, block_size) + 1


def _slot_int32(row, pos, block_size):
    """The table's int32 block id times B in int32 (as a CUDA kernel with int slots)."""
    P.slot_of(row, pos, block_size)  # the checks
    with np.errstate(over="ignore"):
        return int(np.int32(row[pos // block_size]) * np.int32(block_size) + np.int32(pos % block_size))


def _slots(slot):
    def kernel(block_tables, seq_ids, positions, *, block_size):
        return P.slot_mapping(block_tables, seq_ids, positions, block_size=block_size, slot=slot)
    return kernel


def _slot_negative_wraps(row, pos, block_size):
    """adv12 #1: no check that pos >= 0: pos // B = -1 reads the table's last column (Python's index -1)."""
    column = pos // block_size
    if column >= len(row) or row[column] < 0:
        raise ValueError(f"position {pos} outside the table or in an unallocated block")
    return int(row[column]) * block_size + pos % block_size


def _bools_as_ints(block_tables, seq_ids, positions, *, block_size):
    """adv12 #2: bool arrays taken as integers (True as block, sequence or position 1)."""
    ints = [np.asarray(x).astype(np.int64) if np.asarray(x).dtype == bool else x
            for x in (block_tables, seq_ids, positions)]
    return P.slot_mapping(*ints, block_size=block_size)


def _padding_mapped(block_tables, seq_ids, positions, *, block_size):
    """seq id -1 read as Python's last table row: padding gets a real slot."""
    seqs = np.asarray(seq_ids)
    good = P.slot_mapping(block_tables, seqs, positions, block_size=block_size)
    tables = np.asarray(block_tables)
    for t in np.flatnonzero(seqs == -1):
        p = int(np.asarray(positions)[t])
        if 0 <= p < tables.shape[1] * block_size and tables[-1, p // block_size] >= 0:
            good[t] = P.slot_of(tables[-1], p, block_size)
    return good


# ------------------------------------------------------------------ reshape_and_cache

def _padding_written(slot, block_size, num_slots):
    """Slot -1 used as an index: Python writes the padding token into the cache's last slot."""
    return divmod(slot % num_slots, block_size)


def _cache(swap=None, place=P.token_place):
    """`swap`: layout -> the layout whose index order the kernel uses for it."""
    layouts = {name: (*row[:2], P.LAYOUTS[(swap or {}).get(name, name)][2]) for name, row in P.LAYOUTS.items()}

    def kernel(key, value, slots, key_cache=None, value_cache=None, kv_cache=None, *, layout="vllm"):
        return P.reshape_and_cache(key, value, slots, key_cache, value_cache, kv_cache, layout=layout, place=place,
                                   layouts=layouts)
    return kernel


def _value_blocks_unchecked(key, value, slots, key_cache=None, value_cache=None, kv_cache=None, *, layout="vllm"):
    """adv12 #3: the value cache checked only against V, not against the key cache's blocks: V written by the key
    cache's geometry into a value cache with more blocks."""
    if layout == "vllm" and value_cache is not None and key_cache is not None:
        extra = np.asarray(value_cache)[np.asarray(key_cache).shape[0]:]
        k_out, v_out = P.reshape_and_cache(key, value, slots, key_cache, np.asarray(value_cache)[:len(key_cache)],
                                           layout=layout)
        return k_out, np.concatenate([v_out, extra])
    return P.reshape_and_cache(key, value, slots, key_cache, value_cache, kv_cache, layout=layout)


# ------------------------------------------------------------------ paged_kv_indices

def _last_mod(length, pages, block_size):
    return length % block_size


def _indices(last):
    def kernel(block_tables, seq_lens, *, block_size):
        return P.paged_kv_indices(block_tables, seq_lens, block_size=block_size, last=last)
    return kernel


# ------------------------------------------------------------------ the block manager

class CowLeak(P.BlockManager):
    """Copy-on-write copies the block but keeps the sequence's reference to the source."""

    def copy_on_write(self, table):
        (dst,) = self.take(1)
        src, table[-1] = table[-1], dst
        return [[src, dst]]


class NoCow(P.BlockManager):
    """Appends into the shared last block: no copy, the fork's cache overwritten."""

    def copy_on_write(self, table):
        return []


class FreeKeepsReferences(P.BlockManager):
    """free forgets the table but only frees blocks no fork shares, never dropping their count."""

    def free(self, seq):
        self._check(seq, True)
        del self.lengths[seq]
        table = self.tables.pop(seq)
        return [b for b in table if self.refs[b] == 1 and self.drop(b)]


class NullHandedOut(P.BlockManager):
    """The null block reported but left on the free stack."""

    def __init__(self, num_blocks, block_size=16, null_block=False):
        super().__init__(num_blocks, block_size, False)
        self.null_block = null_block


class ForkCreatesParent(P.BlockManager):
    """adv12 #13: a fork from an unknown parent creates it, empty, instead of refusing."""

    def fork(self, parent, child):
        if parent not in self.tables:
            self.tables[parent], self.lengths[parent] = [], 0
        return super().fork(parent, child)


class ForkOntoItself(P.BlockManager):
    """adv12 #14: fork(s, s) not refused: every block of s gains a reference no sequence holds."""

    def fork(self, parent, child):
        if child != parent:
            return super().fork(parent, child)
        self._check(parent, True)
        self.refs[self.tables[parent]] += 1
        return list(self.tables[parent])


class CowOnEmptyAppend(P.BlockManager):
    """adv12 (search only): an append of 0 tokens copies a shared partial last block all the same."""

    def append(self, seq, tokens):
        self._check(seq, True)
        table, length = self.tables[seq], self.lengths[seq]
        if tokens == 0 and length % self.block_size and self.refs[table[-1]] > 1:
            return {"new": [], "copies": self.copy_on_write(table)}
        return super().append(seq, tokens)


class CowOnlyForChild(P.BlockManager):
    """adv12 (search only): copy-on-write only for a fork's child; the parent appends into the shared block."""

    children: frozenset = frozenset()

    def fork(self, parent, child):
        self.children = self.children | {child}
        return super().fork(parent, child)

    def copy_on_write(self, table):
        return super().copy_on_write(table) if any(t is table for s, t in self.tables.items()
                                                   if s in self.children) else []


class NullForEmpty(P.BlockManager):
    """adv12 (search only): a sequence of 0 tokens reported as holding the null block."""

    def add_sequence(self, seq, tokens):
        out = super().add_sequence(seq, tokens)
        return [0] if tokens == 0 and self.null_block else out


# ------------------------------------------------------------------ refusals that change state
# Each refuses what the oracle refuses, but only after it changed something: the golden trace goes on past the
# refusal, and a later step shows it.

class ForkCountsBeforeChildCheck(P.BlockManager):
    """The parent's blocks counted for the child before the child is checked: a refused fork onto an existing
    sequence (or onto itself) leaves every block of the parent one reference too many, never freed."""

    def fork(self, parent, child):
        self._check(parent, True)
        blocks = list(self.tables[parent])
        self.refs[blocks] += 1
        self._check(child, False)
        self.tables[child], self.lengths[child] = blocks, self.lengths[parent]
        return list(blocks)


class ForkWritesChildFirst(P.BlockManager):
    """The child's table written before the lengths say it exists: a refused fork onto an existing sequence
    replaces that sequence's table with the parent's (its own blocks leak, the parent's lose a holder)."""

    def fork(self, parent, child):
        self._check(parent, True)
        self.tables[child] = list(self.tables[parent])
        if child in self.lengths:
            raise ValueError(f"sequence {child} exists")
        self.lengths[child] = self.lengths[parent]
        self.refs[self.tables[child]] += 1
        return list(self.tables[child])


class ForkRegistersChild(P.BlockManager):
    """The child's table fetched with setdefault (a defaultdict) before the parent is looked up: a fork from
    an unknown parent fails with KeyError, the child left behind with an empty table."""

    def fork(self, parent, child):
        self._check(child, False)
        table = self.tables.setdefault(child, [])
        table += self.tables[parent]  # KeyError: refused, the child registered all the same
        self.lengths[child] = self.lengths[parent]
        self.refs[table] += 1
        return list(table)


class AddRegistersFirst(P.BlockManager):
    """The sequence registered (empty table, its length) before its blocks are taken: an add refused for
    capacity leaves a sequence holding nothing."""

    def add_sequence(self, seq, tokens):
        self._check(seq, False)
        n = self._count(tokens)
        self.tables[seq], self.lengths[seq] = [], n
        self.tables[seq] = self.take(-(-n // self.block_size))
        return list(self.tables[seq])


class AddTakesOneByOne(P.BlockManager):
    """Blocks taken one at a time until the stack runs dry: an add refused for capacity keeps those it took."""

    def add_sequence(self, seq, tokens):
        self._check(seq, False)
        n = self._count(tokens)
        blocks = []
        for _ in range(-(-n // self.block_size)):
            if not self.stack:
                raise ValueError("out of blocks")
            blocks += self.take(1)
        self.tables[seq], self.lengths[seq] = blocks, n
        return list(blocks)


class AddTakesBeforeNameCheck(P.BlockManager):
    """The blocks taken before the sequence id is checked: adding an existing sequence is refused, but the
    blocks it took for it are never returned."""

    def add_sequence(self, seq, tokens):
        n = self._count(tokens)
        blocks = self.take(-(-n // self.block_size))
        self._check(seq, False)
        self.tables[seq], self.lengths[seq] = blocks, n
        return list(blocks)


class AddRegistersBeforeCount(P.BlockManager):
    """The sequence's table created (a defaultdict's lookup) before the count is checked: an add with a negative
    count is refused, and the sequence exists, empty."""

    def add_sequence(self, seq, tokens):
        self._check(seq, False)
        table = self.tables.setdefault(seq, [])
        n = self._count(tokens)
        table += self.take(-(-n // self.block_size))
        self.lengths[seq] = n
        return list(table)


class AppendLengthFirst(P.BlockManager):
    """The new length recorded before the capacity check: a refused append leaves the sequence longer than its
    blocks, so a later append that fits is refused (or takes too many blocks)."""

    def append(self, seq, tokens):
        self._check(seq, True)
        n = self._count(tokens)
        table, length = self.tables[seq], self.lengths[seq]
        self.lengths[seq] = length + n
        needed = -(-(length + n) // self.block_size) - len(table)
        shared = n > 0 and length % self.block_size != 0 and self.refs[table[-1]] > 1
        if needed + shared > len(self.stack):
            raise ValueError(f"{needed + shared} blocks needed, {len(self.stack)} free")
        copies = self.copy_on_write(table) if shared else []
        new = self.take(needed)
        table.extend(new)
        return {"new": new, "copies": copies}


class AppendCopiesBeforeCapacity(P.BlockManager):
    """The copy-on-write done before the fresh blocks are counted: an append needing a copy and a new block,
    with one block free, takes the copy and is refused; the table no longer shares its last block."""

    def append(self, seq, tokens):
        self._check(seq, True)
        n = self._count(tokens)
        table, length = self.tables[seq], self.lengths[seq]
        shared = n > 0 and length % self.block_size != 0 and self.refs[table[-1]] > 1
        copies = self.copy_on_write(table) if shared else []
        new = self.take(-(-(length + n) // self.block_size) - len(table))
        table.extend(new)
        self.lengths[seq] = length + n
        return {"new": new, "copies": copies}


class AppendGrowsUntilRefused(P.BlockManager):
    """The table grown a block at a time until the tokens fit, refusing when the stack runs dry: a refused
    append keeps the blocks it took."""

    def append(self, seq, tokens):
        self._check(seq, True)
        n = self._count(tokens)
        table, length = self.tables[seq], self.lengths[seq]
        shared = n > 0 and length % self.block_size != 0 and self.refs[table[-1]] > 1
        if shared + (len(table) * self.block_size < length + n) > len(self.stack):
            raise ValueError("out of blocks")
        copies = self.copy_on_write(table) if shared else []
        new = []
        while len(table) * self.block_size < length + n:
            new += self.take(1)
            table.append(new[-1])
        self.lengths[seq] = length + n
        return {"new": new, "copies": copies}


class AppendRegistersUnknown(P.BlockManager):
    """The table fetched with setdefault (a defaultdict) before the length: appending to an unknown sequence
    fails with KeyError, and the sequence exists afterwards, empty."""

    def append(self, seq, tokens):
        n = self._count(tokens)
        self.tables.setdefault(seq, [])
        self.lengths[seq]  # noqa: B018  KeyError for an unknown sequence: refused, but registered
        return super().append(seq, n)


class AppendCopiesBeforeCountCheck(P.BlockManager):
    """The count checked only after the copy-on-write, which is decided on `tokens != 0`: an append of a
    negative count to a shared partial last block copies it, then is refused."""

    def append(self, seq, tokens):
        self._check(seq, True)
        table, length = self.tables[seq], self.lengths[seq]
        shared = tokens != 0 and length % self.block_size != 0 and self.refs[table[-1]] > 1
        needed = max(-(-(length + tokens) // self.block_size) - len(table), 0)
        if needed + shared > len(self.stack):
            raise ValueError(f"{needed + shared} blocks needed, {len(self.stack)} free")
        copies = self.copy_on_write(table) if shared else []
        n = self._count(tokens)
        new = self.take(needed)
        table.extend(new)
        self.lengths[seq] = length + n
        return {"new": new, "copies": copies}


class TableRegistersUnknown(P.BlockManager):
    """table() reads a defaultdict: asking for an unknown sequence's table registers it (empty) before the
    refusal, so adding that sequence later is refused."""

    def table(self, seq):
        if seq not in self.lengths:
            self.tables.setdefault(seq, [])
            raise ValueError(f"sequence {seq} does not exist")
        return super().table(seq)


PAGED_BUGS = {
    "slot off by one": ("cache.slot_mapping", "SlotOffset", _slots(_slot_off_by_one)),
    "slots in int32": ("cache.slot_mapping", "Int32Slots", _slots(_slot_int32)),
    "padding token mapped": ("cache.slot_mapping", "Padding", _padding_mapped),
    "padding token written": ("cache.reshape_and_cache", "Padding", _cache(place=_padding_written)),
    "layout HND read as NHD": ("cache.reshape_and_cache", "PageLayout", _cache({"flashinfer_hnd": "flashinfer_nhd"})),
    "layout NHD read as HND": ("cache.reshape_and_cache", "PageLayout", _cache({"flashinfer_nhd": "flashinfer_hnd"})),
    "last partial page length as len % B": ("cache.paged_kv_indices", "LastPage", _indices(_last_mod)),
    "CoW block leaked": ("cache.block_manager", "CopyOnWrite", CowLeak),
    "CoW not done (write into a shared block)": ("cache.block_manager", "CopyOnWrite", NoCow),
    "refcount not decremented on free": ("cache.block_manager", "RefCount", FreeKeepsReferences),
    "null block handed out": ("cache.block_manager", "NullBlock", NullHandedOut),
    "negative position wraps to the last column": ("cache.slot_mapping", "InvalidInput",
                                                   _slots(_slot_negative_wraps)),
    "bool tables, ids or positions accepted": ("cache.slot_mapping", "InvalidInput", _bools_as_ints),
    "value cache blocks not checked against the key cache": ("cache.reshape_and_cache", "InvalidInput",
                                                             _value_blocks_unchecked),
    "fork from an unknown parent creates it": ("cache.block_manager", "InvalidInput", ForkCreatesParent),
    "fork onto itself accepted": ("cache.block_manager", "InvalidInput", ForkOntoItself),
    "CoW on an append of 0 tokens": ("cache.block_manager", "CopyOnWrite", CowOnEmptyAppend),
    "CoW only for the fork's child": ("cache.block_manager", "CopyOnWrite", CowOnlyForChild),
    "null block as a 0-token sequence's table": ("cache.block_manager", "NullBlock", NullForEmpty),
    "refused fork counts the parent's blocks": ("cache.block_manager", "RefCount", ForkCountsBeforeChildCheck),
    "refused fork replaces the child's table": ("cache.block_manager", "RefCount", ForkWritesChildFirst),
    "refused fork registers the child": ("cache.block_manager", "InvalidInput", ForkRegistersChild),
    "refused add registers the sequence": ("cache.block_manager", "Capacity", AddRegistersFirst),
    "refused add keeps the blocks it took": ("cache.block_manager", "Capacity", AddTakesOneByOne),
    "refused duplicate add takes blocks": ("cache.block_manager", "Capacity", AddTakesBeforeNameCheck),
    "refused negative add registers the sequence": ("cache.block_manager", "InvalidInput", AddRegistersBeforeCount),
    "refused append records the length": ("cache.block_manager", "Capacity", AppendLengthFirst),
    "refused append takes the CoW block": ("cache.block_manager", "CopyOnWrite", AppendCopiesBeforeCapacity),
    "refused append keeps the blocks it took": ("cache.block_manager", "Capacity", AppendGrowsUntilRefused),
    "refused append registers the sequence": ("cache.block_manager", "InvalidInput", AppendRegistersUnknown),
    "refused negative append copies the block": ("cache.block_manager", "CopyOnWrite", AppendCopiesBeforeCountCheck),
    "refused table read registers the sequence": ("cache.block_manager", "InvalidInput", TableRegistersUnknown),
}


def bug(name: str) -> Implementation:
    op, _, kernel = PAGED_BUGS[name]
    return Implementation(name, {op: kernel}, variants={p: v for p, v in P.VARIANTS.items() if p == op})

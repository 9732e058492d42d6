"""A paged KV-cache block manager: blocks with reference counts, a free queue, and a
block table per sequence, with forking and copy-on-write.

`BlockManager(num_blocks, block_size=16, null_block=False)`:

  add_sequence(seq, tokens) -> the block ids of a new sequence of `tokens` tokens
  append(seq, tokens)       -> {"new": blocks added at the table's end,
                                "copies": [[src, dst]] copy-on-write of a shared last block}
  fork(parent, child)       -> the child's table: the parent's blocks, shared
  free(seq)                 -> the blocks whose last holder it was (table order)
  table(seq)                -> the sequence's block ids
  null()                    -> the reserved null block's id (None without one)
  num_free()                -> how many blocks may be handed out

A block's reference count is the number of tables holding it; it returns to the free
queue when that reaches 0. Blocks are handed out from the head of the queue and
returned to its tail (FIFO: the longest-free block is reused first; which id is
handed out is an implementation's choice, compared up to renaming). A write never
reaches a shared block: appending to a sequence whose last block is partial and held
by another table first copies it to a fresh block (its K and V are the caller's to
copy: the pair is reported) and drops the sequence's reference to the original.
`null_block=True` reserves block 0 as vLLM does (the padding entry of block tables),
never handed out. A refused call (ValueError/TypeError) changes nothing.

References: Kwon et al., arXiv:2309.06180 (PagedAttention, sections 4.2-4.4: block
tables, reference counts, copy-on-write on fork); vLLM v1's BlockPool
(vllm/v1/core/block_pool.py: null block 0, FreeKVCacheBlockQueue).
"""

from __future__ import annotations

from collections import deque

from ref.arguments import boolean, integer

__all__ = ["BlockManager"]


class BlockManager:
    """The reference block manager (see the module docstring)."""

    def __init__(self, num_blocks: int, block_size: int = 16, null_block: bool = False):
        self.num_blocks = integer(num_blocks, "num_blocks", minimum=1)
        self.block_size = integer(block_size, "block_size", minimum=1)
        self.null_block = boolean(null_block, "null_block")
        if self.null_block and self.num_blocks < 2:
            raise ValueError(f"num_blocks: a null block needs at least 2 blocks, got {self.num_blocks}")
        first = 1 if self.null_block else 0
        self._free = deque(range(first, self.num_blocks))  # head: the longest-free block
        self._refs: dict[int, int] = {}  # block -> number of tables holding it (> 0)
        self._tables: dict[int, list[int]] = {}  # sequence -> its block ids
        self._lengths: dict[int, int] = {}  # sequence -> its tokens

    # --- the allocator ---------------------------------------------------------------

    def _take(self, n: int) -> list[int]:
        blocks = [self._free.popleft() for _ in range(n)]
        for b in blocks:
            self._refs[b] = 1
        return blocks

    def _release(self, block: int) -> bool:
        """Drop one reference; True when the block went back to the free queue."""
        self._refs[block] -= 1
        if self._refs[block]:
            return False
        del self._refs[block]
        self._free.append(block)
        return True

    def _need(self, n: int) -> None:
        if n > len(self._free):
            raise ValueError(f"tokens: {n} blocks needed, {len(self._free)} free")

    # --- arguments -------------------------------------------------------------------

    def _seq(self, seq, name: str, *, exists: bool) -> int:
        seq = integer(seq, name, minimum=0)
        if exists and seq not in self._tables:
            raise ValueError(f"{name}: no sequence {seq}")
        if not exists and seq in self._tables:
            raise ValueError(f"{name}: sequence {seq} already exists")
        return seq

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # --- the traced methods ----------------------------------------------------------

    def add_sequence(self, seq, tokens) -> list[int]:
        seq = self._seq(seq, "seq", exists=False)
        tokens = integer(tokens, "tokens", minimum=0)
        self._need(self._blocks_for(tokens))
        self._tables[seq] = self._take(self._blocks_for(tokens))
        self._lengths[seq] = tokens
        return list(self._tables[seq])

    def append(self, seq, tokens) -> dict[str, list]:
        seq = self._seq(seq, "seq", exists=True)
        tokens = integer(tokens, "tokens", minimum=0)
        table, length = self._tables[seq], self._lengths[seq]
        partial = length % self.block_size != 0  # the last block has room
        cow = tokens > 0 and partial and self._refs[table[-1]] > 1  # and another table holds it
        fresh = self._blocks_for(length + tokens) - len(table)
        self._need(fresh + cow)
        copies = []
        if cow:
            src, (dst,) = table[-1], self._take(1)
            self._release(src)  # still held by another table: never freed here
            table[-1] = dst
            copies.append([src, dst])
        new = self._take(fresh)
        table += new
        self._lengths[seq] = length + tokens
        return {"new": new, "copies": copies}

    def fork(self, parent, child) -> list[int]:
        parent = self._seq(parent, "parent", exists=True)
        child = self._seq(child, "child", exists=False)
        self._tables[child] = list(self._tables[parent])
        self._lengths[child] = self._lengths[parent]
        for b in self._tables[child]:
            self._refs[b] += 1
        return list(self._tables[child])

    def free(self, seq) -> list[int]:
        seq = self._seq(seq, "seq", exists=True)
        table = self._tables.pop(seq)
        del self._lengths[seq]
        return [b for b in table if self._release(b)]

    def table(self, seq) -> list[int]:
        return list(self._tables[self._seq(seq, "seq", exists=True)])

    def null(self) -> int | None:
        return 0 if self.null_block else None

    def num_free(self) -> int:
        return len(self._free)

    # --- for strategies, properties and snapshots (not traced) -----------------------

    def sequences(self) -> dict[int, int]:
        """Each sequence's length in tokens."""
        return dict(self._lengths)

    def refcounts(self) -> dict[int, int]:
        """Each held block's reference count."""
        return dict(self._refs)

    def free_queue(self) -> list[int]:
        """The free blocks, head first."""
        return list(self._free)

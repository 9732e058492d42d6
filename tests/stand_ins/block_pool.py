"""A block pool, the kernel of a paged KV-cache block manager, as a stateful op.

`BlockPool(num_blocks)` hands out block ids: allocate(n) -> n distinct free ids
(ValueError when fewer than n are free, nothing allocated), free(ids) returns them
(ValueError on an id that is not allocated, a double free, or one listed twice;
nothing freed), num_free() -> how many are free. Which ids it hands out is the
implementation's choice: the reference reuses the longest-free block first (FIFO);
`LifoPool` and `OffsetPool` choose otherwise and are correct. The other twins are
plausible wrong block managers: each gets one piece of bookkeeping wrong.
"""

from __future__ import annotations

from collections import deque

from hypothesis import strategies as st

from ref.arguments import integer
from ref.testing.catalog_types import Area
from ref.testing.stateful import StatefulOp, TraceSpec

__all__ = ["BLOCK_POOL", "BUGS", "CORRECT", "BlockPool"]


class BlockPool:
    """The reference: free blocks in a queue, the longest-free handed out first."""

    def __init__(self, num_blocks):
        self.num_blocks = integer(num_blocks, "num_blocks", minimum=1)
        self._free = deque(self._ids())
        self._live: set[int] = set()

    def _ids(self):
        return range(self.num_blocks)

    def _take(self) -> int:
        return self._free.popleft()

    def allocate(self, n):
        n = integer(n, "n", minimum=0)
        if n > self.num_free():
            raise ValueError(f"n: {n} blocks asked, {self.num_free()} free")
        ids = [self._take() for _ in range(n)]
        self._live.update(ids)
        return ids

    def _check_free(self, ids) -> list[int]:
        if not isinstance(ids, list):
            raise TypeError(f"ids: expected a list of block ids, got {type(ids).__name__}")
        ids = [integer(i, "ids") for i in ids]
        if len(set(ids)) != len(ids):
            raise ValueError(f"ids: a block is listed twice in {ids}")
        stray = [i for i in ids if i not in self._live]
        if stray:
            raise ValueError(f"ids: blocks {stray} are not allocated (a double free, or never handed out)")
        return ids

    def free(self, ids):
        ids = self._check_free(ids)
        self._live.difference_update(ids)
        self._free.extend(ids)

    def num_free(self):
        return len(self._free)

    def live(self) -> list[int]:
        """The allocated ids (for strategies and snapshots; not a traced method)."""
        return sorted(self._live)


class LifoPool(BlockPool):
    """Correct: the most recently freed block is reused first (a stack)."""

    def _take(self):
        return self._free.pop()


class OffsetPool(BlockPool):
    """Correct: ids start at 1000 (block 0 reserved elsewhere, say)."""

    def _ids(self):
        return range(1000, 1000 + self.num_blocks)


class DoubleFreeAccepted(BlockPool):
    """Bug: free does not check that a block is allocated, so a double free puts it
    on the free list twice and it is later handed to two owners."""

    def free(self, ids):
        self._live.difference_update(ids)
        self._free.extend(ids)


class OffByOneCapacity(BlockPool):
    """Bug: `>=` for `>`: the last free block can never be allocated."""

    def allocate(self, n):
        if n >= self.num_free() and n > 0:
            raise ValueError(f"n: {n} blocks asked, {self.num_free()} free")
        return super().allocate(n)


class Leak(BlockPool):
    """Bug: freed blocks are forgotten instead of returned to the free list."""

    def free(self, ids):
        self._live.difference_update(self._check_free(ids))


class LiveIdHandedOut(BlockPool):
    """Bug: ids are handed out round robin by a cursor, counting free blocks but not
    checking which: after a wrap-around, a block still in use is handed out again."""

    def __init__(self, num_blocks):
        super().__init__(num_blocks)
        self._cursor = 0

    def _take(self):
        block = self._cursor
        self._cursor = (self._cursor + 1) % self.num_blocks
        self._free.popleft()
        return block


class StaleCount(BlockPool):
    """Bug: num_free reads a counter that allocate lowers and free never raises."""

    def __init__(self, num_blocks):
        super().__init__(num_blocks)
        self._count = self.num_blocks

    def allocate(self, n):
        ids = super().allocate(n)
        self._count -= len(ids)
        return ids

    def num_free(self):
        return self._count


class PartialAllocate(BlockPool):
    """Bug: allocate takes blocks one by one and refuses only when it runs out, so a
    refused request keeps the blocks it took (the steps after the refusal show it)."""

    def allocate(self, n):
        ids = []
        for _ in range(integer(n, "n", minimum=0)):
            if not self._free:
                raise ValueError(f"n: {n} blocks asked, {len(ids)} were free")
            ids.append(self._take())
            self._live.add(ids[-1])
        return ids


CORRECT = {"fifo": BlockPool, "lifo": LifoPool, "offset": OffsetPool}
BUGS = {"double_free": DoubleFreeAccepted, "off_by_one": OffByOneCapacity, "leak": Leak,
        "live_id": LiveIdHandedOut, "stale_count": StaleCount, "partial_allocate": PartialAllocate}


# (which step, a count, a few picks): one strategy built once, read against the pool's state
_DRAW = st.tuples(st.integers(0, 3), st.integers(0, 7), st.lists(st.integers(0, 15), min_size=1, max_size=3))


def _step(pool: BlockPool, draw: tuple[int, int, list[int]]) -> tuple[str, dict]:
    which, count, picks = draw
    live = pool.live()
    if which == 0:
        return "allocate", {"n": count % (pool.num_free() + 2)}  # sometimes one more than is free
    if which == 1 and live:
        return "free", {"ids": sorted({live[i % len(live)] for i in picks})}
    if which == 2:  # any ids: a double free, one never handed out, one listed twice
        return "free", {"ids": [i % (pool.num_blocks + 1) for i in picks[:2]]}
    return "num_free", {}


def _steps(pool: BlockPool) -> st.SearchStrategy:
    """The next step: allocate (sometimes more than is free), free live blocks, free
    any ids (a double free, an unknown id), or num_free."""
    return _DRAW.map(lambda draw: _step(pool, draw))


def _traces() -> list[TraceSpec]:
    a, f, c = "allocate", "free", "num_free"
    return [
        TraceSpec("allocate and free everything, counting", ("Capacity",),
                  ((a, {"n": 2}), (c, {}), (a, {"n": 2}), (c, {}), (f, {"ids": [0, 2]}), (c, {}),
                   (f, {"ids": [1, 3]}), (c, {})), params={"num_blocks": 4}),
        TraceSpec("the last free block can be allocated", ("Capacity",),
                  ((a, {"n": 3}), (a, {"n": 1}), (c, {})), params={"num_blocks": 4}),
        TraceSpec("asking for more than is free is refused", ("Capacity",),
                  ((a, {"n": 3}), (a, {"n": 2})), params={"num_blocks": 4}, result="invalid"),
        TraceSpec("freed blocks are handed out again", ("Reuse",),
                  ((a, {"n": 2}), (f, {"ids": [0, 1]}), (c, {}), (a, {"n": 2}), (c, {})), params={"num_blocks": 2}),
        TraceSpec("the freed block is handed out, not one still in use", ("Reuse",),
                  ((a, {"n": 3}), (f, {"ids": [1]}), (a, {"n": 1}), (c, {})), params={"num_blocks": 3}),
        TraceSpec("a double free is refused", ("DoubleFree",),
                  ((a, {"n": 2}), (f, {"ids": [0]}), (f, {"ids": [0]})), params={"num_blocks": 3}, result="invalid"),
        TraceSpec("freeing a block never handed out is refused", ("DoubleFree",),
                  ((a, {"n": 1}), (f, {"ids": [2]})), params={"num_blocks": 3}, result="invalid"),
        TraceSpec("a pool of no blocks is refused", ("InvalidInput",), (), params={"num_blocks": 0},
                  result="invalid"),
        TraceSpec("a refused allocate takes nothing: the trace goes on after it", ("Capacity",),
                  ((a, {"n": 3}), (a, {"n": 2}), (c, {}), (a, {"n": 1}), (c, {})), params={"num_blocks": 4},
                  result="invalid", refused=(2,)),
    ]


STAND_INS = Area("stand_in", spec="spec/conformance.md")

BLOCK_POOL = STAND_INS.declare(
    StatefulOp, "block_pool", BlockPool, anchor="stateful",
    summary="a pool of KV-cache block ids: allocate, free, count",
    methods=("allocate", "free", "num_free"),
    vectors=_traces,
    examples=lambda supported: st.fixed_dictionaries({"num_blocks": st.integers(1, 5)}),
    steps=_steps,
    snapshot=lambda pool: {"num_free": pool.num_free(), "live": pool.live()},
    identifiers=("allocate.observation[*]", "free.args.ids[*]"),
    releases=("free.args.ids[*]",),
)

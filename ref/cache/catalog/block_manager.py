"""The block manager as a stateful op: `cache.block_manager` (ref.cache.block_manager).

Traces of add_sequence / append / fork / free / table / null / num_free calls; block
ids are the implementation's choice (compared up to renaming), a freed block's id is
released. The traces target the bookkeeping engines get wrong: a copy-on-write not
done or leaking its source, a reference not dropped on free, the null block handed out,
and a refused call that changed the state before it refused (a count raised, a block
or a copy taken, a sequence registered, a length recorded): those traces go on past the
refusal and look at what it could have changed, and the steps strategy draws a refusal
of every kind one step in 8 once a sequence exists.
"""

from __future__ import annotations

from hypothesis import strategies as st

from ref.cache.block_manager import BlockManager
from ref.cache.catalog.common import AREA
from ref.testing.catalog_types import Flag, Variant
from ref.testing.flags import COMMON, INVALID_INPUT
from ref.testing.stateful import StatefulOp, TraceSpec

__all__ = ["FLAGS", "NULL_BLOCK", "OPERATIONS"]

FLAGS = {
    INVALID_INPUT: COMMON[INVALID_INPUT],
    "Capacity": Flag("blocks not conserved: one too few or too many handed out, or a freed block not returned",
                     "free + used != total: the cache leaks until the engine preempts forever, or over-commits"),
    "CopyOnWrite": Flag("appending to a shared partial last block without copying it, or copying without "
                        "dropping the reference to the original",
                        "one sequence's new tokens overwrite its fork's cache, or the original block leaks"),
    "RefCount": Flag("a block's reference count not dropped on free (or dropped to 0 while still shared)",
                     "a forked prefix is never freed, or is freed and reused while a fork still reads it"),
    "NullBlock": Flag("vLLM's reserved null block (block 0, the padding entry of block tables) handed out",
                      "a real sequence's K and V share the block that padding entries point at"),
}

NULL_BLOCK = Variant("null_block", (False, True), False,
                     "block 0 reserved as vLLM v1 does (its padding entry), never handed out; False: every block "
                     "usable (PagedAttention's paper, SGLang's token pool keeps slot 0 likewise reserved)")

A, P, F, X, T, N, C = "add_sequence", "append", "fork", "free", "table", "null", "num_free"


def _traces() -> list[TraceSpec]:
    b4 = {"block_size": 4}
    return [
        TraceSpec("add, append within the last block and past it, free: every block comes back", ("Capacity",),
                  ((A, {"seq": 0, "tokens": 5}), (P, {"seq": 0, "tokens": 3}), (C, {}), (P, {"seq": 0, "tokens": 1}),
                   (T, {"seq": 0}), (C, {}), (X, {"seq": 0}), (C, {})), {**b4, "num_blocks": 8}),
        TraceSpec("a sequence of 0 tokens holds no block; its first append takes one", ("Capacity",),
                  ((A, {"seq": 3, "tokens": 0}), (C, {}), (P, {"seq": 3, "tokens": 4}), (C, {}),
                   (P, {"seq": 3, "tokens": 0}), (X, {"seq": 3}), (C, {})), {**b4, "num_blocks": 2}),
        TraceSpec("the last free block can be used", ("Capacity",),
                  ((A, {"seq": 0, "tokens": 9}), (A, {"seq": 1, "tokens": 4}), (C, {})), {**b4, "num_blocks": 4}),
        TraceSpec("one block more than is free is refused", ("Capacity",),
                  ((A, {"seq": 0, "tokens": 9}), (P, {"seq": 0, "tokens": 8})), {**b4, "num_blocks": 4}, "invalid"),
        TraceSpec("a fork shares the blocks; appending to the shared partial last block copies it first",
                  ("CopyOnWrite",),
                  ((A, {"seq": 0, "tokens": 6}), (F, {"parent": 0, "child": 1}), (C, {}),
                   (P, {"seq": 1, "tokens": 1}), (T, {"seq": 0}), (T, {"seq": 1}), (C, {}),
                   (P, {"seq": 0, "tokens": 1}), (C, {})), {**b4, "num_blocks": 6}),
        TraceSpec("after a copy-on-write, freeing both sequences returns every block (the copy's source too)",
                  ("CopyOnWrite", "Capacity"),
                  ((A, {"seq": 0, "tokens": 6}), (F, {"parent": 0, "child": 1}), (P, {"seq": 1, "tokens": 3}),
                   (X, {"seq": 0}), (C, {}), (X, {"seq": 1}), (C, {})), {**b4, "num_blocks": 6}),
        TraceSpec("a shared full last block needs no copy: the append takes a new block", ("CopyOnWrite",),
                  ((A, {"seq": 0, "tokens": 8}), (F, {"parent": 0, "child": 1}), (P, {"seq": 1, "tokens": 1}),
                   (T, {"seq": 1}), (C, {})), {**b4, "num_blocks": 4}),
        TraceSpec("a copy-on-write needs a free block: refused when none is", ("CopyOnWrite", "Capacity"),
                  ((A, {"seq": 0, "tokens": 6}), (F, {"parent": 0, "child": 1}), (P, {"seq": 1, "tokens": 1})),
                  {**b4, "num_blocks": 2}, "invalid"),
        TraceSpec("freeing a parent keeps the blocks its fork holds; the fork's free returns them", ("RefCount",),
                  ((A, {"seq": 0, "tokens": 8}), (F, {"parent": 0, "child": 1}), (F, {"parent": 1, "child": 2}),
                   (X, {"seq": 0}), (C, {}), (X, {"seq": 2}), (C, {}), (X, {"seq": 1}), (C, {})),
                  {**b4, "num_blocks": 3}),
        # adv12 (search only): an append of 0 tokens writes nothing, so a shared partial last block is not copied
        TraceSpec("appending 0 tokens to a shared partial last block copies nothing", ("CopyOnWrite",),
                  ((A, {"seq": 0, "tokens": 6}), (F, {"parent": 0, "child": 1}), (P, {"seq": 1, "tokens": 0}),
                   (T, {"seq": 1}), (C, {})), {**b4, "num_blocks": 4}),
        # adv12 (search only): the fork's parent copies too when it appends first (not only the fork's child)
        TraceSpec("the fork's parent appending first to the shared partial last block copies it", ("CopyOnWrite",),
                  ((A, {"seq": 0, "tokens": 6}), (F, {"parent": 0, "child": 1}), (P, {"seq": 0, "tokens": 1}),
                   (T, {"seq": 0}), (T, {"seq": 1}), (C, {}), (P, {"seq": 1, "tokens": 1}), (C, {})),
                  {**b4, "num_blocks": 6}),
        # adv12 (search only): a sequence of 0 tokens holds no block, the null block included
        TraceSpec("with the null block reserved, a sequence of 0 tokens gets an empty table, not the null block",
                  ("NullBlock", "Capacity"),
                  ((N, {}), (A, {"seq": 0, "tokens": 0}), (T, {"seq": 0}), (C, {}), (P, {"seq": 0, "tokens": 1}),
                   (T, {"seq": 0}), (C, {})), {**b4, "num_blocks": 4, "null_block": True}),
        TraceSpec("the null block is reserved: 3 of 4 blocks usable", ("NullBlock", "Capacity"),
                  ((N, {}), (C, {}), (A, {"seq": 0, "tokens": 12}), (T, {"seq": 0}), (C, {})),
                  {**b4, "num_blocks": 4, "null_block": True}),
        TraceSpec("with the null block reserved, a fourth block of 4 is refused", ("NullBlock", "Capacity"),
                  ((N, {}), (A, {"seq": 0, "tokens": 13})), {**b4, "num_blocks": 4, "null_block": True}, "invalid"),
        TraceSpec("without a null block there is none, and every block is usable", ("NullBlock",),
                  ((N, {}), (A, {"seq": 0, "tokens": 16}), (C, {})), {**b4, "num_blocks": 4}),
        TraceSpec("a sequence added twice is refused", (INVALID_INPUT,),
                  ((A, {"seq": 0, "tokens": 1}), (A, {"seq": 0, "tokens": 1})), {**b4, "num_blocks": 4}, "invalid"),
        TraceSpec("a fork onto an existing sequence is refused", (INVALID_INPUT, "RefCount"),
                  ((A, {"seq": 0, "tokens": 1}), (A, {"seq": 1, "tokens": 1}), (F, {"parent": 0, "child": 1})),
                  {**b4, "num_blocks": 4}, "invalid"),
        # adv12 #13: a fork from an unknown parent must not create the parent (empty) and share nothing
        TraceSpec("a fork from an unknown parent is refused", (INVALID_INPUT,),
                  ((A, {"seq": 0, "tokens": 0}), (F, {"parent": 7, "child": 1})), {**b4, "num_blocks": 4}, "invalid"),
        # adv12 #14: a fork onto itself (child == parent, an existing sequence) must be refused, not double its counts
        TraceSpec("a fork of a sequence onto itself is refused", (INVALID_INPUT, "RefCount"),
                  ((A, {"seq": 0, "tokens": 0}), (F, {"parent": 0, "child": 0})), {**b4, "num_blocks": 4}, "invalid"),
        TraceSpec("a double free is refused", (INVALID_INPUT, "RefCount"),
                  ((A, {"seq": 0, "tokens": 1}), (X, {"seq": 0}), (X, {"seq": 0})), {**b4, "num_blocks": 4},
                  "invalid"),
        TraceSpec("appending to an unknown sequence is refused", (INVALID_INPUT,),
                  ((P, {"seq": 5, "tokens": 1}),), {**b4, "num_blocks": 4}, "invalid"),
        TraceSpec("a negative token count is refused", (INVALID_INPUT,),
                  ((A, {"seq": 0, "tokens": -1}),), {**b4, "num_blocks": 4}, "invalid"),
        TraceSpec("a pool of no blocks is refused", (INVALID_INPUT,), (), {**b4, "num_blocks": 0}, "invalid"),
        TraceSpec("a null block with nothing else is refused", (INVALID_INPUT, "NullBlock"), (),
                  {**b4, "num_blocks": 1, "null_block": True}, "invalid"),
        # Refusals in mid-trace: each refused call must change nothing, and the steps after it look at what a
        # manager that mutates before it checks would have changed (tables, counts, lengths, sequences).
        TraceSpec("a refused fork onto an existing child (or onto itself) raises no count and replaces no table: "
                  "each free returns its own blocks", ("RefCount", INVALID_INPUT),
                  ((A, {"seq": 0, "tokens": 8}), (A, {"seq": 1, "tokens": 1}), (F, {"parent": 0, "child": 1}),
                   (F, {"parent": 0, "child": 0}), (T, {"seq": 1}), (X, {"seq": 1}), (X, {"seq": 0}), (C, {})),
                  {**b4, "num_blocks": 4}, "invalid", refused=(3, 4)),
        TraceSpec("a refused fork from an unknown parent registers no child", (INVALID_INPUT,),
                  ((A, {"seq": 0, "tokens": 5}), (F, {"parent": 7, "child": 1}), (T, {"seq": 1}),
                   (F, {"parent": 0, "child": 1}), (C, {})), {**b4, "num_blocks": 4}, "invalid", refused=(2, 3)),
        TraceSpec("a refused add (too few free blocks) registers nothing and takes nothing", ("Capacity",),
                  ((A, {"seq": 0, "tokens": 9}), (A, {"seq": 1, "tokens": 8}), (T, {"seq": 1}), (C, {}),
                   (A, {"seq": 1, "tokens": 4}), (C, {})), {**b4, "num_blocks": 4}, "invalid", refused=(2, 3)),
        TraceSpec("a refused add of an existing sequence takes no block and keeps its table",
                  ("Capacity", INVALID_INPUT),
                  ((A, {"seq": 0, "tokens": 4}), (A, {"seq": 0, "tokens": 8}), (C, {}), (T, {"seq": 0}),
                   (A, {"seq": 1, "tokens": 12}), (C, {})), {**b4, "num_blocks": 4}, "invalid", refused=(2,)),
        TraceSpec("a refused add (a negative count) registers nothing", (INVALID_INPUT,),
                  ((A, {"seq": 0, "tokens": 1}), (A, {"seq": 1, "tokens": -1}), (T, {"seq": 1}),
                   (A, {"seq": 1, "tokens": 1}), (C, {})), {**b4, "num_blocks": 4}, "invalid", refused=(2, 3)),
        TraceSpec("a refused append (too few free blocks) keeps the sequence's length and takes no block",
                  ("Capacity",),
                  ((A, {"seq": 0, "tokens": 9}), (P, {"seq": 0, "tokens": 8}), (C, {}), (P, {"seq": 0, "tokens": 3}),
                   (T, {"seq": 0}), (P, {"seq": 0, "tokens": 1}), (C, {})), {**b4, "num_blocks": 4}, "invalid",
                  refused=(2,)),
        TraceSpec("a refused append needing a copy and a fresh block takes neither: the last block stays shared",
                  ("CopyOnWrite", "Capacity"),
                  ((A, {"seq": 0, "tokens": 6}), (F, {"parent": 0, "child": 1}), (P, {"seq": 1, "tokens": 3}),
                   (T, {"seq": 1}), (C, {}), (P, {"seq": 1, "tokens": 1}), (C, {}), (X, {"seq": 0}), (C, {})),
                  {**b4, "num_blocks": 3}, "invalid", refused=(3,)),
        TraceSpec("a refused append to an unknown sequence registers nothing, nor does reading its table",
                  (INVALID_INPUT,),
                  ((A, {"seq": 0, "tokens": 1}), (P, {"seq": 5, "tokens": 1}), (T, {"seq": 5}),
                   (A, {"seq": 5, "tokens": 1}), (C, {})), {**b4, "num_blocks": 4}, "invalid", refused=(2, 3)),
        TraceSpec("a refused append of a negative count copies nothing: the last block stays shared",
                  (INVALID_INPUT, "CopyOnWrite"),
                  ((A, {"seq": 0, "tokens": 6}), (F, {"parent": 0, "child": 1}), (P, {"seq": 1, "tokens": -1}),
                   (T, {"seq": 1}), (C, {}), (X, {"seq": 0}), (X, {"seq": 1}), (C, {})), {**b4, "num_blocks": 4},
                  "invalid", refused=(3,)),
    ]


# (which step, a sequence pick, a token count, a refusal when 7): one strategy built once, read against the
# state; the refusal is a draw of its own so that the valid steps' mix stays what it was (the search finds the
# copy-on-write bugs as fast as before)
_DRAW = st.tuples(st.integers(0, 6), st.integers(0, 7), st.integers(0, 9), st.integers(0, 7))


def _refused_append(manager: BlockManager, seq: int, extra: int) -> int:
    """A token count one block too many for `seq` (the copy-on-write's block counted), `extra` (0..B-1)
    tokens past the smallest such count while that needs the same blocks."""
    b, table, length = manager.block_size, manager.table(seq), manager.sequences()[seq]
    cow = length % b != 0 and manager.refcounts()[table[-1]] > 1  # any append of tokens > 0 copies
    fresh = manager.num_free() + 1 - cow  # the fresh blocks that make it one too many
    room = len(table) * b - length
    return 1 + extra % room if fresh == 0 else room + (fresh - 1) * b + 1 + extra % b


def _refusal(manager: BlockManager, kind: int, tokens: int) -> tuple[str, dict]:
    """A call the manager refuses, of one of 8 kinds (`kind`), each a place where a manager that changes its
    state before it checks would keep half of what it did; `tokens` picks the sequences and the count."""
    live = sorted(manager.sequences())  # not empty
    i, n = tokens % len(live), len(live)
    old, other = live[i], live[(i + 1 + tokens // 2 % max(n - 1, 1)) % n]  # other is old only when alone
    b, refs = manager.block_size, manager.refcounts()
    shared = [s for s, n in manager.sequences().items() if n % b and refs[manager.table(s)[-1]] > 1]
    if kind in (3, 4) and shared:  # an append that would copy-on-write: where a copy taken too early shows
        old = shared[tokens % len(shared)]
    new = tokens % 8
    while new in live:
        new += 1
    if kind == 0:  # an existing sequence added again
        return A, {"seq": old, "tokens": tokens}
    if kind == 1:  # a negative count
        return A, {"seq": new, "tokens": -1 - tokens % 3}
    if kind == 2:  # a new sequence one block too long
        return A, {"seq": new, "tokens": manager.num_free() * manager.block_size + 1 + tokens % manager.block_size}
    if kind == 3:  # an append one block too long (a copy-on-write included)
        return P, {"seq": old, "tokens": _refused_append(manager, old, tokens)}
    if kind == 4:
        return P, {"seq": old, "tokens": -1 - tokens % 3}
    if kind == 5:  # an unknown sequence appended to, or forked from (onto a new child)
        return (P, {"seq": new, "tokens": tokens}) if tokens % 2 else (F, {"parent": new, "child": new + 1})
    if kind == 6:  # a fork onto another existing sequence (onto itself when there is no other)
        return F, {"parent": old, "child": other}
    return (T, {"seq": new}) if tokens % 2 else (X, {"seq": new})


def step(manager: BlockManager, draw: tuple[int, int, int]) -> tuple[str, dict]:
    """The next step, mostly valid: existing sequences appended, forked and freed, new
    ones added (and more tokens than fit, now and then). `which` 7 (the search draws it
    one step in 8), once a sequence exists: a call the manager refuses, of kind `pick`
    (an unknown sequence, an existing one added or forked onto, a negative count, one
    block too many), so that a refusal that changed the state shows in the steps after it."""
    which, pick, tokens = draw
    live = sorted(manager.sequences())  # sequence ids in use
    old = live[pick % len(live)] if live else pick
    new = pick
    while new in live:
        new += 1
    if which == 0 or not live:
        return A, {"seq": new if which or pick % 5 else old, "tokens": tokens}
    if which == 7:
        return _refusal(manager, pick, tokens)
    if which == 1:
        return P, {"seq": old, "tokens": tokens if pick % 4 else 0}
    if which == 2:  # now and then a fork from an unknown parent, or onto itself (refused)
        if tokens == 9:
            return F, {"parent": new, "child": new + 1} if pick % 2 else {"parent": old, "child": old}
        return F, {"parent": old, "child": new}
    if which == 3:
        return X, {"seq": old if pick % 6 else new}
    if which == 4:
        return T, {"seq": old}
    return (C, {}) if which == 5 else (N, {})


def _steps(manager: BlockManager) -> st.SearchStrategy:
    return _DRAW.map(lambda d: step(manager, (7 if d[3] == 7 else d[0], d[1], d[2])))


def _examples(supported):
    """Params the factory takes: 1 to 10 blocks (at least 2 beside a null block)."""
    params = st.fixed_dictionaries({"num_blocks": st.integers(1, 10), "block_size": st.sampled_from([1, 2, 4]),
                                    "null_block": st.sampled_from(list(supported.get("null_block", (False,))))})
    return params.map(lambda p: {**p, "num_blocks": max(p["num_blocks"], 1 + p["null_block"])})


def _snapshot(m) -> dict:
    """The reference's tables, lengths, counts and free queue; of a candidate without
    those helpers, what its traced methods show."""
    if not isinstance(m, BlockManager):
        return {"num_free": m.num_free()}
    return {"tables": {str(s): m.table(s) for s in sorted(m.sequences())},
            "lengths": {str(s): n for s, n in sorted(m.sequences().items())},
            "refcounts": {str(b): r for b, r in sorted(m.refcounts().items())}, "free": m.free_queue()}


OPERATIONS = [
    AREA.declare(
        StatefulOp, "block_manager", BlockManager, anchor="block-manager",
        summary="paged KV blocks: reference counts, a FIFO free queue, per-sequence tables, fork and copy-on-write",
        methods=(A, P, F, X, T, N, C), variants=(NULL_BLOCK,), vectors=_traces, examples=_examples, steps=_steps,
        snapshot=_snapshot, max_steps=30,
        identifiers=("add_sequence.observation[*]", "append.observation.new[*]", "append.observation.copies[*][*]",
                     "fork.observation[*]", "free.observation[*]", "table.observation[*]", "null.observation"),
        releases=("free.observation[*]",)),
]

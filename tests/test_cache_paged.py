"""Paged KV storage (ref.cache.paged, ref.cache.block_manager): slots, bit copies by
slot in every layout, FlashInfer's page table, and the block manager against a naive
model (hypothesis.stateful), with its wrong twins found by the traces and by the
property search alone."""

from __future__ import annotations

import dataclasses
import random
import re

import numpy as np
import pytest
from corpus import cache_paged
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ref.cache.block_manager import BlockManager
from ref.cache.catalog.block_manager import OPERATIONS as MANAGER_OPS
from ref.cache.catalog.block_manager import step
from ref.cache.paged import paged_kv_indices, reshape_and_cache, slot_mapping
from ref.conformance.adapters import numpy_paged
from ref.conformance.implementation import Implementation
from ref.conformance.judges.stateful import run_op
from ref.conformance.report import OpReport
from ref.conformance.runner import Settings

MANAGER = MANAGER_OPS[0]

# --- slot_mapping ----------------------------------------------------------------------------


def test_slots_by_hand():
    tables = np.array([[7, 2, -1], [4, 0, 5]])
    # seq 0 pos 17 (B=16): block 2, offset 1 -> 33; seq 1 pos 40: block 5, offset 8 -> 88; padding -> -1
    assert slot_mapping(tables, [0, 1, -1, 1], [17, 40, 123, 0], block_size=16).tolist() == [33, 88, -1, 64]
    big = np.array([[(1 << 27) + 5]], np.int32)  # (2^27 + 5) * 32 + 31 = 2^32 + 191: wraps in int32
    out = slot_mapping(big, [0], [31], block_size=32)
    assert out.dtype == np.int64 and out.tolist() == [(1 << 32) + 191]


@st.composite
def tables_and_tokens(draw):
    b = draw(st.sampled_from([1, 2, 16, 32]))
    seqs, width = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    ids = draw(st.lists(st.integers(0, 1 << 40), min_size=seqs * width, max_size=seqs * width, unique=True))
    tables = np.array(ids).reshape(seqs, width)
    tokens = draw(st.lists(st.tuples(st.integers(-1, seqs - 1), st.integers(0, width * b - 1)), max_size=20))
    seq_ids, positions = (np.array(x, np.int64) for x in zip(*tokens)) if tokens else (np.zeros(0, int),) * 2
    return tables, seq_ids, positions, b


@settings(max_examples=60, deadline=None)
@given(tables_and_tokens())
def test_a_slot_decodes_to_its_block_and_offset(case):
    tables, seq_ids, positions, b = case
    slots = slot_mapping(tables, seq_ids, positions, block_size=b)
    real = seq_ids >= 0
    assert np.all(slots[~real] == -1)
    block, offset = np.divmod(slots[real], b)
    assert np.array_equal(block, tables[seq_ids[real], positions[real] // b])
    assert np.array_equal(offset, positions[real] % b)
    # distinct tokens of the batch get distinct slots (tables hold distinct blocks)
    pairs = {(s, p) for s, p in zip(seq_ids[real].tolist(), positions[real].tolist())}
    assert len(set(slots[real].tolist())) == len(pairs)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(seq_ids=[0], positions=[48]), ValueError, "positions: position 48 is past the block table"),
    (dict(seq_ids=[0], positions=[32]), ValueError, "block_tables: a real token's block is -1"),
    (dict(seq_ids=[1], positions=[-1]), ValueError, "positions: a real token's position is negative"),
    (dict(seq_ids=[2], positions=[0]), ValueError, "seq_ids: expected -1 (padding) or a row"),
    (dict(seq_ids=[-3], positions=[0]), ValueError, "seq_ids: expected -1 (padding)"),
    (dict(seq_ids=[0.0], positions=[0]), TypeError, "seq_ids: expected an integer array"),
    (dict(seq_ids=[True], positions=[0]), TypeError, "seq_ids: expected an integer array"),
    (dict(seq_ids=[0, 0], positions=[0]), ValueError, "positions: expected one per token"),
])
def test_slot_errors_name_the_argument(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        slot_mapping(np.array([[7, 2, -1], [4, 0, 5]]), block_size=16, **kwargs)
    with pytest.raises(ValueError, match="block_size"):
        slot_mapping(np.zeros((1, 1), int), [0], [0], block_size=0)


# --- reshape_and_cache ------------------------------------------------------------------------

LAYOUTS = ("vllm", "vllm_stacked", "flashinfer_nhd", "flashinfer_hnd")


def _caches(layout, blocks, b, h, d, fill):
    if layout == "vllm":
        return {"key_cache": fill((blocks, b, h, d)), "value_cache": fill((blocks, b, h, d))}
    shape = {"vllm_stacked": (2, blocks, b, h, d), "flashinfer_nhd": (blocks, 2, b, h, d),
             "flashinfer_hnd": (blocks, 2, h, b, d)}[layout]
    return {"kv_cache": fill(shape)}


def _token_rows(cache, layout, slot, b):
    """Cache rows [Hkv, D] of one slot, read by the layout's definition (not the oracle's views)."""
    block, offset = divmod(slot, b)
    return cache[block, :, offset] if layout == "flashinfer_hnd" else cache[block, offset]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(LAYOUTS), st.sampled_from([np.float16, np.float32, np.uint16]), st.integers(0, 2**32 - 1))
def test_each_token_lands_in_its_slot_and_nothing_else_changes(layout, dtype, seed):
    rng = np.random.default_rng(seed)
    blocks, b, h, d = int(rng.integers(1, 4)), int(rng.choice([1, 2, 4])), int(rng.integers(1, 3)), 3
    bits = f"u{np.dtype(dtype).itemsize}"

    def fill(shape):  # any bit pattern: NaNs with payloads, infinities, subnormals
        return rng.integers(0, np.iinfo(bits).max, shape, dtype=np.uint64).astype(bits).view(dtype)

    caches = _caches(layout, blocks, b, h, d, fill)
    before = {k: v.copy() for k, v in caches.items()}
    tokens = int(rng.integers(0, blocks * b + 1))
    slots = rng.permutation(blocks * b)[:tokens]
    slots[rng.random(tokens) < 0.25] = -1
    key, value = fill((tokens, h, d)), fill((tokens, h, d))
    k_out, v_out = reshape_and_cache(key, value, slots, layout=layout, **caches)
    for name in caches:  # functional: the inputs keep their bits
        assert caches[name].view(bits).tobytes() == before[name].view(bits).tobytes()
    k_in, v_in = (before["key_cache"], before["value_cache"]) if layout == "vllm" else (
        (before["kv_cache"][0], before["kv_cache"][1]) if layout == "vllm_stacked"
        else (before["kv_cache"][:, 0], before["kv_cache"][:, 1]))
    for out, new, old in ((k_out, key, k_in), (v_out, value, v_in)):
        assert out.dtype == np.dtype(dtype) and out.shape == old.shape
        for slot in range(blocks * b):
            written = np.flatnonzero(slots == slot)
            want = new[written[0]] if written.size else _token_rows(old, layout, slot, b)
            assert _token_rows(out, layout, slot, b).view(bits).tobytes() == want.view(bits).tobytes()


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(slots=[1, 1]), ValueError, "slots: a slot is written twice"),
    (dict(slots=[8, 0]), ValueError, "slots: expected -1 (skip) or 0..7"),
    (dict(slots=[0]), ValueError, "slots: expected one per token"),
    (dict(layout="paged"), ValueError, "layout"),
    (dict(value_cache=None), ValueError, "layout 'vllm' takes the two caches"),
    (dict(kv_cache=np.zeros((2, 2, 4, 1, 2), np.float16)), ValueError, "no kv_cache"),
    (dict(key=np.zeros((2, 1, 2), np.float32)), TypeError, "key, value: expected the cache's dtype"),
    (dict(key=np.zeros((2, 1, 3), np.float16)), ValueError, "key: expected [T, 1, 2]"),
    (dict(key_cache=np.zeros((2, 4, 1, 2), np.float64)), TypeError, "key_cache: expected float16, float32"),
])
def test_cache_errors_name_the_argument(kwargs, error, message):
    args = dict(key=np.zeros((2, 1, 2), np.float16), value=np.zeros((2, 1, 2), np.float16), slots=[0, 5],
                key_cache=np.zeros((2, 4, 1, 2), np.float16), value_cache=np.zeros((2, 4, 1, 2), np.float16))
    with pytest.raises(error, match=re.escape(message)):
        reshape_and_cache(**{**args, **kwargs})


def test_stacked_layouts_take_one_cache():
    kv = np.zeros((2, 1, 2, 1, 1), np.float32)
    key, value = np.float32([[[1.0]]]), np.float32([[[2.0]]])
    k, v = reshape_and_cache(key, value, [1], kv_cache=kv, layout="vllm_stacked")
    assert k.tolist() == [[[[0.0]], [[1.0]]]] and v.tolist() == [[[[0.0]], [[2.0]]]]
    with pytest.raises(ValueError, match="takes one kv_cache"):
        reshape_and_cache(key, value, [1], kv_cache=kv, value_cache=kv[1], layout="vllm_stacked")


# --- paged_kv_indices -------------------------------------------------------------------------

def test_page_table_by_hand():
    tables = np.array([[3, -1, -1], [0, 6, -1], [-1, -1, -1], [1, 2, 5]])
    indptr, indices, last = paged_kv_indices(tables, [5, 32, 0, 33], block_size=16)
    assert indptr.tolist() == [0, 1, 3, 3, 6] and indices.tolist() == [3, 0, 6, 1, 2, 5]
    assert last.tolist() == [5, 16, 0, 1]
    with pytest.raises(ValueError, match="seq_lens: a sequence of 49 tokens needs more than the table's 3"):
        paged_kv_indices(tables, [49, 0, 0, 0], block_size=16)


@settings(max_examples=50, deadline=None)
@given(tables_and_tokens(), st.data())
def test_the_page_table_gives_back_each_length_and_its_blocks(case, data):
    tables, _, _, b = case
    lens = np.array(data.draw(st.lists(st.integers(0, tables.shape[1] * b), min_size=len(tables),
                                       max_size=len(tables))))
    indptr, indices, last = paged_kv_indices(tables, lens, block_size=b)
    pages = np.diff(indptr)
    assert np.all((last >= 1) & (last <= b) | (lens == 0) & (last == 0))
    assert np.array_equal(np.where(pages > 0, (pages - 1) * b + last, 0), lens)
    for s in range(len(tables)):
        assert indices[indptr[s]:indptr[s + 1]].tolist() == tables[s, :pages[s]].tolist()


# --- the block manager against a naive model --------------------------------------------------

class Naive:
    """Sequences as lists of block numbers in a dict; a block's count is recomputed by
    scanning every table; tokens written are recorded per block, so a write reaching a
    block another table holds shows."""

    def __init__(self, total, b, reserved):
        self.total, self.b, self.reserved = total, b, reserved
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def holders(self, block):
        return sum(t.count(block) for t in self.tables.values())


def _check_against(naive: Naive, m: BlockManager):
    held = {blk for t in m.sequences() for blk in m.table(t)}
    assert m.num_free() + len(held) == naive.total - naive.reserved  # conserved
    assert {b: naive.holders(b) for b in held} == m.refcounts()  # counts = tables holding
    assert not set(m.free_queue()) & held and len(set(m.free_queue())) == m.num_free()
    assert (0 not in held and 0 not in m.free_queue()) if naive.reserved else True
    assert {s: len(m.table(s)) for s in m.sequences()} == {s: -(-n // naive.b) for s, n in naive.lengths.items()}


def _state(m: BlockManager):
    return {s: m.table(s) for s in m.sequences()}, m.sequences(), m.refcounts(), m.free_queue()


def _apply(naive: Naive, m: BlockManager, method: str, args: dict):
    """One step on the manager, the naive model following; a refusal changes nothing
    (tables, lengths, counts, the free queue's order)."""
    before = _state(m)
    try:
        out = getattr(m, method)(**args)
    except ValueError:
        assert _state(m) == before
        return
    if method == "add_sequence":
        naive.tables[args["seq"]], naive.lengths[args["seq"]] = list(out), args["tokens"]
    elif method == "fork":
        naive.tables[args["child"]] = list(naive.tables[args["parent"]])
        naive.lengths[args["child"]] = naive.lengths[args["parent"]]
    elif method == "free":
        table = naive.tables.pop(args["seq"])
        del naive.lengths[args["seq"]]
        assert out == [b for b in table if naive.holders(b) == 0]
    elif method == "append":
        seq, n = args["seq"], args["tokens"]
        table, length = naive.tables[seq], naive.lengths[seq]
        for src, dst in out["copies"]:
            assert table[-1] == src and naive.holders(src) > 1
            table[-1] = dst
        table += out["new"]
        naive.lengths[seq] = length + n
        written = {table[p // naive.b] for p in range(length, length + n)}
        assert all(naive.holders(b) == 1 for b in written)  # a write never reaches a shared block
    _check_against(naive, m)


class ManagerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.m = None

    @rule(total=st.integers(1, 9), b=st.sampled_from([1, 2, 4]), null=st.booleans())
    @precondition(lambda self: self.m is None)
    def start(self, total, b, null):
        if null and total < 2:
            with pytest.raises(ValueError, match="num_blocks"):
                BlockManager(total, b, null)
            return
        self.m, self.naive = BlockManager(total, b, null), Naive(total, b, int(null))

    @rule(draw=st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(0, 9)))
    @precondition(lambda self: self.m is not None)
    def act(self, draw):
        method, args = step(self.m, draw)
        _apply(self.naive, self.m, method, args)

    @invariant()
    def consistent(self):
        if self.m is not None:
            _check_against(self.naive, self.m)


TestManagerAgainstNaiveModel = ManagerMachine.TestCase
TestManagerAgainstNaiveModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


@pytest.mark.deep
def test_a_hundred_thousand_random_operations_keep_the_invariants():
    rng = random.Random(12)
    done = 0
    while done < 100_000:
        total, b, null = rng.randint(2, 40), rng.choice([1, 2, 4, 16]), rng.random() < 0.5
        m, naive = BlockManager(total, b, null), Naive(total, b, int(null))
        for _ in range(500):
            method, args = step(m, (rng.randint(0, 7), rng.randint(0, 7), rng.randint(0, 40)))
            _apply(naive, m, method, args)
        done += 500


# --- the judge: correct twins pass, wrong ones fail (traces, and the search alone) ----------

BOTH = Implementation("x", {MANAGER.name: BlockManager}, variants={MANAGER.name: {"null_block": [False, True]}})


def _judge(factory, *, examples=0, golden=None):
    """`golden`: a folder without traces (with the catalog's emptied): the search alone."""
    op = MANAGER if golden is None else dataclasses.replace(MANAGER, vectors=lambda: [])
    report = OpReport(op.name, op.kind.value, op.spec)
    run_op(op, factory, BOTH, Settings(examples=examples, shrink=False, golden=golden), report, None)
    return report


class HighIdsFirst(BlockManager):
    """Correct: ids handed out from the top (renaming makes the choice free)."""

    def __init__(self, num_blocks, block_size=16, null_block=False):
        super().__init__(num_blocks, block_size, null_block)
        self._free.reverse()


class GivesBackOnRefusal(numpy_paged.BlockManager):
    """Correct: takes blocks one at a time and, refused for capacity, puts them back on
    its stack (in another order): which free id comes next is not observable."""

    def take(self, n):
        out = []
        for _ in range(n):
            if not self.stack:
                for b in out:
                    self.refs[b] = 0
                self.stack += out  # the most recently taken on top: the free order changed
                raise ValueError(f"{n} blocks needed, {len(out)} free")
            out.append(self.stack.pop())
            self.refs[out[-1]] = 1
        return out


@pytest.mark.parametrize("twin", [numpy_paged.BlockManager, HighIdsFirst, GivesBackOnRefusal])
def test_correct_twins_pass_through_renaming(twin):
    report = _judge(twin, examples=25)
    assert report.verdict == "pass", [f.describe() for f in report.failures]
    assert report.vectors_passed == len(MANAGER.vectors()) and report.examples >= 25


MANAGER_BUGS = {n: e for n, e in cache_paged.PAGED_BUGS.items() if e[0] == "cache.block_manager"}

# A manager that refuses what the oracle refuses but changed its state first: the golden
# trace aimed at it goes on past the refusal, and diverges at this later step.
REFUSAL_STEP = {
    "refused fork counts the parent's blocks": ("trace 25", "step 7: free(seq=0)"),
    "refused fork replaces the child's table": ("trace 25", "step 5: table(seq=1)"),
    "refused fork registers the child": ("trace 26", "step 3: table(seq=1)"),
    "refused add registers the sequence": ("trace 27", "step 3: table(seq=1)"),
    "refused add keeps the blocks it took": ("trace 27", "step 4: num_free()"),
    "refused duplicate add takes blocks": ("trace 28", "step 3: num_free()"),
    "refused negative add registers the sequence": ("trace 29", "step 3: table(seq=1)"),
    "refused append records the length": ("trace 30", "step 4: append(seq=0, tokens=3)"),
    "refused append takes the CoW block": ("trace 31", "step 4: table(seq=1)"),
    "refused append keeps the blocks it took": ("trace 30", "step 3: num_free()"),
    "refused append registers the sequence": ("trace 32", "step 3: table(seq=5)"),
    "refused negative append copies the block": ("trace 33", "step 4: table(seq=1)"),
    "refused table read registers the sequence": ("trace 32", "step 4: add_sequence(seq=5, tokens=1)"),
}


@pytest.mark.parametrize("name", sorted(REFUSAL_STEP))
def test_a_refusal_that_changed_the_state_diverges_after_it(name):
    trace, where = REFUSAL_STEP[name]
    failures = {f.where: f for f in _judge(MANAGER_BUGS[name][2]).failures}
    assert trace in failures, (name, sorted(failures))
    detail = failures[trace].detail
    assert detail.startswith(f"first divergence at {where}"), detail
    assert "-> refused (" in detail  # the candidate refused the step too, as it should: the damage shows later


def test_the_steps_draw_every_refusal_once_there_is_state():
    """One step in 8 (plus the valid kinds' own misses) is a call the oracle refuses, of
    every kind, drawn against the current state."""
    rng = random.Random(5)
    refused, drawn, kinds = 0, 0, set()
    for _ in range(300):
        m = BlockManager(rng.randint(2, 10), rng.choice([1, 2, 4]), rng.random() < 0.5)
        m.add_sequence(0, rng.randint(0, m.block_size))
        for _ in range(10):
            draw = (rng.randint(0, 7), rng.randint(0, 7), rng.randint(0, 9))
            method, args = step(m, draw)
            drawn, live = drawn + 1, bool(m.sequences())
            try:
                getattr(m, method)(**args)
            except ValueError:
                refused += 1
                kinds.add(draw[1] if draw[0] == 7 else None)
            else:
                assert draw[0] != 7 or not live, (draw, method, args)
    assert kinds >= set(range(8)) and 0.12 < refused / drawn < 0.3, (kinds, refused / drawn)


@pytest.mark.deep  # a search: how many examples it needs depends on hypothesis' version
@pytest.mark.parametrize("name", sorted(MANAGER_BUGS))
def test_each_wrong_manager_is_found_by_the_property_search_alone(name, tmp_path):
    report = _judge(MANAGER_BUGS[name][2], examples=600, golden=tmp_path)  # the slowest need ~260 on some draws
    assert report.vectors_run == 0 and report.verdict == "fail", name
    assert [f.where for f in report.failures] == ["property"]


@pytest.mark.deep
def test_the_default_kernels_agree_with_the_oracles_on_many_random_cases():
    from ref.conformance.runner import run

    impl = Implementation(numpy_paged.NAME, numpy_paged.OPS, variants=numpy_paged.VARIANTS)
    report = run(impl, ops=sorted(numpy_paged.OPS), examples=400, shrink=False)
    assert [r.verdict for r in report.ops] == ["pass"] * 4, [f.describe() for r in report.ops for f in r.failures]


def _torch_reshape_and_cache(torch, key, value, slots, k_cache, v_cache):
    """What an engine's torch fallback does: index_put_ into [blocks * B, Hkv, D] views of
    the caches, on integer views of the bits, padding tokens masked out."""
    def bits(a):
        return torch.from_numpy(a.view(f"i{a.itemsize}").copy())

    kc, vc, k, v, s = bits(k_cache), bits(v_cache), bits(key), bits(value), torch.from_numpy(slots)
    keep = s >= 0
    kc.view(-1, *kc.shape[2:]).index_put_((s[keep],), k[keep])
    vc.view(-1, *vc.shape[2:]).index_put_((s[keep],), v[keep])
    return kc.numpy().view(k_cache.dtype), vc.numpy().view(v_cache.dtype)


def test_torch_index_put_writes_the_same_bits():
    torch = pytest.importorskip("torch")
    from ref.testing.vector_files import load_vectors

    checked = 0
    for v in load_vectors("cache.reshape_and_cache"):
        if v.result == "valid" and v.params.get("layout", "vllm") == "vllm":
            x = v.inputs
            got = _torch_reshape_and_cache(torch, x["key"], x["value"], x["slots"], x["key_cache"], x["value_cache"])
            assert all(g.tobytes() == e.tobytes() for g, e in zip(got, v.expected)), v.comment
            checked += 1
    assert checked >= 5

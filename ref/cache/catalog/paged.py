"""Paged KV storage (exact): slot mapping, writing K and V by slot, FlashInfer's page table.

  cache.slot_mapping        (block_tables, seq_ids, positions; block_size) -> slots [T] int64
  cache.reshape_and_cache   (key, value, slots, caches; layout) -> (key_cache, value_cache)
  cache.paged_kv_indices    (block_tables, seq_lens; block_size) -> (indptr, indices, last_page_len)

The block manager (the stateful op) is in ref.cache.catalog.block_manager.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.cache.catalog.common import AREA
from ref.cache.paged import Layout, paged_kv_indices, reshape_and_cache, slot_mapping
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import Comparison, Mismatch, compare_exact, compare_parts
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "LAYOUT", "OPERATIONS", "compare_bits"]

FLAGS = {
    **{name: COMMON[name] for name in (EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM)},
    "SlotOffset": Flag("a token's slot from the wrong block column or offset (pos // B or pos % B off by one)",
                       "K and V land in a neighbour's slot: attention later reads another token's keys"),
    "Int32Slots": Flag("block id * B computed in int32 (or slots stored as int32)",
                       "past 2^31 slots (2^27 blocks of 16) the slot wraps negative: a write far from its block"),
    "Padding": Flag("a padding token (seq id -1, slot -1) mapped to a slot or written",
                    "padding garbage overwrites a real token's K and V"),
    "PageLayout": Flag("FlashInfer's HND page read as NHD (or the reverse): the head and token axes swapped",
                       "with Hkv == B the shapes agree and every head's keys go to another token"),
    "Untouched": Flag("slots other than the written ones changed (cache zeroed, rebuilt, or converted)",
                      "other sequences' K and V, or NaN payloads in unused slots, are lost"),
    "LastPage": Flag("last_page_len as seq_len % B (0 for a full last page) or the page count floored",
                     "a sequence whose length is a multiple of B loses its last page's tokens"),
}

LAYOUT = Variant("layout", Layout, Layout.VLLM, "vLLM's separate or stacked [blocks, B, Hkv, D] caches, or "
                 "FlashInfer's [pages, 2, B, Hkv, D] (NHD) or [pages, 2, Hkv, B, D] (HND) pages")

BIG_BLOCK = (1 << 27) + 5  # slot = id * 16 + offset is past 2^31


def _ints(**arrays) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.int64) for k, v in arrays.items()}


# --- slot_mapping ---------------------------------------------------------------------------

def _slot_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("cache.slot_mapping"))
    out = []

    def add(comment, flags, inputs, block_size, result="valid"):
        out.append(VectorSpec(comment, tuple(flags), Case(inputs, {"block_size": block_size}), result))

    tables = np.array([[7, 2, 9, -1], [4, -1, -1, -1], [0, 5, 1, 3]])
    for b in (1, 16, 32):
        last = np.array([2 * b + b // 2, b // 2, 4 * b - 1])  # a decode step: each sequence's newest token
        add(f"a decode batch, B={b}: one token per sequence, in a partial or the last full block",
            ["SlotOffset"], _ints(block_tables=tables, seq_ids=[0, 1, 2], positions=last), b)
        chunk = np.arange(max(b - 3, 0), b + 3)
        add(f"a prefill chunk crossing block boundaries, B={b}", ["SlotOffset"],
            _ints(block_tables=tables, seq_ids=[2] * chunk.size, positions=chunk), b)
        add(f"padding tokens (seq id -1) get slot -1 whatever their position, B={b}", ["Padding"],
            _ints(block_tables=tables, seq_ids=[0, -1, 1, -1, -1], positions=[1, 0, 0, 999, -5]), b)
    for b in (16, 32):
        big = np.array([[BIG_BLOCK, BIG_BLOCK + 1], [(1 << 28) - 1, 3]], np.int32)  # an int32 table, as engines keep
        add(f"block ids past 2^27 in an int32 table, B={b}: slots past 2^31 (int32 slot arithmetic wraps)",
            ["Int32Slots"], {"block_tables": big, **_ints(seq_ids=[0, 0, 1, 1], positions=[0, 2 * b - 1, b - 1, b])}, b)
    add("an empty batch gives no slots", [EMPTY_INPUT], _ints(block_tables=tables, seq_ids=[], positions=[]), 16)
    table = rng.permutation(64)[:24].reshape(3, 8)
    seqs = rng.integers(-1, 3, 40)
    add("random tokens of three sequences and padding, B=16", [RANDOM, "SlotOffset", "Padding"],
        _ints(block_tables=table, seq_ids=seqs, positions=rng.integers(0, 128, 40)), 16)
    bad = [("a position past the block table is rejected", dict(seq_ids=[1], positions=[64])),
           ("a real token in an unallocated block (-1) is rejected", dict(seq_ids=[1], positions=[16])),
           ("a negative position of a real token is rejected", dict(seq_ids=[0], positions=[-1])),
           ("a sequence id past the table's rows is rejected", dict(seq_ids=[3], positions=[0])),
           ("a sequence id of -2 is rejected (-1 is padding)", dict(seq_ids=[-2], positions=[0])),
           ("positions and seq_ids of different lengths are rejected", dict(seq_ids=[0, 1], positions=[0]))]
    for comment, inputs in bad:
        add(comment, [INVALID_INPUT], _ints(block_tables=tables, **inputs), 16, "invalid")
    add("float positions are rejected (TypeError)", [INVALID_INPUT],
        {**_ints(block_tables=tables, seq_ids=[0]), "positions": np.array([1.0])}, 16, "invalid")
    add("a block size of 0 is rejected", [INVALID_INPUT], _ints(block_tables=tables, seq_ids=[0], positions=[0]),
        0, "invalid")
    # adv12 #1: with every column allocated, position -1 read as Python's index -1 (pos // B = -1) lands in the
    # last column's block (slot 5 * 16 + 15) instead of being refused; the vector above has -1 in its last column
    add("a negative position is rejected when the table's last column is allocated (no wrap to it)",
        [INVALID_INPUT], _ints(block_tables=[[7, 2, 5]], seq_ids=[0], positions=[-1]), 16, "invalid")
    # adv12 #2: bool arrays are not integer ids (True read as block 1 / sequence 1 / position 1)
    one = _ints(block_tables=[[7, 2, 5]], seq_ids=[0], positions=[1])
    for name, flags in (("block_tables", [[True, False, True]]), ("seq_ids", [False]), ("positions", [True])):
        add(f"bool {name} are rejected (TypeError)", [INVALID_INPUT], {**one, name: np.array(flags)}, 16, "invalid")
    return out


def _random_tables(rng: np.random.Generator, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """A block table of distinct ids with -1 past each sequence's blocks, and lengths."""
    seqs, width = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    lens = rng.integers(0, width * block_size + 1, seqs)
    ids = rng.permutation(seqs * width + 4)[:seqs * width].reshape(seqs, width)
    used = np.arange(width) < -(-lens[:, None] // block_size)
    return np.where(used, ids, -1), lens


def _slot_case(seed: int, block_size: int) -> Case:
    rng = np.random.default_rng(seed)
    tables, lens = _random_tables(rng, block_size)
    real = [(s, p) for s, n in enumerate(lens) for p in range(n)]
    tokens = int(rng.integers(0, 12))
    picks = [real[i] for i in rng.integers(0, len(real), tokens)] if real else []
    picks += [(-1, int(rng.integers(-3, 50)))] * int(rng.integers(0, 3))  # padding
    seq_ids, positions = (list(x) for x in zip(*picks)) if picks else ([], [])
    return Case(_ints(block_tables=tables, seq_ids=seq_ids, positions=positions), {"block_size": block_size})


def _slot_examples(supported):
    return st.tuples(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 16])).map(lambda t: _slot_case(*t))


# --- reshape_and_cache ------------------------------------------------------------------------

CACHE_DTYPES = {"float32": (np.float32, np.uint32), "float16": (np.float16, np.uint16),
                "bfloat16": (np.uint16, np.uint16)}  # bfloat16 travels as its uint16 bits


def _fill(rng: np.random.Generator, shape, dtype_name: str, *, nan_sentinel: bool) -> np.ndarray:
    """Random bits of finite values (a cache: NaNs with distinct payloads, unused slots' marks)."""
    store, bits = CACHE_DTYPES[dtype_name]
    width = 8 * np.dtype(bits).itemsize
    mant = {"float32": 23, "float16": 10, "bfloat16": 7}[dtype_name]
    exp_max = (1 << (width - 1 - mant)) - 1
    if nan_sentinel:  # exponent all ones, payload nonzero: a NaN with its own payload per element
        payload = rng.integers(1, 1 << mant, shape, dtype=np.int64)
        raw = (np.int64(exp_max) << mant) | payload
    else:
        raw = (rng.integers(1, exp_max - 1, shape, dtype=np.int64) << mant) | rng.integers(0, 1 << mant, shape)
    raw = raw | (rng.integers(0, 2, shape) << (width - 1))
    return raw.astype(bits).view(store)


def _cache_case(rng, layout: str, dtype_name: str, slots, *, blocks=4, b=4, heads=2, d=8, dv=None,
                nan_keys=False) -> Case:
    dv = d if dv is None or layout != "vllm" else dv
    tokens = len(slots)
    key = _fill(rng, (tokens, heads, d), dtype_name, nan_sentinel=False)
    value = _fill(rng, (tokens, heads, dv), dtype_name, nan_sentinel=False)
    if nan_keys and tokens:
        key[0] = _fill(rng, key[0].shape, dtype_name, nan_sentinel=True)  # NaN payloads copied as they are
    inputs = {"key": key, "value": value, "slots": np.asarray(slots, np.int64)}
    if layout == "vllm":
        inputs["key_cache"] = _fill(rng, (blocks, b, heads, d), dtype_name, nan_sentinel=True)
        inputs["value_cache"] = _fill(rng, (blocks, b, heads, dv), dtype_name, nan_sentinel=True)
    else:
        shape = {"vllm_stacked": (2, blocks, b, heads, d), "flashinfer_nhd": (blocks, 2, b, heads, d),
                 "flashinfer_hnd": (blocks, 2, heads, b, d)}[layout]
        inputs["kv_cache"] = _fill(rng, shape, dtype_name, nan_sentinel=True)
    return Case(inputs, {"layout": layout})


def _cache_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("cache.reshape_and_cache"))
    out = []
    for layout in LAYOUT.values:
        def add(comment, flags, result="valid", **kw):
            dtype_name = kw.pop("dtype", "float16")
            case = _cache_case(rng, layout, dtype_name, kw.pop("slots"), **kw)
            out.append(VectorSpec(f"{comment} ({layout}, {dtype_name})", tuple(flags), case, result))

        for dtype_name in CACHE_DTYPES:
            add("a decode step: three tokens into three blocks; unused slots hold NaN payloads, kept bit for bit",
                ["SlotOffset", "Untouched", "PageLayout"], slots=[5, 10, 15], dtype=dtype_name)
        add("a prefill chunk filling a block and part of the next, Hkv == B (a layout swap keeps the shapes)",
            ["SlotOffset", "PageLayout", "Untouched"], slots=list(range(2, 9)), heads=4)
        add("padding slots (-1) are skipped", ["Padding", "Untouched"], slots=[-1, 6, -1, 0], dtype="float32")
        add("keys with NaN payloads and signs are copied bit for bit", [NAN, "Untouched"], slots=[3, 12],
            nan_keys=True, dtype="float32")
        add("no tokens: the caches come back unchanged", [EMPTY_INPUT, "Untouched"], slots=[])
        add("a duplicate slot is rejected", [INVALID_INPUT], "invalid", slots=[4, 4])
        add("a slot past the cache is rejected", [INVALID_INPUT], "invalid", slots=[16])
        add("a slot of -2 is rejected (-1 is the skip mark)", [INVALID_INPUT], "invalid", slots=[-2])

    def refused(comment, case):
        out.append(VectorSpec(comment, (INVALID_INPUT,), case, "invalid"))

    case = _cache_case(rng, "vllm", "float16", [1, 2], dv=4)
    out.append(VectorSpec("value head dim 4 beside key head dim 8 (vllm)", ("SlotOffset", "Untouched"), case))
    stacked = _cache_case(rng, "vllm_stacked", "float16", [1])
    refused("vllm_stacked with a value_cache beside kv_cache is rejected",
            Case({**stacked.inputs, "value_cache": stacked.inputs["kv_cache"][1]}, stacked.params))
    vllm = _cache_case(rng, "vllm", "float16", [1])
    refused("vllm without value_cache is rejected",
            Case({k: v for k, v in vllm.inputs.items() if k != "value_cache"}, vllm.params))
    refused("key of another dtype than the cache is rejected (TypeError)",
        Case({**vllm.inputs, "key": vllm.inputs["key"].astype(np.float32)}, vllm.params))
    # adv12 #3: the value cache's blocks, B and Hkv checked against the key cache's (here 5 blocks beside 4: a
    # kernel checking only each cache against its own K or V accepts it, writing V by the key cache's geometry)
    refused("a value_cache of 5 blocks beside a key_cache of 4 is rejected (vllm)",
            Case({**vllm.inputs, "value_cache": _fill(rng, (5, 4, 2, 8), "float16", nan_sentinel=True)}, vllm.params))
    return out


def _cache_example(seed: int, layout: str) -> Case:
    rng = np.random.default_rng(seed)
    blocks, b = int(rng.integers(1, 5)), int(rng.choice([1, 2, 4]))
    tokens = int(rng.integers(0, blocks * b + 1))
    slots = rng.permutation(blocks * b)[:tokens]
    slots[rng.random(tokens) < 0.2] = -1
    return _cache_case(rng, layout, str(rng.choice(list(CACHE_DTYPES))), slots, blocks=blocks, b=b,
                       heads=int(rng.integers(1, 4)), d=int(rng.integers(1, 5)), dv=int(rng.integers(1, 5)))


def _cache_examples(supported):
    return st.tuples(st.integers(0, 2**32 - 1), variant_params(supported)).map(
        lambda t: _cache_example(t[0], t[1]["layout"]))


def compare_bits(expected, actual) -> Comparison:
    """Bit for bit, NaN payloads included: the same dtype and shape, equal bit patterns."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.dtype != expected.dtype:
        return Comparison(False, expected.size, expected.size, np.inf, "bits",
                          problem=f"dtype: expected {expected.dtype}, got {actual.dtype}")
    unsigned = f"u{expected.dtype.itemsize}"
    cmp = compare_exact(expected.view(unsigned), actual.view(unsigned))
    if cmp.ok or cmp.first is None:
        return cmp
    # the values as floats where they are floats, and the worst distance as differing bits
    i, width = cmp.first.index, 2 * expected.dtype.itemsize
    shown = [repr(x.item()) if expected.dtype.kind == "f" else str(x.item()) for x in (expected[i], actual[i])]
    raw = [int(x.view(unsigned)) for x in (expected[i], actual[i])]
    flips = np.bitwise_xor(expected.view(unsigned), actual.view(unsigned)).astype(np.uint64)
    most = max(bin(int(x)).count("1") for x in np.unique(flips))
    return replace(cmp, worst=float(most), unit="differing bits",
                   first=Mismatch(i, *shown, *(f"0x{r:0{width}x}" for r in raw)))


def _cache_format(name: str, arr: np.ndarray) -> str | None:
    floats = ("key", "value", "key_cache", "value_cache", "kv_cache")
    return "bfloat16" if name in floats and arr.dtype == np.uint16 else None


# --- paged_kv_indices ----------------------------------------------------------------------------

def _indices_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("cache.paged_kv_indices"))
    tables = np.array([[3, -1, -1], [0, 6, -1], [-1, -1, -1], [1, 2, 5]])

    def spec(comment, flags, seq_lens, block_size, result="valid", table=tables):
        return VectorSpec(comment, tuple(flags), Case(_ints(block_tables=table, seq_lens=seq_lens),
                                                      {"block_size": block_size}), result)

    out = [spec("a partial, a full, an empty and a three-page sequence, B=16", ["LastPage", EMPTY_INPUT],
                [5, 32, 0, 33], 16),
           spec("every last page full, B=4", ["LastPage"], [4, 8, 0, 12], 4),
           spec("B=1: a page per token, every last page holds 1", ["LastPage"], [1, 2, 0, 3], 1),
           spec("no sequences", [EMPTY_INPUT], np.zeros(0), 16, table=np.zeros((0, 3))),
           spec("a sequence longer than its table is rejected", [INVALID_INPUT], [17, 0, 0, 0], 16, "invalid"),
           spec("a page holding tokens that is -1 is rejected", [INVALID_INPUT], [0, 0, 1, 0], 16, "invalid"),
           spec("a negative length is rejected", [INVALID_INPUT], [-1, 0, 0, 0], 16, "invalid"),
           spec("lengths not one per row are rejected", [INVALID_INPUT], [1, 1], 16, "invalid")]
    for b in (4, 16):
        table, lens = _random_tables(rng, b)
        out.append(spec(f"random lengths, B={b}", [RANDOM, "LastPage"], lens, b, table=table))
    return out


def _indices_examples(supported):
    def case(seed, b):
        tables, lens = _random_tables(np.random.default_rng(seed), b)
        return Case(_ints(block_tables=tables, seq_lens=lens), {"block_size": b})
    return st.tuples(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 16])).map(lambda t: case(*t))


OPERATIONS = [
    AREA.exact("slot_mapping", slot_mapping, anchor="slot-mapping",
               summary="block_tables [S, M], seq_ids [T], positions [T]; block_size -> slots [T] int64 (-1: padding)",
               vectors=_slot_vectors, examples=_slot_examples, compare=compare_exact),
    AREA.exact("reshape_and_cache", reshape_and_cache, anchor="reshape-and-cache",
               summary="key [T, Hkv, D], value [T, Hkv, Dv], slots [T], caches -> (key_cache, value_cache), "
                       "bit copies by slot", variants=(LAYOUT,), vectors=_cache_vectors, examples=_cache_examples,
               outputs=("key_cache", "value_cache"), array_format=_cache_format,
               compare=partial(compare_parts, names=("key_cache", "value_cache"),
                               comparators=(compare_bits, compare_bits))),
    AREA.exact("paged_kv_indices", paged_kv_indices, anchor="paged-kv-indices",
               summary="block_tables [S, M], seq_lens [S]; block_size -> (indptr [S+1], indices, last_page_len [S])",
               vectors=_indices_vectors, examples=_indices_examples, outputs=("indptr", "indices", "last_page_len"),
               compare=partial(compare_parts, names=("indptr", "indices", "last_page_len"),
                               comparators=(compare_exact,) * 3)),
]

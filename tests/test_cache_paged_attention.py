"""cache.paged_attention: the oracle against hand computations and against attend on
caches gathered here by a loop, the properties paging must keep (block ids are
names, shared blocks are read like private copies, slots past a length are never
read), the argument checks, and the correct alternatives and negative controls."""

from __future__ import annotations

import math

import numpy as np
import pytest
from corpus import cache_paged_attention as corpus
from hypothesis import given, settings

from ref.attention.attend import attend
from ref.cache.catalog.paged_attention import paged_attention_cases, paged_inputs
from ref.cache.paged_attention import gather_kv, paged_attention, token_blocks
from ref.conformance.adapters import numpy_paged_attention
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.testing.vector_files import load_vectors

OP = "cache.paged_attention"


def _inputs(seed=0, lens=(5, 16, 37), queries=(1, 1, 1), hq=4, hkv=2, d=8, size=16, **kw):
    return paged_inputs(np.random.default_rng(seed), list(lens), list(queries), hq, hkv, d, size, **kw)


def test_one_and_two_keys_by_hand():
    """Sequence 0: one key, so out = its value and lse = q.k; sequence 1: logits 0 and
    log 3 (D = 1, scale 1), weights 1/4 and 3/4, lse = log 4. Blocks of 4 slots, the
    keys in blocks 2 and 1; every other slot NaN."""
    kc = np.full((3, 4, 1, 1), np.nan)
    vc = np.full((3, 4, 1, 2), np.nan)
    kc[2, 0], vc[2, 0] = 3.0, [5.0, -7.0]
    kc[1, 0], kc[1, 1] = 0.0, math.log(3)
    vc[1, 0], vc[1, 1] = [4.0, 0.0], [0.0, 8.0]
    q = np.array([[[0.5]], [[1.0]]])  # [T = 2, Hq = 1, D = 1]
    out, lse = paged_attention(q, kc, vc, np.array([[2], [1]]), np.array([1, 2]), np.array([0, 1, 2]), scale=1.0)
    np.testing.assert_allclose(out[:, 0], [[5.0, -7.0], [1.0, 6.0]], rtol=1e-14)
    np.testing.assert_allclose(lse[0], [1.5, math.log(4)], rtol=1e-14)


def _gathered_by_loop(x):
    """Each sequence's keys and values, position by position, through its table."""
    size = x["key_cache"].shape[1]
    out = []
    for s, n in enumerate(x["seq_lens"]):
        slots = [(x["block_tables"][s][p // size], p % size) for p in range(n)]
        k = np.array([x["key_cache"][b, o] for b, o in slots]).reshape(n, *x["key_cache"].shape[2:])
        v = np.array([x["value_cache"][b, o] for b, o in slots]).reshape(n, *x["value_cache"].shape[2:])
        out.append((k, v))
    return out


@pytest.mark.parametrize("kw", [
    {},
    {"lens": (45, 20), "queries": (7, 20)},
    {"lens": (40, 35, 32), "queries": (1, 3, 1), "shared_blocks": 2, "pad": -1},
    {"lens": (3, 0, 7), "queries": (2, 1, 3), "size": 1, "hq": 6, "hkv": 3, "dv": 4},
])
def test_equals_attend_per_sequence_on_keys_gathered_by_a_loop(kw):
    x = _inputs(**kw)
    out, lse = paged_attention(**x)
    cq = x["cu_seqlens_q"]
    for s, (k, v) in enumerate(_gathered_by_loop(x)):
        rows = slice(cq[s], cq[s + 1])
        o, l = attend(x["q"][None, rows], k[None], v[None], causal=True)
        np.testing.assert_array_equal(out[rows], o[0])
        np.testing.assert_array_equal(lse[:, rows], l[0])


def _renumbering_keeps_every_bit(case):
    x = case.inputs
    blocks = x["key_cache"].shape[0]
    perm = np.random.default_rng(blocks).permutation(blocks)  # old block b moves to perm[b]
    moved = dict(x)
    moved["key_cache"], moved["value_cache"] = np.empty_like(x["key_cache"]), np.empty_like(x["value_cache"])
    moved["key_cache"][perm], moved["value_cache"][perm] = x["key_cache"], x["value_cache"]
    tables = x["block_tables"]
    moved["block_tables"] = np.where(tables >= 0, perm[np.clip(tables, 0, None)], tables).astype(tables.dtype)
    for a, b in zip(paged_attention(**x, **case.params), paged_attention(**moved, **case.params)):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=15, deadline=None)
@given(paged_attention_cases())
def test_block_ids_are_names(case):
    """Renumbering the physical blocks (the cache's blocks permuted, the tables
    remapped) leaves every output bit unchanged."""
    _renumbering_keeps_every_bit(case)


@pytest.mark.deep
@settings(max_examples=400, deadline=None)
@given(paged_attention_cases())
def test_block_ids_are_names_deep(case):
    _renumbering_keeps_every_bit(case)


def test_slots_no_sequence_owns_are_never_read():
    """On every valid golden vector but the NaN one, the output has no NaN although
    the unowned slots hold NaN, and is the same bit for bit with those slots at 0."""
    vectors = [v for v in load_vectors(OP) if v.result == "valid" and "NaN" not in v.flags]
    assert len(vectors) >= 15
    for v in vectors:
        x = dict(v.inputs)
        owned = np.zeros(x["key_cache"].shape[:2], bool)  # [blocks, B]
        owned[token_blocks(x["block_tables"], x["seq_lens"], *owned.shape[::-1])] = True
        for cache in (x["key_cache"], x["value_cache"]):  # finite exactly where a sequence owns the slot
            np.testing.assert_array_equal(np.isfinite(cache).all(axis=(2, 3)), owned, err_msg=v.comment)
            assert np.isnan(cache[~owned]).all(), v.comment
        out, lse = paged_attention(**x, **v.params)
        assert not np.isnan(out).any() and not np.isnan(lse).any(), v.comment
        x["key_cache"], x["value_cache"] = np.nan_to_num(x["key_cache"]), np.nan_to_num(x["value_cache"])
        for a, b in zip((out, lse), paged_attention(**x, **v.params)):
            np.testing.assert_array_equal(a, b, err_msg=v.comment)


def test_paged_inputs_own_exactly_the_slots_of_the_lengths():
    x = _inputs(lens=(40, 35, 32), queries=(1, 1, 1), shared_blocks=2)
    finite = np.isfinite(x["key_cache"][..., 0, 0])  # [blocks, B]
    assert finite.sum() == 40 + (35 - 32) + (32 - 32)  # the shared 32 slots are stored once
    assert not finite[0].any()  # the null block
    assert (x["block_tables"][1:, :2] == x["block_tables"][0, :2]).all()


def test_a_shared_prefix_reads_like_private_copies():
    x = _inputs(lens=(40, 35, 33), queries=(1, 4, 2), shared_blocks=2)
    private = dict(x)
    extra = x["key_cache"].shape[0]
    shared = x["block_tables"][0, :2]
    private["key_cache"] = np.concatenate([x["key_cache"], x["key_cache"][shared], x["key_cache"][shared]])
    private["value_cache"] = np.concatenate([x["value_cache"], x["value_cache"][shared], x["value_cache"][shared]])
    tables = x["block_tables"].copy()
    tables[1, :2], tables[2, :2] = [extra, extra + 1], [extra + 2, extra + 3]
    private["block_tables"] = tables
    for a, b in zip(paged_attention(**x), paged_attention(**private)):
        np.testing.assert_array_equal(a, b)


def test_decode_is_the_last_row_of_the_prefill():
    x = _inputs(lens=(29,), queries=(29,), hq=2, hkv=1)
    out, lse = paged_attention(**x)
    decode = {**x, "q": x["q"][-1:], "cu_seqlens_q": np.array([0, 1])}
    o, l = paged_attention(**decode)
    np.testing.assert_allclose(o[0], out[-1], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(l[:, 0], lse[:, -1], rtol=1e-12)


def test_a_query_over_no_keys_gives_zero_and_minus_infinity():
    out, lse = paged_attention(**_inputs(lens=(0, 5), queries=(2, 1)))
    assert (out[:2] == 0).all() and (lse[:, :2] == -np.inf).all()
    assert np.isfinite(lse[:, 2]).all()


def test_gather_kv_offsets():
    kv = gather_kv(**{k: v for k, v in _inputs(lens=(5, 0, 18)).items() if k not in ("q", "cu_seqlens_q")})
    assert kv.cu_seqlens_k.tolist() == [0, 5, 5, 23] and kv.k.shape == (23, 2, 8)


@pytest.mark.parametrize("change, error, name", [
    (lambda x: {"seq_lens": x["seq_lens"].astype(np.float32)}, TypeError, "seq_lens"),
    (lambda x: {"seq_lens": x["seq_lens"][:2]}, ValueError, "seq_lens"),
    (lambda x: {"seq_lens": np.array([5, 16, 80])}, ValueError, "seq_lens"),
    (lambda x: {"block_tables": x["block_tables"][:, :, None]}, ValueError, "block_tables"),
    (lambda x: {"block_tables": np.full_like(x["block_tables"], -1)}, ValueError, "block_tables"),
    (lambda x: {"cu_seqlens_q": np.array([0, 1, 3])}, ValueError, "cu_seqlens_q"),
    (lambda x: {"cu_seqlens_q": np.array([0, 2, 1, 3])}, ValueError, "cu_seqlens_q"),
    (lambda x: {"value_cache": x["value_cache"][:, :, :1]}, ValueError, "value_cache"),
    (lambda x: {"key_cache": x["key_cache"][..., :4], "value_cache": x["value_cache"][..., :4]}, ValueError,
     "key_cache"),
    (lambda x: {"key_cache": x["key_cache"][:, :0], "value_cache": x["value_cache"][:, :0]}, ValueError,
     "key_cache"),
    (lambda x: {"q": x["q"][..., None]}, ValueError, "q"),
    (lambda x: {"q": x["q"][:, :3]}, ValueError, "key_cache"),
])
def test_bad_input_is_refused_naming_the_argument(change, error, name):
    x = _inputs()
    with pytest.raises(error, match=name):
        paged_attention(**{**x, **change(x)})


def test_an_empty_sequence_needs_no_valid_block():
    """Only the blocks a token lives in are checked: a length-0 row may be all -1."""
    x = _inputs(lens=(0, 4), queries=(1, 1))
    x["block_tables"][0] = -1
    assert paged_attention(**x)[0].shape == (2, 4, 8)


@pytest.mark.parametrize("precision", ["bfloat16", "float16", "float32"])
def test_correct_kernels_pass(precision):
    assert run(corpus.correct(precision), ops=[OP], examples=10).ok


def test_the_default_kernel_passes():
    impl = Implementation("default paged attention", numpy_paged_attention.OPS)
    assert run(impl, ops=[OP], examples=5).ok


def _zeros(**x):
    out, lse = numpy_paged_attention.paged_attention(**x)
    return np.zeros_like(out), lse


def _shuffled(**x):
    out, lse = numpy_paged_attention.paged_attention(**x)
    return out[::-1].copy(), lse[:, ::-1].copy()


@pytest.mark.parametrize("kernel", [_zeros, _shuffled])
def test_negative_controls_fail(kernel):
    report = run(Implementation("control", {OP: kernel}), ops=[OP], examples=0)
    assert not report.ok

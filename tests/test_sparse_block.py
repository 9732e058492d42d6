"""Block-sparse attention (ref.sparse.block, spec/sparse.md#block-sparse): the gather equals
masked dense attention under random block lists, the mask equals its element-by-element
definition, every block selected is dense attention, slots past the count and keys not
selected are never read, CSR round trips, and correct alternatives (another slot order,
float64, the emulated low precisions) pass the conformance run while negative controls
fail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.attention import attend as dense
from ref.conformance import runner
from ref.conformance.adapters import numpy_sparse_block as K
from ref.conformance.implementation import Implementation
from ref.sparse import block
from ref.sparse.catalog.block import block_lists, values


def _inputs(rng, b, lq, lk, hq, hkv, d=8, dv=None):
    dv = d if dv is None else dv
    return values(rng, (b, lq, hq, d)), values(rng, (b, lk, hkv, d)), values(rng, (b, lk, hkv, dv))


@st.composite
def _cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 3))
    h = draw(st.sampled_from(sorted({1, hkv, hq})))
    b, lq, lk = draw(st.integers(1, 2)), draw(st.integers(0, 9)), draw(st.integers(0, 30))
    bq, bk = draw(st.integers(1, 4)), draw(st.integers(1, 8))
    lists = block_lists(rng, b, h, -(-lq // bq), draw(st.integers(0, 5)), -(-lk // bk), counts=draw(st.booleans()))
    return _inputs(rng, b, lq, lk, hq, hkv), lists, dict(block_size_q=bq, block_size_k=bk,
                                                          causal=draw(st.booleans()))


@settings(max_examples=40)
@given(_cases())
def test_gather_equals_masked_dense_attend(case):
    (q, k, v), lists, params = case
    hq, h = q.shape[2], lists["block_indices"].shape[1]
    mask = block.block_mask(**lists, lq=q.shape[1], lk=k.shape[1], **params)[:, np.arange(hq) // (hq // h)]
    out, lse = block.attend(q, k, v, **lists, **params)
    want_out, want_lse = dense(q, k, v, mask=mask, causal=params["causal"])
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)


def test_mask_is_the_element_definition():
    """Key j is visible to row i of head h iff j // C is named by a read slot of row
    i // block_size_q (and j <= i + Lk - Lq when causal): a loop over elements."""
    rng = np.random.default_rng(3)
    for lq, lk, bq, bk, causal in [(7, 23, 3, 4, True), (5, 9, 1, 2, False), (4, 16, 2, 5, True)]:
        lists = block_lists(rng, 2, 2, -(-lq // bq), 3, -(-lk // bk), counts=True)
        got = block.block_mask(**lists, lq=lq, lk=lk, block_size_q=bq, block_size_k=bk, causal=causal)
        idx, n = lists["block_indices"], lists["counts"]
        for b, h, i, j in np.ndindex(got.shape):
            read = {int(x) for x in idx[b, h, i // bq, :n[b, h, i // bq]] if x >= 0}
            assert got[b, h, i, j] == ((j // bk) in read and (not causal or j <= i + lk - lq))


def test_every_block_selected_is_dense_attention():
    rng = np.random.default_rng(4)
    q, k, v = _inputs(rng, 1, 6, 21, 4, 2)
    every = np.tile(np.arange(6, dtype=np.int32)[::-1], (1, 2, 6, 1))  # all 6 blocks, any order
    for causal in (False, True):
        got = block.attend(q, k, v, every, block_size_k=4, causal=causal)
        for a, e in zip(got, dense(q, k, v, causal=causal)):
            np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-12)


def test_slots_past_the_count_are_never_read():
    """Anything past the count (out of range, repeats, negative) is accepted and ignored."""
    idx = np.array([[[[2, -7, 99], [1, 1, 1]]]], np.int32)
    mask = block.block_mask(idx, np.array([[[1, 1]]], np.int32), lq=2, lk=12, block_size_k=4)
    assert mask[0, 0, 0].tolist() == [False] * 8 + [True] * 4 and mask[0, 0, 1].tolist() == [False] * 4 + [True] * 4 + [False] * 4
    with pytest.raises(ValueError, match="outside|block in"):
        block.block_mask(idx, np.array([[[2, 1]]], np.int32), lq=2, lk=12, block_size_k=4)
    with pytest.raises(ValueError, match="twice"):
        block.block_mask(idx, np.array([[[1, 2]]], np.int32), lq=2, lk=12, block_size_k=4)


def test_values_not_selected_are_never_read():
    rng = np.random.default_rng(5)
    q, k, v = _inputs(rng, 1, 3, 16, 2, 1)
    k[:, :4], v[:, :4] = np.nan, np.inf  # block 0
    idx = np.array([[[[1, 3], [2, -1], [-1, 3]]]], np.int32)
    out, lse = block.attend(q, k, v, idx, block_size_k=4)
    assert np.isfinite(out).all() and np.isfinite(lse).all()


def test_empty_rows_are_zero_with_lse_minus_inf():
    rng = np.random.default_rng(6)
    q, k, v = _inputs(rng, 1, 3, 8, 1, 1)
    out, lse = block.attend(q, k, v, np.array([[[[-1], [0], [-1]]]], np.int32), block_size_k=4)
    assert (out[0, [0, 2]] == 0).all() and np.isneginf(lse[0, 0, [0, 2]]).all() and np.isfinite(lse[0, 0, 1])


def test_csr_round_trip_and_attend_csr_equals_attend():
    rng = np.random.default_rng(7)
    lists = block_lists(rng, 1, 1, 4, 3, 5, counts=True)
    indptr, indices = block.to_csr(**lists)
    back, counts = block.csr_lists(indptr, indices)
    read = block.valid_slots(**lists, num_blocks=5)[0, 0]
    assert [list(r[:c]) for r, c in zip(back, counts)] == [list(r[m]) for r, m in zip(lists["block_indices"][0, 0],
                                                                                     read)]
    q, k, v = _inputs(rng, 1, 8, 20, 2, 1)
    got = block.attend_csr(q[0], k[0], v[0], indptr, indices, block_size_q=2, block_size_k=4, causal=True)
    want = block.attend(q, k, v, **lists, block_size_q=2, block_size_k=4, causal=True)
    for a, e in zip(got, want):
        np.testing.assert_array_equal(a, e[0])


def _reversed_slots(q, k, v, block_indices, counts=None, **params):
    """The default kernel with the slots visited last to first: another summation order."""
    idx = K.ints(block_indices, "block_indices", 4)
    read = K.read_slots(idx, counts, K.num_key_blocks(np.shape(k)[1], params.get("block_size_k", 64)))
    return K._attend(q, k, v, np.ascontiguousarray(np.where(read, idx, -1)[..., ::-1]), None, **params)


def _float64(q, k, v, block_indices, counts=None, **params):
    """The oracle's gather, then attend, in float64 (a float64 kernel)."""
    return block.attend(q, k, v, block_indices, counts, **params)


def _emulated(precision):
    def kernel(q, k, v, block_indices, counts=None, **params):
        from ref.formats.minifloat import round_to
        out, lse = block.emulate_attend(precision, q, k, v, block_indices, counts, **params)
        return round_to(out, precision).astype(np.float32), lse.astype(np.float32)
    return kernel


@pytest.mark.parametrize("name, kernel, precision", [
    ("slots in reverse order", _reversed_slots, None),
    ("float64 gather", _float64, None),
    ("emulated bfloat16", _emulated("bfloat16"), "bfloat16"),
    ("emulated float16", _emulated("float16"), "float16"),
])
def test_correct_alternatives_pass(name, kernel, precision):
    impl = Implementation(name, {"sparse.block.attend": kernel},
                          precision={"sparse.block.attend": precision} if precision else {})
    (row,) = runner.run(impl, ops=["sparse.block.attend"], examples=5, shrink=False).ops
    assert row.verdict == "pass", [f.detail for f in row.failures]


@pytest.mark.parametrize("precision", ["bfloat16", "float16", "float32"])
def test_negative_controls_fail(precision):
    def zeros(q, k, v, block_indices, counts=None, **params):
        out, lse = K._attend(q, k, v, block_indices, counts, **params)
        return np.zeros_like(out), lse

    def shuffled(q, k, v, block_indices, counts=None, **params):
        out, lse = K._attend(q, k, v, block_indices, counts, **params)
        return out[:, ::-1].copy(), lse

    for kernel in (zeros, shuffled):
        impl = Implementation("control", {"sparse.block.attend": kernel}, precision={"sparse.block.*": precision})
        (row,) = runner.run(impl, ops=["sparse.block.attend"], examples=0, shrink=False).ops
        assert row.verdict == "fail"

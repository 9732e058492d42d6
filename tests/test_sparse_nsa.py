"""sparse.nsa.selected_attend and sparse.nsa.attend (spec/sparse.md#nsa): the selection
as masked dense attention, the reductions to dense attention, the branches and their
gates, the fla variant as the paper's with one block size, the default kernel and the
bug corpus (tests/corpus/sparse_nsa.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus import sparse_nsa
from ref.attention.attend import attend as dense
from ref.conformance.adapters import numpy_sparse_nsa as K
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.sparse import nsa
from ref.sparse.catalog.nsa import forward_inputs, selected_inputs
from ref.testing.attention_cases import grid

SMALL = {"block": 4, "stride": 2, "block_sel": 8, "n": 5, "window": 6}


def selection_mask(block_indices, block_counts, block_size, tq, tk, hq):
    """fla's rule, one query and slot at a time: the tokens of the used slots' blocks
    that are not after the query. [B, Hq, Tq, Tk]."""
    idx = np.asarray(block_indices)
    b, _, hkv, s = idx.shape
    nb = -(-tk // block_size)
    mask = np.zeros((b, hq, tq, tk), bool)
    for bi, t, h, slot in np.ndindex(b, tq, hkv, s):
        j = int(idx[bi, t, h, slot])
        if j < 0 or j >= nb or (block_counts is not None and slot >= block_counts[bi, t, h]):
            continue
        pos = t + tk - tq
        keys = [x for x in range(j * block_size, min((j + 1) * block_size, tk)) if x <= pos]
        g = hq // hkv
        mask[bi, h * g:(h + 1) * g, t, keys] = True
    return mask


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 16), st.integers(0, 16), st.sampled_from([1, 2, 3, 4]),
       st.integers(1, 2), st.integers(1, 2), st.integers(0, 4), st.booleans())
def test_selected_attend_is_masked_dense_attention(seed, tk, dq, bs, hkv, g, s, counts):
    rng = np.random.default_rng(seed)
    tq = min(dq, tk)
    x = selected_inputs(rng, 1, tq, hkv * g, hkv, s, bs, tk=tk)
    if counts:
        x["block_counts"] = rng.integers(0, s + 1, (1, tq, hkv))
    mask = selection_mask(x["block_indices"], x.get("block_counts"), bs, tq, tk, hkv * g)
    out, lse = nsa.selected_attend(**x, block_size=bs)
    want_out, want_lse = dense(x["q"], x["k"], x["v"], mask=mask)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)


def test_unused_slots_and_values_outside_the_selection_are_never_read():
    rng = np.random.default_rng(1)
    x = selected_inputs(rng, 1, 12, 2, 1, 3, 4, own=True, future=False)
    x["block_indices"][0, :, 0, 0] = 0
    x["block_indices"][0, :, 0, 1:] = [-1, 3]  # 3 blocks only: 3 is past the end
    clean, _ = nsa.selected_attend(**x, block_size=4)
    x["v"][0, 4:8] = np.nan  # block 1: never selected
    x["k"][0, 4:8] = np.inf
    out, lse = nsa.selected_attend(**x, block_size=4)
    np.testing.assert_array_equal(out, clean)
    other = {**x, "block_indices": np.where(x["block_indices"] < 0, -7, x["block_indices"])}
    np.testing.assert_array_equal(nsa.selected_attend(**other, block_size=4)[0], out)


def test_a_query_with_no_block_gives_zero_and_minus_inf():
    x = selected_inputs(np.random.default_rng(2), 1, 4, 2, 1, 2, 4)
    x["block_indices"][:] = -1
    out, lse = nsa.selected_attend(**x, block_size=4)
    assert not out.any() and (lse == -np.inf).all()


@pytest.mark.parametrize("bad", [{"block_indices": np.zeros((1, 4, 1, 2), np.int32)},  # block 0 twice
                                 {"block_counts": np.full((1, 4, 1), 3)}, {"block_size": 0}])
def test_selected_attend_rejects(bad):
    x = {**selected_inputs(np.random.default_rng(3), 1, 4, 2, 1, 2, 4), "block_size": 4, **bad}
    with pytest.raises((ValueError, TypeError)):
        nsa.selected_attend(**x)


def test_all_blocks_and_a_full_window_reduce_to_causal_attention():
    rng = np.random.default_rng(4)
    x = forward_inputs(rng, 1, 30, 4, 2, pe=4)
    want, _ = dense(x["q"], x["k"], x["v"], causal=True)
    br = nsa.branches(x["q"], x["k"], x["v"], x["pe_k"], x["pe_v"], **{**SMALL, "n": 4, "window": 30})
    np.testing.assert_allclose(br["o_slc"], want, atol=1e-12)  # n = 4 = every block of 8 in 30 tokens
    np.testing.assert_allclose(br["o_swa"], want, atol=1e-12)
    ones, zeros = np.ones((1, 30, 4)), np.zeros((1, 30, 4))
    got = nsa.attend(x["q"], x["k"], x["v"], zeros, ones, zeros, **{**SMALL, "n": 4})
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_attend_is_the_gated_sum_of_its_branches():
    rng = np.random.default_rng(5)
    x = forward_inputs(rng, 2, 20, 2, 1, pe=4)
    br = nsa.branches(x["q"], x["k"], x["v"], x["pe_k"], x["pe_v"], **SMALL)
    want = sum(x[g][..., None].astype(np.float64) * br[o]
               for g, o in (("g_cmp", "o_cmp"), ("g_slc", "o_slc"), ("g_swa", "o_swa")))
    np.testing.assert_allclose(nsa.attend(**x, **SMALL), want, rtol=0, atol=0)
    assert (br["indices"][0, -1] >= 0).sum() <= SMALL["n"]


def test_fla_is_the_paper_with_one_block_size_and_no_position_terms():
    x = forward_inputs(np.random.default_rng(6), 1, 26, 4, 2)
    one = {"block": 4, "stride": 4, "block_sel": 4, "n": 4, "window": 5}
    np.testing.assert_allclose(nsa.attend(**x, variant="fla", **one), nsa.attend(**x, variant="paper", **one),
                               atol=1e-12)


def test_emulation_at_float64_is_the_oracle():
    x = forward_inputs(np.random.default_rng(7), 1, 20, 2, 1, pe=4)
    np.testing.assert_array_equal(nsa.emulate_attend("float64", **x, **SMALL), nsa.attend(**x, **SMALL))


@pytest.mark.deep
def test_default_kernel_passes_and_negative_controls_fail():
    ops = ["sparse.nsa.selected_attend", "sparse.nsa.attend"]
    assert run(Implementation("numpy nsa", K.OPS, variants=K.VARIANTS), ops=ops, examples=20).ok

    def zero_out(*args, **kwargs):
        return np.zeros_like(K.attend(*args, **kwargs))

    def shuffled(*args, **kwargs):
        out, lse = K.selected_attend(*args, **kwargs)
        return out[:, ::-1].copy(), lse
    assert not run(Implementation("zeros", {ops[1]: zero_out}), ops=ops[1:], examples=0).ok
    assert not run(Implementation("rows reversed", {ops[0]: shuffled}), ops=ops[:1], examples=0).ok


@pytest.mark.deep
def test_the_kernel_in_float64_passes():
    """The default kernel with every float32 step in float64 (another precision, judged
    at float64's bound by its float64 outputs)."""
    def at64(kernel):
        def run64(*args, **kwargs):
            saved, K.F32 = K.F32, np.float64
            try:
                return kernel(*args, **kwargs)
            finally:
                K.F32 = saved
        return run64
    impl = Implementation("numpy nsa float64", {k: at64(f) for k, f in K.OPS.items()}, variants=K.VARIANTS)
    assert run(impl, ops=list(K.OPS), examples=10).ok


def test_every_corpus_entry_names_a_flag_of_the_catalog():
    from ref.sparse.catalog.nsa import FLAGS
    assert {flag for _, flag, _ in sparse_nsa.NSA_BUGS.values()} <= set(FLAGS) | {"NaN", "InvalidInput"}


def test_pe_shapes_and_gates_are_checked():
    x = forward_inputs(np.random.default_rng(8), 1, 8, 2, 1, pe=4)
    with pytest.raises(ValueError):
        nsa.attend(**{**x, "pe_k": grid(np.random.default_rng(0), (3, 8))}, **SMALL)
    with pytest.raises(ValueError):
        nsa.attend(**{**x, "g_cmp": x["g_cmp"][:, :4]}, **SMALL)

"""Scale layouts and integer group codecs against independent implementations."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import groups_layouts as gl
from hypothesis import given
from hypothesis import strategies as st

from ref.conformance.catalog import discover
from ref.conformance.runner import run
from ref.formats import intgroup, layouts

SCHEMES = [s.value for s in intgroup.Scheme]


@given(rows=st.integers(0, 400), cols=st.integers(1, 20), seed=st.integers(0, 2**32 - 1))
def test_blocked_layout_matches_tile_reshapes_and_inverts(rows, cols, seed):
    s = np.random.default_rng(seed).integers(0, 256, (rows, cols)).astype(np.uint8)
    b = layouts.to_blocked(s)
    assert np.array_equal(b, gl.to_blocked(s))
    assert np.array_equal(layouts.from_blocked(b, rows, cols), s)
    offsets = layouts.blocked_offsets(rows, cols)
    assert len(np.unique(offsets)) == offsets.size  # a permutation into the padded buffer


def test_blocked_layout_example():
    s = np.arange(8, dtype=np.uint8).reshape(2, 4)  # rows 0, 1 of the first tile
    b = layouts.to_blocked(s)
    assert b.size == 512 and b[:4].tolist() == [0, 1, 2, 3] and b[16:20].tolist() == [4, 5, 6, 7]
    s = np.zeros((33, 1), np.uint8)
    s[32, 0] = 9  # row 32 shares row 0's line, in its second group of four
    assert layouts.to_blocked(s)[4] == 9


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("group", intgroup.GROUP_SIZES)
def test_group_codec_matches_the_loop(bits, scheme, group):
    rng = np.random.default_rng(bits * group)
    w = (rng.standard_normal((6, 256)) * rng.choice([1e-3, 0.02, 3.0], (6, 1))).astype(np.float32)
    w[1] = np.abs(w[1])
    w[2, :group] = 0
    ours = intgroup.quantize(w, bits=bits, group=group, scheme=scheme)
    theirs = gl.quantize_groups(w, bits, group, scheme)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    back = intgroup.dequantize(*ours, group=group, bits=bits)
    step = np.repeat(ours[1], group, axis=-1)
    # Neither scheme clips inside its range: the error is half a step plus float32 rounding.
    assert (np.abs(back - w) <= step * 0.5 * (1 + 1e-5) + np.abs(w) * 2.0**-22).all()


@given(codes=st.lists(st.integers(0, 15), min_size=8, max_size=8 * 6).map(
    lambda v: np.array(v[: len(v) // 8 * 8], np.uint8)), order=st.sampled_from(["gptq", "awq"]))
def test_int32_packing_matches_python_ints_and_inverts(codes, order):
    words = intgroup.pack_int32(codes, order=order)
    assert np.array_equal(words, gl.pack_int32(codes, order))
    assert np.array_equal(intgroup.unpack_int32(words, order=order), codes)


def test_word_orders():
    w = intgroup.pack_int32(np.arange(8, dtype=np.uint8), order="gptq")
    assert int(w[0]) == 0x76543210
    a = intgroup.pack_int32(np.arange(8, dtype=np.uint8), order="awq")
    assert int(a[0]) == 0x75316420  # nibbles hold elements 0, 2, 4, 6, 1, 3, 5, 7


_W = np.ones((1, 128), np.float32)
_C, _S, _Z = np.zeros((1, 128), np.uint8), np.ones((1, 1), np.float32), np.zeros((1, 1), np.uint8)
_C = np.zeros((1, 128), np.uint8)
_S, _Z = np.ones((1, 1), np.float32), np.zeros((1, 1), np.uint8)


@pytest.mark.parametrize("call, error, word", [
    (lambda: layouts.to_blocked(np.zeros(4, np.uint8)), ValueError, "2-D"),
    (lambda: layouts.to_blocked(np.zeros((1, 4), np.uint8), pad=1.5), TypeError, "pad"),
    (lambda: layouts.to_blocked(np.zeros((1, 4), np.uint8), pad="0"), TypeError, "pad"),
    (lambda: layouts.to_blocked(np.zeros((1, 4), np.uint8), pad=256), ValueError, "pad"),
    (lambda: layouts.to_blocked(np.zeros((1, 4), np.uint8), pad=-1), ValueError, "pad"),
    (lambda: layouts.from_blocked(np.zeros(10, np.uint8), 128, 4), ValueError, "512"),
    (lambda: layouts.from_blocked(np.zeros(512, np.uint8), "128", 4), TypeError, "rows"),
    (lambda: layouts.from_blocked(np.zeros(512, np.uint8), 128, 4.0), TypeError, "cols"),
    (lambda: layouts.from_blocked(np.zeros(512, np.uint8), -1, 4), ValueError, "rows"),
    (lambda: layouts.blocked_offsets(True, 4), TypeError, "rows"),
    (lambda: intgroup.quantize(np.ones((1, 100), np.float32), group=64), ValueError, "multiple"),
    (lambda: intgroup.quantize(_W, bits=3), ValueError, "bits"),
    (lambda: intgroup.quantize(_W, bits="4"), TypeError, "bits"),
    (lambda: intgroup.quantize(_W, bits=4.0), TypeError, "bits"),
    (lambda: intgroup.quantize(_W, group="128"), TypeError, "group"),
    (lambda: intgroup.quantize(_W, group=True), TypeError, "group"),
    (lambda: intgroup.quantize(_W, group=0), ValueError, "group"),
    (lambda: intgroup.quantize(_W, group=-128), ValueError, "group"),
    (lambda: intgroup.quantize(_W, scheme="minmax"), ValueError, "scheme"),
    (lambda: intgroup.quantize(_W, scheme=None), TypeError, "scheme"),
    (lambda: intgroup.quantize(_W, zero_storage="v1"), ValueError, "zero_storage"),
    (lambda: intgroup.dequantize(_C, _S, _Z, zero_storage=1), TypeError, "zero_storage"),
    (lambda: intgroup.pack_int32(np.zeros(8, np.uint8), order="AWQ"), ValueError, "order"),
    (lambda: intgroup.unpack_int32(np.zeros(1, np.int32), order=None), TypeError, "order"),
    (lambda: layouts.from_blocked(np.zeros(512, np.uint8), np.array(128.0), 4), TypeError, "rows"),
    (lambda: intgroup.quantize(np.ones((1, 128))), TypeError, "float64"),
    (lambda: intgroup.quantize(np.float32(1), group=1), ValueError, "multiple"),
    (lambda: intgroup.quantize(np.float32([[3e38] * 64 + [-3e38] * 64])), ValueError, "overflows"),
    (lambda: intgroup.dequantize(_C, _S, _Z, bits=3), ValueError, "bits"),
    (lambda: intgroup.dequantize(_C, _S, _Z, bits="8"), TypeError, "bits"),
    (lambda: intgroup.dequantize(_C, _S, _Z, group=128.0), TypeError, "group"),
    (lambda: intgroup.dequantize(_C, _S, _Z, zero_storage=1), TypeError, "zero_storage"),
    (lambda: intgroup.dequantize(_C + 16, _S, _Z), ValueError, "codes"),
    (lambda: intgroup.dequantize(_C, _S, _Z + 16), ValueError, "zeros"),
    (lambda: intgroup.dequantize(np.zeros((1, 100), np.uint8), _S, _Z, group=64), ValueError, "multiple"),
    (lambda: intgroup.pack_int32(np.zeros(7, np.uint8)), ValueError, "multiple of 8"),
    (lambda: intgroup.pack_int32(np.zeros(8, np.uint8), order="exllama"), ValueError, "order"),
    (lambda: intgroup.pack_int32(np.zeros(8, np.uint8), order=0), TypeError, "order"),
    (lambda: intgroup.unpack_int32(np.zeros(2, np.uint32)), TypeError, "int32"),
    (lambda: intgroup.unpack_int32(np.int32(5)), ValueError, "words"),
])
def test_errors(call, error, word):
    with pytest.raises(error, match=word):
        call()


SUBNORMALS = np.float32([-3e-45, 1e-45, 0.0, 4e-45] * 32)  # scale (hi - lo) / qmax underflows float32


@pytest.mark.parametrize("bits", intgroup.BITS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_degenerate_group_gets_the_scale_floor_and_its_zero_point(bits, scheme):
    w = np.stack([SUBNORMALS, np.full(128, 1e-44, np.float32)])
    codes, scales, zeros = intgroup.quantize(w, bits=bits, group=128, scheme=scheme)
    assert (scales == intgroup.SCALE_FLOOR).all()
    assert (codes == zeros).all()  # every weight, zero included, takes the zero point
    assert (intgroup.dequantize(codes, scales, zeros, group=128, bits=bits) == 0).all()
    for a, b in zip((codes, scales, zeros), gl.quantize_groups(w, bits, 128, scheme)):
        assert np.array_equal(a, b)


def test_the_scale_floor_is_float32_epsilon_and_a_group_just_above_it_keeps_its_scale():
    assert intgroup.SCALE_FLOOR == np.finfo(np.float32).eps
    w = np.zeros((1, 128), np.float32)
    w[0, 0] = np.float32(15 * 2.0**-22)  # scale 2^-22: above the floor, untouched
    _, scale, _ = intgroup.quantize(w, bits=4)
    assert scale[0, 0] == np.float32(2.0**-22)


def test_the_catalog_oracles_are_the_module_functions_taking_json_values():
    ops = discover()
    assert ops["formats.scales.from_blocked"].oracle is layouts.from_blocked
    assert ops["formats.int4.pack_int32"].oracle is intgroup.pack_int32
    quantize = ops["formats.int4_group.quantize"]
    assert quantize.oracle.func is intgroup.quantize and quantize.oracle.keywords == {"bits": 4}
    assert quantize.variant_values["group"] == (128, 64, 32) and quantize.defaults["group"] == 128
    # golden files store the scalar inputs rows and cols as 0-d arrays
    blocked = layouts.to_blocked(np.arange(6, dtype=np.uint8).reshape(2, 3))
    assert np.array_equal(layouts.from_blocked(blocked, np.array(2), np.array(3, np.int32)),
                          np.arange(6, dtype=np.uint8).reshape(2, 3))


def test_independent_implementations_pass_the_suite():
    impl = gl.correct()
    quantizers = [op for op in impl.ops if not op.endswith(".dequantize")]
    report = run(impl, ops=quantizers, examples=10, shrink=False)
    covered = [r for r in report.ops if r.verdict != "not covered"]
    assert len(covered) == 4 and report.ok, report.details()


def test_independent_dequantizer_passes_the_vectors():
    report = run(gl.correct(), ops=["formats.int4_group.dequantize", "formats.int8_group.dequantize"], examples=0)
    assert [r.verdict for r in report.ops] == ["pass", "pass"], report.details()
    assert all(r.vectors_run >= 13 for r in report.ops)


@pytest.mark.parametrize("name", list(gl.GROUP_LAYOUT_BUGS))
def test_bug_is_rejected(name):
    impl, flag = gl.GROUP_LAYOUT_BUGS[name]
    report = run(impl, examples=0)
    failures = [f for r in report.ops for f in r.failures]
    assert not report.ok and any(flag in f.flags for f in failures), [f.flags for f in failures]


def _specs(name):
    return discover()[name].vectors()


GROUP_CODECS = [f"formats.int{b}_group.{k}" for b in intgroup.BITS for k in ("quantize", "dequantize")]


@pytest.mark.parametrize("name", [*GROUP_CODECS, "formats.int4.pack_int32"])
def test_every_group_codec_has_ragged_rank_and_empty_vectors(name):
    specs = _specs(name)
    ragged = [s for s in specs if "RaggedGroup" in s.flags]
    assert ragged and all(s.result == "invalid" for s in ragged)
    ranks = {np.ndim(next(iter(s.case.inputs.values()))) for s in specs if s.result == "valid"}
    assert {1, 2, 3} <= ranks
    assert any("EmptyInput" in s.flags and s.result == "valid" for s in specs)


@pytest.mark.parametrize("bits", intgroup.BITS)
def test_degenerate_groups_are_vectors_of_both_schemes(bits):
    specs = [s for s in _specs(f"formats.int{bits}_group.quantize") if "DegenerateGroup" in s.flags]
    assert {s.case.params["scheme"] for s in specs} == set(SCHEMES)
    for s in specs:
        _, scales, _ = intgroup.quantize(s.case.inputs["w"], bits=bits, group=s.case.params.get("group", 128),
                                         scheme=s.case.params["scheme"])
        assert (scales == intgroup.SCALE_FLOOR).any()  # each reaches the floor


@pytest.mark.parametrize("name, width", [("formats.int4_group.dequantize", 4), ("formats.int4.pack_int32", 4)])
def test_dirty_bits_vectors_set_the_lowest_and_highest_spare_bit(name, width):
    bits_set = set()
    for s in _specs(name):
        if "DirtyBits" in s.flags and s.result == "invalid":
            for arr in s.case.inputs.values():
                if arr.dtype == np.uint8:
                    bits_set |= {b for b in range(width, 8) if (arr & (1 << b)).any()}
    assert {width, 7} <= bits_set

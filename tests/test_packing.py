from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.formats import NibbleOrder, pack_fp4, unpack_fp4


def test_element_zero_goes_to_the_low_nibble():
    assert pack_fp4(np.uint8([0x1, 0xE])).tolist() == [0xE1]
    assert pack_fp4(np.uint8([0x1, 0xE]), order="high_first").tolist() == [0x1E]
    assert pack_fp4(np.uint8([0x1, 0xE]), order=NibbleOrder.HIGH_FIRST).tolist() == [0x1E]
    assert [o.value for o in NibbleOrder] == ["low_first", "high_first"]  # the golden files' strings


@given(codes=hnp.arrays(np.uint8, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6).map(
    lambda s: (*s[:-1], 2 * s[-1])), elements=st.integers(0, 15)), order=st.sampled_from([*NibbleOrder, "low_first", "high_first"]))
def test_unpack_inverts_pack(codes, order):
    packed = pack_fp4(codes, order=order)
    assert packed.shape == (*codes.shape[:-1], codes.shape[-1] // 2)
    assert np.array_equal(unpack_fp4(packed, order=order), codes)


def test_torch_layout_if_available():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("torch without float4_e2m1fn_x2")
    # torch stores element 0 in bits 3..0 of each float4_e2m1fn_x2 byte.
    packed = pack_fp4(np.uint8([0x2, 0x9, 0xF, 0x0]))
    t = torch.from_numpy(packed).view(torch.float4_e2m1fn_x2)
    assert t.view(torch.uint8).tolist() == [0x92, 0x0F]


@pytest.mark.parametrize(
    "call, error, word",
    [
        (lambda: pack_fp4(np.uint8([1, 2, 3])), ValueError, "even"),
        (lambda: pack_fp4(np.uint8([16, 1])), ValueError, "0..15"),
        (lambda: pack_fp4(np.int32([1, 2])), TypeError, "uint8"),
        (lambda: pack_fp4(np.uint8(3)), ValueError, "even"),
        (lambda: pack_fp4(np.uint8([1, 2]), order="lsb"), ValueError, "order"),
        (lambda: unpack_fp4(np.int8([1])), TypeError, "packed"),
        (lambda: unpack_fp4(np.uint8(1)), ValueError, "packed"),
        (lambda: pack_fp4(np.uint8([1, 2]), order=0), TypeError, "order"),
        (lambda: unpack_fp4(np.uint8([1]), order=None), TypeError, "order"),
    ],
)
def test_errors(call, error, word):
    with pytest.raises(error, match=word):
        call()

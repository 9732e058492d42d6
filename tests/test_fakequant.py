from __future__ import annotations

import numpy as np
import pytest

from ref.formats import encode, mx, nvfp4
from ref.formats.fakequant import block_max_error, fake_quantize, saturation_fraction, sqnr_db


def test_fake_quantize_is_dequantize_of_quantize():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    assert np.array_equal(fake_quantize(x, "mx", elem="float4_e2m1fn"),
                          mx.dequantize(*mx.quantize(x, "float4_e2m1fn"), "float4_e2m1fn"))
    assert np.array_equal(fake_quantize(x, "nvfp4", recipe="torchao_0_17"),
                          nvfp4.dequantize(*nvfp4.quantize(x, recipe="torchao_0_17"), recipe="torchao_0_17"))
    y = fake_quantize(x, "element", fmt="bfloat16")
    assert np.abs(y - x).max() <= np.abs(x).max() * 2.0**-8


@pytest.mark.parametrize("bits", [4, 8])
def test_int_group_fake_quantize_honours_bits_and_zero_storage(bits):
    """GPTQ v1 storage changes how zero points are stored, never the weights they decode to."""
    rng = np.random.default_rng(bits)
    x = (rng.standard_normal((4, 256)) * 0.02).astype(np.float32)
    exact = fake_quantize(x, "int_group", bits=bits, group=64)
    assert np.array_equal(fake_quantize(x, "int_group", bits=bits, group=64, zero_storage="gptq_v1"), exact)
    step = np.abs(x).max() * 2 / ((1 << bits) - 1)
    assert 0 < np.abs(exact - x).max() <= step


def test_sqnr_orders_the_formats_as_their_bits_do():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    s4 = sqnr_db(x, fake_quantize(x, "mx", elem="float4_e2m1fn"))
    s8 = sqnr_db(x, fake_quantize(x, "mx", elem="float8_e4m3fn"))
    nv = sqnr_db(x, fake_quantize(x, "nvfp4"))
    assert 10 < s4 < nv < s8  # NVFP4's finer blocks beat MXFP4; FP8 beats both
    assert sqnr_db(x, x) == np.inf


def test_block_errors_and_saturation():
    x = np.array([[1.0] * 16 + [2.0] * 16], np.float32)
    y = x.copy()
    y[0, 20] += 0.5
    assert block_max_error(x, y, block=16).tolist() == [[0.0, 0.5]]
    codes = encode(np.float32([1000, -1000, 1, 0]), "float8_e4m3fn")
    assert saturation_fraction(codes, "float8_e4m3fn") == 0.5


@pytest.mark.parametrize("call, error, word", [
    (lambda: sqnr_db(np.ones(3), np.ones(2)), ValueError, "shape"),
    (lambda: sqnr_db(np.ones(3), np.array([1, np.nan, 1])), ValueError, "finite"),
    (lambda: block_max_error(np.ones(10), np.ones(10), block=4), ValueError, "multiple"),
    (lambda: saturation_fraction(np.zeros(3, np.int32), "float8_e4m3fn"), TypeError, "uint8"),
    (lambda: fake_quantize(np.ones(4), "int3"), ValueError, "codec"),
    (lambda: fake_quantize(np.ones(4), None), TypeError, "codec"),
    (lambda: fake_quantize(np.ones(4, np.float32), "element"), TypeError, "fmt"),
    (lambda: fake_quantize(np.ones(32, np.float32), "mx"), TypeError, "elem"),
    (lambda: fake_quantize(np.ones((1, 128), np.float32), "int_group", bits="8"), TypeError, "bits"),
    (lambda: block_max_error(np.ones(8), np.ones(8), block="4"), TypeError, "block"),
    (lambda: block_max_error(np.ones(8), np.ones(8), block=0), ValueError, "block"),
    (lambda: block_max_error(np.ones(8), np.ones(8), block=True), TypeError, "block"),
])
def test_errors(call, error, word):
    with pytest.raises(error, match=word):
        call()

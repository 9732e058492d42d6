"""Weight bytes: tensor_bytes (roofline.tensor_bytes) against a per-row count written
independently, its edge cases and errors, the formats' sources, and weight_bytes of
whole models (the tutorial's 16.4 GB and ~4.5 GB)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.roofline.config import MLP, Attention, Block, Model, MoE
from ref.roofline.params import param_counts, tensors
from ref.roofline.weights import FORMATS, KEEP, tensor_bytes, weight_bytes, weight_table

QWEN3_8B = Model("Qwen3-8B", 4096, 151936, (Block(36, Attention(32, 8, 128, qk_norm=True), MLP(12288)),))


def by_rows(rows: int, cols: int, name: str) -> int:
    """The bytes as a capacity planner would count them: row by row, block by block,
    scales of 2-D blocks shared by block_rows rows."""
    f = FORMATS[name]
    bits = 0
    for r in range(rows):
        bits += cols * f.element_bits + f.row_bits
        if f.block and r % f.block_rows == 0:
            bits += math.ceil(cols / f.block) * (f.scale_bits + f.zero_bits)
    if rows and cols:
        bits += f.tensor_bits
    return -(-bits // 8)


def one(rows: int, cols: int, name: str) -> int:
    return int(tensor_bytes(np.int64(rows), np.int64(cols), format=name))


@given(st.integers(0, 300), st.integers(0, 600), st.sampled_from(sorted(FORMATS)))
def test_tensor_bytes_equals_the_row_by_row_count(rows, cols, name):
    assert one(rows, cols, name) == by_rows(rows, cols, name)


@given(st.integers(1, 2000), st.integers(1, 2000), st.sampled_from(sorted(FORMATS)))
def test_more_columns_never_take_fewer_bytes_and_bf16_is_two_per_element(rows, cols, name):
    assert one(rows, cols + 1, name) >= one(rows, cols, name)
    assert one(rows, cols, "bfloat16") == 2 * rows * cols


def test_partial_block_block_axis_and_tensor_scale():
    assert one(1, 17, "nvfp4") == math.ceil((17 * 4 + 2 * 8 + 32) / 8)  # 2 blocks, not floor(17/16) = 1
    assert one(3, 24, "nvfp4") == math.ceil((72 * 4 + 3 * 2 * 8 + 32) / 8)  # 6 scales, not ceil(72/16) = 5
    assert one(129, 128, "float8_block128") == 129 * 128 + 2 * 4  # two row blocks of 128 x 128
    assert one(0, 4096, "nvfp4") == one(4096, 0, "nvfp4") == 0  # no elements: no tensor scale
    assert one(5, 0, "float8_channel") == 5 * 4  # the definition: a row scale per row
    assert FORMATS["nvfp4"].bits_per_element == 4.5 and FORMATS["mxfp4"].bits_per_element == 4.25


def test_counts_past_2_53_are_exact_and_past_int64_rejected():
    assert one(1 << 27, 1 << 27, "bfloat16") == 1 << 55
    assert one((1 << 27) + 1, (1 << 27) + 3, "nvfp4") == by_rows_closed((1 << 27) + 1, (1 << 27) + 3)
    with pytest.raises(ValueError, match="int64"):
        one(1 << 40, 1 << 40, "bfloat16")


def by_rows_closed(rows: int, cols: int) -> int:
    return -(-(rows * cols * 4 + rows * -(-cols // 16) * 8 + 32) // 8)


def test_shapes_and_errors():
    out = tensor_bytes(np.ones((2, 3), np.int64), np.full((2, 3), 16, np.int64), format="mxfp4")
    assert out.shape == (2, 3) and out.dtype == np.int64
    assert tensor_bytes(np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0,)
    with pytest.raises(ValueError, match="rows"):
        tensor_bytes(np.int64(-1), np.int64(3))
    with pytest.raises(TypeError, match="rows"):
        tensor_bytes(np.float64(1), np.int64(3))
    with pytest.raises(TypeError, match="cols"):
        tensor_bytes(np.int64(1), np.bool_(True))
    with pytest.raises(ValueError, match="cols.*broadcast"):
        tensor_bytes(np.int64([1, 2]), np.int64([3]))
    with pytest.raises(ValueError, match="format"):
        tensor_bytes(np.int64(1), np.int64(3), format="int3")


def test_every_format_has_a_source():
    for name, f in FORMATS.items():
        assert f.name == name and f.source.url.startswith("https://") and f.source.quote, name


def test_qwen3_8b_weight_bytes_match_the_tutorial():
    # The tutorial: "weights 16.4 GB" at BF16 (8.19e9 parameters x 2 bytes).
    assert round(weight_bytes(QWEN3_8B) / 1e8) / 10 == 16.4
    assert weight_bytes(QWEN3_8B) == 2 * param_counts(QWEN3_8B).total
    # "8B at 4 bits ~4.5 GB": NVFP4's 4.5 bits on every tensor; Qwen3-8B has 8.19e9
    # parameters, not 8e9, so 4.6 GB (the tutorial rounds the count first).
    everything = weight_bytes(QWEN3_8B, "nvfp4", keep=())
    assert round(everything / 1e8) == 46
    assert round(8e9 * FORMATS["nvfp4"].bits_per_element / 8 / 1e8) == 45
    # With the default KEEP, the embedding and LM head stay BF16: 2.5 GB more.
    default = weight_bytes(QWEN3_8B, "nvfp4")
    assert default - everything > 2 * 151936 * 4096 * (2 - 4.5 / 8) * 0.99


def test_keep_and_active():
    moe = Model("m", 64, 100, (Block(2, Attention(4, 2, 16), MoE(8, 2, 32, 16, shared_gate=True)),))
    table = weight_table(moe, "int4_g128")
    kept = {t.component for t, name, _ in table if name == "bfloat16"}
    assert kept == {"embedding", "lm_head", "norm", "router"} and kept <= KEEP
    assert sum(b * t.count for t, _, b in table) == weight_bytes(moe, "int4_g128")
    experts = sum(b * t.count for t, _, b in table if t.component == "experts")
    assert weight_bytes(moe, "int4_g128") - weight_bytes(moe, "int4_g128", active=True) == experts * 6 // 8
    assert weight_bytes(moe, "bfloat16", keep=()) == 2 * param_counts(moe).total
    assert all(t.rows * t.cols > 0 for t in tensors(moe))
    with pytest.raises(ValueError, match="fmt"):
        weight_bytes(moe, "fp3")

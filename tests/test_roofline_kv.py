"""KV cache and recurrent-state bytes: the tour's figures (its numbers are the expected
values, their context in each comment), how the counts move when a config changes
(hypothesis over configs), exact int64 past 2^53, the errors, and the model-level sums."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.roofline.catalog import kv as kv_catalog
from ref.roofline.config import MLA, MLP, Attention, Block, GatedDeltaNet, Mamba2, Model
from ref.roofline.kv import (gated_delta_state_bytes, kv_attention_bytes, kv_bytes, kv_mla_bytes, kv_quantized_bytes,
                             mamba2_state_bytes, state_bytes)

GB = 10**9
MIB = 1 << 20
QWEN3_8B = dict(layers=36, kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16)  # config.json

count = st.integers(0, 300)
positive = st.integers(1, 300)


def _kv(tokens, layers=36, kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16) -> int:
    return int(kv_attention_bytes(tokens, layers, kv_heads, head_dim, v_head_dim, element_bits))


# The tour's figures ------------------------------------------------------------------

def test_qwen3_8b_kv_per_token_is_the_tours_147456():
    # tour: "KV 147,456 B/token (36*8*128*2*2)"
    assert _kv(1) == 147_456


def test_llama_70b_class_kv_per_token_is_the_tours_327680():
    # tour: "Llama-70B class (80 layers, 8 KV heads, head dim 128): 327,680 B/token of KV"
    assert _kv(1, layers=80) == 327_680


def test_qwen3_8b_kv_at_40k_batch_32_and_1m():
    # tour: "~6 GB KV" at 40k; "Batch 32 at 40k needs 32*6 = 192 GB" (6 rounded first: 32 * 5.90 = 188.7);
    # "1M tokens = 147 GB"
    at_40k = _kv(40_000)
    assert round(at_40k / GB) == 6 and round(at_40k / GB, 2) == 5.90
    assert 32 * round(at_40k / GB) == 192 and round(32 * at_40k / GB, 1) == 188.7
    assert round(_kv(10**6) / GB) == 147


def test_mla_cache_entry_is_576_elements_57x_fewer_than_mha():
    # tour: "MLA: 512-d latent + 64-d RoPE key = 576 elements instead of MHA's 32768 (57x)";
    # DeepSeek-V3's MHA equivalent: 128 heads, keys and values of 128
    mla = int(kv_mla_bytes(1, 1, 512, 64, 8))
    mha = _kv(1, layers=1, kv_heads=128, element_bits=8)
    assert (mla, mha) == (576, 32_768)
    assert round(mha / mla) == 57


def test_mamba2_state_4mb_per_layer_against_gqa_512mb_per_layer_at_128k():
    # tour: "Mamba-2 ~4 MB/layer of state where GQA KV is 512 MB/layer at 128k" (Nemotron-H-8B's
    # Mamba-2: 128 heads of 64, d_state 128, fp32; 8 KV heads of 128 at bf16)
    state = int(mamba2_state_bytes(1, 128, 64, 128, 8, 4, 32, 16))
    assert round(state / MIB) == 4
    assert _kv(128 * 1024, layers=1) == 512 * MIB


# How the counts move -----------------------------------------------------------------

@given(tokens=count, layers=count, kv_heads=positive, head_dim=positive, v_head_dim=count,
       element_bits=st.sampled_from([8, 16, 32]))
def test_attention_kv_is_linear_in_tokens_and_layers(tokens, layers, kv_heads, head_dim, v_head_dim, element_bits):
    one = _kv(tokens, layers, kv_heads, head_dim, v_head_dim, element_bits)
    assert _kv(2 * tokens, layers, kv_heads, head_dim, v_head_dim, element_bits) == 2 * one
    assert _kv(tokens, 2 * layers, kv_heads, head_dim, v_head_dim, element_bits) == 2 * one
    assert _kv(tokens + 1, layers, kv_heads, head_dim, v_head_dim, element_bits) - one == \
        layers * kv_heads * (head_dim + v_head_dim) * element_bits // 8


@given(tokens=count, layers=count, kv_heads=positive, group=st.integers(1, 8), head_dim=positive)
def test_gqa_caches_kv_heads_not_query_heads(tokens, layers, kv_heads, group, head_dim):
    # MHA of heads = group * kv_heads caches group times the bytes of the GQA model
    assert _kv(tokens, layers, kv_heads * group, head_dim, head_dim) == group * _kv(tokens, layers, kv_heads,
                                                                                    head_dim, head_dim)


@given(tokens=count, layers=count, element_bits=st.integers(0, 33))
def test_sub_byte_widths_round_once(tokens, layers, element_bits):
    # one element per token and layer: ceil(tokens * layers * bits / 8), not tokens * layers * ceil(bits / 8)
    got = int(kv_attention_bytes(tokens, layers, 1, 1, 0, element_bits))
    assert got * 8 >= tokens * layers * element_bits > (got - 1) * 8


@given(layers=count, kv_heads=positive, head_dim=st.integers(1, 200), bits=st.integers(1, 8),
       group=st.integers(1, 64), residual=st.integers(0, 200), data=st.data())
def test_kivi_keeps_the_residual_window_and_partial_groups_at_16_bits(layers, kv_heads, head_dim, bits, group,
                                                                     residual, data):
    # until residual + group tokens exist, nothing is quantized: the cache is a 16-bit one
    tokens = data.draw(st.integers(0, residual + group - 1))
    args = (layers, kv_heads, head_dim, bits, group, residual)
    assert int(kv_quantized_bytes(tokens, *args)) == _kv(tokens, layers, kv_heads, head_dim, head_dim, 16)


@given(layers=positive, head_dim=st.integers(1, 200), bits=st.integers(1, 8), group=st.integers(1, 64),
       residual=st.integers(0, 200), groups_formed=st.integers(0, 20))
def test_kivi_each_group_costs_codes_plus_scales_on_both_axes(layers, head_dim, bits, group, residual,
                                                              groups_formed):
    # 8 KV heads: every quantity below is whole bytes. From residual + k * group tokens (the tail full),
    # `group` more tokens form one more quantized group (the tail stays `residual` long): their key and
    # value codes, head_dim key (scale, zero) pairs (one per channel over the group's tokens) and
    # group * ceil(head_dim / group) value pairs (one per token per channel group)
    start = residual + groups_formed * group
    step_bits = 8 * layers * (2 * group * head_dim * bits + head_dim * 32 + group * -(-head_dim // group) * 32)
    args = (layers, 8, head_dim, bits, group, residual)
    assert int(kv_quantized_bytes(start + group, *args)) - int(kv_quantized_bytes(start, *args)) == step_bits // 8


@given(layers=count, heads=positive, head_dim=positive, d_state=positive, groups=positive)
def test_mamba2_conv_kernel_one_leaves_the_ssm_state_only(layers, heads, head_dim, d_state, groups):
    # [heads, head_dim, d_state] at fp32 per layer (not heads * d_state: that is the SsmState bug)
    assert int(mamba2_state_bytes(layers, heads, head_dim, d_state, groups, 1, 32, 16)) == \
        layers * heads * head_dim * d_state * 4
    with_conv = int(mamba2_state_bytes(layers, heads, head_dim, d_state, groups, 4, 32, 16))
    assert with_conv - layers * heads * head_dim * d_state * 4 == \
        layers * (heads * head_dim + 2 * groups * d_state) * 3 * 2


@given(layers=count, kh=positive, vh=positive, dk=positive, dv=positive, kernel=st.integers(1, 8))
def test_gated_delta_state_is_fixed_and_linear_in_layers(layers, kh, vh, dk, dv, kernel):
    one = int(gated_delta_state_bytes(layers, kh, vh, dk, dv, kernel, 32, 16))
    assert int(gated_delta_state_bytes(2 * layers, kh, vh, dk, dv, kernel, 32, 16)) == 2 * one
    conv = (2 * kh * dk + vh * dv) * (kernel - 1) * 2
    assert one == layers * (vh * dk * dv * 4 + conv)


# Exactness, shapes and errors ----------------------------------------------------------

def test_counts_past_2_53_are_exact_and_past_2_63_rejected():
    odd = (1 << 53) + 1  # float64 cannot hold it
    assert int(kv_attention_bytes(odd, 1, 1, 1, 0, 8)) == odd
    assert int(kv_mla_bytes(1 << 40, 61, 512, 64, 16)) == (1 << 40) * 61 * 576 * 2
    with pytest.raises(ValueError, match="does not fit int64.*tokens"):
        kv_attention_bytes(1 << 62, 2, 1, 1, 1, 8)


def test_arrays_of_any_shape_elementwise():
    tokens = np.arange(6, dtype=np.int64).reshape(2, 3)
    ones = np.ones((2, 3), np.int64)
    got = kv_attention_bytes(tokens, 36 * ones, 8 * ones, 128 * ones, 128 * ones, 16 * ones)
    assert got.dtype == np.int64 and got.shape == (2, 3)
    assert got.tolist() == [[147_456 * t for t in row] for row in tokens.tolist()]
    empty = np.zeros((0, 2), np.int64)
    assert kv_mla_bytes(empty, empty, empty, empty, empty).shape == (0, 2)


@pytest.mark.parametrize("bad,error,match", [
    (dict(tokens=np.float64(3)), TypeError, "tokens: expected an integer array"),
    (dict(layers=np.array(True)), TypeError, "layers: expected an integer array"),
    (dict(kv_heads=np.int64(-1)), ValueError, "kv_heads: expected non-negative"),
    (dict(head_dim=np.array([128, 128])), ValueError, "head_dim: expected the shape of tokens"),
])
def test_bad_counts_name_the_argument(bad, error, match):
    args = {"tokens": 4, **QWEN3_8B, **bad}
    with pytest.raises(error, match=match):
        kv_attention_bytes(**args)


def test_group_and_conv_kernel_must_be_positive():
    with pytest.raises(ValueError, match="group"):
        kv_quantized_bytes(300, 1, 1, 128, 2, 0, 128)
    with pytest.raises(ValueError, match="conv_kernel"):
        mamba2_state_bytes(1, 1, 1, 1, 1, 0, 32, 16)
    with pytest.raises(ValueError, match="conv_kernel"):
        gated_delta_state_bytes(1, 1, 1, 1, 1, 0, 32, 16)


def test_catalog_vectors_are_flagged_with_known_flags_and_valid_ones_run():
    for op in kv_catalog.OPERATIONS:
        for spec in op.vectors():
            assert spec.flags and set(spec.flags) <= set(kv_catalog.FLAGS) | {"InvalidInput", "EmptyInput"}
            if spec.result == "valid":
                op.oracle(**spec.case.inputs, **spec.case.params)
            else:
                with pytest.raises((ValueError, TypeError)):
                    op.oracle(**spec.case.inputs, **spec.case.params)


# Model level -------------------------------------------------------------------------

def _qwen3_8b(**attention) -> Model:
    return Model("Qwen3-8B", 4096, 151936, (Block(36, Attention(32, 8, 128, qk_norm=True, **attention),
                                                  MLP(12288)),))


def test_model_kv_bytes_sums_attention_and_mla_layers_and_windows():
    assert kv_bytes(_qwen3_8b(), 1) == 147_456
    assert kv_bytes(_qwen3_8b(), 40_000, element_bits=8) == _kv(40_000) // 2
    windowed = _qwen3_8b(window=4096)
    assert kv_bytes(windowed, 100) == _kv(100) and kv_bytes(windowed, 10**6) == _kv(4096)
    dsv3 = Model("DeepSeek-V3-like", 7168, 129280, (Block(61, MLA(128, 1536, 512, 128, 64, 128), MLP(18432)),))
    assert kv_bytes(dsv3, 1) == 61 * 576 * 2
    assert state_bytes(dsv3) == 0


def test_hybrid_model_fixed_state_plus_attention_kv():
    mamba = Mamba2(128, 64, 128, 8, 4)
    gdn = GatedDeltaNet(16, 32, 128, 128, 4)
    hybrid = Model("hybrid", 4096, 1000, (Block(24, mamba, None), Block(4, Attention(32, 8, 128), None),
                                          Block(36, gdn, MLP(100)), Block(28, None, MLP(100))))
    assert kv_bytes(hybrid, 1000) == _kv(1000, layers=4)
    assert state_bytes(hybrid) == int(mamba2_state_bytes(24, 128, 64, 128, 8, 4, 32, 16)) + \
        int(gated_delta_state_bytes(36, 16, 32, 128, 128, 4, 32, 16))
    assert state_bytes(hybrid, state_bits=16) < state_bytes(hybrid)
    with pytest.raises(TypeError, match="model"):
        kv_bytes("Qwen3-8B", 1)
    with pytest.raises(ValueError, match="tokens"):
        kv_bytes(hybrid, -1)


# The table's models (ref.roofline.models, built by ref.roofline.hf) ---------------------

@pytest.fixture(scope="module")
def models():
    pytest.importorskip("ref.roofline.hf")  # the accounting branch's builder; absent until it merges
    from ref.roofline.models import MODELS
    return MODELS


def test_table_models_kv_per_token(models):
    # the tour's 147,456 (Qwen3-8B) and 327,680 (70B class); DeepSeek-V3's 61 layers of 576 bf16 elements;
    # Qwen3-Next's 12 gated-attention layers of 2 KV heads of 256
    assert kv_bytes(models["Qwen3-8B"], 1) == 147_456
    assert kv_bytes(models["Llama-3.1-70B"], 1) == 327_680
    assert kv_bytes(models["DeepSeek-V3"], 1) == 61 * 576 * 2
    assert kv_bytes(models["Qwen3-Next-80B-A3B-Instruct"], 1) == 12 * 2 * (256 + 256) * 2
    assert state_bytes(models["Qwen3-8B"]) == state_bytes(models["DeepSeek-V3"]) == 0


def test_hybrids_keep_kv_in_a_fraction_of_their_layers(models):
    # tour: "Hybrids: Qwen3-Next 3:1 ... Nemotron-H ~12:1" (layers without KV to layers with it)
    for name, ratio in (("Qwen3-Next-80B-A3B-Instruct", 3), ("Nemotron-H-8B-Base-8K", 12)):
        model = models[name]
        with_kv = sum(b.count for b in model.blocks if isinstance(b.mixer, (Attention, MLA)))
        assert (model.layers - with_kv) / with_kv == ratio
        per_layer = kv_bytes(Model("one", model.hidden, model.vocab, (next(
            Block(1, b.mixer, None) for b in model.blocks if isinstance(b.mixer, Attention)),)), 10**6)
        assert kv_bytes(model, 10**6) == with_kv * per_layer
        assert state_bytes(model) > 0 and state_bytes(model) == state_bytes(model, 32, 16)


def test_counting_helpers():
    from ref.roofline.counting import at_least, ceil_div, counts, flags, reals, same_shape, to_int64

    v = counts("op", a=np.array([1, 2], np.int32), b=np.array([3, 4], np.uint8))
    assert v["a"].dtype == object and (v["a"] * (1 << 62) * 4).tolist() == [1 << 64, 1 << 65]
    with pytest.raises(ValueError, match="op: b: expected counts below 2\\^63"):
        counts("op", a=np.array([1], np.int64), b=np.array([1 << 63], np.uint64))
    assert flags("op", tied=np.array([True, False]))["tied"].tolist() == [True, False]
    with pytest.raises(TypeError, match="op: tied: expected a bool array"):
        flags("op", tied=np.array([1, 0]))
    with pytest.raises(ValueError, match="op: tied: expected the shape of a"):
        same_shape("op", **v, tied=np.array(True))
    assert reals("op", x=np.float32(0.5))["x"].dtype == np.float64
    with pytest.raises(ValueError, match="op: x: expected finite values"):
        reals("op", x=np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="op: b: expected b >= 4, got 3"):
        at_least("op", 4, a=v["b"] + 1, b=v["b"])
    assert ceil_div(v["a"] * 7, 8).tolist() == [1, 2]
    assert to_int64(v["a"] * 3, "op", v).dtype == np.int64
    with pytest.raises(ValueError, match="op: the result does not fit int64 for these inputs \\(a, b\\)"):
        to_int64(v["a"] << 63, "op", v)

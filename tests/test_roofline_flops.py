"""Forward FLOPs: the tour's figures (with what each assumes), how the count moves when a
config or variant changes (hypothesis over configs: chunked prefill, causal variants,
LM head, layers, GQA, experts), the model-level function for every mixer, and errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.roofline.catalog import flops as flops_catalog
from ref.roofline.config import MLA, MLP, Attention, Block, GatedDeltaNet, Mamba2, Model, MoE
from ref.roofline.flops import attention_pairs, forward_flops, forward_flops_decoder
from ref.roofline.params import decoder_params

QWEN3_8B = flops_catalog.QWEN3_8B
QWEN3_30B_A3B = flops_catalog.QWEN3_30B_A3B


def _f(tokens, context, causal="exact", lm_head="last", **config) -> int:
    return int(forward_flops_decoder(tokens, context, **config, causal=causal, lm_head=lm_head))


@st.composite
def decoders(draw, moe=None):
    kv_heads = draw(st.integers(1, 8))
    is_moe = draw(st.booleans()) if moe is None else moe
    experts = draw(st.integers(1, 64)) if is_moe else 0
    return dict(layers=draw(st.integers(0, 40)), hidden=draw(st.integers(1, 8192)),
                heads=kv_heads * draw(st.integers(1, 8)), kv_heads=kv_heads, head_dim=draw(st.integers(1, 256)),
                intermediate=0 if is_moe else draw(st.integers(0, 30000)), experts=experts,
                top_k=draw(st.integers(1, experts)) if is_moe else 0,
                expert_intermediate=draw(st.integers(0, 4096)) if is_moe else 0,
                shared_intermediate=draw(st.integers(0, 4096)) if is_moe else 0, vocab=draw(st.integers(1, 200000)))


tokens = st.integers(0, 50000)
causals = st.sampled_from(["exact", "half", "full"])


# The tour's figures ------------------------------------------------------------------

def test_qwen3_8b_prefill_at_40k_is_the_tours_1_03_pflop_under_its_assumptions():
    # tour: "At 40k context: prefill ~1.03 PFLOP, ~0.23 s on a B200 (FP8 rate)": 2 x 6.95e9 non-embedding
    # params x 40,000 + causal attention as half the square, LM head not counted
    flops = _f(40_000, 0, "half", "none", **QWEN3_8B)
    assert round(flops / 1e15, 2) == 1.03
    assert round(flops / 4.5e15, 2) == 0.23  # B200 dense FP8, 4.5 PFLOP/s (tour)
    # the defaults (each query sees itself, the last position's logits) move it by 0.001%
    assert abs(_f(40_000, 0, **QWEN3_8B) - flops) / flops < 2e-5


def test_qwen3_8b_decode_step_attention_at_40k_is_23_6_gflop():
    # tour: "decode ~16 GFLOP/token" is 2 x all 8.19e9 params (embedding included, as if a matmul);
    # "attention at 40k, 23.6 GFLOP, ignored"
    attention = _f(1, 40_000, **QWEN3_8B) - _f(1, 0, **QWEN3_8B)
    assert round(attention / 1e9, 1) == 23.6
    weights_only = _f(1, 0, "exact", "all", **QWEN3_8B) - 2 * 36 * 32 * 2 * 128  # less the token's own key
    embedding_as_matmul = 2 * 4096 * 151_936
    assert round((weights_only + embedding_as_matmul) / 1e9) == 16


def test_qwen3_30b_a3b_computes_0_4_of_qwen3_8b_per_token():
    # tour: "Qwen3-30B-A3B ... against 8B dense, compute x0.4"
    ratio = _f(1, 0, **QWEN3_30B_A3B) / _f(1, 0, **QWEN3_8B)
    assert round(ratio, 1) == 0.4


# How the count moves -----------------------------------------------------------------

@given(config=decoders(), t1=tokens, t2=tokens, context=tokens)
def test_two_chunks_cost_one_forward_under_exact(config, t1, t2, context):
    # chunked prefill: the second chunk attends to the first as context
    whole = _f(t1 + t2, context, lm_head="none", **config)
    assert whole == _f(t1, context, lm_head="none", **config) + _f(t2, context + t1, lm_head="none", **config)


@given(config=decoders(), t=tokens, context=tokens)
def test_causal_variants_differ_by_the_diagonal_and_the_masked_triangle(config, t, context):
    exact, half, full = (_f(t, context, c, **config) for c in ("exact", "half", "full"))
    per_pair = 2 * config["heads"] * 2 * config["head_dim"] * config["layers"]
    assert 2 * (exact - half) == per_pair * t  # tokens / 2 pairs: the diagonal's half
    assert 2 * (full - exact) == per_pair * t * (t - 1)  # the masked triangle, t (t - 1) / 2 pairs
    assert 2 * attention_pairs(t, context, "half") == 2 * t * context + t * t


@given(config=decoders(), t=tokens, context=tokens, causal=causals)
def test_lm_head_variants_differ_by_one_logit_matmul_per_position(config, t, context, causal):
    none, last, all_ = (_f(t, context, causal, lm, **config) for lm in ("none", "last", "all"))
    logits = 2 * config["hidden"] * config["vocab"]
    assert last - none == logits * min(t, 1)
    assert all_ - none == logits * t


@given(config=decoders(), t=tokens, context=tokens, causal=causals)
def test_doubling_layers_doubles_everything_but_the_lm_head(config, t, context, causal):
    none = _f(t, context, causal, "none", **config)
    assert _f(t, context, causal, "none", **{**config, "layers": 2 * config["layers"]}) == 2 * none


@given(config=decoders(), t=tokens, context=tokens, group=st.integers(1, 8))
def test_gqa_only_the_k_v_projections_depend_on_kv_heads(config, t, context, group):
    # MHA with the same query heads: k and v projections grow by hidden * (heads - kv_heads) * head_dim each
    mha = {**config, "kv_heads": config["heads"]}
    extra = 2 * t * config["layers"] * 2 * config["hidden"] * (config["heads"] - config["kv_heads"]) * \
        config["head_dim"]
    assert _f(t, context, **mha) - _f(t, context, **config) == extra


@given(config=decoders(moe=True), t=tokens, context=tokens)
def test_moe_counts_top_k_experts_not_all(config, t, context):
    more_experts = {**config, "experts": config["experts"] + 7}  # only the router grows
    assert _f(t, context, **more_experts) - _f(t, context, **config) == 2 * t * config["layers"] * \
        config["hidden"] * 7
    one_more_active = {**config, "experts": config["experts"] + 1, "top_k": config["top_k"] + 1}
    assert _f(t, context, **one_more_active) - _f(t, context, **config) == 2 * t * config["layers"] * \
        config["hidden"] * (1 + 3 * config["expert_intermediate"])


def test_odd_tokens_under_half_stay_integers_and_counts_past_2_53_are_exact():
    # SMALL, 3 tokens: per layer 2 * 3 * (q, o 128 + k, v 64 + FFN 144) = 2016, attention
    # 2 * 4 heads * (2 + 2) * 9 / 2 pairs = 144; two layers
    assert _f(3, 0, "half", "none", **flops_catalog.SMALL) == 2 * (2016 + 144)
    big = _f(10**6, 0, "exact", "none", **flops_catalog.LLAMA_70B)
    assert big > 1 << 53 and big % 2 == 0
    with pytest.raises(ValueError, match="does not fit int64"):
        _f(10**8, 0, **flops_catalog.LLAMA_70B)


@pytest.mark.parametrize("change,match", [
    (dict(kv_heads=0), "kv_heads"), (dict(heads=6, kv_heads=4), "kv_heads"), (dict(top_k=1), "top_k"),
    (dict(experts=4, top_k=2), "intermediate"), (dict(experts=4, top_k=5, intermediate=0), "top_k"),
    (dict(tokens=np.int64(-1)), "tokens: expected non-negative"),
])
def test_inconsistent_configs_are_rejected_naming_the_argument(change, match):
    args = {"tokens": 2, "context": 0, **flops_catalog.SMALL, **change}
    with pytest.raises(ValueError, match=match):
        forward_flops_decoder(**args)
    with pytest.raises(ValueError, match="causal"):
        forward_flops_decoder(2, 0, **flops_catalog.SMALL, causal="quarter")
    with pytest.raises(TypeError, match="hidden"):
        forward_flops_decoder(2, 0, **{**flops_catalog.SMALL, "hidden": 8.0})


@pytest.mark.parametrize("change", [
    dict(kv_heads=0), dict(heads=6, kv_heads=4), dict(top_k=1), dict(expert_intermediate=3),
    dict(shared_intermediate=3), dict(experts=4, top_k=2), dict(experts=4, top_k=5, intermediate=0),
])
def test_params_and_flops_refuse_a_config_with_the_same_words(change):
    """One consistency check serves both decoder ops: what one refuses the other refuses,
    naming the same argument in the same words (only the op's name differs)."""
    config = {**flops_catalog.SMALL, **change}
    messages = []
    for call in (lambda: forward_flops_decoder(2, 0, **config),
                 lambda: decoder_params(**config, tied=False, qk_norm=False, bias=False, shared_gate=False)):
        with pytest.raises(ValueError) as error:
            call()
        messages.append(str(error.value).split(": ", 1))
    (flops_op, flops_words), (params_op, params_words) = messages
    assert (flops_op, params_op) == ("roofline.flops.forward", "roofline.params.decoder")
    assert flops_words == params_words


def test_catalog_vectors_are_flagged_and_run():
    flags = set(flops_catalog.FLAGS) | {"InvalidInput", "EmptyInput"}
    for spec in flops_catalog.OPERATIONS[0].vectors():
        assert spec.flags and set(spec.flags) <= flags
        if spec.result == "valid":
            forward_flops_decoder(**spec.case.inputs, **spec.case.params)
        else:
            with pytest.raises((ValueError, TypeError)):
                forward_flops_decoder(**spec.case.inputs, **spec.case.params)


# Model level -------------------------------------------------------------------------

def _model(c: dict) -> Model:
    ffn = MLP(c["intermediate"]) if not c["experts"] else MoE(c["experts"], c["top_k"], c["expert_intermediate"],
                                                              c["shared_intermediate"])
    return Model("m", c["hidden"], c["vocab"], (Block(c["layers"], Attention(c["heads"], c["kv_heads"],
                                                                             c["head_dim"]), ffn),))


@given(config=decoders(), t=tokens, context=tokens, causal=causals,
       lm=st.sampled_from(["last", "all", "none"]))
def test_model_level_matches_the_catalog_oracle_for_gqa_decoders(config, t, context, causal, lm):
    assert forward_flops(_model(config), t, context, causal, lm) == _f(t, context, causal, lm, **config)


def test_mla_naive_and_absorbed_cost_per_cached_token():
    # DeepSeek-V3's attention, one more cached key: naive decompresses its latent (2 * kv_lora_rank * heads *
    # (dn + dv)) and attends over dn + dr and dv per head; absorbed attends over the latent (2 * kv_lora_rank
    # + dr per head) and decompresses nothing
    mla = MLA(128, 1536, 512, 128, 64, 128)
    model = Model("dsv3-like", 7168, 129280, (Block(61, mla, MLP(18432)),))
    for form, per_key in (("naive", 2 * 128 * (128 + 64 + 128) + 2 * 512 * 128 * (128 + 128)),
                          ("absorbed", 2 * 128 * (2 * 512 + 64))):
        step = forward_flops(model, 1, 1001, mla=form) - forward_flops(model, 1, 1000, mla=form)
        assert step == 61 * per_key
    absorbed_extra = 2 * 61 * 128 * 512 * (128 + 128)  # q_nope -> latent and latent -> v per token
    naive_extra = 2 * 61 * 512 * 128 * (128 + 128)  # kv_b_proj on the new token's latent
    assert forward_flops(model, 1, 0, lm_head="none", mla="absorbed") - absorbed_extra - 61 * 2 * 128 * 1088 == \
        forward_flops(model, 1, 0, lm_head="none", mla="naive") - naive_extra - 61 * 2 * 128 * 320


@given(t=tokens, c1=tokens, c2=tokens)
def test_recurrent_layers_cost_the_same_at_any_context_and_are_linear_in_tokens(t, c1, c2):
    model = Model("hybrid", 512, 100, (Block(3, Mamba2(8, 16, 32, 2, 4), None),
                                       Block(2, GatedDeltaNet(4, 8, 16, 16, 4), MLP(64))))
    assert forward_flops(model, t, c1, lm_head="none") == forward_flops(model, t, c2, lm_head="none") == \
        t * forward_flops(model, 1, 0, lm_head="none")


def test_sliding_window_counts_the_band():
    assert attention_pairs(5, 0, window=2) == 1 + 2 + 2 + 2 + 2
    assert attention_pairs(3, 10, window=4) == 12 and attention_pairs(3, 10, "full", window=4) == 3 * 13
    windowed = Model("w", 64, 10, (Block(1, Attention(2, 1, 8, window=4), None),))
    full = Model("f", 64, 10, (Block(1, Attention(2, 1, 8), None),))
    assert forward_flops(full, 1, 100) - forward_flops(windowed, 1, 100) == 2 * 2 * 16 * (101 - 4)


# The table's models (ref.roofline.models, built by ref.roofline.hf) ---------------------

@pytest.fixture(scope="module")
def models():
    pytest.importorskip("ref.roofline.hf")  # the accounting branch's builder; absent until it merges
    from ref.roofline.models import MODELS
    return MODELS


@pytest.mark.parametrize("name,config", [("Qwen3-8B", QWEN3_8B), ("Qwen3-30B-A3B", QWEN3_30B_A3B),
                                         ("Llama-3.1-70B", flops_catalog.LLAMA_70B)])
def test_table_models_match_the_catalog_configs(models, name, config):
    for t, context in ((40_000, 0), (1, 40_000)):
        assert forward_flops(models[name], t, context) == _f(t, context, **config)


def test_table_models_reproduce_the_tours_flop_figures(models):
    # 1.03 PFLOP for a 40k prefill (half, no LM head); the 30B MoE computes 0.4 of the 8B per token
    assert round(forward_flops(models["Qwen3-8B"], 40_000, 0, "half", "none") / 1e15, 2) == 1.03
    assert round(forward_flops(models["Qwen3-30B-A3B"], 1, 0) / forward_flops(models["Qwen3-8B"], 1, 0), 1) == 0.4
    # DeepSeek-V3 (37B activated of 671B): about 2 FLOPs per active parameter per token at no context
    assert round(forward_flops(models["DeepSeek-V3"], 1, 0, lm_head="none") / 2e9) in range(35, 38)

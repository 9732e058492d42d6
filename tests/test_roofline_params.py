"""Parameter accounting: the closed form (roofline.params.decoder), the per-tensor sum
(param_counts) for every mixer and FFN, from_hf_config, and their errors. The counts
against transformers are in test_roofline_transformers.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.roofline.catalog import params as catalog
from ref.roofline.config import MLA, MLP, Attention, Block, GatedDeltaNet, Mamba2, Model, MoE
from ref.roofline.hf import FAMILIES, from_hf_config
from ref.roofline.params import decoder_params, param_counts, tensors

FIELDS = catalog.NAMES + catalog.BOOLS


def call(row: tuple) -> tuple[int, int]:
    total, active = decoder_params(**catalog.decoder_case([row], ()).inputs)
    return int(total), int(active)


def model_of(row: tuple) -> Model:
    """The same decoder as a Model (the second formulation the closed form is checked against)."""
    f = dict(zip(FIELDS, row))
    attn = Attention(f["heads"], f["kv_heads"], f["head_dim"], qk_norm=f["qk_norm"], bias=f["bias"])
    ffn = (MoE(f["experts"], f["top_k"], f["expert_intermediate"], f["shared_intermediate"],
               shared_gate=f["shared_gate"]) if f["experts"] else MLP(f["intermediate"]))
    blocks = (Block(f["layers"], attn, ffn),) if f["layers"] else (Block(1, attn, ffn),)
    return Model("drawn", f["hidden"], f["vocab"], blocks, tied_embeddings=f["tied"])


rows = catalog.decoder_rows()


# --- published and tutorial figures ---------------------------------------------------

def test_qwen3_8b_matches_its_card_and_the_tutorial():
    total, active = call(catalog.QWEN3_8B)
    assert total == active
    assert round(total / 1e8) == 82  # model card: "8.2B"
    # The tutorial's 16.4 GB of BF16 weights: 8.19e9 parameters (embedding and LM head) x 2 bytes.
    assert round(2 * total / 1e8) / 10 == 16.4
    counts = param_counts(model_of(catalog.QWEN3_8B))
    non_embedding = counts.total - counts.embedding - counts.lm_head
    assert round(non_embedding / 1e7) == 695  # model card: "Non-Embedding: 6.95B"


def test_qwen3_30b_a3b_total_and_active():
    total, active = call(catalog.QWEN3_30B_A3B)
    assert round(total / 1e8) == 305  # model card: "30.5B in total"
    assert 33 * 10**8 <= active < 34 * 10**8  # "3.3B activated" (3.353e9: the card truncates)
    dense_total, _ = call(catalog.QWEN3_8B)
    # The tutorial: against 8B dense, compute x0.4 (active) and storage x3.7 (total).
    assert round(active / dense_total, 1) == 0.4 and round(total / dense_total, 1) == 3.7


def test_qwen15_moe_and_qwen25_against_their_cards():
    total, active = call(catalog.QWEN15_MOE_A27B)
    assert round(total / 1e8) == 143 and round(active / 1e8) == 27  # "14.3B ... 2.7B activated"
    assert 761 <= call(catalog.QWEN25_7B)[0] // 10**7 < 762  # "7.61B" (7,615,616,512: the card truncates)
    assert round(call(catalog.LLAMA31_8B)[0] / 1e7) == 803  # Llama-3.1-8B: 8.03B


# --- the closed form against the per-tensor sum, and perturbations --------------------

@given(rows)
def test_closed_form_equals_the_tensor_sum(row):
    if row[0] == 0:
        row = (1,) + row[1:]
    counts = param_counts(model_of(row))
    assert call(row) == (counts.total, counts.active)


def _with(row, **change):
    f = dict(zip(FIELDS, row))
    f.update(change)
    return tuple(f[n] for n in FIELDS)


def _outer(row) -> int:
    f = dict(zip(FIELDS, row))
    return f["vocab"] * f["hidden"] * (1 if f["tied"] else 2) + f["hidden"]


@given(rows)
def test_doubling_layers_doubles_the_non_embedding_params(row):
    t1, a1 = call(row)
    t2, a2 = call(_with(row, layers=2 * row[0]))
    assert t2 - _outer(row) == 2 * (t1 - _outer(row))
    assert a2 - _outer(row) == 2 * (a1 - _outer(row))


@given(rows)
def test_tying_removes_exactly_vocab_times_hidden(row):
    f = dict(zip(FIELDS, row))
    untied, tied = call(_with(row, tied=False)), call(_with(row, tied=True))
    assert untied[0] - tied[0] == f["vocab"] * f["hidden"] == untied[1] - tied[1]


@given(rows)
def test_kv_heads_up_to_heads_grows_k_and_v_exactly(row):
    f = dict(zip(FIELDS, row))
    gqa = call(row)
    mha = call(_with(row, kv_heads=f["heads"]))
    per_layer = 2 * f["hidden"] * (f["heads"] - f["kv_heads"]) * f["head_dim"]
    per_layer += 2 * (f["heads"] - f["kv_heads"]) * f["head_dim"] * f["bias"]
    assert mha[0] - gqa[0] == f["layers"] * per_layer == mha[1] - gqa[1]


@given(rows)
def test_active_is_total_when_every_expert_is_chosen(row):
    f = dict(zip(FIELDS, row))
    total, active = call(row)
    assert active <= total
    if f["experts"]:
        assert call(_with(row, top_k=f["experts"]))[1] == total


@given(rows, st.sampled_from(["qk_norm", "bias"]))
def test_each_attention_feature_adds_its_exact_term(row, flag):
    f = dict(zip(FIELDS, row))
    on, off = call(_with(row, **{flag: True})), call(_with(row, **{flag: False}))
    term = 2 * f["head_dim"] if flag == "qk_norm" else (f["heads"] + 2 * f["kv_heads"]) * f["head_dim"]
    assert on[0] - off[0] == f["layers"] * term


def test_counts_past_2_53_are_exact():
    row = catalog.decoder_row(1_000_004, 65537, 128, 8, 128, 262145, 1_000_003)
    f = dict(zip(FIELDS, row))
    h, hd = f["hidden"], f["head_dim"]
    layer = h * (128 + 8) * hd * 2 + 2 * h + 3 * h * f["intermediate"]
    total = call(row)[0]
    assert total == 2 * f["vocab"] * h + h + f["layers"] * layer > 2**53
    assert total % 2 == 1 and int(float(total)) != total  # float64 cannot hold it


def test_empty_and_shaped_inputs_keep_their_shape():
    case = catalog.decoder_case([catalog.QWEN3_8B] * 6, (2, 3))
    total, active = decoder_params(**case.inputs)
    assert total.shape == (2, 3) and total.dtype == np.int64 and np.all(total == call(catalog.QWEN3_8B)[0])
    total, _ = decoder_params(**catalog.decoder_case([]).inputs)
    assert total.shape == (0,) and total.dtype == np.int64


# --- errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("change, error, word", [
    (dict(layers=-1), ValueError, "layers"),
    (dict(kv_heads=0), ValueError, "kv_heads"),
    (dict(heads=6, kv_heads=4), ValueError, "heads"),
    (dict(experts=4, top_k=2, expert_intermediate=8), ValueError, "intermediate"),
    (dict(experts=4, top_k=5, intermediate=0), ValueError, "top_k"),
    (dict(shared_intermediate=3), ValueError, "shared_intermediate"),
    (dict(layers=1 << 24, hidden=1 << 20, intermediate=1 << 20), ValueError, "int64"),
])
def test_bad_configs_are_rejected_with_the_argument_named(change, error, word):
    with pytest.raises(error, match=word):
        call(_with(catalog.decoder_row(2, 32, 8, 2, 4, 48, 50), **change))


def test_bad_dtypes_and_shapes_are_rejected():
    inputs = catalog.decoder_case([catalog.QWEN3_8B]).inputs
    with pytest.raises(TypeError, match="hidden"):
        decoder_params(**{**inputs, "hidden": inputs["hidden"].astype(np.float64)})
    with pytest.raises(TypeError, match="tied"):
        decoder_params(**{**inputs, "tied": inputs["tied"].astype(np.int64)})
    with pytest.raises(TypeError, match="layers"):
        decoder_params(**{**inputs, "layers": np.array([True])})
    with pytest.raises(ValueError, match="vocab.*broadcast"):
        decoder_params(**{**inputs, "vocab": np.array([1, 2], np.int64)})


# --- every mixer and FFN kind: the terms by hand -------------------------------------

def test_each_mixer_and_ffn_kind_counts_its_tensors():
    h = 16
    cases = {
        Attention(4, 2, 8, output_gate=True, out_bias=True): 16 * (32 + 32) + 16 * 16 * 2 + 32 * 16 + 16,
        MLA(4, 6, 5, 3, 2, 4): 16 * 6 + 6 + 6 * 4 * 5 + 16 * 7 + 5 + 5 * 4 * 7 + 16 * 16,
        MLA(4, 0, 5, 3, 2, 4): 16 * 4 * 5 + 16 * 7 + 5 + 5 * 4 * 7 + 16 * 16,
        Mamba2(4, 2, 3, 1, 4): 16 * (8 + 14 + 4) + 14 * 4 + 14 + 3 * 4 + 8 + 8 * 16,
        Mamba2(4, 2, 3, 1, 4, conv_bias=False): 16 * (8 + 14 + 4) + 14 * 4 + 3 * 4 + 8 + 8 * 16,
        GatedDeltaNet(2, 4, 3, 5, 4): 16 * (12 + 40) + 16 * 8 + 32 * 4 + 2 * 4 + 5 + 20 * 16,
    }
    for mixer, expected in cases.items():
        model = Model("m", h, 10, (Block(1, mixer, None),), tied_embeddings=True)
        assert param_counts(model).total == 10 * h + h + h + expected, mixer
    ffns = {MLP(7): (3 * 16 * 7,) * 2, MLP(7, gated=False): (2 * 16 * 7,) * 2,
            MoE(8, 2, 5, 6, gated=False, shared_gate=True):
                (16 * 8 + 8 * 2 * 16 * 5 + 2 * 16 * 6 + 16, 16 * 8 + 2 * 2 * 16 * 5 + 2 * 16 * 6 + 16)}
    for ffn, (total, active) in ffns.items():
        counts = param_counts(Model("f", h, 10, (Block(3, None, ffn),), tied_embeddings=True))
        assert (counts.total, counts.active) == (10 * h + h + 3 * (h + total), 10 * h + h + 3 * (h + active)), ffn


def test_components_add_up_and_tensors_carry_their_copies():
    model = from_hf_config(dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=100,
                                num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                mlp_only_layers=[1]), "m")
    counts = param_counts(model)
    assert sum(counts.by_component.values()) == counts.total
    assert counts.by_component["experts"] == 2 * 8 * 3 * 64 * 32  # layers 0 and 2
    assert counts.by_component["mlp"] == 3 * 64 * 96  # layer 1, in mlp_only_layers
    assert [b.count for b in model.blocks] == [1, 1, 1]
    assert all(t.active == t.count for t in tensors(model) if t.component != "experts")


# --- from_hf_config -------------------------------------------------------------------

def test_layer_order_and_families():
    nemotron = from_hf_config(dict(model_type="nemotron_h", hidden_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=100,
                                   mamba_num_heads=8, mamba_head_dim=8, ssm_state_size=16, n_groups=2,
                                   conv_kernel=4, hybrid_override_pattern="M-M-*-"), "n")
    kinds = [(type(b.mixer).__name__, type(b.ffn).__name__, b.count) for b in nemotron.blocks]
    assert kinds[:3] == [("Mamba2", "NoneType", 1), ("NoneType", "MLP", 1), ("Mamba2", "NoneType", 1)]
    assert nemotron.layers == 6 and nemotron.blocks[1].ffn.gated is False
    deepseek = from_hf_config(dict(model_type="deepseek_v3", hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=5, num_attention_heads=4, n_routed_experts=8,
                                   num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=2,
                                   first_k_dense_replace=2, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16,
                                   qk_rope_head_dim=8, v_head_dim=16, vocab_size=100,
                                   num_nextn_predict_layers=1), "d")
    assert [b.count for b in deepseek.blocks] == [2, 3]
    assert deepseek.blocks[1].ffn.shared_intermediate == 32 and deepseek.blocks[0].mixer.q_lora_rank == 0
    assert "multi-token-prediction" in deepseek.notes
    nxt = from_hf_config(dict(model_type="qwen3_next", hidden_size=64, intermediate_size=96, num_hidden_layers=8,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=100,
                              num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                              shared_expert_intermediate_size=40, linear_num_key_heads=2, linear_num_value_heads=4,
                              linear_key_head_dim=16, linear_value_head_dim=8), "q")
    mixers = [type(b.mixer).__name__ for b in nxt.blocks for _ in range(b.count)]
    assert mixers == ["GatedDeltaNet"] * 3 + ["Attention"] + ["GatedDeltaNet"] * 3 + ["Attention"]
    assert nxt.blocks[1].mixer.output_gate and nxt.blocks[1].ffn.shared_gate


@pytest.mark.parametrize("config, error, word", [
    (dict(model_type="gpt2"), ValueError, "supported"),
    (dict(model_type="llama", hidden_size=64), ValueError, "num_hidden_layers"),
    (dict(model_type="nemotron_h", hybrid_override_pattern="ME"), ValueError, "MoE"),
    (dict(model_type="llama", mlp_bias=True, num_hidden_layers=1), ValueError, "mlp_bias"),
    ([("model_type", "llama")], TypeError, "config"),
])
def test_from_hf_config_rejects_what_it_cannot_model(config, error, word):
    with pytest.raises(error, match=word):
        from_hf_config(config, "x")
    assert {"llama", "qwen3_next", "nemotron_h", "deepseek_v3"} <= set(FAMILIES)


def test_config_fields_added_with_defaults():
    a = Attention(4, 2, 8)
    assert a.out_bias is False and dataclasses.replace(a, out_bias=True).out_bias
    assert Mamba2(4, 2, 3, 1, 4).conv_bias is True


# --- the catalog entries ----------------------------------------------------------------

@pytest.mark.parametrize("module", ["params", "weights"])
def test_catalog_vectors_name_declared_flags_and_their_results_hold(module):
    import importlib

    from ref.roofline.catalog import FLAGS

    entry = importlib.import_module(f"ref.roofline.catalog.{module}").OPERATIONS[0]
    specs = entry.vectors()
    assert specs and len({s.comment for s in specs}) == len(specs)
    for spec in specs:
        assert set(spec.flags) <= set(FLAGS), spec.comment
        call_it = lambda: entry.oracle(**spec.case.inputs, **spec.case.params)  # noqa: E731
        if spec.result == "invalid":
            with pytest.raises((ValueError, TypeError)):
                call_it()
        else:
            out = call_it()
            for part in out if isinstance(out, tuple) else (out,):
                assert part.dtype == np.int64 and part.shape == np.shape(next(iter(spec.case.inputs.values())))
    for flag in set(catalog.FLAGS):  # every flag this op explains is carried by a vector
        if module == "params":
            assert any(flag in s.flags for s in specs), flag

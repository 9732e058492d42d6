"""param_counts against transformers: every family's model built on the meta device
(no memory, no weights), its `num_parameters()` compared with the accounting's total,
and the active count with the module tree's (one token reads top_k of each MoE layer's
experts). Small configs of every family, drawn and listed, and the table's full-size
configs. Needs torch and transformers (the peers)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ref.roofline.hf import from_hf_config  # noqa: E402
from ref.roofline.params import param_counts  # noqa: E402

CLASSES = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "qwen2_moe": "Qwen2MoeConfig",
           "qwen3_moe": "Qwen3MoeConfig", "deepseek_v3": "DeepseekV3Config", "qwen3_next": "Qwen3NextConfig",
           "nemotron_h": "NemotronHConfig"}


def build(kind: str, **fields):
    """A transformers config of `kind` and its causal LM on the meta device."""
    config = getattr(transformers, CLASSES[kind])(**fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return config, model


def engine_counts(model, config) -> tuple[int, int]:
    """(total, active) from the module tree: routed experts' parameters (modules named
    ...experts) scaled by top_k / experts."""
    total = model.num_parameters()
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    e = getattr(config, "num_experts", None) or getattr(config, "n_routed_experts", None) or 0
    k = getattr(config, "num_experts_per_tok", 0) or 0
    inactive = experts * (e - k) // e if e and experts else 0
    return total, total - inactive


def check(kind: str, **fields) -> None:
    config, model = build(kind, **fields)
    ours = param_counts(from_hf_config(config.to_dict(), kind))
    total, active = engine_counts(model, config)
    assert (ours.total, ours.active) == (total, active), (kind, fields, ours, total, active)


SMALL = {
    "llama": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=100),
    "llama_bias_tied": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=1, head_dim=24, vocab_size=100, attention_bias=True,
                            tie_word_embeddings=True),
    "qwen2": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=100),
    "qwen3": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=32, vocab_size=100, use_sliding_window=True, sliding_window=16,
                  max_window_layers=1),
    "qwen3_bias": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, vocab_size=100, attention_bias=True),
    "qwen2_moe": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, num_experts=8, num_experts_per_tok=2,
                      moe_intermediate_size=32, shared_expert_intermediate_size=48, decoder_sparse_step=2,
                      mlp_only_layers=[3]),
    "qwen3_moe": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, vocab_size=100, num_experts=8, num_experts_per_tok=3,
                      moe_intermediate_size=32, mlp_only_layers=[0]),
    "deepseek_v3": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=4, vocab_size=100, n_routed_experts=8, num_experts_per_tok=2,
                        moe_intermediate_size=16, n_shared_experts=2, first_k_dense_replace=1, q_lora_rank=24,
                        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, n_group=2,
                        topk_group=1),
    "deepseek_v3_no_q_lora": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=4, vocab_size=100, n_routed_experts=4, num_experts_per_tok=2,
                                  moe_intermediate_size=16, n_shared_experts=1, first_k_dense_replace=0,
                                  q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                  v_head_dim=16, n_group=1, topk_group=1),
    "qwen3_next": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, vocab_size=100, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32, shared_expert_intermediate_size=40, linear_num_key_heads=2,
                       linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
                       linear_conv_kernel_dim=4, full_attention_interval=2),
    "nemotron_h": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, vocab_size=100, mamba_num_heads=8, mamba_head_dim=8, ssm_state_size=16,
                       n_groups=2, conv_kernel=4, hybrid_override_pattern="M-M*-M"),
}


KIND = {"llama_bias_tied": "llama", "qwen3_bias": "qwen3", "deepseek_v3_no_q_lora": "deepseek_v3"}


@pytest.mark.parametrize("case", sorted(SMALL))
def test_small_configs_match_transformers(case):
    check(KIND.get(case, case), **SMALL[case])


@st.composite
def small_configs(draw):
    """(family, fields): a small config of any family, sizes and switches drawn."""
    kind = draw(st.sampled_from(sorted(CLASSES)))
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    hidden = heads * draw(st.integers(1, 4)) * 4  # LlamaConfig wants hidden % heads == 0
    fields = dict(hidden_size=hidden, intermediate_size=draw(st.integers(1, 40)), num_attention_heads=heads,
                  num_key_value_heads=kv, vocab_size=draw(st.integers(8, 60)),
                  tie_word_embeddings=draw(st.booleans()))
    layers = draw(st.integers(1, 5))
    if kind != "nemotron_h":
        fields["num_hidden_layers"] = layers
    if kind not in ("deepseek_v3",):
        fields["head_dim"] = 2 * draw(st.integers(1, 8))
    if kind in ("llama", "qwen3", "qwen3_moe", "qwen3_next"):
        fields["attention_bias"] = draw(st.booleans())
    experts = draw(st.integers(2, 6))
    moe = dict(num_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
               moe_intermediate_size=draw(st.integers(1, 24)))
    if kind in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        fields.update(moe, decoder_sparse_step=draw(st.integers(1, 2)),
                      mlp_only_layers=draw(st.lists(st.integers(0, layers - 1), max_size=2, unique=True)))
    if kind in ("qwen2_moe", "qwen3_next"):
        fields["shared_expert_intermediate_size"] = draw(st.integers(0, 24))
    if kind == "qwen2_moe":
        fields["qkv_bias"] = draw(st.booleans())
    if kind == "deepseek_v3":
        fields.update(n_routed_experts=experts, num_experts_per_tok=moe["num_experts_per_tok"],
                      moe_intermediate_size=moe["moe_intermediate_size"], n_shared_experts=draw(st.integers(0, 2)),
                      first_k_dense_replace=draw(st.integers(0, layers)), n_group=1, topk_group=1,
                      q_lora_rank=draw(st.sampled_from([None, 8, 16])), kv_lora_rank=draw(st.integers(1, 16)),
                      qk_nope_head_dim=2 * draw(st.integers(1, 8)), qk_rope_head_dim=2 * draw(st.integers(1, 4)),
                      v_head_dim=draw(st.integers(1, 16)), num_key_value_heads=heads)
    if kind == "qwen3_next":
        fields.update(linear_num_key_heads=draw(st.integers(1, 3)), linear_num_value_heads=0,
                      linear_key_head_dim=2 * draw(st.integers(1, 8)), linear_value_head_dim=draw(st.integers(1, 8)),
                      linear_conv_kernel_dim=draw(st.integers(1, 4)),
                      layer_types=draw(st.lists(st.sampled_from(["full_attention", "linear_attention"]),
                                                min_size=layers, max_size=layers)))
        fields["linear_num_value_heads"] = fields["linear_num_key_heads"] * draw(st.integers(1, 2))
    if kind == "nemotron_h":
        fields.update(hybrid_override_pattern=draw(st.text("M*-", min_size=1, max_size=6)),
                      mamba_num_heads=draw(st.integers(1, 4)) * 2, mamba_head_dim=draw(st.integers(1, 8)),
                      ssm_state_size=draw(st.integers(1, 8)), n_groups=2, conv_kernel=draw(st.integers(1, 4)),
                      use_conv_bias=draw(st.booleans()))
    return kind, fields


@settings(max_examples=40, deadline=None)
@given(small_configs())
def test_drawn_configs_match_transformers(drawn):
    kind, fields = drawn
    check(kind, **fields)


# The table's models at full size (config.json values as published on huggingface.co; the
# models are built on the meta device, so size costs nothing). Expected: transformers'
# own count, and the model card's figure to its stated digits.
FULL = {
    "Qwen3-8B": ("qwen3", dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                               tie_word_embeddings=False), "8.2B", None),
    "Qwen3-30B-A3B": ("qwen3_moe", dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                                        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                                        head_dim=128, num_experts=128, num_experts_per_tok=8, vocab_size=151936,
                                        tie_word_embeddings=False), "30.5B", "3.3B"),
    "Llama-3.1-70B": ("llama", dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                    num_attention_heads=64, num_key_value_heads=8, vocab_size=128256), "70B", None),
    "DeepSeek-V3": ("deepseek_v3", dict(hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                                        num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
                                        n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8,
                                        first_k_dense_replace=3, q_lora_rank=1536, kv_lora_rank=512,
                                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_group=8,
                                        topk_group=4, vocab_size=129280), "671B", "37B"),
    "Qwen3-Next-80B-A3B": ("qwen3_next", dict(hidden_size=2048, intermediate_size=5120, num_hidden_layers=48,
                                              full_attention_interval=4, num_attention_heads=16,
                                              num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                                              linear_num_value_heads=32, linear_key_head_dim=128,
                                              linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=512,
                                              num_experts_per_tok=10, moe_intermediate_size=512,
                                              shared_expert_intermediate_size=512, vocab_size=151936), "80B", None),
    "Nemotron-H-8B": ("nemotron_h", dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                         head_dim=128, intermediate_size=21504, mamba_num_heads=128,
                                         mamba_head_dim=64, ssm_state_size=128, n_groups=8, conv_kernel=4,
                                         vocab_size=131072, hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*"
                                         "-M-M-M-M-M*-M-M-M-M-M-"), "8B", None),
}


@pytest.mark.parametrize("name", sorted(FULL))
def test_table_models_match_transformers_and_their_cards(name):
    kind, fields, total, active = FULL[name]
    check(kind, **fields)
    ours = param_counts(from_hf_config(build(kind, **fields)[0].to_dict(), name))
    # Model cards (huggingface.co): Qwen3-8B "8.2B"; Qwen3-30B-A3B "30.5B in total and 3.3B
    # activated"; Llama-3.1-70B "70B"; DeepSeek-V3 "671B total parameters with 37B activated";
    # Qwen3-Next-80B-A3B "80B in total"; Nemotron-H-8B-Base-8K "8B" (its name).
    assert agrees(ours.total, total), (ours.total, total)
    if active:
        assert agrees(ours.active, active), (ours.active, active)


def agrees(count: int, stated: str) -> bool:
    """`count` is the card's "8.2B" to its digits: rounded, or truncated (cards do both:
    3,353,032,704 is "3.3B", 37.55e9 is "37B")."""
    digits = len(stated[:-1].partition(".")[2])
    unit = 10 ** (9 - digits)
    value = round(float(stated[:-1]) * 10 ** digits) * unit
    return 2 * abs(count - value) <= unit or value <= count < value + unit

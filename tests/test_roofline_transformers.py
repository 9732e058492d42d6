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


@pytest.mark.parametrize("case", sorted(SMALL))
def test_small_configs_match_transformers(case):
    check(KIND.get(case, case), **SMALL[case])


KIND = {"llama_bias_tied": "llama", "qwen3_bias": "qwen3", "deepseek_v3_no_q_lora": "deepseek_v3"}

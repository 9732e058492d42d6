"""The model table: the config.json fields the accounting reads, copied from each
model's Hugging Face repository, and the parameter counts its model card states.

    HF_CONFIGS[name] -> (config dict, Source)      keys and values exactly as in config.json
    STATED_PARAMS[name] -> (dict, Source)          what the model card says, as written
    models() -> {name: Model}                      built by ref.roofline.hf.from_hf_config

Only the fields the accounting (parameters, weight bytes, KV/state bytes, FLOPs) reads
are copied; everything else in the file (rope settings, token ids, dtype, ...) is left
out. Each Source quote lists the keys copied, so a reader can compare the dict with the
file line by line. STATED_PARAMS keeps the card's own rounding ("8.2B"): a test builds
each config in transformers on the meta device and checks that num_parameters() rounds
to it, which is what shows these dicts are the models they name.

Users add their own model the same way: a dict with these keys and from_hf_config, or
a ref.roofline.config.Model written out by hand.
"""

from __future__ import annotations

import re

from ref.roofline.config import Source

__all__ = ["HF_CONFIGS", "STATED_PARAMS", "agrees", "models", "parse_stated"]  # and MODELS, built lazily (below)

_HF = "https://huggingface.co/"


def _config_source(repo: str, cfg: dict) -> Source:
    return Source(url=f"{_HF}{repo}/blob/main/config.json", title=f"{repo} config.json",
                  quote="keys read: " + ", ".join(sorted(cfg)))


_QWEN3_8B = {
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "sliding_window": None,
    "use_sliding_window": False,
    "max_window_layers": 36,
}

_QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "sliding_window": None,
    "use_sliding_window": False,
}

_LLAMA_31_70B = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
}

_DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "topk_method": "noaux_tc",
    "n_group": 8,
    "topk_group": 4,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
}

_QWEN3_NEXT_80B_A3B = {
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "num_hidden_layers": 48,
    "full_attention_interval": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "attention_bias": False,
}

_NEMOTRON_H_8B = {
    "model_type": "nemotron_h",
    "hidden_size": 4096,
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "attention_head_dim": 128,
    "intermediate_size": 21504,
    "mlp_hidden_act": "relu2",
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "use_bias": False,
    "use_conv_bias": True,
    "mamba_proj_bias": False,
    "mlp_bias": False,
    "attention_bias": False,
    "vocab_size": 131072,
    "tie_word_embeddings": False,
}

_REPOS = {
    "Qwen3-8B": ("Qwen/Qwen3-8B", _QWEN3_8B),
    "Qwen3-30B-A3B": ("Qwen/Qwen3-30B-A3B", _QWEN3_30B_A3B),
    "Llama-3.1-70B": ("meta-llama/Llama-3.1-70B", _LLAMA_31_70B),
    "DeepSeek-V3": ("deepseek-ai/DeepSeek-V3", _DEEPSEEK_V3),
    "Qwen3-Next-80B-A3B-Instruct": ("Qwen/Qwen3-Next-80B-A3B-Instruct", _QWEN3_NEXT_80B_A3B),
    "Nemotron-H-8B-Base-8K": ("nvidia/Nemotron-H-8B-Base-8K", _NEMOTRON_H_8B),
}

HF_CONFIGS: dict[str, tuple[dict, Source]] = {
    name: (cfg, _config_source(repo, cfg)) for name, (repo, cfg) in _REPOS.items()
}


def _card(repo: str, quote: str) -> Source:
    return Source(url=f"{_HF}{repo}", title=f"{repo} model card", quote=quote)


# What each model card states, with the card's own rounding. Keys: "total", "active"
# (MoE), "non_embedding" where the card gives it. "excludes" names what the stated figure
# leaves out (DeepSeek-V3's 671B excludes the 14B multi-token-prediction module).
STATED_PARAMS: dict[str, tuple[dict, Source]] = {
    "Qwen3-8B": ({"total": "8.2B", "non_embedding": "6.95B"},
                 _card("Qwen/Qwen3-8B", "Number of Parameters: 8.2B; Number of Paramaters (Non-Embedding): 6.95B")),
    "Qwen3-30B-A3B": ({"total": "30.5B", "active": "3.3B", "non_embedding": "29.9B"},
                      _card("Qwen/Qwen3-30B-A3B", "Number of Parameters: 30.5B in total and 3.3B activated; "
                            "Number of Paramaters (Non-Embedding): 29.9B")),
    "Llama-3.1-70B": ({"total": "70B"},
                      _card("meta-llama/Llama-3.1-70B", "The Meta Llama 3.1 collection of multilingual large "
                            "language models (LLMs) is a collection of pretrained and instruction tuned generative "
                            "models in 8B, 70B and 405B sizes")),
    "DeepSeek-V3": ({"total": "671B", "active": "37B", "excludes": "MTP module (14B)"},
                    _card("deepseek-ai/DeepSeek-V3", "a strong Mixture-of-Experts (MoE) language model with 671B "
                          "total parameters with 37B activated for each token; The total size of DeepSeek-V3 models "
                          "on Hugging Face is 685B, which includes 671B of the Main Model weights and 14B of the "
                          "Multi-Token Prediction (MTP) Module weights.")),
    "Qwen3-Next-80B-A3B-Instruct": ({"total": "80B", "active": "3B"},
                                    _card("Qwen/Qwen3-Next-80B-A3B-Instruct",
                                          "Number of Parameters: 80B in total and 3B activated")),
    "Nemotron-H-8B-Base-8K": ({"total": "8B"},
                              _card("nvidia/Nemotron-H-8B-Base-8K", "Nemotron-H-8B-Base-8K [the name states 8B] ... "
                                    "The model uses a hybrid architecture consisting primarily of Mamba-2 and MLP "
                                    "layers combined with just four Attention layers.")),
}


def parse_stated(text: str) -> tuple[int, int]:
    """"8.2B" -> (8_200_000_000, 100_000_000): the stated count and one unit of its last
    digit, both exact integers."""
    if not isinstance(text, str) or re.fullmatch(r"\d+(\.\d{1,9})?B", text) is None:
        raise ValueError(f"parse_stated: expected a count like '8.2B' (digits, up to 9 decimals, 'B'), got {text!r}")
    whole, _, frac = text[:-1].partition(".")
    unit = 10 ** (9 - len(frac))
    return int(whole + frac) * unit, unit


def agrees(count: int, text: str) -> bool:
    """True when `count` is what the card's `text` says, to its stated digits: rounded
    (|count - value| <= half a unit of the last digit) or truncated (value <= count <
    value + one unit). Cards do both: Qwen3-8B's "8.2B" is 8.19e9 rounded; Qwen3-30B-A3B's
    "3.3B activated" is 3.353e9 truncated, DeepSeek-V3's "37B activated" 37.55e9 truncated."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"agrees: expected a count as a non-negative int, got {count!r}")
    value, unit = parse_stated(text)
    return 2 * abs(count - value) <= unit or value <= count < value + unit


def models() -> dict:
    """{name: Model} for every entry of HF_CONFIGS, built by ref.roofline.hf.from_hf_config
    (imported here, so this table loads without it)."""
    from ref.roofline.hf import from_hf_config

    return {name: from_hf_config(cfg, name, source) for name, (cfg, source) in HF_CONFIGS.items()}


def __getattr__(name: str):
    # MODELS is built on first use (module __getattr__, PEP 562), so importing this table
    # does not need ref.roofline.hf.
    if name == "MODELS":
        built = models()
        globals()["MODELS"] = built
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""from_hf_config's additions: the checkpoint's storage format from its
quantization_config, the mistral family, and a non-number where a count belongs."""

from __future__ import annotations

import pytest

from ref.roofline import HF_CONFIGS, MODELS, from_hf_config, param_counts, kv_bytes
from ref.roofline.hf import checkpoint_format

LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}


@pytest.mark.parametrize("quantization, expected", [
    (None, "bfloat16"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}, "float8_block128"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "float8_channel"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, "int4_g128"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False}, "int4_g128_zp"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "int4_g128_zp"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
])
def test_the_checkpoint_format_is_read_from_the_quantization_config(quantization, expected):
    config = {**LLAMA_8B, **({"quantization_config": quantization} if quantization else {})}
    assert checkpoint_format(config) == expected
    assert from_hf_config(config, "llama").extra["checkpoint_format"] == expected


@pytest.mark.parametrize("quantization", [{"quant_method": "gptq", "bits": 3, "group_size": 128},
                                          {"quant_method": "bitsandbytes", "load_in_4bit": True}])
def test_a_quantization_config_not_read_is_an_error_naming_it(quantization):
    with pytest.raises(ValueError, match="quantization_config"):
        checkpoint_format({**LLAMA_8B, "quantization_config": quantization})


def test_deepseek_v3_ships_fp8_in_128x128_blocks():
    assert HF_CONFIGS["DeepSeek-V3"][0]["quantization_config"]["weight_block_size"] == [128, 128]
    assert MODELS["DeepSeek-V3"].extra["checkpoint_format"] == "float8_block128"
    assert MODELS["Qwen3-8B"].extra["checkpoint_format"] == "bfloat16"


def test_mistral_is_llama_with_one_window_for_every_layer():
    llama = from_hf_config(LLAMA_8B, "llama")
    mistral = from_hf_config({**LLAMA_8B, "model_type": "mistral", "sliding_window": 4096}, "mistral")
    assert param_counts(mistral) == param_counts(llama)
    assert kv_bytes(mistral, 4096) == kv_bytes(llama, 4096)
    assert kv_bytes(mistral, 32768) == kv_bytes(llama, 4096) < kv_bytes(llama, 32768)
    unwindowed = from_hf_config({**LLAMA_8B, "model_type": "mistral", "sliding_window": None}, "mistral")
    assert kv_bytes(unwindowed, 32768) == kv_bytes(llama, 32768)


@pytest.mark.parametrize("key, value", [("num_hidden_layers", "32"), ("hidden_size", 4096.0),
                                        ("num_key_value_heads", [8])])
def test_a_count_that_is_not_a_number_is_an_error_naming_its_key(key, value):
    with pytest.raises(ValueError, match=key):
        from_hf_config({**LLAMA_8B, key: value}, "llama")

"""A `Model` from a Hugging Face config.json (a dict), read the way transformers reads it.

    from_hf_config(config, name, source=None) -> Model

Families (config["model_type"]): llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, deepseek_v3,
qwen3_next, nemotron_h. Layers are read one by one (which are MoE, which are sliding
window, which are recurrent), then consecutive identical layers are merged into one
`Block`, so the blocks keep layer order. A key missing from the dict takes
transformers' default for that family; a feature the accounting does not model (an
MLP bias, Mamba projection biases, Nemotron-H's MoE layers) is a ValueError rather than
a silently wrong count.

Tied embeddings follow transformers: nemotron_h's causal LM declares no tied weights,
so its LM head is counted even when a config says tie_word_embeddings.

Not built, as transformers does not build them: DeepSeek-V3's multi-token-prediction
layers (num_nextn_predict_layers, 1 for V3: 14B of the checkpoint's 685B), and
Nemotron-H's MTP layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ref.roofline.config import MLA, MLP, Attention, Block, GatedDeltaNet, Mamba2, Model, MoE, Source

__all__ = ["FAMILIES", "checkpoint_format", "from_hf_config"]


_TEXT = {"model_type", "hybrid_override_pattern", "layer_types", "layers_block_type", "mlp_only_layers"}


def _get(config: Mapping[str, Any], key: str, default: Any = None, *, required: bool = False) -> Any:
    if key in config and config[key] is not None:
        value = config[key]
        if key not in _TEXT and not isinstance(value, (bool, int)):
            raise ValueError(f"config: {key}: expected a number or a bool, got {value!r}")
        return value
    if required:
        raise ValueError(f"config: {config.get('model_type')!r} needs the key {key!r}")
    return default


def _attention(c: Mapping[str, Any], *, qkv_bias: bool, out_bias: bool, qk_norm: bool, window: int | None = None,
               output_gate: bool = False) -> Attention:
    heads = _get(c, "num_attention_heads", required=True)
    hidden = _get(c, "hidden_size", required=True)
    return Attention(heads=heads, kv_heads=_get(c, "num_key_value_heads", heads),
                     head_dim=_get(c, "head_dim", hidden // heads), qk_norm=qk_norm, bias=qkv_bias,
                     output_gate=output_gate, window=window, out_bias=out_bias)


def _windows(c: Mapping[str, Any], layers: int) -> list[int | None]:
    """Each layer's sliding window (None: full attention): `layer_types` when given, else
    Qwen2/Qwen3's use_sliding_window with max_window_layers (layers from it on slide)."""
    window = _get(c, "sliding_window")
    types = _get(c, "layer_types")
    if types is None:
        slide = bool(_get(c, "use_sliding_window", False)) and window is not None
        first = _get(c, "max_window_layers", layers)
        return [window if slide and i >= first else None for i in range(layers)]
    if len(types) != layers:
        raise ValueError(f"config: layer_types has {len(types)} entries for {layers} layers")
    return [window if t == "sliding_attention" else None for t in types]


def _experts(c: Mapping[str, Any], required: bool = False) -> int:
    """num_experts as config.json names it, or num_local_experts (transformers 5's to_dict)."""
    if "num_experts" not in c and "num_local_experts" in c:
        return _get(c, "num_local_experts", 0)
    return _get(c, "num_experts", 0, required=required)


def _sparse_layers(c: Mapping[str, Any], layers: int, experts: int) -> list[bool]:
    """Qwen2-MoE / Qwen3-MoE / Qwen3-Next: a layer is MoE unless it is in mlp_only_layers
    or (index + 1) is not a multiple of decoder_sparse_step."""
    only = set(_get(c, "mlp_only_layers", []))
    step = _get(c, "decoder_sparse_step", 1)
    return [experts > 0 and i not in only and (i + 1) % step == 0 for i in range(layers)]


def _dense(c) -> list[tuple]:
    kind = c["model_type"]
    layers = _get(c, "num_hidden_layers", required=True)
    if _get(c, "mlp_bias", False):
        raise ValueError("config: mlp_bias is not modelled")
    bias = bool(_get(c, "attention_bias", False))
    mlp = MLP(_get(c, "intermediate_size", required=True))
    if kind == "qwen2":  # q, k, v always biased, o never
        make = dict(qkv_bias=True, out_bias=False, qk_norm=False)
    else:  # llama, mistral, qwen3: attention_bias on all four projections
        make = dict(qkv_bias=bias, out_bias=bias, qk_norm=kind == "qwen3")
    if kind == "mistral":  # one sliding window (or none) for every layer
        return [(_attention(c, window=_get(c, "sliding_window"), **make), mlp)] * layers
    return [(_attention(c, window=w, **make), mlp) for w in _windows(c, layers)]


def _qwen_moe(c) -> list[tuple]:
    kind = c["model_type"]
    layers = _get(c, "num_hidden_layers", required=True)
    experts = _experts(c, required=True)
    top_k = _get(c, "num_experts_per_tok", required=True)
    if kind == "qwen2_moe":
        bias = bool(_get(c, "qkv_bias", True))
        attn_make = dict(qkv_bias=bias, out_bias=False, qk_norm=False)
        moe = MoE(experts, top_k, _get(c, "moe_intermediate_size", required=True),
                  _get(c, "shared_expert_intermediate_size", required=True), shared_gate=True)
    else:
        bias = bool(_get(c, "attention_bias", False))
        attn_make = dict(qkv_bias=bias, out_bias=bias, qk_norm=True)
        moe = MoE(experts, top_k, _get(c, "moe_intermediate_size", required=True))
    dense = MLP(_get(c, "intermediate_size", required=True))
    windows = _windows(c, layers)
    return [(_attention(c, window=w, **attn_make), moe if sparse else dense)
            for w, sparse in zip(windows, _sparse_layers(c, layers, experts))]


def _deepseek_v3(c) -> list[tuple]:
    layers = _get(c, "num_hidden_layers", required=True)
    q_lora_rank = (c.get("q_lora_rank") or 0) if "q_lora_rank" in c else 1536  # transformers' default
    mla = MLA(heads=_get(c, "num_attention_heads", required=True), q_lora_rank=q_lora_rank,
              kv_lora_rank=_get(c, "kv_lora_rank", required=True),
              qk_nope_head_dim=_get(c, "qk_nope_head_dim", required=True),
              qk_rope_head_dim=_get(c, "qk_rope_head_dim", required=True),
              v_head_dim=_get(c, "v_head_dim", required=True))
    if _get(c, "attention_bias", False):
        raise ValueError("config: attention_bias is not modelled for deepseek_v3")
    moe = MoE(_get(c, "n_routed_experts", required=True), _get(c, "num_experts_per_tok", required=True),
              _get(c, "moe_intermediate_size", required=True),
              _get(c, "moe_intermediate_size") * _get(c, "n_shared_experts", 0), router_bias=True)
    first_dense = _get(c, "first_k_dense_replace", 0)
    dense = MLP(_get(c, "intermediate_size", required=True))
    return [(mla, dense if i < first_dense else moe) for i in range(layers)]


def _qwen3_next(c) -> list[tuple]:
    layers = _get(c, "num_hidden_layers", required=True)
    types = _get(c, "layer_types")
    if types is None:
        interval = _get(c, "full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if len(types) != layers:
        raise ValueError(f"config: layer_types has {len(types)} entries for {layers} layers")
    bias = bool(_get(c, "attention_bias", False))
    attention = _attention(c, qkv_bias=bias, out_bias=bias, qk_norm=True, output_gate=True)
    gdn = GatedDeltaNet(key_heads=_get(c, "linear_num_key_heads", required=True),
                        value_heads=_get(c, "linear_num_value_heads", required=True),
                        key_head_dim=_get(c, "linear_key_head_dim", required=True),
                        value_head_dim=_get(c, "linear_value_head_dim", required=True),
                        conv_kernel=_get(c, "linear_conv_kernel_dim", 4))
    experts = _experts(c)
    moe = MoE(experts, _get(c, "num_experts_per_tok", required=True), _get(c, "moe_intermediate_size", required=True),
              _get(c, "shared_expert_intermediate_size", 0), shared_gate=True) if experts else None
    dense = MLP(_get(c, "intermediate_size", required=True))
    out = []
    for t, sparse in zip(types, _sparse_layers(c, layers, experts)):
        if t not in ("full_attention", "linear_attention"):
            raise ValueError(f"config: layer type {t!r} is not one of full_attention, linear_attention")
        out.append((attention if t == "full_attention" else gdn, moe if sparse else dense))
    return out


NEMOTRON_H_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp"}


def _nemotron_h(c) -> list[tuple]:
    pattern = _get(c, "hybrid_override_pattern")
    if pattern is None:
        legacy = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
                  "moe": "E"}
        pattern = "".join(legacy.get(t, "?") for t in _get(c, "layers_block_type", required=True))
    unknown = sorted(set(pattern) - set(NEMOTRON_H_PATTERN))
    if unknown:
        raise ValueError(f"config: hybrid_override_pattern has {unknown}: only M (Mamba-2), * (attention) and "
                         "- (MLP) are modelled (Nemotron-H's MoE layers, E, are not)")
    if _get(c, "use_bias", False) or _get(c, "mlp_bias", False) or _get(c, "attention_bias", False):
        raise ValueError("config: use_bias, mlp_bias and attention_bias are not modelled for nemotron_h")
    heads = _get(c, "num_attention_heads", required=True)
    attention = Attention(heads, _get(c, "num_key_value_heads", heads),
                          _get(c, "head_dim", _get(c, "attention_head_dim", c["hidden_size"] // heads)))
    mamba = Mamba2(heads=_get(c, "mamba_num_heads", required=True), head_dim=_get(c, "mamba_head_dim", required=True),
                   d_state=_get(c, "ssm_state_size", required=True),
                   groups=_get(c, "n_groups", _get(c, "mamba_n_groups", 8)),
                   conv_kernel=_get(c, "conv_kernel", _get(c, "mamba_d_conv", 4)),
                   conv_bias=bool(_get(c, "use_conv_bias", _get(c, "mamba_conv_bias", True))))
    mlp = MLP(_get(c, "intermediate_size", required=True), gated=False)  # squared ReLU: up, down
    return [{"M": (mamba, None), "*": (attention, None), "-": (None, mlp)}[p] for p in pattern]


FAMILIES = {"llama": _dense, "mistral": _dense, "qwen2": _dense, "qwen3": _dense, "qwen2_moe": _qwen_moe,
            "qwen3_moe": _qwen_moe, "deepseek_v3": _deepseek_v3, "qwen3_next": _qwen3_next, "nemotron_h": _nemotron_h}

TIED_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False, "qwen2_moe": False,
                "qwen3_moe": False, "deepseek_v3": False, "qwen3_next": False, "nemotron_h": False}


def _blocks(layers: list[tuple]) -> tuple[Block, ...]:
    """Runs of identical consecutive (mixer, ffn) layers as Blocks, in layer order."""
    blocks: list[Block] = []
    for mixer, ffn in layers:
        if blocks and blocks[-1].mixer == mixer and blocks[-1].ffn == ffn:
            blocks[-1] = Block(blocks[-1].count + 1, mixer, ffn)
        else:
            blocks.append(Block(1, mixer, ffn))
    return tuple(blocks)


def from_hf_config(config: Mapping[str, Any], name: str, source: Source | None = None) -> Model:
    """The `Model` a config.json describes (module docstring: the families and what is
    not built). `config` is the parsed JSON; `name` the table's name for it."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a dict (a parsed config.json), got {type(config).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"name: expected a str, got {type(name).__name__}")
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise ValueError(f"config: model_type {kind!r} is not supported; supported: {sorted(FAMILIES)}")
    layers = FAMILIES[kind](config)
    notes = {"deepseek_v3": f"{_get(config, 'num_nextn_predict_layers', 0)} multi-token-prediction layer(s) "
                            "not counted (transformers does not build them)"}.get(kind, "")
    tied = bool(_get(config, "tie_word_embeddings", TIED_DEFAULT[kind]))
    if kind == "nemotron_h" and tied:  # transformers' NemotronHForCausalLM ties nothing (_tied_weights_keys {})
        tied = False
        notes = "tie_word_embeddings ignored, as transformers builds a separate LM head for nemotron_h"
    return Model(name=name, hidden=_get(config, "hidden_size", required=True),
                 vocab=_get(config, "vocab_size", required=True), blocks=_blocks(layers),
                 tied_embeddings=tied, source=source,
                 notes=notes, extra={"model_type": kind, "checkpoint_format": checkpoint_format(config)})


def checkpoint_format(config: Mapping[str, Any]) -> str:
    """The storage format (a key of ref.roofline.weights.FORMATS) of the checkpoint a
    config.json describes, read from its quantization_config: fp8 with 128x128 weight
    blocks (DeepSeek-V3) float8_block128, fp8 otherwise float8_channel; GPTQ and AWQ at 4
    bits in groups of 128 int4_g128 (symmetric) or int4_g128_zp; ModelOpt's NVFP4 nvfp4;
    mxfp4 (gpt-oss) mxfp4; no quantization_config bfloat16. Any other is a ValueError
    naming what it found (the caller picks a format by hand)."""
    q = config.get("quantization_config")
    if not q:
        return "bfloat16"
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        return "float8_block128" if list(q.get("weight_block_size") or []) == [128, 128] else "float8_channel"
    bits, group = q.get("bits", q.get("w_bit")), q.get("group_size", q.get("q_group_size"))
    if method in ("gptq", "awq") and bits == 4 and group == 128:
        return "int4_g128" if method == "gptq" and q.get("sym", False) else "int4_g128_zp"
    if method == "mxfp4":
        return "mxfp4"
    if method == "modelopt" and "fp4" in str(q.get("quant_algo", "")).lower():
        return "nvfp4"
    raise ValueError(f"config: quantization_config {dict(q)!r} is not one of the formats read "
                     "(fp8, 4-bit GPTQ/AWQ in groups of 128, mxfp4, ModelOpt NVFP4): name the format by hand")

"""The accounting against a real engine: torch's FlopCounterMode around transformers
forwards (the torch_flops adapter, and the divergences it avoids, each asserted exactly),
and transformers' DynamicCache bytes after a forward against kv_bytes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ref.conformance.adapters import torch_flops  # noqa: E402
from ref.roofline.catalog import flops as flops_catalog  # noqa: E402
from ref.roofline.config import MLA, MLP, Attention, Block, GatedDeltaNet, Mamba2, Model, MoE  # noqa: E402
from ref.roofline.flops import forward_flops, forward_flops_decoder  # noqa: E402
from ref.roofline.kv import (gated_delta_state_bytes, kv_attention_bytes, kv_bytes,  # noqa: E402
                             kv_mla_bytes, mamba2_state_bytes)

INPUTS = flops_catalog.INPUTS
TINY = dict(layers=2, hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=48, experts=0, top_k=0,
            expert_intermediate=0, shared_intermediate=0, vocab=50)
TINY_MOE = {**TINY, "intermediate": 0, "experts": 6, "top_k": 2, "expert_intermediate": 16}


def _oracle(c: dict, causal="full", lm_head="all") -> int:
    return int(forward_flops_decoder(**{k: np.int64(c[k]) for k in INPUTS}, causal=causal, lm_head=lm_head))


def _adapter(c: dict, lm_head="all") -> int:
    return int(torch_flops.forward(**{k: np.int64(c[k]) for k in INPUTS}, causal="full", lm_head=lm_head))


@settings(max_examples=15, deadline=None)
@given(case=flops_catalog.decoder_configs({"causal": ["full"], "lm_head": ["last", "all", "none"]}))
def test_flop_counter_matches_the_oracle_under_causal_full(case):
    got = torch_flops.forward(**case.inputs, **case.params)
    assert got.tolist() == forward_flops_decoder(**case.inputs, **case.params).tolist()


@pytest.mark.parametrize("config", ["QWEN3_8B", "QWEN3_30B_A3B", "QWEN15_MOE"])
def test_flop_counter_matches_the_table_models_at_full_size(config):
    # on the meta device: the counter reads shapes, so 40,000 tokens of Qwen3-8B cost nothing
    c = getattr(flops_catalog, config)
    for tokens, context in ((4096, 0), (1, 40_000)):
        for lm in ("last", "none"):
            assert _adapter({**c, "tokens": tokens, "context": context}, lm) == \
                _oracle({**c, "tokens": tokens, "context": context}, lm_head=lm)


def _counted(model, ids) -> dict:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(ids)
    return {"total": counter.get_total_flops(), **{p: sum(v.values()) for p, v in counter.get_flop_counts().items()}}


def _cpu_model(c: dict, *, attn: str, experts: str | None = None):
    model = torch_flops.build(c)  # meta; rebuild on the CPU with real (random) weights for routing
    config = model.config
    config._attn_implementation = attn
    if experts:
        config._experts_implementation = experts
    torch.manual_seed(0)
    return type(model)(config).eval()


def test_default_grouped_mm_experts_count_zero_flops():
    # transformers 5.24's default experts_implementation runs torch's grouped_mm, which
    # FlopCounterMode has no formula for: the routed experts vanish from the count
    c = {**TINY_MOE, "tokens": 7, "context": 0}
    model = _cpu_model(c, attn="eager", experts="grouped_mm")
    measured = _counted(model, torch.randint(0, 50, (1, 7)))["total"]
    routed = 2 * 7 * c["top_k"] * 3 * c["hidden"] * c["expert_intermediate"] * c["layers"]
    assert measured == _oracle(c) - routed
    model.config._experts_implementation = "eager"  # one F.linear per expert hit: exactly top_k per token
    assert _counted(model, torch.randint(0, 50, (1, 7)))["total"] == _oracle(c)


def test_cpu_sdpa_counts_no_attention_flops():
    # aten._scaled_dot_product_flash_attention_for_cpu has no formula in FlopCounterMode
    c = {**TINY, "tokens": 9, "context": 0}
    measured = _counted(_cpu_model(c, attn="sdpa"), torch.zeros(1, 9, dtype=torch.long))["total"]
    attention = 2 * c["heads"] * 2 * c["head_dim"] * 9 * 9 * c["layers"]  # the full square
    assert measured == _oracle(c) - attention
    assert _counted(_cpu_model(c, attn="eager"), torch.zeros(1, 9, dtype=torch.long))["total"] == _oracle(c)


def test_qwen2_moe_shared_expert_gate_is_the_only_extra_matmul():
    c = {**TINY_MOE, "shared_intermediate": 24, "tokens": 5, "context": 3}
    counts = torch_flops.measure(c, "all")
    gate = sum(v for p, v in counts.items() if p.endswith("shared_expert_gate"))
    assert gate == 2 * 5 * c["hidden"] * c["layers"]
    assert counts["total"] - gate == _oracle(c) == _adapter(c)


def test_adapter_refuses_what_the_op_refuses_and_declines_what_it_cannot_run():
    with pytest.raises(ValueError):
        _adapter({**TINY, "tokens": 2, "context": 0, "kv_heads": 3})
    with pytest.raises(NotImplementedError):
        _adapter({**TINY, "tokens": 0, "context": 4})
    with pytest.raises(NotImplementedError):
        torch_flops.forward(**{k: np.int64({**TINY, "tokens": 2, "context": 0}[k]) for k in INPUTS},
                            causal="exact")


# KV bytes against DynamicCache -------------------------------------------------------

def _cache_bytes(model, ids, cache=None) -> tuple[int, object]:
    with torch.no_grad():
        out = model(ids, cache=cache, use_cache=True)
    cache = out.past_key_values
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers), cache


@given(tokens=st.integers(1, 12), step=st.integers(1, 3), dtype=st.sampled_from(["bfloat16", "float32"]))
@settings(max_examples=10, deadline=None)
def test_dynamic_cache_holds_kv_bytes(tokens, step, dtype):
    c = {**TINY, "tokens": tokens, "context": 0}
    model = _cpu_model(c, attn="eager").to(getattr(torch, dtype))
    bits = 16 if dtype == "bfloat16" else 32
    held, cache = _cache_bytes(model, torch.zeros(1, tokens, dtype=torch.long))
    expected = int(kv_attention_bytes(tokens, c["layers"], c["kv_heads"], c["head_dim"], c["head_dim"], bits))
    assert held == expected
    held, _ = _cache_bytes(model, torch.zeros(1, step, dtype=torch.long), cache)  # decode / a chunk after it
    model_view = Model("tiny", c["hidden"], c["vocab"],
                       (Block(c["layers"], Attention(c["heads"], c["kv_heads"], c["head_dim"]), MLP(48)),))
    assert held == kv_bytes(model_view, tokens + step, element_bits=bits)


def test_sliding_window_cache_keeps_window_minus_one_between_steps():
    # transformers' DynamicSlidingWindowLayer keeps the window - 1 newest keys after a forward (the next
    # query adds its own to see `window`); kv_bytes bills `window`, what a step holds at its peak
    config = transformers.MistralConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=50,
                                        sliding_window=4)
    model = transformers.MistralForCausalLM(config).eval()
    held, _ = _cache_bytes(model, torch.zeros(1, 10, dtype=torch.long))
    windowed = Model("mistral-tiny", 32, 50, (Block(2, Attention(4, 2, 8, window=4), MLP(48)),))
    assert held == kv_bytes(windowed, 3, element_bits=32) == kv_bytes(windowed, 10, element_bits=32) * 3 // 4


# Recurrent state against transformers' linear-attention cache layers ------------------------------

def _state_held(model, tokens: int) -> tuple[int, set]:
    """Bytes of every conv and recurrent state tensor after a forward and one decode step, and their dtypes."""
    with torch.no_grad():
        out = model(torch.zeros(1, tokens, dtype=torch.long), use_cache=True)
        out = model(torch.zeros(1, 1, dtype=torch.long), cache=out.past_key_values, use_cache=True)
    held, dtypes = 0, set()
    for layer in out.past_key_values.layers:
        for states in (getattr(layer, "conv_states", None), getattr(layer, "recurrent_states", None)):
            for t in (states.values() if isinstance(states, dict) else states or ()):
                if t is not None:
                    held += t.nbytes
                    dtypes.add((t.shape[-1], t.dtype))
    return held, dtypes


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gated_delta_and_mamba2_state_against_transformers(dtype):
    # transformers keeps the recurrent state in float32 whatever the model dtype (state_bytes' default
    # state_bits=32) and the conv window in the model dtype, but conv_kernel columns of it where vLLM
    # keeps conv_kernel - 1 (the op's definition): one column per conv channel and layer more
    bits = 16 if dtype == "bfloat16" else 32
    qwen3_next = transformers.Qwen3NextConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=50, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=6, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=8, shared_expert_intermediate_size=8, full_attention_interval=4)
    held, _ = _state_held(transformers.Qwen3NextForCausalLM(qwen3_next).to(getattr(torch, dtype)).eval(), 6)
    conv_dim = 2 * 2 * 8 + 4 * 6
    assert held == int(gated_delta_state_bytes(3, 2, 4, 8, 6, 4, 32, bits)) + 3 * conv_dim * bits // 8
    nemotron = transformers.NemotronHConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=50, mamba_num_heads=4, mamba_head_dim=6, ssm_state_size=5, n_groups=2, conv_kernel=4,
        hybrid_override_pattern="M*M-")
    held, dtypes = _state_held(transformers.NemotronHForCausalLM(nemotron).to(getattr(torch, dtype)).eval(), 6)
    conv_dim = 4 * 6 + 2 * 2 * 5
    assert held == int(mamba2_state_bytes(2, 4, 6, 5, 2, 4, 32, bits)) + 2 * conv_dim * bits // 8
    assert (5, torch.float32) in dtypes  # the SSM state [heads, head_dim, d_state]


@pytest.mark.parametrize("q_lora,tokens,context", [(0, 5, 0), (24, 5, 0), (24, 1, 7), (0, 3, 4)])
def test_mla_naive_flops_and_latent_cache_against_deepseek_v3(q_lora, tokens, context):
    # transformers 5.24's DeepseekV3Attention caches the normed latent and the RoPE key (one "head" each)
    # and decompresses every cached latent through kv_b_proj at each forward: forward_flops' mla="naive"
    config = transformers.DeepseekV3Config(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=2, first_k_dense_replace=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_lora or None, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, vocab_size=50, n_routed_experts=4,
        num_experts_per_tok=2, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    with torch.device("meta"):
        model = transformers.DeepseekV3ForCausalLM(config).eval()
    cache = transformers.DynamicCache(config=config)
    for layer in range(2 if context else 0):
        cache.update(torch.empty(1, 1, context, 16, device="meta"), torch.empty(1, 1, context, 4, device="meta"),
                     layer)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, tokens, dtype=torch.long, device="meta"), cache=cache, use_cache=True, logits_to_keep=0)
    ours = Model("dsv3-tiny", 64, 50, (Block(2, MLA(4, q_lora, 16, 8, 4, 6), MLP(96)),))
    assert counter.get_total_flops() == forward_flops(ours, tokens, context, "full", "all", mla="naive")
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)  # float32 on meta
    assert held == kv_bytes(ours, context + tokens, element_bits=32) == \
        int(kv_mla_bytes(context + tokens, 2, 16, 4, 32))


def _decode_step_counts(model) -> int:
    with torch.no_grad():
        cache = model(torch.zeros(1, 6, dtype=torch.long), use_cache=True).past_key_values
        with FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, 1, dtype=torch.long), cache=cache, use_cache=True, logits_to_keep=0)
    return counter.get_total_flops()


def test_recurrent_decode_step_against_transformers_reference_kernels():
    # A decode step of the hybrids through transformers' PyTorch fallbacks (no mamba_ssm, no fla): the
    # projections, attention (with Qwen3-Next's output gate) and MoE (with its shared-expert gate) count as
    # forward_flops says; two differences, asserted exactly: (1) the conv update convolves the cached
    # window plus the new input, 2 output positions of which it keeps 1 (2 * 2 * conv_dim * conv_kernel
    # counted, not 2 * conv_dim * conv_kernel); (2) state updates are broadcast multiplies, which
    # FlopCounterMode does not count: Gated DeltaNet's 6 * value_heads * dk * dv are all left out, and
    # Mamba-2's update (2 * d_inner * d_state) too, its readout y = C h (a matmul) counted
    torch.manual_seed(0)
    nemotron = transformers.NemotronHConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=50, mamba_num_heads=4, mamba_head_dim=6, ssm_state_size=5, n_groups=2, conv_kernel=4,
        hybrid_override_pattern="M*M-")
    nemotron._attn_implementation = "eager"
    ours = Model("nemotron-tiny", 32, 50, (Block(2, Mamba2(4, 6, 5, 2, 4), None), Block(1, Attention(4, 2, 8), None),
                                           Block(1, None, MLP(48, gated=False))))
    conv_dim, inner = 4 * 6 + 2 * 2 * 5, 4 * 6
    measured = _decode_step_counts(transformers.NemotronHForCausalLM(nemotron).eval())
    assert measured == forward_flops(ours, 1, 6, "full", "all") + 2 * (2 * conv_dim * 4 - 2 * inner * 5)
    qwen3_next = transformers.Qwen3NextConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=50, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=6, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=8, shared_expert_intermediate_size=8, full_attention_interval=4)
    qwen3_next._attn_implementation = "eager"
    qwen3_next._experts_implementation = "eager"
    moe = MoE(4, 2, 8, 8, shared_gate=True)
    ours = Model("qwen3-next-tiny", 32, 50, (Block(3, GatedDeltaNet(2, 4, 8, 6, 4), moe),
                                             Block(1, Attention(4, 2, 8, qk_norm=True, output_gate=True), moe)))
    conv_dim = 2 * 2 * 8 + 4 * 6
    measured = _decode_step_counts(transformers.Qwen3NextForCausalLM(qwen3_next).eval())
    assert measured == forward_flops(ours, 1, 6, "full", "all") + 3 * (2 * conv_dim * 4 - 6 * 4 * 8 * 6)

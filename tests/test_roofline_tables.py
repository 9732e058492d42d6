"""The hardware and model tables: every figure traceable to the words of its source,
and the model dicts checked against transformers and the model cards.

Expected values here are the tutorial's stated figures and the vendors' / model cards'
published ones (each named in a comment); nothing is copied from a run of the code.
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.roofline.config import Source
from ref.roofline.hardware import FIGURES, FLOP_FORMATS, HARDWARE, LINKS, MEASURED, Figure, Hardware, Link
from ref.roofline.models import HF_CONFIGS, STATED_PARAMS, agrees, parse_stated

# ------------------------------------------------------------------ sources


def _good_source(src) -> bool:
    return isinstance(src, Source) and src.url.startswith("https://") and src.quote.strip() and src.title.strip()


@pytest.mark.parametrize("name", list(HARDWARE))
def test_every_hardware_figure_has_a_source_with_a_quote(name):
    hw = HARDWARE[name]
    assert hw.missing_sources() == []
    for fld in hw.numeric_fields():
        assert _good_source(hw.sources[fld]), (name, fld)
    assert set(hw.sources) == set(hw.numeric_fields()), "a source for a field the entry does not have"
    assert set(hw.links) <= set(LINKS)


@pytest.mark.parametrize("name", list(LINKS))
def test_every_link_has_a_source_with_a_quote(name):
    link = LINKS[name]
    assert link.name == name and _good_source(link.source)


def _value(name: str, fld: str) -> float:
    if name in LINKS:
        return LINKS[name].bytes_per_s
    hw = HARDWARE[name]
    return hw.flops[fld.split(".", 1)[1]] if fld.startswith("flops.") else getattr(hw, fld)


def _source(name: str, fld: str) -> Source:
    return LINKS[name].source if name in LINKS else HARDWARE[name].sources[fld]


def test_every_number_is_derived_from_the_number_its_quote_prints():
    """The printed figure appears verbatim in the quote; the table value is that figure
    times its unit, over the GPUs it is shared by, halved only where the quote or notes
    say sparse (FLOP/s) or both directions (links)."""
    assert set(FIGURES) == set(HARDWARE) | set(LINKS)
    for name, figures in FIGURES.items():
        owner = LINKS.get(name) or HARDWARE[name]
        fields = {"bytes_per_s"} if name in LINKS else set(HARDWARE[name].numeric_fields())
        assert set(figures) == fields, name
        for fld, fig in figures.items():
            quote = _source(name, fld).quote
            assert re.search(rf"(?<![\d.,]){re.escape(fig.text)}(?![\d]|[.,]\d)", quote), (name, fld, fig.text, quote)
            printed = float(fig.text.replace(",", "")) * fig.unit
            assert _value(name, fld) == printed / fig.divisor / (2 if fig.halved else 1), (name, fld)
            if fig.halved and fld.startswith("flops."):
                assert "spars" in quote.lower(), (name, fld)
            if fig.halved and name in LINKS:
                assert "both directions" in owner.notes, name
            if fig.divisor > 1:  # a system figure: the quote or the notes name the count
                assert str(fig.divisor) in quote or str(fig.divisor) in owner.notes, (name, fld)


def test_dense_figures_are_at_most_the_sparse_ones_printed():
    for name, figures in FIGURES.items():
        for fld, fig in figures.items():
            if fld.startswith("flops."):
                printed_per_gpu = float(fig.text.replace(",", "")) * fig.unit / fig.divisor
                assert _value(name, fld) <= printed_per_gpu, (name, fld)


@pytest.mark.parametrize("name", list(HARDWARE))
def test_narrower_formats_are_never_slower(name):
    """A Tensor Core's dense rate doubles as the operands halve (BF16 -> FP8 -> FP4) on
    every part in the table; int8 runs at the FP8 rate."""
    flops = HARDWARE[name].flops
    order = [f for f in ("bfloat16", "float8", "float4") if f in flops]
    assert all(flops[a] <= flops[b] for a, b in zip(order, order[1:])), (name, flops)
    if "int8" in flops and "float8" in flops:
        assert flops["int8"] == flops["float8"]


def test_table_shape_and_units():
    assert set(HARDWARE) == {"B200", "H100", "H200", "GB200 NVL72", "R200", "M3 Ultra", "RTX 5090", "DGX Spark",
                             "A100", "B300", "MI300X", "MI355X", "L40S"}
    assert set(LINKS) == {"infinity_fabric3", "nvlink3", "nvlink4", "nvlink5", "nvlink6", "pcie4_x16", "pcie5_x16",
                          "pcie6_x16", "nic_200g", "nic_400g", "nic_800g"}
    for hw in HARDWARE.values():
        assert set(hw.flops) <= set(FLOP_FORMATS)
        assert 1e11 < hw.bandwidth < 1e14 and 1e10 < hw.capacity < 1e12, hw.name  # bytes/s and bytes, not GB
        assert all(1e13 < v < 1e17 for v in hw.flops.values()), hw.name  # FLOP/s, not TFLOP/s
    assert HARDWARE["R200"].status == "announced" and "1750" in HARDWARE["R200"].notes


def test_link_generations_double():
    # NVIDIA: each NVLink generation doubles the per-GPU bandwidth; each PCIe generation
    # doubles the transfer rate (16, 32, 64 GT/s).
    assert LINKS["nvlink5"].bytes_per_s == 2 * LINKS["nvlink4"].bytes_per_s
    assert LINKS["nvlink6"].bytes_per_s == 2 * LINKS["nvlink5"].bytes_per_s
    assert LINKS["pcie5_x16"].bytes_per_s == 2 * LINKS["pcie4_x16"].bytes_per_s
    assert LINKS["pcie6_x16"].bytes_per_s == 2 * LINKS["pcie5_x16"].bytes_per_s
    assert LINKS["nic_800g"].bytes_per_s == 2 * LINKS["nic_400g"].bytes_per_s == 4 * LINKS["nic_200g"].bytes_per_s
    assert LINKS["nvlink5"].bytes_per_s > 14 * LINKS["pcie5_x16"].bytes_per_s  # NVIDIA: "over 14X ... PCIe Gen5"
    # NVLink 3 (A100, 600 GB/s both ways) to NVLink 4 (H100, 900 GB/s): x1.5, not x2.
    assert 2 * LINKS["nvlink4"].bytes_per_s == 3 * LINKS["nvlink3"].bytes_per_s


def test_the_planning_accelerators_have_the_vendors_dense_figures():
    """The machines added for capacity planning, against the figures their vendors
    print (each quoted in ref.roofline.hardware_more), dense and per GPU."""
    a100, b300, mi300x, mi355x, l40s = (HARDWARE[n] for n in ("A100", "B300", "MI300X", "MI355X", "L40S"))
    # NVIDIA A100 80GB SXM: "BFLOAT16 Tensor Core 312 TFLOPS | 624 TFLOPS*", "INT8 ... 624 TOPS", 2,039 GB/s, 80 GB
    assert (a100.flops, a100.bandwidth, a100.capacity) == ({"bfloat16": 312e12, "int8": 624e12}, 2039e9, 80e9)
    assert "float8" not in a100.flops and "nvlink3" in a100.links  # Ampere has no FP8 Tensor Cores
    # HGX B300, per GPU (NVIDIA's Blackwell technical brief, Table 3): FP4 "18 | 14" PF sparse | dense, FP8 9 and
    # BF16 4.5 PF with sparsity, 270 GB at 7.7 TB/s. Blackwell Ultra keeps the B200's FP8/BF16 and lifts FP4.
    assert b300.flops == {"bfloat16": 2.25e15, "float8": 4.5e15, "float4": 14e15}
    assert (b300.bandwidth, b300.capacity) == (7.7e12, 270e9) and "pcie6_x16" in b300.links
    b200 = HARDWARE["B200"]
    assert b300.flops["float8"] == b200.flops["float8"] and b300.flops["float4"] > 1.5 * b200.flops["float4"]
    # AMD MI300X (footnote MI300-17): BF16 1307.4, FP8 2614.9 TFLOPS, INT8 2614.9 TOPs dense; 5.3 TB/s; 192 GB
    assert mi300x.flops == {"bfloat16": 1307.4e12, "float8": 2614.9e12, "int8": 2614.9e12} and mi300x.capacity == 192e9
    assert round(mi300x.flops["float8"] / mi300x.bandwidth) == 493
    # AMD Infinity Fabric (MI300X): 128 GB/s a link, both ways; 7 peer links = the 896 GB/s aggregate
    assert 7 * 2 * LINKS["infinity_fabric3"].bytes_per_s == 896e9 and "infinity_fabric3" in mi300x.links
    # AMD MI355X: BF16 2.5, FP8 5, MXFP4 10.1 PF dense (the press "20.1 PFLOPS" is the sparse figure); 288 GB, 8 TB/s
    assert mi355x.flops == {"bfloat16": 2.5e15, "float8": 5e15, "float4": 10.1e15}
    assert (mi355x.bandwidth, mi355x.capacity) == (8e12, 288e9) and "20.1" in mi355x.notes
    # NVIDIA L40S: BF16 362.05 / FP8 733 TFLOPS dense (733* / 1,466* with sparsity), 864 GB/s, 48 GB, PCIe 4
    assert l40s.flops == {"bfloat16": 362.05e12, "float8": 733e12} and (l40s.bandwidth, l40s.capacity) == (864e9, 48e9)
    assert l40s.links == ("pcie4_x16",)


# ------------------------------------------------------- the tutorial's figures


def test_b200_ridge_is_the_tutorials_562():
    # tutorial: "B200 ~4.5 PFLOP/s dense FP8, 8 TB/s: ridge 4500/8 = 562 FLOP/byte"
    b200 = HARDWARE["B200"]
    assert b200.flops["float8"] == 4.5e15 and b200.bandwidth == 8e12
    assert math.floor(b200.flops["float8"] / b200.bandwidth) == 562


def test_r200_the_tutorials_figures_disagree_and_the_announced_ones_give_800():
    # tutorial: "35 PF FP8 and 20 TB/s, 'ridge ~800'": 35e15 / 20e12 = 1750, not ~800.
    assert 35e15 / 20e12 == 1750
    r200 = HARDWARE["R200"]
    assert round(r200.flops["float8"] / r200.bandwidth, -2) == 800  # announced dense FP8 / HBM4 bandwidth
    assert r200.flops["float4"] == 35e15  # the tutorial's "35 PF" is NVIDIA's dense NVFP4 figure


def test_local_decode_bounds_are_the_tutorials():
    # tutorial: "8B at 4 bits ~4.5 GB/token; M3 Ultra 819 GB/s gives ~182 tok/s, RTX 5090 (1792 GB/s, 32 GB)
    # ~398 tok/s but cannot hold 70B"
    per_token = 4.5e9
    assert round(HARDWARE["M3 Ultra"].bandwidth / per_token) == 182
    assert round(HARDWARE["RTX 5090"].bandwidth / per_token) == 398
    assert HARDWARE["RTX 5090"].capacity == 32e9 < 70e9 * 4 / 8  # 70B at 4 bits is 35 GB of weights alone


def test_dgx_spark_measured_gap_is_390x():
    # tutorial: "DGX Spark, 8B: prefill 7991 tok/s vs decode 20.5 tok/s, a 390x gap"
    run = MEASURED["dgx_spark_llama31_8b_fp8_sglang_b1"]
    assert (run.prefill_tokens_per_s, run.decode_tokens_per_s) == (7991.0, 20.5)
    assert round(run.prefill_tokens_per_s / run.decode_tokens_per_s) == 390
    assert run.hardware in HARDWARE and run.batch == 1 and run.precision == "FP8" and run.engine == "SGLang"
    for m in MEASURED.values():
        assert _good_source(m.source) and m.hardware in HARDWARE
        assert f"{m.prefill_tokens_per_s:,.0f}" in m.source.quote and f"{m.decode_tokens_per_s:g}" in m.source.quote


# ------------------------------------------------------------------ errors


_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**20))


@given(bandwidth=_numbers, capacity=_numbers, peak=_numbers)
def test_hardware_accepts_exactly_the_positive_finite_numbers(bandwidth, capacity, peak):
    ok = all(math.isfinite(v) and v > 0 for v in (bandwidth, capacity, peak))
    if ok:
        hw = Hardware("x", {"float8": peak}, bandwidth, capacity)
        assert hw.missing_sources() == ["bandwidth", "capacity", "flops.float8"]
    else:
        with pytest.raises(ValueError, match=r"Hardware x\.(bandwidth|capacity|flops)"):
            Hardware("x", {"float8": peak}, bandwidth, capacity)


def test_hardware_and_link_reject_bad_input():
    with pytest.raises(ValueError, match="expected keys among"):
        Hardware("x", {"fp8": 1e15}, 1e12, 1e9)
    with pytest.raises(TypeError, match=r"Hardware x\.bandwidth: expected a number"):
        Hardware("x", {}, True, 1e9)
    with pytest.raises(TypeError, match=r"Hardware x\.flops: expected a dict"):
        Hardware("x", [1e15], 1e12, 1e9)
    with pytest.raises(ValueError, match="status"):
        Hardware("x", {}, 1e12, 1e9, status="rumoured")
    with pytest.raises(ValueError, match=r"Link y\.bytes_per_s"):
        Link("y", 0, Source("https://a", "t", "q"))
    assert Figure("1,440", 1e9, divisor=8).value == 180e9 and Figure("3,958", 1e12, halved=True).value == 1979e12


# ------------------------------------------------------------------ models


def test_model_dicts_name_their_config_json_and_cards():
    assert set(HF_CONFIGS) == set(STATED_PARAMS)
    for name, (cfg, src) in HF_CONFIGS.items():
        assert src.url.startswith("https://huggingface.co/") and src.url.endswith("/config.json")
        assert all(key in src.quote for key in cfg), name  # the quote lists every key copied
        assert "model_type" in cfg
        stated, card = STATED_PARAMS[name]
        assert _good_source(card) and card.url.startswith("https://huggingface.co/")
        for key in ("total", "active", "non_embedding"):
            if key in stated:
                parse_stated(stated[key])  # well formed
                assert stated[key].removesuffix("B") in card.quote, (name, key)


@given(st.integers(0, 10**13), st.integers(0, 3))
def test_agrees_is_rounding_or_truncation_to_the_stated_digits(count, decimals):
    unit = 10 ** (9 - decimals)
    rounded = (2 * count + unit) // (2 * unit) * unit  # half up
    truncated = count // unit * unit

    def text(v):
        whole, frac = divmod(v // unit, 10**decimals)
        return f"{whole}.{frac:0{decimals}d}B" if decimals else f"{whole}B"

    assert agrees(count, text(rounded)) and agrees(count, text(truncated))
    assert not agrees(count, text(truncated + 2 * unit))
    if truncated >= unit:
        assert not agrees(count, text(truncated - unit))


def test_parse_stated_and_agrees_reject_bad_input():
    for bad in ("8.2", "8,2B", "B", "1.0000000001B", 8.2):
        with pytest.raises(ValueError, match="parse_stated"):
            parse_stated(bad)
    with pytest.raises(ValueError, match="agrees"):
        agrees(-1, "8B")
    assert parse_stated("6.95B") == (6_950_000_000, 10_000_000)


def test_nemotron_pattern_is_the_cards_four_attention_layers():
    # card: "a hybrid architecture consisting primarily of Mamba-2 and MLP layers combined with just four
    # Attention layers"; the pattern has one character a layer (M Mamba-2, * attention, - MLP).
    cfg, _ = HF_CONFIGS["Nemotron-H-8B-Base-8K"]
    pattern = cfg["hybrid_override_pattern"]
    assert len(pattern) == cfg["num_hidden_layers"] and set(pattern) == set("M*-")
    assert pattern.count("*") == 4 and "four Attention layers" in STATED_PARAMS["Nemotron-H-8B-Base-8K"][1].quote
    assert cfg["mamba_num_heads"] * cfg["mamba_head_dim"] == cfg["expand"] * cfg["hidden_size"]


def _meta_model(cfg: dict):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    kwargs = dict(cfg)
    config = transformers.CONFIG_MAPPING[kwargs.pop("model_type")](**kwargs)
    with torch.device("meta"):
        return config, transformers.AutoModelForCausalLM.from_config(config)


def _active(model, config) -> int:
    """Parameters a token touches: all but the routed experts, plus top_k of them (the
    fused expert tensors of transformers 5 are [experts, ...])."""
    experts = getattr(config, "num_experts", None) or getattr(config, "n_routed_experts", None)
    top_k = config.num_experts_per_tok
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return model.num_parameters() - routed + routed * top_k // experts


@pytest.mark.parametrize("name", list(HF_CONFIGS))
def test_config_builds_in_transformers_and_matches_the_card(name):
    cfg, _ = HF_CONFIGS[name]
    config, model = _meta_model(cfg)
    stated, _ = STATED_PARAMS[name]
    total = model.num_parameters()
    assert agrees(total, stated["total"]), (name, total, stated)
    embed = model.get_input_embeddings().weight.numel()
    if "non_embedding" in stated:  # Qwen's cards leave out the embedding and the (untied) LM head
        assert agrees(total - 2 * embed, stated["non_embedding"]), (name, total - 2 * embed)
    if "active" in stated:
        assert agrees(_active(model, config), stated["active"]), (name, _active(model, config))


def test_tutorial_counts_from_the_qwen3_8b_config():
    # tutorial: 16.4 GB = 8.19e9 params x 2 B; KV 147,456 B/token = 36*8*128*2*2; MoE "30.5B / 3.35B"
    cfg, _ = HF_CONFIGS["Qwen3-8B"]
    kv = cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 2 * 2
    assert kv == 147_456
    llama, _ = HF_CONFIGS["Llama-3.1-70B"]
    head_dim = llama["hidden_size"] // llama["num_attention_heads"]
    assert llama["num_hidden_layers"] * llama["num_key_value_heads"] * head_dim * 2 * 2 == 327_680
    ds, _ = HF_CONFIGS["DeepSeek-V3"]
    assert ds["kv_lora_rank"] + ds["qk_rope_head_dim"] == 576  # MLA: 512 latent + 64 RoPE key per token-layer
    _, model = _meta_model(cfg)
    assert round(model.num_parameters() * 2 / 1e9, 1) == 16.4
    cfg30, _ = HF_CONFIGS["Qwen3-30B-A3B"]
    config30, model30 = _meta_model(cfg30)
    assert round(_active(model30, config30) / 1e9, 2) == 3.35


@given(st.integers(1, 4), st.integers(1, 3))
def test_doubling_layers_doubles_the_non_embedding_params(layers, kv_heads):
    """The property the accounting relies on, checked on transformers itself: the
    parameters outside the embedding, LM head and final norm scale with the layers."""
    cfg = dict(HF_CONFIGS["Qwen3-8B"][0], hidden_size=64, intermediate_size=96, num_attention_heads=6,
               num_key_value_heads=kv_heads if 6 % kv_heads == 0 else 1, head_dim=16, vocab_size=50,
               num_hidden_layers=layers, max_window_layers=layers)
    counts = []
    for n in (layers, 2 * layers):
        _, model = _meta_model(dict(cfg, num_hidden_layers=n, max_window_layers=n))
        counts.append(model.num_parameters() - 2 * 50 * 64 - 64)
    assert counts[1] == 2 * counts[0]


def test_models_builds_every_entry_when_the_converter_is_there():
    pytest.importorskip("ref.roofline.hf")
    from ref.roofline import models as table

    built = table.models()
    assert set(built) == set(HF_CONFIGS) and table.MODELS.keys() == built.keys()
    for name, model in built.items():
        assert model.name == name and model.source == HF_CONFIGS[name][1]

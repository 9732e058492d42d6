"""The tour's figures: each recomputed claim agrees with its stated figure exactly when
the claim gives no reason to differ; perturbing a model moves the figures as the
formulas say; `llm-ref roofline` prints the table and one model's sheet."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ref.cli import main
from ref.roofline import (
    HARDWARE,
    HF_CONFIGS,
    MODELS,
    decode_step,
    forward_flops,
    kv_bytes,
    param_counts,
    prefill,
    state_bytes,
    tour,
)
from ref.roofline.summary import compute_format, ganged, summary


@pytest.mark.parametrize("claim", tour.CLAIMS, ids=lambda c: c.key)
def test_a_claim_agrees_unless_it_says_why_not(claim):
    result = tour.check(claim)
    assert math.isfinite(result.computed) and result.computed > 0
    assert result.agrees == (claim.differs == ""), (claim.key, result.computed, claim.stated)
    assert claim.says and claim.how and claim.unit


def test_the_claims_that_differ_are_the_tours_roundings_and_its_unstated_assumptions():
    differing = {c.key for c in tour.CLAIMS if not tour.check(c).agrees}
    assert differing == {"qwen3_8b.decode_flops", "qwen3_8b.decode_rate", "qwen3_8b.batch32_kv", "disagg.nvlink"}
    assert len({c.key for c in tour.CLAIMS}) == len(tour.CLAIMS)


@given(st.integers(1, 10**6), st.integers(1, 4), st.integers(-40, 40))
def test_rounds_to_accepts_half_a_unit_of_the_last_stated_digit_and_no_more(mantissa, digits, exponent):
    stated = float(mantissa) * 10.0**exponent
    shown = int(math.floor(math.log10(stated))) - digits + 1
    stated = round(stated / 10.0**shown) * 10.0**shown  # a figure with `digits` significant digits
    unit = 10.0 ** (math.floor(math.log10(stated)) - digits + 1)  # 95 -> 100 at one digit: its unit is 100
    assert tour.rounds_to(stated + 0.49 * unit, stated, digits)
    assert tour.rounds_to(stated - 0.49 * unit, stated, digits)
    assert not tour.rounds_to(stated + 0.51 * unit, stated, digits)
    assert not tour.rounds_to(stated - 0.51 * unit, stated, digits)


def _doubled(model):
    return replace(model, name=model.name + " x2", blocks=tuple(replace(b, count=2 * b.count) for b in model.blocks))


def _outside_layers(model) -> int:
    counts = param_counts(model)
    return counts.embedding + counts.lm_head + model.hidden  # the final norm


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("tokens", [1, 4096, 40_000])
def test_doubling_the_layers_doubles_what_lives_in_them(name, tokens):
    model = MODELS[name]
    twice = _doubled(model)
    assert kv_bytes(twice, tokens) == 2 * kv_bytes(model, tokens)
    assert state_bytes(twice) == 2 * state_bytes(model)
    inside, inside_twice = (param_counts(m).total - _outside_layers(m) for m in (model, twice))
    assert inside_twice == 2 * inside
    assert forward_flops(twice, tokens, lm_head="none") == 2 * forward_flops(model, tokens, lm_head="none")
    head = forward_flops(model, tokens, lm_head="last") - forward_flops(model, tokens, lm_head="none")
    assert head == 2 * model.hidden * model.vocab  # the LM head is outside the layers: it does not double


def test_more_kv_heads_grow_the_cache_and_the_projections_exactly():
    qwen = MODELS["Qwen3-8B"]
    (block,) = qwen.blocks
    wide = replace(qwen, blocks=(replace(block, mixer=replace(block.mixer, kv_heads=16)),))
    assert kv_bytes(wide, 1) == 2 * kv_bytes(qwen, 1) == 2 * 147_456
    # k and v projections: hidden x 8 more heads x 128 each, per layer
    assert param_counts(wide).total - param_counts(qwen).total == 36 * 2 * 4096 * 8 * 128


def test_the_sheet_is_the_accounting_it_prints():
    qwen, b200 = MODELS["Qwen3-8B"], HARDWARE["B200"]
    text = summary(qwen, b200, 40_000, fmt="float8")
    assert "float8 4,500 TFLOP/s" in text and "562.5 FLOP/B" in text
    assert "8,190,735,360" in text and "147,456 B" in text and "5.90 GB per sequence" in text
    assert "27 sequences" in text and "MORE" not in text
    assert "605" not in text and "MORE than the 180.00 GB" in summary(qwen, b200, 40_000, 100)
    assert "at least" in summary(qwen, HARDWARE["M3 Ultra"], 1000)  # no FLOP/s figure: a bound
    with pytest.raises(ValueError, match="context"):
        summary(qwen, b200, 0)
    with pytest.raises(ValueError, match="fmt"):
        summary(qwen, b200, 1000, fmt="int8")


def test_the_compute_format_follows_the_weights_where_the_hardware_has_it():
    b200, spark = HARDWARE["B200"], HARDWARE["DGX Spark"]
    assert [compute_format(b200, w) for w in ("bfloat16", "float8_block128", "mxfp8", "nvfp4", "mxfp4", "int4_g128")] \
        == ["bfloat16", "float8", "float8", "float4", "float4", "bfloat16"]
    assert compute_format(spark, "nvfp4") == "float4" and compute_format(spark, "bfloat16") is None
    with pytest.raises(ValueError, match="weight_format"):
        compute_format(b200, "fp8")


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_ganged_gpus_scale_every_rate_and_the_capacity(gpus):
    h100 = HARDWARE["H100"]
    many = ganged(h100, gpus)
    assert many.bandwidth == gpus * h100.bandwidth and many.capacity == gpus * h100.capacity
    assert all(many.flops[f] == gpus * h100.flops[f] for f in h100.flops)
    assert decode_step(MODELS["Qwen3-8B"], many, 8192).time * gpus == pytest.approx(
        decode_step(MODELS["Qwen3-8B"], h100, 8192).time)


def test_the_command_prints_the_tour_and_a_sheet(capsys, tmp_path):
    assert main(["roofline"]) == 0
    out = capsys.readouterr().out
    assert all(c.key in out for c in tour.CLAIMS) and "differs: 364 is 8000 / 22" in out
    assert main(["roofline", "--model", "Qwen3-8B", "--hardware", "H100", "--context", "1000"]) == 0
    assert "Qwen3-8B on H100" in capsys.readouterr().out
    config = tmp_path / "Qwen3-8B" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(HF_CONFIGS["Qwen3-8B"][0]))
    assert main(["roofline", "--config", str(config)]) == 0
    assert "Qwen3-8B on B200" in capsys.readouterr().out  # the folder names the model
    assert main(["roofline", "--config", str(config.parent)]) == 0  # a snapshot's folder
    assert "Qwen3-8B on B200" in capsys.readouterr().out
    assert main(["roofline", "--list"]) == 0
    assert "DGX Spark" in capsys.readouterr().out
    for argv, what in ((["--model", "nope"], "--model"), (["--model", "Qwen3-8B", "--hardware", "nope"], "--hardware"),
                       (["--model", "Qwen3-8B", "--config", str(config)], "not both"),
                       (["--model", "Qwen3-8B", "--weights", "fp8"], "--weights"),
                       (["--model", "Qwen3-8B", "--fmt", "fp8"], "--fmt"),
                       (["--model", "Qwen3-8B", "--kv-bits", "0"], "--kv-bits"),
                       (["--model", "Qwen3-8B", "--reserve", "-1"], "--reserve"),
                       (["--hardware", "H200"], "needs --model"),
                       (["--config", str(tmp_path / "missing.json")], "--config")):
        assert main(["roofline", *argv]) == 2, argv
        assert what in capsys.readouterr().err
    assert main(["roofline", "--plots", str(tmp_path / "img")]) == 0
    assert (tmp_path / "img" / "roofline.svg").is_file()


def test_decode_counts_mla_absorbed_and_prefill_decompressed():
    deepseek, b200 = MODELS["DeepSeek-V3"], HARDWARE["B200"]
    step = decode_step(deepseek, b200, 40_000, fmt="float8")
    assert step.flops == forward_flops(deepseek, 1, 40_000, mla="absorbed")
    assert decode_step(deepseek, b200, 40_000, fmt="float8", mla="naive").flops > 100 * step.flops
    assert prefill(deepseek, b200, 4096, fmt="float8").flops == forward_flops(deepseek, 4096, mla="naive")
    qwen = MODELS["Qwen3-8B"]  # no MLA layer: the switch changes nothing
    assert decode_step(qwen, b200, 4096, mla="naive").flops == decode_step(qwen, b200, 4096).flops

"""Catalog declarations of attention.rope and attention.mla (their vectors, random
cases and emulations); `ref.attention.ops` lists them with the other attention ops."""

from __future__ import annotations

import math
import numpy as np
from hypothesis import strategies as st

from ref.attention import emulate, mla, rope
from ref.attention.ops_common import grid
from ref.formats.minifloat import round_to
from ref.testing.bounded import Bound
from ref.testing.golden import Case, VectorSpec
from ref.testing.operations import Variant, seed_for

# k = 4: a float32 RoPE's error is the angle's, position times the frequency's error, and float32
# pow implementations differ by up to 2 ulps (torch) from a correctly rounded frequency.
ROPE_BOUND = Bound(k=4.0, floor=2.0, scale="relative")
ROPE_VARIANTS = (
    Variant("style", tuple(m.value for m in rope.RopeStyle), "neox", "which dims pair up: rotate-half (neox) or interleaved (gptj)"),
    Variant("attention_factor", tuple(m.value for m in rope.AttentionFactor), "cos_sin",
            "where YaRN's attention factor goes: into cos and sin, or left to the softmax scale"),
    Variant("mscale_keys", tuple(m.value for m in rope.MscaleKeys), "transformers",
            "which keys YaRN's attention factor is read from: transformers (attention_factor, else the "
            "mscale ratio when both are given, else 0.1 ln s + 1) or vLLM's DeepSeek rotary embedding "
            "(mscale / mscale_all_dim, defaults 1 and 0)"),
)
DEEPSEEK_V3_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
GPT_OSS_YARN = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                "beta_slow": 1.0, "truncate": False}
LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}


# YaRN configurations whose attention factor the two key readers (MSCALE_KEYS) disagree on.
_MSCALE_ALONE = tuple({"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048, **keys}
                      for keys in ({"mscale": 0.707}, {"mscale_all_dim": 0.707}, {"attention_factor": 1.25}))


def _rope_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("attention.rope"))
    v = []

    def add(comment, flags, x, positions, result="valid", **params):
        v.append(VectorSpec(comment, tuple(flags), Case({"x": x, "positions": np.asarray(positions, np.int64)},
                                                        params), result))

    for style in tuple(m.value for m in rope.RopeStyle):
        add(f"{style} pairing, positions 0..5", ["RopePairing"], grid(rng, (2, 6, 2, 8)), np.arange(6), style=style)
        add(f"{style} partial rotary: 8 of 16 dims rotate, the rest pass through", ["RopePairing", "RopeFrequencies"],
            grid(rng, (1, 5, 2, 16)), np.arange(5) + 3, rotary_dim=8, style=style)
    add("partial rotary 32 of 128 (GPT-NeoX's 25%), frequencies over the rotary dim", ["RopeFrequencies"],
        grid(rng, (1, 4, 1, 128)), [0, 1, 700, 4095], rotary_dim=32)
    add("explicit position ids: out of order and repeated", ["RopePositions"], grid(rng, (6, 2, 8)),
        [5, 0, 3, 3, 100, 2])
    add("positions per batch row [B, L]", ["RopePositions"], grid(rng, (2, 3, 2, 8)), [[0, 1, 2], [7, 8, 9]])
    add("large positions (131071, 500000): float32 angles lose precision", ["RopePositions"],
        grid(rng, (4, 2, 128)), [131071, 500000, 65536, 1], base=500000.0)
    add("base 500000 (Llama 3)", ["RopeFrequencies"], grid(rng, (1, 4, 2, 128)), [0, 10, 1000, 8191],
        base=500000.0)
    add("Llama-3.1 scaling: wavelengths in all three regions, positions to 100k", ["RopeScaling"],
        grid(rng, (5, 2, 128)), [0, 1, 8191, 32768, 100000], base=500000.0, scaling=LLAMA31)
    add("YaRN as DeepSeek-V3 (factor 40), interleaved, attention factor left to the softmax",
        ["RopeScaling", "RopePairing"], grid(rng, (4, 1, 64)), [0, 4095, 4096, 163839], style="gptj",
        attention_factor="none", scaling=DEEPSEEK_V3_YARN)
    add("YaRN as gpt-oss (factor 32, no truncation), attention factor in cos and sin", ["RopeScaling"],
        grid(rng, (4, 2, 64)), [0, 17, 4096, 131071], base=150000.0, scaling=GPT_OSS_YARN,
        attention_factor="cos_sin")
    add("linear position interpolation, factor 4", ["RopeScaling"], grid(rng, (3, 1, 16)), [0, 5, 4000],
        scaling={"rope_type": "linear", "factor": 4.0})
    add("YaRN with an explicit attention_factor 1.5 (the formula would give 1.21)", ["RopeScaling"],
        grid(rng, (3, 2, 32)), [0, 100, 9000], mscale_keys="transformers",
        scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 2048,
                 "attention_factor": 1.5})
    add("YaRN with mscale 1.0 over mscale_all_dim 0.8: the factor is their ratio", ["RopeScaling"],
        grid(rng, (3, 2, 32)), [1, 5000, 30000],
        scaling={**DEEPSEEK_V3_YARN, "mscale_all_dim": 0.8})
    add("the old key 'type' instead of 'rope_type' (DeepSeek's config.json)", ["RopeScaling"],
        grid(rng, (3, 1, 64)), [0, 4096, 100000], style="gptj",
        scaling={"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
                 "beta_slow": 1})
    # YaRN's attention factor as configs publish it and as engines read the keys:
    # transformers reads attention_factor, else the mscale ratio only when both keys
    # are set; vLLM's DeepSeek rotary embedding always takes the ratio (defaults 1
    # and 0) and never reads attention_factor. Each key alone and together, per reader.
    deepseek = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}
    for keys, what in (({"mscale": 0.707}, "mscale alone (0.707)"),
                       ({"mscale_all_dim": 0.707}, "mscale_all_dim alone (0.707)"),
                       ({"attention_factor": 1.25}, "attention_factor alone (1.25)"),
                       ({"mscale": 0.707, "mscale_all_dim": 1.0, "attention_factor": 1.25}, "all three")):
        for reader in tuple(m.value for m in rope.MscaleKeys):
            add(f"YaRN factor 40, {what}, attention factor in cos and sin as {reader} reads the keys",
                ["RopeScaling", "MscaleKeys"], grid(rng, (3, 1, 16)), [0, 7, 50000], mscale_keys=reader,
                attention_factor="cos_sin", scaling={**deepseek, **keys})
    add("YaRN factor 40 with mscale 0.707 and mscale_all_dim 1.0: the ratio, read alike by every engine",
        ["RopeScaling", "MscaleKeys"], grid(rng, (3, 1, 16)), [0, 7, 50000], attention_factor="cos_sin",
        scaling={**deepseek, "mscale": 0.707, "mscale_all_dim": 1.0})
    add("DeepSeek-V3's published rope_scaling (transformers 5 rope_parameters, rope_theta inside) with the "
        "factor in cos and sin", ["RopeScaling", "MscaleKeys", "RopePairing"], grid(rng, (3, 1, 64)),
        [1, 4097, 163839], style="gptj", attention_factor="cos_sin",
        scaling={**DEEPSEEK_V3_YARN, "rope_theta": 10000.0})
    add("transformers 5 rope_parameters: rope_theta 500000 and partial_rotary_factor 0.25 in the mapping",
        ["RopeFrequencies"], grid(rng, (3, 1, 64)), [0, 31, 20000],
        scaling={"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.25})
    add("rotary_dim 0: the identity", ["RopeFrequencies"], grid(rng, (2, 1, 4)), [3, 9], rotary_dim=0)
    add("no tokens", ["EmptyInput"], grid(rng, (0, 2, 8)), np.zeros(0, np.int64))
    add("odd rotary_dim", ["InvalidInput"], grid(rng, (2, 1, 8)), [0, 1], result="invalid", rotary_dim=3)
    add("rotary_dim larger than the head", ["InvalidInput"], grid(rng, (2, 1, 8)), [0, 1], result="invalid",
        rotary_dim=10)
    add("a negative position", ["InvalidInput"], grid(rng, (2, 1, 8)), [0, -1], result="invalid")
    v.append(VectorSpec("float positions", ("InvalidInput",),
                        Case({"x": grid(rng, (2, 1, 8)), "positions": np.array([0.0, 1.0])}), "invalid"))
    add("positions that do not broadcast to the tokens", ["InvalidInput"], grid(rng, (2, 3, 1, 8)), [0, 1],
        result="invalid")
    add("rope_theta in the mapping disagreeing with an explicit base", ["InvalidInput"], grid(rng, (2, 1, 8)),
        [0, 1], result="invalid", base=10000.0, scaling={"rope_type": "default", "rope_theta": 500000.0})
    return v


@st.composite
def _rope_case(draw, supported):
    params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    d = draw(st.sampled_from([2, 4, 8, 16, 64, 128]), label="d")
    if draw(st.booleans(), label="partial?"):
        params["rotary_dim"] = 2 * draw(st.integers(0, d // 2), label="rotary_dim")
    if draw(st.booleans(), label="base?"):
        params["base"] = draw(st.sampled_from([10000.0, 500000.0, 1e6]), label="base")
    params_scaling = draw(st.sampled_from([None, LLAMA31, DEEPSEEK_V3_YARN, GPT_OSS_YARN,
                                           {"rope_type": "linear", "factor": 2.0}, *_MSCALE_ALONE]),
                          label="scaling")
    if params_scaling is not None:
        params["scaling"] = params_scaling
    shape = draw(st.sampled_from([(3, 2), (2, 4, 1), (1, 2, 3)]), label="shape")
    x = grid(rng, (*shape, d), draw(st.sampled_from([0.5, 1.0, 8.0]), label="std"))
    top = draw(st.sampled_from([16, 8192, 200000]), label="max position")
    positions = rng.integers(0, top, size=shape[:-1])
    return Case({"x": x, "positions": positions}, params)


def _rope_compare(expected, actual, emulated, precision):
    from ref.testing.bounded import compare_bounded

    return compare_bounded(expected, emulated, actual, precision=precision, bound=ROPE_BOUND)


_rope_emulated = emulate.rope


# ---------------------------------------------------------------------------- mla

MLA_VARIANTS = (Variant("rope_style", tuple(m.value for m in rope.RopeStyle), "gptj",
                        "the rope part's pairing: interleaved (DeepSeek's reference code) or rotate-half"),)


def _mla_inputs(rng, b, lq, lk, h, dn, dr, r, dv, std=1.0):
    return {"q_nope": grid(rng, (b, lq, h, dn), std), "q_pe": grid(rng, (b, lq, h, dr), std),
            "c_kv": grid(rng, (b, lk, r)), "k_pe": grid(rng, (b, lk, dr), std),
            "w_kv_b": grid(rng, (h * (dn + dv), r), 1 / math.sqrt(r))}


def _mla_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("attention.mla"))
    v = []

    def add(comment, flags, inputs, result="valid", **params):
        v.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))

    add("small MLA prefill chunk: Lq = 3 < Lk = 6, causal", ["MlaWeights", "MlaRope", "MlaScale"],
        _mla_inputs(rng, 1, 3, 6, 4, 16, 8, 32, 16, 2.0), causal=True)
    add("latent rank equal to the nope dim (r = dn = 16): a transposed W_UK still fits", ["MlaWeights"],
        _mla_inputs(rng, 2, 2, 5, 2, 16, 4, 16, 8, 2.0), causal=True)
    add("decode: one query over 20 cached tokens", ["MlaWeights", "MlaRope"],
        _mla_inputs(rng, 1, 1, 20, 3, 8, 8, 24, 8, 2.0), causal=True)
    add("RoPE base 10: large angles at small positions show which part is rotated", ["MlaRope"],
        {**_mla_inputs(rng, 1, 2, 4, 2, 8, 8, 16, 8, 2.0)}, causal=True, rope_base=10.0)
    add("DeepSeek-V3 YaRN: scale 192^-1/2 * mscale^2 = 0.135234", ["MlaScale", "RopeScaling"],
        _mla_inputs(rng, 1, 2, 6, 2, 16, 8, 32, 16, 3.0), causal=True, rope_scaling=DEEPSEEK_V3_YARN)
    add("DeepSeek-V3 dims: r 512, rope 64, nope 128, v 128 (one head)", ["MlaWeights", "HeadDim"],
        _mla_inputs(rng, 1, 2, 5, 1, 128, 64, 512, 128), causal=True, rope_scaling=DEEPSEEK_V3_YARN)
    long = _mla_inputs(rng, 1, 2, 120, 2, 8, 8, 32, 8, 2.0)
    long["c_kv"][:, 110] = round_to(long["c_kv"][:, 110] * 3, "bfloat16")  # a late latent, a large score
    add("decode chunk over 120 latent tokens, a dominant key in the last tile", ["MlaWeights", "TileLoop"],
        long, causal=True)
    add("an explicit scale", ["MlaScale"], _mla_inputs(rng, 1, 3, 3, 2, 8, 4, 16, 8), scale=0.3)
    add("rotate-half pairing of the rope part", ["RopePairing"], _mla_inputs(rng, 1, 2, 4, 2, 8, 8, 16, 8, 2.0),
        causal=True, rope_style="neox")
    add("no queries", ["EmptyInput"], _mla_inputs(rng, 1, 0, 4, 2, 8, 4, 16, 8))
    add("more queries than positions", ["InvalidInput"], _mla_inputs(rng, 1, 5, 4, 2, 8, 4, 16, 8),
        result="invalid")
    add("odd rope dim", ["InvalidInput"], _mla_inputs(rng, 1, 2, 4, 2, 8, 3, 16, 8), result="invalid")
    add("w_kv_b with another latent rank", ["InvalidInput"],
        {**_mla_inputs(rng, 1, 2, 4, 2, 8, 4, 16, 8), "w_kv_b": grid(rng, (32, 12))}, result="invalid")
    return v


@st.composite
def _mla_case(draw, supported):
    params = {axis: draw(st.sampled_from(list(values)), label=axis) for axis, values in supported.items()}
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    h = draw(st.integers(1, 4), label="h")
    dn, dr = draw(st.sampled_from([4, 8, 16]), label="dn"), draw(st.sampled_from([2, 4, 8]), label="dr")
    r, dv = draw(st.sampled_from([4, 16, 32]), label="r"), draw(st.sampled_from([4, 8]), label="dv")
    lk = draw(st.integers(0, 100 if draw(st.integers(0, 7), label="long?") == 0 else 8), label="lk")
    lq = draw(st.integers(0, min(lk, 12)), label="lq")
    params["causal"] = draw(st.booleans(), label="causal")
    if draw(st.booleans(), label="yarn?"):
        params["rope_scaling"] = DEEPSEEK_V3_YARN
    return Case(_mla_inputs(rng, draw(st.integers(1, 2), label="b"), lq, lk, h, dn, dr, r, dv,
                            draw(st.sampled_from([1.0, 3.0]), label="std")), params)


_mla_emulated = emulate.mla


def _mla_oracle(q_nope, q_pe, c_kv, k_pe, w_kv_b, **options):
    return mla.mla_naive(q_nope, q_pe, c_kv, k_pe, w_kv_b, **options)

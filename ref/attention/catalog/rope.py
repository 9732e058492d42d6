"""attention.rope: rotary position embedding (neox/gptj pairing, partial rotary dims,
linear, Llama-3 and YaRN scaling).

  x [*S, H, D], positions (integers broadcastable to S) -> x rotated [*S, H, D]
"""

from __future__ import annotations

import numpy as np

from ref.attention import emulate, rope
from ref.attention.catalog.common import ATTENTION, Vectors
from ref.testing.attention_cases import DEEPSEEK_V3_YARN, GPT_OSS_YARN, LLAMA31, grid, rope_cases
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, Variant, seed_for

__all__ = ["FLAGS", "OPERATIONS", "ROPE_BOUND"]

# k = 4: a float32 RoPE's error is the angle's, position times the frequency's error, and float32
# pow implementations differ by up to 2 ulps (torch) from a correctly rounded frequency.
ROPE_BOUND = Bound(k=4.0, floor=2.0, scale="relative")

FLAGS = {
    "RopePairing": Flag("RoPE pairs formed the other way (rotate-half versus interleaved)",
                        "every position is rotated in the wrong planes: relative position is scrambled"),
    "RopeFrequencies": Flag("RoPE frequencies with the exponent over the head dim instead of the rotary dim, "
                            "or the wrong base", "partial-rotary models rotate with the wrong wavelengths"),
    "RopeScaling": Flag("Llama-3 or YaRN frequency scaling off (a boundary, the ramp, the attention factor)",
                        "long-context models see distorted positions beyond the original context"),
    "MscaleKeys": Flag("YaRN's attention factor read from the wrong key (mscale where transformers reads "
                       "attention_factor, or the other way; the mscale ratio taken with one key missing)",
                       "cos and sin scaled by a wrong factor: every logit of a long-context model off"),
    "RopePositions": Flag("positions taken as 0..L-1 instead of the given ids, or angles in low precision",
                          "decode steps, packed batches and long contexts get the wrong rotation"),
}

STYLE = Variant("style", rope.RopeStyle, rope.RopeStyle.NEOX,
                "which dims pair up: rotate-half (neox) or interleaved (gptj)")
ATTENTION_FACTOR = Variant("attention_factor", rope.AttentionFactor, rope.AttentionFactor.COS_SIN,
                           "where YaRN's attention factor goes: into cos and sin, or left to the softmax scale")
MSCALE_KEYS = Variant("mscale_keys", rope.MscaleKeys, rope.MscaleKeys.TRANSFORMERS,
                      "which keys YaRN's attention factor is read from: transformers (attention_factor, else the "
                      "mscale ratio when both are given, else 0.1 ln s + 1) or vLLM's DeepSeek rotary embedding "
                      "(mscale / mscale_all_dim, defaults 1 and 0)")


def _rope_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("attention.rope"))
    v = Vectors()

    def add(comment, flags, x, positions, result="valid", **params):
        v.add(comment, flags, {"x": x, "positions": np.asarray(positions, np.int64)}, result, **params)

    for style in STYLE.values:
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
        for reader in MSCALE_KEYS.values:
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
    v.add("float positions", ["InvalidInput"], {"x": grid(rng, (2, 1, 8)), "positions": np.array([0.0, 1.0])},
          "invalid")
    add("positions that do not broadcast to the tokens", ["InvalidInput"], grid(rng, (2, 3, 1, 8)), [0, 1],
        result="invalid")
    add("rope_theta in the mapping disagreeing with an explicit base", ["InvalidInput"], grid(rng, (2, 1, 8)),
        [0, 1], result="invalid", base=10000.0, scaling={"rope_type": "default", "rope_theta": 500000.0})
    return v


def _case_flags(case) -> tuple[str, ...]:
    """RopePairing for every case (the pairing decides every output), RopeScaling with a
    scaling, RopePositions past position 4096 (where low-precision angles go wrong)."""
    scaling = case.params.get("scaling")
    far = np.size(case.inputs["positions"]) and int(np.max(case.inputs["positions"])) > 4096
    return ("RopePairing",) + ("RopeScaling",) * bool(scaling) + ("RopePositions",) * bool(far)


OPERATIONS = [
    ATTENTION.bounded(
        "rope", rope.apply_rope, anchor="rope",
        summary="rotary position embedding (neox/gptj, partial, llama3/yarn scaling) -> x rotated",
        variants=(STYLE, ATTENTION_FACTOR, MSCALE_KEYS), vectors=_rope_vectors, examples=rope_cases,
        emulate=emulate.rope, bounds=ROPE_BOUND, case_flags=_case_flags),
]

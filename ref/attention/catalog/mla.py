"""attention.mla: multi-head latent attention (DeepSeek-V2/V3), RoPE on the rope part.

  q_nope [B, Lq, H, dn], q_pe [B, Lq, H, dr], c_kv [B, Lk, r], k_pe [B, Lk, dr],
  w_kv_b [H * (dn + dv), r] -> (out [B, Lq, H, dv], lse [B, H, Lq])

The oracle decompresses keys and values per head (mla.mla_naive); the absorbed form
(mla.mla_absorbed) is proven equal to it in tests/test_mla.py.
"""

from __future__ import annotations

import numpy as np

from ref.attention import emulate, mla, rope
from ref.attention.catalog.common import ATTENTION, OUT_LSE, Vectors
from ref.formats.minifloat import round_to
from ref.testing.attention_cases import DEEPSEEK_V3_YARN, grid, mla_cases, mla_inputs
from ref.testing.catalog_types import Flag, Variant, seed_for

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "MlaWeights": Flag("W_UK and W_UV split or oriented wrongly in the absorbed form (W_UK transposed, "
                       "the value rows taken first)", "queries meet the latent through the wrong projection"),
    "MlaRope": Flag("RoPE applied to the latent (or to the whole 576-d cache entry) instead of only the "
                    "64-d rope part", "the latent's content is rotated by position: scores drift with distance"),
    "MlaScale": Flag("MLA softmax scale 1/sqrt(576) (the absorbed width) or mscale instead of mscale^2",
                     "attention too flat or too sharp in every DeepSeek layer"),
}

VARIANTS = (Variant("rope_style", rope.RopeStyle, rope.RopeStyle.GPTJ,
                    "the rope part's pairing: interleaved (DeepSeek's reference code) or rotate-half"),)


def _mla_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("attention.mla"))
    v = Vectors()
    add = v.add

    add("small MLA prefill chunk: Lq = 3 < Lk = 6, causal", ["MlaWeights", "MlaRope", "MlaScale"],
        mla_inputs(rng, 1, 3, 6, 4, 16, 8, 32, 16, 2.0), causal=True)
    add("latent rank equal to the nope dim (r = dn = 16): a transposed W_UK still fits", ["MlaWeights"],
        mla_inputs(rng, 2, 2, 5, 2, 16, 4, 16, 8, 2.0), causal=True)
    add("decode: one query over 20 cached tokens", ["MlaWeights", "MlaRope"],
        mla_inputs(rng, 1, 1, 20, 3, 8, 8, 24, 8, 2.0), causal=True)
    add("RoPE base 10: large angles at small positions show which part is rotated", ["MlaRope"],
        {**mla_inputs(rng, 1, 2, 4, 2, 8, 8, 16, 8, 2.0)}, causal=True, rope_base=10.0)
    add("DeepSeek-V3 YaRN: scale 192^-1/2 * mscale^2 = 0.135234", ["MlaScale", "RopeScaling"],
        mla_inputs(rng, 1, 2, 6, 2, 16, 8, 32, 16, 3.0), causal=True, rope_scaling=DEEPSEEK_V3_YARN)
    add("DeepSeek-V3 dims: r 512, rope 64, nope 128, v 128 (one head)", ["MlaWeights", "HeadDim"],
        mla_inputs(rng, 1, 2, 5, 1, 128, 64, 512, 128), causal=True, rope_scaling=DEEPSEEK_V3_YARN)
    long = mla_inputs(rng, 1, 2, 120, 2, 8, 8, 32, 8, 2.0)
    long["c_kv"][:, 110] = round_to(long["c_kv"][:, 110] * 3, "bfloat16")  # a late latent, a large score
    add("decode chunk over 120 latent tokens, a dominant key in the last tile", ["MlaWeights", "TileLoop"],
        long, causal=True)
    add("an explicit scale", ["MlaScale"], mla_inputs(rng, 1, 3, 3, 2, 8, 4, 16, 8), scale=0.3)
    add("rotate-half pairing of the rope part", ["RopePairing"], mla_inputs(rng, 1, 2, 4, 2, 8, 8, 16, 8, 2.0),
        causal=True, rope_style="neox")
    add("no queries", ["EmptyInput"], mla_inputs(rng, 1, 0, 4, 2, 8, 4, 16, 8))
    add("more queries than positions", ["InvalidInput"], mla_inputs(rng, 1, 5, 4, 2, 8, 4, 16, 8),
        result="invalid")
    add("odd rope dim", ["InvalidInput"], mla_inputs(rng, 1, 2, 4, 2, 8, 3, 16, 8), result="invalid")
    add("w_kv_b with another latent rank", ["InvalidInput"],
        {**mla_inputs(rng, 1, 2, 4, 2, 8, 4, 16, 8), "w_kv_b": grid(rng, (32, 12))}, result="invalid")
    return v


OPERATIONS = [
    ATTENTION.bounded(
        "mla", mla.mla_naive, anchor="mla",
        summary="multi-head latent attention (DeepSeek-V2/V3), RoPE on the rope part -> (out, lse)",
        variants=VARIANTS, vectors=_mla_vectors, examples=mla_cases, outputs=("out", "lse"),
        emulate=emulate.mla, bounds=OUT_LSE),
]

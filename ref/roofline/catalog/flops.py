"""FLOPs of a decoder's forward pass (exact, int64).

  roofline.flops.forward  (tokens, context, layers, hidden, heads, kv_heads, head_dim, intermediate,
                           experts, top_k, expert_intermediate, shared_intermediate, vocab) -> FLOPs
  variants: causal (exact, half, full), lm_head (last, all, none)

Prefill is context 0; a decode step is tokens 1 after `context` cached tokens. The
vectors use the published configs of Qwen3-8B, Qwen3-30B-A3B, Llama-3.1-70B and
Qwen1.5-MoE-A2.7B (config.json values, named in each comment).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.roofline import flops
from ref.roofline.catalog.kv import int_case
from ref.roofline.catalog.common import AREA, SHARED_FLAGS, dtype_vectors, invalid_vectors
from ref.roofline.catalog.params import FLAGS as DECODER_FLAGS
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.flags import COMMON, RANDOM
from ref.testing.compare import compare_exact
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["CAUSAL", "FLAGS", "INPUTS", "LM_HEAD", "OPERATIONS", "decoder_configs"]

CAUSAL = Variant("causal", flops.Causal, "exact",
                 "how causal attention's (query, key) pairs are counted: exact (each query sees itself), half "
                 "(tokens^2 / 2: FlashAttention's benchmarks), full (the masked square: torch's FlopCounterMode)")
LM_HEAD = Variant("lm_head", flops.LmHead, "last",
                  "whose logits: the last position (generation), all positions (a training forward, "
                  "transformers without logits_to_keep) or none")

FLAGS = {
    "CausalPairs": Flag("causal attention counted as tokens^2 / 2 where each query also sees itself "
                        "(or the full square where the triangle is declared)",
                        "prefill attention FLOPs off by tokens pairs per head (or doubled)"),
    "ContextPairs": Flag("a decode step's keys counted as the context alone, not context + 1 (its own key)",
                         "every decode step is one key short per head and layer"),
    "LmHead": Flag("the LM head's logits counted for every position where only the last is computed, or never",
                   "a prefill's FLOPs off by 2 * hidden * vocab per position: 1.2 GFLOP per token for Qwen3"),
    **{name: DECODER_FLAGS[name] for name in ("ActiveExperts", "SharedExpert")},
    **{name: SHARED_FLAGS[name] for name in ("GQA", "Int64")},
    RANDOM: COMMON[RANDOM],  # the seeded random configurations
}

INPUTS = ("tokens", "context", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "experts",
          "top_k", "expert_intermediate", "shared_intermediate", "vocab")
# config.json values
QWEN3_8B = dict(layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=12288, experts=0, top_k=0,
                expert_intermediate=0, shared_intermediate=0, vocab=151936)
QWEN3_30B_A3B = dict(layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, intermediate=0, experts=128,
                     top_k=8, expert_intermediate=768, shared_intermediate=0, vocab=151936)
LLAMA_70B = dict(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, intermediate=28672, experts=0, top_k=0,
                 expert_intermediate=0, shared_intermediate=0, vocab=128256)
QWEN15_MOE = dict(layers=24, hidden=2048, heads=16, kv_heads=16, head_dim=128, intermediate=0, experts=60, top_k=4,
                  expert_intermediate=1408, shared_intermediate=5632, vocab=151936)
SMALL = dict(layers=2, hidden=8, heads=4, kv_heads=2, head_dim=2, intermediate=6, experts=0, top_k=0,
             expert_intermediate=0, shared_intermediate=0, vocab=5)
SMALL_MOE = {**SMALL, "intermediate": 0, "experts": 4, "top_k": 2, "expert_intermediate": 3}


TINY = dict(layers=1, hidden=1, heads=1, kv_heads=1, head_dim=2, intermediate=0, experts=0, top_k=0,
            expert_intermediate=0, shared_intermediate=0, vocab=0)
_EXACTNESS = ({"tokens": 10**6, "context": 0, **LLAMA_70B}, {"tokens": 4096, "context": 1 << 31, **SMALL},
              {"tokens": 3, "context": (1 << 52) + 1, **SMALL}, {"tokens": 1, "context": (1 << 52) + 1, **TINY},
              {"tokens": (1 << 27) + 1, "context": 0, **TINY},
              {"tokens": 1, "context": (1 << 52) + 1, **{**TINY, "vocab": 1}})


def _random_decoder(rng) -> dict:
    """One small valid decoder config (dense or MoE; an even head_dim, as RoPE needs), drawn from `rng`."""
    kv = int(rng.integers(1, 4))
    experts = int(rng.choice([0, 0, 3, 7]))
    moe = experts > 0
    return dict(tokens=int(rng.integers(1, 40)), context=int(rng.integers(0, 90)), layers=int(rng.integers(0, 5)),
                hidden=int(rng.integers(1, 70)), heads=kv * int(rng.integers(1, 4)), kv_heads=kv,
                head_dim=2 * int(rng.integers(1, 10)), intermediate=0 if moe else int(rng.integers(0, 90)),
                experts=experts, top_k=int(rng.integers(1, experts + 1)) if moe else 0,
                expert_intermediate=int(rng.integers(1, 30)) if moe else 0,
                shared_intermediate=int(rng.integers(0, 30)) if moe else 0, vocab=int(rng.integers(1, 99)))


def _rows(*rows: dict) -> dict:
    return {k: [r[k] for r in rows] for k in rows[0]}


def forward_vectors() -> list[VectorSpec]:
    specs = []

    def add(comment, flags, params=None, result="valid", **inputs):
        specs.append(VectorSpec(comment, tuple(flags), int_case(params, **inputs), result))

    for causal in CAUSAL.values:
        for lm in LM_HEAD.values:
            add(f"Qwen3-8B prefill of 40,000 tokens, causal={causal}, lm_head={lm} "
                "(the tour's ~1.03 PFLOP is half, none)",
                ("CausalPairs", "LmHead", "GQA"), {"causal": causal, "lm_head": lm}, tokens=40000, context=0,
                **QWEN3_8B)
        add("Qwen3-8B decode steps at contexts 0, 1 and 40,000 (keys: context + 1)", ("ContextPairs", "GQA"),
            {"causal": causal}, **_rows({"tokens": 1, "context": 0, **QWEN3_8B},
                                        {"tokens": 1, "context": 1, **QWEN3_8B},
                                        {"tokens": 1, "context": 40000, **QWEN3_8B}))
        add("odd token counts after a context (half's tokens^2 / 2 is a half-integer per head)", ("CausalPairs",),
            {"causal": causal, "lm_head": "all"}, **_rows(*({"tokens": t, "context": c, **SMALL}
                                                            for t, c in ((1, 0), (3, 0), (5, 7), (2, 3)))))
    for lm in LM_HEAD.values:
        add("Qwen3-30B-A3B: a 2,048-token prefill and a decode step at 40,000: 8 of 128 experts per token",
            ("ActiveExperts", "GQA", "LmHead"), {"lm_head": lm},
            **_rows({"tokens": 2048, "context": 0, **QWEN3_30B_A3B}, {"tokens": 1, "context": 40000, **QWEN3_30B_A3B}))
    add("Qwen1.5-MoE-A2.7B: 4 of 60 experts plus a shared expert of 5632, MHA (kv_heads = heads)",
        ("ActiveExperts", "SharedExpert"), **_rows({"tokens": 512, "context": 0, **QWEN15_MOE},
                                                   {"tokens": 1, "context": 4096, **QWEN15_MOE}))
    add("Llama-3.1-70B: prefill of 8,192 and of 1M tokens (past 2^53 FLOPs)", ("Int64", "GQA"),
        **_rows({"tokens": 8192, "context": 0, **LLAMA_70B}, {"tokens": 10**6, "context": 0, **LLAMA_70B}))
    add("a small model's chunk of 4,096 tokens after 2^31 cached ones, and Llama-3.1-70B's after 2^24",
        ("Int64", "ContextPairs"), **_rows({"tokens": 4096, "context": 1 << 31, **SMALL},
                                           {"tokens": 4096, "context": 1 << 24, **LLAMA_70B}))
    add("3 tokens after 2^52 + 1 cached ones: an odd count past 2^53 that float64 cannot hold", ("Int64",),
        tokens=3, context=(1 << 52) + 1, **SMALL)
    add("no new tokens: nothing is computed, whatever the context or lm_head", ("EmptyInput", "LmHead"),
        tokens=0, context=100, **SMALL)
    add("an empty batch of configs", ("EmptyInput",), **{k: np.zeros(0, np.int64) for k in INPUTS})
    add("no layers: only the LM head", ("LmHead",), {"lm_head": "all"}, tokens=3, context=0,
        **{**SMALL, "layers": 0})
    add("a small MoE: router + top_k experts", ("ActiveExperts",), tokens=3, context=2, **SMALL_MOE)
    add("Llama-3.1-70B prefill of 10^8 tokens: past 2^63 FLOPs, rejected", ("Int64", "InvalidInput"),
        result="invalid", tokens=10**8, context=0, **LLAMA_70B)
    bad = {
        "kv_heads 0": {"kv_heads": 0},
        "heads not a multiple of kv_heads": {"heads": 6, "kv_heads": 4},
        "a dense model (experts 0) with top_k 2": {"top_k": 2},
        "a dense model with a shared expert": {"shared_intermediate": 4},
    }
    for what, change in bad.items():
        add(f"{what} is rejected", ("InvalidInput",), result="invalid", tokens=2, context=0, **{**SMALL, **change})
    bad_moe = {"a MoE model with a dense intermediate": {"intermediate": 6},
               "top_k > experts": {"top_k": 5}, "top_k 0 in a MoE model": {"top_k": 0}}
    for what, change in bad_moe.items():
        add(f"{what} is rejected", ("InvalidInput", "ActiveExperts"), result="invalid", tokens=2, context=0,
            **{**SMALL_MOE, **change})
    specs += invalid_vectors(int_case(tokens=2, context=1, **SMALL), counts=INPUTS)
    specs += dtype_vectors([("Qwen3-8B prefill of 40,000 tokens (past 2^32 FLOPs)",
                             int_case(tokens=40000, context=0, **QWEN3_8B), (np.int32, np.uint32)),
                            ("a small model's 200 tokens after 255 (every input below 256)",
                             int_case(tokens=200, context=255, **SMALL), (np.uint8,))], INPUTS)
    for causal in CAUSAL.values:
        for lm in LM_HEAD.values:
            add(f"odd counts past 2^53 under causal={causal}, lm_head={lm}: Llama-3.1-70B's 1M-token prefill, "
                "4,096 tokens after 2^31, 3 after 2^52 + 1, one after 2^52 + 1 (half's t^2/2 in float64), "
                "2^27 + 1 tokens (the full square), one token of a vocab-1 LM head after 2^52 + 1",
                ("Int64",), {"causal": causal, "lm_head": lm}, **_rows(*_EXACTNESS))
        rng = np.random.default_rng(seed_for(f"roofline.flops.forward:{causal}"))
        add(f"random small decoders, dense and MoE (seeded), causal={causal}, lm_head=all", ("Random",),
            {"causal": causal, "lm_head": "all"}, **_rows(*(_random_decoder(rng) for _ in range(8))))
    return specs


@st.composite
def _decoder(draw) -> dict:
    """One small, valid decoder config with at least one new token after its context (no
    tokens is a vector's edge; an engine cannot run it) and an even head_dim (RoPE's)."""
    kv_heads = draw(st.integers(1, 3))
    moe = draw(st.booleans())
    experts = draw(st.integers(1, 6)) if moe else 0
    return dict(tokens=draw(st.integers(1, 9)), context=draw(st.integers(0, 9)), layers=draw(st.integers(0, 2)),
                hidden=draw(st.integers(1, 24)), heads=kv_heads * draw(st.integers(1, 3)), kv_heads=kv_heads,
                head_dim=2 * draw(st.integers(1, 6)), intermediate=0 if moe else draw(st.integers(1, 24)),
                experts=experts, top_k=draw(st.integers(1, experts)) if moe else 0,
                expert_intermediate=draw(st.integers(1, 12)) if moe else 0,
                shared_intermediate=draw(st.integers(0, 12)) if moe else 0, vocab=draw(st.integers(1, 16)))


def decoder_configs(supported) -> st.SearchStrategy:
    """Cases of 1 to 3 small decoder configs (dense and MoE mixed) and supported variants."""
    rows = st.lists(_decoder(), min_size=1, max_size=3)
    return st.tuples(rows, variant_params(supported)).map(lambda t: Case(
        {k: np.asarray([r[k] for r in t[0]], np.int64) for k in INPUTS}, t[1]))


OPERATIONS = [
    AREA.exact("flops.forward", flops.forward_flops_decoder, anchor="flops", variants=(CAUSAL, LM_HEAD),
                   summary="FLOPs of a GQA/MoE decoder's forward over new tokens after a context",
                   vectors=forward_vectors, compare=compare_exact, examples=decoder_configs),
]

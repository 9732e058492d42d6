"""The tour's figures, each recomputed from the tables and the formulas.

A practitioner's tour of fast inference states the numbers below; `CLAIMS` lists them
with the words that state them, and `check(claim)` recomputes each one from
ref.roofline's tables (HARDWARE, MODELS, MEASURED, FORMATS) and accounting. The
stated number is the claim under test, never an input: nothing computed here reads it.

A claim `agrees` when the computed value, rounded to the figure's stated significant
digits, is the stated figure. Where it does not, `differs` says why (a rounding made
before a division, an assumption the tour leaves unstated, a figure its own inputs
do not give), and the spec page (spec/roofline.md#tour) shows both. `llm-ref roofline`
prints the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from ref.roofline.config import MLA, Attention, Mamba2
from ref.roofline.flops import forward_flops
from ref.roofline.hardware import HARDWARE, LINKS, MEASURED
from ref.roofline.kv import kv_bytes, state_bytes
from ref.roofline.models import models
from ref.roofline.params import param_counts
from ref.roofline.perf import decode_step, prefill, ridge
from ref.roofline.specdec import expected_tokens
from ref.roofline.stacking import stacked_kv
from ref.roofline.weights import FORMATS, weight_bytes

__all__ = ["CLAIMS", "Claim", "Result", "check", "rounds_to", "table"]

G = 1e9
CONTEXT = 40_000  # the tour's "40k": 40,000 tokens (40,960 gives 1.06 PFLOP, not 1.03)


@dataclass(frozen=True)
class Claim:
    """One figure of the tour: its words, the number stated (and its significant
    digits), how it is recomputed, and why the two differ where they do."""

    key: str
    says: str
    stated: float
    digits: int
    unit: str
    compute: Callable[[], float]
    how: str
    differs: str = ""


@dataclass(frozen=True)
class Result:
    claim: Claim
    computed: float

    @property
    def agrees(self) -> bool:
        return rounds_to(self.computed, self.claim.stated, self.claim.digits)


def rounds_to(value: float, stated: float, digits: int) -> bool:
    """Whether `value` rounded to `digits` significant digits is `stated`: 562.5 and 3
    digits give 562 or 563, so 562 agrees (the tour truncates here; half a unit either
    way is accepted)."""
    if stated == 0:
        return value == 0
    unit = 10.0 ** (math.floor(math.log10(abs(stated))) - digits + 1)
    return abs(value - stated) <= unit / 2 + 1e-9 * abs(stated)


def _m(name: str):
    return models()[name]


def _qwen():
    return _m("Qwen3-8B")


def _layers(model, kind) -> int:
    return sum(b.count for b in model.blocks if isinstance(b.mixer, kind))


@lru_cache(maxsize=None)
def _stack() -> dict[str, float]:
    rows = stacked_kv(_qwen(), 1_000_000)
    return {"gqa": rows[0].stored, "mla": rows[1].stored, "4bit": rows[2].stored, "sparse": rows[4].read}


def _claims() -> tuple[Claim, ...]:
    b200, qwen = HARDWARE["B200"], _qwen
    nvfp4 = FORMATS["nvfp4"]
    nvfp4_bits = nvfp4.element_bits + nvfp4.scale_bits / nvfp4.block  # 4.5: the E4M3 scale spread over 16
    spark = MEASURED["dgx_spark_llama31_8b_fp8_sglang_b1"]
    return (
        Claim("ridge.b200", "B200: ~4.5 PFLOP/s dense FP8, 8 TB/s: ridge point 4500/8 = 562 FLOP/byte", 562, 3,
              "FLOP/B", lambda: ridge(b200, "float8"), "HARDWARE['B200'] dense float8 / bandwidth = 562.5; the "
              "tour drops the half"),
        Claim("ridge.r200", "Rubin (R200) ... \"ridge ~800\"", 800, 1, "FLOP/B",
              lambda: ridge(HARDWARE["R200"], "float8"),
              "HARDWARE['R200'] as announced: dense FP8 17.5 PFLOP/s over 22 TB/s = 795. The tour's own inputs "
              "(35 PF, the dense FP4 figure, over 20 TB/s) would give 1750: it quotes one pair and the ridge of "
              "the other"),
        Claim("qwen3_8b.weights", "Qwen3-8B ... BF16: weights 16.4 GB", 16.4, 3, "GB",
              lambda: weight_bytes(qwen(), "bfloat16") / G,
              "every parameter (8,190,735,360, embedding and the untied LM head included) x 2 bytes"),
        Claim("qwen3_8b.kv_per_token", "KV 147,456 B/token (36*8*128*2*2)", 147_456, 6, "B",
              lambda: kv_bytes(qwen(), 1), "36 layers x 8 KV heads x 128 x (K and V) x 2 bytes"),
        Claim("qwen3_8b.prefill_flops", "At 40k context: prefill ~1.03 PFLOP", 1.03, 3, "PFLOP",
              lambda: forward_flops(qwen(), CONTEXT, causal="half", lm_head="none") / 1e15,
              "2 FLOPs per weight multiply-add over 40,000 tokens (6.95e9 matrix parameters per token) plus "
              "causal attention as half the square (QK^T and PV); no LM head. The defaults (exact causal pairs, "
              "the LM head at the last position) give 1.0275 too"),
        Claim("qwen3_8b.prefill_time", "weights read once, ~0.23 s on a B200 (FP8 rate)", 0.23, 2, "s",
              lambda: prefill(qwen(), b200, CONTEXT, fmt="float8").time,
              "prefill FLOPs / 4.5 PFLOP/s: compute-bound (the weights' 16.4 GB take 2 ms)"),
        Claim("qwen3_8b.decode_flops", "decode ~16 GFLOP/token", 16, 2, "GFLOP",
              lambda: forward_flops(qwen(), 1, CONTEXT) / G,
              "one token at 40,000 tokens of context: 15.1 GFLOP of weight matrices and 23.6 GFLOP of attention",
              "the tour's 16 is 2 x all 8.19e9 parameters: it counts the embedding lookup as a matrix product "
              "and leaves out attention, which at 40k costs more than the weights"),
        Claim("qwen3_8b.kv_40k", "~6 GB KV", 6, 1, "GB", lambda: kv_bytes(qwen(), CONTEXT) / G,
              "147,456 B x 40,000 tokens = 5.90 GB"),
        Claim("qwen3_8b.decode_bytes", "16.4 GB weights + ~6 GB KV = ~22 GB per token", 22, 2, "GB",
              lambda: decode_step(qwen(), b200, CONTEXT, fmt="float8", embedding="table").bytes / G,
              "every weight read (the whole embedding table too, as the tour counts it) + the KV at 40k: "
              "22.28 GB; reading only the embedding row looked up, 21.04 GB"),
        Claim("qwen3_8b.decode_rate", "so at most ~364 tok/s on 8 TB/s", 364, 3, "tok/s",
              lambda: decode_step(qwen(), b200, CONTEXT, fmt="float8", embedding="table").tokens_per_s,
              "8 TB/s / 22.28 GB = 359 (380 reading only the embedding row)",
              "364 is 8000 / 22: the bytes rounded to 22 GB before dividing"),
        Claim("qwen3_8b.batch32_kv", "batch 32 at 40k needs 32*6 = 192 GB of KV", 192, 3, "GB",
              lambda: 32 * kv_bytes(qwen(), CONTEXT) / G, "32 x 5.90 GB = 188.7 GB, already more than a B200's "
              "180 GB before the weights", "192 is 32 x 6 with the 5.90 GB rounded to 6 first"),
        Claim("local.weights_4bit", "8B at 4 bits ~4.5 GB/token", 4.5, 2, "GB",
              lambda: 8e9 * nvfp4_bits / 8 / G,
              "a nominal 8e9 parameters at NVFP4's 4.5 bits (4-bit codes + an 8-bit E4M3 scale per 16); "
              "Qwen3-8B's 8.19e9 parameters all at NVFP4 are 4.61 GB"),
        Claim("local.m3_ultra", "M3 Ultra 819 GB/s gives ~182 tok/s", 182, 3, "tok/s",
              lambda: HARDWARE["M3 Ultra"].bandwidth / (8e9 * nvfp4_bits / 8),
              "819 GB/s over the 4.5 GB above (KV not counted)"),
        Claim("local.rtx5090", "RTX 5090 (1792 GB/s, 32 GB) ~398 tok/s", 398, 3, "tok/s",
              lambda: HARDWARE["RTX 5090"].bandwidth / (8e9 * nvfp4_bits / 8), "1792 GB/s over the same 4.5 GB"),
        Claim("local.spark_gap", "DGX Spark, 8B: prefill 7991 tok/s vs decode 20.5 tok/s, a 390x gap", 390, 2, "x",
              lambda: spark.prefill_tokens_per_s / spark.decode_tokens_per_s,
              f"MEASURED: {spark.model}, {spark.precision}, {spark.engine}, batch {spark.batch}"),
        Claim("llama70.kv_per_token", "Llama-70B class (80 layers, 8 KV heads, head dim 128): 327,680 B/token",
              327_680, 6, "B", lambda: kv_bytes(_m("Llama-3.1-70B"), 1), "80 x 8 x 128 x 2 x 2 bytes"),
        Claim("moe.params", "Qwen3-30B-A3B has 30.5B parameters", 30.5, 3, "B",
              lambda: param_counts(_m("Qwen3-30B-A3B")).total / G, "every parameter, 30,532,122,624"),
        Claim("moe.active", "3.35B active (128 experts, top-8)", 3.35, 3, "B",
              lambda: param_counts(_m("Qwen3-30B-A3B")).active / G,
              "attention, norms, router, 8 of 128 experts a layer, embedding and LM head"),
        Claim("moe.compute_ratio", "Against an 8B dense model: compute x0.4", 0.4, 1, "x",
              lambda: param_counts(_m("Qwen3-30B-A3B")).active / param_counts(qwen()).active,
              "active parameters over Qwen3-8B's: 3.353 / 8.191"),
        Claim("moe.storage_ratio", "storage x3.7", 3.7, 2, "x",
              lambda: param_counts(_m("Qwen3-30B-A3B")).total / param_counts(qwen()).total,
              "all parameters over Qwen3-8B's: 30.53 / 8.191"),
        Claim("specdec.tokens", "(1 - a^(k+1)) / (1 - a): 3.36 at a = 0.8, k = 4", 3.36, 3, "tokens",
              lambda: float(expected_tokens(0.8, 4)), "1 + 0.8 + 0.64 + 0.512 + 0.4096"),
        Claim("disagg.nvlink", "6 GB over NVLink ~1.8 ms", 1.8, 2, "ms",
              lambda: kv_bytes(qwen(), CONTEXT) / LINKS["nvlink5"].bytes_per_s * 1e3,
              "Qwen3-8B's 5.90 GB at 40k over NVLink 5 at 900 GB/s in one direction: 6.6 ms",
              "1.8 ms needs 3.3 TB/s: no NVLink generation in the table moves that in one direction (NVLink 5 "
              "is 1.8 TB/s both directions summed: 3.3 ms even read as one way)"),
        Claim("disagg.recompute", "beats recomputing the prefill (~1 s)", 1, 1, "s",
              lambda: prefill(qwen(), HARDWARE["H100"], CONTEXT, fmt="bfloat16").time,
              "Qwen3-8B's 40k prefill on an H100 at dense BF16 (989.5 TFLOP/s); on a B200 at FP8 it is 0.23 s"),
        Claim("mla.ratio", "576 elements instead of MHA's 32768 (57x)", 57, 2, "x",
              lambda: _mha_elements() / _mla_elements(),
              "DeepSeek-V3: 128 heads x (128 key + 128 value) over the 512 latent + 64 RoPE key; with the "
              "64 RoPE dims in each MHA key (192) it is 40,960 / 576 = 71x"),
        Claim("ssm.mamba2_state", "Mamba-2 keeps a fixed state (~4 MB/layer)", 4, 1, "MB",
              lambda: state_bytes(_m("Nemotron-H-8B-Base-8K")) / _layers(_m("Nemotron-H-8B-Base-8K"), Mamba2) / 1e6,
              "Nemotron-H-8B's Mamba-2 layer: 128 heads x 64 x 128 state in float32 (4.19 MB) + the conv window "
              "in bf16"),
        Claim("ssm.gqa_128k", "where GQA KV grows (512 MB/layer at 128k)", 512, 3, "MiB",
              lambda: kv_bytes(qwen(), 131_072) / _layers(qwen(), Attention) / 2**20,
              "Qwen3-8B's layer at 131,072 tokens: 536,870,912 B = 512 MiB (the tour's MB are binary here)"),
        Claim("hybrid.qwen3_next", "Qwen3-Next-80B-A3B 3:1", 3, 1, ":1",
              lambda: _hybrid_ratio(_m("Qwen3-Next-80B-A3B-Instruct")),
              "Gated DeltaNet layers over full-attention layers: 36 / 12"),
        Claim("hybrid.nemotron_h", "Nemotron-H ~12:1", 12, 2, ":1", lambda: _hybrid_ratio(_m("Nemotron-H-8B-Base-8K")),
              "Nemotron-H-8B's layers without attention over its attention layers: 48 / 4 (24 Mamba-2 and 24 MLP "
              "layers; Mamba-2 to attention alone is 6:1)"),
        Claim("stack.gqa", "Stacked for Qwen3-8B at 1M tokens: GQA 147 GB", 147, 3, "GB", lambda: _stack()["gqa"] / G,
              "147,456 B x 1,000,000 tokens"),
        Claim("stack.mha2mla", "+ MHA2MLA 46", 46, 2, "GB", lambda: _stack()["mla"] / G,
              "a 512 latent + 128 RoPE dims (8 KV heads x 8 kept frequency pairs x 2) per layer-token, bf16"),
        Claim("stack.4bit", "+ 4-bit 11.5", 11.5, 3, "GB", lambda: _stack()["4bit"] / G,
              "the same 640 elements at 4 bits, no scales (14.4 GB with an fp16 scale and zero per 32)"),
        Claim("stack.sparse", "+ sparse reads 11.5 GB stored / ~1.2 GB read", 1.2, 2, "GB",
              lambda: _stack()["sparse"] / G, "a tenth of the 4-bit cache read per step (NSA's published "
              "configuration reads 6%: 0.74 GB)"),
        Claim("stack.vs_weights", "1M tokens = 147 GB, 9x the weights", 9, 1, "x",
              lambda: kv_bytes(qwen(), 1_000_000) / weight_bytes(qwen(), "bfloat16"), "147.46 GB / 16.38 GB"),
    )


def _deepseek_mla() -> MLA:
    return next(b.mixer for b in _m("DeepSeek-V3").blocks if isinstance(b.mixer, MLA))


def _mha_elements() -> int:
    mla = _deepseek_mla()
    return mla.heads * (mla.qk_nope_head_dim + mla.v_head_dim)


def _mla_elements() -> int:
    mla = _deepseek_mla()
    return mla.kv_lora_rank + mla.qk_rope_head_dim


def _hybrid_ratio(model) -> float:
    """Layers without attention over layers with it (a Nemotron-H FFN-only layer is a
    layer, as its config counts it)."""
    attention = _layers(model, (Attention, MLA))
    return (model.layers - attention) / attention


CLAIMS: tuple[Claim, ...] = _claims()  # the models they read are built when a claim is checked


def check(claim: Claim) -> Result:
    """The claim recomputed."""
    return Result(claim, float(claim.compute()))


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def table() -> str:
    """Every claim: key, stated, computed, and 'agrees' or why not."""
    lines = [f"{'figure':<24} {'stated':>12} {'computed':>14}  unit     verdict"]
    for claim in CLAIMS:
        r = check(claim)
        verdict = "agrees" if r.agrees else f"differs: {claim.differs}"
        numbers = f"{_number(claim.stated):>12} {_number(r.computed):>14}"
        lines.append(f"{claim.key:<24} {numbers}  {claim.unit:<8} {verdict}")
    return "\n".join(lines)

"""The roofline and byte-accounting model: hardware and model tables with a source for
every entry, exact parameter, weight, KV-cache, recurrent-state and FLOP accounting,
and the roofline times, rates and capacities they imply (spec/roofline.md).

    from ref.roofline import HARDWARE, MODELS, decode_step
    decode_step(MODELS["Qwen3-8B"], HARDWARE["B200"], context=40_000, fmt="float8")

Modules: `config` (the schema: Model, Block, mixers, FFNs, Source), `hardware` and
`models` (the tables), `hf` (a Hugging Face config.json -> Model), `params`,
`weights`, `kv`, `flops` (exact integer accounting; the catalog's exact ops),
`perf`, `moe`, `specdec`, `disagg`, `stacking` (the roofline and serving formulas;
the catalog's bounded ops), `tour` (the tour's figures recomputed), `plots` (SVG,
standard library only). `counting` holds the argument checks of every array op and
its exact arithmetic, `emulate` the bounded ops' same-precision evaluations.
"""

from ref.roofline.config import MLA, MLP, Attention, Block, GatedDeltaNet, Mamba2, Model, MoE, Source
from ref.roofline.disagg import Handoff, break_even, handoff, transfer_time
from ref.roofline.flops import attention_pairs, forward_flops, forward_flops_decoder
from ref.roofline.hardware import HARDWARE, LINKS, MEASURED, Hardware, Link, Measurement
from ref.roofline.hf import from_hf_config
from ref.roofline.kv import (
    gated_delta_state_bytes,
    kv_attention_bytes,
    kv_bytes,
    kv_mla_bytes,
    kv_quantized_bytes,
    mamba2_state_bytes,
    state_bytes,
)
from ref.roofline.models import HF_CONFIGS, MODELS
from ref.roofline.moe import expected_experts, moe_bytes_touched
from ref.roofline.params import ParamCounts, decoder_params, param_counts
from ref.roofline.perf import PhaseEstimate, decode_step, estimate, max_batch, phase_time, prefill, ridge
from ref.roofline.plots import batch_sweep_svg, roofline_svg
from ref.roofline.specdec import expected_tokens, speedup
from ref.roofline.stacking import NSA, Row, nsa_read_tokens, stacked_kv
from ref.roofline.weights import FORMATS, WeightFormat, tensor_bytes, weight_bytes

__all__ = [
    "FORMATS", "HARDWARE", "HF_CONFIGS", "LINKS", "MEASURED", "MLA", "MODELS", "MLP", "NSA", "Attention", "Block",
    "GatedDeltaNet", "Handoff", "Hardware", "Link", "Mamba2", "Measurement", "Model", "MoE", "ParamCounts",
    "PhaseEstimate", "Row", "Source", "WeightFormat", "attention_pairs", "batch_sweep_svg", "break_even",
    "decode_step", "decoder_params", "estimate", "expected_experts", "expected_tokens", "forward_flops",
    "forward_flops_decoder", "from_hf_config", "gated_delta_state_bytes", "handoff", "kv_attention_bytes",
    "kv_bytes", "kv_mla_bytes", "kv_quantized_bytes", "mamba2_state_bytes", "max_batch", "moe_bytes_touched",
    "nsa_read_tokens", "param_counts", "phase_time", "prefill", "ridge", "roofline_svg", "speedup",
    "stacked_kv", "state_bytes", "tensor_bytes", "transfer_time", "weight_bytes",
]


"""Bytes of weights in a storage format: one matrix (`tensor_bytes`, the catalog op
`roofline.tensor_bytes`) and a whole model (`weight_bytes`).

A format is one row of parameters (WeightFormat): element bits e; a block of b
elements along a row (0: no blocks) and block_rows br rows (1 but for 2-D blocks);
scale bits s and zero-point bits z per block; r bits per row (a per-channel scale);
t bits per tensor (a per-tensor scale, stored once, not for an empty tensor). A
[rows, cols] matrix (a Linear's [out, in]: blocks run along cols, the reduction axis,
each row on its own) takes

    bits  = rows*cols*e + ceil(rows/br)*ceil(cols/b)*(s + z) + rows*r + t*[rows*cols > 0]
    bytes = ceil(bits / 8)

A partial block (cols not a multiple of b) still has its scale. Bytes are rounded up
once per tensor, never per block or per row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ref.arguments import choice
from ref.roofline.config import Model, Source
from ref.roofline.counting import ceil_div, counts, to_int64
from ref.roofline.params import Tensor, tensors

__all__ = ["FORMATS", "KEEP", "WeightFormat", "tensor_bytes", "weight_bytes", "weight_table"]


@dataclass(frozen=True)
class WeightFormat:
    """A weight storage format (module docstring: the bit count it implies)."""

    name: str
    element_bits: int
    block: int = 0
    block_rows: int = 1
    scale_bits: int = 0
    zero_bits: int = 0
    row_bits: int = 0
    tensor_bits: int = 0
    source: Source | None = None

    @property
    def bits_per_element(self) -> float:
        """Bits per element of a large tensor whose sides are multiples of the block
        (row and tensor scales amortised away): e + (s + z) / (b * br)."""
        return self.element_bits + ((self.scale_bits + self.zero_bits) / (self.block * self.block_rows)
                                    if self.block else 0.0)


_OCP_MX = Source("https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf",
                 "OCP Microscaling Formats (MX) Specification v1.0",
                 "Table 1 (concrete MX-compliant formats): MXFP8 E4M3/E5M2 elements, MXFP4 FP4 (E2M1) elements; "
                 "block size k = 32; scale E8M0 (8 bits)")

FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("bfloat16", 16, source=Source(
        "https://cloud.google.com/tpu/docs/bfloat16", "The bfloat16 numerical format (Google Cloud TPU docs)",
        "bfloat16 is a custom 16-bit floating point format")),
    WeightFormat("float8_tensor", 8, tensor_bits=32, source=Source(
        "https://docs.vllm.ai/en/v0.5.4/quantization/fp8.html", "vLLM: FP8",
        "all Linear modules (except for the final lm_head) have their weights quantized down to FP8_E4M3 "
        "precision with a per-tensor scale")),
    WeightFormat("float8_channel", 8, row_bits=32, source=Source(
        "https://docs.vllm.ai/projects/llm-compressor/en/stable/examples/quantization_w8a8_fp8/",
        "LLM Compressor: fp8 weight and activation quantization",
        "the FP8_DYNAMIC scheme, which uses: - Static, per-channel quantization on the weights")),
    WeightFormat("float8_block128", 8, block=128, block_rows=128, scale_bits=32, source=Source(
        "https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md",
        "DeepSeek-V3 weight file documentation",
        "DeepSeek-V3 natively supports FP8 weight format with 128x128 block scaling. ... weight_scale_inv ... "
        "Storage Format: float32 Tensor, stored alongside the weight data")),
    WeightFormat("mxfp8", 8, block=32, scale_bits=8, source=Source(
        "https://nvidia.github.io/TransformerEngine/features/low_precision_training/mxfp8/mxfp8.html",
        "Transformer Engine: MXFP8",
        "s_block is a local E8M0 scaling factor shared by a block of 32 elements")),
    WeightFormat("mxfp4", 4, block=32, scale_bits=8, source=_OCP_MX),
    WeightFormat("nvfp4", 4, block=16, scale_bits=8, tensor_bits=32, source=Source(
        "https://intel.github.io/neural-compressor/latest/docs/source/3x/PT_NVFP4Quant.html",
        "Intel Neural Compressor: NVFP4 Quantization",
        "NVFP4 | E2M1 | 4 | 16 | UE4M3 | 8 | FP32 | 32 (element type and bits, scaling block size, scale type "
        "and bits, global tensor-wise scale type and bits)")),
    WeightFormat("int4_g128", 4, block=128, scale_bits=16, source=Source(
        "https://arxiv.org/abs/2210.17323", "GPTQ: Accurate Post-Training Quantization for Generative "
        "Pre-trained Transformers (arXiv 2210.17323)",
        "(a summary, not a quote) 4-bit weights in groups of 128 along the input dimension, "
        "one 16-bit (fp16) scale per group, "
        "symmetric (no zero point): the W4A16 group-128 scheme of GPTQ and compressed-tensors checkpoints")),
    WeightFormat("int4_g128_zp", 4, block=128, scale_bits=16, zero_bits=4, source=Source(
        "https://huggingface.co/TheBloke/TigerBot-70B-Chat-AWQ/blob/main/quant_config.json",
        "An AWQ checkpoint's quant_config.json (AWQ: arXiv 2306.00978)",
        '"zero_point": true, "q_group_size": 128, "w_bit": 4, "version": "GEMM" (qzeros packed eight '
        "4-bit zero points to an int32, fp16 scales)")),
    WeightFormat("int4_g64_hqq", 4, block=64, scale_bits=16, zero_bits=16, source=Source(
        "https://docs.pytorch.org/ao/stable/generated/torchao.quantization.choose_qparams_and_quantize_affine_hqq"
        ".html", "torchao: choose_qparams_and_quantize_affine_hqq (HQQ)",
        "nbits: float = 4, group_size: int = 64, ... compute_dtype: torch.dtype = torch.float16 (scale and "
        "zero point per group, each in the compute dtype)")),
)}

# What stays in bfloat16 when a model's weights are put in another format, by
# component (ref.roofline.params.COMPONENTS): what quantized checkpoints (vLLM's
# online FP8, LLM Compressor's schemes, DeepSeek-V3's FP8) leave unquantized: the
# embedding (a lookup, not a Linear), the LM head, every norm, the router and the
# shared-expert gate, the Mamba/GDN conv filters, biases, and the recurrent layers'
# per-head vectors (dt_bias, A_log, D).
KEEP = frozenset({"embedding", "lm_head", "norm", "router", "conv", "bias", "state"})


def tensor_bytes(rows, cols, *, format: str = "bfloat16") -> np.ndarray:  # noqa: A002 (the op's variant name)
    """int64 bytes of [rows, cols] weight matrices in `format` (a name of FORMATS),
    elementwise over int64 arrays of one shape (module docstring: the formula)."""
    op = "roofline.tensor_bytes"
    f = FORMATS[choice(format, "format", list(FORMATS))]
    v = counts(op, rows=rows, cols=cols)
    rows, cols = v["rows"], v["cols"]
    blocks = 0 if not f.block else ceil_div(rows, f.block_rows) * ceil_div(cols, f.block)
    bits = (rows * cols * f.element_bits + blocks * (f.scale_bits + f.zero_bits) + rows * f.row_bits
            + f.tensor_bits * (rows * cols > 0))
    return to_int64(ceil_div(bits, 8), op, v)


def _format(name: str, arg: str) -> WeightFormat:
    return FORMATS[choice(name, arg, list(FORMATS))]


def weight_table(model: Model, fmt: str = "bfloat16", *, keep: Iterable[str] = KEEP,
                 keep_format: str = "bfloat16") -> list[tuple[Tensor, str, int]]:
    """(tensor, its format's name, bytes of one copy) for every tensor of `model`
    (ref.roofline.params.tensors): components in `keep` in keep_format, the rest in fmt."""
    keep = frozenset(keep)
    _format(fmt, "fmt")
    _format(keep_format, "keep_format")
    out = []
    for t in tensors(model):
        name = keep_format if t.component in keep else fmt
        out.append((t, name, int(tensor_bytes(np.int64(t.rows), np.int64(t.cols), format=name))))
    return out


def weight_bytes(model: Model, fmt: str = "bfloat16", *, keep: Iterable[str] = KEEP,
                 keep_format: str = "bfloat16", active: bool = False) -> int:
    """Bytes of `model`'s weights with its matrices in `fmt` and the components in
    `keep` (default KEEP) in keep_format; `keep=()` puts everything in fmt. Each
    tensor's bytes are rounded up on their own (scales per tensor). active: only the
    copies one token reads (top_k routed experts per MoE layer).

    Not counted (as transformers does not register them as parameters): DeepSeek-V3's
    e_score_correction_bias (256 float32 per MoE layer, 60 KB for V3) and its
    multi-token-prediction layer."""
    return sum(b * (t.active if active else t.count) for t, _, b in weight_table(model, fmt, keep=keep,
                                                                                 keep_format=keep_format))

"""Number formats: element minifloats (FP4/FP6/FP8/E8M0/FP16/BF16), stochastic
rounding with explicit random bits, and bit packing, exported here
(`ref.formats.encode(x, "float8_e4m3fn")`); the block-scaled codecs, whose
`quantize`/`dequantize` share their names, by module: `ref.formats.mx`,
`ref.formats.nvfp4`, `ref.formats.intgroup`, plus the scale layouts
(`to_blocked`, `from_blocked`) and fake quantization (`fake_quantize`)."""

from ref.formats import intgroup, mx, nvfp4
from ref.formats.fakequant import fake_quantize
from ref.formats.layouts import blocked_offsets, from_blocked, to_blocked
from ref.formats.minifloat import (
    FORMATS,
    NATIVE_FORMATS,
    PRECISIONS,
    FloatFormat,
    NanEncoding,
    NanPolicy,
    NegativePolicy,
    Overflow,
    Rounding,
    decode,
    encode,
    get_format,
    round_to,
)
from ref.formats.packing import NibbleOrder, pack_fp4, unpack_fp4
from ref.formats.stochastic import encode_stochastic

__all__ = [
    "FORMATS",
    "NATIVE_FORMATS",
    "PRECISIONS",
    "FloatFormat",
    "NanEncoding",
    "NanPolicy",
    "NegativePolicy",
    "NibbleOrder",
    "Overflow",
    "Rounding",
    "blocked_offsets",
    "decode",
    "encode",
    "encode_stochastic",
    "fake_quantize",
    "from_blocked",
    "get_format",
    "intgroup",
    "mx",
    "nvfp4",
    "pack_fp4",
    "round_to",
    "to_blocked",
    "unpack_fp4",
]

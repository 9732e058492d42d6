"""Number formats: element minifloats (FP4/FP6/FP8/E8M0/FP16/BF16), stochastic
rounding with explicit random bits, and bit packing."""

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
    "decode",
    "encode",
    "encode_stochastic",
    "get_format",
    "pack_fp4",
    "round_to",
    "unpack_fp4",
]

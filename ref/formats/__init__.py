"""Number formats: element minifloats (FP4/FP6/FP8/E8M0/FP16/BF16) and bit packing."""

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
from ref.formats.packing import pack_fp4, unpack_fp4

__all__ = [
    "FORMATS",
    "NATIVE_FORMATS",
    "PRECISIONS",
    "FloatFormat",
    "NanEncoding",
    "NanPolicy",
    "NegativePolicy",
    "Overflow",
    "Rounding",
    "decode",
    "encode",
    "get_format",
    "pack_fp4",
    "round_to",
    "unpack_fp4",
]

"""What the dtype-cast adapters (ml_dtypes_casts, torch_casts) share: the argument
checks every element codec makes, and one encode and decode op per format from a
library's two casts. A library adapter supplies only the casts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ref.formats.minifloat import get_format

__all__ = ["cast_ops"]

# to_codes(x, dtype) -> codes in the format's code dtype; to_values(codes, dtype) -> float32.
ToCodes = Callable[[np.ndarray, Any], np.ndarray]
ToValues = Callable[[np.ndarray, Any], np.ndarray]


def cast_ops(dtypes: Mapping[str, Any], *, to_codes: ToCodes, to_values: ToValues) -> dict[str, Callable]:
    """formats.F.encode and formats.F.decode for each format name F -> library dtype."""
    ops = {}
    for name, dtype in dtypes.items():
        ops[f"formats.{name}.encode"] = _encoder(dtype, to_codes)
        ops[f"formats.{name}.decode"] = _decoder(name, dtype, to_values)
    return ops


def _encoder(dtype, to_codes: ToCodes) -> Callable:
    def encode(x, **variant):
        x = np.asarray(x)
        if x.dtype.kind != "f":
            raise TypeError(f"x: expected floats, got {x.dtype}")
        with np.errstate(invalid="ignore", over="ignore"):
            return to_codes(x, dtype)

    return encode


def _decoder(name: str, dtype, to_values: ToValues) -> Callable:
    f = get_format(name)

    def decode(codes):
        codes = np.asarray(codes)
        if codes.dtype != f.code_dtype:
            raise TypeError(f"codes: expected {f.code_dtype}, got {codes.dtype}")
        if f.nbits < 8 * f.code_dtype.itemsize and codes.size and int(codes.max()) >> f.nbits:
            raise ValueError(f"codes: only the low {f.nbits} bits may be set")
        return to_values(codes, dtype)

    return decode

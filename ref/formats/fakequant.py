"""Fake quantization (quantize, then dequantize) and the error statistics a user asks
of a codec: SQNR, the largest error per block, the fraction of codes at saturation.

  sqnr_db(x, y)        = 10 log10( sum x^2 / sum (x - y)^2 )      (inf when y == x)
  block_max_error(x, y, block) = max |x - y| over each block of the last axis
  saturation_fraction(codes, fmt) = share of codes at +-max of the format

Sums are float64 (numpy's pairwise summation); these are measurements, not
bit-exact operations, so they are not in the conformance catalog.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import choice, integer
from ref.formats import intgroup, mx, nvfp4
from ref.formats.minifloat import decode, encode, get_format

__all__ = ["block_max_error", "fake_quantize", "saturation_fraction", "sqnr_db"]

CODECS = ("element", "mx", "nvfp4", "int_group")


def fake_quantize(x: ArrayLike, codec: str, **options) -> NDArray[np.float64]:
    """x quantized with `codec` and decoded again, as float64.

    codec "element": options fmt (and encode's options); "mx": elem (and mx.quantize's);
    "nvfp4": nvfp4.quantize's options; "int_group": bits, group, scheme.
    Each option is checked by the function it goes to.
    """
    codec = choice(codec, "codec", CODECS)
    x = np.asarray(x)
    required = {"element": "fmt", "mx": "elem"}.get(codec)
    if required and required not in options:
        raise TypeError(f"{required}: codec {codec!r} needs the keyword option {required}")
    if codec == "element":
        fmt = options.pop("fmt")
        return decode(encode(x, fmt, **options), fmt).astype(np.float64)
    if codec == "mx":
        elem = options.pop("elem")
        block = options.get("block", 32)
        return mx.dequantize(*mx.quantize(x, elem, **options), elem, block=block, axis=options.get("axis", -1))
    if codec == "nvfp4":
        recipe = options.get("recipe", "transformer_engine")
        return nvfp4.dequantize(*nvfp4.quantize(x, **options), recipe=recipe)
    group, bits = options.get("group", 128), options.get("bits", 4)
    return intgroup.dequantize(*intgroup.quantize(x, **options), group=group, bits=bits,
                               zero_storage=options.get("zero_storage", "exact")).astype(np.float64)


def _pair(x: ArrayLike, y: ArrayLike):
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"y: expected shape {x.shape}, got {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x, y: statistics need finite values (found NaN or Inf)")
    return x, y


def sqnr_db(x: ArrayLike, y: ArrayLike) -> float:
    """Signal-to-quantization-noise ratio of y against x, in dB (inf if exact, -inf if x is 0 and y is not)."""
    x, y = _pair(x, y)
    noise = float(np.sum((x - y) ** 2))
    signal = float(np.sum(x**2))
    if noise == 0:
        return float("inf")
    return float(10 * np.log10(signal / noise)) if signal > 0 else float("-inf")


def block_max_error(x: ArrayLike, y: ArrayLike, *, block: int) -> NDArray[np.float64]:
    """max |x - y| per block of `block` elements along the last axis: [..., n / block]."""
    block = integer(block, "block", minimum=1)
    x, y = _pair(x, y)
    if x.ndim < 1 or x.shape[-1] % block:
        raise ValueError(f"x: the last axis must be a multiple of block={block}, got shape {x.shape}")
    err = np.abs(x - y).reshape(*x.shape[:-1], x.shape[-1] // block, block)
    return err.max(axis=-1, initial=0.0)


def saturation_fraction(codes: ArrayLike, fmt: str) -> float:
    """Share of the codes of `fmt` that are +-max finite (0 for an empty array)."""
    f = get_format(fmt)
    codes = np.asarray(codes)
    if codes.dtype != f.code_dtype:
        raise TypeError(f"codes: expected {f.code_dtype} codes of {f.name}, got {codes.dtype}")
    if codes.size == 0:
        return 0.0
    return float(np.mean((codes.astype(np.int64) & ~f.sign_mask) == f.max_code))

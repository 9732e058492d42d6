"""Bit packing of sub-byte codes: two FP4 codes per byte.

Element 0 of each pair goes in the low nibble (bits 3..0) and element 1 in the
high nibble: the order of PyTorch's float4_e2m1fn_x2, vLLM, TransformerEngine,
FlashInfer, and of the OCP MX spec's packed layout. `order="high_first"` is the
other order (PTX `cvt.*.e2m1x2` writes its first operand to the high nibble);
`NibbleOrder` names both.

FP6 codes are stored one per byte with the top two bits zero: that is the code
layout `encode` returns, so FP6 needs no packing function.

Dirty bits: a code byte with bits above bit 3 set is not an FP4 code, so `pack_fp4`
rejects it (ValueError) rather than masking it; a packed byte has no spare bits, so
`unpack_fp4` accepts every byte.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import member

__all__ = ["NibbleOrder", "pack_fp4", "unpack_fp4"]


class NibbleOrder(enum.Enum):
    """Which nibble of a byte holds element 0 of its pair."""

    LOW_FIRST = "low_first"  # bits 3..0: PyTorch, vLLM, TransformerEngine, FlashInfer, OCP MX
    HIGH_FIRST = "high_first"  # bits 7..4: PTX cvt.*.e2m1x2 (its first operand)


def pack_fp4(codes: ArrayLike, *, order: NibbleOrder | str = NibbleOrder.LOW_FIRST) -> NDArray[np.uint8]:
    """Pack FP4 codes [..., 2n] (uint8, values 0..15) into bytes [..., n]."""
    order = member(order, NibbleOrder, "order")
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"codes: expected uint8 FP4 codes, got dtype {codes.dtype}")
    if codes.ndim == 0 or codes.shape[-1] % 2:
        raise ValueError(f"codes: the last axis must have even length, got shape {codes.shape}")
    if codes.size and int(codes.max()) > 15:
        raise ValueError(f"codes: FP4 codes are 0..15, got {int(codes.max())}")
    first, second = codes[..., 0::2], codes[..., 1::2]
    if order is NibbleOrder.HIGH_FIRST:
        first, second = second, first
    return (first | (second << 4)).astype(np.uint8)


def unpack_fp4(packed: ArrayLike, *, order: NibbleOrder | str = NibbleOrder.LOW_FIRST) -> NDArray[np.uint8]:
    """Unpack bytes [..., n] into FP4 codes [..., 2n] (uint8, values 0..15)."""
    order = member(order, NibbleOrder, "order")
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise TypeError(f"packed: expected uint8 bytes, got dtype {packed.dtype}")
    if packed.ndim == 0:
        raise ValueError("packed: expected at least one axis, got a scalar")
    low, high = packed & 0x0F, packed >> 4
    if order is NibbleOrder.HIGH_FIRST:
        low, high = high, low
    out = np.stack([low, high], axis=-1)  # [..., n, 2]
    return out.reshape(*packed.shape[:-1], 2 * packed.shape[-1]).astype(np.uint8)

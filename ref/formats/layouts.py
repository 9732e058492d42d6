"""Scale-factor layouts: the 128x4 "blocked" (swizzled) layout cuBLAS and CUTLASS read
for MX and NVFP4 block scales, and its inverse.

A row-major scale matrix S [R, C] (R rows of the quantized tensor, C scales per row)
is padded to Rp = ceil(R/128)*128 rows and Cp = ceil(C/4)*4 columns with `pad`, then
cut into 128x4 tiles stored one after another, tile row by tile row; inside a tile,
row r and column c go to byte (r % 32) * 16 + (r // 32) * 4 + c:

  offset(r, c) = ((r // 128) * (Cp / 4) + c // 4) * 512
                 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4

So the 32 rows r, r+32, r+64, r+96 of a tile share one 16-byte line. References:
NVIDIA cuBLAS documentation, "1D block scaling factors layout"; the same formula in
torchao (`to_blocked`) and vLLM (`cvt_quant_to_fp4_get_sf_out_offset`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer

__all__ = ["blocked_offsets", "from_blocked", "to_blocked"]


def _check(scales: NDArray, name: str) -> None:
    if scales.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D [rows, scale columns] array, got shape {scales.shape}")


def blocked_offsets(rows: int, cols: int) -> NDArray[np.int64]:
    """offset(r, c) for every r < rows, c < cols: [rows, cols]."""
    rows, cols = integer(rows, "rows", minimum=0), integer(cols, "cols", minimum=0)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    col_tiles = -(-cols // 4)
    return ((r // 128) * col_tiles + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def to_blocked(scales: ArrayLike, *, pad: int = 0) -> NDArray:
    """Row-major scales [R, C] -> the flat blocked layout of length Rp * Cp.

    `pad` fills the padding: an integer, within range when the scales are integer
    codes (E8M0 and E4M3 scales travel as uint8), never wrapped or truncated."""
    scales = np.asarray(scales)
    _check(scales, "scales")
    pad = integer(pad, "pad")
    if scales.dtype.kind in "ui" and not np.iinfo(scales.dtype).min <= pad <= np.iinfo(scales.dtype).max:
        raise ValueError(f"pad: expected a value that fits {scales.dtype}, got {pad}")
    rows, cols = scales.shape
    padded_rows, padded_cols = -(-rows // 128) * 128, -(-cols // 4) * 4
    out = np.full(padded_rows * padded_cols, pad, dtype=scales.dtype)
    out[blocked_offsets(rows, cols)] = scales
    return out


def from_blocked(blocked: ArrayLike, rows: int, cols: int) -> NDArray:
    """The flat blocked layout -> row-major scales [rows, cols] (padding dropped)."""
    blocked = np.asarray(blocked)
    rows, cols = integer(rows, "rows", minimum=0), integer(cols, "cols", minimum=0)
    want = -(-rows // 128) * 128 * (-(-cols // 4) * 4)
    if blocked.ndim != 1 or blocked.size != want:
        raise ValueError(f"blocked: expected a flat array of {want} scales for {rows}x{cols}, got shape {blocked.shape}")
    return blocked[blocked_offsets(rows, cols)]

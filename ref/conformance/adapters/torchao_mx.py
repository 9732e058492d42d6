"""torchao's MX codecs (`torchao.prototype.mx_formats`, eager CPU) as an implementation.

`python -m ref conform --impl ref.conformance.adapters.torchao_mx --xfails-file
ref/conformance/adapters/torchao_mx.xfails` judges the installed torchao (needs torch
and torchao, which only this module imports). Quantize is `to_mx(x, elem, 32, mode)`
in each of torchao's four `ScaleCalculationMode`s; dequantize is `to_dtype(...,
torch.float32)`, judged exact at its float32 output precision. torchao has no MXINT8.

torchao writes what it writes whatever the catalog's other axes say; it declares the
scale-overflow values it produces (`nan` for FLOOR/CEIL/EVEN, `satfinite` for RCEIL),
and its departures from the definition (Inf blocks under FLOOR/CEIL/EVEN, blocks at
the scale 2^-127, RCEIL's float32 log2 in eager mode) are listed, with minimal cases,
in spec/formats.md ("Engines") and in torchao_mx.xfails next to this file.
"""

from __future__ import annotations

import numpy as np
import torch
import torchao
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx

from ref.conformance.adapters import as_native

NAME = "torchao MX (eager, CPU)"
VERSION = f"torchao {torchao.__version__}, torch {torch.__version__}"

# catalog element -> (catalog op prefix, torchao's element dtype)
_ELEMENTS = {
    "float8_e4m3fn": ("mxfp8_e4m3", torch.float8_e4m3fn),
    "float8_e5m2": ("mxfp8_e5m2", torch.float8_e5m2),
    "float6_e2m3fn": ("mxfp6_e2m3", "fp6_e2m3"),
    "float6_e3m2fn": ("mxfp6_e3m2", "fp6_e3m2"),
    "float4_e2m1fn": ("mxfp4", torch.float4_e2m1fn_x2),
}
_BITS = {"float6_e2m3fn": 6, "float6_e3m2fn": 6, "float4_e2m1fn": 4}
_MODES = {m.value: m for m in ScaleCalculationMode}
BLOCK = 32


def _codes(data_lp: torch.Tensor, elem: str) -> np.ndarray:
    """One uint8 code per element: FP8 bits, FP6 in the low 6 bits, FP4 unpacked."""
    if elem == "float4_e2m1fn":
        return unpack_uint4(data_lp.contiguous()).numpy()
    return data_lp.view(torch.uint8).numpy()


def _quantizer(elem: str, elem_dtype):
    def quantize(x, *, scale_rule, scale_overflow):
        if x.dtype != np.float32:
            raise TypeError(f"x: expected float32, got {x.dtype}")
        if x.ndim < 1 or x.shape[-1] % BLOCK:
            raise ValueError(f"x: the last axis must be a multiple of {BLOCK}, got shape {x.shape}")
        t = torch.from_numpy(as_native(x))
        scales, data_lp = to_mx(t, elem_dtype, BLOCK, _MODES[scale_rule])
        scales = scales.view(torch.uint8).numpy().reshape(*x.shape[:-1], x.shape[-1] // BLOCK)
        return _codes(data_lp, elem).reshape(x.shape), scales

    return quantize


def _dequantizer(elem: str, elem_dtype):
    def dequantize(codes, scales):
        if codes.dtype != np.uint8 or scales.dtype != np.uint8:
            raise TypeError(f"codes, scales: expected uint8, got {codes.dtype}, {scales.dtype}")
        if codes.ndim < 1 or codes.shape[-1] % BLOCK or scales.shape != codes.shape[:-1] + (codes.shape[-1] // BLOCK,):
            raise ValueError(f"scales: expected shape {codes.shape[:-1] + (codes.shape[-1] // BLOCK,)}, "
                             f"got {scales.shape}")
        if codes.size and int(codes.max()) >> _BITS.get(elem, 8):
            raise ValueError(f"codes: {elem} codes use the low {_BITS[elem]} bits")
        c = torch.from_numpy(as_native(codes))
        if elem == "float4_e2m1fn":
            c = (c[..., ::2] | (c[..., 1::2] << 4)).contiguous()  # torchao's packed fp4x2 layout
        elif isinstance(elem_dtype, torch.dtype):
            c = c.view(elem_dtype)
        s = torch.from_numpy(as_native(scales)).view(torch.float8_e8m0fnu)
        return to_dtype(c, s, elem_dtype, BLOCK, torch.float32).numpy().reshape(codes.shape)

    return dequantize


OPS = {}
for _elem, (_short, _dtype) in _ELEMENTS.items():
    OPS[f"formats.{_short}.quantize"] = _quantizer(_elem, _dtype)
    OPS[f"formats.{_short}.dequantize"] = _dequantizer(_elem, _dtype)

DTYPES = {"formats.mx*.quantize": {"x": ["float32"]}}
VARIANTS = {"formats.mx*.quantize": {"scale_rule": list(_MODES), "scale_overflow": ["nan", "satfinite"]}}

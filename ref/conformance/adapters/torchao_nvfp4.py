"""torchao's NVFP4 codec (`torchao.prototype.mx_formats.NVFP4Tensor`, eager CPU) as an
implementation.

`python -m ref conform --impl ref.conformance.adapters.torchao_nvfp4 --xfails-file
ref/conformance/adapters/torchao_nvfp4.xfails` judges the installed torchao (needs
torch and torchao, which only this module imports). Quantize is torchao's dynamic
two-level path: `per_tensor_amax_to_scale(max |x|)` (the tensor amax as torchao's
inference workflow takes it), then `NVFP4Tensor.to_nvfp4`; it declares the
`torchao_0_17` recipe (torchao 0.17 on). Dequantize is `NVFP4Tensor.dequantize` to
float32, torchao's `scale_first` order. Tensors are viewed as [-1, n], as torchao's
linear layers view their inputs. torchao has no 2D tiles or Hadamard transform (declined),
no stochastic rounding (formats.nvfp4.quantize_stochastic is not offered), and cannot
quantize an empty tensor (the amax of nothing and
to_nvfp4's view with -1 raise; it dequantizes one); those cases are declined
(NotImplementedError): the formats ops name no flag an xfail could cover random
examples with. Its departures from the definition (a zero, NaN or
Inf tensor amax) are listed in spec/formats.md ("Engines") and torchao_nvfp4.xfails.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torchao
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

from ref.conformance.adapters import as_native

NAME = "torchao NVFP4 (eager, CPU)"
VERSION = f"torchao {torchao.__version__}, torch {torch.__version__}"
BLOCK = 16


def _rows(a: np.ndarray, name: str) -> torch.Tensor:
    """`a` as a [-1, n] tensor, n a multiple of 16."""
    if a.ndim < 1 or a.shape[-1] % BLOCK:
        raise ValueError(f"{name}: the last axis must be a multiple of {BLOCK}, got shape {a.shape}")
    return torch.from_numpy(as_native(a).reshape(math.prod(a.shape[:-1]), a.shape[-1]))


def quantize(x, *, recipe, tile_2d, rht):
    if x.dtype != np.float32:
        raise TypeError(f"x: expected float32, got {x.dtype}")
    if tile_2d or rht:
        raise NotImplementedError("torchao has no 2D tiles or Hadamard transform")
    t = _rows(x, "x")
    if t.numel() == 0:  # torch.max of nothing raises, and so does to_nvfp4 (a view with -1)
        raise NotImplementedError("x: torchao cannot quantize an empty tensor")
    p = per_tensor_amax_to_scale(torch.max(torch.abs(t)))
    q = NVFP4Tensor.to_nvfp4(t, block_size=BLOCK, per_tensor_scale=p)
    codes = unpack_uint4(q.qdata.contiguous()).numpy().reshape(x.shape)
    return codes, q.scale.view(torch.uint8).numpy().reshape(*x.shape[:-1], -1), p.numpy().astype(np.float32)


def dequantize(codes, scales, global_scale, *, recipe, order):
    if codes.dtype != np.uint8 or scales.dtype != np.uint8:
        raise TypeError(f"codes, scales: expected uint8, got {codes.dtype}, {scales.dtype}")
    c = _rows(codes, "codes")
    if scales.shape != (*codes.shape[:-1], codes.shape[-1] // BLOCK):
        raise ValueError(f"scales: expected shape {(*codes.shape[:-1], codes.shape[-1] // BLOCK)}, got {scales.shape}")
    if int(codes.max(initial=0)) > 15:
        raise ValueError("codes: E2M1 codes use the low 4 bits")
    packed = (c[..., ::2] | (c[..., 1::2] << 4)).contiguous()  # torchao's fp4x2 layout: low nibble first
    s = torch.from_numpy(as_native(scales).reshape(c.shape[0], c.shape[1] // BLOCK)).view(torch.float8_e4m3fn)
    p = torch.tensor(np.float32(global_scale))
    t = NVFP4Tensor(packed, s, BLOCK, torch.float32, per_tensor_scale=p)
    return t.dequantize(torch.float32).numpy().reshape(codes.shape)


OPS = {"formats.nvfp4.quantize": quantize, "formats.nvfp4.dequantize": dequantize}
DTYPES = {"formats.nvfp4.quantize": {"x": ["float32"]}}
VARIANTS = {
    "formats.nvfp4.quantize": {"recipe": ["torchao_0_17"], "tile_2d": [False], "rht": [False]},
    "formats.nvfp4.dequantize": {"recipe": ["torchao_0_17"], "order": ["scale_first"]},
}

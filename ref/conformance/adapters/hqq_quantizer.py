"""HQQ 0.2.8.post1's Quantizer and BitPack (hqq/core/quantize.py, bitpack.py; CPU) as an
implementation of the quant.hqq ops.

  quant.hqq.quantize    Quantizer.quantize(w, nbits, channel_wise=True, group_size, optimize,
                        round_zero, axis, bitpack=False, compute_dtype=float32, device="cpu"):
                        the codes it returns unpacked (in w's dtype: read back as uint8),
                        meta["scale"] (1 / s, float32) and meta["zero"] (float32). The solver
                        is hqq's default, optimize_weights_proximal_legacy, at float32 on a CPU.
  quant.hqq.dequantize  Quantizer.dequantize(codes, meta) with packing None and
                        compute_dtype float32; its final reshape is to the codes' shape.
  quant.hqq.pack        Quantizer.pack[layout] (BitPack.pack_8bit_u8, _4bit_u8, _3bit_32, _2bit_u8, _1bit_u8)
  quant.hqq.unpack      Quantizer.unpack[layout](packed, dtype=uint8)

hqq 0.2.8 has one beta schedule (beta constant: kappa is read but never applied) and
floors a range <= 1e-4 at inverse scale 1 ("flat_floor"), so only those are declared.

Run (spec/quant.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.hqq_quantizer \
      --xfails-file ref/conformance/adapters/hqq_quantizer.xfails --ops 'quant.*'
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
import torch
from hqq.core.quantize import Quantizer

from ref.conformance.adapters import as_native

NAME = "HQQ Quantizer (CPU)"
VERSION = f"hqq {version('hqq')}, torch {torch.__version__}"


def quantize(w, *, bits=4, group=64, axis=0, optimize=True, round_zero=False, beta_schedule="constant",
             flat_floor=True):
    if beta_schedule != "constant" or not flat_floor:
        raise NotImplementedError("hqq 0.2.8: beta constant, inverse scale 1 for a range <= 1e-4")
    t = torch.from_numpy(as_native(np.asarray(w)))
    codes, meta = Quantizer.quantize(t, nbits=bits, channel_wise=True, group_size=group, optimize=optimize,
                                     round_zero=round_zero, axis=axis, bitpack=False,
                                     compute_dtype=torch.float32, device="cpu")
    return codes.numpy().astype(np.uint8), meta["scale"].numpy(), meta["zero"].numpy()


def dequantize(codes, scale, zero):
    c = torch.from_numpy(as_native(np.asarray(codes)))
    meta = {"packing": None, "compute_dtype": torch.float32, "shape": tuple(c.shape),
            "scale": torch.from_numpy(as_native(np.asarray(scale))),
            "zero": torch.from_numpy(as_native(np.asarray(zero)))}
    return Quantizer.dequantize(c, meta).numpy()


def pack(codes, *, layout="4bit_u8"):
    return Quantizer.pack[layout](torch.from_numpy(as_native(np.asarray(codes)))).numpy()


def unpack(packed, *, layout="4bit_u8"):
    return Quantizer.unpack[layout](torch.from_numpy(as_native(np.asarray(packed))), dtype=torch.uint8).numpy()


OPS = {"quant.hqq.quantize": quantize, "quant.hqq.dequantize": dequantize, "quant.hqq.pack": pack,
       "quant.hqq.unpack": unpack}
VARIANTS = {"quant.hqq.quantize": {"bits": [1, 2, 3, 4, 5, 6, 8], "group": [64, 8, 16, 32, 128], "axis": [0, 1],
                                   "optimize": [True, False], "round_zero": [False, True],
                                   "beta_schedule": ["constant"], "flat_floor": [True]},
            "quant.hqq.pack": {"layout": ["8bit_u8", "4bit_u8", "3bit_32", "2bit_u8", "1bit_u8"]},
            "quant.hqq.unpack": {"layout": ["8bit_u8", "4bit_u8", "3bit_32", "2bit_u8", "1bit_u8"]}}

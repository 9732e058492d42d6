"""compressed-tensors 0.19.0 (the release llm-compressor 0.14.0.1 pins; CPU) as an
implementation of its int32 packing and of round-to-nearest group quantization.

  quant.pack.ct_pack    compressors.pack_quantized.helpers.pack_to_int32(value int8,
                           num_bits, packed_dim): signed codes offset by 2^(b-1), packed
                           LSB first as one dense stream per row (layout "dense")
  quant.pack.ct_unpack  unpack_from_int32(value, num_bits, shape, packed_dim), the
                           shape being `count` codes along packed_dim
  quant.rtn.quantize       what a compressed-tensors checkpoint's weight_scale and
                           weight_zero_point are: llm-compressor's weight observer
                           ("memoryless_minmax": the min and max of each group) through
                           compressed-tensors' calculate_qparams (the range forced to
                           include zero; only a scale of exactly 0 replaced by the dtype's
                           epsilon: scale_floor "zero_to_eps"), then
                           quantization.lifecycle.forward.quantize. Its codes and zero
                           points are signed (-2^(b-1) .. 2^(b-1) - 1): returned offset by
                           2^(b-1), the oracle's unsigned ones. Its schemes are
                           "asymmetric_compressed_tensors" (the zero point from the scale
                           before its floor, added before rounding) and
                           "symmetric_compressed_tensors" (scale 2 amax / (2^b - 1), zero
                           point 0); strategy "channel" for group -1, "group" otherwise.

Run (spec/quant.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.compressed_tensors_pack \
      --xfails-file ref/conformance/adapters/compressed_tensors_pack.xfails --ops 'quant.*'
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import quantize as ct_quantize

from ref.conformance.adapters import as_native

NAME = "compressed-tensors (CPU)"
VERSION = f"compressed-tensors {version('compressed-tensors')}, torch {torch.__version__}"


def _tensor(a) -> torch.Tensor:
    return torch.from_numpy(as_native(np.asarray(a)))


def ct_pack(value, *, bits=4, packed_dim=1, layout="dense"):
    if layout != "dense":
        raise NotImplementedError("compressed-tensors 0.19 packs one dense stream per row")
    return pack_to_int32(_tensor(value), int(bits), packed_dim=int(packed_dim)).numpy()


def ct_unpack(packed, *, bits=4, count, packed_dim=1, layout="dense"):
    if layout != "dense":
        raise NotImplementedError("compressed-tensors 0.19 packs one dense stream per row")
    p = _tensor(packed)
    shape = [p.shape[0], p.shape[1]]
    shape[int(packed_dim)] = int(count)
    return unpack_from_int32(p, int(bits), torch.Size(shape), packed_dim=int(packed_dim)).numpy()


def rtn_quantize(w, *, bits=4, group=128, scheme="asymmetric", zero_range="include_zero", scale_floor="eps",
                 search="minmax"):
    if scheme not in ("asymmetric_compressed_tensors", "symmetric_compressed_tensors") \
            or zero_range != "include_zero" or scale_floor not in FLOORS or search != "minmax":
        raise NotImplementedError("compressed-tensors: min-max including zero, its asymmetric and symmetric schemes")
    from llmcompressor.observers import Observer  # the weight observer GPTQModifier and QuantizationModifier use

    wt = _tensor(w)
    if wt.dtype == torch.float16:
        wt = wt.to(torch.float32)
    shape = wt.shape
    w2 = wt.reshape(-1, shape[-1]) if wt.ndim != 2 else wt
    args = QuantizationArgs(num_bits=int(bits), type="int", symmetric=scheme == "symmetric_compressed_tensors",
                            strategy="channel" if group == -1 else "group",
                            group_size=None if group == -1 else int(group))
    observer = Observer.load_from_registry("memoryless_minmax", base_name="weight", args=args)
    observer(w2)
    qp = observer.get_qparams()
    scale, zero_point = qp["scale"], qp["zero_point"]
    codes = ct_quantize(w2, scale, zero_point, args)
    half = 1 << (int(bits) - 1)
    groups = scale.shape[-1] if group != -1 else 1
    return ((codes.to(torch.int64) + half).reshape(shape).numpy(),
            scale.reshape(*shape[:-1], groups).numpy(),
            (zero_point.to(scale.dtype) + half).reshape(*shape[:-1], groups).numpy())


FLOORS = ("zero_to_eps",)  # only a scale of exactly 0 becomes the epsilon (calculate_qparams step 5)
OPS = {"quant.pack.ct_pack": ct_pack, "quant.pack.ct_unpack": ct_unpack, "quant.rtn.quantize": rtn_quantize}
VARIANTS = {"quant.pack.ct_*": {"bits": [1, 2, 3, 4, 5, 6, 7, 8], "packed_dim": [1, 0], "layout": ["dense"]},
            "quant.rtn.quantize": {"bits": [2, 3, 4, 8], "group": [128, 64, 32, 16, 1, -1],
                                   "scheme": ["asymmetric_compressed_tensors", "symmetric_compressed_tensors"],
                                   "scale_floor": list(FLOORS)}}

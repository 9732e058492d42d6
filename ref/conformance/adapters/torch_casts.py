"""torch's dtype casts (CPU) as an implementation of the element codecs.

`python -m ref conform --impl ref.conformance.adapters.torch_casts --xfails-file
ref/conformance/adapters/torch_casts.xfails` judges the installed torch (needs torch,
which only this module imports). Declared variants, as measured against the oracle
(torch 2.13): float32 -> E4M3FN saturates (Inf too); the other FP8 casts do not
saturate; E8M0 rounds to nearest with ties up and encodes |x| (zero gives 2^-127),
like CUDA's host conversion; float64 inputs go through float32 (double rounding), so
only float32/float16 inputs are declared. torch has no unpacked FP4/FP6 dtypes.
"""

from __future__ import annotations

import torch

from ref.conformance.adapters import as_native
from ref.conformance.adapters._casts import cast_ops

NAME = "torch casts"
VERSION = torch.__version__

_TYPES = {
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz,
    "float8_e5m2fnuz": torch.float8_e5m2fnuz,
    "float8_e8m0fnu": torch.float8_e8m0fnu,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def _to_codes(x, dtype):
    bits = torch.uint16 if dtype.itemsize == 2 else torch.uint8
    return torch.from_numpy(as_native(x)).to(dtype).view(bits).numpy()


def _to_values(codes, dtype):
    bits = torch.uint16 if dtype.itemsize == 2 else torch.uint8
    return torch.from_numpy(as_native(codes)).view(bits).view(dtype).float().numpy()


OPS = cast_ops(_TYPES, to_codes=_to_codes, to_values=_to_values)

DTYPES = {"formats.*.encode": {"x": ["float32", "float16"]}}
VARIANTS = {
    "formats.float8_e5m2*.encode": {"overflow": ["nonsaturating"]},
    "formats.float8_e4m3fnuz.encode": {"overflow": ["nonsaturating"]},
    "formats.float8_e8m0fnu.encode": {"rounding": ["nearest_away"], "overflow": ["nonsaturating"],
                                      "negative": ["magnitude"]},
}

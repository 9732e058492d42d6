"""ml_dtypes' C++ casts (numpy's for float16) as an implementation of the element codecs.

This is a real third-party library under test, not the oracle: `conform` with no
--impl runs it (inside `default`), so a newcomer's first command prints a real
conformance report.
ml_dtypes casts round to nearest even and do not saturate; its declared variants
say so, and its known deviations are listed, with reasons, in
ml_dtypes_casts.xfails next to this file.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ref.conformance.adapters._casts import cast_ops
from ref.conformance.report import version_holds

NAME = "ml_dtypes"
VERSION = ml_dtypes.__version__

_DTYPES = {
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e4m3": ml_dtypes.float8_e4m3,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}


def _to_codes(x, dtype):
    return x.astype(dtype).view(np.dtype(f"uint{8 * np.dtype(dtype).itemsize}"))


def _to_values(codes, dtype):
    return codes.view(dtype).astype(np.float32)


OPS = cast_ops(_DTYPES, to_codes=_to_codes, to_values=_to_values)

# ml_dtypes before 0.7.0 casts float64 through float32 (double rounding: see
# spec/formats.md), so this adapter declares only the inputs it rounds once; 0.7.0
# rounds float64 once.
DTYPES = {"formats.*.encode": {"x": ["float32", "float16"] + ["float64"] * version_holds("ml-dtypes>=0.7")}}

# Variant values as the catalog declares them (the enums' values, as strings).
VARIANTS = {
    "formats.float8_*.encode": {"overflow": ["nonsaturating"]},
    "formats.float4_e2m1fn.encode": {"nan": ["zero_flipped_sign"]},
    "formats.float6_*.encode": {"nan": ["zero_flipped_sign"]},
    "formats.float8_e8m0fnu.encode": {"rounding": ["nearest_away"], "overflow": ["nonsaturating"]},
}

"""Stochastic rounding samplers for `formats.<fmt>.encode_stochastic_rng`, written for
the default run independently of the oracles: float64 quantum arithmetic on the
format's parameters as ml_dtypes reports them, k uniform in [0, 2^W) from NumPy's
Philox stream seeded by `seed`, and ml_dtypes' cast to encode the chosen value
(which is representable, or past the largest finite value: the overflow).

    |x| = (t + f) q      q: the format's spacing at |x|, t an integer, f in [0, 1)
    step away from zero  iff  k >= 2^W - floor(f 2^W)

It declares what ml_dtypes' casts do past the largest finite value and with NaN
(as `ml_dtypes_casts` does for encode).
"""

from __future__ import annotations

from functools import partial

import ml_dtypes
import numpy as np

NAME = "numpy Philox stochastic rounding"
VERSION = np.__version__

_DTYPES = {
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn, "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
}
_NO_INF = ("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")  # no Inf or NaN: values past max saturate


def _spacing(a: np.ndarray, info) -> np.ndarray:
    """The distance between neighbouring values of the format at magnitude a >= 0."""
    _, e = np.frexp(a)  # a = m 2^e with m in [0.5, 1): the binade's exponent is e - 1
    return np.ldexp(1.0, np.maximum(e - 1, info.minexp) - info.nmant)


def sample(x, *, seed, fmt: str, sr_bits: int = 32, **_variants):
    """One stochastically rounded array of codes of `fmt` (uint8, or uint16)."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.dtype.itemsize not in (2, 4, 8):
        raise TypeError(f"x: expected float16, float32 or float64, got {x.dtype}")
    with np.errstate(invalid="ignore", over="ignore"):  # NaN payloads and overflow to Inf are results here
        dtype = _DTYPES[fmt]
        info = ml_dtypes.finfo(dtype)
        a = np.abs(x.astype(np.float64))
        finite = np.isfinite(a)
        a = np.where(finite, a, 0.0)
        q = _spacing(a, info)
        t = np.floor(a / q)
        f = a / q - t  # exact: q is a power of two
        n = 1 << sr_bits
        k = np.random.Generator(np.random.Philox(seed)).integers(0, n, x.shape, dtype=np.uint64)
        magnitude = (t + (k.astype(np.float64) >= n - np.floor(np.ldexp(f, sr_bits)))) * q
        if fmt in _NO_INF:
            magnitude = np.minimum(magnitude, float(info.max))
        value = np.where(finite, np.where(np.signbit(x), -magnitude, magnitude), x.astype(np.float64))
        bits = np.dtype(f"uint{8 * np.dtype(dtype).itemsize}")
        return value.astype(np.float32).astype(dtype).view(bits) if fmt != "float16" else value.astype(dtype).view(bits)


OPS = {f"formats.{fmt}.encode_stochastic_rng": partial(sample, fmt=fmt) for fmt in _DTYPES}
VARIANTS = {
    "formats.float8_*.encode_stochastic_rng": {"overflow": ["nonsaturating"]},
    "formats.float16.encode_stochastic_rng": {"overflow": ["nonsaturating"]},
    "formats.bfloat16.encode_stochastic_rng": {"overflow": ["nonsaturating"]},
    "formats.float4_e2m1fn.encode_stochastic_rng": {"nan": ["zero_flipped_sign"]},
    "formats.float6_*.encode_stochastic_rng": {"nan": ["zero_flipped_sign"]},
}

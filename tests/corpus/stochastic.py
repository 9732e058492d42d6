"""Samplers for `formats.<fmt>.encode_stochastic_rng`: kernels that draw their own
random numbers from a seed. Two correct ones (the exact oracle fed with PCG64 bits;
quantum arithmetic in float64 fed with Philox draws) and the bug corpus.

Each sampler is `sampler(x, *, seed, sr_bits, overflow, nan, fmt)` -> codes.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import numpy as np

from ref.formats.minifloat import encode, get_format
from ref.formats.stochastic import encode_stochastic


def exact_pcg(x, *, seed, fmt, sr_bits=32, overflow=None, nan="max", read_bits=None, shared=1):
    """The exact oracle (encode_stochastic: explicit random bits), bits from PCG64(seed).
    Bugs: `read_bits` reads only that many top bits, whatever sr_bits declares;
    `shared` > 1 gives each run of that many neighbouring elements one random number
    (one cvt.rs draw unpacked to a pair or a quad)."""
    size = int(np.prod(np.shape(x), dtype=np.int64))
    draws = np.random.default_rng(seed).integers(0, 1 << 32, -(-size // shared), dtype=np.uint64)
    rbits = np.repeat(draws, shared)[:size].astype(np.uint32).reshape(np.shape(x))
    return encode_stochastic(x, fmt, rbits, sr_bits=read_bits or sr_bits, overflow=overflow, nan=nan)


def _quantum(a: np.ndarray, fmt: str) -> np.ndarray:
    """The spacing of the format's values at magnitude a (float64)."""
    f = get_format(fmt)
    _, e = np.frexp(a)  # a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1
    return np.ldexp(1.0, np.maximum(e - 1, f.emin) - f.mbits)


def quantum_philox(x, *, seed, fmt, sr_bits=32, overflow=None, nan="max", bug=None):
    """Another formulation: |x| = (t + f) q in float64, k uniform in [0, 2^W) from
    Philox(seed), step away iff k >= 2^W - floor(f 2^W); the rounded value is encoded
    exactly (round to nearest of a representable value, or the overflow policy).

    bug: "half_ulp" adds half a quantum first; "signed_floor" starts negative values
    from the floor (away from zero) and steps toward +Inf with probability f."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.dtype.itemsize not in (2, 4, 8):
        raise TypeError(f"x: expected float16, float32 or float64, got {x.dtype}")
    a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a)
    a = np.where(finite, a, 0.0)
    q = _quantum(a, fmt)
    if bug == "half_ulp":
        a = a + q / 2
        q = _quantum(a, fmt)
    t = np.floor(a / q)
    frac = a / q - t
    n = 1 << sr_bits
    k = np.random.Generator(np.random.Philox(seed)).integers(0, n, x.shape, dtype=np.uint64)
    step = k.astype(np.float64) >= n - np.floor(np.ldexp(frac, sr_bits))
    negative = np.signbit(x)
    if bug == "signed_floor":
        down = negative & (frac > 0)
        mag = np.where(down, t + 1 - step, t + step) * q
    else:
        mag = (t + step) * q
    value = np.where(finite, np.where(negative, -mag, mag), x.astype(np.float64))
    return encode(value, fmt, overflow=overflow, nan=nan)


def nearest(x, *, seed, fmt, sr_bits=32, overflow=None, nan="max"):
    """Bug: deterministic round to nearest even (the seed does nothing)."""
    return encode(x, fmt, overflow=overflow, nan=nan)


def fixed_seed(x, *, seed, fmt, **params):
    """Bug: a correct sampler that ignores its seed (the stream starts at 0 every call)."""
    return exact_pcg(x, seed=0, fmt=fmt, **params)


CORRECT = {
    "exact oracle, PCG64 bits": exact_pcg,
    "quantum arithmetic, Philox draws": quantum_philox,
}

# name -> (sampler, format, declared variants, the flag of the vectors that must reject it
# without random examples: the corpus rule, checked in tests/test_statistical.py)
BUGS = {
    "4 random bits read while 8 are declared": (partial(exact_pcg, read_bits=4), "float4_e2m1fn",
                                                 {"sr_bits": [8]}, "SrWidth"),
    "4 random bits read while 32 are declared": (partial(exact_pcg, read_bits=4), "float8_e4m3fn",
                                                  {"sr_bits": [32]}, "SrWidth"),
    "biased by half an ulp": (partial(quantum_philox, bug="half_ulp"), "bfloat16", {}, "SrFraction"),
    "deterministic (round to nearest even)": (nearest, "float8_e5m2", {}, "SrTie"),
    "ignores the seed (every call identical)": (fixed_seed, "float6_e2m3fn", {}, "SrTie"),
    "negative values step toward +Inf": (partial(quantum_philox, bug="signed_floor"), "float16", {}, "SrSign"),
    "one random number per pair of elements": (partial(exact_pcg, shared=2), "float8_e4m3fn", {}, "SrIndependence"),
    "one random number per quad of elements": (partial(exact_pcg, shared=4), "float4_e2m1fn", {"sr_bits": [8]},
                                                "SrIndependence"),
}


def implementation(op, sampler, variants=None) -> SimpleNamespace:
    """What the statistical judge asks of an implementation: its supported variant
    values (declared ones, the op's defaults elsewhere) and accepted dtypes (all)."""
    declared = variants or {}
    supported = {v.name: tuple(declared.get(v.name, (v.default,))) for v in op.variants}
    fmt = op.name.split(".")[1]
    return SimpleNamespace(name=getattr(sampler, "__name__", "sampler"), fn=partial(sampler, fmt=fmt),
                           supported=lambda _op: supported, accepted_dtypes=lambda _op: {})

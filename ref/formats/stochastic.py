"""Stochastic rounding to an element format, with the random bits as an input.

    encode_stochastic(x, fmt, rbits)   up iff  r / 2^k + rbits / 2^32 >= 1

where r / 2^k is the discarded fraction of one code step (`minifloat.truncate`):
"add the random bits to the discarded bits, aligned at the top, and keep the carry".
Hardware with a W-bit random number R per element (PTX `cvt.rs`: 16 bits for FP8,
FP6 and bf16, 13 for f16, 8 for E2M1) is `rbits = R << (32 - W)`; `sr_bits = W`
keeps only the top W bits of each rbits. The comparison is decided in integers, so
it is exact for float16, float32 and float64 inputs alike.

References: Gupta et al., "Deep Learning with Limited Numerical Precision",
arXiv:1502.02551; NVIDIA, "Pretraining Large Language Models with NVFP4",
arXiv:2509.25149; NVIDIA PTX ISA, cvt (`.rs` rounding).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer
from ref.formats.minifloat import (
    FloatFormat,
    NanPolicy,
    NegativePolicy,
    Overflow,
    Truncation,
    check_options,
    check_source,
    chunked,
    finish,
    truncate,
)

__all__ = ["SR_WIDTHS", "carries", "encode_stochastic"]

# Random bits per element: 32 (ideal), 16 (PTX cvt.rs for FP8, FP6, bfloat16), 13 (float16), 8 (E2M1).
SR_WIDTHS = (32, 16, 13, 8)


def encode_stochastic(
    x: ArrayLike,
    fmt: str | FloatFormat,
    rbits: ArrayLike,
    *,
    sr_bits: int = 32,
    overflow: Overflow | str | None = None,
    nan: NanPolicy | str = NanPolicy.MAX,
    negative: NegativePolicy | str = NegativePolicy.NAN,
) -> NDArray:
    """Stochastically round float16/32/64 `x` to the codes of `fmt`, bit-exact.

    rbits: uint32 of x's shape, one random number per element; only its top
    `sr_bits` bits (1..32) are read. The magnitude steps up one code iff
    discarded_fraction + rbits / 2^32 >= 1 (never for an exact value). Everything
    else is `minifloat.encode`'s: overflow (a stochastic step is not toward zero, so
    a nonsaturating overflow gives +-Inf, or NaN without Inf), zeros, NaN (`nan`),
    and E8M0's `negative` policy.
    """
    f, overflow, nan, negative = check_options(fmt, overflow, nan, negative)
    x = check_source(x, f)
    rbits = _check_rbits(rbits, x, integer(sr_bits, "sr_bits", minimum=1, maximum=32))

    def step(xs, us):
        t = truncate(xs, f, negative=negative)
        return finish(t, carries(t, us), f, overflow=overflow, nan=nan, negative=negative)

    return chunked(step, f.code_dtype, x, rbits)


def carries(t: Truncation, rbits: ArrayLike) -> NDArray[np.bool_]:
    """Whether r / 2^k + rbits / 2^32 >= 1 for each element, decided exactly in uint64:

        k <= 32:  r * 2^(32 - k) + rbits >= 2^32
        k  > 32:  floor(r / 2^(k - 32)) >= 2^32 - rbits
    """
    r = t.remainder.astype(np.uint64)
    k = t.width.astype(np.int64)
    u = np.asarray(rbits).astype(np.uint64)
    two32 = np.uint64(1 << 32)
    narrow = (r << (32 - np.clip(k, 0, 32)).astype(np.uint64)) + u >= two32
    wide = (r >> (np.clip(k, 32, 95) - 32).astype(np.uint64)) >= two32 - u  # r < 2^62: >> 63 gives 0
    return (r != 0) & np.where(k > 32, wide, narrow)


def _check_rbits(rbits: ArrayLike, x: NDArray, sr_bits: int) -> NDArray[np.uint32]:
    """uint32 random bits of x's shape (never cast, never broadcast), top sr_bits kept."""
    rbits = np.asarray(rbits)
    if rbits.dtype != np.uint32 or rbits.shape != x.shape:
        raise ValueError(f"rbits: expected uint32 of shape {x.shape}, got {rbits.dtype} of shape {rbits.shape}")
    drop = 32 - sr_bits
    return rbits & np.uint32((0xFFFFFFFF >> drop) << drop)

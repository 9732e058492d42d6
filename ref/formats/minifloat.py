"""The element codec, bit-exact: `encode` (float16/32/64 -> codes) and `decode`.

The formats themselves (`FORMATS`, `FloatFormat`, the option enums) are defined in
`ref.formats.minifloat_formats` and re-exported here.

`encode` maps float16/32/64 values to codes with integer arithmetic on the IEEE
bits of the input: no intermediate float rounding, so a float64 input is rounded
once (never through float32). It is three public steps, so that another rounding
rule (stochastic rounding, `ref.formats.stochastic`) reuses the other two:

  truncate(x, fmt)            |x| cut at the target quantum: the code toward zero and
                              the discarded fraction remainder / 2^width, exactly
  rounds_up(t, rounding)      whether each magnitude steps up by one code
  finish(t, up, fmt, ...)     the step, overflow, zeros, NaN and sign: the codes

`decode` maps codes back to float32, where every value of every format is exact.
`ref.formats.minifloat_table` is the same encode written as a search in the table
of representable values (tests prove the two equal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import choice, member
from ref.formats.minifloat_formats import (
    FORMATS,
    NATIVE_FORMATS,
    FloatFormat,
    NanEncoding,
    NanPolicy,
    NegativePolicy,
    Overflow,
    Rounding,
    get_format,
)

__all__ = [
    "CHUNK",
    "FORMATS",
    "FloatFormat",
    "NATIVE_FORMATS",
    "PRECISIONS",
    "NanEncoding",
    "NanPolicy",
    "NegativePolicy",
    "Overflow",
    "Rounding",
    "Truncation",
    "bit_length",
    "check_options",
    "check_source",
    "chunked",
    "decode",
    "encode",
    "finish",
    "get_format",
    "round_to",
    "rounds_up",
    "truncate",
]

# Source formats encode accepts: (unsigned view, exponent bits, mantissa bits).
_SOURCES = {
    np.dtype(np.float16): (np.uint16, 5, 10),
    np.dtype(np.float32): (np.uint32, 8, 23),
    np.dtype(np.float64): (np.uint64, 11, 52),
}
CHUNK = 1 << 16  # elements per step of `chunked`: its integer temporaries stay in cache


def bit_length(v: NDArray[np.uint64]) -> NDArray[np.int64]:
    """Number of significant bits of each unsigned integer (0 for 0), by halving."""
    v = v.copy()
    n = np.zeros(v.shape, dtype=np.int64)
    for step in (32, 16, 8, 4, 2, 1):
        big = v >= (np.uint64(1) << np.uint64(step))
        n[big] += step
        v[big] >>= np.uint64(step)
    return n + (v > 0)


def check_source(x: ArrayLike, fmt: str | FloatFormat) -> NDArray:
    """`x` as a native-order float16/32/64 array that holds every mantissa bit of `fmt`."""
    x = np.asarray(x)
    if x.dtype.kind == "f" and not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))  # the same values in native byte order
    if x.dtype not in _SOURCES:
        raise TypeError(f"x: expected a float16, float32 or float64 array, got dtype {x.dtype}")
    f = get_format(fmt)
    if f.mbits > _SOURCES[x.dtype][2]:
        raise ValueError(f"x: {x.dtype} has fewer mantissa bits than {f.name}; pass a wider float")
    return x


def check_options(fmt, overflow, nan, negative) -> tuple[FloatFormat, Overflow, NanPolicy, NegativePolicy]:
    """The format and encode's overflow/nan/negative options, checked against each other."""
    f = get_format(fmt)
    overflow = f.default_overflow if overflow is None else member(overflow, Overflow, "overflow")
    nan = member(nan, NanPolicy, "nan")
    negative = member(negative, NegativePolicy, "negative")
    if f.signed and negative is not NegativePolicy.NAN:
        raise ValueError(f"negative: only unsigned formats take a negative policy; {f.name} is signed")
    if overflow not in f.overflow_policies():
        raise ValueError(f"overflow: {f.name} has neither Inf nor NaN, so only 'saturate' applies; "
                         f"got {overflow.value!r}")
    return f, overflow, nan, negative


def chunked(step: Callable[..., NDArray], dtype: np.dtype, *arrays: NDArray) -> NDArray:
    """step(*chunks) over flat chunks of same-shape arrays, reassembled in their shape."""
    flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
    out = np.empty(flat[0].size, dtype=dtype)
    for i in range(0, out.size, CHUNK):
        out[i:i + CHUNK] = step(*(a[i:i + CHUNK] for a in flat))
    return out.reshape(np.shape(arrays[0]))


def encode(
    x: ArrayLike,
    fmt: str | FloatFormat,
    *,
    rounding: Rounding | str = Rounding.NEAREST_EVEN,
    overflow: Overflow | str | None = None,
    nan: NanPolicy | str = NanPolicy.MAX,
    negative: NegativePolicy | str = NegativePolicy.NAN,
) -> NDArray:
    """Round float16/32/64 values to the codes of `fmt`, bit-exact.

    x: [...] float16, float32 or float64. Returns codes [...] as uint8 (uint16 for
    float16/bfloat16), one code per element; FP4 and FP6 codes use the low 4 or 6
    bits and leave the rest zero.

    The magnitude |x| = sig * 2^e is rounded at the quantum 2^q of the target,
    q = max(floor(log2|x|), emin) - m, with integer shifts only. Then:
      zero      -> zero of the same sign (+0 where there is no -0; NaN in E8M0)
      NaN       -> the canonical NaN of the sign of x; in formats without NaN, `nan`
      +-Inf     -> saturate: +-max; nonsaturating: +-Inf, or NaN without Inf
      overflow  -> the same as Inf, except that under nonsaturating overflow a finite
                   value rounded toward zero (toward_zero, or the directed mode pointing
                   at zero for its sign) gives +-max, as IEEE 754 section 7.4 says
      negative  -> in an unsigned format (E8M0), `negative`: NaN, or the code of |x|
      below the smallest value of a format without zero (E8M0) -> the smallest value
    `overflow` defaults to the format's own: nonsaturating for float16/bfloat16
    (IEEE 754), saturating for the OCP 8/6/4-bit formats. Stochastic rounding is
    `ref.formats.stochastic.encode_stochastic`.
    """
    rounding = member(rounding, Rounding, "rounding")
    f, overflow, nan, negative = check_options(fmt, overflow, nan, negative)
    x = check_source(x, f)

    def step(xs):
        t = truncate(xs, f, negative=negative)
        return finish(t, rounds_up(t, rounding), f, overflow=overflow, nan=nan, negative=negative,
                      toward_zero=_toward_zero(rounding, t.negative))

    return chunked(step, f.code_dtype, x)


class Truncation(NamedTuple):
    """Each |x| cut at its target quantum, from the IEEE bits.

    magnitude is the magnitude code of |x| rounded toward zero (it may pass the
    largest finite code, and is -1 below the smallest value of a format without
    zero); remainder / 2^width is the discarded fraction of one code step, exactly
    (remainder < 2^width; width may exceed the remainder's integer type).
    """

    negative: NDArray[np.bool_]  # the sign of x (False under NegativePolicy.MAGNITUDE)
    magnitude: NDArray[np.signedinteger]
    remainder: NDArray[np.unsignedinteger]
    width: NDArray[np.signedinteger]
    zero: NDArray[np.bool_]
    inf: NDArray[np.bool_]
    nan: NDArray[np.bool_]


def truncate(x: ArrayLike, fmt: str | FloatFormat, *,
             negative: NegativePolicy | str = NegativePolicy.NAN) -> Truncation:
    """|x| at the quantum of `fmt` (the first step of encode; see `Truncation`)."""
    f = get_format(fmt)
    x = check_source(x, f)
    uint, sebits, smbits = _SOURCES[x.dtype]
    U = np.uint64 if x.dtype == np.float64 else np.uint32  # float16/32 fit 32-bit arithmetic
    S = np.int64 if U is np.uint64 else np.int32
    cap = 62 if U is np.uint64 else 30  # shifts past this leave sig (< 2^53 or 2^24) whole in r
    bits = x.view(uint).astype(U)
    if member(negative, NegativePolicy, "negative") is NegativePolicy.MAGNITUDE:
        bits = bits & U((1 << (sebits + smbits)) - 1)  # drop the sign: encode |x|
    field_e = ((bits >> U(smbits)) & U((1 << sebits) - 1)).astype(S)
    field_m = bits & U((1 << smbits) - 1)
    special = field_e == (1 << sebits) - 1  # Inf or NaN
    zero = (field_e == 0) & (field_m == 0)

    # |x| = sig * 2^e2 exactly; ex = floor(log2 |x|).
    normal = field_e > 0
    sig = field_m | (normal.astype(U) << U(smbits))  # the implicit leading one
    e2 = np.maximum(field_e, S(1)) - S((1 << (sebits - 1)) - 1 + smbits)
    ex = field_e - S((1 << (sebits - 1)) - 1)
    sub = ~normal & ~zero
    if sub.any():
        ex[sub] = (bit_length(sig[sub].astype(np.uint64)) - 1 + e2[sub]).astype(S)

    # Cut sig * 2^e2 at the target quantum 2^q, q = max(ex, emin) - m.
    ex_t = np.maximum(ex, S(f.emin))
    width = ex_t - S(f.mbits) - e2  # < 0 only for source subnormals the target holds exactly
    capped = np.clip(width, 0, cap).astype(U)
    n = sig >> capped
    exact_sub = width < 0
    if exact_sub.any():
        n[exact_sub] = sig[exact_sub] << (-width[exact_sub]).astype(U)
    # The magnitude code: a later step up by one carries into the exponent field by itself.
    exp_field = ex_t - S(f.emin - (1 if f.has_subnormals else 0))
    magnitude = (exp_field << S(f.mbits)) + n.astype(S) - S(1 << f.mbits)
    return Truncation(negative=(bits >> U(sebits + smbits)) == 1, magnitude=magnitude,
                      remainder=sig & ((U(1) << capped) - U(1)), width=np.maximum(width, 0),
                      zero=zero, inf=special & (field_m == 0), nan=special & (field_m != 0))


def rounds_up(t: Truncation, rounding: Rounding | str) -> NDArray[np.bool_]:
    """Whether each truncated magnitude steps up by one code under `rounding`.

    Ties to even look at the truncated code's last bit (for E8M0, with no mantissa
    bits, the exponent's last bit).
    """
    rounding = member(rounding, Rounding, "rounding")
    r = t.remainder
    inexact = r != 0
    if rounding in (Rounding.NEAREST_EVEN, Rounding.NEAREST_AWAY):
        U = r.dtype.type
        cap = 8 * r.dtype.itemsize - 2  # past it r holds all of sig, and the half-way point lies above it
        half = (U(1) << np.clip(t.width, 0, cap + 1).astype(U)) >> U(1)
        if rounding is Rounding.NEAREST_AWAY:
            return inexact & (r >= half)
        return inexact & ((r > half) | ((r == half) & ((t.magnitude & 1) == 1)))
    if rounding is Rounding.TOWARD_ZERO:
        return np.zeros(r.shape, dtype=bool)
    if rounding is Rounding.TOWARD_POSITIVE:
        return inexact & ~t.negative
    return inexact & t.negative  # toward_negative


def _toward_zero(rounding: Rounding, negative: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """Where the rounding mode points at zero (IEEE 754 7.4: such an overflow stays at max)."""
    if rounding is Rounding.TOWARD_ZERO:
        return np.ones_like(negative)
    if rounding is Rounding.TOWARD_POSITIVE:
        return negative
    if rounding is Rounding.TOWARD_NEGATIVE:
        return ~negative
    return np.zeros_like(negative)


def finish(t: Truncation, up: NDArray[np.bool_], fmt: str | FloatFormat, *, overflow: Overflow,
           nan: NanPolicy, negative: NegativePolicy, toward_zero: NDArray[np.bool_] | bool = False) -> NDArray:
    """The codes: each magnitude stepped up where `up`, then overflow, zeros, NaN, sign.

    Options are enums, checked (`check_options`); `toward_zero` marks the elements
    whose rounding pointed at zero (a finite overflow of theirs stays at max under
    the nonsaturating policy).
    """
    f = get_format(fmt)
    mag = t.magnitude + up
    if not f.has_zero:
        np.maximum(mag, 0, out=mag)
    overflowed = (mag > f.max_code) | t.inf
    if overflowed.any():
        if overflow is Overflow.SATURATE:
            top = np.full(mag.shape, f.max_code)
        else:
            top = np.where(toward_zero & ~t.inf, f.max_code, f.inf_code if f.has_inf else f.nan_code)
        mag[overflowed] = top[overflowed]
    mag[t.zero] = 0

    sign = np.where(t.negative, f.sign_mask, 0).astype(mag.dtype)
    if not f.has_negative_zero:
        sign[mag == 0] = 0
    codes = sign | mag
    if t.nan.any():
        codes[t.nan] = _nan_code(f, nan, t.negative, sign)[t.nan]
    if not f.has_zero and negative is NegativePolicy.NAN:
        codes[t.zero] = f.nan_code
    if not f.signed:
        codes[t.negative] = f.nan_code
    return codes.astype(f.code_dtype)


def _nan_code(f: FloatFormat, nan: NanPolicy, negative, sign):
    """Code of a NaN input (broadcast over the chunk)."""
    if not f.has_nan:
        return {
            NanPolicy.MAX: np.full(negative.shape, f.max_code),
            NanPolicy.ZERO: np.zeros(negative.shape, dtype=int),
            NanPolicy.ZERO_FLIPPED_SIGN: np.where(negative, 0, f.sign_mask),
        }[nan]
    if f.nan is NanEncoding.NEGATIVE_ZERO:
        return np.full(negative.shape, f.nan_code)
    return sign | f.nan_code


def _check_codes(codes: ArrayLike, f: FloatFormat) -> NDArray:
    codes = np.asarray(codes)
    if codes.dtype != f.code_dtype:
        raise TypeError(f"codes: expected {f.code_dtype} codes of {f.name}, got dtype {codes.dtype}")
    if f.nbits < 8 * f.code_dtype.itemsize and codes.size and int(codes.max()) >> f.nbits:
        bad = int(codes[codes >> f.nbits != 0].flat[0])
        raise ValueError(
            f"codes: {f.name} codes use the low {f.nbits} bits, got 0x{bad:02x} with high bits set"
        )
    return codes


def decode(codes: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float32]:
    """Values of `fmt` codes as float32 (exact for every format in `FORMATS`).

    codes: [...] uint8 (uint16 for float16/bfloat16). NaN codes give NaN with the
    code's sign where the format has signed NaN; Inf codes give +-inf.
    """
    f = get_format(fmt)
    codes = _check_codes(codes, f).astype(np.int64)
    negative = (codes & f.sign_mask) != 0
    mag = codes & ~f.sign_mask
    field_e = mag >> f.mbits
    field_m = mag & ((1 << f.mbits) - 1)
    sub = (field_e == 0) & f.has_subnormals
    significand = np.where(sub, field_m, field_m + (1 << f.mbits)).astype(np.float64)
    exponent = np.where(sub, f.emin, field_e - f.bias) - f.mbits
    value = np.ldexp(significand, exponent)
    if f.has_inf:
        value = np.where(mag == f.inf_code, np.inf, value)
    value = np.where(f.is_nan_code(codes), np.nan, value)
    value = np.where(negative, -value, value)
    return value.astype(np.float32)


PRECISIONS = ("float64", "float32", "float16", "bfloat16")


def round_to(x: ArrayLike, precision: str) -> NDArray[np.float64]:
    """`x` rounded to nearest-even in `precision` (one of PRECISIONS), as float64.

    The values a kernel holds when it stores `x` at that precision: float32 by
    NumPy's IEEE cast; float16 and bfloat16 by rounding the significand at the
    quantum of x's binade (never finer than the subnormals'), with overflow to +-Inf
    as IEEE 754 says: the same values as this module's codec, `decode(encode(x))`
    (tests/test_minifloat.py checks every class of input), at a tenth of its cost,
    since attention kernels call it per tile. float64 returns a float64 copy.
    """
    choice(precision, "precision", PRECISIONS)
    x = np.asarray(x, dtype=np.float64)
    if precision == "float64":
        return x.copy()
    if precision == "float32":
        return x.astype(np.float32).astype(np.float64)
    f = get_format(precision)
    _, e = np.frexp(x)  # x = m * 2^e with 0.5 <= |m| < 1
    quantum = np.maximum(e - 1, f.emin) - f.mbits  # log2 of one ulp at x
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.ldexp(np.rint(np.ldexp(x, -quantum)), quantum)  # rint: ties to even
    return np.where(np.abs(r) > f.max_normal, np.copysign(np.inf, x), r)

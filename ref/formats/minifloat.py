"""Element number formats: one generic minifloat codec, bit-exact.

A format is described by its exponent bits, mantissa bits, bias and what it does
with its top codes (Inf, NaN, negative zero). Every element format used for LLM
inference is one row of `FORMATS`:

=================  ===  ===  ====  =====  ==========  =====  ===========
name               e    m    bias  Inf    NaN         -0     max normal
=================  ===  ===  ====  =====  ==========  =====  ===========
float4_e2m1fn      2    1    1     no     none        yes    6
float6_e2m3fn      2    3    1     no     none        yes    7.5
float6_e3m2fn      3    2    3     no     none        yes    28
float8_e4m3fn      4    3    7     no     S.1111.111  yes    448
float8_e4m3        4    3    7     yes    IEEE        yes    240
float8_e5m2        5    2    15    yes    IEEE        yes    57344
float8_e4m3fnuz    4    3    8     no     0x80        no     240
float8_e5m2fnuz    5    2    16    no     0x80        no     57344
float8_e8m0fnu     8    0    127   no     0xFF        no 0   2^127
float16            5    10   15    yes    IEEE        yes    65504
bfloat16           8    7    127   yes    IEEE        yes    ~3.39e38
=================  ===  ===  ====  =====  ==========  =====  ===========

`encode` maps float16/32/64 values to codes with integer arithmetic on the IEEE
bits of the input: no intermediate float rounding, so a float64 input is rounded
once (never through float32). `decode` maps codes back to float32, where every
value of every format above is exact.

References: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0 (2023);
OCP Microscaling Formats (MX) v1.0 (2023), arXiv:2310.10537; IEEE 754-2019;
Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import choice, integer, member

__all__ = [
    "FORMATS",
    "FloatFormat",
    "NATIVE_FORMATS",
    "PRECISIONS",
    "NanEncoding",
    "NanPolicy",
    "NegativePolicy",
    "Overflow",
    "Rounding",
    "decode",
    "encode",
    "get_format",
    "round_to",
]


class Rounding(enum.Enum):
    """How a value between two neighbouring codes is rounded."""

    NEAREST_EVEN = "nearest_even"  # IEEE roundTiesToEven: the default everywhere
    NEAREST_AWAY = "nearest_away"  # ties away from zero (ml_dtypes' E8M0 ties)
    TOWARD_ZERO = "toward_zero"  # truncate the magnitude (PTX .rz)
    TOWARD_POSITIVE = "toward_positive"  # ceiling (PTX .rp, E8M0 scales)
    TOWARD_NEGATIVE = "toward_negative"  # floor (PTX .rm)
    STOCHASTIC = "stochastic"  # up with probability equal to the discarded fraction


class Overflow(enum.Enum):
    """What a finite value beyond the largest finite code (and Inf) becomes."""

    SATURATE = "saturate"  # clamp to +-max finite; Inf too (PTX .satfinite)
    NONSATURATING = "nonsaturating"  # +-Inf if the format has it, else NaN


class NanPolicy(enum.Enum):
    """What NaN becomes in a format that has no NaN (E2M1, E2M3, E3M2).

    The OCP MX spec leaves this to the implementation, so it is a declared
    variant, never a tolerance.
    """

    MAX = "max"  # +max finite whatever the NaN's sign (PTX cvt .satfinite)
    ZERO = "zero"  # +0
    ZERO_FLIPPED_SIGN = "zero_flipped_sign"  # ml_dtypes: +NaN -> -0, -NaN -> +0


class NegativePolicy(enum.Enum):
    """What a zero or negative input becomes in an unsigned format without zero (E8M0)."""

    NAN = "nan"  # NaN (0xFF): ml_dtypes, and the reading that E8M0 has neither sign nor zero
    MAGNITUDE = "magnitude"  # encode |x|; zero clamps to 2^-127 (torch, CUDA's host conversion)


class NanEncoding(enum.Enum):
    """Which codes of a format are NaN."""

    NONE = "none"  # no NaN at all (E2M1, E2M3, E3M2)
    IEEE = "ieee"  # exponent all ones, mantissa non-zero
    ALL_ONES = "all_ones"  # exponent and mantissa all ones, either sign (E4M3FN, E8M0)
    NEGATIVE_ZERO = "negative_zero"  # the code of -0, 0x80 (the FNUZ formats)


@dataclass(frozen=True)
class FloatFormat:
    """Parameters of a binary floating-point format, like microxcaling's table.

    Value of a finite code with sign s, exponent field E and mantissa field M:
      normal     (E > 0, or any E without subnormals): (-1)^s 2^(E - bias) (1 + M / 2^m)
      subnormal  (E = 0, with subnormals):             (-1)^s 2^(1 - bias) (M / 2^m)
    """

    name: str
    ebits: int
    mbits: int
    bias: int
    has_inf: bool
    nan: NanEncoding
    signed: bool = True
    has_negative_zero: bool = True
    has_zero: bool = True
    has_subnormals: bool = True

    @property
    def has_nan(self) -> bool:
        return self.nan is not NanEncoding.NONE

    @property
    def nbits(self) -> int:
        return self.ebits + self.mbits + (1 if self.signed else 0)

    @property
    def code_dtype(self) -> np.dtype:
        """Smallest unsigned integer type that holds one code."""
        for t in (np.uint8, np.uint16, np.uint32, np.uint64):
            if self.nbits <= 8 * np.dtype(t).itemsize:
                return np.dtype(t)
        raise ValueError(f"{self.name}: {self.nbits}-bit codes do not fit in 64 bits")

    @property
    def sign_mask(self) -> int:
        return (1 << (self.nbits - 1)) if self.signed else 0

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value."""
        return 1 - self.bias if self.has_subnormals else -self.bias

    @property
    def max_code(self) -> int:
        """Largest finite magnitude code (sign bit clear)."""
        width = self.ebits + self.mbits
        if self.nan is NanEncoding.IEEE:
            return (((1 << self.ebits) - 1) << self.mbits) - 1
        if self.nan is NanEncoding.ALL_ONES:
            return (1 << width) - 2
        return (1 << width) - 1

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value."""
        return (self.max_code >> self.mbits) - self.bias

    @property
    def max_normal(self) -> float:
        frac = self.max_code & ((1 << self.mbits) - 1)
        return float(np.ldexp(1.0 + frac / (1 << self.mbits), self.emax))

    @property
    def ulp_at_max(self) -> float:
        """Spacing of the values in the binade of the largest finite value."""
        return float(np.ldexp(1.0, self.emax - self.mbits))

    @property
    def min_normal(self) -> float:
        return float(np.ldexp(1.0, self.emin))

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value (the smallest normal if there are no subnormals)."""
        if not self.has_subnormals:
            return self.min_normal
        return float(np.ldexp(1.0, self.emin - self.mbits))

    @property
    def inf_code(self) -> int | None:
        return ((1 << self.ebits) - 1) << self.mbits if self.has_inf else None

    @property
    def nan_code(self) -> int | None:
        """The canonical (positive, quiet) NaN code that `encode` writes."""
        width = self.ebits + self.mbits
        if self.nan is NanEncoding.IEEE:
            return (((1 << self.ebits) - 1) << self.mbits) | (1 << (self.mbits - 1))
        if self.nan is NanEncoding.ALL_ONES:
            return (1 << width) - 1
        if self.nan is NanEncoding.NEGATIVE_ZERO:
            return 1 << width
        return None

    def is_nan_code(self, codes: NDArray) -> NDArray[np.bool_]:
        """Boolean mask of the codes that decode to NaN."""
        codes = np.asarray(codes).astype(np.int64)
        mag = codes & ((1 << (self.nbits - 1)) - 1) if self.signed else codes  # ~sign_mask overflows int64
        if self.nan is NanEncoding.IEEE:
            return (mag >> self.mbits == (1 << self.ebits) - 1) & (mag & ((1 << self.mbits) - 1) != 0)
        if self.nan is NanEncoding.ALL_ONES:
            return mag == (1 << (self.ebits + self.mbits)) - 1
        if self.nan is NanEncoding.NEGATIVE_ZERO:
            return codes == self.nan_code
        return np.zeros(codes.shape, dtype=bool)

    def overflow_policies(self) -> tuple[Overflow, ...]:
        """The overflow policies that mean something for this format."""
        if self.has_inf or self.has_nan:
            return (Overflow.SATURATE, Overflow.NONSATURATING)
        return (Overflow.SATURATE,)

    @property
    def default_overflow(self) -> Overflow:
        """IEEE 754 formats overflow to Inf; the OCP 8/6/4-bit formats saturate."""
        return Overflow.NONSATURATING if self.name in ("float16", "bfloat16") else Overflow.SATURATE


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("float4_e2m1fn", 2, 1, 1, has_inf=False, nan=NanEncoding.NONE),
        FloatFormat("float6_e2m3fn", 2, 3, 1, has_inf=False, nan=NanEncoding.NONE),
        FloatFormat("float6_e3m2fn", 3, 2, 3, has_inf=False, nan=NanEncoding.NONE),
        FloatFormat("float8_e4m3fn", 4, 3, 7, has_inf=False, nan=NanEncoding.ALL_ONES),
        FloatFormat("float8_e4m3", 4, 3, 7, has_inf=True, nan=NanEncoding.IEEE),
        FloatFormat("float8_e5m2", 5, 2, 15, has_inf=True, nan=NanEncoding.IEEE),
        FloatFormat(
            "float8_e4m3fnuz", 4, 3, 8, has_inf=False, nan=NanEncoding.NEGATIVE_ZERO,
            has_negative_zero=False,
        ),
        FloatFormat(
            "float8_e5m2fnuz", 5, 2, 16, has_inf=False, nan=NanEncoding.NEGATIVE_ZERO,
            has_negative_zero=False,
        ),
        FloatFormat(
            "float8_e8m0fnu", 8, 0, 127, has_inf=False, nan=NanEncoding.ALL_ONES,
            signed=False, has_negative_zero=False, has_zero=False, has_subnormals=False,
        ),
        FloatFormat("float16", 5, 10, 15, has_inf=True, nan=NanEncoding.IEEE),
        FloatFormat("bfloat16", 8, 7, 127, has_inf=True, nan=NanEncoding.IEEE),
    )
}


# The IEEE binary formats of NumPy's own float types, for ULP arithmetic on their bits.
NATIVE_FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("float32", 8, 23, 127, has_inf=True, nan=NanEncoding.IEEE),
        FloatFormat("float64", 11, 52, 1023, has_inf=True, nan=NanEncoding.IEEE),
    )
}


def get_format(fmt: str | FloatFormat) -> FloatFormat:
    """Look a format up by name (an element format, or float32/float64)."""
    if isinstance(fmt, FloatFormat):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"fmt: expected a format name or FloatFormat, got {type(fmt).__name__} {fmt!r}")
    found = FORMATS.get(fmt) or NATIVE_FORMATS.get(fmt)
    if found is None:
        raise ValueError(f"fmt: expected one of {sorted(FORMATS) + sorted(NATIVE_FORMATS)}, got {fmt!r}")
    return found


# Source formats encode accepts: (unsigned view, exponent bits, mantissa bits).
_SOURCES = {
    np.dtype(np.float16): (np.uint16, 5, 10),
    np.dtype(np.float32): (np.uint32, 8, 23),
    np.dtype(np.float64): (np.uint64, 11, 52),
}


def bit_length(v: NDArray[np.uint64]) -> NDArray[np.int64]:
    """Number of significant bits of each unsigned integer (0 for 0), by halving."""
    v = v.copy()
    n = np.zeros(v.shape, dtype=np.int64)
    for step in (32, 16, 8, 4, 2, 1):
        big = v >= (np.uint64(1) << np.uint64(step))
        n[big] += step
        v[big] >>= np.uint64(step)
    return n + (v > 0)


def _check_source(x: ArrayLike) -> NDArray:
    x = np.asarray(x)
    if x.dtype.kind == "f" and not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))  # the same values in native byte order
    if x.dtype not in _SOURCES:
        raise TypeError(f"x: expected a float16, float32 or float64 array, got dtype {x.dtype}")
    return x


def _round_up(odd, r, shift, cap, negative, rounding: Rounding, rbits):
    """Whether the truncated magnitude code steps up by one.

    odd: the truncated code's last bit (ties-to-even looks at the code, which for
    E8M0, with no mantissa bits, is the exponent's last bit). r is the discarded
    part, `shift` bits wide; past `cap` bits, r holds all of sig and the half-way
    point lies above it.
    """
    U = r.dtype.type
    inexact = r != 0
    if rounding is Rounding.NEAREST_EVEN or rounding is Rounding.NEAREST_AWAY:
        half = (U(1) << np.clip(shift, 0, cap + 1).astype(U)) >> U(1)
        if rounding is Rounding.NEAREST_AWAY:
            return inexact & (r >= half)
        return inexact & ((r > half) | ((r == half) & odd))
    if rounding is Rounding.TOWARD_ZERO:
        return np.zeros(r.shape, dtype=bool)
    if rounding is Rounding.TOWARD_POSITIVE:
        return inexact & ~negative
    if rounding is Rounding.TOWARD_NEGATIVE:
        return inexact & negative
    # Stochastic: up iff r / 2^shift + u / 2^32 >= 1, decided exactly in uint64:
    #   shift <= 32:  r * 2^(32 - shift) + u >= 2^32
    #   shift  > 32:  floor(r / 2^(shift - 32)) >= 2^32 - u
    r = r.astype(np.uint64)
    shift = shift.astype(np.int64)
    u = rbits.astype(np.uint64)
    two32 = np.uint64(1 << 32)
    narrow = (r << (32 - np.clip(shift, 0, 32)).astype(np.uint64)) + u >= two32
    wide = (r >> (np.clip(shift, 32, 95) - 32).astype(np.uint64)) >= two32 - u
    return inexact & np.where(shift > 32, wide, narrow)


def _check_rbits(rbits, x: NDArray, rounding: Rounding, sr_bits) -> NDArray | None:
    """The random bits stochastic rounding reads: uint32 like x, only the top sr_bits kept."""
    sr_bits = integer(sr_bits, "sr_bits", minimum=1, maximum=32)
    if rounding is not Rounding.STOCHASTIC:
        if rbits is not None:
            raise ValueError(f"rbits: only used with rounding='stochastic', got rounding={rounding.value!r}")
        return None
    if rbits is None:
        raise ValueError("rbits: rounding='stochastic' needs rbits, a uint32 array like x")
    rbits = np.asarray(rbits)
    if rbits.dtype != np.uint32 or rbits.shape != x.shape:
        raise ValueError(f"rbits: expected uint32 of shape {x.shape}, got {rbits.dtype} of shape {rbits.shape}")
    drop = 32 - sr_bits
    return rbits & np.uint32((0xFFFFFFFF >> drop) << drop)


def encode(
    x: ArrayLike,
    fmt: str | FloatFormat,
    *,
    rounding: Rounding | str = Rounding.NEAREST_EVEN,
    overflow: Overflow | str | None = None,
    nan: NanPolicy | str = NanPolicy.MAX,
    negative: NegativePolicy | str = NegativePolicy.NAN,
    rbits: ArrayLike | None = None,
    sr_bits: int = 32,
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
    `rounding="stochastic"` needs `rbits` (uint32, same shape as x): the magnitude
    steps up iff discarded_fraction + rbits / 2^32 >= 1. `sr_bits` < 32 keeps only
    the top sr_bits of each rbits, the width of a hardware random number (PTX cvt.rs:
    16 for FP8/FP6/bf16, 13 for f16, 8 for E2M1).
    `overflow` defaults to the format's own: nonsaturating for float16/bfloat16
    (IEEE 754), saturating for the OCP 8/6/4-bit formats.
    """
    x = _check_source(x)
    f = get_format(fmt)
    rounding = member(rounding, Rounding, "rounding")
    overflow = f.default_overflow if overflow is None else member(overflow, Overflow, "overflow")
    nan = member(nan, NanPolicy, "nan")
    negative = member(negative, NegativePolicy, "negative")
    if f.signed and negative is not NegativePolicy.NAN:
        raise ValueError(f"negative: only unsigned formats take a negative policy; {f.name} is signed")
    if overflow not in f.overflow_policies():
        raise ValueError(
            f"overflow: {f.name} has neither Inf nor NaN, so only 'saturate' applies; "
            f"got {overflow.value!r}"
        )
    rbits = _check_rbits(rbits, x, rounding, sr_bits)

    uint, sebits, smbits = _SOURCES[x.dtype]
    if f.mbits > smbits:
        raise ValueError(f"x: {x.dtype} has fewer mantissa bits than {f.name}; pass a wider float")
    # Work on flat chunks that stay in cache; float16/32 inputs fit 32-bit integers.
    wide = np.uint64 if x.dtype == np.float64 else np.uint32
    bits = np.ascontiguousarray(x).reshape(-1).view(uint)
    flat_rbits = None if rbits is None else np.ascontiguousarray(rbits).reshape(-1)
    out = np.empty(bits.size, dtype=f.code_dtype)
    for i in range(0, bits.size, _CHUNK):
        chunk = slice(i, i + _CHUNK)
        out[chunk] = _encode_bits(
            bits[chunk].astype(wide), (sebits, smbits), f, rounding, overflow, nan, negative,
            None if flat_rbits is None else flat_rbits[chunk],
        )
    return out.reshape(x.shape)


_CHUNK = 1 << 16


def _encode_bits(bits, source, f: FloatFormat, rounding, overflow, nan, negative_policy, rbits):
    """Codes of `f` for the IEEE bit patterns `bits` (uint32 or uint64, 1-D) of a
    source format with `source` = (exponent bits, mantissa bits)."""
    U = bits.dtype.type
    S = np.int64 if U is np.uint64 else np.int32
    cap = 62 if U is np.uint64 else 30  # shifts past this leave sig (< 2^53 or 2^24) whole in r
    sebits, smbits = source
    sbias = (1 << (sebits - 1)) - 1
    if negative_policy is NegativePolicy.MAGNITUDE:
        bits = bits & U((1 << (sebits + smbits)) - 1)  # drop the sign: encode |x|
    negative = (bits >> U(sebits + smbits)) == 1
    field_e = ((bits >> U(smbits)) & U((1 << sebits) - 1)).astype(S)
    field_m = bits & U((1 << smbits) - 1)
    is_special = field_e == (1 << sebits) - 1  # Inf or NaN
    is_zero = (field_e == 0) & (field_m == 0)

    # |x| = sig * 2^e2 exactly; ex = floor(log2 |x|).
    normal = field_e > 0
    sig = field_m | (normal.astype(U) << U(smbits))  # the implicit leading one
    e2 = np.maximum(field_e, S(1)) - S(sbias + smbits)
    ex = field_e - S(sbias)
    sub = ~normal & ~is_zero
    if sub.any():
        ex[sub] = (bit_length(sig[sub].astype(np.uint64)) - 1 + e2[sub]).astype(S)

    # Round sig * 2^e2 at the target quantum 2^q, q = max(ex, emin) - m.
    ex_t = np.maximum(ex, S(f.emin))
    shift = ex_t - S(f.mbits) - e2  # < 0 only for source subnormals the target holds exactly
    capped = np.clip(shift, 0, cap).astype(U)
    n = sig >> capped
    exact_sub = shift < 0
    if exact_sub.any():
        n[exact_sub] = sig[exact_sub] << (-shift[exact_sub]).astype(U)
    r = sig & ((U(1) << capped) - U(1))
    # The truncated magnitude code; rounding up adds one, and a mantissa carry
    # moves into the exponent field by itself.
    exp_field = ex_t - S(f.emin - (1 if f.has_subnormals else 0))
    mag = (exp_field << S(f.mbits)) + n.astype(S) - S(1 << f.mbits)
    mag += _round_up((mag & 1) == 1, r, shift, cap, negative, rounding, rbits)
    if not f.has_zero:
        np.maximum(mag, 0, out=mag)
    is_inf = is_special & (field_m == 0)
    overflowed = (mag > f.max_code) | is_inf
    if overflowed.any():
        mag[overflowed] = _overflow_code(f, overflow, rounding, negative, is_inf)[overflowed]
    mag[is_zero] = 0

    sign = np.where(negative, S(f.sign_mask), S(0))
    if not f.has_negative_zero:
        sign[mag == 0] = 0
    codes = sign | mag
    is_nan = is_special & (field_m != 0)
    if is_nan.any():
        codes[is_nan] = _nan_code(f, nan, negative, sign)[is_nan]
    if not f.has_zero and negative_policy is NegativePolicy.NAN:
        codes[is_zero] = f.nan_code
    if not f.signed:
        codes[negative] = f.nan_code
    return codes.astype(f.code_dtype)


def _overflow_code(f: FloatFormat, overflow: Overflow, rounding: Rounding, negative, is_inf):
    """Magnitude code of an overflowed element (broadcast over the chunk)."""
    if overflow is Overflow.SATURATE:
        return np.full(negative.shape, f.max_code)
    # IEEE 754 7.4: a finite overflow rounded toward zero stays at max finite.
    toward_zero = {
        Rounding.TOWARD_ZERO: np.ones_like(negative),
        Rounding.TOWARD_POSITIVE: negative,
        Rounding.TOWARD_NEGATIVE: ~negative,
    }.get(rounding, np.zeros_like(negative))
    return np.where(toward_zero & ~is_inf, f.max_code, f.inf_code if f.has_inf else f.nan_code)


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
    NumPy's IEEE cast, float16 and bfloat16 by this module's codec (overflow to
    +-Inf, as IEEE 754 says). float64 returns a float64 copy.
    """
    choice(precision, "precision", PRECISIONS)
    x = np.asarray(x, dtype=np.float64)
    if precision == "float64":
        return x.copy()
    if precision == "float32":
        return x.astype(np.float32).astype(np.float64)
    return decode(encode(x, precision), precision).astype(np.float64)

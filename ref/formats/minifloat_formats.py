"""Element number formats: what each minifloat is, without the codec.

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

The codec (`encode`, `decode`) is `ref.formats.minifloat`, which re-exports these
names. The options of encode are enums here: `Rounding`, `Overflow`, `NanPolicy`,
`NegativePolicy`.

References: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0 (2023);
OCP Microscaling Formats (MX) v1.0 (2023), arXiv:2310.10537; IEEE 754-2019;
Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "FORMATS",
    "FloatFormat",
    "NATIVE_FORMATS",
    "NanEncoding",
    "NanPolicy",
    "NegativePolicy",
    "Overflow",
    "Rounding",
    "get_format",
]


class Rounding(enum.Enum):
    """How a value between two neighbouring codes is rounded."""

    NEAREST_EVEN = "nearest_even"  # IEEE roundTiesToEven: the default everywhere
    NEAREST_AWAY = "nearest_away"  # ties away from zero (ml_dtypes' E8M0 ties)
    TOWARD_ZERO = "toward_zero"  # truncate the magnitude (PTX .rz)
    TOWARD_POSITIVE = "toward_positive"  # ceiling (PTX .rp, E8M0 scales)
    TOWARD_NEGATIVE = "toward_negative"  # floor (PTX .rm)


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

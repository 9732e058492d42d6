"""Stochastic rounding as a distribution: what a kernel that draws its own random
numbers (PTX `cvt.rs` fed by a Philox stream, say) may return for each element, and
with which probability.

For an element x and a target format, let lo be the largest value of the format with
lo <= |x| and hi the next one up (max + one ulp past the largest finite value), and
let f = (|x| - lo) / (hi - lo) be the discarded fraction. Stochastic rounding with
W random bits draws k uniformly from [0, 2^W) (the top W bits of a uint32, u = k/2^W)
and steps away from zero iff f + u >= 1. Counting the k that do:

    P(step away) = #{k : k >= 2^W (1 - f)} / 2^W = floor(f 2^W) / 2^W

so only the first W bits of the fraction matter, and a fraction below 2^-W never
steps. The two outcomes are the codes of sign(x) lo (toward zero) and sign(x) hi
(away from zero); a step past the largest finite value is an overflow, which the
format's overflow policy turns into +-max (saturate) or +-Inf/NaN (nonsaturating).
Zeros, NaN and Inf are deterministic, as `stochastic.encode_stochastic` defines them
(`minifloat.encode`'s rules), and so is every finite |x| >= max + ulp (it overflows
whatever the random bits).

The neighbours come from the table of the format's values (every magnitude code
decoded), not from the codec's integer shifts: f is exact in float64 (|x| - lo is exact
by Sterbenz's lemma, or is |x| itself when lo = 0, and the division is by a power of
two), and so is floor(f 2^W).

References: spec/formats.md, "encode_stochastic" and "The statistical
twin"; PTX ISA, `cvt` with `.rs` rounding (sm_100a); Croci et al., "Stochastic
rounding: implementation, error analysis and applications", R. Soc. Open Sci. 9
(2022).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.formats.minifloat import FORMATS, FloatFormat, NanPolicy, Overflow, decode, get_format
from ref.formats.stochastic import SR_WIDTHS

__all__ = ["SR_FORMATS", "SR_WIDTHS", "sr_distribution", "step_probability"]

# The signed element formats narrower than float32 (E8M0, unsigned scales only, has no stochastic cvt).
SR_FORMATS = tuple(name for name, f in FORMATS.items() if f.signed)

_SOURCE_MBITS = {np.dtype(np.float16): 10, np.dtype(np.float32): 23, np.dtype(np.float64): 52}


@lru_cache(maxsize=None)
def _magnitudes(name: str) -> NDArray[np.float64]:
    """Every finite non-negative value of the format, ascending (index = magnitude code)."""
    f = get_format(name)
    codes = np.arange(f.max_code + 1, dtype=np.int64).astype(f.code_dtype)
    values = decode(codes, f).astype(np.float64)
    values.flags.writeable = False
    return values


def step_probability(fraction: ArrayLike, sr_bits: int) -> NDArray[np.float64]:
    """P(f + k/2^W >= 1) for k uniform over [0, 2^W): floor(f 2^W) / 2^W.

    fraction: float64 values in [0, 1), exactly the discarded fractions.
    """
    w = integer(sr_bits, "sr_bits", minimum=1, maximum=32)
    f = np.asarray(fraction, dtype=np.float64)
    if np.any(~((f >= 0) & (f < 1))):
        raise ValueError("fraction: expected values in [0, 1)")
    return np.ldexp(np.floor(np.ldexp(f, w)), -w)


def _check_x(x: ArrayLike, f: FloatFormat) -> NDArray:
    x = np.asarray(x)
    if x.dtype.kind == "f" and not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    if x.dtype not in _SOURCE_MBITS:
        raise TypeError(f"x: expected a float16, float32 or float64 array, got dtype {x.dtype}")
    if f.mbits > _SOURCE_MBITS[x.dtype]:
        raise ValueError(f"x: {x.dtype} has fewer mantissa bits than {f.name}; pass a wider float")
    return x


def sr_distribution(
    x: ArrayLike,
    fmt: str | FloatFormat,
    *,
    sr_bits: int = 32,
    overflow: Overflow | str | None = None,
    nan: NanPolicy | str = NanPolicy.MAX,
) -> tuple[NDArray, NDArray[np.float64]]:
    """The distribution of stochastically rounded codes, per element.

    x: [...] float16, float32 or float64. Returns (outcomes [..., 2], probabilities
    [..., 2]): outcomes[..., 0] is the code toward zero and outcomes[..., 1] the code
    one step away from zero (after the overflow policy), in the format's code dtype;
    probabilities are float64 and sum to 1. A representable value (zero included)
    has P(away) = 0, its second outcome being the next code; NaN, Inf, a saturated
    step and a certain overflow have the same code twice, with probabilities (1, 0).
    `overflow` defaults to the format's own, `nan` is what NaN becomes in a format
    without NaN (as in `encode_stochastic`).
    """
    f = get_format(fmt)
    if not f.signed:
        raise ValueError(f"fmt: {f.name} is unsigned (a scale format); stochastic rounding covers {SR_FORMATS}")
    x = _check_x(x, f)
    w = integer(sr_bits, "sr_bits", minimum=1, maximum=32)
    overflow = f.default_overflow if overflow is None else member(overflow, Overflow, "overflow")
    if overflow not in f.overflow_policies():
        raise ValueError(f"overflow: {f.name} has neither Inf nor NaN, so only 'saturate' applies; "
                         f"got {overflow.value!r}")
    nan = member(nan, NanPolicy, "nan")

    table = _magnitudes(f.name)
    top = table[-1] + f.ulp_at_max  # where the step past max lands
    with np.errstate(invalid="ignore"):  # a signalling NaN widens to a quiet NaN
        a = np.abs(x.astype(np.float64)).reshape(-1)
    finite = np.isfinite(a)
    a0 = np.where(finite, a, 0.0)
    below = np.minimum(np.searchsorted(table, a0, side="right") - 1, table.size - 1)  # lo's magnitude code
    lo = table[below]
    hi = np.where(below + 1 < table.size, table[np.minimum(below + 1, table.size - 1)], top)
    beyond = a0 >= top  # overflows whatever the random bits
    fraction = np.where(beyond, 0.0, (a0 - lo) / (hi - lo))
    p = step_probability(fraction, w)

    over = _overflow_magnitude(f, overflow)
    down = np.where(beyond, over, below)
    up = np.where(beyond | (below + 1 > f.max_code), over, below + 1)
    negative = np.signbit(x).reshape(-1)
    down, up = _signed(f, down, negative), _signed(f, up, negative)
    special = ~finite
    if special.any():
        is_nan = np.isnan(x).reshape(-1)
        fixed = np.where(is_nan, _nan_code(f, nan, negative), _signed(f, np.full(a.shape, over), negative))
        down = np.where(special, fixed, down)
        up = np.where(special, fixed, up)
    p = np.where(special | (down == up), 0.0, p)

    outcomes = np.stack([down, up], axis=-1).astype(f.code_dtype).reshape(*x.shape, 2)
    probabilities = np.stack([1.0 - p, p], axis=-1).reshape(*x.shape, 2)
    return outcomes, probabilities


def _overflow_magnitude(f: FloatFormat, overflow: Overflow) -> int:
    if overflow is Overflow.SATURATE:
        return f.max_code
    return f.inf_code if f.has_inf else f.nan_code


def _signed(f: FloatFormat, magnitude: NDArray, negative: NDArray) -> NDArray[np.int64]:
    """Codes of signed magnitudes: no sign on a zero of a format without -0, nor on
    the FNUZ NaN (0x80 is already the sign bit)."""
    magnitude = np.asarray(magnitude, dtype=np.int64)
    unsigned = (magnitude == 0) & (not f.has_negative_zero)
    if f.nan_code is not None and f.nan_code & f.sign_mask:
        unsigned |= magnitude == f.nan_code
    return np.where(negative & ~unsigned, magnitude | f.sign_mask, magnitude)


def _nan_code(f: FloatFormat, nan: NanPolicy, negative: NDArray) -> NDArray[np.int64]:
    if f.has_nan:
        return _signed(f, np.full(negative.shape, f.nan_code), negative)
    if nan is NanPolicy.MAX:
        return np.full(negative.shape, f.max_code)
    if nan is NanPolicy.ZERO:
        return np.zeros(negative.shape, dtype=np.int64)
    return np.where(negative, 0, f.sign_mask)  # ZERO_FLIPPED_SIGN

"""Comparators: judge an implementation's output against the oracle's.

Exact comparison is bit for bit, with two latitudes named here and nowhere else:
NaN payloads and NaN signs are not compared (any NaN code matches any NaN code),
and float outputs may come in any float dtype that holds their values exactly.
Codes and integers must come in the oracle's dtype (a uint8 code is one byte). Every mismatch report carries
what a kernel engineer needs: the first mismatching index, both values and, for
codes, both bit patterns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from ref.formats.minifloat import FloatFormat, decode, get_format
from ref.testing.ulp import bits_to_str, ulp_distance

__all__ = ["Comparison", "Mismatch", "compare_block_codes", "compare_codes", "compare_exact", "compare_parts",
           "compare_values", "float_bits"]


@dataclass(frozen=True)
class Mismatch:
    """The first element where two arrays disagree."""

    index: tuple[int, ...]
    expected: str
    actual: str
    expected_bits: str | None = None
    actual_bits: str | None = None

    def describe(self) -> str:
        text = f"at index {self.index}: expected {self.expected}, got {self.actual}"
        if self.expected_bits is not None:
            text += f" (bits {self.expected_bits} vs {self.actual_bits})"
        return text


@dataclass(frozen=True)
class Comparison:
    """Outcome of one comparison: pass/fail, counts and the worst distance."""

    ok: bool
    compared: int
    mismatched: int
    worst: float
    unit: str
    tolerance: float = 0.0
    first: Mismatch | None = None
    problem: str | None = None
    part: str = ""  # which output of several, e.g. "scales"

    def describe(self) -> str:
        head = f"{self.part}: " if self.part else ""
        return head + self._describe()

    def summary(self) -> str:
        """As `describe`, without the first mismatch (a structured failure carries it
        in fields of its own)."""
        head = f"{self.part}: " if self.part else ""
        if self.problem or self.ok or self.first is None:
            return head + self._describe()
        return head + (f"{self.mismatched} of {self.compared} elements differ (worst {self.worst:g} "
                       f"{self.unit}, tolerance {self.tolerance:g})")

    def _describe(self) -> str:
        if self.problem:
            return self.problem
        if self.ok:
            return f"{self.compared} elements equal"
        return (
            f"{self.mismatched} of {self.compared} elements differ (worst {self.worst:g} "
            f"{self.unit}, tolerance {self.tolerance:g}); first {self.first.describe()}"
        )


def _structural(expected: np.ndarray, actual: np.ndarray, unit: str) -> Comparison | None:
    if actual.shape != expected.shape:
        return Comparison(
            False, expected.size, expected.size, np.inf, unit,
            problem=f"shape: expected {expected.shape}, got {actual.shape}",
        )
    return None


def _hex64(v: float) -> str:
    return "0x" + format(int(np.float64(v).view(np.uint64)), "016x")


def float_bits(v: float, dtype: np.dtype) -> str:
    """The bits of the float `v` as hex in `dtype` (float16/32/64) when that dtype
    holds v exactly (NaN included), else its float64 bits."""
    dtype = np.dtype(dtype)
    ml_float = dtype.kind == "V" and dtype.type is not np.void  # bfloat16, float8_*
    if not (dtype.kind == "f" or ml_float) or dtype.itemsize not in (1, 2, 4, 8):
        return _hex64(v)
    with np.errstate(all="ignore"):
        narrow = np.array(v, dtype=np.float64).astype(dtype)
    if not (narrow.astype(np.float64) == v or np.isnan(v)):
        return _hex64(v)
    raw = int(narrow.reshape(1).view(f"u{dtype.itemsize}")[0])
    return f"0x{raw:0{2 * dtype.itemsize}x}"


def _first(bad: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(bad)[0])


def compare_codes(expected: ArrayLike, actual: ArrayLike, fmt: str | FloatFormat) -> Comparison:
    """Codes of `fmt`, bit for bit, in the oracle's dtype; all NaN codes are equivalent.

    The worst distance is in ULPs of the format (one ULP is one code step; a code
    outside the format's bit width is infinitely far).
    """
    f = get_format(fmt)
    expected, actual = np.asarray(expected), np.asarray(actual)
    unit = f"ulp of {f.name}"
    if actual.dtype != expected.dtype:
        return Comparison(
            False, expected.size, expected.size, np.inf, unit,
            problem=f"dtype: expected {expected.dtype} codes of {f.name}, got {actual.dtype}",
        )
    bad_shape = _structural(expected, actual, unit)
    if bad_shape:
        return bad_shape
    wide = actual.astype(np.int64)
    in_range = (wide >= 0) & (wide < (1 << f.nbits))
    act = np.where(in_range, wide, 0).astype(np.uint64)
    exp = expected.astype(np.uint64)
    both_nan = f.is_nan_code(exp) & f.is_nan_code(act)
    bad = ~in_range | ((exp != act) & ~both_nan)
    dist = np.where(in_range, ulp_distance(exp, act, f), np.inf)
    if not bad.any():
        return Comparison(True, expected.size, 0, 0.0, unit)
    i = _first(bad)
    e, a = int(expected[i]), int(wide[i])
    ev = float(decode(np.array(e, dtype=f.code_dtype), f)) if f.nbits <= 16 else e
    shown_a = f"0x{a:x}"
    if in_range[i] and f.nbits <= 16:
        shown_a += f" = {float(decode(np.array(a, dtype=f.code_dtype), f))!r}"
    first = Mismatch(
        i, f"0x{e:x} = {ev!r}", shown_a, bits_to_str(e, f),
        bits_to_str(a, f) if in_range[i] else format(a, "b"),
    )
    return Comparison(False, expected.size, int(bad.sum()), float(dist[bad].max()), unit, first=first)


def compare_values(expected: ArrayLike, actual: ArrayLike, fmt: str = "float32") -> Comparison:
    """Floating-point values, exactly: -0 differs from +0, any NaN matches any NaN.

    The worst distance is in ULPs of `fmt`; a value that `fmt` cannot represent
    exactly is infinitely far.
    """
    f = get_format(fmt)
    expected, actual = np.asarray(expected), np.asarray(actual)
    unit = f"ulp of {f.name}"
    if actual.dtype.kind != "f":
        return Comparison(
            False, expected.size, expected.size, np.inf, unit,
            problem=f"dtype: expected floating-point values, got {actual.dtype}",
        )
    bad_shape = _structural(expected, actual, unit)
    if bad_shape:
        return bad_shape
    with np.errstate(invalid="ignore"):
        exp64, act64 = expected.astype(np.float64), actual.astype(np.float64)
    both_nan = np.isnan(exp64) & np.isnan(act64)
    same = exp64.view(np.uint64) == act64.view(np.uint64)
    bad = ~(same | both_nan)
    if not bad.any():
        return Comparison(True, expected.size, 0, 0.0, unit)
    native = np.dtype(f"float{f.nbits}")
    with np.errstate(all="ignore"):
        act_n = act64.astype(native)
    exact = (act_n.astype(np.float64) == act64) | np.isnan(act64)
    dist = np.where(
        exact, ulp_distance(exp64.astype(native).view(f.code_dtype), act_n.view(f.code_dtype), f), np.inf
    )
    i = _first(bad)
    shown = actual.dtype if actual.dtype in (np.float16, np.float32, np.float64) else np.dtype(np.float64)
    first = Mismatch(  # bits in the dtype compared (float64 where it cannot hold the value)
        i, repr(float(exp64[i])), repr(float(act64[i])),
        float_bits(exp64[i], shown), float_bits(act64[i], shown),
    )
    return Comparison(False, expected.size, int(bad.sum()), float(dist[bad].max()), unit, first=first)


def compare_exact(expected: ArrayLike, actual: ArrayLike, *, fmt: str | FloatFormat | None = None) -> Comparison:
    """Exact comparison of an output: codes of `fmt`, floats, or plain integers/booleans."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if fmt is not None and expected.dtype.kind in "ui":
        return compare_codes(expected, actual, fmt)
    if expected.dtype.kind == "f":
        return compare_values(expected, actual, "float32" if fmt is None else get_format(fmt).name)
    unit = "|difference|"
    if actual.dtype != expected.dtype:
        return Comparison(
            False, expected.size, expected.size, np.inf, unit,
            problem=f"dtype: expected {expected.dtype}, got {actual.dtype}",
        )
    bad_shape = _structural(expected, actual, unit)
    if bad_shape:
        return bad_shape
    bad = expected.astype(np.int64) != actual.astype(np.int64)
    if not bad.any():
        return Comparison(True, expected.size, 0, 0.0, unit)
    diff = np.abs(expected.astype(np.int64) - actual.astype(np.int64))
    i = _first(bad)
    e, a = int(expected[i]), int(actual[i])
    width = 8 * expected.dtype.itemsize
    hexed = (None, None) if expected.dtype == np.bool_ else tuple(
        f"0x{v & ((1 << width) - 1):0{width // 4}x}" for v in (e, a))  # two's complement, its own width
    first = Mismatch(i, str(e), str(a), *hexed)
    return Comparison(False, expected.size, int(bad.sum()), float(diff[bad].max()), unit, first=first)


def compare_block_codes(expected, actual, *, elem_fmt: str | None, scale_fmt: str = "float8_e8m0fnu",
                        block: int = 32, axis: int = -1) -> Comparison:
    """(codes, scales) of a block codec: scales bit for bit, then element codes bit for
    bit except in blocks whose expected scale is NaN (their elements carry no value).
    `elem_fmt` None compares element codes as plain integers (MXINT8)."""
    if not isinstance(actual, tuple) or len(actual) != 2:
        return Comparison(False, 0, 0, np.inf, "", problem="expected a (codes, scales) pair")
    (codes, scales), (got_codes, got_scales) = expected, actual
    cmp = compare_codes(scales, got_scales, scale_fmt)
    if not cmp.ok:
        return replace(cmp, part="scales")
    nan_block = np.moveaxis(get_format(scale_fmt).is_nan_code(scales), axis, -1)
    nan_elem = np.moveaxis(np.repeat(nan_block, block, axis=-1), -1, axis)
    got_codes = np.asarray(got_codes)
    if got_codes.shape == codes.shape and got_codes.dtype == codes.dtype:
        got_codes = np.where(nan_elem, codes, got_codes)
    cmp = compare_codes(codes, got_codes, elem_fmt) if elem_fmt else compare_exact(codes, got_codes)
    return replace(cmp, part="codes")


def compare_parts(expected, actual, *, names, comparators) -> Comparison:
    """An op with several outputs: each compared by its own comparator, in order;
    the first failing part is reported by name."""
    if not isinstance(actual, tuple) or len(actual) != len(names):
        return Comparison(False, 0, 0, np.inf, "", problem=f"expected a tuple of outputs {tuple(names)}")
    last = None
    for name, cmp_fn, e, a in zip(names, comparators, expected, actual):
        last = replace(cmp_fn(e, a), part=name)
        if not last.ok:
            return last
    return last

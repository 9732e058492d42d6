"""The classes of a drawn or swept case of a formats op: its `case_flags`, named with
the area's own flags, so that a failing example or sweep case carries the flags of
the elements it failed on (and a skip or xfail naming a flag covers it).

Element values against a format: NaN, Infinity, Overflow (past the overflow tie),
OverflowBoundary (between max and that tie), MaxNormal, MinNormal, SignedZero,
Underflow (at most half the smallest subnormal), Subnormal (the format's subnormal
range), InputSubnormal (a subnormal of the input's own dtype), TiesToEven (exactly
halfway between two codes), CarryIntoExponent (above the binade's largest mantissa),
RoundTrip (representable), RoundingDirection (any other value); plus Float16Input or
DoubleRounding by the input dtype, NoNegativeZero (FNUZ: a negative that rounds to
zero) and E8M0 (zero or negative into an unsigned format).
Codes: NaN, Infinity, SignedZero, Subnormal, MinNormal, MaxNormal, else Exhaustive.
Block codecs: the element classes of their elements plus ZeroBlock, NanBlock,
InfBlock and SmallestScale by block; every case gets at least one class ("Random").
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ref.formats.minifloat import FloatFormat, decode, get_format
from ref.testing.vector_files import Case

__all__ = ["block_flags", "code_flags", "element_flags", "for_codes", "for_elements", "for_blocks", "ordered"]

RANDOM = "Random"


def ordered(flags: Iterable[str]) -> tuple[str, ...]:
    """Flags without repeats, in first-seen order; ("Random",) when there are none."""
    out = tuple(dict.fromkeys(flags))
    return out or (RANDOM,)


def element_flags(x, fmt: str | FloatFormat) -> tuple[str, ...]:
    """The classes of the values in `x` (any float dtype) against format `fmt`."""
    f = get_format(fmt)
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and not arr.dtype.name.startswith(("bfloat16", "float")):
        return ()
    flags = []
    if arr.dtype == np.float16:
        flags.append("Float16Input")
    with np.errstate(all="ignore"):
        v = arr.astype(np.float64).reshape(-1)
        if arr.dtype == np.float64 and np.any(np.isfinite(v) & (v.astype(np.float32).astype(np.float64) != v)):
            flags.append("DoubleRounding")
        a = np.abs(v)
        finite = np.isfinite(v)
        half_sub = f.min_subnormal / 2
        boundary = f.max_normal + f.ulp_at_max / 2
        tiny = np.finfo(arr.dtype).tiny if arr.dtype.kind == "f" else 0.0
        mant, exp = np.frexp(np.where(finite, a, 1.0))  # a = mant * 2^exp, mant in [0.5, 1)
        # a / ulp, exactly (a power-of-two scaling): 2^(mbits+1) * mant in a normal binade
        steps = np.where(a >= f.min_normal, np.ldexp(mant, f.mbits + 1), a / f.min_subnormal)
        frac = steps - np.floor(steps)
        in_range = finite & (a > half_sub) & (a <= f.max_normal)
        classes = [
            ("NaN", np.isnan(v)),
            ("Infinity", np.isinf(v)),
            ("Overflow", finite & (a > boundary)),
            ("OverflowBoundary", finite & (a > f.max_normal) & (a <= boundary)),
            ("MaxNormal", a == f.max_normal),
            ("MinNormal", a == f.min_normal),
            ("SignedZero", v == 0),
            ("Underflow", (a > 0) & (a <= half_sub)),
            ("Subnormal", (a > half_sub) & (a < f.min_normal)),
            ("InputSubnormal", (a > 0) & (a < tiny)),
            ("TiesToEven", finite & (a >= half_sub) & (a <= boundary) & (frac == 0.5)),
            ("CarryIntoExponent", in_range & (a >= f.min_normal) & (steps > 2.0 ** (f.mbits + 1) - 1)),
            ("RoundTrip", in_range & (frac == 0)),
            ("RoundingDirection", in_range & (frac != 0) & (frac != 0.5)),
        ]
    flags += [name for name, hit in classes if hit.any()]
    if not f.has_negative_zero and np.any((v < 0) & (a <= half_sub)):
        flags.append("NoNegativeZero")
    if not f.signed and np.any(v <= 0):
        flags.append("E8M0")
    return tuple(flags)


def code_flags(codes, fmt: str | FloatFormat) -> tuple[str, ...]:
    """The classes of the codes of `fmt` in `codes`, by the values they decode to."""
    f = get_format(fmt)
    c = np.asarray(codes)
    if c.dtype.kind not in "ui":
        return ()
    if np.any((c.astype(np.int64) < 0) | (c.astype(np.int64) >= 1 << f.nbits)):
        return ("DirtyBits",)
    v = decode(c.astype(f.code_dtype), f).astype(np.float64).reshape(-1)
    a = np.abs(v)
    classes = [("NaN", np.isnan(v)), ("Infinity", np.isinf(v)), ("SignedZero", v == 0),
               ("Subnormal", (a > 0) & (a < f.min_normal)), ("MinNormal", a == f.min_normal),
               ("MaxNormal", a == f.max_normal)]
    return tuple(name for name, hit in classes if hit.any()) + ("Exhaustive",)


def block_flags(x, block: int, *, elem: str | None = None) -> tuple[str, ...]:
    """The block classes of `x` (blocks of `block` along the last axis), then the
    element classes of its values against `elem` (None: none)."""
    arr = np.asarray(x)
    flags = []
    if arr.ndim and arr.shape[-1] and arr.shape[-1] % block == 0:
        with np.errstate(all="ignore"):
            blocks = arr.astype(np.float64).reshape(-1, block)
            amax = np.max(np.where(np.isnan(blocks), 0.0, np.abs(blocks)), axis=-1)
        classes = [("ZeroBlock", np.all(blocks == 0, axis=-1)), ("NanBlock", np.any(np.isnan(blocks), axis=-1)),
                   ("InfBlock", np.any(np.isinf(blocks), axis=-1)),
                   ("SmallestScale", (amax > 0) & (amax < 2.0**-120))]
        flags += [name for name, hit in classes if hit.any()]
    if elem is not None:
        flags += [fl for fl in element_flags(arr, elem) if fl in ("Float16Input", "InputSubnormal")]
    return tuple(flags)


def for_elements(fmt: str, name: str = "x"):
    """case_flags of an element encoder: the classes of input `name`."""
    return lambda case: ordered(element_flags(case.inputs[name], fmt))


def for_codes(fmt: str, name: str = "codes"):
    """case_flags of an element decoder: the classes of its codes."""
    return lambda case: ordered(code_flags(case.inputs[name], fmt))


def for_blocks(block: int, *, elem: str | None = None, codes: str | None = None, scale_nan=None):
    """case_flags of a block codec: on a quantizer (input "x") the block and element
    classes, on a dequantizer (inputs "codes", "scales") the code classes of `codes`
    (an element format, None for integers) and NanBlock where `scale_nan(scales)`."""
    def flags(case: Case) -> tuple[str, ...]:
        inputs = case.inputs
        if "x" in inputs:
            return ordered(block_flags(inputs["x"], block, elem=elem))
        found = list(code_flags(inputs["codes"], codes)) if codes else []
        if scale_nan is not None and "scales" in inputs and np.any(scale_nan(np.asarray(inputs["scales"]))):
            found.insert(0, "NanBlock")
        return ordered(f for f in found if f != "Exhaustive")

    return flags

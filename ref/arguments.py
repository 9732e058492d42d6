"""Checks of the oracles' option arguments: one place, one message shape.

Every public oracle validates its options here, so a wrong type or value is a
TypeError or ValueError that names the argument and says what was expected, and
nothing falls back silently: the string "false" is not a boolean, "3" and 3.0 are
not integers, and True is not the integer 1.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

__all__ = ["boolean", "choice", "integer", "member", "positive_float32", "real"]


def integer(value, name: str, *, minimum: int | None = None, maximum: int | None = None,
            choices: Sequence[int] | None = None) -> int:
    """`value` as a Python int: an int or NumPy integer (not bool; a 0-d integer array
    too, as golden files store scalars), within [minimum, maximum] and one of
    `choices` when given."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        value = value[()]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if choices is not None and value not in choices:
        raise ValueError(f"{name}: expected one of {tuple(choices)}, got {value}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = " and ".join(b for b in (minimum is not None and f">= {minimum}",
                                          maximum is not None and f"<= {maximum}") if b)
        raise ValueError(f"{name}: expected an integer {bounds}, got {value}")
    return value


def choice(value, name: str, options: Sequence[str]) -> str:
    """`value` if it is one of the strings `options`."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {tuple(options)}, got {type(value).__name__} {value!r}")
    if value not in options:
        raise ValueError(f"{name}: expected one of {tuple(options)}, got {value!r}")
    return value


def member(value, cls, name: str):
    """A member of the Enum `cls`, given as itself or by its value."""
    if isinstance(value, cls):
        return value
    return cls(choice(value, name, [m.value for m in cls]))


def boolean(value, name: str) -> bool:
    """`value` if it is True or False (a NumPy bool too); never a string or a number."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def positive_float32(value, name: str) -> np.float32:
    """A real number (not bool; a 0-d array of one too, as golden files store scalars)
    whose float32 value is positive and finite, as that float32."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "fiu":
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    with np.errstate(over="ignore", under="ignore"):
        v = np.float32(value)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name}: expected a positive finite float32, got {value!r}")
    return v


def real(value, name: str, *, positive: bool = True) -> float:
    """`value` as a finite Python float (an int or float, NumPy's too; not bool), > 0
    unless `positive` is False."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name}: expected a finite {'positive ' if positive else ''}number, got {value}")
    return value

"""Vector flags every area uses, explained once. An area's catalog adds its own
flags beside these (`FLAGS = {**COMMON, ...}`); the same name explained two ways is
an error of the catalog."""

from __future__ import annotations

from ref.testing.catalog_types import Flag

__all__ = ["COMMON", "EMPTY_INPUT", "INVALID_INPUT", "NAN", "RANDOM"]

EMPTY_INPUT = "EmptyInput"
INVALID_INPUT = "InvalidInput"
NAN = "NaN"
RANDOM = "Random"

COMMON = {
    EMPTY_INPUT: Flag("empty or 0-d arrays crash (a reduction over no elements) or change shape",
                      "a zero-token batch or a scalar brings down the kernel or comes back reshaped"),
    INVALID_INPUT: Flag("bad input accepted silently", "a wrong dtype or shape is reinterpreted instead of rejected"),
    NAN: Flag("NaN input not propagated", "NaN silently becomes a finite value and hides a divergence"),
    RANDOM: Flag("any bug the curated vectors miss", "random values across the format's range"),
}

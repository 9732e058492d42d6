"""The types an area's declaration file (`ref/<area>/ops.py`) builds its catalog
entries from: an operation, its kind, its variant axes and its vector flags.

They live in `ref.testing` so that an area reaches up to `ref.testing` only;
`ref.conformance.catalog` discovers the declarations.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ref.testing.compare import Comparison
from ref.testing.golden import Case, VectorSpec

__all__ = ["Flag", "Kind", "Op", "Variant", "seed_for"]


class Kind(enum.Enum):
    """How an operation's output is judged (see spec/conformance.md)."""

    EXACT = "exact"  # bit for bit
    BOUNDED = "bounded"  # numeric error within the op's tolerance rule
    STATISTICAL = "statistical"  # a goodness-of-fit test on output distributions
    STATEFUL = "stateful"  # replay of an operation trace


@dataclass(frozen=True)
class Variant:
    """An axis of latitude: a named choice engines make differently."""

    name: str
    values: tuple[str, ...]
    default: str
    doc: str
    latitude: bool = False  # the spec leaves it open: an undeclared choice is acceptable

    def __post_init__(self):
        if self.default not in self.values:
            raise ValueError(f"variant {self.name}: default {self.default!r} is not among {self.values}")


@dataclass(frozen=True)
class Flag:
    """A vector flag, explained once: the bug class it targets and its effect."""

    bug: str
    effect: str


@dataclass(frozen=True)
class Op:
    """One catalogued operation.

    oracle(**case.inputs, **case.params) is the reference; an implementation's
    callable takes the same keywords. examples(supported) draws `Case`s whose params
    use only the variant values an implementation supports; exhaustive(supported)
    yields deterministic cases run before the random ones; large(supported) yields
    cases past 2^24 elements, run on request (`conform --large`). A bounded op also
    has `emulate`, and its `compare` takes (expected, actual, emulated, precision).
    """

    name: str
    kind: Kind
    oracle: Callable[..., Any]
    summary: str
    spec: str
    variants: tuple[Variant, ...]
    vectors: Callable[[], Sequence[VectorSpec]]
    examples: Callable[[Mapping[str, Sequence[str]]], st.SearchStrategy[Case]]
    compare: Callable[[np.ndarray, np.ndarray], Comparison]
    array_format: Callable[[str, np.ndarray], str | None] = lambda name, arr: None
    exhaustive: Callable[[Mapping[str, Sequence[str]]], Iterable[Case]] | None = None
    outputs: tuple[str, ...] = ()  # names, for an oracle that returns a tuple
    large: Callable[[Mapping[str, Sequence[str]]], Iterable[Case]] | None = None
    # Bounded ops: emulate(precision, **inputs, **params) is the oracle evaluated at a
    # kernel's precision; compare(expected, actual, emulated, precision) judges by it.
    emulate: Callable[..., Any] | None = None
    # The flags a drawn example or exhaustive case exercises (e.g. "EmptyRow"), so that
    # a skip or xfail entry naming a flag covers random cases as it covers vectors.
    case_flags: Callable[[Case], tuple[str, ...]] | None = None

    @property
    def seed(self) -> int:
        """The seed of this op's golden vectors, stable across runs and platforms."""
        return seed_for(self.name)

    @property
    def defaults(self) -> dict[str, str]:
        return {v.name: v.default for v in self.variants}

    @property
    def variant_values(self) -> dict[str, tuple[str, ...]]:
        return {v.name: v.values for v in self.variants}

    @property
    def area(self) -> str:
        return self.name.split(".", 1)[0]


def seed_for(name: str) -> int:
    """A stable 32-bit seed derived from a name (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(name.encode())

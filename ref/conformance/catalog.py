"""The catalog: every public oracle as an operation with its kind, variants and checks.

Each area declares its operations in one file, `ref/<area>/ops.py`, exposing
`OPERATIONS` (a sequence of `Op`) and `FLAGS` (flag name -> `Flag`); `discover()`
finds those files, so adding a technique never touches a central list.
"""

from __future__ import annotations

import enum
import importlib
import pkgutil
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ref.testing.compare import Comparison
from ref.testing.golden import Case, VectorSpec

__all__ = ["Flag", "Kind", "Op", "Variant", "discover", "flags", "get_op", "seed_for"]


class Kind(enum.Enum):
    """How an operation's output is judged (see spec/conformance.md)."""

    EXACT = "exact"  # bit for bit
    BOUNDED = "bounded"  # numeric error within the op's tolerance rule
    STATISTICAL = "statistical"  # a goodness-of-fit test on output distributions
    STATEFUL = "stateful"  # replay of an operation trace


# Kinds the runner can judge today; a kind joins with its first real operation.
RUNNABLE_KINDS = (Kind.EXACT,)


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
    cases past 2^24 elements, run on request (`conform --large`).
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


def _area_modules() -> Iterable[Any]:
    import ref

    for info in sorted(pkgutil.iter_modules(ref.__path__), key=lambda m: m.name):
        if not info.ispkg:
            continue
        name = f"ref.{info.name}.ops"
        try:
            yield importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Op], dict[str, Flag]]:
    ops: dict[str, Op] = {}
    notes: dict[str, Flag] = {}
    for module in _area_modules():
        for flag, note in getattr(module, "FLAGS", {}).items():
            if flag in notes and notes[flag] != note:
                raise ValueError(f"flag {flag!r} is explained twice, differently ({module.__name__})")
            notes[flag] = note
        for op in module.OPERATIONS:
            if op.name in ops:
                raise ValueError(f"operation {op.name!r} is declared twice")
            if op.kind not in RUNNABLE_KINDS:
                raise ValueError(f"operation {op.name!r}: the runner has no checker for kind {op.kind.value!r} yet")
            ops[op.name] = op
    return ops, notes


def discover() -> dict[str, Op]:
    """Every catalogued operation by dotted name, sorted."""
    return dict(sorted(_load()[0].items()))


def flags() -> dict[str, Flag]:
    """Every vector flag with its note."""
    return dict(sorted(_load()[1].items()))


def get_op(name: str) -> Op:
    ops = discover()
    if name not in ops:
        raise ValueError(f"op: no operation named {name!r}; `python -m ref list` shows them")
    return ops[name]

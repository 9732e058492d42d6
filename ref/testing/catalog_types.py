"""The types a technique's catalog module builds its entries from: one operation type
per kind, the variant axes, the vector flags, and `Area`, the builder that fills in
what every operation of an area shares.

    FORMATS = Area("formats", spec="spec/formats.md")
    OPERATIONS = [FORMATS.exact("float4_e2m1fn.pack", packing.pack_fp4, anchor="packing", ...)]

An operation's `oracle` is the public oracle function itself: a case's params are
the variant values as they travel in JSON (a string, a bool, an int), and the oracle
takes them as they are.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

import numpy as np
from hypothesis import strategies as st

from ref.testing.bounded import Bound, compare_bounded, compare_bounded_parts
from ref.testing.compare import Comparison

__all__ = ["Area", "BoundedOp", "ExactOp", "Flag", "Kind", "Operation", "Variant", "VariantValue", "gather", "seed_for"]

VariantValue = Union[str, bool, int]


class Kind(enum.Enum):
    """How an operation's output is judged (see spec/conformance.md)."""

    EXACT = "exact"  # bit for bit
    BOUNDED = "bounded"  # numeric error within the op's tolerance rule
    STATISTICAL = "statistical"  # a goodness-of-fit test on what the candidate samples
    STATEFUL = "stateful"  # replay of an operation trace


def _json_scalar(value: Any, where: str) -> VariantValue:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (bool, str)) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"{where}: a variant value is a str, bool or int (its JSON value), got {value!r}")


def _same_value(a: VariantValue, b: VariantValue) -> bool:
    """Equal and of the same JSON type (True is not 1, '1' is not 1)."""
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Variant:
    """An axis of latitude: a named choice engines make differently.

    `values` is an Enum class (its members' values are taken) or a sequence of
    strs, bools or ints; values travel as those JSON scalars.
    """

    name: str
    values: tuple[VariantValue, ...]
    default: VariantValue
    doc: str
    latitude: bool = False  # the spec leaves it open: an undeclared choice is acceptable

    def __post_init__(self):
        raw = list(self.values) if not (isinstance(self.values, type) and issubclass(self.values, enum.Enum)) \
            else [m.value for m in self.values]
        values = tuple(_json_scalar(v, f"variant {self.name}") for v in raw)
        if len({type(v) for v in values}) > 1:
            raise TypeError(f"variant {self.name}: values mix types {values}")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "default", _json_scalar(self.default, f"variant {self.name}"))
        if not self.has(self.default):
            raise ValueError(f"variant {self.name}: default {self.default!r} is not among {self.values}")

    def has(self, value: Any) -> bool:
        """Whether `value` is one of this axis's values (with its JSON type)."""
        return any(_same_value(value, v) for v in self.values)

    @staticmethod
    def text(value: VariantValue) -> str:
        """A value as JSON writes it, for people: true/false for a bool."""
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    def key(self, value: VariantValue) -> str:
        """'name=value' as golden files key an alternative: true/false for a bool."""
        return f"{self.name}={self.text(value)}"


@dataclass(frozen=True)
class Flag:
    """A vector flag, explained once: the bug class it targets and its effect."""

    bug: str
    effect: str


def _no_format(name: str, arr: np.ndarray) -> str | None:
    return None


@dataclass(frozen=True, kw_only=True)
class Operation:
    """What every catalogued operation has, whatever its kind.

    oracle(**case.inputs, **case.params) is the reference; an implementation's
    callable takes the same keywords. examples(supported) draws `Case`s whose params
    use only the variant values an implementation supports; exhaustive(supported)
    yields deterministic cases run before the random ones; large(supported) yields
    cases past 2^24 elements, run on request (`conform --large`).
    """

    kind: ClassVar[Kind]

    name: str
    oracle: Callable[..., Any]
    summary: str
    spec: str
    vectors: Callable[[], Sequence[Any]]
    examples: Callable[[Mapping[str, Sequence[VariantValue]]], st.SearchStrategy]
    variants: tuple[Variant, ...] = ()
    outputs: tuple[str, ...] = ()  # names, for an oracle that returns a tuple
    exhaustive: Callable[[Mapping[str, Sequence[VariantValue]]], Iterable[Any]] | None = None
    large: Callable[[Mapping[str, Sequence[VariantValue]]], Iterable[Any]] | None = None
    array_format: Callable[[str, np.ndarray], str | None] = _no_format
    # The flags a drawn example or exhaustive case exercises (e.g. "EmptyRow"), so that
    # a skip or xfail entry naming a flag covers random cases as it covers vectors.
    case_flags: Callable[[Any], tuple[str, ...]] | None = None
    # Float outputs that regenerate within the golden bound rather than byte for byte: an
    # exact-kind op whose floats come from float64 sums and powers (AWQ's losses, HQQ's
    # zero points), whose own comparison already has a tolerance (spec/conformance.md,
    # "Regenerating and checking"). Bounded ops always do. A number instead of True is a
    # looser bound, relative to max(1, max |x|), for floats that a library computes to
    # fewer bits in its oldest allowed version (scipy 1.10's incomplete beta function).
    golden_float_bound: bool | float = False

    def __post_init__(self):
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"operation {self.name}: a variant axis is declared twice ({names})")

    @property
    def seed(self) -> int:
        """The seed of this op's golden vectors, stable across runs and platforms."""
        return seed_for(self.name)

    @property
    def defaults(self) -> dict[str, VariantValue]:
        return {v.name: v.default for v in self.variants}

    @property
    def variant_values(self) -> dict[str, tuple[VariantValue, ...]]:
        return {v.name: v.values for v in self.variants}

    def axis(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"operation {self.name} has no variant axis {name!r}")


@dataclass(frozen=True, kw_only=True)
class ExactOp(Operation):
    """Judged bit for bit: compare(expected, actual) is a `Comparison`. Latitude axes
    (the spec leaves a choice open) are allowed."""

    kind: ClassVar[Kind] = Kind.EXACT
    compare: Callable[[Any, Any], Comparison]


@dataclass(frozen=True, kw_only=True)
class BoundedOp(Operation):
    """Judged by its tolerance rule: the candidate's error against the float64 oracle
    within `bounds` times the error of `emulate(precision, **inputs, **params)`, the
    oracle evaluated step by step at the kernel's precision (spec/conformance.md).
    `bounds` is one Bound, or one per output name. No latitude axes."""

    kind: ClassVar[Kind] = Kind.BOUNDED
    emulate: Callable[..., Any]
    bounds: Bound | Mapping[str, Bound]

    def __post_init__(self):
        super().__post_init__()
        if any(v.latitude for v in self.variants):
            raise ValueError(f"operation {self.name}: a bounded op takes no latitude axes")
        if isinstance(self.bounds, Mapping) and set(self.outputs) - set(self.bounds):
            raise ValueError(f"operation {self.name}: no bound for outputs {sorted(set(self.outputs) - set(self.bounds))}")

    def compare(self, expected, actual, emulated, precision: str) -> Comparison:
        """The bounded rule, derived from the bounds."""
        if self.outputs:
            bounds = self.bounds if isinstance(self.bounds, Mapping) else {n: self.bounds for n in self.outputs}
            return compare_bounded_parts(expected, emulated, actual, names=self.outputs, bounds=bounds,
                                         precision=precision)
        return compare_bounded(expected, emulated, actual, precision=precision, bound=self.bounds)


@dataclass(frozen=True)
class Area:
    """Builds an area's operations: the dotted-name prefix, the spec page, and fields
    every one of its operations shares (array_format, say)."""

    prefix: str
    spec: str
    shared: Mapping[str, Any] = field(default_factory=dict)

    def _fields(self, name: str, oracle, anchor: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.shared, **fields, "name": f"{self.prefix}.{name}", "oracle": oracle,
                "spec": f"{self.spec}#{anchor}"}

    def exact(self, name: str, oracle: Callable, *, anchor: str, **fields) -> ExactOp:
        return ExactOp(**self._fields(name, oracle, anchor, fields))

    def bounded(self, name: str, oracle: Callable, *, anchor: str, **fields) -> BoundedOp:
        return BoundedOp(**self._fields(name, oracle, anchor, fields))

    def declare(self, cls: type[Operation], name: str, oracle: Callable, *, anchor: str, **fields) -> Operation:
        """An operation of any kind (the statistical and stateful types build here too)."""
        return cls(**self._fields(name, oracle, anchor, fields))


def seed_for(name: str) -> int:
    """A stable 32-bit seed derived from a name (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(name.encode())


def gather(area: str, modules: Iterable[Any], common: Mapping[str, Flag]) -> tuple[list[Operation], dict[str, Flag]]:
    """An area catalog package's OPERATIONS and FLAGS from its technique modules, in order:
    every module's operations, and `common` plus every module's flags, a flag two
    modules explain differently being an error (a later text must not silently win)."""
    operations: list[Operation] = []
    flags = dict(common)
    for module in modules:
        operations += module.OPERATIONS
        for name, note in module.FLAGS.items():
            if flags.setdefault(name, note) != note:
                raise ValueError(f"{area} catalog: flag {name!r} is explained twice, differently ({module.__name__})")
    return operations, flags

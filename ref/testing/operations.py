"""Transitional: the old single `Op` declaration, built into the kind types of
`ref.testing.catalog_types`. Removed once every area declares through `Area`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ref.testing.bounded import Bound
from ref.testing.catalog_types import BoundedOp, ExactOp, Flag, Kind, Operation, Variant, seed_for

__all__ = ["Flag", "Kind", "Op", "Variant", "seed_for"]


@dataclass(frozen=True, kw_only=True)
class _LegacyBoundedOp(BoundedOp):
    legacy_compare: Callable[..., Any]

    def compare(self, expected, actual, emulated, precision):
        return self.legacy_compare(expected, actual, emulated, precision)


def Op(*, kind: Kind, compare, emulate=None, **fields) -> Operation:  # noqa: N802 (was a class)
    if kind is Kind.EXACT:
        return ExactOp(compare=compare, **fields)
    if kind is Kind.BOUNDED:
        if emulate is None:
            raise ValueError(f"operation {fields.get('name')!r}: a bounded op needs `emulate`")
        return _LegacyBoundedOp(legacy_compare=compare, emulate=emulate, bounds=Bound(k=1.0, floor=1.0), **fields)
    raise ValueError(f"operation {fields.get('name')!r}: the runner has no checker for kind {kind.value!r} yet")

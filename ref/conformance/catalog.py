"""The catalog: every public oracle as an operation with its kind, variants and checks.

Each area declares its operations in a package `ref/<area>/catalog/` (one module per
technique) whose `__init__` gathers `OPERATIONS` (a sequence of operations, one type
per kind: ref.testing.catalog_types) and `FLAGS` (flag name -> `Flag`); `discover()`
finds those packages, so adding a technique never touches a central list. (An area
not yet moved may still declare in `ref/<area>/ops.py`.)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from ref.testing.catalog_types import BoundedOp, ExactOp, Flag, Kind, Operation, Variant, seed_for

Op = Operation  # the base type, under its old name until every user moves

__all__ = ["BoundedOp", "ExactOp", "Flag", "Kind", "Op", "Operation", "Variant", "discover", "flags", "get_op",
           "seed_for"]


FRAMEWORK = ("conformance", "testing")  # packages of ref/ that are not technique areas

# Kinds the runner can judge today; a kind joins with its first real operation.
RUNNABLE_KINDS = (Kind.EXACT, Kind.BOUNDED)


def _area_modules() -> Iterable[Any]:
    import ref

    for info in sorted(pkgutil.iter_modules(ref.__path__), key=lambda m: m.name):
        if not info.ispkg or info.name in FRAMEWORK:
            continue
        for leaf in ("catalog", "ops"):
            name = f"ref.{info.name}.{leaf}"
            try:
                yield importlib.import_module(name)
            except ModuleNotFoundError as err:
                if err.name != name:
                    raise
                continue
            break


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
            if not isinstance(op, Operation):
                raise TypeError(f"{module.__name__}: {op!r} is not an operation (ref.testing.catalog_types)")
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

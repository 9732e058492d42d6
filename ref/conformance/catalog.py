"""The catalog: every public oracle as an operation with its kind, variants and checks.

Each area declares its operations in one file, `ref/<area>/ops.py`, exposing
`OPERATIONS` (a sequence of `Op`) and `FLAGS` (flag name -> `Flag`); `discover()`
finds those files, so adding a technique never touches a central list.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from ref.testing.operations import Flag, Kind, Op, Variant, seed_for

__all__ = ["Flag", "Kind", "Op", "Variant", "discover", "flags", "get_op", "seed_for"]


# Kinds the runner can judge today; a kind joins with its first real operation.
RUNNABLE_KINDS = (Kind.EXACT, Kind.BOUNDED)


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
            if op.kind is Kind.BOUNDED and (op.emulate is None or any(v.latitude for v in op.variants)):
                raise ValueError(f"operation {op.name!r}: a bounded op needs `emulate` and takes no latitude axes")
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

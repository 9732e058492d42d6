"""The catalog: every public oracle as an operation with its kind, variants and checks.

Each area declares its operations in a package `ref/<area>/catalog/` (one module per
technique) whose `__init__` gathers `OPERATIONS` (a sequence of operations, one type
per kind: ref.testing.catalog_types) and `FLAGS` (flag name -> `Flag`); `discover()`
finds those packages, so adding a technique never touches a central list. (An area
not yet moved may still declare in `ref/<area>/ops.py`.) A catalog package may also
define `FILES`, a callable returning golden files that are not vectors (relative
name -> bytes, deterministic: packed checkpoints a loader is checked against);
`artifacts()` gathers them under their area's folder.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from ref.conformance.judges import runnable_kinds
from ref.testing.catalog_types import Flag, Operation

__all__ = ["artifacts", "discover", "flags"]


FRAMEWORK = ("conformance", "testing")  # packages of ref/ that are not technique areas


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
def _load() -> tuple[dict[str, Operation], dict[str, Flag]]:
    ops: dict[str, Operation] = {}
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
            if op.kind not in runnable_kinds():  # a kind joins with its judge (ref/conformance/judges)
                raise ValueError(f"operation {op.name!r}: the runner has no judge for kind {op.kind.value!r} yet")
            ops[op.name] = op
    return ops, notes


def artifacts() -> dict[str, bytes]:
    """Every area's extra golden files (`FILES`), keyed by "<area>/<name>"."""
    out: dict[str, bytes] = {}
    for module in _area_modules():
        files = getattr(module, "FILES", None)
        if files is None:
            continue
        area = module.__name__.split(".")[1]
        for name, data in files().items():
            if not isinstance(data, bytes) or name.startswith("/") or ".." in name.split("/"):
                raise ValueError(f"{module.__name__}.FILES: {name!r} must be a relative name mapped to bytes")
            out[f"{area}/{name}"] = data
    return dict(sorted(out.items()))


def discover() -> dict[str, Operation]:
    """Every catalogued operation by dotted name, sorted."""
    return dict(sorted(_load()[0].items()))


def flags() -> dict[str, Flag]:
    """Every vector flag with its note."""
    return dict(sorted(_load()[1].items()))


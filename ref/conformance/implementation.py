"""An implementation under test: callables by catalog name, and the variants it declares.

An implementation module (or object) provides

  OPS       mapping catalog name -> callable taking the oracle's keyword arguments
            (array inputs by name, then the variant parameters) and returning NumPy
  VARIANTS  optional: op name or glob -> {axis: [values it implements]}, each value
            with its JSON type (the str of an enum axis, True/False, an int:
            {"tile_2d": [False]}, {"group": [128]}); an axis not declared is held
            to the catalog's default (or, for a latitude axis, to any of its
            values, reported as an acceptable difference)
  DTYPES    optional: op name or glob -> {input name: [dtype names it accepts]}; valid
            cases with other input dtypes are skipped (invalid vectors always run)
  PRECISION optional: op name or glob -> "bfloat16" | "float16" | "float32" | "float64",
            the precision a bounded op is computed at; by default, read from the
            dtype of its (first) output
  NAME, VERSION  optional, for the report

A callable that raises NotImplementedError for a case (a feature the kernel lacks:
sinks, soft-capping, an explicit mask) has that vector or example counted as
skipped, not failed; the report lists how many.

`python -m ref conform --impl package.module[:attribute]` loads one (so does a file
path, `--impl ./my_adapter.py[:attribute]`); a module that cannot be imported, an
OPS that is not a mapping and an OPS value that is not callable are each a
ValueError that names the problem and what was expected.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np

from ref.conformance.catalog import discover
from ref.formats.minifloat import PRECISIONS
from ref.testing.catalog_types import Operation, Variant, VariantValue

__all__ = ["Implementation", "is_file_spec", "load_implementation"]


@dataclass(frozen=True)
class Implementation:
    name: str
    ops: Mapping[str, Callable]
    variants: Mapping[str, Mapping[str, Sequence[VariantValue]]] = field(default_factory=dict)
    dtypes: Mapping[str, Mapping[str, Sequence[str]]] = field(default_factory=dict)
    version: str = "unknown"
    source: str = ""
    precision: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        catalog = discover()
        unknown = sorted(set(self.ops) - set(catalog))
        if unknown:
            close = {n: difflib.get_close_matches(n, catalog, n=1) for n in unknown}
            hints = "; ".join(f"{n!r}: did you mean {c[0]!r}?" for n, c in close.items() if c)
            raise ValueError(f"ops: {self.name} names operations the catalog does not have: {unknown}"
                             + (f" ({hints})" if hints else " (`python -m ref list --names` shows them)"))
        uncallable = sorted(name for name, fn in self.ops.items() if not callable(fn))
        if uncallable:
            name, fn = uncallable[0], self.ops[uncallable[0]]
            raise ValueError(f"ops: {self.name}'s OPS[{name!r}] is {fn!r:.60} (type {type(fn).__name__}), "
                             f"not a callable: each value must be a function taking the oracle's keyword arguments"
                             + (f" ({len(uncallable) - 1} more: {uncallable[1:4]})" if len(uncallable) > 1 else ""))
        for pattern, value in self.precision.items():
            if value not in PRECISIONS:
                raise ValueError(f"precision: {pattern!r} -> expected one of {PRECISIONS}, got {value!r}")
        for what, table in (("variants", self.variants), ("dtypes", self.dtypes), ("precision", self.precision)):
            if not isinstance(table, Mapping):
                raise ValueError(f"{what}: expected a mapping of op names or globs, got {type(table).__name__}")
            for pattern in table:
                if not any(fnmatchcase(n, pattern) for n in self.ops):
                    raise ValueError(f"{what}: {pattern!r} matches none of {self.name}'s operations")
        for what, table, inner in (("variants", self.variants, "axis -> [values]"),
                                   ("dtypes", self.dtypes, "input name -> [dtype names]")):
            for pattern, entry in table.items():
                if not isinstance(entry, Mapping):
                    raise ValueError(f"{what}: {pattern!r} -> expected a mapping {inner}, got {entry!r:.60}")
        for pattern, inputs in self.dtypes.items():
            _check_dtypes(pattern, inputs, [catalog[n] for n in self.ops if fnmatchcase(n, pattern)])

    def declared(self, op: Operation) -> dict[str, tuple[VariantValue, ...]]:
        """The variant values this implementation declares for `op` (checked: each
        one of the axis's values, with its JSON type)."""
        out: dict[str, tuple[VariantValue, ...]] = {}
        for pattern, axes in self.variants.items():
            if fnmatchcase(op.name, pattern):
                for axis, values in axes.items():
                    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                        raise ValueError(f"variants: {op.name}.{axis} takes a list of values, got {values!r}")
                    out[axis] = tuple(values)
        known = {v.name: v for v in op.variants}
        for axis, values in out.items():
            if axis not in known:
                raise ValueError(f"variants: {op.name} has no variant axis {axis!r} (axes: {sorted(known)})")
            bad = [v for v in values if not known[axis].has(v)]
            if bad or not values:
                raise ValueError(f"variants: {op.name}.{axis} takes values from {list(known[axis].values)}, "
                                 f"got {list(values)}{_type_hint(known[axis], bad)}")
        return out

    def accepted_dtypes(self, op: Operation) -> dict[str, tuple[str, ...]]:
        """Input name -> the dtype names this implementation accepts for `op`."""
        out: dict[str, tuple[str, ...]] = {}
        for pattern, inputs in self.dtypes.items():
            if fnmatchcase(op.name, pattern):
                out.update({name: tuple(str(np.dtype(d)) for d in names) for name, names in inputs.items()})
        return out

    def declared_precision(self, op: Operation) -> str | None:
        """The precision declared for `op`, or None (read it from the output)."""
        found = [value for pattern, value in self.precision.items() if fnmatchcase(op.name, pattern)]
        return found[-1] if found else None

    def supported(self, op: Operation) -> dict[str, tuple[VariantValue, ...]]:
        """Declared values per axis, the catalog default where nothing is declared."""
        declared = self.declared(op)
        return {v.name: declared.get(v.name, (v.default,)) for v in op.variants}


def _check_dtypes(pattern: str, inputs: Mapping, ops: Sequence[Operation]) -> None:
    """DTYPES[pattern]: lists of dtype names NumPy knows, for inputs the ops take."""
    variant_names = {v.name for op in ops for v in op.variants}
    taken: set[str] = set()
    for op in ops:
        try:
            taken |= set(inspect.signature(op.oracle).parameters) - variant_names
        except (TypeError, ValueError):  # no signature to read: nothing to check against
            taken = set()
            break
    for name, names in inputs.items():
        if taken and name not in taken:
            raise ValueError(f"dtypes: {pattern!r} -> input {name!r} is not an input of its ops "
                             f"(inputs: {sorted(taken)})")
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            raise ValueError(f"dtypes: {pattern!r} -> {name!r} takes a list of dtype names, got {names!r}")
        for d in names:
            import ml_dtypes  # here, not at the top: its import alone takes about 1 s (0.7)

            try:
                np.dtype(getattr(ml_dtypes, d) if isinstance(d, str) and hasattr(ml_dtypes, d) else d)
            except TypeError:
                raise ValueError(f"dtypes: {pattern!r} -> {name!r}: {d!r} is not a dtype name NumPy or "
                                 f"ml_dtypes knows (e.g. 'float32', 'bfloat16')") from None


def _type_hint(axis: Variant, bad: Sequence) -> str:
    """Why a value that reads like one of the axis's values is not it: its JSON type."""
    for value in bad:
        for right in axis.values:
            if type(value) is not type(right) and axis.key(value) == axis.key(right):
                return (f" ({value!r} is a {type(value).__name__}; the values of {axis.name} are "
                        f"{type(right).__name__}s: write {right!r})")
    return ""


def is_file_spec(spec: str) -> bool:
    """Whether an --impl value names a file (`./x.py`, `x.py`, `dir/x.py:ATTR`) rather
    than a module."""
    target = spec.partition(":")[0]
    return target.endswith(".py") or "/" in target or "\\" in target


def load_implementation(spec: str) -> Implementation:
    """Load 'package.module', 'package.module:attribute' or a file 'path/x.py[:attribute]'
    as an Implementation."""
    module_name, _, attr = spec.partition(":")
    module = _import_file(module_name) if is_file_spec(spec) else _import(module_name)
    obj = module
    if attr:
        if not hasattr(module, attr):
            raise ValueError(f"--impl: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(module, attr)
    if isinstance(obj, Implementation):
        return obj
    if isinstance(obj, Mapping):
        return Implementation(name=spec, ops=obj, source=spec)
    ops = getattr(obj, "OPS", None)
    if not isinstance(ops, Mapping):
        got = "none" if ops is None else f"a {type(ops).__name__}"
        raise ValueError(f"--impl: {spec} has no OPS mapping of catalog names to callables (OPS: {got})")
    return Implementation(
        name=getattr(obj, "NAME", spec),
        ops=ops,
        variants=getattr(obj, "VARIANTS", {}),
        dtypes=getattr(obj, "DTYPES", {}),
        precision=getattr(obj, "PRECISION", {}),
        version=str(getattr(obj, "VERSION", "unknown")),
        source=spec,
    )


def _import(module_name: str):
    """The module, or a ValueError saying where it was looked for and how to fix that."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            searched = [p or "." for p in sys.path if p == "" or Path(p).is_dir()]
            raise ValueError(
                f"--impl: no module named {module_name!r} on the module search path {searched[:6]}"
                f"{' ...' if len(searched) > 6 else ''}: run from the directory holding "
                f"{module_name.replace('.', '/')}.py, or put that directory on PYTHONPATH "
                f"(a file path works too: --impl path/to/{module_name.rpartition('.')[2]}.py)") from err
        raise ValueError(f"--impl: importing {module_name!r} failed: {err} (a module it imports is missing; "
                         f"`python -c 'import {module_name}'` shows the traceback)") from err
    except Exception as err:
        raise ValueError(f"--impl: importing {module_name!r} raised {type(err).__name__}: {err} "
                         f"(`python -c 'import {module_name}'` shows the traceback)") from err


def _import_file(path_text: str):
    """Load a Python file as the module named by its stem (registered in sys.modules),
    with its folder first on sys.path, as `python FILE` has it, so that it imports
    the modules beside it."""
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"--impl: no such file {path_text!r} (expected a Python file, e.g. ./my_adapter.py, "
                         f"or a module name, e.g. my_adapter)")
    if path.suffix != ".py":
        raise ValueError(f"--impl: {path_text!r} is not a .py file; give a Python file or a module name")
    name = path.stem
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    found = importlib.util.spec_from_file_location(name, path.resolve())
    module = importlib.util.module_from_spec(found)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        found.loader.exec_module(module)
    except Exception as err:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        raise ValueError(f"--impl: running {path_text!r} raised {type(err).__name__}: {err} "
                         f"(`python {path_text}` shows the traceback)") from err
    return module

"""One judge per kind of operation, behind one protocol.

The judge of kind K is the module `ref.conformance.judges.<K.value>` (exact.py,
bounded.py, ...), and it exposes

    run_op(op, fn, impl, settings, report, watch) -> None

which judges the candidate callable `fn` (implementation `impl`) on operation `op`
and fills `report` (an OpReport: counts, failures, xfails, notes, its verdict).
`settings` is a `Settings` (what to run: examples, skips, xfails, the golden folder,
large cases); `watch(state, where, flags)`, when given, is told "call" before each
call of the candidate and "back" after it. `run_op` raises only what the runner must
see (KeyboardInterrupt, a defect of the suite); whatever the candidate does is a
named failure in the report.

The runner finds the module by the op's kind, so a new kind's judge is one new
file; a kind without one cannot be catalogued (`runnable_kinds`). Shared pieces:
`candidate` (calling the candidate, `ArrayJudge`), `arrays` (the checks of
array-in/array-out ops), ref.conformance.hygiene (memory layouts, input mutation,
shared output buffers).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from ref.conformance.report import Entry
from ref.testing.catalog_types import Kind

__all__ = ["Settings", "judge_module", "runnable_kinds"]


@dataclass(frozen=True)
class Settings:
    """What to run for each op (picklable: an isolated op's child gets it)."""

    examples: int = 50
    shrink: bool = True
    skips: tuple[Entry, ...] = ()
    xfails: tuple[Entry, ...] = ()
    golden: Path | None = None
    large: bool = False


def _module_name(kind: Kind) -> str:
    return f"{__name__}.{kind.value}"


@lru_cache(maxsize=1)
def runnable_kinds() -> tuple[Kind, ...]:
    """The kinds that have a judge module."""
    return tuple(k for k in Kind if importlib.util.find_spec(_module_name(k)) is not None)


def judge_module(kind: Kind) -> ModuleType:
    """The module whose `run_op` judges operations of `kind`."""
    if kind not in runnable_kinds():
        raise ValueError(f"kind {kind.value!r}: no judge (ref/conformance/judges/{kind.value}.py) yet")
    return importlib.import_module(_module_name(kind))

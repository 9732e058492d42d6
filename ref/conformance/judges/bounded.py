"""The judge of bounded ops: the candidate's error against the float64 oracle within
the op's bounds times the error of the oracle evaluated at the candidate's precision
(its `emulate`), that precision declared by the implementation (PRECISION) or read
from the dtype of its (first) output. The emulation is computed once per case and
precision; the report's worst is the largest error as a fraction of its bound."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ref.conformance.implementation import Implementation
from ref.conformance.judges import Settings
from ref.conformance.judges.arrays import run_checks
from ref.conformance.judges.candidate import ArrayJudge, Seen, Watch
from ref.conformance.report import OpReport, empty_histogram
from ref.testing.bounded import FLOOR_UNITS, precision_of, ratio
from ref.testing.catalog_types import Operation
from ref.testing.compare import Comparison
from ref.testing.vector_files import Case, as_output

__all__ = ["BoundedJudge", "run_op"]


class BoundedJudge(ArrayJudge):
    def __init__(self, op, fn, impl, report, watch=None):
        super().__init__(op, fn, impl, report, watch)
        self.precision = impl.declared_precision(op)
        self._emulated: tuple = ()  # (the inputs object, params and precision, the emulation)
        self.precisions: set[str] = set()  # the precisions outputs were judged at
        report.ratio_histogram = report.ratio_histogram or empty_histogram()

    def precision_at(self, case: Case, actual) -> str:
        first = actual[0] if isinstance(actual, tuple) else actual
        try:
            return self.precision or precision_of(first)
        except ValueError:
            return ""

    def judge_output(self, case: Case, actual, expected, alternatives):
        cmp = self._compare(case, actual, expected, self.precision_at(case, actual))
        report = self.report
        report.unit, report.tolerance = "of tolerance", 1.0
        report.worst = max(report.worst, ratio(cmp) if cmp.ok else max(ratio(cmp), 1.0))
        if cmp.problem is None:
            report.count_ratio(ratio(cmp) if cmp.ok or cmp.tolerance > 0 else np.inf)
        return cmp, None

    def _compare(self, case: Case, actual, expected, precision: str) -> Comparison:
        if not precision:
            first = actual[0] if isinstance(actual, tuple) else actual
            try:
                precision_of(first)
            except ValueError as exc:
                return Comparison(False, 0, 0, np.inf, "abs error", problem=str(exc))
        self.precisions.add(precision)
        self.report.precision = ",".join(p for p in FLOOR_UNITS if p in self.precisions)
        key = (repr(sorted(case.params.items())), precision)
        held = self._emulated
        if not held or held[0] is not case.inputs or held[1] != key:  # the inputs object is held: no id reuse
            emulated = as_output(self.op.emulate(precision, **case.inputs, **case.params))
            held = self._emulated = (case.inputs, key, emulated)
        return self.op.compare(expected, actual, held[2], precision)

    def finish(self) -> None:
        """A precision hint stands when more than half of the op's compared failures with
        finite outputs fit one coarser precision's bound (the finest such one is named):
        one outlier case (a float16 bound made loose by underflow, say) is no evidence
        of the kernel's precision, and a NaN where a number belongs, a second bug, does
        not hide the evidence of the others."""
        compared = [f for f in self.report.failures if f.expected is not None and _finite(f.got)]
        chosen = next((p for p in FLOOR_UNITS if 2 * sum(p in f.fits for f in compared) > len(compared)), None)
        for f in self.report.failures:
            f.hint = self.hint_for({chosen: f.fits[chosen]}) if chosen and chosen in f.fits else ""

    def fits(self, case: Case, seen: Seen) -> dict[str, float]:
        judged = seen.precision
        if judged not in FLOOR_UNITS or seen.cmp.problem:
            return {}
        found = {}
        for other in (p for p in FLOOR_UNITS if FLOOR_UNITS[p] > FLOOR_UNITS[judged]):
            try:
                emulated = as_output(self.op.emulate(other, **case.inputs, **case.params))
                cmp = self.op.compare(seen.expected, seen.actual, emulated, other)
            except Exception:  # an emulation that cannot run at `other`: no evidence from it
                continue
            if cmp.ok:
                found[other] = float(ratio(cmp))
        return found

    def hint_for(self, fits: dict[str, float]) -> str:
        """The finest precision in `fits`, as a remedy."""
        for other in (p for p in FLOOR_UNITS if p in fits):
            return (f"the error fits the {other} bound ({fits[other]:.2g} of it): if the kernel computes in "
                    f"{other}, declare PRECISION = {{\"{self.op.name}\": \"{other}\"}}")
        return ""

def _finite(text: str | None) -> bool:
    """Whether a failure's shown output value ("1.5", "nan (a float32 evaluation ...)") is finite."""
    try:
        return math.isfinite(float(str(text).split()[0]))
    except (ValueError, IndexError):
        return False


def run_op(op: Operation, fn: Callable, impl: Implementation, settings: Settings, report: OpReport,
           watch: Watch | None = None) -> None:
    """Judge `fn` on `op` into `report` (the protocol of ref.conformance.judges)."""
    run_checks(BoundedJudge(op, fn, impl, report, watch), settings)

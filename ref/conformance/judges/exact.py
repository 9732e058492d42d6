"""The judge of exact ops: outputs compared bit for bit by the op's comparator, and
the latitude the spec leaves open.

An implementation that does not declare a latitude axis (VARIANTS) may match any of
its values, as an acceptable difference, but one and the same value throughout: the
values consistent with every case that exercises the axis are narrowed case by case,
and none left at the end is a failure ("latitude", undeclared variant axis).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ref.conformance.implementation import Implementation
from ref.conformance.judges import Settings
from ref.conformance.judges.arrays import run_checks
from ref.conformance.judges.candidate import ArrayJudge, Watch
from ref.conformance.report import Failure, OpReport
from ref.formats.minifloat import round_to
from ref.testing.catalog_types import Operation, Variant
from ref.testing.compare import Comparison
from ref.testing.vector_files import Case, as_output, same_output

__all__ = ["ExactJudge", "run_op"]


class ExactJudge(ArrayJudge):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.latitude_choices: dict[str, list] = {}  # open axis -> the values every case allowed so far
        self.narrowings: list = []  # (failure, (input, dtype, precisions explaining its output) or None)
        self.other_variants: list = []  # (failure, the "axis=value" keys under which the oracle gives its output)

    def judge_output(self, case: Case, actual, expected, alternatives):
        """The op's comparison; an undeclared latitude axis may match any of its values."""
        cmp = self.op.compare(expected, actual)
        self._record(cmp)
        self._note_latitude(case, actual, expected, alternatives)
        if cmp.ok:
            return cmp, None
        for axis in self.open_axes:
            for value in axis.values:
                if _same(value, case.params.get(axis.name)):
                    continue
                alt = self._alternative(case, axis, value, alternatives)
                if alt is not None and self.op.compare(alt, actual).ok:
                    accepted = Comparison(True, cmp.compared, 0, 0.0, cmp.unit, cmp.tolerance)
                    return accepted, f"matches variant {axis.key(value)}"
        return cmp, None

    def _alternative(self, case: Case, axis: Variant, value: Any, alternatives):
        """The output under another value of a latitude axis: a vector's stored one
        (None if it has none), else the oracle's."""
        if alternatives is not None:
            return alternatives.get(axis.key(value))
        return as_output(self.op.oracle(**case.inputs, **{**case.params, axis.name: value}))

    def _note_latitude(self, case: Case, actual, expected, alternatives) -> None:
        """Narrow, per undeclared latitude axis, the values consistent with every case
        that exercises it: an implementation may pick any one value, not a different
        one per input (NaN to +max for float32 but to +0 for float16, say)."""
        for axis in self.open_axes:
            given = case.params.get(axis.name)
            outs = [(given, expected)]
            for value in axis.values:
                if not _same(value, given):
                    alt = self._alternative(case, axis, value, alternatives)
                    if alt is not None:
                        outs.append((value, alt))
            if all(same_output(o, expected) for _, o in outs):
                continue  # this input does not exercise the latitude
            matching = [v for v, o in outs if self.op.compare(o, actual).ok]
            before = self.latitude_choices.get(axis.name)
            self.latitude_choices[axis.name] = matching if before is None else [
                v for v in before if any(_same(v, m) for m in matching)]

    def failure(self, where, comment, flags, case: Case, detail: str, *, seen=None, **kwargs) -> Failure:
        """The structured failure; its output is also tried against the oracle on float
        inputs first narrowed to a coarser precision (see `finish`)."""
        base = super().failure(where, comment, flags, case, detail, seen=seen, **kwargs)
        small = sum(np.size(x) for x in case.inputs.values()) <= DIAGNOSED_SIZE
        if seen is not None and not seen.cmp.ok:
            self.narrowings.append((base, _narrowings(self.op, case, seen.actual) if small else None))
            self.other_variants.append((base, _other_variants(self.op, case, seen.actual) if small else []))
        return base

    def _diagnose_variant(self) -> None:
        """A kernel that implements another variant than the one judged (ties away from
        zero, the high nibble first, a ceil scale rule): when one value of an axis
        explains more than half of the op's failures, each failure it explains says so."""
        keys = Counter(k for _, found in self.other_variants for k in found)
        if not keys:
            return
        key, most = keys.most_common(1)[0]
        if 2 * most <= len(self.other_variants):
            return
        axis, _, value = key.partition("=")
        for failure, found in self.other_variants:
            if key in found and not failure.hint:
                failure.hint = (f"the output is the oracle's under {key}: the kernel implements that variant; if "
                                f"intended, declare VARIANTS = {{\"{self.op.name}\": {{\"{axis}\": [...]}}}} "
                                f"with the values it implements, else fix the {axis}")

    def _diagnose_narrowing(self) -> None:
        """A kernel converting float32 -> float16 -> FP8 rounds twice. The precisions that
        explain the most failures of the op, if they explain at least three and a quarter
        of them (a kernel may have a second bug), are named in each failure they explain;
        one failure explained that way among many others is a coincidence, and says nothing."""
        explained = {p: [(f, n) for f, n in self.narrowings if n and p in n[2]] for p in NARROWER["float64"]}
        most = max(len(e) for e in explained.values())
        if most < 3 or 4 * most < len(self.narrowings):
            return
        best = [p for p, e in explained.items() if len(e) == most]
        via = " or ".join(best)
        for failure, (name, dtype, _) in explained[best[0]]:
            if not failure.hint:
                failure.hint = (f"the output is the oracle's on {name} first rounded to {via}: the kernel "
                                f"narrows {name} ({dtype}) to {via} before converting, rounding twice")

    def _record(self, cmp: Comparison) -> None:
        report = self.report
        report.unit = report.unit or cmp.unit
        report.tolerance = cmp.tolerance
        if not cmp.ok:
            report.worst = max(report.worst, cmp.worst)

    def finish(self) -> None:
        self._diagnose_variant()
        self._diagnose_narrowing()
        for axis, values in self.latitude_choices.items():
            if not values:
                self.report.failures.append(Failure(
                    "latitude", f"undeclared variant axis {axis!r}", (), {},
                    f"the outputs match different values of {axis!r} on different inputs; the spec leaves the "
                    f"choice open, but one implementation makes one choice (declare it in VARIANTS)"))


DIAGNOSED_SIZE = 1 << 17  # input elements: a larger case (the large sweeps) is not re-run to diagnose it
NARROWER = {"float64": ("float32", "float16", "bfloat16"), "float32": ("float16", "bfloat16"),
            "float16": ("bfloat16",)}


def _other_variants(op: Operation, case: Case, actual) -> list[str]:
    """The "axis=value" keys (one axis changed at a time) under which the oracle gives
    `actual` on this case."""
    found = []
    for axis in op.variants:
        for value in axis.values:
            if _same(value, case.params.get(axis.name, axis.default)):
                continue
            try:
                with np.errstate(all="ignore"):
                    out = as_output(op.oracle(**case.inputs, **{**case.params, axis.name: value}))
                if op.compare(out, actual).ok:
                    found.append(axis.key(value))
            except Exception:  # the oracle refusing that value on this input: no evidence
                continue
    return found


def _narrowings(op: Operation, case: Case, actual) -> tuple[str, str, list[str]] | None:
    """(input name, its dtype, the coarser precisions p such that the output equals the
    oracle's on that float input first rounded to p), or None when none does."""
    for name, x in case.inputs.items():
        x = np.asarray(x)
        found = []
        for precision in NARROWER.get(x.dtype.newbyteorder("=").name, ()):
            with np.errstate(all="ignore"):
                narrowed = round_to(x, precision).astype(x.dtype)
            if same_output(narrowed, x):
                continue  # this input does not tell the two apart
            try:
                if op.compare(as_output(op.oracle(**{**case.inputs, name: narrowed}, **case.params)), actual).ok:
                    found.append(precision)
            except Exception:  # the oracle refusing the narrowed input: no diagnosis from it
                continue
        if found:
            return name, str(x.dtype), found
    return None


def _same(a: Any, b: Any) -> bool:
    """The same variant value, with its JSON type (True is not 1)."""
    return type(a) is type(b) and a == b


def run_op(op: Operation, fn: Callable, impl: Implementation, settings: Settings, report: OpReport,
           watch: Watch | None = None) -> None:
    """Judge `fn` on `op` into `report` (the protocol of ref.conformance.judges)."""
    run_checks(ExactJudge(op, fn, impl, report, watch), settings)

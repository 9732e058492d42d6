"""One op's judge: calls the candidate on a case (inputs in a chosen memory layout),
turns whatever comes back into the op's output or a named problem, and compares it
with the oracle. Nothing the candidate or a comparator raises escapes as anything but
an Exception the runner reports against the case (KeyboardInterrupt excepted)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from ref.conformance.catalog import Kind, Op
from ref.conformance.implementation import Implementation
from ref.conformance.report import Entry, OpReport
from ref.testing.bounded import precision_of, ratio
from ref.testing.compare import Comparison
from ref.testing.golden import Case, as_output, same_output

__all__ = ["BadOutput", "CandidateExit", "InputModified", "Judge", "by_flag", "describe_problem", "short"]

# watch(state, where, flags): "call" before each call of the candidate, "back" after it.
Watch = Callable[[str, str, tuple], None]


class InputModified(Exception):
    """An implementation wrote into an array it was given."""


class BadOutput(Exception):
    """An implementation returned something that is not the op's output (None, a
    string, a dict, a generator, an object array, a tuple of the wrong length...)."""


class CandidateExit(Exception):
    """An implementation raised SystemExit (or another BaseException that is not a
    KeyboardInterrupt): a failure of the case, not the end of the run."""


def short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 400 else text[:400] + "..."


def describe_problem(exc: Exception) -> str:
    """A failure's detail for an exception out of `Judge.call`."""
    if isinstance(exc, (InputModified, BadOutput, CandidateExit)):
        return str(exc)
    return f"raised {short(exc)}"


def by_flag(entries, op: str, flags) -> list[Entry]:
    """The entries that name one of `flags` as their part (not '*' or a check's name)."""
    return [e for e in entries if e.part in flags and fnmatchcase(op, e.op)]


def _kind(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def _array(value: Any, name: str) -> np.ndarray:
    """`value` as a numeric array (bool, int, float, complex, ml_dtypes' floats)."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # a ragged list, an object refusing conversion
        raise BadOutput(f"{name}: returned {_kind(value)} that is not an array ({short(exc)})") from None
    ml_float = arr.dtype.kind == "V" and arr.dtype.type is not np.void  # bfloat16, float8_*
    if arr.dtype.kind not in "biufc" and not ml_float:
        raise BadOutput(f"{name}: expected a numeric array, got {_kind(value)} (as an array: dtype {arr.dtype})")
    return arr


class Judge:
    """Calls the candidate and compares it with the oracle for one op."""

    def __init__(self, op: Op, fn: Callable, impl: Implementation, report: OpReport, watch: Watch | None = None):
        self.op, self.fn, self.report, self.watch = op, fn, report, watch
        self.supported = impl.supported(op)
        self.dtypes = impl.accepted_dtypes(op)
        declared = impl.declared(op)
        self.open_axes = [v for v in op.variants if v.latitude and v.name not in declared]
        self.latitude_choices: dict[str, set] = {}
        self.precision = impl.declared_precision(op)
        self.at: tuple[str, tuple[str, ...]] = ("", ())  # the check being run, for `watch`
        self.skipped_by_flag = 0
        self._emulated: tuple = ()

    def flags_of(self, case: Case) -> tuple[str, ...]:
        """The flags a drawn or swept case exercises (the op's case_flags)."""
        return tuple(self.op.case_flags(case)) if self.op.case_flags else ()

    def runs_oracle(self, inputs: Mapping[str, Any], result: str, params: Mapping[str, str]) -> bool:
        """Whether the oracle takes a vector's inputs with these params (stochastic
        rounding, for one, needs rbits)."""
        if result == "invalid":
            return True
        try:
            self.op.oracle(**inputs, **params)
        except (ValueError, TypeError):
            return False
        return True

    def accepts(self, case: Case) -> bool:
        """Whether every input has a dtype the implementation declares it takes."""
        def native(arr) -> str:  # a big-endian float32 is still a float32
            return str(np.asarray(arr).dtype.newbyteorder("="))

        return all(native(arr) in self.dtypes.get(name, (native(arr),)) for name, arr in case.inputs.items())

    def invoke(self, case: Case, layout: str = "C") -> tuple[Any, dict[str, np.ndarray]]:
        """(what the candidate returned, the inputs it was given). SystemExit and its
        kin become CandidateExit; KeyboardInterrupt stops the run."""
        inputs = {k: lay_out(np.asarray(v), layout) for k, v in case.inputs.items()}
        if self.watch:
            self.watch("call", *self.at)
        try:
            raw = self.fn(**inputs, **case.params)
        except BaseException as exc:
            if isinstance(exc, (Exception, KeyboardInterrupt)):
                raise
            raise CandidateExit(f"the implementation raised {short(exc)} (it must raise an Exception, "
                                f"not end the process)") from None
        finally:
            if self.watch:
                self.watch("back", *self.at)
        return raw, inputs

    def call(self, case: Case, layout: str = "C"):
        """The candidate's output on copies of the inputs laid out in memory as `layout`
        says; an implementation that writes into its inputs fails."""
        raw, inputs = self.invoke(case, layout)
        out = self.output(raw)
        for name, arr in inputs.items():
            original = np.asarray(case.inputs[name])
            if arr.shape != original.shape or arr.tobytes() != np.ascontiguousarray(original).tobytes():
                raise InputModified(f"the implementation modified its input {name!r} in place")
        return out

    def output(self, raw: Any):
        """One numeric array, or a tuple of them for an op with named outputs."""
        names = self.op.outputs
        if names:
            if not isinstance(raw, (tuple, list)) or len(raw) != len(names):
                shown = f"{len(raw)} values" if isinstance(raw, (tuple, list)) else _kind(raw)
                raise BadOutput(f"expected a tuple of outputs {names}, got {shown}")
            return tuple(_array(v, name) for v, name in zip(raw, names))
        if isinstance(raw, tuple):
            raise BadOutput(f"expected one array, got a tuple of {len(raw)}")
        return _array(raw, "output")

    def expected(self, case: Case):
        return as_output(self.op.oracle(**case.inputs, **case.params))

    def compare(self, case: Case, actual, expected, alternatives: Mapping[str, np.ndarray] | None = None):
        """(comparison, acceptable-note); a comparator or emulation that raises gives a
        failed comparison naming the exception."""
        self.report.compared += 1
        try:
            return self._compare(case, actual, expected, alternatives)
        except Exception as exc:
            return Comparison(False, 0, 0, np.inf, self.report.unit,
                              problem=f"checking this output raised {short(exc)}"), None

    def _compare(self, case: Case, actual, expected, alternatives):
        """An undeclared latitude axis may match any of its values."""
        if self.op.kind is Kind.BOUNDED:
            cmp = self._compare_bounded(case, actual, expected)
            self._record(cmp)
            return cmp, None
        cmp = self.op.compare(expected, actual)
        self._record(cmp)
        self._note_latitude(case, actual, expected, alternatives)
        if cmp.ok:
            return cmp, None
        for axis in self.open_axes:
            for value in axis.values:
                if value == case.params.get(axis.name):
                    continue
                key = f"{axis.name}={value}"
                if alternatives is not None:
                    alt = alternatives.get(key)
                else:
                    alt = as_output(self.op.oracle(**case.inputs, **{**case.params, axis.name: value}))
                if alt is not None and self.op.compare(alt, actual).ok:
                    accepted = Comparison(True, cmp.compared, 0, 0.0, cmp.unit, cmp.tolerance)
                    return accepted, f"matches variant {key}"
        return cmp, None

    def _compare_bounded(self, case: Case, actual, expected) -> Comparison:
        """The bounded rule at the candidate's precision (declared, else its output's
        dtype), against the oracle evaluated at that precision (cached per case)."""
        first = actual[0] if isinstance(actual, tuple) else actual
        try:
            precision = self.precision or precision_of(first)
        except ValueError as exc:
            return Comparison(False, 0, 0, np.inf, "abs error", problem=str(exc))
        key = (repr(sorted(case.params.items())), precision)
        held = self._emulated
        if not held or held[0] is not case.inputs or held[1] != key:  # the inputs object is held: no id reuse
            held = self._emulated = (case.inputs, key, as_output(self.op.emulate(precision, **case.inputs,
                                                                                 **case.params)))
        return self.op.compare(expected, actual, held[2], precision)

    def _note_latitude(self, case: Case, actual, expected, alternatives) -> None:
        """Narrow, per undeclared latitude axis, the values consistent with every case
        that exercises it: an implementation may pick any one value, not a different
        one per input (NaN to +max for float32 but to +0 for float16, say)."""
        for axis in self.open_axes:
            outs = {case.params.get(axis.name): expected}
            for value in axis.values:
                if value in outs:
                    continue
                if alternatives is not None:
                    alt = alternatives.get(f"{axis.name}={value}")
                else:
                    alt = as_output(self.op.oracle(**case.inputs, **{**case.params, axis.name: value}))
                if alt is not None:
                    outs[value] = alt
            if all(same_output(o, expected) for o in outs.values()):
                continue  # this input does not exercise the latitude
            matching = {v for v, o in outs.items() if self.op.compare(o, actual).ok}
            before = self.latitude_choices.get(axis.name)
            self.latitude_choices[axis.name] = matching if before is None else before & matching

    def _record(self, cmp: Comparison):
        if self.op.kind is Kind.BOUNDED:  # the worst error as a fraction of its bound
            self.report.unit, self.report.tolerance = "of tolerance", 1.0
            self.report.worst = max(self.report.worst, ratio(cmp) if cmp.ok else max(ratio(cmp), 1.0))
            return
        self.report.unit = self.report.unit or cmp.unit
        self.report.tolerance = cmp.tolerance
        if not cmp.ok:
            self.report.worst = max(self.report.worst, cmp.worst)


LAYOUTS = ("C", "strided", "negative", "F", "row_pitch")


def lay_out(a: np.ndarray, layout: str) -> np.ndarray:
    """A copy of `a` with the same values in another memory layout: C order; a view
    whose last axis has stride 2; one whose last axis runs backwards; Fortran order;
    rows with a pitch wider than the row. Every layout but C is read-only, so a
    kernel that scribbles on its inputs fails there even if it restores them."""
    if layout == "C" or a.ndim == 0:
        return np.array(a, copy=True, order="C")
    if layout == "strided":
        buf = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), dtype=a.dtype)
        buf[..., ::2] = a
        view = buf[..., ::2]
    elif layout == "negative":
        view = np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    elif layout == "F":
        view = np.asfortranarray(a.copy())
    else:  # row_pitch
        buf = np.zeros((*a.shape[:-1], a.shape[-1] + 3), dtype=a.dtype)
        buf[..., : a.shape[-1]] = a
        view = buf[..., : a.shape[-1]]
    view.flags.writeable = False
    return view


def layouts(case: Case) -> tuple[str, ...]:
    """The layouts worth trying for a case: C always; others where they differ."""
    ndim = max((np.ndim(a) for a in case.inputs.values()), default=0)
    return ("C",) + (("strided", "negative") if ndim >= 1 else ()) + (("F", "row_pitch") if ndim >= 2 else ())

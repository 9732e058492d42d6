"""Calling the candidate: whatever the op's kind, a call that ends the process is a
failure of the case (`CandidateExit`), and `watch` hears of each call before and
after it (the isolation child tells its parent where it is that way). For array ops,
`ArrayJudge` calls the candidate on a case (inputs in a chosen memory layout), turns
what comes back into the op's output or a named problem (`BadOutput`) and compares
it with the oracle; a kind's module subclasses it with its comparison."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ref.conformance.hygiene import InputModified, check_unmodified, lay_out
from ref.conformance.implementation import Implementation
from ref.conformance.judges.evidence import accepted_inputs, block_of, element_case, input_texts
from ref.conformance.report import Failure, OpReport
from ref.testing.catalog_types import Operation
from ref.testing.compare import Comparison
from ref.testing.vector_files import Case, as_output

__all__ = ["ArrayJudge", "BadOutput", "CandidateExit", "Seen", "Watch", "call_candidate", "describe_problem",
           "numeric_output", "short"]

# watch(state, where, flags): "call" before each call of the candidate, "back" after it.
Watch = Callable[[str, str, tuple], None]


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
    """A failure's detail for an exception out of a judged call."""
    if isinstance(exc, (InputModified, BadOutput, CandidateExit)):
        return str(exc)
    return f"raised {short(exc)}"


def call_candidate(fn: Callable[..., Any], kwargs: dict[str, Any], *, watch: Watch | None = None,
                   at: tuple[str, tuple[str, ...]] = ("", ())) -> Any:
    """fn(**kwargs). SystemExit and its kin become CandidateExit; KeyboardInterrupt
    stops the run; `watch` is told of the call at `at` (the check, its flags). Warnings
    the call raises are not shown."""
    if watch:
        watch("call", *at)
    try:
        with warnings.catch_warnings():  # a kernel's RuntimeWarnings (an overflowing cast) are noise
            warnings.simplefilter("ignore")  # in the run's output: its outputs are what is judged
            return fn(**kwargs)
    except BaseException as exc:
        if isinstance(exc, (Exception, KeyboardInterrupt)):
            raise
        raise CandidateExit(f"the implementation raised {short(exc)} (it must raise an Exception, "
                            f"not end the process)") from None
    finally:
        if watch:
            watch("back", *at)


def _what(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def _numeric(value: Any, name: str) -> np.ndarray:
    """`value` as a numeric array (bool, int, float, complex, ml_dtypes' floats)."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # a ragged list, an object refusing conversion
        raise BadOutput(f"{name}: returned {_what(value)} that is not an array ({short(exc)})") from None
    ml_float = arr.dtype.kind == "V" and arr.dtype.type is not np.void  # bfloat16, float8_*
    if arr.dtype.kind not in "biufc" and not ml_float:
        raise BadOutput(f"{name}: expected a numeric array, got {_what(value)} (as an array: dtype {arr.dtype})")
    return arr


def numeric_output(raw: Any, names: Sequence[str] = ()):
    """One numeric array, or a tuple of them for an op with named outputs."""
    if names:
        if not isinstance(raw, (tuple, list)) or len(raw) != len(names):
            shown = f"{len(raw)} values" if isinstance(raw, (tuple, list)) else _what(raw)
            raise BadOutput(f"expected a tuple of outputs {tuple(names)}, got {shown}")
        return tuple(_numeric(v, name) for v, name in zip(raw, names))
    if isinstance(raw, tuple):
        raise BadOutput(f"expected one array, got a tuple of {len(raw)}")
    return _numeric(raw, "output")


@dataclass(frozen=True)
class Seen:
    """The last comparison of a judge and what it compared: the evidence a failure is
    built from (kept, not rendered, until the failure is recorded)."""

    cmp: Comparison
    expected: Any
    actual: Any
    precision: str = ""


class ArrayJudge:
    """Calls the candidate and compares it with the oracle, for one op."""

    def __init__(self, op: Operation, fn: Callable, impl: Implementation, report: OpReport,
                 watch: Watch | None = None):
        self.op, self.fn, self.report, self.watch = op, fn, report, watch
        self.supported = impl.supported(op)
        self.dtypes = impl.accepted_dtypes(op)
        declared = impl.declared(op)
        # latitude axes the implementation leaves open: it may match any of their values
        self.open_axes = [v for v in op.variants if v.latitude and v.name not in declared]
        self.at: tuple[str, tuple[str, ...]] = ("", ())  # the check being run, for `watch`
        self.skipped_by_flag = 0
        self.skip_reasons: Counter[str] = Counter()  # why vectors were skipped (a variant value, a dtype, skips)
        self.seen: Seen | None = None  # the last comparison (None after a call that raised)
        if report.classes is None:
            report.classes = {}

    def flags_of(self, case: Case) -> tuple[str, ...]:
        """The flags a drawn or swept case exercises (the op's case_flags)."""
        return tuple(self.op.case_flags(case)) if self.op.case_flags else ()

    def accepts(self, case: Case) -> bool:
        """Whether every input has a dtype the implementation declares it takes."""
        def native(arr) -> str:  # a big-endian float32 is still a float32
            return str(np.asarray(arr).dtype.newbyteorder("="))

        return all(native(arr) in self.dtypes.get(name, (native(arr),)) for name, arr in case.inputs.items())

    def invoke(self, case: Case, layout: str = "C") -> tuple[Any, dict[str, np.ndarray]]:
        """(what the candidate returned, the inputs it was given, laid out as `layout` says)."""
        inputs = {k: lay_out(np.asarray(v), layout) for k, v in case.inputs.items()}
        raw = call_candidate(self.fn, {**inputs, **case.params}, watch=self.watch, at=self.at)
        return raw, inputs

    def call(self, case: Case, layout: str = "C"):
        """The candidate's output on copies of the inputs laid out in memory as `layout`
        says; an implementation that writes into its inputs fails."""
        self.seen = None
        raw, inputs = self.invoke(case, layout)
        out = numeric_output(raw, self.op.outputs)
        check_unmodified(inputs, case.inputs)
        return out

    def expected(self, case: Case):
        return as_output(self.op.oracle(**case.inputs, **case.params))

    def compare(self, case: Case, actual, expected, alternatives: Mapping[str, Any] | None = None):
        """(comparison, acceptable-note); a comparator or emulation that raises gives a
        failed comparison naming the exception."""
        self.report.compared += 1
        try:
            cmp, note = self.judge_output(case, actual, expected, alternatives)
        except Exception as exc:
            cmp, note = Comparison(False, 0, 0, np.inf, self.report.unit,
                                   problem=f"checking this output raised {short(exc)}"), None
        self.seen = Seen(cmp, expected, actual, self.precision_at(case, actual))
        for flag in self.at[1] or ("unflagged",):
            counts = self.report.classes.setdefault(flag, {"cases": 0, "failed": 0})
            counts["cases"] += 1
            counts["failed"] += not cmp.ok
        return cmp, note

    def precision_at(self, case: Case, actual) -> str:
        """The precision an output was judged at ("" for an exact op)."""
        return ""

    def fits(self, case: Case, seen: Seen) -> dict[str, float]:
        """Other precisions whose bound a failed output fits, with its error as a
        fraction of each (the bounded judge; none for an exact op)."""
        return {}

    def hint_for(self, fits: dict[str, float]) -> str:
        """A remedy that `fits` suggests ("" when none)."""
        return ""

    def failure(self, where: str, comment: str, flags: Sequence[str], case: Case, detail: str, *,
                seen: Seen | None = None, vector: int | None = None, classify: bool | str = False,
                hint: bool = True) -> Failure:
        """A structured failure of `case`: the first mismatching index, the input
        element(s) behind it, expected and got with their bits, the precision and
        (with `hint`) a remedy, from `seen` (the comparison that failed; None: the call raised or
        returned something unusable, and the failure shows the inputs). `classify`
        takes the flags of the failing element(s) (the op's case_flags) when it has any;
        "add" keeps `flags` (a vector's, which entries match) and adds the element's own."""
        base = Failure(where, comment, tuple(flags), dict(case.params), detail, vector=vector)
        if seen is None or seen.cmp.ok:
            base.inputs = accepted_inputs(case.inputs)
            return base
        cmp, first = seen.cmp, seen.cmp.first
        base.precision = seen.precision
        if hint:
            base.fits = self.fits(case, seen)
            base.hint = self.hint_for(base.fits)
        if first is None:
            base.inputs = accepted_inputs(case.inputs)
            return base
        expected = seen.expected
        if self.op.outputs and cmp.part in self.op.outputs and isinstance(expected, tuple):
            expected = expected[self.op.outputs.index(cmp.part)]
        shape = np.shape(expected)
        outputs = list(seen.expected) if isinstance(seen.expected, tuple) else [seen.expected]
        block = block_of([*case.inputs.values(), *outputs])
        bounded = bool(seen.precision)
        base.index = [int(i) for i in first.index]
        base.inputs = input_texts(case.inputs, first.index, shape, row=bounded, block=None if bounded else block)
        base.expected, base.got = first.expected, first.actual
        base.expected_bits, base.got_bits = first.expected_bits, first.actual_bits
        base.detail = cmp.summary()
        if classify and self.op.case_flags and len(first.index) == len(shape):
            try:
                cut = element_case(case, first.index, shape, None if bounded else block)
                own = tuple(self.op.case_flags(cut)) if cut is not None else ()
            except Exception:  # the case_flags of a cut-down case: keep the whole case's flags
                own = ()
            if own and classify == "add":
                base.flags = base.flags + tuple(f for f in own if f not in base.flags and f != "Random")
            elif own:
                base.flags = own
        return base

    def judge_output(self, case: Case, actual, expected, alternatives) -> tuple[Comparison, str | None]:
        """The kind's comparison of one output, recorded in the report; `alternatives`
        (axis key -> output) are a vector's stored outputs under other latitude values,
        None for a drawn case (computed from the oracle when needed)."""
        raise NotImplementedError

    def finish(self) -> None:
        """Failures only the whole run shows (after every check)."""

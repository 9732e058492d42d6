"""The conformance runner: golden vectors, exhaustive cases and hypothesis properties
of every catalogued op an implementation provides, judged against the oracle.

Verdicts per op: pass, fail, acceptable-difference (only latitude the spec allows
differs), xfail (failed, and listed as expected to), skipped, not covered (the
implementation does not provide the op). An xfail entry whose checks pass is a
failure (strict, as in pytest's xfail_strict), except for 'properties' entries:
random examples may or may not meet the listed bug.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis import strategies as st

import ref
from ref.conformance.catalog import Kind, Op, discover
from ref.conformance.implementation import Implementation
from ref.testing.bounded import precision_of, ratio
from ref.testing.compare import Comparison
from ref.testing.golden import Case, Vector, as_output, load_manifest, load_vectors, same_output

__all__ = ["Entry", "Failure", "OpReport", "Report", "parse_entries", "run"]

VERDICTS = ("pass", "fail", "acceptable-difference", "xfail", "skipped", "not covered")


@dataclass(frozen=True)
class Entry:
    """A skip or xfail line: an op glob, optionally '/part' (a vector id, a vector flag,
    'exhaustive', 'large', 'properties' or '*'), and a mandatory reason."""

    op: str
    part: str
    reason: str

    def matches(self, op: str, part: str, flags: Sequence[str] = ()) -> bool:
        return fnmatchcase(op, self.op) and (self.part in ("*", part) or self.part in flags)


def parse_entries(text: str, *, source: str = "entries") -> list[Entry]:
    """Parse a skips/xfails file: `target reason...` per line, '#' comments."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        target, _, reason = line.partition(" ")
        if not reason.strip():
            raise ValueError(f"{source}:{lineno}: every entry needs a reason after the target, got {line!r}")
        op, _, part = target.partition("/")
        entries.append(Entry(op, part or "*", reason.strip()))
    return entries


@dataclass
class Failure:
    where: str
    comment: str
    flags: tuple[str, ...]
    params: dict[str, Any]
    detail: str

    def describe(self) -> str:
        flags = f" [{', '.join(self.flags)}]" if self.flags else ""
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        head = f"{self.where}{flags}: {self.comment}" + (f" ({params})" if params else "")
        return f"{head}\n      {self.detail}"


@dataclass
class OpReport:
    op: str
    kind: str
    spec: str
    verdict: str = "pass"
    vectors_run: int = 0
    vectors_passed: int = 0
    vectors_skipped: int = 0
    examples: int = 0
    exhaustive_cases: int = 0
    worst: float = 0.0
    tolerance: float = 0.0
    unit: str = ""
    unsupported: int = 0  # cases the implementation declined with NotImplementedError
    compared: int = 0  # outputs compared with the oracle's
    failures: list[Failure] = field(default_factory=list)
    xfailed: list[Failure] = field(default_factory=list)
    acceptable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    implementation: dict[str, str]
    ops: list[OpReport]
    meta: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(r.verdict != "fail" for r in self.ops)

    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.ops) for v in VERDICTS if any(r.verdict == v for r in self.ops)}

    def to_json(self) -> str:
        doc = {**self.meta, "implementation": self.implementation, "summary": self.counts(), "ok": self.ok,
               "ops": [asdict(r) for r in self.ops]}
        return json.dumps(doc, indent=1, default=_json_default) + "\n"

    def table(self) -> str:
        rows = [("op", "kind", "vectors", "examples", "worst/tol", "verdict")]
        for r in self.ops:
            vec = f"{r.vectors_passed}/{r.vectors_run}" + (f" ({r.vectors_skipped} skip)" if r.vectors_skipped else "")
            worst = "-" if r.verdict in ("not covered", "skipped") else f"{r.worst:g}/{r.tolerance:g}"
            rows.append((r.op, r.kind, vec, str(r.examples + r.exhaustive_cases), worst, r.verdict))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines)

    def details(self, limit: int = 5) -> str:
        out = []
        for r in self.ops:
            if r.failures:
                out.append(f"FAIL {r.op} ({r.spec})")
                out += ["  " + f.describe() for f in r.failures[:limit]]
                if len(r.failures) > limit:
                    out.append(f"  ... {len(r.failures) - limit} more failures in the JSON report")
            for note in r.notes:
                out.append(f"NOTE {r.op}: {note}")
            if r.acceptable:
                out.append(f"ACCEPTABLE {r.op}: " + "; ".join(sorted(set(r.acceptable))[:limit]))
            if r.xfailed:
                out.append(f"XFAIL {r.op}: " + "; ".join(sorted({f.where for f in r.xfailed})[:limit]))
        return "\n".join(out)


def _json_default(obj):
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj)}")


class _Judge:
    """Calls the candidate and compares it with the oracle for one op."""

    def __init__(self, op: Op, fn: Callable, impl: Implementation, report: OpReport):
        self.op, self.fn, self.report = op, fn, report
        self.supported = impl.supported(op)
        self.dtypes = impl.accepted_dtypes(op)
        declared = impl.declared(op)
        self.open_axes = [v for v in op.variants if v.latitude and v.name not in declared]
        self.latitude_choices: dict[str, set] = {}
        self.precision = impl.declared_precision(op)
        self._emulated: tuple = ()

    def runs_oracle(self, v: Vector, params: Mapping[str, str]) -> bool:
        """Whether the oracle takes the vector's inputs with these params (stochastic
        rounding, for one, needs rbits)."""
        if v.result == "invalid":
            return True
        try:
            self.op.oracle(**v.inputs, **params)
        except (ValueError, TypeError):
            return False
        return True

    def accepts(self, case: Case) -> bool:
        """Whether every input has a dtype the implementation declares it takes."""
        def native(arr) -> str:  # a big-endian float32 is still a float32
            return str(np.asarray(arr).dtype.newbyteorder("="))

        return all(native(arr) in self.dtypes.get(name, (native(arr),)) for name, arr in case.inputs.items())

    def call(self, case: Case, layout: str = "C") -> np.ndarray:
        """Call the candidate on copies of the inputs laid out in memory as `layout`
        says; an implementation that writes into its inputs fails."""
        inputs = {k: _lay_out(np.asarray(v), layout) for k, v in case.inputs.items()}
        out = as_output(self.fn(**inputs, **case.params))
        if self.op.outputs and (not isinstance(out, tuple) or len(out) != len(self.op.outputs)):
            raise ValueError(f"expected a tuple of outputs {self.op.outputs}")
        for name, arr in inputs.items():
            original = np.asarray(case.inputs[name])
            if arr.shape != original.shape or arr.tobytes() != np.ascontiguousarray(original).tobytes():
                raise InputModified(f"the implementation modified its input {name!r} in place")
        return out

    def expected(self, case: Case):
        return as_output(self.op.oracle(**case.inputs, **case.params))

    def compare(self, case: Case, actual, expected, alternatives: Mapping[str, np.ndarray] | None = None):
        """(comparison, acceptable-note): an undeclared latitude axis may match any value."""
        self.report.compared += 1
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


class InputModified(Exception):
    """An implementation wrote into an array it was given."""


def _lay_out(a: np.ndarray, layout: str) -> np.ndarray:
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


def _layouts(case: Case) -> tuple[str, ...]:
    """The layouts worth trying for a case: C always; others where they differ."""
    ndim = max((np.ndim(a) for a in case.inputs.values()), default=0)
    return ("C",) + (("strided", "negative") if ndim >= 1 else ()) + (("F", "row_pitch") if ndim >= 2 else ())


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 400 else text[:400] + "..."


def _vector_runs(v: Vector, judge: _Judge) -> list[tuple[Case, np.ndarray | None]] | None:
    """The calls a vector asks for under this implementation's variants; None to skip.

    An axis absent from the vector's params does not change its output, so the vector
    runs under each value the implementation supports for it (one axis at a time, the
    others at their first applicable value): a bug that lives in one variant's code
    path meets the vector there too.
    """
    op = judge.op
    params = dict(v.params)
    latitude = {a.name for a in op.variants if a.latitude} if v.result == "acceptable" else set()
    for axis, value in params.items():
        if value not in judge.supported.get(axis, (value,)) and axis not in latitude:
            return None
    free = [a for a in judge.supported if a not in params]
    base = {**params, **{a: judge.supported[a][0] for a in free}}
    for axis in free:
        ok = [x for x in judge.supported[axis] if judge.runs_oracle(v, {**base, axis: x})]
        if not ok:
            return None
        base[axis] = ok[0]
    combos = [base] + [{**base, axis: x} for axis in free for x in judge.supported[axis]
                       if x != base[axis] and judge.runs_oracle(v, {**base, axis: x})]
    if v.result != "invalid" and not judge.accepts(Case(v.inputs, base)):
        return None
    open_axes = {a.name for a in judge.open_axes}
    declared_lat = [a for a in sorted(latitude) if a in v.params and a not in open_axes]
    runs = []
    for combo in combos:
        if not declared_lat:
            runs.append((Case(v.inputs, combo), v.expected))
            continue
        axis = declared_lat[0]
        for value in judge.supported[axis]:
            expected = v.expected if value == v.params[axis] else v.alternatives[f"{axis}={value}"]
            runs.append((Case(v.inputs, {**combo, axis: value}), expected))
    return runs


def _run_vectors(judge: _Judge, vectors: Sequence[Vector], report: OpReport, xfails, skips):
    held = None  # the last output returned, to catch implementations that reuse its memory
    for v in vectors:
        part = str(v.id)
        if any(e.matches(judge.op.name, part, v.flags) for e in skips):
            report.vectors_skipped += 1
            continue
        runs = _vector_runs(v, judge)
        if runs is None:
            report.vectors_skipped += 1
            continue
        report.vectors_run += 1
        failure = None
        for i, (case, expected) in enumerate(runs):
            failure, output = _check_vector(judge, v, case, expected, layouts=i == 0)
            if failure is UNSUPPORTED:
                break
            if failure:
                break
            if held is not None and _snapshot(held[1]) != held[2]:
                failure = Failure(f"vector {held[0].id}", held[0].comment, held[0].flags, {},
                                  f"its output changed while vector {v.id} ran (results share a buffer)")
                break
            held = (v, output, _snapshot(output)) if output is not None else held
        if failure is UNSUPPORTED:
            report.vectors_run -= 1
            report.vectors_skipped += 1
            report.unsupported += 1
            continue
        _settle(report, failure, judge.op.name, part, xfails, v.flags)


UNSUPPORTED = Failure("", "", (), {}, "NotImplementedError")  # a case the implementation declines


def _check_vector(judge: _Judge, v: Vector, case: Case, expected, *, layouts: bool = True):
    """(failure or None, the first output) of one vector under one set of params."""
    where = f"vector {v.id}"
    if v.result == "invalid":
        try:
            judge.call(case)
        except Exception:  # any rejection counts: the input must not be processed
            return None, None
        return Failure(where, v.comment, v.flags, dict(case.params), "accepted an input the spec says is invalid"), None
    first = None
    for layout in _layouts(case) if layouts else ("C",):
        label = "" if layout == "C" else f" (inputs in {layout} layout)"
        try:
            actual = judge.call(case, layout)
        except NotImplementedError:
            return UNSUPPORTED, None
        except Exception as exc:  # a crash on a valid input is a failure, reported as such
            return Failure(where, v.comment + label, v.flags, dict(case.params), f"raised {_short(exc)}"), None
        cmp, note = judge.compare(case, actual, expected, v.alternatives if v.result == "acceptable" else {})
        if note:
            judge.report.acceptable.append(f"{where}: {note}")
        if not cmp.ok:
            return Failure(where, v.comment + label, v.flags, dict(case.params), cmp.describe()), None
        first = actual if first is None else first
    return None, first


def _snapshot(out) -> bytes:
    arrays = out if isinstance(out, tuple) else (out,)
    return b"".join(np.asarray(a).tobytes() for a in arrays)


def _settle(report: OpReport, failure: Failure | None, op: str, part: str, xfails: Sequence[Entry],
            flags: Sequence[str] = ()):
    """Count a check's outcome; an xfail entry naming exactly this check (a vector id,
    'exhaustive', 'large') that passes is a failure (strict)."""
    expected_fail = [e for e in xfails if e.matches(op, part, flags)]
    if failure is None:
        if part.isdigit():
            report.vectors_passed += 1
        if expected_fail and expected_fail[0].part == part and part != "properties":
            report.failures.append(Failure(f"{part}", "listed as xfail but passed (strict)", (), {},
                                           expected_fail[0].reason))
    elif expected_fail:
        report.xfailed.append(failure)
    else:
        report.failures.append(failure)


def _run_exhaustive(judge: _Judge, report: OpReport, xfails, skips, *, large: bool = False):
    """Deterministic sweeps (and, when asked, the large cases) in C layout."""
    part = "large" if large else "exhaustive"
    source = judge.op.large if large else judge.op.exhaustive
    if source is None or any(e.matches(judge.op.name, part) for e in skips):
        return
    failure = None
    for i, case in enumerate(source(judge.supported), start=1):
        if not judge.accepts(case):
            continue
        where = f"{part} case {i}"
        try:
            actual = judge.call(case)
        except NotImplementedError:
            report.unsupported += 1
            continue
        except Exception as exc:  # a crash on a valid input is a failure
            report.exhaustive_cases += 1
            failure = Failure(where, f"{part} sweep", (), dict(case.params), f"raised {_short(exc)}")
            break
        report.exhaustive_cases += 1
        cmp, note = judge.compare(case, actual, judge.expected(case))
        if note:
            report.acceptable.append(f"{where}: {note}")
        if not cmp.ok:
            failure = Failure(where, f"{part} sweep of {_describe_inputs(case)}", (), dict(case.params),
                              cmp.describe())
            break
    _settle(report, failure, judge.op.name, part, xfails)


def _describe_inputs(case: Case) -> str:
    parts = []
    for name, arr in case.inputs.items():
        arr = np.asarray(arr)
        text = f"{name}: {arr.dtype}{list(arr.shape)}"
        if arr.size <= 8:
            text += " " + np.array2string(arr.reshape(-1), precision=17)
        parts.append(text)
    return ", ".join(parts)


def _run_properties(judge: _Judge, report: OpReport, examples: int, shrink: bool, xfails, skips):
    if examples <= 0 or any(e.matches(judge.op.name, "properties") for e in skips):
        return
    last: dict[str, Any] = {}

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=(Phase.generate, Phase.shrink) if shrink else (Phase.generate,))
    @given(st.data())
    def prop(data):
        case = data.draw(judge.op.examples(judge.supported), label="case")
        assume(judge.accepts(case))
        layout = data.draw(st.sampled_from(_layouts(case)), label="layout")
        try:
            actual = judge.call(case, layout)
        except NotImplementedError:
            last["unsupported"] = last.get("unsupported", 0) + 1
            assume(False)
        except Exception as exc:  # a crash on a valid input is a failure
            last["count"] = last.get("count", 0) + 1
            last["failure"] = (case, layout, f"raised {_short(exc)}")
            raise AssertionError("raised") from exc
        last["count"] = last.get("count", 0) + 1
        cmp, note = judge.compare(case, actual, judge.expected(case))
        if note:
            report.acceptable.append(f"property: {note}")
        if not cmp.ok:
            last["failure"] = (case, layout, cmp.describe())
            raise AssertionError(cmp.describe())

    failure = None
    try:
        prop()
    except Unsatisfiable:  # every drawn case declined (NotImplementedError) or not accepted
        pass
    except AssertionError:
        case, layout, detail = last["failure"]
        failure = Failure("property", f"minimal failing example: {_describe_inputs(case)}, {layout} layout", (),
                          dict(case.params), detail)
    report.examples += last.get("count", 0)
    report.unsupported += last.get("unsupported", 0)
    _settle(report, failure, judge.op.name, "properties", xfails)


def run(
    impl: Implementation,
    *,
    ops: Sequence[str] | None = None,
    examples: int = 50,
    shrink: bool = True,
    skips: Sequence[Entry] = (),
    xfails: Sequence[Entry] = (),
    golden: Path | None = None,
    large: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run the suite for every selected op (globs in `ops`, default all); `large`
    adds each op's large cases (arrays past 2^24 elements, where kernels with a
    capped launch grid stop writing)."""
    catalog = discover()
    selected = [op for name, op in catalog.items() if not ops or any(fnmatchcase(name, p) for p in ops)]
    if ops and not selected:
        raise ValueError(f"--ops: {list(ops)} match no operation; `python -m ref list` shows them")
    reports = []
    for op in selected:
        if progress:
            progress(op.name)
        reports.append(_run_op(op, impl, examples, shrink, skips, xfails, golden, large))
    manifest = load_manifest(golden)
    meta = {
        "suite": {"name": "llm-ref", "version": ref.__version__},
        "golden": {"generator_version": manifest["generator_version"], "golden_format": manifest["golden_format"]},
        "platform": {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {"examples": examples, "ops": list(ops or []), "large": large},
    }
    impl_meta = {"name": impl.name, "version": impl.version, "source": impl.source}
    return Report(impl_meta, reports, meta)


def _run_op(op: Op, impl: Implementation, examples, shrink, skips, xfails, golden, large) -> OpReport:
    report = OpReport(op.name, op.kind.value, op.spec)
    fn = impl.ops.get(op.name)
    if fn is None:
        report.verdict = "not covered"
        return report
    whole_skip = [e for e in skips if e.matches(op.name, "*") and e.part == "*"]
    if whole_skip:
        report.verdict = "skipped"
        report.notes.append(whole_skip[0].reason)
        return report
    judge = _Judge(op, fn, impl, report)
    _run_vectors(judge, load_vectors(op.name, golden), report, xfails, skips)
    _run_exhaustive(judge, report, xfails, skips)
    if large:
        _run_exhaustive(judge, report, xfails, skips, large=True)
    _run_properties(judge, report, examples, shrink, xfails, skips)
    for axis, values in judge.latitude_choices.items():
        if not values:
            report.failures.append(Failure(
                "latitude", f"undeclared variant axis {axis!r}", (), {},
                f"the outputs match different values of {axis!r} on different inputs; the spec leaves the "
                f"choice open, but one implementation makes one choice (declare it in VARIANTS)"))
    if report.unsupported:
        report.notes.append(f"{report.unsupported} cases declined with NotImplementedError (features not provided)")
    whole_xfail = [e for e in xfails if e.matches(op.name, "*") and e.part == "*"]
    if report.unsupported and not report.compared and not report.failures:
        report.verdict = "skipped"
    elif report.failures:
        report.verdict = "fail"
    elif whole_xfail and not report.xfailed:
        report.verdict = "fail"
        report.failures.append(Failure("op", "listed as xfail but passed (strict)", (), {}, whole_xfail[0].reason))
    elif report.xfailed:
        report.verdict = "xfail"
    elif report.acceptable:
        report.verdict = "acceptable-difference"
    return report

"""The conformance runner: golden vectors, exhaustive cases and hypothesis properties
of every catalogued op an implementation provides, judged against the oracle.

Verdicts per op: pass, fail, acceptable-difference (only latitude the spec allows
differs), xfail (failed, and listed as expected to), skipped, not covered (the
implementation does not provide the op). An xfail entry whose checks pass is a
failure (strict, as in pytest's xfail_strict), except for 'properties' and flag
entries: random examples may or may not meet the listed bug.

A wrong kernel never ends the run: whatever the candidate raises or returns, and
whatever a comparator, strategy or emulation raises on it, is a named failure of
that op and check, and the other ops still run. `isolate=True` runs each op in a
child process (ref.conformance.isolation), so that a crash, an exit or a hang is one
too. A KeyboardInterrupt stops the run and returns the report so far, incomplete.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, assume, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

import ref
from ref.conformance.catalog import Op, discover
from ref.conformance.implementation import Implementation
from ref.conformance.judge import (BadOutput, CandidateExit, Judge, Watch, by_flag, describe_problem, layouts,
                                   short)
from ref.conformance.report import VERDICTS, Entry, Failure, OpReport, Report, parse_entries
from ref.testing.golden import Case, Vector, load_manifest, load_vectors

__all__ = ["BadOutput", "CandidateExit", "Entry", "Failure", "OpReport", "Report", "Settings", "VERDICTS",
           "parse_entries", "run", "run_op"]


@dataclass(frozen=True)
class Settings:
    """What to run for each op (picklable: an isolated op's child gets it)."""

    examples: int = 50
    shrink: bool = True
    skips: tuple[Entry, ...] = ()
    xfails: tuple[Entry, ...] = ()
    golden: Path | None = None
    large: bool = False


def _vector_runs(v: Vector, judge: Judge) -> list[tuple[Case, np.ndarray | None]] | None:
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
        ok = [x for x in judge.supported[axis] if judge.runs_oracle(v.inputs, v.result, {**base, axis: x})]
        if not ok:
            return None
        base[axis] = ok[0]
    combos = [base] + [{**base, axis: x} for axis in free for x in judge.supported[axis]
                       if x != base[axis] and judge.runs_oracle(v.inputs, v.result, {**base, axis: x})]
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


UNSUPPORTED = Failure("", "", (), {}, "NotImplementedError")  # a case the implementation declines
SKIPPED = Failure("", "", (), {}, "skipped")  # a vector whose variants or dtypes the implementation lacks


def _run_vectors(judge: Judge, vectors: Sequence[Vector], report: OpReport, xfails, skips):
    held = None  # the last output returned, to catch implementations that reuse its memory
    for v in vectors:
        part = str(v.id)
        if any(e.matches(judge.op.name, part, v.flags) for e in skips):
            report.vectors_skipped += 1
            continue
        judge.at = (f"vector {v.id}", tuple(v.flags))
        try:
            failure, held = _run_vector(judge, v, held)
        except Exception as exc:  # the vector's file or the runner itself: still a named failure
            failure = Failure(f"vector {v.id}", v.comment, v.flags, dict(v.params),
                              f"could not be checked: {short(exc)}")
        if failure is SKIPPED or failure is UNSUPPORTED:
            report.vectors_skipped += 1
            report.unsupported += int(failure is UNSUPPORTED)
            continue
        report.vectors_run += 1
        _settle(report, failure, judge.op.name, part, xfails, v.flags)


def _run_vector(judge: Judge, v: Vector, held):
    """(a failure, SKIPPED, UNSUPPORTED or None; the output held for the shared-buffer check)."""
    runs = _vector_runs(v, judge)
    if runs is None:
        return SKIPPED, held
    failure = None
    for i, (case, expected) in enumerate(runs):
        failure, output = _check_vector(judge, v, case, expected, layouts_too=i == 0)
        if failure:
            break
        if held is not None and _snapshot(held[1]) != held[2]:
            failure = Failure(f"vector {held[0].id}", held[0].comment, held[0].flags, {},
                              f"its output changed while vector {v.id} ran (results share a buffer)")
            break
        held = (v, output, _snapshot(output)) if output is not None else held
    return failure, held


def _check_vector(judge: Judge, v: Vector, case: Case, expected, *, layouts_too: bool = True):
    """(failure or None, the first output) of one vector under one set of params."""
    where = f"vector {v.id}"
    if v.result == "invalid":
        return _check_rejection(judge, v, case), None
    first = None
    for layout in layouts(case) if layouts_too else ("C",):
        label = "" if layout == "C" else f" (inputs in {layout} layout)"
        try:
            actual = judge.call(case, layout)
        except NotImplementedError:
            return UNSUPPORTED, None
        except Exception as exc:  # a crash or an unusable output on a valid input is a failure
            return Failure(where, v.comment + label, v.flags, dict(case.params), describe_problem(exc)), None
        cmp, note = judge.compare(case, actual, expected, v.alternatives if v.result == "acceptable" else {})
        if note:
            judge.report.acceptable.append(f"{where}: {note}")
        if not cmp.ok:
            return Failure(where, v.comment + label, v.flags, dict(case.params), cmp.describe()), None
        first = actual if first is None else first
    return None, first


def _check_rejection(judge: Judge, v: Vector, case: Case) -> Failure | None:
    """An invalid input must be refused with an exception; exiting is not refusing."""
    try:
        judge.invoke(case)
    except CandidateExit as exc:
        return Failure(f"vector {v.id}", v.comment, v.flags, dict(case.params), str(exc))
    except Exception:  # any rejection counts: the input must not be processed
        return None
    return Failure(f"vector {v.id}", v.comment, v.flags, dict(case.params),
                   "accepted an input the spec says is invalid")


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


def _judge_case(judge: Judge, case: Case, layout: str, label: str) -> str | None:
    """None when the candidate's output on `case` matches the oracle's, else what went
    wrong; NotImplementedError (the case declined) passes through."""
    try:
        actual = judge.call(case, layout)
    except NotImplementedError:
        raise
    except Exception as exc:  # a crash or an unusable output on a valid input is a failure
        return describe_problem(exc)
    try:
        expected = judge.expected(case)
    except Exception as exc:
        return f"the oracle raised {short(exc)} on this case (a defect of the suite: please report it)"
    cmp, note = judge.compare(case, actual, expected)
    if note:
        judge.report.acceptable.append(f"{label}: {note}")
    return None if cmp.ok else cmp.describe()


def _run_exhaustive(judge: Judge, report: OpReport, xfails, skips, *, large: bool = False):
    """Deterministic sweeps (and, when asked, the large cases) in C layout. A case whose
    flags (the op's case_flags) a skip entry names is not run; one an xfail entry names
    that fails is xfailed and the sweep goes on."""
    part = "large" if large else "exhaustive"
    source = judge.op.large if large else judge.op.exhaustive
    name = judge.op.name
    if source is None or any(e.matches(name, part) for e in skips):
        return
    failure = None
    try:
        for i, case in enumerate(source(judge.supported), start=1):
            if not judge.accepts(case):
                continue
            flags = judge.flags_of(case)
            if by_flag(skips, name, flags):
                judge.skipped_by_flag += 1
                continue
            where = f"{part} case {i}"
            judge.at = (where, flags)
            try:
                problem = _judge_case(judge, case, "C", where)
            except NotImplementedError:
                report.unsupported += 1
                continue
            report.exhaustive_cases += 1
            if problem is None:
                continue
            failure = Failure(where, f"{part} sweep of {_describe_inputs(case)}", flags, dict(case.params), problem)
            if not by_flag(xfails, name, flags):
                break
            report.xfailed.append(failure)
            failure = None
    except Exception as exc:  # the sweep's own generator (or case_flags) raised
        failure = Failure(f"{part} sweep", "building the cases", (), {}, f"raised {short(exc)}")
    _settle(report, failure, name, part, xfails)


def _describe_inputs(case: Case) -> str:
    parts = []
    for name, arr in case.inputs.items():
        arr = np.asarray(arr)
        text = f"{name}: {arr.dtype}{list(arr.shape)}"
        if arr.size <= 8:
            text += " " + np.array2string(arr.reshape(-1), precision=17)
        parts.append(text)
    return ", ".join(parts)


def _run_properties(judge: Judge, report: OpReport, examples: int, shrink: bool, xfails, skips):
    """Random examples. One whose flags a skip entry names is not run; one an xfail
    entry names that fails is xfailed (the first per set of flags kept) and the search
    goes on for failures no entry names."""
    name = judge.op.name
    if examples <= 0 or any(e.matches(name, "properties") for e in skips):
        return
    last: dict[str, Any] = {"count": 0, "unsupported": 0, "stage": "drawing an example"}
    xfailed_flags: set[tuple[str, ...]] = set()

    @seed(judge.op.seed)  # the same examples on every run, whatever the runner's code looks like
    @settings(max_examples=examples, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=(Phase.generate, Phase.shrink) if shrink else (Phase.generate,))
    @given(st.data())
    def prop(data):
        last["stage"] = "drawing an example"
        case = data.draw(judge.op.examples(judge.supported), label="case")
        assume(judge.accepts(case))
        last["stage"] = "reading the example's flags (case_flags)"
        flags = judge.flags_of(case)
        if by_flag(skips, name, flags):
            judge.skipped_by_flag += 1
            assume(False)
        layout = data.draw(st.sampled_from(layouts(case)), label="layout")
        last["stage"] = "judging an example"
        judge.at = (f"property example {last['count'] + 1}", flags)
        try:
            problem = _judge_case(judge, case, layout, "property")
        except NotImplementedError:
            last["unsupported"] += 1
            assume(False)
        last["count"] += 1
        if problem is None:
            return
        failure = Failure("property", f"minimal failing example: {_describe_inputs(case)}, {layout} layout",
                          flags, dict(case.params), problem)
        if by_flag(xfails, name, flags):
            if flags not in xfailed_flags:
                xfailed_flags.add(flags)
                report.xfailed.append(replace(failure, comment=failure.comment.replace("minimal ", "", 1)))
            return
        last["failure"] = failure
        raise AssertionError(problem)

    failure = None
    try:
        prop()
    except Unsatisfiable:  # every drawn case declined (NotImplementedError), not accepted or skipped
        pass
    except Exception as exc:  # our AssertionError, or a strategy, hypothesis or runner error
        failure = last.get("failure")
        if failure is None:
            failure = Failure("property", f"{last['stage']} raised", (), {}, short(exc))
        elif not isinstance(exc, AssertionError):  # e.g. hypothesis' Flaky: the failure did not repeat
            failure = replace(failure, detail=f"{failure.detail} (then {short(exc)})")
    report.examples += last["count"]
    report.unsupported += last["unsupported"]
    _settle(report, failure, name, "properties", xfails)


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
    isolate: bool = False,
    timeout: float = 60.0,
    on_op: Callable[[Report], None] | None = None,
) -> Report:
    """Run the suite for every selected op (globs in `ops`, default all); `large`
    adds each op's large cases (arrays past 2^24 elements, where kernels with a
    capped launch grid stop writing).

    `isolate` runs each op in a child process (the implementation is loaded again
    there from `impl.source`): a call that takes longer than `timeout` seconds, an
    exit or a crash is a failure of that op. `on_op(report)` is called after each op
    with the report so far (`complete` False), to write it incrementally.
    """
    catalog = discover()
    selected = [op for name, op in catalog.items() if not ops or any(fnmatchcase(name, p) for p in ops)]
    if ops and not selected:
        raise ValueError(f"--ops: {list(ops)} match no operation; `python -m ref list` shows them")
    if not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    for op in selected:  # a declaration error is the user's, raised before anything runs
        if op.name in impl.ops:
            impl.supported(op)
    chosen = Settings(examples, shrink, tuple(skips), tuple(xfails), golden, large)
    if isolate:
        from ref.conformance.isolation import isolated_runner

        run_one = isolated_runner(impl, chosen, timeout=timeout)
    else:
        def run_one(op: Op) -> OpReport:
            return run_op(op, impl, chosen)

    report = Report({"name": impl.name, "version": impl.version, "source": impl.source}, [],
                    _meta(chosen, ops, golden, isolate, timeout), complete=False)
    op = None
    try:
        for op in selected:
            if progress:
                progress(op.name)
            report.ops.append(run_one(op))
            if on_op:
                on_op(report)
    except KeyboardInterrupt:
        report.meta["interrupted"] = (f"KeyboardInterrupt while {op.name} ran; "
                                      f"{len(selected) - len(report.ops)} of {len(selected)} ops not reported")
        return report
    report.complete = True
    return report


def _meta(chosen: Settings, ops, golden, isolate: bool, timeout: float) -> dict[str, Any]:
    manifest = load_manifest(golden)
    return {
        "suite": {"name": "llm-ref", "version": ref.__version__},
        "golden": {"generator_version": manifest["generator_version"], "golden_format": manifest["golden_format"]},
        "platform": {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {"examples": chosen.examples, "ops": list(ops or []), "large": chosen.large,
                     "isolate": isolate, **({"timeout": timeout} if isolate else {})},
    }


def run_op(op: Op, impl: Implementation, chosen: Settings, watch: Watch | None = None) -> OpReport:
    """One op's report; anything the checks raise is a named failure of the op."""
    report = OpReport(op.name, op.kind.value, op.spec)
    try:
        _run_op(op, impl, chosen, report, watch)
    except Exception as exc:
        report.failures.append(Failure("op", "the runner could not finish judging this op", (), {},
                                       f"raised {short(exc)}"))
        report.verdict = "fail"
    return report


def _run_op(op: Op, impl: Implementation, chosen: Settings, report: OpReport, watch: Watch | None) -> None:
    skips, xfails = chosen.skips, chosen.xfails
    fn = impl.ops.get(op.name)
    if fn is None:
        report.verdict = "not covered"
        return
    whole_skip = [e for e in skips if e.matches(op.name, "*") and e.part == "*"]
    if whole_skip:
        report.verdict = "skipped"
        report.notes.append(whole_skip[0].reason)
        return
    judge = Judge(op, fn, impl, report, watch)
    _run_vectors(judge, load_vectors(op.name, chosen.golden), report, xfails, skips)
    _run_exhaustive(judge, report, xfails, skips)
    if chosen.large:
        _run_exhaustive(judge, report, xfails, skips, large=True)
    _run_properties(judge, report, chosen.examples, chosen.shrink, xfails, skips)
    for axis, values in judge.latitude_choices.items():
        if not values:
            report.failures.append(Failure(
                "latitude", f"undeclared variant axis {axis!r}", (), {},
                f"the outputs match different values of {axis!r} on different inputs; the spec leaves the "
                f"choice open, but one implementation makes one choice (declare it in VARIANTS)"))
    if report.unsupported:
        report.notes.append(f"{report.unsupported} cases declined with NotImplementedError (features not provided)")
    if judge.skipped_by_flag:
        report.notes.append(f"{judge.skipped_by_flag} random or swept cases skipped: their flags are in the skips")
    report.verdict = _verdict(report, [e for e in xfails if e.matches(op.name, "*") and e.part == "*"])


def _verdict(report: OpReport, whole_xfail: Sequence[Entry]) -> str:
    if report.unsupported and not report.compared and not report.failures:
        return "skipped"
    if report.failures:
        return "fail"
    if whole_xfail and not report.xfailed:
        report.failures.append(Failure("op", "listed as xfail but passed (strict)", (), {}, whole_xfail[0].reason))
        return "fail"
    if report.xfailed:
        return "xfail"
    if report.acceptable:
        return "acceptable-difference"
    return "pass"

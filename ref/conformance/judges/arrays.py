"""The shared machinery of array-in/array-out ops (exact and bounded), run by a
kind's judge (`ArrayJudge` subclass) in order: the golden vectors, the exhaustive
sweep, the large cases (on request) and the hypothesis properties; then the op's
verdict. Nothing here depends on the kind: comparing an output is the judge's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, assume, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from ref.conformance.hygiene import SharedOutputs, layouts
from ref.conformance.judges.candidate import ArrayJudge, CandidateExit, describe_problem, short
from ref.conformance.report import Entry, Failure, OpReport
from ref.testing.vector_files import Case, Output, Vector, load_vectors

__all__ = ["by_flag", "judge_case", "run_checks", "settle", "verdict"]


def by_flag(entries: Sequence[Entry], op: str, flags: Sequence[str]) -> list[Entry]:
    """The entries that name one of `flags` as their part (not '*' or a check's name)."""
    return [e for e in entries if e.part in flags and fnmatchcase(op, e.op)]


def judge_case(judge: ArrayJudge, case: Case, layout: str, label: str) -> str | None:
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


def settle(report: OpReport, failure: Failure | None, op: str, part: str, xfails: Sequence[Entry],
           flags: Sequence[str] = ()) -> None:
    """Count a check's outcome; an xfail entry naming exactly this check (a vector id,
    'exhaustive', 'large') that passes is a failure (strict)."""
    expected_fail = [e for e in xfails if e.matches(op, part, flags)]
    if failure is None:
        if part.isdigit():
            report.vectors_passed += 1
        if expected_fail and expected_fail[0].part == part and part != "properties":
            where = f"vector {part}" if part.isdigit() else part
            report.failures.append(Failure(where, "listed as xfail but passed (strict)", (), {},
                                           expected_fail[0].reason))
    elif expected_fail:
        report.xfailed.append(failure)
    else:
        report.failures.append(failure)


def run_checks(judge: ArrayJudge, settings) -> None:
    """Every check of the op in order, then its notes and verdict (`settings`: the
    runner's Settings)."""
    report, name, xfails, skips = judge.report, judge.op.name, settings.xfails, settings.skips
    _run_vectors(judge, load_vectors(name, settings.golden), xfails, skips)
    _run_exhaustive(judge, xfails, skips)
    if settings.large:
        _run_exhaustive(judge, xfails, skips, large=True)
    _run_properties(judge, settings.examples, settings.shrink, xfails, skips)
    judge.finish()
    if report.unsupported:
        report.notes.append(f"not judged: {report.unsupported} cases declined with NotImplementedError "
                            f"(features not provided)")
    if judge.skip_reasons:
        report.notes.append(_skipped_vectors(judge.skip_reasons))
    if judge.skipped_by_flag:
        report.notes.append(f"{judge.skipped_by_flag} random or swept cases skipped: their flags are in the skips")
    report.verdict = verdict(report, [e for e in xfails if e.matches(name, "*") and e.part == "*"])


def _skipped_vectors(reasons) -> str:
    """Why vectors were skipped: variant values not declared (by value), input dtypes not
    accepted, entries of the skips file."""
    variants = {k: n for k, n in reasons.items() if "=" in k}
    parts = []
    if variants:
        shown = ", ".join(f"{k} ({n})" for k, n in sorted(variants.items(), key=lambda kv: (-kv[1], kv[0])))
        parts.append(f"{sum(variants.values())} under variant values not declared in VARIANTS: {shown}")
    if reasons.get("dtype"):
        parts.append(f"{reasons['dtype']} with input dtypes not declared in DTYPES")
    if reasons.get("skips"):
        parts.append(f"{reasons['skips']} named by the skips")
    return f"{sum(reasons.values())} vectors skipped: " + "; ".join(parts)


def verdict(report: OpReport, whole_xfail: Sequence[Entry]) -> str:
    """The op's verdict from its counts (an xfail entry on the whole op that finds
    nothing to xfail is a failure: strict)."""
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


def _among(value: Any, values: Sequence[Any]) -> bool:
    """`value` is one of `values`, with its JSON type (True is not 1)."""
    return any(type(v) is type(value) and v == value for v in values)


def undeclared(op, supported: Mapping[str, Sequence[Any]], params: Mapping[str, Any],
               ignore: Sequence[str] = ()) -> str | None:
    """"axis=value" for the first of `params` that is one of the op's variant values
    the implementation did not declare (its vector or trace is skipped), else None.
    A value outside the catalog's own values (the bad param of an invalid vector,
    such as a page size of 0) is no reason to skip: every implementation must
    refuse it."""
    values = {v.name: v.values for v in op.variants}
    for axis, value in params.items():
        if axis in supported and axis not in ignore and _among(value, values.get(axis, ())) \
                and not _among(value, supported[axis]):
            return f"{axis}={value}"
    return None


def _vector_runs(v: Vector, judge: ArrayJudge) -> list[tuple[Case, Output | None]] | None:
    """The calls a vector asks for under this implementation's variants; None to skip.

    An axis absent from the vector's params does not change its output, so the vector
    runs under each value the implementation supports for it (one axis at a time, the
    others at their first value): a bug that lives in one variant's code path meets
    the vector there too.
    """
    op, supported = judge.op, judge.supported
    params = dict(v.params)
    latitude = {a.name for a in op.variants if a.latitude} if v.result == "acceptable" else set()
    skip = undeclared(op, supported, params, ignore=latitude)
    if skip:
        judge.skip_reasons[skip] += 1  # a variant value not declared
        return None
    free = [a for a in supported if a not in params]
    base = {**params, **{a: supported[a][0] for a in free}}
    combos = [base] + [{**base, axis: x} for axis in free for x in supported[axis] if x != base[axis]]
    if v.result != "invalid" and not judge.accepts(Case(v.inputs, base)):
        judge.skip_reasons["dtype"] += 1  # an input dtype not among the declared ones
        return None
    open_axes = {a.name for a in judge.open_axes}
    declared_lat = [a for a in sorted(latitude) if a in v.params and a not in open_axes]
    runs = []
    for combo in combos:
        if not declared_lat:
            runs.append((Case(v.inputs, combo), v.expected))
            continue
        axis = op.axis(declared_lat[0])
        for value in supported[axis.name]:
            same = _among(value, [v.params[axis.name]])
            runs.append((Case(v.inputs, {**combo, axis.name: value}),
                         v.expected if same else v.alternatives[axis.key(value)]))
    return runs


UNSUPPORTED = Failure("", "", (), {}, "NotImplementedError")  # a case the implementation declines
SKIPPED = Failure("", "", (), {}, "skipped")  # a vector whose variants or dtypes the implementation lacks


def _run_vectors(judge: ArrayJudge, vectors: Sequence[Vector], xfails, skips) -> None:
    report = judge.report
    shared: SharedOutputs[Vector] = SharedOutputs()  # catches implementations that reuse an output's memory
    for v in vectors:
        part = str(v.id)
        if any(e.matches(judge.op.name, part, v.flags) for e in skips):
            report.vectors_skipped += 1
            judge.skip_reasons["skips"] += 1
            continue
        judge.at = (f"vector {v.id}", tuple(v.flags))
        try:
            failure = _run_vector(judge, v, shared)
        except Exception as exc:  # the vector's file or the runner itself: still a named failure
            failure = Failure(f"vector {v.id}", v.comment, v.flags, dict(v.params),
                              f"could not be checked: {short(exc)}", vector=_vector_id(v))
        if failure is SKIPPED or failure is UNSUPPORTED:
            report.vectors_skipped += 1
            report.unsupported += int(failure is UNSUPPORTED)
            continue
        report.vectors_run += 1
        settle(report, failure, judge.op.name, part, xfails, v.flags)


def _run_vector(judge: ArrayJudge, v: Vector, shared: SharedOutputs[Vector]) -> Failure | None:
    """A failure, SKIPPED, UNSUPPORTED or None."""
    runs = _vector_runs(v, judge)
    if runs is None:
        return SKIPPED
    for i, (case, expected) in enumerate(runs):
        failure, output = _check_vector(judge, v, case, expected, layouts_too=i == 0)
        if failure:
            return failure
        earlier = shared.changed()
        if earlier is not None:
            return Failure(f"vector {earlier.id}", earlier.comment, earlier.flags, {},
                           f"its output changed while vector {v.id} ran (results share a buffer)",
                           vector=_vector_id(earlier))
        if output is not None:
            shared.hold(v, output)
    return None


def _check_vector(judge: ArrayJudge, v: Vector, case: Case, expected, *, layouts_too: bool = True):
    """(failure or None, the first output) of one vector under one set of params."""
    where = f"vector {v.id}"
    if v.result == "invalid":
        return _check_rejection(judge, v, case), None
    first = None
    for layout in layouts(case.inputs) if layouts_too else ("C",):
        label = "" if layout == "C" else f" (inputs in {layout} layout)"
        try:
            actual = judge.call(case, layout)
        except NotImplementedError:
            return UNSUPPORTED, None
        except Exception as exc:  # a crash or an unusable output on a valid input is a failure
            return judge.failure(where, v.comment + label, v.flags, case, describe_problem(exc),
                                 vector=_vector_id(v)), None
        cmp, note = judge.compare(case, actual, expected, v.alternatives if v.result == "acceptable" else {})
        if note:
            judge.report.acceptable.append(f"{where}: {note}")
        if not cmp.ok:
            return judge.failure(where, v.comment + label, v.flags, case, cmp.describe(), seen=judge.seen,
                                 vector=_vector_id(v), classify="add"), None
        first = actual if first is None else first
    return None, first


def _check_rejection(judge: ArrayJudge, v: Vector, case: Case) -> Failure | None:
    """An invalid input must be refused with an exception; exiting is not refusing."""
    try:
        judge.invoke(case)
    except CandidateExit as exc:
        return judge.failure(f"vector {v.id}", v.comment, v.flags, case, str(exc), vector=_vector_id(v))
    except Exception:  # any rejection counts: the input must not be processed
        return None
    # the inputs it accepted (dtype, shape, values) travel in the failure's `inputs`
    return judge.failure(f"vector {v.id}", v.comment, v.flags, case,
                         f"accepted an input the spec says is invalid ({v.comment}): it returned instead of raising",
                         vector=_vector_id(v))


def _vector_id(v: Vector) -> int | None:
    try:
        return int(v.id)
    except (TypeError, ValueError):
        return None


def _run_exhaustive(judge: ArrayJudge, xfails, skips, *, large: bool = False) -> None:
    """Deterministic sweeps (and, when asked, the large cases) in C layout. A case whose
    flags (the op's case_flags) a skip entry names is not run; one an xfail entry names
    that fails is xfailed and the sweep goes on."""
    report = judge.report
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
                problem = judge_case(judge, case, "C", where)
            except NotImplementedError:
                report.unsupported += 1
                continue
            report.exhaustive_cases += 1
            if problem is None:
                continue
            failure = judge.failure(where, f"{part} sweep of {_describe_inputs(case)}", flags, case, problem,
                                    seen=judge.seen, classify=True)
            if not by_flag(xfails, name, failure.flags) and not by_flag(xfails, name, flags):
                break
            report.xfailed.append(failure)
            failure = None
    except Exception as exc:  # the sweep's own generator (or case_flags) raised
        failure = Failure(f"{part} sweep", "building the cases", (), {}, f"raised {short(exc)}")
    settle(report, failure, name, part, xfails)


def _describe_inputs(case: Case) -> str:
    parts = []
    for name, arr in case.inputs.items():
        arr = np.asarray(arr)
        text = f"{name}: {arr.dtype}{list(arr.shape)}"
        if arr.size <= 8:
            text += " " + np.array2string(arr.reshape(-1), precision=17)
        parts.append(text)
    return ", ".join(parts)


def _run_properties(judge: ArrayJudge, examples: int, shrink: bool, xfails, skips) -> None:
    """Random examples. One whose flags a skip entry names is not run; one an xfail
    entry names that fails is xfailed (the first per set of flags kept) and the search
    goes on for failures no entry names. A failure is shrunk unless it is already
    named: a vector or sweep case of the op failed (or xfailed), or an xfail entry
    names the op's properties; the first failing example is reported then."""
    report = judge.report
    name = judge.op.name
    if examples <= 0 or any(e.matches(name, "properties") for e in skips):
        return
    named = bool(report.failures or report.xfailed) or any(
        e.part == "properties" and e.matches(name, "properties") for e in xfails)
    shrink = shrink and not named
    last: dict[str, Any] = {"count": 0, "unsupported": 0, "stage": "drawing an example"}
    xfailed_flags: set[tuple[str, ...]] = set()
    what = "minimal failing example" if shrink else "failing example" + (" (not shrunk: already named)" * named)

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
        layout = data.draw(st.sampled_from(layouts(case.inputs)), label="layout")
        last["stage"] = "judging an example"
        judge.at = (f"property example {last['count'] + 1}", flags)
        try:
            problem = judge_case(judge, case, layout, "property")
        except NotImplementedError:
            last["unsupported"] += 1
            assume(False)
        last["count"] += 1
        if problem is None:
            return
        seen = judge.seen
        failure = judge.failure("property", f"{what}: {_describe_inputs(case)}, {layout} layout", flags, case,
                                problem, seen=seen, classify=True, hint=False)
        if by_flag(xfails, name, failure.flags) or by_flag(xfails, name, flags):
            if failure.flags not in xfailed_flags:
                xfailed_flags.add(failure.flags)
                report.xfailed.append(replace(failure, comment=failure.comment.replace("minimal ", "", 1)))
            return
        last["failure"], last["evidence"] = failure, (case, seen)
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
        else:
            case, seen = last["evidence"]
            if seen is not None and not seen.cmp.ok:
                failure.fits = judge.fits(case, seen)
                failure.hint = judge.hint_for(failure.fits)
            if not isinstance(exc, AssertionError):  # e.g. hypothesis' Flaky: the failure did not repeat
                failure = replace(failure, detail=f"{failure.detail} (then {short(exc)})")
    report.examples += last["count"]
    report.unsupported += last["unsupported"]
    settle(report, failure, name, "properties", xfails)

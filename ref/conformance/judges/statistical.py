"""The judge of statistical ops: the candidate draws its own random numbers, so each
check calls it `op.calls` times with distinct seeds and tests the samples against
the oracle's distribution (ref.testing.statistical: stray values fail outright,
pooled classes get exact binomial tests at a level split from the op's stated
false-alarm rate, a rejection is confirmed by one re-run with fresh seeds).

Checks: the golden vectors, then `settings.examples` random cases (hypothesis,
generate phase only: a statistical failure is not shrunk). Skips and xfails work as
for array ops: by op, vector id, flag, or 'properties'. A crash, an exit, an output
that is not an array of the outcomes' shape and dtype, or a modified input is a
named failure; NotImplementedError declines the case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings as hsettings
from hypothesis import strategies as st

from ref.conformance.hygiene import check_unmodified, lay_out, layouts
from ref.conformance.judges.arrays import by_flag, settle, undeclared, verdict
from ref.conformance.judges.candidate import (BadOutput, CandidateExit, Watch, call_candidate, describe_problem,
                                              numeric_output, short)
from ref.conformance.report import Failure, OpReport
from ref.testing.statistical import Fit, StatisticalOp, check_level, fit, seeds
from ref.testing.vector_files import Case, Vector, load_vectors

__all__ = ["RERUN_NOTE", "judge_case", "run_op"]

class _Declined(Exception):
    """The candidate raised NotImplementedError: the case is not supported."""


def _call(fn, kwargs: dict[str, Any], watch: Watch | None, at: tuple[str, tuple]) -> Any:
    """call_candidate, with NotImplementedError turned into the decline signal."""
    try:
        return call_candidate(fn, kwargs, watch=watch, at=at)
    except NotImplementedError:
        raise _Declined() from None


class _Bad(Exception):
    """A candidate call gave no usable sample: the detail says why."""


def _sample(fn, case: Case, seed_: int, shape, dtype, watch, at, layout: str = "C") -> np.ndarray:
    """One candidate call's sample, its inputs laid out in memory as `layout` says
    (hygiene.lay_out), checked; _Bad names what is wrong with it."""
    inputs = {k: lay_out(np.asarray(v), layout) for k, v in case.inputs.items()}
    try:
        raw = _call(fn, {**inputs, "seed": seed_, **case.params}, watch, at)
        check_unmodified(inputs, case.inputs)
        if isinstance(raw, (list, dict, str, bytes)):
            raise BadOutput(f"expected one array of samples, got a {type(raw).__name__}")
        out = numeric_output(raw)
    except _Declined:
        raise
    except Exception as exc:  # a crash, an exit, a modified input or an unusable output
        raise _Bad(describe_problem(exc) + _in(layout)) from None
    if out.dtype != dtype or out.shape != shape:
        raise _Bad(f"expected samples of dtype {dtype} and shape {shape}, got {out.dtype} {out.shape}{_in(layout)}")
    return out


def _in(layout: str) -> str:
    return "" if layout == "C" else f" (inputs in {layout} layout)"


def judge_case(op: StatisticalOp, fn, case: Case, expected, level: float, base: int, check: int,
               watch: Watch | None = None, at: tuple[str, tuple] = ("", ())) -> tuple[Fit, Fit | None]:
    """(first attempt, confirming re-run or None) of one check: `op.calls` samples
    with seeds of (base, check, attempt), tested at `level`. A candidate's
    NotImplementedError passes out as the judge's decline signal."""
    outcomes, probabilities = (np.asarray(a) for a in expected)
    shape, dtype = outcomes.shape[:-1], outcomes.dtype
    kinds = layouts(case.inputs)  # call i gets its inputs in layout i mod len(kinds)
    attempts: list[Fit] = []
    for attempt in (0, 1):
        try:
            samples = np.stack([_sample(fn, case, s, shape, dtype, watch, at, kinds[i % len(kinds)])
                                for i, s in enumerate(seeds(base, check, attempt, op.calls))])
        except _Bad as bad:
            attempts.append(Fit(False, str(bad), 0.0, level, 0, True))
            break
        result = fit(outcomes, probabilities, samples, level, op.same)
        if not result.ok and result.deterministic and len(kinds) > 1:
            result = replace(result, detail=f"{result.detail} (call i has its inputs in layout i mod {len(kinds)} "
                                            f"of {', '.join(kinds)})")
        attempts.append(result)
        if result.ok or result.deterministic:
            break
    return attempts[0], (attempts[1] if len(attempts) > 1 else None)


def _verdict_detail(first: Fit, rerun: Fit | None) -> str | None:
    """None when the check passes; else the failure's detail."""
    if first.ok or (rerun is not None and rerun.ok):
        return None
    if rerun is None:
        return first.detail
    return f"{first.detail}; confirmed by a re-run with fresh seeds: {rerun.detail}"


RERUN_NOTE = "checks rejected on their first attempt and passed the re-run with fresh seeds"


def _record(report: OpReport, first: Fit, rerun: Fit | None) -> None:
    report.compared += 1
    if rerun is not None and rerun.ok:
        kept = [n for n in report.notes if n.endswith(RERUN_NOTE)]
        count = int(kept[0].split()[0]) + 1 if kept else 1
        report.notes[:] = [n for n in report.notes if not n.endswith(RERUN_NOTE)] + [f"{count} {RERUN_NOTE}"]
    report.unit, report.tolerance = "level/p-value", 1.0
    last = rerun or first
    worst = np.inf if last.pvalue == 0 else min(last.level / last.pvalue, 1e300)
    report.worst = max(report.worst, worst if not last.ok else min(worst, 1.0))


def _vector_case(op: StatisticalOp, v: Vector, supported: Mapping[str, Sequence[Any]], dtypes) -> Case | None:
    """The vector's call under this implementation's variants, or None to skip it."""
    params = dict(v.params)
    if undeclared(op, supported, params):
        return None
    params.update({a: values[0] for a, values in supported.items() if a not in params})
    case = Case(v.inputs, params)
    return case if v.result == "invalid" or _accepts(case, dtypes) else None


def _accepts(case: Case, dtypes: Mapping[str, Sequence[str]]) -> bool:
    def native(arr) -> str:
        return str(np.asarray(arr).dtype.newbyteorder("="))

    return all(native(a) in dtypes.get(n, (native(a),)) for n, a in case.inputs.items())


def run_op(op: StatisticalOp, fn, impl, settings, report: OpReport, watch: Watch | None = None, *,
           seed_base: int | None = None, vectors: Sequence[Vector] | None = None,
           stop_at_failure: bool = False) -> None:
    """Judge `fn` on a statistical op and fill `report` (judge protocol,
    ref/conformance/judges). `seed_base` replaces the op's seed, so that repeated runs
    are independent (the power and false-alarm measurements use it); `vectors`
    replaces the golden folder's (tests build them from the op directly);
    `stop_at_failure` ends the run at its first failure, when only the verdict matters."""
    base = op.seed if seed_base is None else seed_base
    name, skips, xfails = op.name, settings.skips, settings.xfails
    supported, dtypes = impl.supported(op), impl.accepted_dtypes(op)
    vectors = load_vectors(name, settings.golden) if vectors is None else vectors
    planned = []
    for v in vectors:
        case = None if any(e.matches(name, str(v.id), v.flags) for e in skips) else _vector_case(op, v, supported, dtypes)
        if case is None:
            report.vectors_skipped += 1
        else:
            planned.append((v, case))
    run_examples = settings.examples > 0 and not any(e.matches(name, "properties") for e in skips)
    checks = sum(v.result != "invalid" for v, _ in planned) + (settings.examples if run_examples else 0)
    level = check_level(op.false_alarm, max(1, checks))
    counter = iter(range(1 << 30))

    for v, case in planned:
        at = (f"vector {v.id}", tuple(v.flags))
        try:
            problem = _rejects(op, fn, case, base, watch, at) if v.result == "invalid" else \
                _check(op, fn, case, v.expected, level, base, next(counter), report, watch, at)
        except _Declined:
            report.vectors_skipped += 1
            report.unsupported += 1
            continue
        report.vectors_run += 1
        failure = None if problem is None else Failure(at[0], v.comment, v.flags, dict(case.params), problem,
                                                       vector=v.id if isinstance(v.id, int) else None)
        settle(report, failure, name, str(v.id), xfails, v.flags)
        if stop_at_failure and report.failures:
            break

    if run_examples and not (stop_at_failure and report.failures):
        _run_properties(op, fn, settings.examples, base, level, counter, report, xfails, skips, supported,
                        dtypes, watch)
    if report.unsupported:
        report.notes.append(f"not judged: {report.unsupported} cases declined with NotImplementedError (features not provided)")
    report.notes.append(f"{checks} checks of {op.calls} calls each at level {level:.3g} per check "
                        f"(false-alarm rate {op.false_alarm:g} per run, confirmed by a re-run)")
    report.verdict = verdict(report, [e for e in xfails if e.matches(name, "*") and e.part == "*"])


def _check(op, fn, case, expected, level, base, check, report, watch, at) -> str | None:
    try:
        expected = expected if expected is not None else op.distribution(case.inputs, case.params)
    except Exception as exc:
        return f"the oracle raised {short(exc)} on this case (a defect of the suite: please report it)"
    first, rerun = judge_case(op, fn, case, expected, level, base, check, watch, at)
    _record(report, first, rerun)
    return _verdict_detail(first, rerun)


def _rejects(op, fn, case: Case, base: int, watch, at) -> str | None:
    """An invalid input must be refused with an exception (exiting is not refusing)."""
    try:
        _call(fn, {**{k: np.array(v, copy=True) for k, v in case.inputs.items()}, "seed": base, **case.params},
              watch, at)
    except CandidateExit as exc:
        return str(exc)
    except Exception:  # any rejection counts (NotImplementedError too): the input must not be processed
        return None
    return "accepted an input the spec says is invalid"


def _run_properties(op, fn, examples, base, level, counter, report, xfails, skips, supported, dtypes, watch):
    state: dict[str, Any] = {"failure": None, "count": 0}
    xfailed_flags: set = set()

    @seed(base)
    @hsettings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck),
               phases=(Phase.generate,))
    @given(st.data())
    def prop(data):
        if state["failure"] is not None:
            return
        case = data.draw(op.examples(supported), label="case")
        if not _accepts(case, dtypes):
            return
        flags = tuple(op.case_flags(case)) if op.case_flags else ()
        if by_flag(skips, op.name, flags):
            return
        at = (f"property example {state['count'] + 1}", flags)
        try:
            problem = _check(op, fn, case, None, level, base, next(counter), report, watch, at)
        except _Declined:
            report.unsupported += 1
            return
        state["count"] += 1
        if problem is None:
            return
        failure = Failure("property", f"example {state['count']} (not shrunk): {_describe(case)}", flags,
                          dict(case.params), problem)
        if by_flag(xfails, op.name, flags):
            if flags not in xfailed_flags:
                xfailed_flags.add(flags)
                report.xfailed.append(failure)
            return
        state["failure"] = failure

    try:
        prop()
    except Exception as exc:  # a strategy or hypothesis error: still a named failure
        state["failure"] = state["failure"] or Failure("property", "drawing an example raised", (), {}, short(exc))
    report.examples += state["count"]
    settle(report, state["failure"], op.name, "properties", xfails)


def _describe(case: Case) -> str:
    parts = []
    for name, arr in case.inputs.items():
        arr = np.asarray(arr)
        values = np.unique(arr.reshape(-1)) if arr.size else arr.reshape(-1)
        shown = np.array2string(values[:8], precision=17) + (" ..." if values.size > 8 else "")
        parts.append(f"{name}: {arr.dtype}{list(arr.shape)}, distinct values {shown}")
    return ", ".join(parts)

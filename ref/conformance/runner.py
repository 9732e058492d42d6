"""The conformance runner: selects the catalogued ops an implementation provides and
has each judged by the judge of its kind (ref.conformance.judges), in process or
in a child process each, into one Report.

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

import difflib
import platform
import time
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

import ref
from ref.conformance.catalog import discover, flags
from ref.conformance.implementation import Implementation
from ref.conformance.judges import Settings, judge_module
from ref.conformance.judges.candidate import BadOutput, CandidateExit, Watch, short
from ref.conformance.report import VERDICTS, Entry, Failure, OpReport, Report, parse_entries, versions
from ref.conformance.reproducible import reproducible_draws
from ref.testing.catalog_types import Operation
from ref.testing.vector_files import load_manifest

__all__ = ["BadOutput", "CandidateExit", "Entry", "Failure", "OpReport", "Report", "Settings", "VERDICTS",
           "annotate", "check_entries", "parse_entries", "run", "run_op"]


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
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"--examples: expected a whole number >= 0 (0: no random examples), got {examples!r}")
    check_entries(catalog, golden=golden, skips=skips, xfails=xfails)
    for op in selected:  # a declaration error is the user's, raised before anything runs
        if op.name in impl.ops:
            impl.supported(op)
    chosen = Settings(examples, shrink, tuple(skips), tuple(xfails), golden, large)
    if isolate:
        from ref.conformance.isolation import isolated_runner

        run_one = isolated_runner(impl, chosen, timeout=timeout)
    else:
        def run_one(op: Operation) -> OpReport:
            return run_op(op, impl, chosen)

    report = Report({"name": impl.name, "version": impl.version, "source": impl.source}, [],
                    _meta(chosen, ops, golden, isolate, timeout), complete=False)
    op = None
    try:
        with reproducible_draws():  # the same examples however ref is installed; no .hypothesis/ here
            for op in selected:
                if progress:
                    progress(op.name)
                report.ops.append(annotate(run_one(op), op))
                report.meta["versions"] = versions()
                if on_op:
                    on_op(report)
    except KeyboardInterrupt:
        report.meta["interrupted"] = (f"KeyboardInterrupt while {op.name} ran; "
                                      f"{len(selected) - len(report.ops)} of {len(selected)} ops not reported")
        return report
    report.meta["versions"] = versions()  # the implementation's libraries are imported by now
    report.complete = True
    return report


def annotate(report: OpReport, op: Operation) -> OpReport:
    """Each failure and xfail of `report` named with its op, its spec section and the
    bug text of each of its flags (the catalog's flags)."""
    notes = flags()
    for failure in (*report.failures, *report.xfailed):
        failure.op = failure.op or op.name
        failure.spec = failure.spec or op.spec
        failure.flag_text = failure.flag_text or {f: notes[f].bug for f in failure.flags if f in notes}
    return report


CHECKS = ("*", "exhaustive", "large", "properties")  # the parts an entry may name besides vector ids and flags


def check_entries(catalog, *, golden: Path | None = None, **kinds: Sequence[Entry]) -> None:
    """A skip or xfail entry must name catalog ops and a part that exists (a vector id
    one of those ops has in the golden folder, a flag, a check): a misspelt op, flag or
    id would otherwise match nothing, silently."""
    known = flags()
    counts = {name: info["vectors"] for name, info in load_manifest(golden)["ops"].items()}
    for kind, entries in kinds.items():
        for e in entries:
            where = f"{kind}: {e.op}" + ("" if e.part == "*" else f"/{e.part}")
            named = [name for name in catalog if fnmatchcase(name, e.op)]
            if not named:
                close = difflib.get_close_matches(e.op, catalog, n=1)
                raise ValueError(f"{where} names no operation of the catalog"
                                 + (f" (did you mean {close[0]!r}?)" if close else
                                    " (`python -m ref list --names` shows them)"))
            if e.part.isdigit():
                if not any(1 <= int(e.part) <= counts.get(name, 0) for name in named):
                    most = max(counts.get(name, 0) for name in named)
                    raise ValueError(f"{where}: no vector {e.part} (the op{'s' * (len(named) > 1)} named "
                                     f"{'have' if len(named) > 1 else 'has'} vectors 1 to {most})")
            elif not (e.part in CHECKS or e.part in known):
                close = difflib.get_close_matches(e.part, [*known, *CHECKS[1:]], n=1)
                raise ValueError(f"{where}: {e.part!r} is not a vector id, a flag or one of "
                                 f"{', '.join(CHECKS[1:])}" + (f" (did you mean {close[0]!r}?)" if close else ""))


def _meta(chosen: Settings, ops, golden, isolate: bool, timeout: float) -> dict[str, Any]:
    manifest = load_manifest(golden)
    return {
        "suite": {"name": "llm-ref", "version": ref.__version__},
        "golden": {"generator_version": manifest["generator_version"], "golden_format": manifest["golden_format"]},
        "platform": {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {"examples": chosen.examples, "ops": list(ops or []), "large": chosen.large,
                     "isolate": isolate, **({"timeout": timeout} if isolate else {})},
        # the entries the run was given, with their reasons (the HTML report shows an xfail's)
        "skips": [{"op": e.op, "part": e.part, "reason": e.reason} for e in chosen.skips],
        "xfails": [{"op": e.op, "part": e.part, "reason": e.reason} for e in chosen.xfails],
    }


def run_op(op: Operation, impl: Implementation, chosen: Settings, watch: Watch | None = None) -> OpReport:
    """One op's report, from the judge of its kind; anything the checks raise is a
    named failure of the op."""
    report = OpReport(op.name, op.kind.value, op.spec)
    fn = impl.ops.get(op.name)
    if fn is None:
        report.verdict = "not covered"
        return report
    whole_skip = [e for e in chosen.skips if e.matches(op.name, "*") and e.part == "*"]
    if whole_skip:
        report.verdict = "skipped"
        report.notes.append(whole_skip[0].reason)
        return report
    try:
        judge_module(op.kind).run_op(op, fn, impl, chosen, report, watch)
    except Exception as exc:
        report.failures.append(Failure("op", "the runner could not finish judging this op", (), {},
                                       f"raised {short(exc)}"))
        report.verdict = "fail"
    if report.verdict == "pass" and not (report.vectors_run or report.examples or report.exhaustive_cases
                                         or report.compared):
        # nothing judged the op (its vectors missing from the golden folder, no examples drawn): not a pass
        where = chosen.golden or "the bundled golden folder"
        report.failures.append(Failure("op", "nothing judged this op", (), {},
                                       f"no golden vector for it in {where} and no random example"))
        report.verdict = "fail"
    return annotate(report, op)

"""A wrong kernel never crashes the run: whatever the candidate raises or returns is a
named failure of that op and check, the other ops still run, the report is written
(strict JSON). A KeyboardInterrupt stops the run with the partial report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation
from ref.conformance.judges.arrays import judge_case
from ref.conformance.judges.bounded import BoundedJudge
from ref.conformance.judges.exact import ExactJudge
from ref.conformance.judges import statistical
from ref.conformance.report import OpReport
from ref.conformance.runner import run
from ref.testing.catalog_types import Kind
from ref.testing.vector_files import Case, load_vectors

OPS = discover()
JUDGES = {Kind.EXACT: ExactJudge, Kind.BOUNDED: BoundedJudge}
TESTS = Path(__file__).parent


class _Refuses:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("no array here")


class _Custom(BaseException):
    pass


def _raise(exc):
    raise exc


def _exit(**kw):
    sys.exit(3)


# kind -> candidate body (it gets the op's keyword arguments)
GARBAGE = {
    "None": lambda **kw: None,
    "a string": lambda **kw: "0x3f",
    "a dict": lambda **kw: {"out": np.zeros(3)},
    "a ragged list": lambda **kw: [[1.0], [1.0, 2.0]],
    "an object array": lambda **kw: np.array([object(), object()]),
    "a generator": lambda **kw: (x for x in range(3)),
    "a tuple of the wrong length": lambda **kw: (np.zeros(2), np.zeros(2), np.zeros(2)),
    "a tuple of garbage": lambda **kw: (None, "x"),
    "a structured array": lambda **kw: np.zeros(4, dtype=[("a", np.float32)]),
    "an object refusing conversion": lambda **kw: _Refuses(),
    "a wrong shape": lambda **kw: np.full(7, 0.5, np.float32),
    "a float scalar": lambda **kw: 0.5,
    "ValueError": lambda **kw: _raise(ValueError("bad kernel")),
    "SystemExit": _exit,
    "a BaseException subclass": lambda **kw: _raise(_Custom("odd")),
    "RecursionError": lambda **kw: _raise(RecursionError("deep")),
}


def _a_case(op) -> Case:
    """The op's first valid golden vector, under the catalog defaults."""
    for v in load_vectors(op.name):
        case = Case(v.inputs, {**op.defaults, **v.params})
        if v.result != "invalid" and np.asarray(v.expected if not isinstance(v.expected, tuple)
                                                else v.expected[0]).size:
            try:
                op.oracle(**case.inputs, **case.params)
            except (TypeError, ValueError):
                continue
            return case
    raise AssertionError(f"{op.name}: no valid vector")


def _problem(op, body, case) -> str | None:
    """What the judge of the op's kind says of one candidate on one case."""
    if op.kind is Kind.STATISTICAL:
        first, _ = statistical.judge_case(op, body, case, op.distribution(case.inputs, case.params), 1e-3, 0, 0)
        return None if first.ok else first.detail
    judge = JUDGES[op.kind](op, body, Implementation("garbage", {op.name: body}), OpReport(op.name, "", ""))
    return judge_case(judge, case, "C", "test")


@pytest.mark.parametrize("name", [n for n, op in OPS.items() if op.kind is not Kind.STATEFUL])  # test_stateful's
def test_every_kind_of_garbage_is_a_named_problem_for_every_op(name):
    op = OPS[name]
    case = _a_case(op)
    for kind, body in GARBAGE.items():
        problem = _problem(op, body, case)
        assert problem, f"{kind} accepted"
        if kind in ("SystemExit", "a BaseException subclass"):
            assert "it must raise an Exception" in problem, problem


def test_a_garbage_candidate_fails_every_op_by_name_and_the_run_completes():
    """Every catalogued op, each call answered with the next kind of garbage."""
    kinds = list(GARBAGE.values())
    seen: dict[str, list[int]] = {}

    def candidate(name):
        start = list(OPS).index(name)

        def call(**kw):
            got = seen.setdefault(name, [])
            got.append((start + len(got)) % len(kinds))
            return kinds[got[-1]](**kw)

        return call

    report = run(Implementation("garbage", {name: candidate(name) for name in OPS}), examples=3, shrink=False)
    assert report.complete and not report.ok
    assert [r.op for r in report.ops] == list(OPS)
    for row in report.ops:
        assert row.verdict == "fail", row.op
        for f in row.failures:
            assert f.where.startswith(("vector ", "exhaustive case", "property", "latitude", "trace ")), (row.op, f)
            assert f.detail and "could not" not in f.detail, (row.op, f.describe())
    assert all(len(set(seen[name])) >= 3 for name in OPS), {n: len(set(k)) for n, k in seen.items()}
    _strict(report.to_json())


def test_sys_exit_fails_that_op_and_the_next_op_runs():
    impl = Implementation("exits", {"formats.float8_e4m3fn.encode": _exit,
                                    "formats.float8_e5m2.encode": discover()["formats.float8_e5m2.encode"].oracle})
    report = run(impl, ops=["formats.float8_e4m3fn.encode", "formats.float8_e5m2.encode"], examples=2, shrink=False)
    rows = {r.op: r for r in report.ops}
    assert report.complete
    assert rows["formats.float8_e4m3fn.encode"].verdict == "fail"
    assert "SystemExit: 3" in rows["formats.float8_e4m3fn.encode"].failures[0].detail
    assert rows["formats.float8_e5m2.encode"].verdict == "pass"


def _interrupt(**kw):
    raise KeyboardInterrupt


# Loadable as --impl test_runner_robustness:INTERRUPTED (the second op is interrupted).
INTERRUPTED = {"formats.float8_e4m3fn.decode": lambda codes: np.zeros(np.shape(codes), np.float32),
               "formats.float8_e5m2.decode": _interrupt}


def test_keyboard_interrupt_stops_the_run_with_the_partial_report():
    seen = []
    report = run(Implementation("interrupted", INTERRUPTED), ops=list(INTERRUPTED), examples=2,
                 shrink=False, on_op=lambda partial: seen.append(len(partial.ops)))
    assert not report.complete and not report.ok
    assert [r.op for r in report.ops] == ["formats.float8_e4m3fn.decode"]
    assert "KeyboardInterrupt while formats.float8_e5m2.decode ran" in report.meta["interrupted"]
    assert seen == [1]
    doc = _strict(report.to_json())
    assert doc["complete"] is False and doc["ok"] is False


def test_the_command_line_writes_the_partial_report_on_interrupt(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "ref", "conform", "--impl", "test_runner_robustness:INTERRUPTED",
                             "--ops", ",".join(INTERRUPTED), "--examples", "2", "--report", str(out)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 130, result.stdout + result.stderr
    assert "INCOMPLETE: KeyboardInterrupt" in result.stdout
    doc = _strict(out.read_text())
    assert doc["complete"] is False and [r["op"] for r in doc["ops"]] == ["formats.float8_e4m3fn.decode"]


def test_the_report_is_strict_json_with_non_finite_numbers_as_strings():
    report = run(Implementation("wrong", {"formats.float8_e4m3fn.decode": lambda codes: np.full(
        np.shape(codes), np.nan, np.float32)}), ops=["formats.float8_e4m3fn.decode"], examples=0)
    row = report.ops[0]
    assert row.verdict == "fail" and row.worst == np.inf
    doc = _strict(report.to_json())
    assert doc["ops"][0]["worst"] == "inf"
    bare = re.compile(r'[:\[,]\s*-?(Infinity|NaN)\b')  # a value, not a key or a string (flag names are keys)
    assert not bare.search(report.to_json())


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _warns(**kw):
    import warnings

    warnings.warn("a kernel's own warning", RuntimeWarning)
    with np.errstate(over="warn"):
        np.array([1e300]).astype(np.float16)  # numpy's overflow warning
    return discover()["formats.float8_e5m2.encode"].oracle(**kw)


def test_a_kernel_s_warnings_stay_out_of_the_run_s_output(recwarn):
    report = run(Implementation("warns", {"formats.float8_e5m2.encode": _warns}),
                 ops=["formats.float8_e5m2.encode"], examples=3, shrink=False)
    assert report.ops[0].verdict == "pass"
    assert report.ops[0].compared > 3
    assert not [w for w in recwarn if "kernel's own" in str(w.message) or "overflow" in str(w.message)]

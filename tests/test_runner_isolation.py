"""Isolation mode (`conform --isolate --timeout S`): a kernel that hangs, exits or
crashes the process fails its own op, by name, and the other ops still run; the
report file is valid JSON after every op, so a killed run leaves a partial report."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run

TESTS = Path(__file__).parent
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="signals and fork-free children as on POSIX")


def _sleeps(x, **kw):
    time.sleep(60)


def _os_exit(x, **kw):
    os._exit(7)


def _sys_exit(x, **kw):
    sys.exit(3)


def _segfault(x, **kw):
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def _correct(**kw):
    return discover()["formats.float8_e4m3fnuz.encode"].oracle(**kw)  # the oracle itself: correct by definition


# Loadable as --impl test_runner_isolation:BROKEN in the child processes.
BROKEN = {
    "formats.bfloat16.encode": _sys_exit,
    "formats.float16.encode": _segfault,
    "formats.float8_e4m3fn.encode": _sleeps,
    "formats.float8_e4m3fnuz.encode": _correct,
    "formats.float8_e5m2.encode": _os_exit,
}


def _dies_on_nan(x, **kw):
    if np.isnan(np.asarray(x, np.float64)).any():
        os._exit(9)
    return discover()["formats.float8_e4m3fn.encode"].oracle(x=x, **kw)


DIES_ON_NAN = {"formats.float8_e4m3fn.encode": _dies_on_nan}
SLOW_THEN_CORRECT = {"formats.float8_e4m3fnuz.encode": _correct, "formats.float8_e5m2.encode": _sleeps}


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    return [sys.executable, "-m", "ref", "conform", *args], env


def _strict(text: str):
    def refuse(constant):
        raise ValueError(constant)

    return json.loads(text, parse_constant=refuse)


def _schema_errors(doc) -> None:
    """The report validates against spec/report.schema.json."""
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    schema = json.loads((TESTS.parent / "spec" / "report.schema.json").read_text())
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
    assert not errors, errors[:5]


def test_each_crash_fails_its_own_op_and_the_others_run(tmp_path):
    out = tmp_path / "r.json"
    cmd, env = _cli("--impl", "test_runner_isolation:BROKEN", "--ops", ",".join(BROKEN), "--examples", "2",
                    "--no-shrink", "--isolate", "--timeout", "1", "--report", str(out))
    temp = tmp_path / "temp"  # the run's temporary directories: killed children leave none behind
    temp.mkdir()
    result = subprocess.run(cmd, capture_output=True, text=True, env={**env, "TMPDIR": str(temp)}, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert not list(temp.iterdir())
    doc = _strict(out.read_text())
    _schema_errors(doc)
    rows = {r["op"]: r for r in doc["ops"]}
    assert list(rows) == sorted(BROKEN)

    def failure(op):
        assert rows[op]["verdict"] == "fail", rows[op]
        (f,) = rows[op]["failures"]
        return f

    hung = failure("formats.float8_e4m3fn.encode")
    assert hung["where"] == "vector 1" and "did not return within 1 s" in hung["detail"]
    assert hung["comment"] == "the implementation's call hung"
    crashed, exited = failure("formats.float16.encode"), failure("formats.float8_e5m2.encode")
    assert "died of SIGSEGV" in crashed["detail"] and "exited with status 7" in exited["detail"]
    assert crashed["where"] == exited["where"] == "vector 1"
    assert crashed["op"] == "formats.float16.encode" and crashed["spec"] == "spec/formats.md#encode"
    assert crashed["vector"] is None or crashed["vector"] == 1  # the child died: the parent names the check
    assert crashed["comment"] == exited["comment"] == "the implementation's call ended the process"
    assert "SystemExit: 3" in rows["formats.bfloat16.encode"]["failures"][0]["detail"]
    assert rows["formats.float8_e4m3fnuz.encode"]["verdict"] == "pass"
    assert "SIGSEGV" in result.stdout and "vector 1" in result.stdout


def test_a_death_mid_op_names_the_vector_its_inputs_and_the_checks_before_it(tmp_path):
    """The child's verdicts die with it; the parent still names the vector it died on, with
    that vector's inputs and params from the golden file, and the checks that came back."""
    from ref.testing.vector_files import load_vectors

    out = tmp_path / "r.json"
    cmd, env = _cli("--impl", "test_runner_isolation:DIES_ON_NAN", "--examples", "0", "--isolate",
                    "--report", str(out))
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    (row,) = [r for r in _strict(out.read_text())["ops"] if r["verdict"] != "not covered"]
    (f,) = row["failures"]
    vectors = {v.id: v for v in load_vectors("formats.float8_e4m3fn.encode")}
    vector = vectors[f["vector"]]
    assert f["where"] == f"vector {vector.id}" and np.isnan(np.asarray(vector.inputs["x"], np.float64)).any()
    assert "exited with status 9" in f["detail"] and "nan" in f["inputs"]["x"]
    assert f["params"] == dict(vector.params)
    before = int(f["detail"].partition("before it, ")[2].split()[0])
    assert 0 < before < vector.id and "calls returned (vector 1, vector 2" in f["detail"]


def test_a_killed_run_leaves_a_valid_partial_report(tmp_path):
    out = tmp_path / "r.json"
    cmd, env = _cli("--impl", "test_runner_isolation:SLOW_THEN_CORRECT", "--ops", ",".join(SLOW_THEN_CORRECT),
                    "--examples", "2", "--isolate", "--timeout", "60", "--report", str(out))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(0.5)  # the second op's child is now asleep in its first call
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the runner and its child, as a killed job would go
        proc.wait()
    doc = _strict(out.read_text())
    _schema_errors(doc)
    assert doc["complete"] is False and doc["ok"] is False
    assert [r["op"] for r in doc["ops"]] == ["formats.float8_e4m3fnuz.encode"]
    assert doc["ops"][0]["verdict"] == "pass"


def test_isolation_needs_an_implementation_it_can_load_again():
    with pytest.raises(ValueError, match="isolate"):
        run(Implementation("in memory", {"formats.float16.encode": _correct}), isolate=True)


def test_timeout_is_positive_and_only_with_isolate(tmp_path):
    with pytest.raises(ValueError, match="timeout"):
        run(Implementation("x", {"formats.float16.encode": _correct}, source="x"), timeout=0)
    cmd, env = _cli("--timeout", "3")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and "--timeout: only with --isolate" in result.stderr

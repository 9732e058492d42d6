"""The pytest route: `pytest --pyargs ref.conformance --ref-impl my_adapter`, run as a
user runs it, from a directory holding the adapter."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ref.conformance.catalog import discover
from ref.conformance.report import version_holds
from test_cli import child_env

ROOT = Path(__file__).resolve().parents[1]
SWAPPED = ("from corpus.formats_impls import SWAPPED_NIBBLES\n"
           "OPS = {k: v for k, v in SWAPPED_NIBBLES.ops.items() if k.startswith('formats.float4_e2m1fn.')}\n")
CORRECT = ("from corpus.formats_impls import CORRECT\n"
           "OPS = {k: CORRECT.ops[k] for k in ('formats.float8_e4m3fn.decode', 'formats.float8_e5m2.decode')}\n")


def pytest_script() -> str:
    """The `pytest` console script: unlike `python -m pytest`, it does not put the
    current directory on sys.path, which is what a user's adapter needs."""
    beside = Path(sys.executable).with_name("pytest")
    found = str(beside) if beside.exists() else shutil.which("pytest")
    if not found:
        pytest.skip("no pytest console script beside this Python")
    return found


def run_pytest(args, cwd):
    return subprocess.run([pytest_script(), "-p", "no:cacheprovider", *args], capture_output=True, text=True,
                          env=child_env(), cwd=cwd, timeout=600)


def test_readme_s_command_works_as_written_from_the_adapter_s_directory(tmp_path):
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"`(pytest --pyargs ref\.conformance --ref-impl my_adapter[^`]*)`", readme).group(1)
    (tmp_path / "my_adapter.py").write_text(CORRECT)
    args = shlex.split(command)[1:]
    result = run_pytest([*args, "--ref-examples", "3"], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 passed" in result.stdout and f"{len(discover()) - 2} skipped" in result.stdout
    junit = (tmp_path / "out.xml").read_text()
    assert "formats.float8_e4m3fn.decode" in junit and "formats.float8_e5m2.decode" in junit


def test_a_wrong_kernel_fails_with_the_details_and_no_assert_noise(tmp_path):
    (tmp_path / "my_adapter.py").write_text(SWAPPED)
    result = run_pytest(["--pyargs", "ref.conformance", "--ref-impl", "my_adapter", "-k", "float4_e2m1fn",
                         "--ref-examples", "3", "--junitxml=junit.xml"], tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    out = result.stdout
    assert "NibbleOrder" in out and "two distinct codes show which nibble is element 0" in out
    assert "catches FP4 nibbles packed high-first" in out  # the flag's bug text
    assert "assert 'fail' != 'fail'" not in out and "AssertionError" not in out
    assert "JSON report" not in out  # none is written, so none is mentioned
    assert "formats.float4_e2m1fn.pack" in (tmp_path / "junit.xml").read_text()


@pytest.mark.parametrize("source, words", [
    ("OPS = {'formats.float8_e4m3fn.encdoe': print}\n", ["encdoe", "did you mean"]),
    ("OPS = {'formats.float8_e4m3fn.encode': 3}\n", ["callable"]),
    ("import no_such_dependency_xyz\nOPS = {}\n", ["no_such_dependency_xyz"]),
])
def test_a_broken_adapter_is_one_usage_error(tmp_path, source, words):
    """Not one error per op of the catalog: the session stops before collecting."""
    (tmp_path / "my_adapter.py").write_text(source)
    result = run_pytest(["--pyargs", "ref.conformance", "--ref-impl", "my_adapter"], tmp_path)
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    text = result.stdout + result.stderr
    assert text.count("--ref-impl: ") == 1 and "During handling" not in text, text[-2000:]
    for word in words:
        assert word in text


def test_a_misspelt_xfails_entry_is_one_usage_error(tmp_path):
    (tmp_path / "my_adapter.py").write_text(CORRECT)
    (tmp_path / "my_adapter.xfails").write_text("formats.float8_e4m3fn.decdoe  a typo\n")  # shipped beside it
    result = run_pytest(["--pyargs", "ref.conformance", "--ref-impl", "my_adapter"], tmp_path)
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    text = result.stdout + result.stderr
    assert text.count("decdoe") == 1 and "did you mean 'formats.float8_e4m3fn.decode'" in text, text[-2000:]


def test_the_session_report_holds_every_op_it_ran(tmp_path):
    """One document over the session, under pytest-xdist too (the workers hand their
    ops to the controller)."""
    (tmp_path / "my_adapter.py").write_text(SWAPPED)
    workers = ["-n", "2"] if importlib.util.find_spec("xdist") else []
    result = run_pytest(["--pyargs", "ref.conformance", "--ref-impl", "my_adapter", "--ref-examples", "2",
                         "--ref-no-shrink", "--ref-report", "r.json", "-k", "float4_e2m1fn or e5m2", *workers],
                        tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text(), parse_constant=lambda c: pytest.fail(f"not strict: {c}"))
    assert [r["op"] for r in doc["ops"]] == [n for n in discover() if "float4_e2m1fn" in n or "e5m2" in n]
    verdicts = {r["op"]: r["verdict"] for r in doc["ops"]}
    assert verdicts["formats.float4_e2m1fn.pack"] == "fail" and verdicts["formats.float8_e5m2.decode"] == "not covered"
    assert doc["summary"]["fail"] == 2 and doc["summary"]["not covered"] == len(doc["ops"]) - 2
    assert doc["ok"] is False and doc["complete"] is True and doc["settings"]["examples"] == 2
    assert doc["implementation"]["source"] == "my_adapter"


def test_the_default_implementation_passes_under_pytest(tmp_path):
    result = run_pytest(["--pyargs", "ref.conformance", "-k", "e8m0 or e5m2fnuz", "--ref-examples", "3"], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    # ml_dtypes before 0.7.0 rounds E8M0 wrongly above 2^-127: an xfail under that condition
    assert ("xfailed" in result.stdout) == version_holds("ml-dtypes<0.7"), result.stdout[-500:]


def test_the_plugin_s_options_and_defaults_are_the_command_line_s():
    from ref.cli import build_parser
    from ref.conformance import pytest_plugin

    class Group:
        options: dict = {}

        def addoption(self, name, **kw):
            self.options[name] = kw

    group = Group()
    pytest_plugin.pytest_addoption(type("Parser", (), {"getgroup": lambda self, *a: group})())
    cli = vars(build_parser().parse_args(["conform"]))  # the command line's defaults
    for name in ("impl", "examples", "no_shrink", "large", "golden", "report", "skips_file", "xfails_file"):
        plugin = group.options[f"--ref-{name.replace('_', '-')}"]
        default = plugin.get("default", False if plugin.get("action") == "store_true" else None)
        assert default == cli[name], name
        assert (plugin.get("action") == "store_true") == isinstance(cli[name], bool), name


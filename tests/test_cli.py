"""The command line and the pytest plugin, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ref.conformance.catalog import discover

TESTS = Path(__file__).parent


def ref_cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-m", "ref", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def test_list_shows_every_op_with_kind_variants_vectors_and_spec():
    out = ref_cli("list").stdout
    for name, op in discover().items():
        line = next(l for l in out.splitlines() if l.startswith(name + " "))
        assert op.kind.value in line and op.spec in line
    assert "overflow=saturate|nonsaturating" in out
    assert ref_cli("list", "--names").stdout.split() == list(discover())


def test_golden_check_passes():
    result = ref_cli("golden", "--check")
    assert result.returncode == 0, result.stdout
    assert "match the oracles" in result.stdout


def test_conform_rejects_a_corpus_bug_and_names_the_vector(tmp_path):
    report = tmp_path / "r.json"
    result = ref_cli("conform", "--impl", "corpus.formats_impls:HALF_AWAY", "--examples", "5",
                     "--report", str(report))
    assert result.returncode == 1
    out = result.stdout
    assert "formats.float8_e4m3fn.encode" in out and " fail" in out
    assert "vector " in out and "TiesToEven" in out
    assert "first at index" in out and "bits " in out
    doc = json.loads(report.read_text())
    assert doc["ok"] is False
    assert doc["suite"]["name"] == "llm-ref" and doc["implementation"]["name"] == "round half away from zero"
    row = next(r for r in doc["ops"] if r["op"] == "formats.float8_e4m3fn.encode")
    assert row["verdict"] == "fail"
    assert any("TiesToEven" in f["flags"] and f["comment"] == "every rounding tie rounds to the even code"
               for f in row["failures"])
    assert sum(r["verdict"] == "not covered" for r in doc["ops"]) == len(discover()) - 1


def test_conform_default_is_ml_dtypes_and_passes():
    result = ref_cli("conform", "--examples", "5", "--ops", "formats.float8_e4m3fn.*,formats.float8_e8m0fnu.*")
    assert result.returncode == 0, result.stdout
    assert "ml_dtypes" in result.stdout and "xfail" in result.stdout


def test_conform_errors_are_clear(tmp_path):
    bad = ref_cli("conform", "--ops", "formats.nope")
    assert bad.returncode == 2 and "--ops" in bad.stderr
    missing = ref_cli("conform", "--impl", "no_such_module_xyz")
    assert missing.returncode == 2 and "no_such_module_xyz" in missing.stderr
    entries = tmp_path / "x.txt"
    entries.write_text("formats.float16.encode\n")
    noreason = ref_cli("conform", "--xfails-file", str(entries))
    assert noreason.returncode == 2 and "x.txt:1" in noreason.stderr and "reason" in noreason.stderr


def test_skips_and_strict_xfails(tmp_path):
    skips = tmp_path / "skips"
    skips.write_text("formats.float8_e4m3fn.encode  not this time\n")
    run = ref_cli("conform", "--impl", "corpus.formats_impls:HALF_AWAY", "--skips-file", str(skips),
                  "--ops", "formats.float8_e4m3fn.encode")
    assert run.returncode == 0 and "skipped" in run.stdout
    xfails = tmp_path / "xfails"
    xfails.write_text("formats.float4_e2m1fn.pack/1  claimed broken, but it is not\n")
    strict = ref_cli("conform", "--impl", "corpus.formats_impls:CORRECT", "--xfails-file", str(xfails),
                     "--ops", "formats.float4_e2m1fn.pack", "--examples", "3")
    assert strict.returncode == 1 and "strict" in strict.stdout


def test_an_adapter_s_shipped_xfails_are_the_default(tmp_path):
    (tmp_path / "away_adapter.py").write_text(
        "from corpus.formats_impls import HALF_AWAY\n"
        "OPS = {'formats.float8_e4m3fn.encode': HALF_AWAY.ops['formats.float8_e4m3fn.encode']}\n")
    (tmp_path / "away_adapter.xfails").write_text("formats.float8_e4m3fn.encode  rounds ties away from zero\n")
    args = ("conform", "--impl", "away_adapter", "--ops", "formats.float8_e4m3fn.encode", "--examples", "3")
    shipped = ref_cli(*args, cwd=tmp_path)
    assert shipped.returncode == 0 and "away_adapter.xfails" in shipped.stdout and "xfail" in shipped.stdout
    bare = ref_cli(*args, "--xfails-file", os.devnull, cwd=tmp_path)
    assert bare.returncode == 1 and "TiesToEven" in bare.stdout


def test_conform_works_outside_the_checkout(tmp_path):
    result = ref_cli("conform", "--ops", "formats.float4_e2m1fn.decode", "--examples", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def _pytest(*args):
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--pyargs",
                           "ref.conformance", *args], capture_output=True, text=True, env=env, timeout=600)


def test_pytest_plugin_fails_a_wrong_kernel_and_writes_junit(tmp_path):
    xml = tmp_path / "junit.xml"
    bad = _pytest("--ref-impl", "corpus.formats_impls:SWAPPED_NIBBLES", "-k", "float4_e2m1fn",
                  "--ref-examples", "3", f"--junitxml={xml}")
    assert bad.returncode == 1, bad.stdout
    assert "NibbleOrder" in bad.stdout
    assert "formats.float4_e2m1fn.pack" in xml.read_text()


def test_pytest_plugin_passes_ml_dtypes():
    good = _pytest("-k", "e8m0 or e5m2fnuz", "--ref-examples", "3")
    assert good.returncode == 0, good.stdout
    assert "xfailed" in good.stdout


@pytest.mark.parametrize("variants, words", [
    ({"formats.float16.encode": {"rounding": ["sideways"]}}, ["rounding", "sideways"]),
    ({"formats.float16.encode": {"colour": ["red"]}}, ["colour"]),
    ({"formats.bfloat16.*": {"rounding": ["nearest_even"]}}, ["matches none"]),
])
def test_bad_declarations_are_rejected(variants, words):
    from ref.conformance.implementation import Implementation
    from ref.conformance.runner import run

    with pytest.raises(ValueError) as info:
        impl = Implementation("x", {"formats.float16.encode": lambda **kw: None}, variants=variants)
        run(impl, examples=0)
    for w in words:
        assert w in str(info.value)


def test_unknown_op_names_are_rejected():
    from ref.conformance.implementation import Implementation

    with pytest.raises(ValueError, match="formats.float8_e4m3.encoder"):
        Implementation("typo", {"formats.float8_e4m3.encoder": lambda **kw: None})

"""The suite's profiles: a plain `pytest` leaves the tests marked `deep` out, and CI runs
them (.ci/run), so moving a test to the deep profile never drops it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_plain_pytest_deselects_deep_and_ci_runs_it(pytestconfig):
    addopts = pytestconfig.getini("addopts")
    assert addopts[addopts.index("-m") + 1] == "not deep", addopts
    ci = (ROOT / ".ci" / "run").read_text()
    assert "run_pytest -m deep" in ci


def test_the_deep_marker_is_registered(pytestconfig):
    """An unregistered marker would only warn; a typo (`deeep`) would silently keep a
    slow test in the default run."""
    assert any(line.split(":")[0].strip() == "deep" for line in pytestconfig.getini("markers"))

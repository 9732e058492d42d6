"""SGLang 0.5.23's RadixCache (ref.conformance.adapters.sglang_radix) judged against
cache.radix_cache: with its shipped xfails (the misuses SGLang does not refuse, each
shown failing), and under a correct caller (GUARDED) with every trace and a property
search passing. Skipped where SGLang is not installed (CI's "cache engines" stage installs it;
spec/cache.md, "Radix prefix cache", gives the commands)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("sglang")

from ref.cache.catalog.radix import RADIX_CACHE  # noqa: E402
from ref.conformance.implementation import load_implementation  # noqa: E402
from ref.conformance.runner import parse_entries, run  # noqa: E402

XFAILS = Path(__file__).resolve().parent.parent / "ref" / "conformance" / "adapters" / "sglang_radix.xfails"


def test_sglang_passes_with_its_xfails_each_one_failing():
    entries = parse_entries(XFAILS.read_text(), source=str(XFAILS))
    report = run(load_implementation("ref.conformance.adapters.sglang_radix"), ops=["cache.radix_cache"],
                 examples=10, shrink=False, xfails=entries)
    assert report.ok, report.details()
    [row] = report.ops
    refused = [t for t in RADIX_CACHE.vectors() if t.result == "invalid"]
    assert row.verdict == "xfail" and row.vectors_passed == len(RADIX_CACHE.vectors()) - len(refused)
    assert {f.where for f in row.xfailed} == {f"trace {i}" for i in range(31, 46)} | {"property"}


def test_sglang_under_a_correct_caller_passes_everything():
    report = run(load_implementation("ref.conformance.adapters.sglang_radix:GUARDED"), ops=["cache.radix_cache"],
                 examples=40, shrink=False, xfails=[])
    [row] = report.ops
    assert row.verdict == "pass", report.details()
    assert row.vectors_passed == len(RADIX_CACHE.vectors()) and row.examples >= 40

"""Skip and xfail entries that name a flag cover random examples and swept cases whose
`Op.case_flags` include it, as they cover the vectors carrying it: a kernel that
declares a class of inputs undefined (attention's empty rows, say) is not failed on
a random example of that class, and is still failed on everything else."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import ref.conformance.runner as runner
from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation
from ref.conformance.runner import parse_entries, run
from ref.formats import decode

OP = "formats.float8_e4m3fn.decode"


def _nan_codes(case):
    codes = np.asarray(case.inputs["codes"])
    return ("NanCode",) if codes.size and bool(((codes & 0x7F) == 0x7F).any()) else ()


@pytest.fixture
def flagged(monkeypatch):
    """The catalog, with OP's drawn and swept cases flagged NanCode when they hold a NaN code."""
    ops = {**discover(), OP: replace(discover()[OP], case_flags=_nan_codes)}
    monkeypatch.setattr(runner, "discover", lambda: ops)


def _nan_to_zero(codes):
    out = decode(codes, "float8_e4m3fn")
    return np.where(np.isnan(out), np.float32(0), out)


def _nan_to_zero_and_sign_dropped(codes):
    return np.abs(_nan_to_zero(codes))


def _run(fn, entries, kind):
    lines = f"{OP}/Exhaustive vector 1 holds every code\n" + "".join(f"{OP}/{e} reason\n" for e in entries)
    kw = {"skips": parse_entries(lines)}
    if kind == "xfails":
        kw = {"skips": parse_entries(lines.splitlines()[0]), "xfails": parse_entries("\n".join(lines.splitlines()[1:]))}
    report = run(Implementation("t", {OP: fn}), ops=[OP], examples=30, **kw)
    return report.ops[0]


def test_a_flag_skip_covers_random_and_swept_cases(flagged):
    row = _run(_nan_to_zero, ["NanCode"], "skips")
    assert row.verdict == "pass", [f.describe() for f in row.failures]
    assert row.examples > 0 and row.exhaustive_cases == 0  # the sweep holds every code: skipped
    assert any("skipped: their flags are in the skips" in n for n in row.notes)


def test_without_the_flag_entry_the_same_kernel_fails(flagged):
    row = _run(_nan_to_zero, [], "skips")
    assert row.verdict == "fail"
    assert {f.where.split(" ")[0] for f in row.failures} == {"exhaustive", "property"}
    assert all(f.flags == ("NanCode",) for f in row.failures)  # failures name the case's flags


def test_without_case_flags_a_flag_entry_covers_only_vectors():
    row = _run(_nan_to_zero, ["NanCode"], "skips")
    assert row.verdict == "fail"


def test_a_flag_xfail_covers_random_and_swept_cases(flagged):
    row = _run(_nan_to_zero, ["NanCode"], "xfails")
    assert row.verdict == "xfail", [f.describe() for f in row.failures]
    assert {f.where.split(" ")[0] for f in row.xfailed} == {"exhaustive", "property"}
    assert all("NanCode" in f.flags for f in row.xfailed)


@pytest.mark.parametrize("kind", ["skips", "xfails"])
def test_a_bug_outside_the_flag_is_still_caught(flagged, kind):
    row = _run(_nan_to_zero_and_sign_dropped, ["NanCode"], kind)
    assert row.verdict == "fail"
    (failure,) = row.failures
    assert failure.where == "property" and "NanCode" not in failure.flags

"""Skip and xfail entries that name a flag cover random examples and swept cases whose
`Op.case_flags` include it, as they cover the vectors carrying it: a kernel that
declares a class of inputs undefined (attention's empty rows, say) is not failed on
a random example of that class, and is still failed on everything else."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import ref.conformance.runner as runner
from ref.conformance.catalog import discover, flags
from ref.conformance.implementation import Implementation
from ref.conformance.runner import parse_entries, run
from ref.formats import decode
from ref.testing.catalog_types import Flag
from ref.testing.vector_files import load_manifest

OP = "formats.float8_e4m3fn.decode"


def _negative(case):
    codes = np.asarray(case.inputs["codes"])
    return ("Negative",) if bool((codes & 0x80).any()) else ()


@pytest.fixture
def negative_flag(monkeypatch):
    """A flag named Negative that entries may name (no case carries it)."""
    known = {**flags(), "Negative": Flag("a sign dropped or flipped", "negative values come out wrong")}
    monkeypatch.setattr(runner, "flags", lambda: known)


@pytest.fixture
def flagged(monkeypatch, negative_flag):
    """The catalog, with OP's drawn and swept cases flagged Negative when they hold a negative code."""
    ops = {**discover(), OP: replace(discover()[OP], case_flags=_negative)}
    monkeypatch.setattr(runner, "discover", lambda: ops)


def _sign_dropped(codes):
    """Wrong on negative codes only."""
    return np.abs(decode(codes, "float8_e4m3fn"))


def _sign_dropped_and_doubled(codes):
    """Wrong on every nonzero code."""
    return 2 * _sign_dropped(codes)


# The vectors are skipped by id: these tests are about random and swept cases.
NO_VECTORS = "".join(f"{OP}/{i} vectors are not the subject here\n"
                     for i in range(1, load_manifest()["ops"][OP]["vectors"] + 1))


def _run(fn, entries, kind):
    flag_lines = "".join(f"{OP}/{e} reason\n" for e in entries)
    skips, xfails = (NO_VECTORS + flag_lines, "") if kind == "skips" else (NO_VECTORS, flag_lines)
    report = run(Implementation("t", {OP: fn}), ops=[OP], examples=30, skips=parse_entries(skips),
                 xfails=parse_entries(xfails))
    (row,) = report.ops
    assert row.vectors_run == 0
    return row


def test_a_flag_skip_covers_random_and_swept_cases(flagged):
    row = _run(_sign_dropped, ["Negative"], "skips")
    assert row.verdict == "pass", [f.describe() for f in row.failures]
    assert row.examples > 0 and row.exhaustive_cases == 0  # the sweep holds every code: skipped
    assert any("skipped: their flags are in the skips" in n for n in row.notes)


def test_without_the_flag_entry_the_same_kernel_fails(flagged):
    row = _run(_sign_dropped, [], "skips")
    assert row.verdict == "fail"
    assert {f.where.split(" ")[0] for f in row.failures} == {"exhaustive", "property"}
    assert all(f.flags == ("Negative",) for f in row.failures)  # failures name the case's flags


def test_without_case_flags_a_flag_entry_does_not_cover_examples(negative_flag):
    row = _run(_sign_dropped, ["Negative"], "skips")
    assert row.verdict == "fail"


def test_a_flag_xfail_covers_random_and_swept_cases(flagged):
    row = _run(_sign_dropped, ["Negative"], "xfails")
    assert row.verdict == "xfail", [f.describe() for f in row.failures]
    assert {f.where.split(" ")[0] for f in row.xfailed} == {"exhaustive", "property"}
    assert all("Negative" in f.flags for f in row.xfailed)


@pytest.mark.parametrize("kind", ["skips", "xfails"])
def test_a_bug_outside_the_flag_is_still_caught(flagged, kind):
    row = _run(_sign_dropped_and_doubled, ["Negative"], kind)
    assert row.verdict == "fail"
    (failure,) = row.failures
    assert failure.where == "property" and "Negative" not in failure.flags

"""The conformance suite as pytest tests: `pytest --pyargs ref.conformance --ref-impl M`."""

from __future__ import annotations

import pytest

from ref.conformance.catalog import discover
from ref.conformance.runner import run


@pytest.mark.parametrize("op_name", list(discover()))
def test_conformance(op_name, ref_implementation, ref_entries, request):
    skips, xfails = ref_entries
    report = run(ref_implementation, ops=[op_name], examples=request.config.getoption("--ref-examples"),
                 skips=skips, xfails=xfails)
    result = report.ops[0]
    if result.verdict == "not covered":
        pytest.skip(f"{ref_implementation.name} does not provide {op_name}")
    if result.verdict == "skipped":
        pytest.skip("; ".join(result.notes))
    if result.verdict == "xfail":
        pytest.xfail("; ".join(f.where for f in result.xfailed))
    assert result.verdict != "fail", "\n" + report.details()

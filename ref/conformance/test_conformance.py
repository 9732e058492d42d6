"""The conformance suite as pytest tests: `pytest --pyargs ref.conformance --ref-impl M`."""

from __future__ import annotations

import pytest

from ref.conformance.catalog import discover, flags


@pytest.mark.parametrize("op_name", list(discover()))
def test_conformance(op_name, ref_implementation, ref_run, request):
    report = ref_run(op_name)
    result = report.ops[0]
    if result.verdict == "not covered":
        pytest.skip(f"{ref_implementation.name} does not provide {op_name}")
    if result.verdict == "skipped":
        pytest.skip("; ".join(result.notes))
    if result.verdict == "xfail":
        pytest.xfail("; ".join(f.where for f in result.xfailed))
    if result.verdict == "fail":
        # every failure in the text, unless a JSON report (--ref-report) holds the rest
        limit = 5 if request.config.getoption("--ref-report") else max(len(result.failures), 1)
        details = report.details(limit=limit, flag_notes=flags())
        pytest.fail(f"{op_name} fails ({result.spec}):\n{details}", pytrace=False)

"""pytest plugin (entry point `pytest11`): run the conformance suite under pytest.

    pytest --pyargs ref.conformance --ref-impl mypackage.adapter --junitxml=out.xml

One test per catalogued op: skipped when the implementation does not provide it,
xfailed when it fails only where the xfails file says it will, failed otherwise.
The usual selection flags work (`-k float8_e4m3fn`).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("llm-ref", "llm-ref conformance suite")
    group.addoption("--ref-impl", default=None,
                    help="MODULE[:ATTR] of the implementation (default: the bundled ref.conformance.adapters.default)")
    group.addoption("--ref-examples", type=int, default=30, help="hypothesis examples per op")
    group.addoption("--ref-skips-file", default=None, help="lines 'op[/part] reason': not run")
    group.addoption("--ref-xfails-file", default=None, help="lines 'op[/part] reason': expected to fail")


@pytest.fixture(scope="session")
def ref_implementation(request):
    from ref.conformance.adapters import DEFAULT
    from ref.conformance.implementation import load_implementation

    return load_implementation(request.config.getoption("--ref-impl") or DEFAULT)


@pytest.fixture(scope="session")
def ref_entries(request):
    from pathlib import Path

    from ref.conformance.adapters import DEFAULT, shipped_xfails
    from ref.conformance.runner import parse_entries

    def read(option, fallback=None):
        path = request.config.getoption(option) or fallback
        return parse_entries(Path(path).read_text(), source=str(path)) if path else []

    default_xfails = shipped_xfails(request.config.getoption("--ref-impl") or DEFAULT)
    return read("--ref-skips-file"), read("--ref-xfails-file", default_xfails)

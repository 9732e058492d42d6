"""pytest plugin (entry point `pytest11`): run the conformance suite under pytest.

    pytest --pyargs ref.conformance --ref-impl my_adapter --junitxml=out.xml

One test per catalogued op: skipped when the implementation does not provide it,
xfailed when it fails only where the xfails file says it will, failed otherwise
(the failure text is the runner's details). The usual selection flags work
(`-k float8_e4m3fn`). The options are the CLI's, with the same defaults: --ref-golden,
--ref-large, --ref-no-shrink, --ref-examples (50), --ref-skips-file,
--ref-xfails-file (default: the .xfails file the module ships beside itself), and
--ref-report PATH, which writes the session's JSON report, every op run in one
document. The directory pytest was invoked from is put on sys.path before the
implementation loads, so a module there loads as it does under `python -m pytest`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_OPS = pytest.StashKey[list]()
_META = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("llm-ref", "llm-ref conformance suite")
    group.addoption("--ref-impl", default=None,
                    help="MODULE[:ATTR] (or path/to/file.py) of the implementation "
                         "(default: the bundled ref.conformance.adapters.default)")
    group.addoption("--ref-examples", type=int, default=50, help="hypothesis examples per op (default 50)")
    group.addoption("--ref-no-shrink", action="store_true", help="report the first failing example unshrunk")
    group.addoption("--ref-large", action="store_true",
                    help="also run each op's large cases (past 2^24 elements; seconds per op)")
    group.addoption("--ref-golden", default=None,
                    help="golden folder (default: the one bundled with the package)")
    group.addoption("--ref-report", default=None, help="write the session's JSON report here")
    group.addoption("--ref-skips-file", default=None, help="lines 'op[/part] reason': not run")
    group.addoption("--ref-xfails-file", default=None,
                    help="lines 'op[/part] reason': expected to fail (default: the .xfails file the "
                         "--ref-impl module ships beside itself, if any)")


def pytest_configure(config):
    config.stash[_OPS] = []


def _impl_spec(config) -> str:
    from ref.conformance.adapters import DEFAULT

    return config.getoption("--ref-impl") or DEFAULT


@pytest.fixture(scope="session")
def ref_implementation(request):
    from ref.conformance.implementation import load_implementation

    here = str(request.config.invocation_params.dir)
    if here not in sys.path:
        sys.path.insert(0, here)  # as `python -m pytest` would: an adapter in the current directory loads
    try:
        return load_implementation(_impl_spec(request.config))
    except ValueError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def ref_entries(request):
    from ref.conformance.adapters import shipped_xfails
    from ref.conformance.implementation import is_file_spec
    from ref.conformance.runner import parse_entries

    def read(option, fallback=None):
        path = request.config.getoption(option) or fallback
        return parse_entries(Path(path).read_text(), source=str(path)) if path else []

    spec = _impl_spec(request.config)
    if is_file_spec(spec):
        beside = Path(spec.partition(":")[0]).with_suffix(".xfails")
        default_xfails = beside if beside.is_file() else None
    else:
        default_xfails = shipped_xfails(spec)
    try:
        return read("--ref-skips-file"), read("--ref-xfails-file", default_xfails)
    except (OSError, ValueError) as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def ref_run(request, ref_implementation, ref_entries):
    """Run one op with the session's options -> its Report; the op's result joins
    the session report (--ref-report)."""
    from ref.conformance.runner import run

    config = request.config
    skips, xfails = ref_entries
    golden = config.getoption("--ref-golden")

    def run_one(op_name: str):
        report = run(ref_implementation, ops=[op_name], examples=config.getoption("--ref-examples"),
                     shrink=not config.getoption("--ref-no-shrink"), skips=skips, xfails=xfails,
                     golden=Path(golden) if golden else None, large=config.getoption("--ref-large"))
        config.stash[_OPS].extend(report.ops)
        config.stash.setdefault(_META, {"meta": report.meta, "implementation": report.implementation})
        return report

    return run_one


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--ref-report", None)
    ops = session.config.stash.get(_OPS, [])
    if not path or _META not in session.config.stash:
        return
    from ref.conformance.catalog import discover
    from ref.conformance.report import Report

    first = session.config.stash[_META]
    order = list(discover())
    ops = sorted(ops, key=lambda r: order.index(r.op))
    ran = [] if len(ops) == len(order) else [r.op for r in ops]  # as the CLI's --ops: [] for all
    meta = {**first["meta"], "settings": {**first["meta"]["settings"], "ops": ran}}
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    if interrupted:
        meta["interrupted"] = "the pytest session was interrupted"
    report = Report(first["implementation"], ops, meta, complete=not interrupted)
    Path(path).write_text(report.to_json())

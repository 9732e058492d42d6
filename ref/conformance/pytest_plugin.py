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

import json
import sys
from pathlib import Path

import pytest

# ref's modules are imported inside the hooks: the plugin loads in every pytest session
# of an environment where llm-ref is installed, and must cost nothing there
_OPS = pytest.StashKey[list]()
_META = pytest.StashKey[dict]()
_WORKER_DOCS = pytest.StashKey[list]()


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
    # asked for by name: a broken implementation or entries file is one usage error, not 73
    if config.getoption("--ref-impl"):
        _load(config)
    if any(config.getoption(o) for o in ("--ref-impl", "--ref-skips-file", "--ref-xfails-file")):
        _entries(config)


def _load(config):
    """The implementation --ref-impl names (the invocation directory on sys.path, as
    `python -m pytest` would have it); a load error is a pytest.UsageError."""
    from ref.conformance.implementation import load_implementation

    here = str(config.invocation_params.dir)
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        return load_implementation(_impl_spec(config))
    except ValueError as err:
        raise pytest.UsageError(f"--ref-impl: {err}") from None


def _impl_spec(config) -> str:
    from ref.conformance.adapters import DEFAULT

    return config.getoption("--ref-impl") or DEFAULT


@pytest.fixture(scope="session")
def ref_implementation(request):
    return _load(request.config)


@pytest.fixture(scope="session")
def ref_entries(request):
    return _entries(request.config)


def _entries(config):
    """(skips, xfails): the files the options name, or the xfails the implementation
    ships; each entry checked against the catalog (a pytest.UsageError otherwise)."""
    from ref.conformance.adapters import shipped_xfails
    from ref.conformance.catalog import discover
    from ref.conformance.implementation import is_file_spec
    from ref.conformance.runner import check_entries, parse_entries

    def read(option, fallback=None):
        path = config.getoption(option) or fallback
        return parse_entries(Path(path).read_text(), source=str(path)) if path else []

    spec = _impl_spec(config)
    if is_file_spec(spec):
        beside = Path(spec.partition(":")[0]).with_suffix(".xfails")
        default_xfails = beside if beside.is_file() else None
    else:
        default_xfails = shipped_xfails(spec)
    golden = config.getoption("--ref-golden")
    try:
        skips, xfails = read("--ref-skips-file"), read("--ref-xfails-file", default_xfails)
        check_entries(discover(), golden=Path(golden) if golden else None, skips=skips, xfails=xfails)
    except (OSError, ValueError) as err:
        raise pytest.UsageError(str(err)) from None
    return skips, xfails


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
    """Write --ref-report: one document over every op the session ran (under
    pytest-xdist each worker hands its ops to the controller, which writes)."""
    config = session.config
    path = config.getoption("--ref-report", None)
    if not path:
        return
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    own = _own_document(config, interrupted)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        if own is not None:
            config.workeroutput["llm_ref_report"] = json.dumps(own)
        return
    docs = ([own] if own is not None else []) + config.stash.get(_WORKER_DOCS, [])
    if docs:
        from ref.conformance.report import strict_json

        Path(path).write_text(strict_json(_merged(docs, interrupted)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: a worker finished; keep the ops it reported."""
    text = getattr(node, "workeroutput", {}).get("llm_ref_report")
    if text:
        node.config.stash.setdefault(_WORKER_DOCS, []).append(json.loads(text))


def _own_document(config, interrupted: bool) -> dict | None:
    """The report of the ops this process ran, as its JSON document; None if none ran."""
    if _META not in config.stash:
        return None
    from ref.conformance.report import Report

    first = config.stash[_META]
    report = Report(first["implementation"], config.stash[_OPS], first["meta"], complete=not interrupted)
    return json.loads(report.to_json())


def _merged(docs: list[dict], interrupted: bool) -> dict:
    """One document: the first's header, every op in catalog order, the summary,
    `ok` and `complete` recomputed over all of them."""
    from ref.conformance.catalog import discover
    from ref.conformance.report import VERDICTS

    order = list(discover())
    ops = sorted((op for doc in docs for op in doc["ops"]), key=lambda r: order.index(r["op"]))
    complete = not interrupted and all(doc["complete"] for doc in docs)
    ran = [] if len(ops) == len(order) else [r["op"] for r in ops]  # as the CLI's --ops: [] for all
    merged = {**docs[0], "settings": {**docs[0]["settings"], "ops": ran}, "ops": ops, "complete": complete,
              "summary": {v: n for v in VERDICTS if (n := sum(r["verdict"] == v for r in ops))},
              "ok": complete and all(r["verdict"] != "fail" for r in ops)}
    if interrupted:
        merged["interrupted"] = "the pytest session was interrupted"
    return merged

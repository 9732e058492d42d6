"""Isolation mode: each op runs in a child process, so that a kernel that hangs, calls
exit or crashes the process (a segfault, an illegal memory access) is a named
failure of that op and the other ops still run.

The child (a fresh interpreter: multiprocessing's "spawn", never fork, so a GPU
runtime initialised by the parent is not inherited half-alive) loads the
implementation again from its --impl spec and runs the op in process; before and
after each call of the candidate it tells the parent which check it is at. The
parent waits at most `timeout` seconds for a call to return, and a longer, fixed
time for everything else (start-up, the oracle, the comparisons), then kills the
child. A child that dies is reported with the check it was at and its exit status
or signal.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable

from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation, load_implementation
from ref.conformance.judges.evidence import accepted_inputs
from ref.conformance.report import Failure, OpReport
from ref.conformance.reproducible import current_home, reproducible_draws
from ref.testing.catalog_types import Operation
from ref.testing.vector_files import load_vectors

__all__ = ["isolated_runner"]

# Seconds the child may go without a message outside a call (start-up, imports, a
# large case's oracle): a hang of the suite, not of the kernel.
OUTSIDE_CALL_LIMIT = 600.0


def isolated_runner(impl: Implementation, chosen, *, timeout: float) -> Callable[[Operation], OpReport]:
    """A function running one op in a child process under `chosen` (runner.Settings)."""
    if not impl.source:
        raise ValueError(f"isolate: {impl.name} has no --impl spec to load it again in a child process; "
                         f"pass an implementation loaded with load_implementation('module[:attr]')")

    def run_one(op: Operation) -> OpReport:
        if op.name not in impl.ops:  # nothing of the candidate's runs: no child needed
            from ref.conformance.runner import run_op

            return run_op(op, impl, chosen)
        return _run_in_child(op, impl.source, chosen, timeout)

    return run_one


def _child(conn, spec: str, op_name: str, chosen, home: str | None) -> None:
    """The child's side: load, run the op, send the report (or why it could not)."""
    from ref.conformance.runner import run_op

    _follow_parent()
    def watch(state: str, where: str, flags: tuple) -> None:
        conn.send((state, where, flags))

    try:
        impl = load_implementation(spec)
        with reproducible_draws(home):  # as in the parent's run: the draws do not depend on the install
            report = run_op(discover()[op_name], impl, chosen, watch)
    except Exception as exc:  # loading the implementation failed: the op cannot be judged
        conn.send(("error", f"{type(exc).__name__}: {exc}", ()))
        return
    conn.send(("done", report, ()))


def _follow_parent() -> None:
    """Ctrl-C is the parent's to handle (it kills this child and reports the run so
    far); on Linux, the kernel kills this child if the parent dies, so a hung kernel
    is never left holding a GPU."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # without it, an orphan ends when it next writes to the closed pipe


def _run_in_child(op: Operation, spec: str, chosen, timeout: float) -> OpReport:
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, spec, op.name, chosen, current_home()), daemon=True,
                       name=f"llm-ref {op.name}")
    proc.start()
    send.close()  # the child holds the only writer: its death is an EOF here
    state, where, flags = "start", "", ()
    returned: dict[str, None] = {}  # the checks whose calls came back, in order

    def lost(comment: str, detail: str) -> OpReport:
        return _lost(op, where, flags, comment, detail, [w for w in returned if w != where], chosen.golden)

    try:
        while True:
            limit = timeout if state == "call" else max(timeout, OUTSIDE_CALL_LIMIT)
            if not receive.poll(limit):
                what = "the call did not return" if state == "call" else "the run stalled"
                return lost(_COMMENTS[state, "hung"], f"{what} within {limit:g} s; the process was killed")
            try:
                kind, payload, extra = receive.recv()
            except EOFError:
                proc.join(5)
                return lost(_COMMENTS[state, "died"], _death(proc.exitcode))
            if kind == "done":
                return payload
            if kind == "error":
                return _lost(op, "op", (), "the child process could not run the op", payload, [], None)
            state, where, flags = kind, payload, extra
            if kind == "back":
                returned[where] = None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        receive.close()


def _death(code: int | None) -> str:
    if code is None:
        return "the process closed its pipe and did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process died of {name} (exit status {code})"
    return f"the process exited with status {code} (os._exit, or a crash in native code)"


_COMMENTS = {
    ("call", "hung"): "the implementation's call hung",
    ("call", "died"): "the implementation's call ended the process",
    ("back", "hung"): "the run hung after the implementation's call returned",
    ("back", "died"): "the process ended after the implementation's call returned",
    ("start", "hung"): "the child process hung before the first call",
    ("start", "died"): "the child process ended before the first call",
}


def _lost(op: Operation, where: str, flags: tuple, comment: str, detail: str, before: list[str],
          golden) -> OpReport:
    """The op's report when its child hung or died at `where`: a failure there, with the
    vector's inputs when it was one, and the checks whose calls returned `before` it
    (their verdicts died with the child)."""
    report = OpReport(op.name, op.kind.value, op.spec, verdict="fail")
    failure = Failure(where or "op", comment, tuple(flags), {}, detail)
    number = where.removeprefix("vector ")
    if number.isdigit():
        failure.vector = int(number)
        try:
            found = [v for v in load_vectors(op.name, golden) if v.id == failure.vector]
        except Exception:  # the golden folder unreadable: the failure without its inputs
            found = []
        if found:
            failure.inputs, failure.params = accepted_inputs(found[0].inputs), dict(found[0].params)
    if before:
        shown = ", ".join(before[:3]) + (f", ... {before[-1]}" if len(before) > 3 else "")
        failure.detail += f"; before it, {len(before)} checks' calls returned ({shown}; their verdicts died with the child)"
    report.failures.append(failure)
    return report

"""The judge of stateful ops: the oracle object and the candidate's, driven in
lockstep by the same steps, every observation compared up to the renaming of
identifiers (ref.testing.stateful).

First the golden traces (the op's stored document; the catalog's own trace specs
where the golden folder has none), then a property search with `hypothesis.stateful`:
each step is drawn from the op's `steps(model)` given the oracle's current state and
applied to both objects. A failure names the first diverging step: its number,
method and args, the observation expected and the one produced, both objects'
snapshots, and the steps before it (after shrinking, a minimal trace). A step the
oracle refuses must be refused by the candidate, and one it accepts must not be;
the trace goes on after a refusal, so a refusal that changed the candidate's state
diverges at a later step;
NotImplementedError from the candidate declines the trace (counted, not failed).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from ref.conformance.judges.arrays import settle, undeclared
from ref.conformance.judges.candidate import Watch, call_candidate, short
from ref.conformance.report import Entry, Failure, OpReport
from ref.testing.renaming import Renaming
from ref.testing.stateful import REFUSALS, StatefulOp, Trace, as_json, build_traces, load_traces
from ref.testing.vector_files import golden_dir

__all__ = ["Divergence", "Lockstep", "run_op"]

REFUSED = object()  # the expected outcome of a step the oracle refuses
ASK = object()  # the expected outcome comes from the oracle object itself


class Divergence(Exception):
    """The candidate's object parted from the oracle's: the message is the report;
    `steps` counts the trace's steps up to the diverging one (0: at construction)."""

    def __init__(self, text: str, steps: int):
        super().__init__(text)
        self.steps = steps


class Declined(Exception):
    """The candidate raised NotImplementedError: a feature it does not provide."""


def _text(value: Any) -> str:
    try:
        return json.dumps(as_json(value), sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)[:300]


def _call_text(method: str, args: Mapping[str, Any]) -> str:
    return f"{method}({', '.join(f'{k}={_text(v)}' for k, v in args.items())})"


class Lockstep:
    """An oracle object and a candidate object, stepped together."""

    def __init__(self, op: StatefulOp, factory: Callable, *, watch: Watch | None = None,
                 at: tuple[str, tuple[str, ...]] = ("", ()), report: OpReport | None = None):
        self.op, self.factory, self.watch, self.at, self.report = op, factory, watch, at, report
        self.renaming = Renaming(op.methods, op.identifiers, op.releases)
        self.model: Any = None  # None until started, and when the params are refused
        self.candidate: Any = None
        self.history: list[str] = []  # "k. call -> observation" of each step done

    def _candidate(self, fn: Callable, kwargs: Mapping[str, Any]) -> Any:
        """fn(**kwargs); SystemExit and its kin are an Exception here, not the end."""
        return call_candidate(fn, dict(kwargs), watch=self.watch, at=self.at)

    def start(self, params: Mapping[str, Any], *, refused: Any = ASK) -> None:
        """Build both objects from `params` (`refused`: True when the params must be
        refused, ASK to go by the oracle)."""
        try:
            self.model = self.op.oracle(**params)
            oracle_refuses = False
        except REFUSALS:
            self.model, oracle_refuses = None, True
        if refused is not ASK:
            oracle_refuses = refused
        try:
            self.candidate = self._candidate(self.factory, copy.deepcopy(dict(params)))
            problem = None
        except NotImplementedError:
            raise Declined() from None
        except Exception as exc:
            problem = exc
        if oracle_refuses and problem is None:
            self._diverge("construction", "refused (the params are invalid)",
                          f"built an object from {_text(dict(params))}")
        if not oracle_refuses and problem is not None:
            self._diverge("construction", "an object", f"raised {short(problem)}")

    def step(self, method: str, args: Mapping[str, Any], expected: Any = ASK) -> None:
        """Apply one step to both objects; `expected`: the stored observation, REFUSED,
        or ASK (the oracle object's)."""
        number = len(self.history) + 1
        if method not in self.op.methods:
            raise ValueError(f"step {number} calls {method!r}, not one of the methods {self.op.methods}")
        try:
            seen = self.op.observe(method, getattr(self.model, method)(**copy.deepcopy(dict(args))))
        except REFUSALS as exc:
            seen = REFUSED
            why = short(exc)
        except Exception as exc:
            raise RuntimeError(f"the oracle raised {short(exc)} at step {number} ({_call_text(method, args)}): "
                               f"a defect of the suite, please report it") from None
        expected = seen if expected is ASK else expected
        mine = copy.deepcopy(self.renaming.translate(method, args))
        call = _call_text(method, args)
        if _text(mine) != _text(dict(args)):
            call += f" (called on the candidate as {_call_text(method, mine)})"
        try:
            returned = self._candidate(getattr(self.candidate, method), mine)
            failed = None
        except NotImplementedError:
            raise Declined() from None
        except Exception as exc:
            failed = exc
        if expected is REFUSED:
            if failed is None:
                reason = f" ({why})" if seen is REFUSED else ""
                self._diverge(f"step {number}: {call}", f"refused{reason}", f"returned {_text(returned)}")
            self.history.append(f"{number}. {call} -> refused ({type(failed).__name__})")
            return
        if failed is not None:
            self._diverge(f"step {number}: {call}", _text(expected), f"raised {short(failed)}")
        try:
            observation = self.op.observe(method, returned)
        except Exception as exc:
            self._diverge(f"step {number}: {call}", _text(expected), f"returned {_text(returned)}, not an "
                          f"observation ({short(exc)})")
        if self.report is not None:
            self.report.compared += 1
        problem = self.renaming.compare(method, expected, observation)
        if problem:
            self._diverge(f"step {number}: {call}", _text(expected), _text(observation), problem)
        self.renaming.release(method, args, expected)
        self.history.append(f"{number}. {call} -> {_text(expected)}")

    def _snapshot(self, obj: Any) -> str:
        if obj is None:
            return "(none)"
        try:
            if obj is self.candidate:  # its own snapshot() where it has one, else the op's
                own = getattr(obj, "snapshot", None)
                if callable(own):
                    try:
                        return _text(self._candidate(own, {}))
                    except Exception:
                        pass
                return _text(self._candidate(lambda: self.op.snapshot(obj), {}))
            return _text(self.op.snapshot(obj))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return f"(the snapshot raised {short(exc)})"

    def _diverge(self, where: str, expected: str, actual: str, difference: str = "") -> None:
        lines = [f"first divergence at {where}", f"  expected: {expected}", f"  actual:   {actual}"]
        if difference and not difference.startswith("observation: expected"):
            lines.append(f"  at {difference}")
        lines += [f"  oracle state after it:    {self._snapshot(self.model)}",
                  f"  candidate state after it: {self._snapshot(self.candidate)}"]
        lines += [f"  steps before ({len(self.history)}):"] + [f"    {h}" for h in self.history] if self.history \
            else ["  no steps before"]
        raise Divergence("\n      ".join(lines), 0 if where == "construction" else len(self.history) + 1)


def run_op(op: StatefulOp, fn: Callable, impl, settings, report: OpReport, watch: Watch | None = None) -> None:
    """Judge the candidate factory `fn` on `op` and fill `report` (the judge
    protocol of ref.conformance.judges)."""
    whole_skip = [e for e in settings.skips if e.matches(op.name, "*") and e.part == "*"]
    if whole_skip:
        report.verdict = "skipped"
        report.notes.append(whole_skip[0].reason)
        return
    supported = impl.supported(op)
    _replay(op, fn, supported, settings, report, watch)
    _search(op, fn, supported, settings, report, watch)
    if report.unsupported:
        report.notes.append(f"not judged: {report.unsupported} traces declined with NotImplementedError (features not provided)")
    report.verdict = _verdict(report, [e for e in settings.xfails if e.matches(op.name, "*") and e.part == "*"])


def _traces(op: StatefulOp, golden) -> list[Trace]:
    """The stored traces; the catalog's own where the golden folder has none."""
    stored = load_traces(op.name, golden or golden_dir())
    return build_traces(op) if stored is None else stored


def _replay(op, fn, supported, settings, report: OpReport, watch) -> None:
    for t in _traces(op, settings.golden):
        part = str(t.id)
        if any(e.matches(op.name, part, t.flags) for e in settings.skips) or undeclared(op, supported, t.params):
            report.vectors_skipped += 1
            continue
        run = Lockstep(op, fn, watch=watch, at=(f"trace {t.id}", t.flags), report=report)
        failure = None
        try:
            run.start(t.params, refused=t.result == "invalid" and not t.steps)
            for s in t.steps:
                run.step(s.method, s.args, REFUSED if s.refused else s.observation)
        except Declined:
            report.vectors_skipped += 1
            report.unsupported += 1
            continue
        except Divergence as d:
            failure = Failure(f"trace {t.id}", t.comment, t.flags, dict(t.params), str(d), vector=_id(t.id))
        except Exception as exc:  # the stored trace or the oracle: still a named failure
            failure = Failure(f"trace {t.id}", t.comment, t.flags, dict(t.params),
                              f"could not be checked: {short(exc)}", vector=_id(t.id))
        report.vectors_run += 1
        settle(report, failure, op.name, part, settings.xfails, t.flags)


def _search(op, fn, supported, chosen, report: OpReport, watch) -> None:
    """The property search: random traces from the op's strategies, shrunk on failure."""
    if chosen.examples <= 0 or any(e.matches(op.name, "properties") for e in chosen.skips):
        return
    state: dict[str, Any] = {"traces": 0, "unsupported": 0, "failure": None, "stage": "drawing the params"}
    # a failure already named by a trace, or expected of the properties, is not shrunk
    shrink = chosen.shrink and not (report.failures or report.xfailed) and not any(
        e.part == "properties" and e.matches(op.name, "properties") for e in chosen.xfails)

    class Machine(RuleBasedStateMachine):
        run: Lockstep

        @initialize(params=op.examples(supported))
        def begin(self, params):
            state["traces"] += 1
            self.run = Lockstep(op, fn, watch=watch, at=(f"property trace {state['traces']}", ()), report=report)
            self.params, self.declined = params, False
            self._attempt(lambda: self.run.start(params))

        @rule(data=st.data())
        def act(self, data):
            if self.declined or self.run.model is None:  # declined, or params refused by both: nothing to step
                return
            state["stage"] = "drawing a step (the op's steps strategy)"
            method, args = data.draw(op.steps(self.run.model), label="step")
            state["stage"] = "stepping"
            self._attempt(lambda: self.run.step(method, dict(args)))

        def _attempt(self, action):
            try:
                action()
            except Declined:  # the trace ends here, neither passed nor failed
                state["unsupported"] += 1
                state["traces"] -= 1
                self.declined = True
            except Divergence as d:
                size = f"of {d.steps} step{'s' * (d.steps > 1)}" if d.steps else "(diverging at construction)"
                state["failure"] = Failure("property", f"{'minimal ' * shrink}failing trace {size}", (),
                                           dict(self.params), str(d))
                raise AssertionError(str(d)) from None

    machine = seed(op.seed)(Machine)  # the same traces on every run
    chosen_settings = settings(max_examples=chosen.examples, stateful_step_count=op.max_steps, database=None,
                               deadline=None, suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                               report_multiple_bugs=False,
                               phases=(Phase.generate, Phase.shrink) if shrink else (Phase.generate,))
    failure = None
    try:
        run_state_machine_as_test(machine, settings=chosen_settings)
    except Exception as exc:
        failure = state["failure"]
        if failure is None:
            failure = Failure("property", f"{state['stage']} raised", (), {}, short(exc))
        elif not isinstance(exc, AssertionError):  # e.g. Flaky: the divergence did not repeat
            failure.detail += f"\n      (then {short(exc)})"
    report.examples += max(state["traces"], 0)
    report.unsupported += state["unsupported"]
    settle(report, failure, op.name, "properties", chosen.xfails)


def _id(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _verdict(report: OpReport, whole_xfail: Sequence[Entry]) -> str:
    """As the array kinds' verdict, except that a trace refused at its params (nothing
    compared, yet checked) counts against "skipped"; no acceptable differences here."""
    if report.unsupported and not report.compared and not report.failures and not report.vectors_passed:
        return "skipped"
    if report.failures:
        return "fail"
    if whole_xfail and not report.xfailed:
        report.failures.append(Failure("op", "listed as xfail but passed (strict)", (), {}, whole_xfail[0].reason))
        return "fail"
    return "xfail" if report.xfailed else "pass"

"""The stateful kind: an object under test driven by a trace of method calls.

A `StatefulOp`'s oracle is a factory: `oracle(**params)` returns a fresh reference
object (a block manager, a prefix cache), and an implementation's entry for the op
is a factory with the same signature. A trace is the params and a list of steps
(method, args); after each step the op's `observe(method, returned)` turns what the
method returned into a JSON observation, and a candidate must produce the same
observation, up to the renaming of `identifiers` (ids an implementation may choose,
such as block ids: ref.testing.renaming). A step the oracle refuses (ValueError or TypeError)
must be refused by the candidate too, and must leave both objects as they were: a
trace goes on after a refused step, so the steps after it show a refusal that
changed the state.

Golden documents of this kind (`trace_document`, `check_trace_document`,
`load_traces`) have the schema "llm-ref-golden/2/stateful"; spec/conformance.md,
"Stateful operations", describes them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from hypothesis import strategies as st

from ref.testing.catalog_types import Kind, Operation
from ref.testing.renaming import IdentifierPath

__all__ = ["REFUSALS", "SCHEMA", "StatefulOp", "Step", "Trace", "TraceSpec", "as_json", "build_traces",
           "check_trace_document", "load_traces", "trace_document", "traces_from_document"]

SCHEMA = "llm-ref-golden/2/stateful"
TRACE_RESULTS = ("valid", "invalid")
REFUSALS = (ValueError, TypeError)  # what an oracle raises on a step it refuses

def as_json(value: Any, where: str = "observation") -> Any:
    """`value` as JSON: None, bool, int, finite float, str, and lists (from lists,
    tuples, NumPy arrays) and string-keyed objects of them. NumPy scalars become
    Python numbers; anything else is a TypeError naming `where`."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: {value} is not a JSON number")
        return value
    if isinstance(value, (list, tuple)):
        return [as_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{where}: an object's keys must be strings, got {sorted(map(repr, value))}")
        return {k: as_json(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"{where}: {type(value).__name__} {value!r:.80} is not JSON "
                    f"(None, bool, int, float, str, list or object)")


def _observe(method: str, value: Any) -> Any:
    return as_json(value, f"{method}() returned")


def _repr_snapshot(obj: Any) -> Any:
    return repr(obj)


@dataclass(frozen=True, kw_only=True)
class StatefulOp(Operation):
    """An object replayed against traces (spec/conformance.md, "Stateful operations").

    oracle(**params) -> a fresh reference object; examples(supported) -> a strategy
    of params; vectors() -> `TraceSpec`s; steps(model) -> a strategy of the next
    (method, args) given the reference object's current state. observe(method,
    returned) -> the step's JSON observation; snapshot(obj) -> its state as JSON, for
    failure reports. identifiers: paths of ids an implementation may choose (compared
    up to renaming); releases: those of them whose binding ends when the step
    succeeds (an id freed or evicted, which either side may hand out again).
    """

    kind: ClassVar[Kind] = Kind.STATEFUL
    methods: tuple[str, ...]
    steps: Callable[[Any], st.SearchStrategy]
    observe: Callable[[str, Any], Any] = _observe
    snapshot: Callable[[Any], Any] = _repr_snapshot
    identifiers: tuple[str, ...] = ()
    releases: tuple[str, ...] = ()
    max_steps: int = 20  # steps per trace in the property search

    def __post_init__(self):
        super().__post_init__()
        where = f"operation {self.name}"
        if isinstance(self.methods, str) or not self.methods or not all(
                isinstance(m, str) and m.isidentifier() and not m.startswith("_") for m in self.methods):
            raise ValueError(f"{where}: methods must be a non-empty tuple of public method names, got {self.methods!r}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"{where}: a method is listed twice ({self.methods})")
        for name in ("oracle", "steps", "observe", "snapshot", "vectors", "examples"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{where}: {name} must be callable, got {getattr(self, name)!r}")
        if self.outputs or self.exhaustive or self.large:
            raise ValueError(f"{where}: a stateful op has observations, not outputs, exhaustive or large cases")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"{where}: max_steps must be a positive int, got {self.max_steps!r}")
        for name in ("identifiers", "releases"):
            paths = getattr(self, name)
            if isinstance(paths, str):
                raise TypeError(f"{where}: {name} is a tuple of paths, got the string {paths!r}")
            for text in paths:
                IdentifierPath.parse(text, self.methods, f"{where}: {name}")
        stray = [p for p in self.releases if p not in self.identifiers]
        if stray:
            raise ValueError(f"{where}: releases {stray} are not among the identifiers")
        if any(v.latitude for v in self.variants):
            raise ValueError(f"{where}: a stateful op takes no latitude axes")


@dataclass(frozen=True)
class TraceSpec:
    """A golden trace as a catalog declares it: the factory's params and the steps,
    each (method, args). result "valid": the oracle accepts every step. "invalid":
    it refuses the steps numbered in `refused` (1-based) and accepts the others;
    with `refused` left out, it refuses the last step (or, with no steps, the
    params). Steps after a refused one show that the refusal changed nothing."""

    comment: str
    flags: tuple[str, ...]
    steps: tuple[tuple[str, Mapping[str, Any]], ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    result: str = "valid"
    refused: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Step:
    method: str
    args: Mapping[str, Any]
    observation: Any  # None for a refused step
    refused: bool = False


@dataclass(frozen=True)
class Trace:
    id: int
    comment: str
    flags: tuple[str, ...]
    result: str
    params: Mapping[str, Any]
    steps: tuple[Step, ...]


def _replay(op: StatefulOp, params: Mapping[str, Any], steps: Sequence[tuple[str, Mapping[str, Any]]],
            where: str) -> tuple[list[Any], list[int]]:
    """The oracle's observation of each step (None where it refuses the step) and the
    indices of the steps it refuses ([-1]: it refuses the params, and no step runs).
    A refusal must leave the oracle's snapshot as it was (else a defect: ValueError)."""
    try:
        model = op.oracle(**params)
    except REFUSALS:
        return [], [-1]
    observations: list[Any] = []
    refused: list[int] = []
    for i, (method, args) in enumerate(steps):
        if method not in op.methods:
            raise ValueError(f"{where}: step {i + 1} calls {method!r}, not one of the methods {op.methods}")
        if not isinstance(args, Mapping):
            raise ValueError(f"{where}: step {i + 1}'s args must be an object, got {type(args).__name__}")
        before = json.dumps(as_json(op.snapshot(model), "snapshot"), sort_keys=True)
        try:
            returned = getattr(model, method)(**copy.deepcopy(dict(args)))
        except REFUSALS:
            if json.dumps(as_json(op.snapshot(model), "snapshot"), sort_keys=True) != before:
                raise ValueError(f"{where}: the oracle refuses step {i + 1} ({method}) but its state changed: "
                                 f"a defect of the oracle (a refusal must change nothing)") from None
            observations.append(None)
            refused.append(i)
            continue
        observations.append(op.observe(method, returned))
    return observations, refused


def _refusal(refused: Sequence[int]) -> str:
    if not refused:
        return "nothing"
    if list(refused) == [-1]:
        return "the params"
    return f"step{'s' * (len(refused) > 1)} {', '.join(str(i + 1) for i in refused)}"


def _expected_refusals(spec: TraceSpec, where: str) -> list[int]:
    """The step indices (0-based; [-1] for the params) a spec says the oracle refuses."""
    if spec.refused is None:
        if spec.result == "valid":
            return []
        return [len(spec.steps) - 1] if spec.steps else [-1]
    if spec.result != "invalid":
        raise ValueError(f"{where}: refused steps {spec.refused} make the trace's result 'invalid', not {spec.result!r}")
    numbers = list(spec.refused)
    if not numbers or numbers != sorted(set(numbers)) or not all(
            isinstance(n, int) and 1 <= n <= len(spec.steps) for n in numbers):
        raise ValueError(f"{where}: refused must list step numbers 1..{len(spec.steps)} in increasing order, "
                         f"got {spec.refused!r}")
    return [n - 1 for n in numbers]


def build_traces(op: StatefulOp) -> list[Trace]:
    """Number the op's trace specs and record the oracle's observation of every step
    (a spec whose result disagrees with what the oracle does is an error)."""
    traces = []
    for i, spec in enumerate(op.vectors(), start=1):
        where = f"operation {op.name}: trace {i} ({spec.comment})"
        if spec.result not in TRACE_RESULTS:
            raise ValueError(f"{where}: result must be one of {TRACE_RESULTS}, got {spec.result!r}")
        expected = _expected_refusals(spec, where)
        params = as_json({**op.defaults, **spec.params}, f"{where}: params")
        steps = [(m, as_json(dict(a), f"{where}: args of {m}")) for m, a in spec.steps]
        observations, refused = _replay(op, params, steps, where)
        if refused != expected:
            raise ValueError(f"{where}: the trace says the oracle refuses {_refusal(expected)}; "
                             f"it refuses {_refusal(refused)}")
        stored = tuple(Step(m, a, observations[j] if j < len(observations) else None, j in refused)
                       for j, (m, a) in enumerate(steps))
        traces.append(Trace(i, spec.comment, tuple(spec.flags), spec.result, params, stored))
    return traces


def _variants(op: StatefulOp) -> dict[str, Any]:
    return {v.name: {"values": list(v.values), "default": v.default, "doc": v.doc, "latitude": v.latitude}
            for v in op.variants}


def trace_document(op: StatefulOp) -> dict[str, Any]:
    """The op's golden document (JSON-ready): schema, metadata, identifiers and traces."""
    traces = [{"id": t.id, "comment": t.comment, "flags": list(t.flags), "result": t.result,
               "params": dict(t.params),
               "steps": [{"method": s.method, "args": dict(s.args), "refused": s.refused,
                          "observation": s.observation} for s in t.steps]}
              for t in build_traces(op)]
    return {"schema": SCHEMA, "op": op.name, "kind": op.kind.value, "spec": op.spec, "summary": op.summary,
            "seed": op.seed, "variants": _variants(op), "identifiers": list(op.identifiers),
            "releases": list(op.releases), "traces": traces}


def traces_from_document(doc: Mapping[str, Any]) -> list[Trace]:
    """The traces of a stored document."""
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"golden: expected schema {SCHEMA!r}, got {doc.get('schema')!r}")
    return [Trace(t["id"], t["comment"], tuple(t["flags"]), t["result"], t["params"],
                  tuple(Step(s["method"], s["args"], s["observation"], s["refused"]) for s in t["steps"]))
            for t in doc["traces"]]


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality with types: True is not 1, 1 is not 1.0."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def check_trace_document(op: StatefulOp, doc: Mapping[str, Any]) -> list[str]:
    """Problems of a stored document: its metadata against the catalog's, and every
    step's observation recomputed by the oracle from the stored params and steps."""
    fresh = trace_document(op)
    problems = [f"{op.name}: field {k!r} differs from the catalog's" for k in fresh
                if k != "traces" and not _same_json(doc.get(k), fresh[k])]
    if problems and doc.get("schema") != SCHEMA:
        return problems
    for t in doc.get("traces", []):
        where = f"{op.name}: trace {t.get('id')} ({t.get('comment')})"
        try:
            steps = [(s["method"], s["args"]) for s in t["steps"]]
            observations, refused = _replay(op, t["params"], steps, where)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{where}: cannot be replayed ({type(exc).__name__}: {exc})")
            continue
        stored_refused = [j for j, s in enumerate(t["steps"]) if s.get("refused") is True]
        if refused == [-1]:
            if t["result"] != "invalid" or steps:
                problems.append(f"{where}: the oracle refuses the params of a trace stored as {t['result']!r} "
                                f"with {len(steps)} steps")
            continue
        if refused != stored_refused:
            problems.append(f"{where}: the oracle refuses {_refusal(refused)}; the trace stores "
                            f"{_refusal(stored_refused)} as refused")
        if t["result"] != ("invalid" if refused else "valid"):
            problems.append(f"{where}: the oracle refuses {_refusal(refused)} of a trace stored as {t['result']!r}")
        for j, (s, seen) in enumerate(zip(t["steps"], observations), start=1):
            if not isinstance(s.get("refused"), bool):
                problems.append(f"{where}: step {j} ({s['method']}) has no boolean 'refused'")
            elif not _same_json(s.get("observation"), seen):
                problems.append(f"{where}: step {j} ({s['method']}) stores observation "
                                f"{json.dumps(s.get('observation'))}, the oracle observes {json.dumps(seen)}")
    stored = list(doc.get("traces", []))
    if not any(p.startswith(f"{op.name}: trace") for p in problems) and not _same_json(stored, fresh["traces"]):
        changed = [t for i, t in enumerate(fresh["traces"]) if i >= len(stored) or not _same_json(t, stored[i])]
        problems.append(f"{op.name}: trace {changed[0]['id']} ({changed[0]['comment']}) differs from the generator's"
                        if changed else f"{op.name}: the document has traces the generator does not make")
    return problems


def load_traces(op_name: str, directory: Path) -> list[Trace] | None:
    """The stored traces of an op from a golden folder (its manifest lists the file
    and its sha256), or None when the folder has none for it."""
    manifest_path = Path(directory) / "manifest.json"
    if not manifest_path.is_file():
        return None
    manifest = json.loads(manifest_path.read_text())
    info = manifest.get("ops", {}).get(op_name)
    if not info or "json" not in info:
        return None
    path = Path(directory) / info["json"]
    data = path.read_bytes() if path.is_file() else b""
    if manifest.get("files", {}).get(info["json"]) != hashlib.sha256(data).hexdigest():
        raise ValueError(f"golden: {info['json']} does not match its sha256 in the manifest (edited by hand?)")
    return traces_from_document(json.loads(data))

"""What the conformance runner reports: skip/xfail entries, failures, per-op results
and the whole report (a table, failure details, strict JSON).

Verdicts per op: pass, fail, acceptable-difference (only latitude the spec allows
differs), xfail (failed, and listed as expected to), skipped, not covered (the
implementation does not provide the op).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

__all__ = ["Entry", "Failure", "IMPLEMENTATION_LIBRARIES", "OpReport", "RATIO_EDGES", "Report", "SCHEMA", "VERDICTS",
           "empty_histogram", "parse_entries", "strict_json", "version_holds", "versions"]

VERDICTS = ("pass", "fail", "acceptable-difference", "xfail", "skipped", "not covered")
SCHEMA = "llm-ref-report/1"
RATIO_EDGES = (0, 1 / 64, 1 / 16, 1 / 4, 1 / 2, 1, 2, 4, 16, "inf")
# libraries an implementation may have brought in, reported when imported by the end of the run
IMPLEMENTATION_LIBRARIES = ("torch", "torchao", "transformers", "jax", "cupy", "triton")


@dataclass(frozen=True)
class Entry:
    """A skip or xfail line: an op glob, optionally '/part' (a vector id, a vector flag,
    'exhaustive', 'large', 'properties' or '*'), an optional version condition `when`
    (`ml-dtypes<0.7`: the entry holds only while it does), and a mandatory reason."""

    op: str
    part: str
    reason: str
    when: str = ""

    def matches(self, op: str, part: str, flags: Sequence[str] = ()) -> bool:
        return fnmatchcase(op, self.op) and (self.part in ("*", part) or self.part in flags)


def parse_entries(text: str, *, source: str = "entries", inactive: bool = False) -> list[Entry]:
    """Parse a skips/xfails file: `target [condition] reason...` per line, '#' comments.
    A condition in brackets after the target, `[dist<2.1]` or `[dist>=0.5,<0.7]`, keeps
    the entry only while the installed distribution's version satisfies every clause
    (an engine fixes its bug in a later release; an uninstalled distribution satisfies
    nothing). `inactive=True` keeps the entries whose condition fails too (to check names)."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        target, _, reason = line.partition(" ")
        reason, when = reason.strip(), ""
        if reason.startswith("["):
            when, _, reason = reason[1:].partition("]")
            when, reason = when.strip(), reason.strip()
        if not reason:
            raise ValueError(f"{source}:{lineno}: every entry needs a reason after the target, got {line!r}")
        try:
            holds = version_holds(when) if when else True
        except ValueError as e:
            raise ValueError(f"{source}:{lineno}: {e}") from None
        op, _, part = target.partition("/")
        if holds or inactive:
            entries.append(Entry(op, part or "*", reason, when))
    return entries


_CONDITION = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*((?:(?:<=|>=|==|!=|<|>)\s*[0-9][0-9A-Za-z.+]*\s*,?\s*)+)$")


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string ('2.13.0+cpu' -> (2, 13, 0))."""
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def version_holds(condition: str) -> bool:
    """Whether the installed distribution satisfies `dist OP version[, OP version...]`
    (OP one of < <= > >= == !=; release numbers compared numerically, pre-release and
    local tags ignored). False when the distribution is not installed."""
    from importlib import metadata

    m = _CONDITION.match(condition)
    if m is None:
        raise ValueError(f"version condition {condition!r} is not 'dist OP version[, OP version]' "
                         "(OP one of <, <=, >, >=, ==, !=), e.g. 'ml-dtypes<0.7'")
    try:
        installed = _release(metadata.version(m.group(1)))
    except metadata.PackageNotFoundError:
        return False
    tests = {"<": tuple.__lt__, "<=": tuple.__le__, ">": tuple.__gt__, ">=": tuple.__ge__,
             "==": tuple.__eq__, "!=": tuple.__ne__}
    for op, bound in re.findall(r"(<=|>=|==|!=|<|>)\s*([0-9][0-9A-Za-z.+]*)", m.group(2)):
        wanted = _release(bound)
        width = max(len(installed), len(wanted))
        if not tests[op](installed + (0,) * (width - len(installed)), wanted + (0,) * (width - len(wanted))):
            return False
    return True


@dataclass
class Failure:
    """One failed check, structured: where (`vector 5`, `exhaustive case 3`,
    `property`, `trace 2`, `op`), the vector's comment (or the example), flags and
    params, a one-line `detail`, and, where an output was compared, the first
    mismatching `index`, the `inputs` behind it (name -> text), `expected` and `got`
    (values as text) with their bits. The runner adds `op`, `spec` and `flag_text`."""

    where: str
    comment: str
    flags: tuple[str, ...]
    params: dict[str, Any]
    detail: str
    vector: int | None = None
    index: list[int] | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    expected: str | None = None
    got: str | None = None
    expected_bits: str | None = None
    got_bits: str | None = None
    flag_text: dict[str, str] = field(default_factory=dict)
    spec: str = ""
    op: str = ""
    precision: str = ""  # a bounded op's: the precision this case was judged at
    hint: str = ""  # a remedy the evidence suggests (declare another PRECISION, say)
    fits: dict[str, float] = field(default_factory=dict)  # coarser precision -> error / its bound, where <= 1

    def describe(self, *, context: bool = True) -> str:
        """The failure for a kernel engineer, one fact a line: the op (with `context`),
        where, flags and comment, the params; then the inputs, expected vs got with
        bits, the detail, the precision and hint, each flag's bug, the spec section."""
        flags = f" [{', '.join(self.flags)}]" if self.flags else ""
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        op = f"{self.op} " if context and self.op else ""
        lines = [f"{op}{self.where}{flags}: {self.comment}" + (f" ({params})" if params else "")]
        for name, text in self.inputs.items():
            lines.append(f"input {text}" if text.startswith((f"{name}[", f"{name} ")) else f"input {name}: {text}")
        if self.expected is not None or self.got is not None:
            at = f"first at index {tuple(self.index)}: " if self.index is not None else ""
            bits = f" (bits {self.expected_bits} vs {self.got_bits})" if self.expected_bits is not None else ""
            lines.append(f"{at}expected {self.expected}, got {self.got}{bits}")
        lines.append(self.detail)
        if self.precision:
            lines.append(f"judged at {self.precision}")
        if self.hint:
            lines.append(self.hint)
            if self.flag_text:  # the flags name what the case targets, not what the hint found
                lines.append("(the flags below name what this case targets; the cause may be the above alone)")
        lines += [f"{flag}: catches {text}" for flag, text in self.flag_text.items()]
        if context and self.spec:
            lines.append(f"spec: {self.spec}")
        return "\n      ".join(lines)


@dataclass
class OpReport:
    op: str
    kind: str
    spec: str
    verdict: str = "pass"
    vectors_run: int = 0
    vectors_passed: int = 0
    vectors_skipped: int = 0
    examples: int = 0
    exhaustive_cases: int = 0
    worst: float = 0.0
    tolerance: float = 0.0
    unit: str = ""
    unsupported: int = 0  # cases the implementation declined with NotImplementedError
    compared: int = 0  # outputs compared with the oracle's
    failures: list[Failure] = field(default_factory=list)
    xfailed: list[Failure] = field(default_factory=list)
    acceptable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    precision: str = ""  # bounded ops: the precision(s) judged at, comma-separated
    # bounded ops: {"edges": RATIO_EDGES, "counts": [...]} of error / bound over compared outputs
    ratio_histogram: dict[str, list] | None = None
    classes: dict[str, dict[str, int]] | None = None  # array ops: flag -> {"cases", "failed"}

    def count_ratio(self, value: float) -> None:
        """Count one compared output's error / bound in `ratio_histogram` (bin i holds
        edges[i] <= value < edges[i+1]; an infinite ratio falls in the last bin)."""
        if self.ratio_histogram is None:
            self.ratio_histogram = empty_histogram()
        if math.isnan(value):
            return
        finite = [e for e in RATIO_EDGES if e != "inf"]
        i = sum(value >= e for e in finite) - 1
        self.ratio_histogram["counts"][max(i, 0)] += 1


def empty_histogram() -> dict[str, list]:
    """A ratio histogram with no output counted."""
    return {"edges": list(RATIO_EDGES), "counts": [0] * (len(RATIO_EDGES) - 1)}


@dataclass
class Report:
    implementation: dict[str, str]
    ops: list[OpReport]
    meta: dict[str, Any]
    complete: bool = True  # False while ops remain, or when the run was interrupted

    @property
    def ok(self) -> bool:
        return self.complete and all(r.verdict != "fail" for r in self.ops)

    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.ops) for v in VERDICTS if any(r.verdict == v for r in self.ops)}

    @property
    def judged(self) -> int:
        """The number of ops actually judged (verdict neither "not covered" nor "skipped")."""
        return sum(r.verdict not in ("not covered", "skipped") for r in self.ops)

    def to_dict(self) -> dict[str, Any]:
        """The report document (spec/report.schema.json), before strict JSON encoding."""
        return {"schema": SCHEMA, **self.meta, "versions": self.meta.get("versions") or versions(),
                "implementation": self.implementation, "summary": self.counts(), "ok": self.ok,
                "complete": self.complete, "judged": self.judged, "ops": [asdict(r) for r in self.ops]}

    def to_json(self) -> str:
        """Strict JSON (RFC 8259): a non-finite number is written as the string
        "inf", "-inf" or "nan", never as the bare Infinity/NaN strict parsers reject."""
        return strict_json(self.to_dict())

    def table(self, *, show_uncovered: bool = False) -> str:
        """One row per op; ops the implementation does not provide are summed up in a
        line after the table unless `show_uncovered`."""
        rows = [("op", "kind", "vectors", "cases", "worst/tol", "precision", "verdict")]
        hidden = 0
        for r in self.ops:
            if r.verdict == "not covered" and not show_uncovered:
                hidden += 1
                continue
            vec = f"{r.vectors_passed}/{r.vectors_run}" + (f" ({r.vectors_skipped} skip)" if r.vectors_skipped else "")
            worst = "-" if r.verdict in ("not covered", "skipped") else f"{r.worst:g}/{r.tolerance:g}"
            rows.append((r.op, r.kind, vec, str(r.examples + r.exhaustive_cases), worst, r.precision or "-",
                         r.verdict))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        if hidden:
            lines.append(f"{hidden} ops not covered by {self.implementation.get('name') or 'the implementation'} "
                         f"(--show-uncovered lists them)")
        return "\n".join(lines)

    def details(self, limit: int = 5, flag_notes: Mapping[str, Any] | None = None,
                written: str | None = None, verbose: bool = False) -> str:
        """Failures (at most `limit` per op), notes, acceptable differences, xfails;
        with `flag_notes` (flag -> Flag), the bug class of each failing flag without its
        text once per op; `written`: the path of the JSON report, named where failures
        are left out (nothing points at a report that was not written)."""
        out = []
        for r in self.ops:
            if r.failures:
                out.append(f"FAIL {r.op} ({r.spec})" + (f", judged at {r.precision}" if r.precision else ""))
                out += ["  " + f.describe(context=False) for f in r.failures[:limit]]
                if len(r.failures) > limit:
                    more = len(r.failures) - limit
                    out.append(f"  ... {more} more failure{'s' * (more != 1)} "
                               + (f"in {written}" if written else "(a JSON or HTML report lists every one)"))
                out += _flag_lines([f for f in r.failures[:limit] if not f.flag_text], flag_notes or {})
            # a passing op's notes (how a statistical op was tested, why vectors were skipped:
            # the table counts them) only when asked, except cases declined: always said
            for note in r.notes:
                if verbose or r.verdict != "pass" or note.startswith("not judged: "):
                    out.append(f"NOTE {r.op}: {note}")
            if r.acceptable:
                out.append(f"ACCEPTABLE {r.op}: " + "; ".join(sorted(set(r.acceptable))[:limit]))
            if r.xfailed:
                reasons = sorted({e["reason"] for e in self.meta.get("xfails", ()) if fnmatchcase(r.op, e["op"])})
                out.append(f"XFAIL {r.op}: " + "; ".join(sorted({f.where for f in r.xfailed})[:limit])
                           + (f" (expected: {'; '.join(reasons[:limit])})" if reasons else ""))
        if not self.complete:
            out.append(f"INCOMPLETE: {self.meta.get('interrupted', 'the run stopped before every op ran')}")
        return "\n".join(out)


def _flag_lines(failures: Sequence[Failure], notes: Mapping[str, Any]) -> list[str]:
    seen = dict.fromkeys(flag for f in failures for flag in f.flags if flag in notes)
    return [f"  {flag}: catches {notes[flag].bug}" for flag in seen]


def versions() -> dict[str, str]:
    """The versions that shaped a run: Python, NumPy, ml_dtypes, hypothesis, and each
    implementation library (IMPLEMENTATION_LIBRARIES) already imported."""
    import platform
    import sys

    found = {"python": platform.python_version(), "numpy": np.__version__}
    for name in ("ml_dtypes", "hypothesis", *IMPLEMENTATION_LIBRARIES):
        module = sys.modules.get(name)
        if module is None and name in ("ml_dtypes", "hypothesis"):
            module = __import__(name)
        if module is not None:
            found[name] = str(getattr(module, "__version__", "unknown"))
    return found


def strict_json(doc: Any) -> str:
    """`doc` as strict JSON: NumPy scalars as numbers, non-finite floats as the strings
    "inf", "-inf", "nan"."""
    return json.dumps(_finite(doc), indent=1, allow_nan=False) + "\n"


def _finite(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)  # a parameter value of another type, e.g. a Path

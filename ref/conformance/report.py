"""What the conformance runner reports: skip/xfail entries, failures, per-op results
and the whole report (a table, failure details, strict JSON).

Verdicts per op: pass, fail, acceptable-difference (only latitude the spec allows
differs), xfail (failed, and listed as expected to), skipped, not covered (the
implementation does not provide the op).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

__all__ = ["Entry", "Failure", "OpReport", "Report", "VERDICTS", "parse_entries", "strict_json"]

VERDICTS = ("pass", "fail", "acceptable-difference", "xfail", "skipped", "not covered")


@dataclass(frozen=True)
class Entry:
    """A skip or xfail line: an op glob, optionally '/part' (a vector id, a vector flag,
    'exhaustive', 'large', 'properties' or '*'), and a mandatory reason."""

    op: str
    part: str
    reason: str

    def matches(self, op: str, part: str, flags: Sequence[str] = ()) -> bool:
        return fnmatchcase(op, self.op) and (self.part in ("*", part) or self.part in flags)


def parse_entries(text: str, *, source: str = "entries") -> list[Entry]:
    """Parse a skips/xfails file: `target reason...` per line, '#' comments."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        target, _, reason = line.partition(" ")
        if not reason.strip():
            raise ValueError(f"{source}:{lineno}: every entry needs a reason after the target, got {line!r}")
        op, _, part = target.partition("/")
        entries.append(Entry(op, part or "*", reason.strip()))
    return entries


@dataclass
class Failure:
    where: str
    comment: str
    flags: tuple[str, ...]
    params: dict[str, Any]
    detail: str

    def describe(self) -> str:
        flags = f" [{', '.join(self.flags)}]" if self.flags else ""
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        head = f"{self.where}{flags}: {self.comment}" + (f" ({params})" if params else "")
        return f"{head}\n      {self.detail}"


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

    def to_json(self) -> str:
        """Strict JSON (RFC 8259): a non-finite number is written as the string
        "inf", "-inf" or "nan", never as the bare Infinity/NaN strict parsers reject."""
        doc = {**self.meta, "implementation": self.implementation, "summary": self.counts(), "ok": self.ok,
               "complete": self.complete, "ops": [asdict(r) for r in self.ops]}
        return strict_json(doc)

    def table(self) -> str:
        rows = [("op", "kind", "vectors", "examples", "worst/tol", "verdict")]
        for r in self.ops:
            vec = f"{r.vectors_passed}/{r.vectors_run}" + (f" ({r.vectors_skipped} skip)" if r.vectors_skipped else "")
            worst = "-" if r.verdict in ("not covered", "skipped") else f"{r.worst:g}/{r.tolerance:g}"
            rows.append((r.op, r.kind, vec, str(r.examples + r.exhaustive_cases), worst, r.verdict))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines)

    def details(self, limit: int = 5, flag_notes: Mapping[str, Any] | None = None) -> str:
        """Failures (at most `limit` per op), notes, acceptable differences, xfails;
        with `flag_notes` (flag -> Flag), the bug class of each failing flag once per op."""
        out = []
        for r in self.ops:
            if r.failures:
                out.append(f"FAIL {r.op} ({r.spec})")
                out += ["  " + f.describe() for f in r.failures[:limit]]
                if len(r.failures) > limit:
                    out.append(f"  ... {len(r.failures) - limit} more failures in the JSON report")
                out += _flag_lines(r.failures[:limit], flag_notes or {})
            for note in r.notes:
                out.append(f"NOTE {r.op}: {note}")
            if r.acceptable:
                out.append(f"ACCEPTABLE {r.op}: " + "; ".join(sorted(set(r.acceptable))[:limit]))
            if r.xfailed:
                out.append(f"XFAIL {r.op}: " + "; ".join(sorted({f.where for f in r.xfailed})[:limit]))
        if not self.complete:
            out.append(f"INCOMPLETE: {self.meta.get('interrupted', 'the run stopped before every op ran')}")
        return "\n".join(out)


def _flag_lines(failures: Sequence[Failure], notes: Mapping[str, Any]) -> list[str]:
    seen = dict.fromkeys(flag for f in failures for flag in f.flags if flag in notes)
    return [f"  {flag}: catches {notes[flag].bug}" for flag in seen]


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

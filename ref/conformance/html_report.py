"""The conformance report as one self-contained HTML page: inline CSS and inline SVG,
no script, nothing fetched, no dependency beyond the standard library.

`render(doc)` takes the JSON report document (what `Report.to_json()` writes, parsed)
and returns the page: a header (implementation, versions, verdict counts, ok), a table
of ops (the ops not covered folded into one line), and per judged op the distribution
of its error as a fraction of the bound (bounded ops: a bar per bin of
`ratio_histogram`, the bound at 1 marked), its cases and failures by input class
(`classes`), its failures (vector, comment, inputs, expected and got with their bits,
the precision and its hint, flags with their bug text, spec section) and its
expected failures with their reasons (the failure's `reason`, else the report's
`xfails` entries).
Fields an older report lacks are left out of the page, never an error. Every text
taken from the document is escaped: comments, reasons and names are the user's.
`write(doc, path)` writes the page.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

__all__ = ["load", "render", "write"]

VERDICT_COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "acceptable-difference": "#1b7c83", "xfail": "#9a6700",
                   "skipped": "#6e7781", "not covered": "#8c959f"}
SECTION_ORDER = {"fail": 0, "xfail": 1, "acceptable-difference": 2, "pass": 3}  # failing ops first
FAILURES_SHOWN = 20  # per op; the rest fold into a <details>

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1150px;padding:16px 24px;
color:#1f2328;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:16px;margin:24px 0 6px;word-break:break-all}h4{font-size:14px;margin:14px 0 4px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.chip{display:inline-block;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;font-weight:600;
white-space:nowrap}.flag{display:inline-block;border:1px solid #d0d7de;border-radius:4px;padding:0 5px;
font-family:ui-monospace,monospace;font-size:12px;background:#f6f8fa}
.ok{font-size:16px;padding:2px 12px}pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
pre{background:#f6f8fa;padding:6px 8px;margin:2px 0;white-space:pre-wrap;word-break:break-all}
.failure{border-left:4px solid #cf222e;padding:2px 10px;margin:10px 0}.xfail{border-left-color:#9a6700}
.muted{color:#656d76}.hint{background:#fff8c5;padding:4px 8px}
.svgbox{margin:6px 0}dl{margin:4px 0}dt{font-weight:600}dd{margin:0 0 4px 16px}
"""


def load(path: str | Path) -> dict[str, Any]:
    """A JSON report file, parsed strictly (a bare NaN or Infinity is refused), that
    says it is one (its `schema`)."""
    def refuse(token: str):
        raise ValueError(f"{path}: not a strict JSON report: bare {token}")

    doc = json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=refuse)
    if not (isinstance(doc, dict) and str(doc.get("schema", "")).startswith("llm-ref-report/")
            and isinstance(doc.get("ops"), list)):
        raise ValueError(f"{path}: not an llm-ref report (expected a JSON object with \"schema\": "
                         f"\"llm-ref-report/1\" and a list of \"ops\", as `conform --report` writes)")
    return doc


def write(doc: Mapping[str, Any], path: str | Path, *, flag_notes: Mapping[str, str] | None = None) -> Path:
    """Render `doc` into the file `path` (UTF-8); returns the path."""
    target = Path(path)
    target.write_text(render(doc, flag_notes=flag_notes), encoding="utf-8")
    return target


def render(doc: Mapping[str, Any], *, flag_notes: Mapping[str, str] | None = None) -> str:
    """The report document `doc` as a self-contained HTML page; `flag_notes` (flag ->
    the bug it catches) explains the flags a failure's own `flag_text` does not."""
    if not isinstance(doc, Mapping):
        raise TypeError(f"doc: expected the JSON report as a dict, got {type(doc).__name__}")
    ops = [op for op in doc.get("ops") or [] if isinstance(op, Mapping)]
    impl = doc.get("implementation") or {}
    title = f"llm-ref conformance: {impl.get('name', 'implementation')}"
    flag_texts = dict(flag_notes or {})
    for failure in (f for op in ops for f in _all_failures(op)):
        flag_texts.update(dict(failure.get("flag_text") or {}))
    judged = sorted((op for op in ops if op.get("verdict") not in ("not covered", "skipped")),
                    key=lambda op: SECTION_ORDER.get(op.get("verdict"), len(SECTION_ORDER)))
    body = [_header(doc, ops), "<h2>Operations</h2>", _op_table(ops, impl.get("name", "the implementation"))]
    if judged:
        body.append("<h2>Judged operations</h2><p class=\"muted\">failing ops first, then in the table's order</p>")
        body += [_op_section(op, flag_texts, doc.get("xfails") or []) for op in judged]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _all_failures(op: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [f for f in list(op.get("failures") or []) + list(op.get("xfailed") or []) if isinstance(f, Mapping)]


def _chip(verdict: str) -> str:
    colour = VERDICT_COLOURS.get(verdict, "#6e7781")
    return f'<span class="chip" style="background:{colour}">{_e(verdict)}</span>'


def _num(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _header(doc: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> str:
    impl = doc.get("implementation") or {}
    suite = doc.get("suite") or {}
    complete = doc.get("complete", True)
    ok = doc.get("ok")
    if not complete:
        badge = ("#9a6700", "INCOMPLETE")
    else:
        badge = ("#1a7f37", "OK") if ok else ("#cf222e", "NOT OK") if ok is not None else ("#6e7781", "no verdict")
    out = [f"<h1>llm-ref conformance report {_e(suite.get('version', ''))}</h1>",
           f'<p><span class="chip ok" style="background:{badge[0]}">{badge[1]}</span> '
           f"<b>{_e(impl.get('name', '?'))}</b> {_e(impl.get('version', ''))}"
           + (f' <span class="muted">({_e(impl["source"])})</span>' if impl.get("source") else "") + "</p>"]
    summary = doc.get("summary")
    if not isinstance(summary, Mapping) or not summary:
        summary = {}
        for op in ops:
            summary[op.get("verdict", "?")] = summary.get(op.get("verdict", "?"), 0) + 1
    judged = f"; {_e(doc['judged'])} judged" if "judged" in doc else ""
    chips = " ".join(f"{_chip(v)}&nbsp;{_e(n)}" for v, n in summary.items())
    out.append(f"<p>{len(ops)} ops: {chips}{judged}</p>")
    if not complete and doc.get("interrupted"):
        out.append(f"<p><b>Interrupted:</b> {_e(doc['interrupted'])}</p>")
    facts = [("schema", doc.get("schema")), ("created", doc.get("created")), ("golden", _inline(doc.get("golden"))),
             ("versions", _inline(doc.get("versions") or doc.get("platform"))),
             ("settings", _inline(doc.get("settings")))]
    out.append("<table>" + "".join(f"<tr><th>{k}</th><td>{_e(v)}</td></tr>" for k, v in facts if v) + "</table>")
    return "\n".join(out)


def _inline(mapping: Any) -> str:
    if not isinstance(mapping, Mapping):
        return "" if mapping is None else str(mapping)
    return ", ".join(f"{k} {_flat(v)}" for k, v in mapping.items())


def _flat(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _op_table(ops: Sequence[Mapping[str, Any]], impl_name: str) -> str:
    rows = ["<table><tr><th>op</th><th>kind</th><th>verdict</th><th>failures</th><th>vectors passed</th>"
            "<th>cases</th><th>worst / tolerance</th><th>precision</th></tr>"]
    uncovered = [op.get("op", "?") for op in ops if op.get("verdict") == "not covered"]
    for op in ops:
        verdict = op.get("verdict", "?")
        if verdict == "not covered":
            continue
        name = op.get("op", "?")
        judged = verdict != "skipped"
        cell = f'<a href="#{_e(_anchor(name))}">{_e(name)}</a>' if judged else _e(name) + "".join(
            f'<div class="muted">{_e(note)}</div>' for note in op.get("notes") or [])
        failures = str(len(op.get("failures") or [])) + (f" (+{len(op['xfailed'])} xfail)" if op.get("xfailed") else "")
        vectors = f"{_num(op.get('vectors_passed', 0))}/{_num(op.get('vectors_run', 0))}"
        if op.get("vectors_skipped"):
            vectors += f" ({_num(op['vectors_skipped'])} skipped)"
        cases = _int(op.get("examples")) + _int(op.get("exhaustive_cases"))
        worst = f"{_num(op.get('worst'))} / {_num(op.get('tolerance'))} {op.get('unit', '')}" if judged else "-"
        rows.append(f"<tr><td>{cell}</td><td>{_e(op.get('kind', ''))}</td><td>{_chip(verdict)}</td>"
                    f'<td class="num">{_e(failures if judged else "-")}</td><td class="num">{_e(vectors)}</td>'
                    f'<td class="num">{_e(cases)}</td>'
                    f"<td>{_e(worst)}</td><td>{_e(op.get('precision') or '')}</td></tr>")
    if uncovered:
        rows.append(f'<tr><td colspan="8"><details><summary>{len(uncovered)} ops not covered by {_e(impl_name)}'
                    f"</summary><code>{_e(', '.join(uncovered))}</code></details></td></tr>")
    return "\n".join(rows) + "</table>"


def _int(value: Any) -> int:
    """A count from the document; 0 for one missing or unreadable."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _anchor(name: str) -> str:
    return "op-" + "".join(c if c.isalnum() or c in "._-" else "-" for c in name)


def _op_section(op: Mapping[str, Any], flag_texts: Mapping[str, str], xfail_entries: Sequence[Any]) -> str:
    name = op.get("op", "?")
    out = [f'<section id="{_e(_anchor(name))}"><h3>{_e(name)} {_chip(op.get("verdict", "?"))}</h3>',
           f'<p class="muted">{_e(op.get("kind", ""))} op, spec <code>{_e(op.get("spec", ""))}</code>; '
           f"vectors {_e(op.get('vectors_passed', 0))}/{_e(op.get('vectors_run', 0))} passed, "
           f"{_e(op.get('examples', 0))} random examples, {_e(op.get('exhaustive_cases', 0))} exhaustive cases; "
           f"worst {_e(_num(op.get('worst')))} / {_e(_num(op.get('tolerance')))} {_e(op.get('unit', ''))}"
           + (f"; judged at <b>{_e(op['precision'])}</b>" if op.get("precision") else "") + "</p>"]
    histogram = op.get("ratio_histogram")
    if isinstance(histogram, Mapping):
        out.append("<h4>Error as a fraction of the bound</h4>" + _histogram(histogram))
    classes = op.get("classes")
    if isinstance(classes, Mapping) and classes:
        out.append("<h4>Cases by input class</h4>" + _class_table(classes, flag_texts))
    failures = [f for f in op.get("failures") or [] if isinstance(f, Mapping)]
    if failures:
        out.append(f"<h4>Failures ({len(failures)})</h4>")
        out += [_failure(f, flag_texts) for f in failures[:FAILURES_SHOWN]]
        if len(failures) > FAILURES_SHOWN:
            out.append(f"<details><summary>{len(failures) - FAILURES_SHOWN} more failures</summary>"
                       + "".join(_failure(f, flag_texts) for f in failures[FAILURES_SHOWN:]) + "</details>")
    xfailed = [f for f in op.get("xfailed") or [] if isinstance(f, Mapping)]
    if xfailed:
        out.append(f"<h4>Expected failures ({len(xfailed)})</h4>")
        out += [_failure(f, flag_texts, reason=_reason(f, name, xfail_entries)) for f in xfailed]
    for title, items in (("Acceptable differences", op.get("acceptable")), ("Notes", op.get("notes"))):
        if items:  # an acceptable difference repeats per layout and example: each once
            listed = "<ul>" + "".join(f"<li>{_e(i)}</li>" for i in dict.fromkeys(map(str, items))) + "</ul>"
            out.append(f"<h4>{title}</h4>" + (listed if len(items) <= FAILURES_SHOWN else
                                                f"<details><summary>{len(items)} lines</summary>{listed}</details>"))
    return "\n".join(out) + "</section>"


def _histogram(histogram: Mapping[str, Any], *, width: int = 560, height: int = 170) -> str:
    """An SVG bar chart of `{"edges": [...], "counts": [...]}`: a bar per bin, its height
    proportional to its count (1 px at least for a count above 0), bins at or past
    the bound red, the bound (edge 1) a dashed line."""
    edges, counts = list(histogram.get("edges") or []), list(histogram.get("counts") or [])
    if len(edges) != len(counts) + 1 or not counts or not all(isinstance(c, int) for c in counts):
        return (f'<p class="muted">ratio_histogram unreadable: {len(edges)} edges for {len(counts)} counts '
                "(expected one edge more than counts, and integer counts)</p>")
    top, left, label_h = 18, 8, 30
    plot_h = height - top - label_h
    step = (width - 2 * left) / len(counts)
    most = max(max(int(c) for c in counts), 1)
    parts = [f'<svg class="svgbox" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="error as a fraction of the bound, {sum(int(c) for c in counts)} outputs">']
    for i, count in enumerate(counts):
        count = int(count)
        h = 0.0 if count == 0 else max(1.0, plot_h * count / most)
        x = left + i * step
        colour = "#cf222e" if _edge(edges[i]) >= 1 else "#2f81f7"
        parts.append(f'<rect class="bar" data-count="{count}" x="{x + 2:.1f}" y="{top + plot_h - h:.2f}" '
                     f'width="{step - 4:.1f}" height="{h:.2f}" fill="{colour}"><title>'
                     f"{_e(_edge_text(edges[i]))} to {_e(_edge_text(edges[i + 1]))}: {count}</title></rect>")
        parts.append(f'<text x="{x + step / 2:.1f}" y="{top + plot_h - h - 3:.2f}" font-size="11" '
                     f'text-anchor="middle">{count}</text>')
    for i, edge in enumerate(edges):
        x = left + i * step
        parts.append(f'<text x="{x:.1f}" y="{height - 14}" font-size="10" text-anchor="middle">'
                     f"{_e(_edge_text(edge))}</text>")
        if _edge(edge) == 1:
            parts.append(f'<line class="bound" x1="{x:.1f}" y1="{top - 12}" x2="{x:.1f}" y2="{top + plot_h}" '
                         f'stroke="#1f2328" stroke-dasharray="4 3"></line><text x="{x + 3:.1f}" y="{top - 4}" '
                         'font-size="11">bound</text>')
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{width - left}" y2="{top + plot_h}" '
                 'stroke="#8c959f"></line>')
    parts.append(f'<text x="{width / 2:.0f}" y="{height - 2}" font-size="10" text-anchor="middle">'
                 "error / bound</text></svg>")
    return "".join(parts)


def _edge(edge: Any) -> float:
    try:
        return float(edge)
    except (TypeError, ValueError):
        return math.nan


def _edge_text(edge: Any) -> str:
    value = _edge(edge)
    if math.isinf(value):
        return "∞"
    if 0 < value < 1 and (1 / value).is_integer():
        return f"1/{int(1 / value)}"
    return f"{value:g}" if not math.isnan(value) else str(edge)


def _class_table(classes: Mapping[str, Any], flag_texts: Mapping[str, str]) -> str:
    rows = []
    for name, counts in classes.items():
        counts = counts if isinstance(counts, Mapping) else {}
        rows.append((str(name), _int(counts.get("cases")), _int(counts.get("failed"))))
    rows.sort(key=lambda r: (-r[2], r[0] == "unflagged", r[0]))
    out = ["<table><tr><th>class</th><th>cases</th><th>failed</th><th>failed share</th><th>catches</th></tr>"]
    for name, cases, failed in rows:
        share = failed / cases if cases else 0.0
        bar = (f'<svg xmlns="http://www.w3.org/2000/svg" width="160" height="12" role="img" '
               f'aria-label="{failed} of {cases} failed"><rect x="0" y="0" width="160" height="12" fill="#dafbe1">'
               f'</rect><rect class="failed" data-failed="{failed}" data-cases="{cases}" x="0" y="0" '
               f'width="{160 * share:.2f}" height="12" fill="#cf222e"></rect></svg>')
        out.append(f'<tr><td><span class="flag">{_e(name)}</span></td><td class="num">{cases}</td>'
                   f'<td class="num">{failed}</td><td>{bar} {share:.0%}</td>'
                   f'<td>{_e(flag_texts.get(name, ""))}</td></tr>')
    return "\n".join(out) + "</table>"


def _failure(f: Mapping[str, Any], flag_texts: Mapping[str, str], *, reason: str | None = None) -> str:
    where = f.get("where", "")
    head = f"<b>{_e(where)}</b>" + (f": {_e(f['comment'])}" if f.get("comment") else "")
    out = [f'<div class="failure{" xfail" if reason is not None else ""}"><p>{head}</p>']
    if reason:
        out.append(f"<p><b>Reason listed:</b> {_e(reason)}</p>")
    if f.get("hint"):
        out.append(f'<p class="hint"><b>Hint:</b> {_e(f["hint"])}</p>')
    rows = []
    if f.get("params"):
        rows.append(("params", ", ".join(f"{k}={v}" for k, v in dict(f["params"]).items())))
    if f.get("index") is not None:
        index = [str(i) for i in f["index"]]
        rows.append(("first index", "(" + ", ".join(index) + ("," if len(index) == 1 else "") + ")"))
    for name, text in dict(f.get("inputs") or {}).items():
        rows.append((f"input {name}", text))
    for side in ("expected", "got"):
        if f.get(side) is not None:
            bits = f.get(f"{side}_bits")
            rows.append((side, f"{f[side]}" + (f"   bits {bits}" if bits else "")))
    if f.get("precision"):
        rows.append(("judged at", f["precision"]))
    fits = f.get("fits")
    if isinstance(fits, Mapping) and fits:
        rows.append(("error fits", "; ".join(f"the {p} bound ({_num(v)} of it)" for p, v in fits.items())))
    if rows:
        out.append("<table>" + "".join(f"<tr><th>{_e(k)}</th><td><pre>{_e(v)}</pre></td></tr>" for k, v in rows)
                   + "</table>")
    own = dict(f.get("flag_text") or {})
    flags = list(f.get("flags") or [])
    if flags:
        out.append("<dl>" + "".join(f'<dt><span class="flag">{_e(flag)}</span></dt>'
                                    f"<dd>{_e(own.get(flag) or flag_texts.get(flag, ''))}</dd>" for flag in flags)
                   + "</dl>")
    if f.get("detail"):
        out.append(f"<pre>{_e(f['detail'])}</pre>")
    if f.get("spec"):
        out.append(f'<p class="muted">spec <code>{_e(f["spec"])}</code></p>')
    return "\n".join(out) + "</div>"


def _reason(f: Mapping[str, Any], op: str, entries: Sequence[Any]) -> str:
    """The reason of the xfail entry that covers `f`: its own `reason` field, else the
    first of the report's `xfails` entries ({op, part, reason}) that names its check."""
    if f.get("reason"):
        return str(f["reason"])
    where = str(f.get("where", ""))
    word = where.split(" ", 1)[0]
    part = {"vector": where.rpartition(" ")[2], "exhaustive": "exhaustive", "large": "large",
            "property": "properties"}.get(word, "*")
    flags = list(f.get("flags") or [])
    for e in entries:
        if isinstance(e, Mapping) and fnmatchcase(op, str(e.get("op", ""))) and (
                e.get("part", "*") in ("*", part) or e.get("part") in flags):
            return str(e.get("reason", ""))
    return ""
